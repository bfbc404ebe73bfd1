# SPDX-License-Identifier: Apache-2.0
"""The worker side of a connector: moves KV between the engine's paged KV and the store.

- ``attach_kv`` takes the engine's paged KV, registered with the library by the adapter (which
  knows the engine's tensors).
- Loads, in one of three modes: before the step's forward pass, all layers, every chunk checked
  against its checksum (the default); on a loader thread while the request waits and other
  requests compute, reported done through ``take_finished_loads`` (``async_load``); or layer by
  layer behind the forward through the library's pipeline (``layerwise``, layerwise.py).
- Saves: ``end_step`` takes the chunks the step completed, after its forward wrote them, and
  hands them to the saver (saver.py), which writes them in order (``async_save``, the default)
  while the engine goes on with the next step; ``fence`` keeps a later step from writing a
  block a queued save still reads. Without ``async_save`` saves are written in ``end_step``.
- A chunk that cannot be loaded (evicted, damaged, I/O error) is reported through
  ``take_load_errors``, for the engine to recompute it.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from tutti.remote import Remote
from tutti.serving import ranks
from tutti.serving.config import ServingContext
from tutti.serving.counters import Counters
from tutti.serving.layerwise import LayerwiseLoads
from tutti.serving.planner import Rates, StepClock
from tutti.serving.saver import Ready, Saver
from tutti.serving.steps import LoadSpec, SaveSpec, StepPlan
from tutti.serving.stores import (
    RemoteKey,
    StoreKey,
    acquire_remote,
    acquire_store,
    release_remote,
    release_store,
)
from tutti.store import KV, ChunkRequest

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

WARN_INTERVAL_S = 60.0


class WorkerCore:
    """The worker side of one connector (one per worker process, i.e. per rank).

    ``stream``: the raw CUDA stream the engine's forward runs on, asked at each layerwise step
    with KV in GPU memory (None: the current stream of torch)."""

    def __init__(self, ctx: ServingContext, stream: Callable[[], int] | None = None) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.geo = ctx.geo
        self.block_size = ctx.block_size
        self.bpc = ctx.blocks_per_chunk
        self.rank = ctx.rank
        self._stream = stream
        self._store_key: StoreKey | None
        self._store_key, self.store = acquire_store(ctx.cfg, ctx.dirs, ctx.geo, ctx.ns)
        self._remote_key: RemoteKey | None
        self.remote: Remote | None
        self._remote_key, self.remote = acquire_remote(ctx)
        # The scheduler, in a process of its own, learns from these reports what the store
        # holds (ranks.py).
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
        self._stats = Counters()
        self._load_errors: set[int] = set()
        # What the scheduler weighs loads with (planner.py): this rank's loads (under the
        # lock) and forward passes, and the totals it last sent.
        self._rates = Rates()
        self._rates_sent = Rates()
        self.clock: StepClock | None = None  # once the KV is registered
        # asynchronous loads: one thread moves them; finished ids and their errors are handed
        # to the engine together (errors no later than the step that reports the request done)
        self._loader: ThreadPoolExecutor | None = None
        self._loads_done: set[str] = set()
        # asynchronous saves (async_save): the saver thread and its block fence
        self.saver = Saver(self._save, self._save_failed, self.bpc)
        self._store_no_space = self.store.stats()["save_no_space"]  # the store's, last seen
        self._warned: dict[str, tuple[float, int]] = {}  # kind -> (last warned, skipped since)

    # -- registration --

    def attach_kv(self, kv: KV, mem: str, names: list[str]) -> str:
        """The engine's paged KV, registered with the library (``mem``: "cuda" or "host";
        ``names``: its layers in the order of the store's). Returns the engine "auto" chose
        for it: for GPU KV it sets gpu-uring up now, so that a fallback and its reason are in
        the log at start-up."""
        self.kv = kv
        self.kv_mem = mem
        self.clock = StepClock(gpu=mem == "cuda")
        self.engine = self.store.engine_for(kv)
        if self.cfg.layerwise:
            self.layerwise = LayerwiseLoads(self.store, kv, names, self.ctx.layer_names, mem,
                                            stream=self._stream)
        return self.engine

    # -- loads --

    def step_begins(self, plan: StepPlan) -> None:
        """The step's plan is known, before its forward: time the forward where it computes
        without loading inside the step (a load there would be counted as compute)."""
        if self.clock is None:
            return
        in_step_loads = bool(plan.loads) and not self.cfg.async_load
        self.clock.begin(0 if in_step_loads else plan.compute_tokens)

    def start_loads(self, plan: StepPlan) -> None:
        # Before this step's loads write into blocks handed out again (an engine that fences
        # earlier has waited already).
        self.fence(plan.new_blocks)
        if self.reporter is not None and self.rank in plan.resync:
            self.reporter.request_full()
        if self.layerwise is not None and not self.layerwise.broken:
            self._start_layerwise(self.layerwise, plan)
            return
        for spec in plan.loads:
            if self.cfg.async_load:
                if self._loader is None:
                    self._loader = ThreadPoolExecutor(1, thread_name_prefix="tutti-load")
                self._loader.submit(self._load_async, spec)
            else:
                failed = self._load(spec)
                with self._lock:
                    self._load_errors.update(failed)

    def wait_layer(self, layer_name: str) -> None:
        """The engine's hook before the attention of ``layer_name`` (without layerwise, loads
        complete in ``start_loads``)."""
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
            log.warning("tutti: load of %s failed: %s; it is recomputed", spec.req_id, e)
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
        # failed, the engine recomputes them), or the engine would wait for it forever.
        try:
            failed = self._load(spec)
        except Exception:
            log.exception("tutti: asynchronous load of %s failed; it is recomputed",
                          spec.req_id)
            failed = set(spec.block_ids)
        with self._lock:
            self._load_errors.update(failed)
            self._loads_done.add(spec.req_id)

    # -- layerwise loads --
    #
    # Requests with chunks from the remote tier load before the forward, as without layerwise.
    # Saves keep the end_step path: it reports per chunk what was stored, which the
    # tensor-parallel reporter and the metrics need, and a chunk is complete only once every
    # layer is written.

    def _start_layerwise(self, layerwise: LayerwiseLoads, plan: StepPlan) -> None:
        self._finish_layerwise()  # a step left open by a forward that never ended
        piped: list[LoadSpec] = []
        others: list[LoadSpec] = []
        for spec in plan.loads:
            remote = spec.remote_from >= 0 and self.remote is not None
            (others if remote else piped).append(spec)
        if piped and not layerwise.begin(piped, plan.compute_tokens):
            others = plan.loads
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

    def end_step(self, plan: StepPlan) -> None:
        """The step's forward is over (every layer of its loads has been read by now): save
        the chunks it completed."""
        if self.clock is not None:
            self.clock.end()
        self._finish_layerwise()
        assert self.kv is not None or not plan.saves
        forward_done: Ready | None = None
        for spec in plan.saves:
            # The step's failed loads are taken now, before the save is queued.
            cut = self._without_failed_loads(spec)
            if cut is None:
                continue
            if not self.cfg.async_save:
                self._save(cut)
                continue
            if forward_done is None and self.kv_mem == "cuda":
                forward_done = self._forward_done()
            self.saver.queue(cut, forward_done)

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

    def _save_failed(self, spec: SaveSpec) -> None:
        """A save the saver could not write (it raised): every chunk counts as failed."""
        self._account_save(spec, [-errno.EIO] * (len(spec.keys) - spec.first_chunk), 0)

    @staticmethod
    def _forward_done() -> torch.cuda.Event:
        """An event on the current stream (the forward's), after the kernels that wrote the
        step's KV: the saver waits for it before reading the blocks."""
        import torch

        event = torch.cuda.Event()
        event.record()
        return event

    def fence(self, blocks: Iterable[int]) -> None:
        """Before the step writes anything: wait for the saves still reading a block the step's
        schedule handed out (freed by a finished or preempted request, given to another)."""
        self.saver.fence(blocks)

    def drain_saves(self) -> None:
        """Wait until every queued save is written."""
        self.saver.drain()

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
        step: such a block holds no verified KV yet (the engine recomputes it later), and must
        not be stored under the chunk's key."""
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

    def report(self) -> ranks.WorkerReport | None:
        """This rank's report to the scheduler side, or None when there is nothing new."""
        rep = self.reporter.report() if self.reporter is not None else None
        rates = self._new_rates()
        if rep is None and rates is None:
            return None
        return ranks.WorkerReport({self.rank: rep} if rep is not None else {},
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

    def take_load_errors(self) -> set[int]:
        """The blocks whose load failed since the last call, for the engine to recompute."""
        # An engine may ask before the step's end (vLLM does when it defers its call past a
        # draft model's forward): a step's failed chunks are still reported with it.
        self._finish_layerwise()
        with self._lock:
            errors, self._load_errors = self._load_errors, set()
        return errors

    def take_finished_loads(self) -> set[str]:
        """The requests whose asynchronous load finished since the last call."""
        with self._lock:
            done, self._loads_done = self._loads_done, set()
        return done

    def take_counts(self) -> Counters | None:
        """What was counted since the last call, or None when nothing was."""
        self._remote_stats()
        counts = self.layerwise.take_counts() if self.layerwise is not None else {}
        with self._lock:
            for name, value in counts.items():
                self._stats.add(name, value)
            if self._stats.is_empty():
                return None
            out, self._stats = self._stats, Counters()
        return out

    def close(self) -> None:
        # Queued saves are written before the store closes: what was served is found again
        # after a restart.
        self.saver.close()
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
            log.info("tutti: %d of %d remote chunks of %s failed to load (%s); they are "
                     "recomputed", sum(rc != 0 for rc in remote_status),
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
