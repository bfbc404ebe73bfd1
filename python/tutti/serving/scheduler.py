# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector's scheduler side: what the store holds of a prompt, which chunks the worker
loads and saves each step, and what the worker reported back.

- ``get_num_new_matched_tokens`` asks for the longest stored prefix of the prompt
  (block-aligned, leaving at least one token to compute): from the store itself when this
  process holds it, or from the view the workers' reports build (tutti/vllm/ranks.py); the
  load plan then keeps the part worth reading rather than computing (tutti/vllm/planner.py).
- ``update_state_after_alloc`` turns a hit into a load of the blocks vLLM allocated.
- ``build_connector_meta`` sends the worker this step's loads and the chunks that became
  complete (to save).
- ``update_connector_output`` folds in the workers' store reports, their load and compute
  measurements, finished asynchronous loads and failed loads.
- With ``async_save`` the worker writes saves after the step, and vLLM frees a finished or
  preempted request's blocks at once: each step's metadata lists the blocks the step handed out,
  so that the worker waits for the saves still reading them before they are written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import vllm
from vllm.v1.request import RequestStatus

from tutti.remote import Remote
from tutti.store import Store
from tutti.vllm import compat, ranks, remote_tier
from tutti.vllm.config import ConnectorContext
from tutti.vllm.data import LoadSpec, SaveSpec, TuttiConnectorMetadata, chunk_keys
from tutti.vllm.log import log
from tutti.vllm.metrics import TuttiConnectorStats
from tutti.vllm.planner import LoadPlanner
from tutti.vllm.stores import (
    RemoteKey,
    StoreKey,
    acquire_remote,
    acquire_store,
    release_remote,
    release_store,
)

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request



@dataclass
class _ReqState:
    request: Request
    prompt_blocks: int  # full blocks of the prompt
    block_ids: list[int] = field(default_factory=list)
    saved_chunks: int = 0  # leading full chunks known to be stored
    tail_done: bool = False  # the prompt's partial chunk stored (or loaded)
    # (index of the first block loaded, their block ids) of the last load
    loaded: tuple[int, list[int]] | None = None


@dataclass
class _Lookup:
    """What ``get_num_new_matched_tokens`` found, kept until the request is admitted."""

    num_computed: int  # tokens vLLM had computed (its own prefix cache)
    keys: list[bytes]  # keys of the chunks found
    looked_up: int  # tokens looked up
    full_hit: int  # full chunks found in the local store
    partial_hit: bool  # the prompt's partial chunk found too
    declined: int = 0  # tokens found that the load plan leaves to compute


