# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector's worker side: moves KV between vLLM's paged KV tensors and the store.

- ``register_kv_caches`` registers every layer's paged tensor with the library.
- Loads, in one of three modes: before the step's forward pass, all layers, every chunk checked
  against its checksum (the default); on a loader thread while the request waits and other
  requests compute, reported done through ``get_finished`` (``async_load``); or layer by layer
  behind the forward through the library's pipeline (``layerwise``, tutti/vllm/layerwise.py).
- Saves: ``wait_for_save`` takes the chunks the step completed, after its forward wrote them,
  and hands them to a saver thread that writes them in order (``async_save``, the default)
  while vLLM goes on with the next step. vLLM frees a finished or preempted request's blocks
  at once; before a later step may write a block a save still reads (the scheduler lists the
  blocks each step hands out), ``handle_preemptions`` waits for that save. Without
  ``async_save`` saves are written in ``wait_for_save``.
- A chunk that cannot be loaded (evicted, damaged, I/O error) is reported through
  ``get_block_ids_with_load_errors``: with ``kv_load_failure_policy="recompute"`` vLLM
  recomputes it, and no error reaches the user.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING

from tutti.remote import Remote
from tutti.store import KV, ChunkRequest
from tutti.vllm import ranks
from tutti.vllm.config import ConnectorContext
from tutti.vllm.data import LoadSpec, SaveSpec, TuttiConnectorMetadata
from tutti.vllm.layerwise import LayerwiseLoads
from tutti.vllm.log import log
from tutti.vllm.metrics import TuttiConnectorStats
from tutti.vllm.planner import Rates, StepClock
from tutti.vllm.stores import (
    RemoteKey,
    StoreKey,
    acquire_remote,
    acquire_store,
    release_remote,
    release_store,
)

if TYPE_CHECKING:
    import torch

WARN_INTERVAL_S = 60.0
# The saver writes a request's chunks this many to a store call: the store runs one load or
# save at a time, and a step's load waits for the call in progress, not for a whole prompt.
SAVE_PIECE_CHUNKS = 16


def dense_bytes(block: torch.Tensor) -> int | None:
    """The bytes of the one dense range a block's view covers, in whatever order its
    dimensions walk it; None where the view leaves gaps. A block is moved as its bytes: vLLM
    0.26's GPU runner hands FlashAttention's KV as a logical (heads, tokens, 2 x head size)
    view of (tokens, heads, 2 x head size) memory, dense but not a contiguous view."""
    expect = 1
    dims = zip(block.stride(), block.shape, strict=True)
    for stride, size in sorted((st, sz) for st, sz in dims if sz != 1):
        if stride != expect:
            return None
        expect *= size
    return expect * block.element_size()


def failed_load_hazard(ctx: ConnectorContext, kv_mem: str) -> str | None:
    """Why a load that fails inside a step may crash this vLLM (docs/vllm.md, "Known
    problems"), or None: GPU KV loaded inside the step (layer by layer, or before the forward),
    which only an explicit configuration chooses. vLLM 0.26 on the H200 crashed after
    recovering from a failed layerwise load, with and without its asynchronous scheduling
    (docs/results.md, V2 and V4): its model runner V2 does not rewind a recomputed request's
    GPU state (vLLM issue #49250), and asynchronous scheduling keeps the request's next step
    (#34484)."""
    if kv_mem != "cuda" or ctx.cfg.async_load:
        return None
    return ("loads into GPU KV inside the step (\"async_load\": false): a load that fails "
            "there (a damaged object, an I/O error) is likely to crash vLLM after it reports "
            "\"Recovered from KV load failure\" (vLLM issues #49250, #34484; docs/vllm.md, "
            "\"Known problems\"); the default, asynchronous loads, recomputes such a prefix "
            "instead")


