# SPDX-License-Identifier: Apache-2.0
"""The scheduler side of a connector: what the store holds of a prompt, which chunks the worker
loads and saves each step, and what the workers reported back.

- ``lookup`` asks for the longest stored prefix of the prompt (block-aligned, leaving at least
  one token to compute): from the store itself when this process holds it, or from the view
  the workers' reports build (ranks.py); the load plan then keeps the part worth reading rather
  than computing (planner.py).
- ``allocated`` turns a hit into a load of the blocks the engine allocated.
- ``plan_step`` sends the worker this step's loads and the chunks that became complete (to
  save).
- ``worker_output`` folds in the workers' store reports, their load and compute measurements,
  finished asynchronous loads and failed loads.
- With ``async_save`` the worker writes saves after the step, and the engine frees a finished
  or preempted request's blocks at once: each step's plan lists the blocks the step handed out,
  so that the worker waits for the saves still reading them before they are written.

An engine's request is read through ``Request`` (its id, prompt length and chained block
hashes); an adapter turns the engine's schedule into ``Scheduled`` entries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from tutti.remote import Remote
from tutti.serving import ranks, remote_tier
from tutti.serving.config import ServingContext
from tutti.serving.counters import Counters
from tutti.serving.keys import chunk_keys
from tutti.serving.planner import LoadPlanner
from tutti.serving.steps import LoadSpec, SaveSpec, StepPlan
from tutti.serving.stores import (
    RemoteKey,
    StoreKey,
    acquire_remote,
    acquire_store,
    release_remote,
    release_store,
)
from tutti.store import Store

log = logging.getLogger(__name__)


class Request(Protocol):
    """What the scheduler side reads of an engine's request."""

    @property
    def request_id(self) -> str: ...

    @property
    def num_prompt_tokens(self) -> int: ...

    @property
    def block_hashes(self) -> Sequence[bytes]:
        """The hash of each full block of the request so far, each chained over the whole
        prefix up to its block (keys.py)."""
        ...


R = TypeVar("R", bound=Request)
P = TypeVar("P", bound=StepPlan)


@dataclass
class Scheduled:
    """A request the engine's schedule runs this step."""

    req_id: str
    block_ids: list[int]  # blocks given this step: all of a new or resumed request's
    done_tokens: int  # its tokens computed once the step is done
    new: bool = False  # scheduled for the first time
    resumed: bool = False  # resumed after a preemption (its blocks were freed)


@dataclass
class _ReqState(Generic[R]):
    request: R
    prompt_blocks: int  # full blocks of the prompt
    block_ids: list[int] = field(default_factory=list)
    saved_chunks: int = 0  # leading full chunks known to be stored
    tail_done: bool = False  # the prompt's partial chunk stored (or loaded)
    # (index of the first block loaded, their block ids) of the last load
    loaded: tuple[int, list[int]] | None = None


@dataclass
class _Lookup:
    """What ``lookup`` found, kept until the request is admitted."""

    num_computed: int  # tokens the engine had computed (its own prefix cache)
    keys: list[bytes]  # keys of the chunks found
    looked_up: int  # tokens looked up
    full_hit: int  # full chunks found in the local store
    partial_hit: bool  # the prompt's partial chunk found too
    declined: int = 0  # tokens found that the load plan leaves to compute