class TuttiScheduler:
    """The scheduler side of one connector."""

    # How long the scheduler holds requests back at start-up waiting for every rank's listing;
    # past it, it schedules them with what it has (a rank not heard from holds nothing).
    VIEW_WAIT_S = 60.0

    def __init__(self, ctx: ConnectorContext) -> None:
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
        self.stats = TuttiConnectorStats()
        algo = str(getattr(ctx.vllm_config.cache_config, "prefix_caching_hash_algo", "sha256"))
        if not compat.hashes_survive_restarts(algo):
            log.warning("tutti: vLLM %s seeds its prefix hashes (%s) at random in every process "
                        "unless PYTHONHASHSEED is set: what this server stores is not found "
                        "again after a restart. Set PYTHONHASHSEED to one value for every run",
                        vllm.__version__, algo)
        self._reqs: dict[str, _ReqState] = {}
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
        # The chunk keys of each asynchronous load decided, by request, until vLLM schedules
        # that request. With vLLM's prefix cache on, a request whose hit overlaps the keys of a
        # request still waiting for its load (WAITING_FOR_REMOTE_KVS) is asked again later
        # rather than read the same bytes again: once vLLM takes the loading request up, its
        # blocks are in vLLM's prefix cache. (A load reported finished is not there until then,
        # and vLLM may look at the waiting request first.)
        self._keys_in_flight: dict[str, tuple[Request, frozenset[bytes]]] = {}
        self._share_loads = ctx.cfg.share_loads and bool(ctx.cfg.async_load) and bool(
            getattr(ctx.vllm_config.cache_config, "enable_prefix_caching", False))

    def remote_hit_tokens(self, req_id: str, num_external_tokens: int) -> int:
        """Of a request's load just planned, the tokens that come from the remote tier."""
        spec = self._pending_loads.get(req_id)
        if spec is None or spec.remote_from < 0:
            return 0
        split = max(spec.remote_from, spec.first_chunk)
        local_blocks = 0 if split == spec.first_chunk else \
            self.bpc - spec.skip_blocks + (split - spec.first_chunk - 1) * self.bpc
        return max(0, num_external_tokens - local_blocks * self.block_size)

    def _chunk_keys(self, block_hashes: list[Any], nr_blocks: int) -> list[bytes]:
        return chunk_keys(block_hashes, nr_blocks, self.bpc)

    def on_new_request(self, request: Request) -> None:
        prompt = request.num_prompt_tokens
        self._reqs[request.request_id] = _ReqState(request, prompt // self.block_size)

    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
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
            # Another request is reading these chunks into vLLM's KV: once vLLM takes it up
            # again, vLLM's prefix cache serves them to this one too (vLLM's
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

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(meta, ranks.TuttiWorkerMetadata):
            if self.view is not None:
                self.view.apply(meta.reports)
            self.planner.update(meta.rates)
        for req_id in connector_output.finished_recving or ():
            self._loading.pop(req_id, None)
        if connector_output.invalid_block_ids:
            self._after_failed_loads(connector_output.invalid_block_ids)

    def _after_failed_loads(self, bad: set[int]) -> None:
        """vLLM recomputes a request from its first block that failed to load (on any rank):
        store its chunks again from there. A rank that lacks a chunk stores it; one that has it
        answers "already stored". A block of a request's last load that is reported failed is
        that request's: a block being loaded into belongs to the request loading it alone."""
        for state in self._reqs.values():
            if state.loaded is None:
                continue
            first, ids = state.loaded
            failed = [i for i, b in enumerate(ids) if b in bad]
            if failed:
                state.saved_chunks = min(state.saved_chunks, (first + failed[0]) // self.bpc)
                state.tail_done = False
                state.loaded = None

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
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
        block_ids = list(blocks.get_block_ids()[0])
        local_hit = self._remote_local_hits.pop(request.request_id, None)
        self._pending_loads[request.request_id] = LoadSpec(
            request.request_id, found.keys[:nr_keys], first // self.bpc, first % self.bpc,
            block_ids[first:last],
            remote_from=local_hit if local_hit is not None and local_hit < nr_keys else -1)
        if state is not None:
            state.loaded = (first, block_ids[first:last])
        if self._share_loads:
            self._track_keys(request, found.keys[first // self.bpc:nr_keys])

    def _track_keys(self, request: Request, keys: list[bytes]) -> None:
        self._keys_in_flight[request.request_id] = (request, frozenset(keys))

    def _untrack_keys(self, req_id: str) -> None:
        self._keys_in_flight.pop(req_id, None)

    def _loading_elsewhere(self, keys: list[bytes]) -> bool:
        """Whether a request still waiting for its asynchronous load is reading one of
        ``keys``."""
        return any(req.status == RequestStatus.WAITING_FOR_REMOTE_KVS
                   and not loading.isdisjoint(keys)
                   for req, loading in self._keys_in_flight.values())

    def _saves_of(self, state: _ReqState, req_id: str, done_tokens: int) -> SaveSpec | None:
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

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> TuttiConnectorMetadata:
        meta = TuttiConnectorMetadata()
        scheduled = scheduler_output.num_scheduled_tokens
        # Every load decided since the last step: synchronous ones belong to requests scheduled
        # now, asynchronous ones to requests that wait for them (WAITING_FOR_REMOTE_KVS).
        meta.loads = list(self._pending_loads.values())
        self._pending_loads.clear()
        if self.ctx.cfg.async_load:
            for spec in meta.loads:
                self._loading[spec.req_id] = len(spec.block_ids) * self._block_bytes
        meta.compute_tokens = int(getattr(scheduler_output, "total_num_scheduled_tokens", 0))
        if self.view is not None:
            meta.resync = self.view.take_resync()
        if self.ctx.cfg.async_save:
            meta.new_blocks = self._new_blocks(scheduler_output)
        for new in scheduler_output.scheduled_new_reqs:
            # Scheduled after its load: vLLM's prefix cache holds what it loaded.
            self._untrack_keys(new.req_id)
            state = self._reqs.get(new.req_id)
            if state is None:
                continue
            state.block_ids = list(new.block_ids[0])
            save = self._saves_of(state, new.req_id,
                                  new.num_computed_tokens + scheduled.get(new.req_id, 0))
            if save is not None:
                meta.saves.append(save)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            state = self._reqs.get(req_id)
            if state is None:
                continue
            new_ids = cached.new_block_ids[i]
            if self._keys_in_flight:
                self._untrack_keys(req_id)  # resumed after its load (as a preempted request)
            if req_id in cached.resumed_req_ids:
                state.block_ids = list(new_ids[0]) if new_ids else []
                state.loaded = None  # its blocks were freed, and may be another's now
            elif new_ids:
                state.block_ids.extend(new_ids[0])
            save = self._saves_of(state, req_id,
                                  cached.num_computed_tokens[i] + scheduled.get(req_id, 0))
            if save is not None:
                meta.saves.append(save)
        return meta

    @staticmethod
    def _new_blocks(scheduler_output: SchedulerOutput) -> list[int]:
        """The blocks this step gave to requests: every block of a new or resumed request, the
        blocks a running one grew by."""
        out: list[int] = []
        for new in scheduler_output.scheduled_new_reqs:
            out.extend(new.block_ids[0])
        for ids in scheduler_output.scheduled_cached_reqs.new_block_ids:
            if ids:
                out.extend(ids[0])
        return out

    def request_finished(self, request: Request,
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._reqs.pop(request.request_id, None)
        self._lookups.pop(request.request_id, None)
        self._pending_loads.pop(request.request_id, None)
        self._remote_local_hits.pop(request.request_id, None)
        self._loading.pop(request.request_id, None)
        self._untrack_keys(request.request_id)
        # Blocks are freed at once: a save still reading them is waited for where they are
        # handed out again (the metadata's new_blocks).
        return False, None

    def take_stats(self) -> TuttiConnectorStats | None:
        if self.stats.is_empty():
            return None
        out, self.stats = self.stats, TuttiConnectorStats()
        return out

    def shutdown(self) -> None:
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