class TuttiWorker:
    """The worker side of one connector (one per worker process, i.e. per rank)."""

    def __init__(self, ctx: ConnectorContext) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.geo = ctx.geo
        self.block_size = ctx.block_size
        self.bpc = ctx.blocks_per_chunk
        self.rank = ctx.rank
        self._store_key: StoreKey | None
        self._store_key, self.store = acquire_store(ctx.cfg, ctx.dirs, ctx.geo, ctx.ns)
        self._remote_key: RemoteKey | None
        self.remote: Remote | None
        self._remote_key, self.remote = acquire_remote(ctx)
        # The scheduler, in a process of its own, learns from these reports what the store
        # holds (tutti/vllm/ranks.py).
        self.reporter = (None if ctx.scheduler_opens_store
                         else ranks.StoreReporter(self.rank, self.store))
        # With several ranks, rank 0 alone counts tokens (each rank moves its share of the
        # same tokens); bytes, times and errors are counted by every rank.
        self._count_tokens = self.rank == 0
        self._remote_seen: dict[str, int] = {}  # the remote handle's counters already reported
        self.kv: KV | None = None
        self.kv_mem = "host"
        self.engine: str | None = None  # the engine that moves the KV, once registered
        self.layerwise: LayerwiseLoads | None = None
        # Loads may finish on the loader thread: what they report is kept under this lock.
        self._lock = threading.Lock()
        self._stats = TuttiConnectorStats()
        self._load_errors: set[int] = set()
        # What the scheduler weighs loads with (tutti/vllm/planner.py): this rank's loads
        # (under the lock) and forward passes, and the totals it last sent.
        self._rates = Rates()
        self._rates_sent = Rates()
        self.clock: StepClock | None = None  # once the KV is registered
        # asynchronous loads: one thread moves them; finished ids and their errors are handed
        # to vLLM together (errors no later than the step that reports the request done)
        self._loader: ThreadPoolExecutor | None = None
        self._loads_done: set[str] = set()
        # asynchronous saves (async_save): one thread writes them in the order the steps
        # queued them (a chunk's parent may be an earlier step's chunk). Only the thread that
        # calls the connector touches the two below.
        self._saver: ThreadPoolExecutor | None = None
        self._saves: deque[tuple[Future[None], list[int]]] = deque()  # queued, oldest first
        self._reading: dict[int, Future[None]] = {}  # block -> the latest queued save of it
        self._store_no_space = self.store.stats()["save_no_space"]  # the store's, last seen
        self._warned: dict[str, tuple[float, int]] = {}  # kind -> (last warned, skipped since)

    # -- registration --

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Each layer's paged tensor as segments: (B, ...) tensors are one segment per layer,
        K/V-first (2, B, ...) tensors two."""
        segs: list[tuple[int, int, int]] = []
        per_layer: int | None = None
        mem = "host"
        num_blocks = self.ctx.num_blocks
        if len(kv_caches) != self.geo.nr_layers:
            raise ValueError(f"TuttiConnector: {len(kv_caches)} KV tensors for "
                             f"{self.geo.nr_layers} layers")
        page = self.geo.layer_block_bytes
        for name, t in kv_caches.items():
            item = t.element_size()
            if t.shape[0] == num_blocks:
                layer = [(t.data_ptr(), t.stride(0) * item, page)]
            elif t.shape[0] == 2 and t.shape[1] == num_blocks:
                layer = [(t[i].data_ptr(), t.stride(1) * item, page // 2) for i in range(2)]
            else:
                raise ValueError(f"TuttiConnector: layer {name}: KV tensor of shape "
                                 f"{tuple(t.shape)} is neither (blocks, ...) nor (2, blocks, ...)"
                                 f" with {num_blocks} blocks")
            block = t[0] if len(layer) == 1 else t[0][0]
            if dense_bytes(block) != layer[0][2]:
                raise ValueError(f"TuttiConnector: layer {name}: a block of shape "
                                 f"{tuple(block.shape)} and strides {block.stride()} is not "
                                 "one dense page")
            if per_layer not in (None, len(layer)):
                raise ValueError("TuttiConnector: layers with different KV layouts")
            per_layer = len(layer)
            mem = "cuda" if t.is_cuda else "host"
            segs.extend(layer)
        assert per_layer is not None
        self.kv = KV(self.geo, segs, per_layer, num_blocks, mem=mem)
        self.kv_mem = mem
        self.clock = StepClock(gpu=mem == "cuda")
        hazard = failed_load_hazard(self.ctx, mem)
        if hazard is not None:
            log.warning("tutti: %s", hazard)
        # What "auto" chose for this KV; for GPU KV it sets gpu-uring up now, so that a
        # fallback and its reason are in the log at start-up.
        self.engine = self.store.engine_for(self.kv)
        log.info("tutti: registered %d layers, %d blocks of %d bytes (%s, %d segment%s/layer); "
                 "engine %s%s", self.geo.nr_layers, num_blocks, page, mem, per_layer,
                 "s" if per_layer > 1 else "", self.engine,
                 ", layerwise loads" if self.cfg.layerwise else
                 ", asynchronous loads" if self.cfg.async_load else "")
        if self.cfg.layerwise:
            self.layerwise = LayerwiseLoads(self.store, self.kv, list(kv_caches),
                                            self.ctx.layer_names, mem)

    # -- loads --

    def step_begins(self, meta: TuttiConnectorMetadata) -> None:
        """The step's metadata is bound, before its forward: time the forward where it
        computes without loading inside the step (a load there would be counted as compute)."""
        if self.clock is None:
            return
        in_step_loads = bool(meta.loads) and not self.cfg.async_load
        self.clock.begin(0 if in_step_loads else meta.compute_tokens)

    def start_load_kv(self, meta: TuttiConnectorMetadata) -> None:
        # Before this step's loads write into blocks handed out again (a runner that calls
        # handle_preemptions has waited already).
        self.handle_preemptions(meta)
        if self.reporter is not None and self.rank in meta.resync:
            self.reporter.request_full()
        if self.layerwise is not None and not self.layerwise.broken:
            self._start_layerwise(self.layerwise, meta)
            return
        for spec in meta.loads:
            if self.cfg.async_load:
                if self._loader is None:
                    self._loader = ThreadPoolExecutor(1, thread_name_prefix="tutti-load")
                self._loader.submit(self._load_async, spec)
            else:
                failed = self._load(spec)
                with self._lock:
                    self._load_errors.update(failed)

    def wait_for_layer_load(self, layer_name: str) -> None:
        # Without layerwise, loads complete in start_load_kv.
        if self.layerwise is not None:
            self.layerwise.wait(layer_name)

    def _chunk_blocks(self, spec: LoadSpec, index: int) -> list[int]:
        """Block ids of chunk ``spec.first_chunk + index`` within the spec's block list."""
        start = 0 if index == 0 else self.bpc - spec.skip_blocks + (index - 1) * self.bpc
        length = self.bpc - spec.skip_blocks if index == 0 else self.bpc
        return spec.block_ids[start:start + length]

    def _load(self, spec: LoadSpec) -> set[int]:
        """One request's load; returns the block ids that could not be loaded."""
        assert self.kv is not None
        t0 = time.perf_counter_ns()
        try:
            if spec.remote_from >= 0 and self.remote is not None:
                status = self._load_with_remote(self.remote, self.kv, spec)
            else:
                _, status = self.store.load(self.kv, [ChunkRequest(
                    spec.keys, spec.block_ids, spec.first_chunk, spec.skip_blocks)])
        except OSError as e:
            log.warning("tutti: load of %s failed: %s; vLLM recomputes it", spec.req_id, e)
            status = [-(e.errno or errno.EIO)] * (len(spec.keys) - spec.first_chunk)
        return self._account_load(spec, status, time.perf_counter_ns() - t0)

    def _account_load(self, spec: LoadSpec, status: list[int], ns: int,
                      read_bytes_per_s: float | None = None) -> set[int]:
        """Count one request's load (``status``: one entry per chunk, 0 or -errno); returns
        the block ids that could not be loaded. ``read_bytes_per_s``: the store's rate as the
        layerwise pipeline measured it, which the load plan takes instead of ``ns`` (0: none)."""
        failed: set[int] = set()
        loaded = 0
        with self._lock:
            self._stats.add("load_ns", ns)
            for i, rc in enumerate(status):
                blocks = self._chunk_blocks(spec, i)
                if rc != 0:
                    failed.update(blocks)
                    self._stats.add("load_errors", 1)
                else:
                    if self._count_tokens:
                        self._stats.add("load_tokens", len(blocks) * self.block_size)
                    loaded += len(blocks) * self.geo.layer_block_bytes * self.geo.nr_layers
            self._stats.add("load_bytes", loaded)
            if read_bytes_per_s is not None:
                ns = int(loaded / read_bytes_per_s * 1e9) if read_bytes_per_s > 0 else 0
            if loaded and ns > 0:  # a load that moved nothing says nothing of the store's rate
                self._rates.load_bytes += loaded
                self._rates.load_ns += ns
        if self.reporter is not None:
            for i, rc in enumerate(status):
                if rc != 0:
                    self.reporter.failed(spec.keys[spec.first_chunk + i])
        return failed

    def _load_async(self, spec: LoadSpec) -> None:
        # The request waits for this report: whatever goes wrong, it is made (every block
        # failed, vLLM recomputes them), or vLLM would wait for it forever.
        try:
            failed = self._load(spec)
        except Exception:
            log.exception("tutti: asynchronous load of %s failed; vLLM recomputes it",
                          spec.req_id)
            failed = set(spec.block_ids)
        with self._lock:
            self._load_errors.update(failed)
            self._loads_done.add(spec.req_id)

    # -- layerwise loads --
    #
    # Requests with chunks from the remote tier load before the forward, as without layerwise.
    # Saves keep the wait_for_save path: it reports per chunk what was stored, which the
    # tensor-parallel reporter and the metrics need, and a chunk is complete only once every
    # layer is written.

    def _start_layerwise(self, layerwise: LayerwiseLoads, meta: TuttiConnectorMetadata) -> None:
        self._finish_layerwise()  # a step left open by a forward that never ended
        piped: list[LoadSpec] = []
        others: list[LoadSpec] = []
        for spec in meta.loads:
            remote = spec.remote_from >= 0 and self.remote is not None
            (others if remote else piped).append(spec)
        if piped and not layerwise.begin(piped, meta.compute_tokens):
            others = meta.loads
        for spec in others:
            failed = self._load(spec)
            with self._lock:
                self._load_errors.update(failed)

    def _finish_layerwise(self) -> None:
        """End the layerwise step in flight, if any, and account its loads."""
        if self.layerwise is None:
            return
        done = self.layerwise.finish()
        if done is None:
            return
        read_bps = self.layerwise.read_bytes_per_s()
        at = 0
        for spec in done.specs:
            n = len(spec.keys) - spec.first_chunk
            status = done.status[at:at + n] if done.status is not None else [-errno.EIO] * n
            failed = self._account_load(spec, status, done.load_ns if at == 0 else 0, read_bps)
            at += n
            with self._lock:
                self._load_errors.update(failed)

    # -- saves --

    def wait_for_save(self, meta: TuttiConnectorMetadata) -> None:
        # The forward pass is over: every layer of the step's loads has been read by now.
        if self.clock is not None:
            self.clock.end()
        self._finish_layerwise()
        assert self.kv is not None or not meta.saves
        forward_done: torch.cuda.Event | None = None
        for spec in meta.saves:
            # The step's failed loads are taken now, before the save is queued.
            cut = self._without_failed_loads(spec)
            if cut is None:
                continue
            if not self.cfg.async_save:
                self._save(cut)
                continue
            if forward_done is None and self.kv_mem == "cuda":
                forward_done = self._forward_done()
            self._queue_save(cut, forward_done)

    def _save(self, spec: SaveSpec) -> None:
        """Write one request's chunks, count what happened, and publish them to the remote
        tier."""
        assert self.kv is not None
        t0 = time.perf_counter_ns()
        try:
            _, status = self.store.save(self.kv, [ChunkRequest(
                spec.keys, spec.block_ids, spec.first_chunk)])
        except OSError as e:
            log.warning("tutti: save of %s failed: %s", spec.req_id, e)
            status = [-(e.errno or errno.EIO)] * (len(spec.keys) - spec.first_chunk)
        self._account_save(spec, status, time.perf_counter_ns() - t0)
        if self.remote is not None and self.remote.publish_enabled:
            self._publish(self.remote, self.kv, spec, status)

    @staticmethod
    def _forward_done() -> torch.cuda.Event:
        """An event on the current stream (the forward's), after the kernels that wrote the
        step's KV: the saver waits for it before reading the blocks."""
        import torch

        event = torch.cuda.Event()
        event.record()
        return event

    def _queue_save(self, spec: SaveSpec, forward_done: torch.cuda.Event | None) -> None:
        if self._saver is None:
            self._saver = ThreadPoolExecutor(1, thread_name_prefix="tutti-save")
        job = self._saver.submit(self._save_queued, spec, forward_done)
        self._saves.append((job, spec.block_ids))
        for b in spec.block_ids:
            self._reading[b] = job

    def _save_queued(self, spec: SaveSpec, forward_done: torch.cuda.Event | None) -> None:
        """One queued save, on the saver thread. Nothing it raises may reach vLLM (no step
        waits for it): what the store's errors do not cover is logged, and its chunks counted
        as failed saves."""
        todo = [spec]
        try:
            if forward_done is not None:
                forward_done.synchronize()
            todo = self._pieces(spec)
            while todo:
                self._save(todo[0])
                todo.pop(0)
        except Exception as e:  # noqa: BLE001 - logged and counted: the saver keeps serving
            log.exception("tutti: save of %s failed: %s", spec.req_id, e)
            for piece in todo:
                self._account_save(piece, [-errno.EIO] * (len(piece.keys) - piece.first_chunk),
                                   0)

    def _pieces(self, spec: SaveSpec) -> list[SaveSpec]:
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

    def handle_preemptions(self, meta: TuttiConnectorMetadata) -> None:
        """Before the step writes anything: wait for the saves still reading a block the step's
        schedule handed out (freed by a finished or preempted request, given to another).
        vLLM reuses freed blocks last, so this rarely waits."""
        self._forget_written()
        waits = {self._reading[b] for b in meta.new_blocks if b in self._reading}
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

    def drain_saves(self) -> None:
        """Wait until every queued save is written."""
        wait_futures([job for job, _ in self._saves])
        self._forget_written()

    def _account_save(self, spec: SaveSpec, status: list[int], ns: int) -> None:
        """Count one request's save by what happened to each chunk, and say in the log what
        went wrong (at most once a minute per kind)."""
        no_slot = full_disk = 0
        enospc = sum(rc == -errno.ENOSPC for rc in status)
        if enospc:
            # The store returns -ENOSPC both when no slot could be freed and when the disk is
            # full; its counters tell them apart (this worker is the store's only saver).
            seen = self._store_no_space
            self._store_no_space = self.store.stats()["save_no_space"]
            no_slot = min(enospc, self._store_no_space - seen)
            full_disk = enospc - no_slot
        errors = [rc for rc in status if rc < 0 and rc not in (-errno.ENOENT, -errno.ENOSPC)]
        with self._lock:
            self._stats.add("save_ns", ns)
            for i, rc in enumerate(status):
                nb = min(self.bpc, len(spec.block_ids) - i * self.bpc)
                if rc >= 0 and self.reporter is not None:
                    self.reporter.saved(spec.keys[spec.first_chunk + i], nb)
                if rc == 0:
                    if self._count_tokens:
                        self._stats.add("save_tokens", nb * self.block_size)
                    self._stats.add("save_bytes", nb * self.geo.layer_block_bytes
                                    * self.geo.nr_layers)
                elif rc == -errno.ENOENT:
                    self._stats.add("save_orphans", 1)
            self._stats.add("save_no_space", no_slot)
            self._stats.add("save_errors", full_disk + len(errors))
        if no_slot:
            self._warn("no_slot", "tutti: %d chunk(s) of %s not saved: no slot of the store "
                       "could be freed (it holds fewer chunks than the requests in flight load "
                       "and save; raise %s)", no_slot, spec.req_id, self.cfg.capacity_key)
        if full_disk:
            self._warn("full_disk", "tutti: %d chunk(s) of %s not saved: the disk of the store "
                       "%s is full", full_disk, spec.req_id, self.ctx.dirs)
        if errors:
            self._warn("save_error", "tutti: %d chunk(s) of %s not saved: %s", len(errors),
                       spec.req_id, ", ".join(sorted({os.strerror(-rc) for rc in errors})))

    def _warn(self, kind: str, msg: str, *args: object) -> None:
        """A warning, at most once a minute per kind (a failing disk fails every save)."""
        now = time.monotonic()
        last, skipped = self._warned.get(kind, (float("-inf"), 0))
        if now - last < WARN_INTERVAL_S:
            self._warned[kind] = (last, skipped + 1)
            return
        if skipped:
            msg += f" ({skipped} more such warnings in the last {WARN_INTERVAL_S:.0f} s)"
        self._warned[kind] = (now, 0)
        log.warning(msg, *args)

    def _without_failed_loads(self, spec: SaveSpec) -> SaveSpec | None:
        """The save spec cut before its first chunk holding a block whose load failed in this
        step: such a block holds no verified KV yet (vLLM recomputes it later), and must not be
        stored under the chunk's key."""
        with self._lock:
            bad = set(self._load_errors)
        if not bad:
            return spec
        for i in range(len(spec.keys) - spec.first_chunk):
            if bad.intersection(spec.block_ids[i * self.bpc:(i + 1) * self.bpc]):
                if i == 0:
                    return None
                return SaveSpec(spec.req_id, spec.keys[:spec.first_chunk + i],
                                spec.first_chunk, spec.block_ids[:i * self.bpc])
        return spec

    # -- what the worker reports after each step --

    def build_connector_worker_meta(self) -> ranks.TuttiWorkerMetadata | None:
        rep = self.reporter.report() if self.reporter is not None else None
        rates = self._new_rates()
        if rep is None and rates is None:
            return None
        return ranks.TuttiWorkerMetadata({self.rank: rep} if rep is not None else {},
                                         {self.rank: rates} if rates is not None else {})

    def _new_rates(self) -> Rates | None:
        """This rank's running totals, where they moved since last sent."""
        if self.clock is not None:
            self.clock.poll()
        with self._lock:
            now = dataclasses.replace(self._rates)
        if self.clock is not None:
            now.compute_tokens, now.compute_ns = self.clock.tokens, self.clock.ns
        if now == self._rates_sent:
            return None
        self._rates_sent = now  # neither side changes a sent Rates
        return now

    def get_block_ids_with_load_errors(self) -> set[int]:
        # vLLM calls this before wait_for_save when it defers that call past a draft model's
        # forward (speculative decoding): a step's failed chunks are still reported with it.
        self._finish_layerwise()
        with self._lock:
            errors, self._load_errors = self._load_errors, set()
        return errors

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None,
                                                               set[str] | None]:
        # Saves are written in the step (or waited for where their blocks are reused);
        # asynchronous loads finish here.
        with self._lock:
            done, self._loads_done = self._loads_done, set()
        return None, (done or None)

    def take_stats(self) -> TuttiConnectorStats | None:
        self._remote_stats()
        counts = self.layerwise.take_counts() if self.layerwise is not None else {}
        with self._lock:
            for name, value in counts.items():
                self._stats.add(name, value)
            if self._stats.is_empty():
                return None
            out, self._stats = self._stats, TuttiConnectorStats()
        return out

    def shutdown(self) -> None:
        if self._saver is not None:
            # Queued saves are written before the store closes: what was served is found
            # again after a restart.
            queued = sum(not job.done() for job, _ in self._saves)
            if queued:
                log.info("tutti: writing %d queued save(s) before closing the store", queued)
            self._saver.shutdown(wait=True)
            self._saver = None
            self._saves.clear()
            self._reading.clear()
        if self._loader is not None:
            self._loader.shutdown(wait=True)  # no load may run into freed memory
            self._loader = None
        if self.layerwise is not None:
            self._finish_layerwise()
            self.layerwise.close()  # before the KV and the store it uses
            self.layerwise = None
        # Before the KV: the remote tier's publish thread reads it until flushed.
        release_remote(self.ctx, self._remote_key)
        self._remote_key, self.remote = None, None
        if self.kv is not None:
            self.kv.close()
            self.kv = None
        if self._store_key is not None:
            release_store(self._store_key)
            self._store_key = None

    # -- the remote tier (docs/cluster.md) --

    def _load_with_remote(self, remote: Remote, kv: KV, spec: LoadSpec) -> list[int]:
        """Chunks before spec.remote_from from the local store, the others from the remote
        tier (fetched, verified, scattered); one status per chunk."""
        split = max(spec.remote_from, spec.first_chunk)
        nr_local = len(spec.keys[spec.first_chunk:split])
        local_blocks = 0 if nr_local == 0 else self.bpc - spec.skip_blocks + \
            (nr_local - 1) * self.bpc
        status: list[int] = []
        if nr_local:
            _, status = self.store.load(kv, [ChunkRequest(
                spec.keys[:split], spec.block_ids[:local_blocks], spec.first_chunk,
                spec.skip_blocks)])
        t0 = time.perf_counter_ns()
        _, remote_status = remote.fetch(kv, [ChunkRequest(
            spec.keys, spec.block_ids[local_blocks:], split,
            spec.skip_blocks if nr_local == 0 else 0)])
        with self._lock:
            self._stats.add("remote_load_ns", time.perf_counter_ns() - t0)
            for i, rc in enumerate(remote_status):
                if rc == 0:
                    blocks = len(self._chunk_blocks(spec, nr_local + i))
                    self._stats.add("remote_load_tokens", blocks * self.block_size)
                    self._stats.add("remote_load_bytes", remote.record_bytes)
                else:
                    self._stats.add("remote_load_errors", 1)
        if any(rc != 0 for rc in remote_status):
            log.info("tutti: %d of %d remote chunks of %s failed to load (%s); vLLM "
                     "recomputes them", sum(rc != 0 for rc in remote_status),
                     len(remote_status), spec.req_id, remote_status)
        return list(status) + list(remote_status)

    def _publish(self, remote: Remote, kv: KV, spec: SaveSpec, status: list[int]) -> None:
        """Queue the chunks of a save that are in the local store (stored or already present)
        for the remote tier, up to the first that is not."""
        ok = 0
        while ok < len(status) and status[ok] >= 0:
            ok += 1
        if ok == 0:
            return
        try:
            remote.publish(kv, [ChunkRequest(
                spec.keys[:spec.first_chunk + ok], spec.block_ids[:ok * self.bpc],
                spec.first_chunk)])
        except OSError as e:
            log.debug("tutti: publishing %s failed: %s", spec.req_id, e)

    def _remote_stats(self) -> None:
        """Fold the remote handle's counters (publish thread, verification) into the stats.
        The worker does it: a scheduler in the same process shares the handle."""
        if self.remote is None or self.kv is None:
            return
        st = self.remote.stats()
        with self._lock:
            for name, src in (("remote_publish_chunks", "publish_chunks"),
                              ("remote_publish_bytes", "publish_bytes"),
                              ("remote_publish_dropped", "publish_dropped"),
                              ("remote_verify_failures", "verify_failures"),
                              ("remote_timeouts", "timeouts"),
                              ("remote_breaker_trips", "breaker_trips")):
                delta = st[src] - self._remote_seen.get(src, 0)
                if delta > 0:
                    self._stats.add(name, delta)
                    self._remote_seen[src] = st[src]
