# SPDX-License-Identifier: Apache-2.0
"""The saver: saves written by a thread of their own after the step that asked for them has
returned, and the block fence that keeps the engine from writing a block a queued save still
reads.

An engine frees a finished or preempted request's blocks at once and may hand them to another
request in its next step, whose load or forward writes them. The scheduler side lists the blocks
each step hands out (``StepPlan.new_blocks``); before the step writes anything the worker calls
``fence`` with them, which waits for the saves still reading any of them. Engines reuse freed
blocks last, so the fence rarely waits.

Saves are written in the order they were queued: a chunk's parent may be an earlier step's
chunk. Only the thread that drives the worker calls ``queue``, ``fence``, ``drain`` and
``close``; the write function runs on the saver's thread."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Protocol

from tutti.serving.steps import SaveSpec

log = logging.getLogger(__name__)

# A request's chunks are written this many to a store call: the store runs one load or save at
# a time, and a step's load waits for the call in progress, not for a whole prompt.
SAVE_PIECE_CHUNKS = 16


class Ready(Protocol):
    """Marks the point after which the blocks of a save hold what the step wrote (with KV in
    GPU memory, an event recorded on the forward's stream)."""

    def synchronize(self) -> None: ...


class Saver:
    """One worker's saver thread and its block fence."""

    def __init__(self, write: Callable[[SaveSpec], None], fail: Callable[[SaveSpec], None],
                 blocks_per_chunk: int) -> None:
        self._write = write  # writes one piece and counts what happened to it
        self._fail = fail  # counts a piece that was not written as failed
        self.bpc = blocks_per_chunk
        self._pool: ThreadPoolExecutor | None = None  # started by the first save queued
        self._saves: deque[tuple[Future[None], list[int]]] = deque()  # queued, oldest first
        self._reading: dict[int, Future[None]] = {}  # block -> the latest queued save of it

    def queue(self, spec: SaveSpec, ready: Ready | None = None) -> None:
        """Queue ``spec``'s save, to be written once ``ready`` is (None: at once)."""
        job = self._executor().submit(self._run, spec, ready)
        self._saves.append((job, spec.block_ids))
        for b in spec.block_ids:
            self._reading[b] = job

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="tutti-save")
        return self._pool

    def _run(self, spec: SaveSpec, ready: Ready | None) -> None:
        """One queued save, on the saver thread. Nothing it raises may reach the engine (no
        step waits for it): what the write function does not cover is logged, and its chunks
        counted as failed saves."""
        todo = [spec]
        try:
            if ready is not None:
                ready.synchronize()
            todo = self.pieces(spec)
            while todo:
                self._write(todo[0])
                todo.pop(0)
        except Exception as e:  # noqa: BLE001 - logged and counted: the saver keeps serving
            log.exception("tutti: save of %s failed: %s", spec.req_id, e)
            for piece in todo:
                self._fail(piece)

    def pieces(self, spec: SaveSpec) -> list[SaveSpec]:
        """The save in pieces of SAVE_PIECE_CHUNKS chunks, in order: each piece's first chunk
        has the previous piece's last as its parent, stored by then."""
        n = len(spec.keys) - spec.first_chunk
        out = []
        for at in range(0, n, SAVE_PIECE_CHUNKS):
            end = min(at + SAVE_PIECE_CHUNKS, n)
            out.append(SaveSpec(spec.req_id, spec.keys[:spec.first_chunk + end],
                                spec.first_chunk + at,
                                spec.block_ids[at * self.bpc:end * self.bpc]))
        return out

    def fence(self, blocks: Iterable[int]) -> None:
        """Before a step writes anything: wait for the saves still reading one of ``blocks``
        (the blocks the step's schedule handed out)."""
        self._forget_written()
        waits = {self._reading[b] for b in blocks if b in self._reading}
        if waits:
            wait_futures(waits)
            self._forget_written()

    def _forget_written(self) -> None:
        """Drop the saves written (in order: the oldest first) from the blocks they read."""
        while self._saves and self._saves[0][0].done():
            job, blocks = self._saves.popleft()
            for b in blocks:
                if self._reading.get(b) is job:
                    del self._reading[b]

    def drain(self) -> None:
        """Wait until every queued save is written."""
        wait_futures([job for job, _ in self._saves])
        self._forget_written()

    def pending(self) -> int:
        """Saves queued and not written yet."""
        return sum(not job.done() for job, _ in self._saves)

    def close(self) -> None:
        """Write the queued saves, then stop the thread: what was served is found again after
        a restart."""
        if self._pool is None:
            return
        queued = self.pending()
        if queued:
            log.info("tutti: writing %d queued save(s) before closing the store", queued)
        self._pool.shutdown(wait=True)
        self._pool = None
        self._saves.clear()
        self._reading.clear()