class SchedulerCore(Generic[R]):
    """The scheduler side of one connector.

    ``waiting_for_load``: whether a request still waits for its asynchronous load (the engine
    has not taken it up again). ``engine_prefix_cache``: whether the engine keeps computed
    blocks for later requests; with it (and ``share_loads``) a request whose hit another
    request is loading waits for that load instead of reading the same chunks again."""

    # How long the scheduler holds requests back at start-up waiting for every rank's listing;
    # past it, it schedules them with what it has (a rank not heard from holds nothing).
    VIEW_WAIT_S = 60.0

    def __init__(self, ctx: ServingContext, waiting_for_load: Callable[[R], bool],
                 engine_prefix_cache: bool = False) -> None:
        self.ctx = ctx
        self.block_size = ctx.block_size
        self.bpc = ctx.blocks_per_chunk
        self.remote_cfg = ctx.cfg.remote
        self.view: ranks.RankView | None = None
        self._view_since: float | None = None  # when the scheduler first waited for listings
        self._store_key: StoreKey | None = None
        self.store: Store | None = None
        if ctx.scheduler_opens_store:
            self._store_key, self.store = acquire_store(ctx.cfg, ctx.dirs, ctx.geo, ctx.ns)
        else:
            self.view = ranks.RankView(ctx.tp)
        self._remote_key: RemoteKey | None
        self.remote: Remote | None
        self._remote_key, self.remote = acquire_remote(ctx)
        self.stats = Counters()
        self._reqs: dict[str, _ReqState[R]] = {}
        self._lookups: dict[str, _Lookup] = {}
        self._pending_loads: dict[str, LoadSpec] = {}
        self._remote_local_hits: dict[str, int] = {}  # request -> local chunks, with remote ones
        self._block_bytes = ctx.geo.layer_block_bytes * ctx.geo.nr_layers  # all layers
        self.planner = LoadPlanner(self._block_bytes / self.block_size, self.block_size,
                                   ctx.cfg.chunk_tokens,
                                   layerwise=bool(ctx.cfg.layerwise),
                                   weigh=ctx.cfg.load_policy == "auto")
        # Asynchronous loads handed to the worker and not reported finished: request -> bytes
        # (a new load waits behind them on the worker's loader).
        self._loading: dict[str, int] = {}
        # The chunk keys of each asynchronous load decided, by request, until the engine
        # schedules that request. With the engine's prefix cache on, a request whose hit
        # overlaps the keys of a request still waiting for its load is asked again later rather
        # than read the same bytes again: once the engine takes the loading request up, its
        # blocks are in the engine's prefix cache. (A load reported finished is not there until
        # then, and the engine may look at the waiting request first.)
        self._keys_in_flight: dict[str, tuple[R, frozenset[bytes]]] = {}
        self._waiting_for_load = waiting_for_load
        self._share_loads = ctx.cfg.share_loads and bool(ctx.cfg.async_load) and \
            engine_prefix_cache

    def remote_hit_tokens(self, req_id: str, num_external_tokens: int) -> int:
        """Of a request's load just planned, the tokens that come from the remote tier."""
        spec = self._pending_loads.get(req_id)
        if spec is None or spec.remote_from < 0:
            return 0
        split = max(spec.remote_from, spec.first_chunk)
        local_blocks = 0 if split == spec.first_chunk else \
            self.bpc - spec.skip_blocks + (split - spec.first_chunk - 1) * self.bpc
        return max(0, num_external_tokens - local_blocks * self.block_size)

    def _chunk_keys(self, block_hashes: Sequence[bytes], nr_blocks: int) -> list[bytes]:
        return chunk_keys(block_hashes, nr_blocks, self.bpc)

    def on_new_request(self, request: R) -> None:
        prompt = request.num_prompt_tokens
        self._reqs[request.request_id] = _ReqState(request, prompt // self.block_size)

    def lookup(self, request: R, num_computed_tokens: int) -> tuple[int | None, bool]:
        """Of the tokens after ``num_computed_tokens`` (those the engine holds already), how
        many to load, or None to be asked again at a later step; and whether that load is
        asynchronous (the request waits for it)."""
        bs = self.block_size
        hashes = request.block_hashes
        # At least one prompt token is computed (for the logits); counts stay block-aligned.
        limit = min(len(hashes), (request.num_prompt_tokens - 1) // bs)
        if limit * bs <= num_computed_tokens:
            return 0, False
        # The keys the chunks of these blocks were saved under: every full chunk, then the
        # trailing full blocks as a partial chunk. A chunk stored whole may be loaded in part.
        keys = self._chunk_keys(hashes, len(hashes))
        if self.view is not None:
            if not self._view_ready(self.view):
                return None, False  # asked again next step
            hit, hit_blocks = self.view.lookup(keys, self.bpc)
        else:
            assert self.store is not None
            hit, hit_blocks = self.store.lookup(keys)
        local_hit = hit
        more = 0
        if self.remote is not None and hit < len(keys) and hit_blocks < limit:
            more = self._remote_lookup(self.remote, keys, hit, hit_blocks, limit,
                                       num_computed_tokens)
            if more:
                hit += more
                hit_blocks = min(hit * self.bpc, len(hashes))
                self._remote_local_hits[request.request_id] = local_hit
            else:
                self._remote_local_hits.pop(request.request_id, None)
        found = max(0, min(hit_blocks, limit) * bs - num_computed_tokens)
        if found and self._keys_in_flight and self._loading_elsewhere(
                keys[num_computed_tokens // bs // self.bpc:hit]):
            # Another request is reading these chunks into the engine's KV: once the engine
            # takes it up again, its prefix cache serves them to this one too (vLLM's
            # OffloadingConnector delays such a request the same way).
            self.stats.add("delayed_lookups", 1)
            return None, False
        # The remote tier weighed its own part (remote_tier.worth_fetching).
        ext = found if more else self.planner.plan(
            found, request.num_prompt_tokens - num_computed_tokens, self._queued_load_bytes())
        # Counted when the request is admitted (this may be asked again before then).
        # Chunks from the remote tier are not in the local store yet: they are saved (promoted)
        # like computed ones once loaded.
        partial_hit = local_hit == len(keys) and len(hashes) % self.bpc != 0
        self._lookups[request.request_id] = _Lookup(
            num_computed_tokens, keys[:hit], limit * bs - num_computed_tokens,
            local_hit - partial_hit, partial_hit, found - ext)
        return ext, self.ctx.cfg.async_load is True and ext > 0

    def _queued_load_bytes(self) -> int:
        """Bytes of the loads a new one would wait behind on the worker: planned this step,
        or handed over and still under way (asynchronous)."""
        planned = sum(len(s.block_ids) for s in self._pending_loads.values())
        return planned * self._block_bytes + sum(self._loading.values())

    def _view_ready(self, view: ranks.RankView) -> bool:
        if view.ready():
            return True
        now = time.monotonic()
        if self._view_since is None:
            self._view_since = now
        if now - self._view_since < self.VIEW_WAIT_S:
            return False
        log.warning("tutti: no store listing from ranks %s after %.0f s; scheduling without "
                    "their chunks", [r for r, ok in enumerate(view.listed) if not ok],
                    self.VIEW_WAIT_S)
        view.listed = [True] * view.nr_ranks
        return True

    def worker_output(self, report: ranks.WorkerReport | None, finished_loads: Iterable[str],
                      failed_blocks: set[int] | None) -> None:
        """What the workers said after a step: their reports (merged over the ranks), the
        requests whose asynchronous loads finished, and the blocks that failed to load."""
        if report is not None:
            if self.view is not None:
                self.view.apply(report.reports)
            self.planner.update(report.rates)
        for req_id in finished_loads:
            self._loading.pop(req_id, None)
        if failed_blocks:
            self._after_failed_loads(failed_blocks)

    def _after_failed_loads(self, bad: set[int]) -> None:
        """The engine recomputes a request from its first block that failed to load (on any
        rank): store its chunks again from there. A rank that lacks a chunk stores it; one that
        has it answers "already stored". A block of a request's last load that is reported
        failed is that request's: a block being loaded into belongs to the request loading it
        alone."""
        for state in self._reqs.values():
            if state.loaded is None:
                continue
            first, ids = state.loaded
            failed = [i for i, b in enumerate(ids) if b in bad]
            if failed:
                state.saved_chunks = min(state.saved_chunks, (first + failed[0]) // self.bpc)
                state.tail_done = False
                state.loaded = None

    def allocated(self, request: R, block_ids: Sequence[int], num_external_tokens: int) -> None:
        """The engine admitted ``request`` with ``block_ids`` (all of its blocks, the ones
        its own prefix cache holds first) and ``num_external_tokens`` of them to load."""
        found = self._lookups.pop(request.request_id, None)
        if found is None:
            return
        self.stats.add("lookup_tokens", found.looked_up)
        self.stats.add("hit_tokens", num_external_tokens)
        self.stats.add("declined_tokens", found.declined)
        state = self._reqs.get(request.request_id)
        if state is not None:
            # What was found need not be written again, loaded or not.
            state.saved_chunks = max(state.saved_chunks, found.full_hit)
            state.tail_done = state.tail_done or found.partial_hit
        if num_external_tokens == 0:
            return
        bs = self.block_size
        first = found.num_computed // bs
        last = (found.num_computed + num_external_tokens) // bs
        nr_keys = -(-last // self.bpc)
        block_ids = list(block_ids)
        local_hit = self._remote_local_hits.pop(request.request_id, None)
        self._pending_loads[request.request_id] = LoadSpec(
            request.request_id, found.keys[:nr_keys], first // self.bpc, first % self.bpc,
            block_ids[first:last],
            remote_from=local_hit if local_hit is not None and local_hit < nr_keys else -1)
        if state is not None:
            state.loaded = (first, block_ids[first:last])
        if self._share_loads:
            self._track_keys(request, found.keys[first // self.bpc:nr_keys])

    def _track_keys(self, request: R, keys: list[bytes]) -> None:
        self._keys_in_flight[request.request_id] = (request, frozenset(keys))

    def _untrack_keys(self, req_id: str) -> None:
        self._keys_in_flight.pop(req_id, None)

    def _loading_elsewhere(self, keys: list[bytes]) -> bool:
        """Whether a request still waiting for its asynchronous load is reading one of
        ``keys``."""
        return any(self._waiting_for_load(req) and not loading.isdisjoint(keys)
                   for req, loading in self._keys_in_flight.values())

    def _saves_of(self, state: _ReqState[R], req_id: str, done_tokens: int) -> SaveSpec | None:
        """The chunks of a request that are complete once ``done_tokens`` are computed."""
        bs, bpc = self.block_size, self.bpc
        hashes = state.request.block_hashes
        full_blocks = min(done_tokens // bs, len(hashes), len(state.block_ids))
        end = full_blocks // bpc * bpc
        tail = (not state.tail_done and state.prompt_blocks % bpc
                and full_blocks >= state.prompt_blocks
                and state.prompt_blocks // bpc * bpc == end)
        if tail:
            end = state.prompt_blocks
            state.tail_done = True
        first = state.saved_chunks
        if end <= first * bpc:
            return None
        state.saved_chunks = max(first, end // bpc)
        return SaveSpec(req_id, self._chunk_keys(hashes, end), first,
                        state.block_ids[first * bpc:end])

    def plan_step(self, plan: P, scheduled: Iterable[Scheduled], compute_tokens: int) -> P:
        """Fill ``plan`` for a step that runs ``scheduled`` (new requests first, in the
        engine's order) and computes ``compute_tokens``: every load decided since the last
        step, the chunks that become complete, the blocks handed out."""
        # Synchronous loads belong to requests scheduled now, asynchronous ones to requests
        # that wait for them.
        plan.loads = list(self._pending_loads.values())
        self._pending_loads.clear()
        if self.ctx.cfg.async_load:
            for spec in plan.loads:
                self._loading[spec.req_id] = len(spec.block_ids) * self._block_bytes
        plan.compute_tokens = compute_tokens
        if self.view is not None:
            plan.resync = self.view.take_resync()
        for s in scheduled:
            if self.ctx.cfg.async_save:
                plan.new_blocks.extend(s.block_ids)
            if s.new:
                # Scheduled after its load: the engine's prefix cache holds what it loaded.
                self._untrack_keys(s.req_id)
            state = self._reqs.get(s.req_id)
            if state is None:
                continue
            if not s.new and self._keys_in_flight:
                self._untrack_keys(s.req_id)  # resumed after its load (as a preempted request)
            if s.new or s.resumed:
                state.block_ids = list(s.block_ids)
                if s.resumed:
                    state.loaded = None  # its blocks were freed, and may be another's now
            else:
                state.block_ids.extend(s.block_ids)
            save = self._saves_of(state, s.req_id, s.done_tokens)
            if save is not None:
                plan.saves.append(save)
        return plan

    def finished(self, req_id: str) -> None:
        """The request is over; the engine frees its blocks at once (a save still reading them
        is waited for where they are handed out again: ``StepPlan.new_blocks``)."""
        self._reqs.pop(req_id, None)
        self._lookups.pop(req_id, None)
        self._pending_loads.pop(req_id, None)
        self._remote_local_hits.pop(req_id, None)
        self._loading.pop(req_id, None)
        self._untrack_keys(req_id)

    def take_counts(self) -> Counters | None:
        """What was counted since the last call, or None when nothing was."""
        if self.stats.is_empty():
            return None
        out, self.stats = self.stats, Counters()
        return out

    def close(self) -> None:
        release_remote(self.ctx, self._remote_key)
        self._remote_key, self.remote = None, None
        if self._store_key is not None:
            release_store(self._store_key)
            self._store_key, self.store = None, None

    # -- the remote tier (docs/cluster.md) --

    def _remote_lookup(self, remote: Remote, keys: list[bytes], hit: int, hit_blocks: int,
                       limit: int, num_computed: int) -> int:
        """Chunks after the local hit that the remote tier holds and that are worth fetching."""
        try:
            more = remote.lookup(keys, hit)
        except OSError as e:
            log.debug("tutti: remote lookup failed (%s); local hits only", e)
            return 0
        if more == 0:
            return 0
        tokens = (min((hit + more) * self.bpc, limit)
                  - max(hit_blocks, num_computed // self.block_size)) * self.block_size
        if tokens <= 0:
            return 0
        assert self.remote_cfg is not None
        if not remote_tier.worth_fetching(self.remote_cfg, remote, more, tokens,
                                          remote.record_bytes):
            self.stats.add("remote_rejected_tokens", tokens)
            return 0
        self.stats.add("remote_hit_tokens", tokens)
        return more
