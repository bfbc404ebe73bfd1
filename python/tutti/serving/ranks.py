# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism for a connector: one store per rank, and the scheduler's view of them.

With tensor parallelism of N > 1 ranks, an engine runs N worker processes, each holding the KV
of its share of the heads, and one scheduler process holding none. Each worker opens a store of
its own (its own directories, its own namespace). A chunk is useful only when every rank holds
its share, so the scheduler counts a chunk as a hit only if all N stores hold it.

The scheduler learns what each store holds through the engine's worker-to-scheduler channel,
which carries a ``WorkerReport`` per step: one report per rank, keyed by rank, merged over the
workers of a step with ``WorkerReport.merge``. In vLLM (tutti/vllm/data.py) that channel is
``build_connector_worker_meta`` -> ``KVConnectorOutput.kv_connector_worker_meta`` ->
``update_connector_output``: in vLLM 0.32 the multiprocess executor collects the output of
every worker for ``execute_model`` and ``sample_tokens`` when a connector is configured
(``MultiprocExecutor.collective_rpc`` in vllm/v1/executor/multiproc_executor.py), and
``KVOutputAggregator.aggregate`` (vllm/distributed/kv_transfer/kv_connector/utils.py) folds the
metadata of every worker of a step into one object with ``KVConnectorWorkerMetadata.aggregate``.
Each report is a delta against the rank's previous one (its first is the whole listing of the
store, ``Store.keys()``) with a sequence number; a scheduler that sees a gap asks that rank for
a full listing in its next step's plan.

A stale view is safe. A chunk believed present on every rank but gone from one (evicted by a
save since, removed as damaged) fails to load on that rank, which reports its blocks as failed
loads. The engine recomputes those blocks for the request on every rank, since the forward pass
runs on all ranks together (vLLM's aggregator unions ``invalid_block_ids`` over the workers, and
``Scheduler._handle_invalid_blocks`` in vllm/v1/core/sched/scheduler.py recomputes them). The
failing rank also reports the chunk as gone, so the next lookup misses it, and the scheduler
has the recomputed chunks stored again (``SchedulerCore._after_failed_loads``).
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tutti.serving.planner import Rates
from tutti.store import Store

RANK_FIELD = "{rank}"


def rank_dirs(dirs: Sequence[Any], rank: int) -> list[str]:
    """The directories of one rank: ``dirs`` is a list of paths (``{rank}`` in them is replaced
    by the rank) or a list with one list of paths per rank."""
    if dirs and all(isinstance(d, (list, tuple)) for d in dirs):
        if rank >= len(dirs):
            raise ValueError(f"TuttiConnector: \"dirs\" gives directories for {len(dirs)} "
                             f"ranks, none for rank {rank}")
        dirs = dirs[rank]
    elif any(isinstance(d, (list, tuple)) for d in dirs):
        raise ValueError("TuttiConnector: \"dirs\" is either a list of paths or a list of "
                         "lists of paths (one per tensor-parallel rank), not a mix")
    return [str(d).replace(RANK_FIELD, str(rank)) for d in dirs]


def check_disjoint(dirs: Sequence[Any], nr_ranks: int) -> None:
    """Refuse a configuration in which two ranks would open the same directory: a store admits
    one opener, and the ranks hold different shares of the KV."""
    owner: dict[str, int] = {}
    for rank in range(nr_ranks):
        mine = rank_dirs(dirs, rank)
        if not mine:
            raise ValueError(f"TuttiConnector: no store directory for rank {rank}")
        for d in mine:
            real = os.path.realpath(d)
            other = owner.setdefault(real, rank)
            if other != rank:
                raise ValueError(
                    f"TuttiConnector: with tensor_parallel_size={nr_ranks} every rank needs "
                    f"directories of its own, but ranks {other} and {rank} would both use "
                    f"{d!r}; put {RANK_FIELD} in the paths (\"dirs\": [\"/mnt/nvme0/tutti-"
                    f"{RANK_FIELD}\"]) or give one list of directories per rank")


@dataclass
class RankReport:
    """What one rank's store gained and lost since its previous report."""

    seq: int  # counts the rank's reports: 0, 1, 2, ...
    full: bool = False  # ``added`` is everything the store holds: forget the rest
    added: dict[bytes, int] = field(default_factory=dict)  # key -> paged blocks of the chunk
    removed: list[bytes] = field(default_factory=list)


@dataclass
class WorkerReport:
    """Worker -> scheduler: the store reports of the ranks of one step, and their load and
    compute measurements (planner.py), keyed by rank."""

    reports: dict[int, RankReport] = field(default_factory=dict)  # rank -> RankReport
    rates: dict[int, Rates] = field(default_factory=dict)  # rank -> its running totals

    def merge(self, other: WorkerReport) -> None:
        """Fold in another worker's report of the same step."""
        # One report per rank and step is expected; should a rank appear twice, the later
        # report wins and the view sees the gap and asks that rank for a full listing.
        for rank, rep in other.reports.items():
            mine = self.reports.get(rank)
            if mine is None or rep.seq > mine.seq:
                self.reports[rank] = rep
        # Running totals only grow: the larger is the later.
        for rank, r in other.rates.items():
            have = self.rates.get(rank)
            if have is None or r.load_ns + r.compute_ns >= have.load_ns + have.compute_ns:
                self.rates[rank] = r


class RankView:
    """The scheduler's picture of the stores of ``nr_ranks`` ranks, built from their reports.

    A key is a hit only where every rank reported it; a rank not heard from yet holds nothing."""

    def __init__(self, nr_ranks: int) -> None:
        self.nr_ranks = nr_ranks
        self.held: list[dict[bytes, int]] = [{} for _ in range(nr_ranks)]  # key -> blocks
        # None: waiting for a full listing
        self.next_seq: list[int | None] = [None] * nr_ranks
        self.listed = [False] * nr_ranks  # a full listing received once
        self.resync: set[int] = set()  # ranks asked for a full listing, not yet received

    def apply(self, reports: dict[int, RankReport]) -> None:
        """Fold in one step's reports; a rank whose reports have a gap is asked to resync."""
        for rank, rep in reports.items():
            if not 0 <= rank < self.nr_ranks:
                continue
            if rep.full:
                self.held[rank] = dict(rep.added)
                self.next_seq[rank] = rep.seq + 1
                self.listed[rank] = True
                self.resync.discard(rank)
                continue
            if self.next_seq[rank] is None or rep.seq != self.next_seq[rank]:
                # A delta we cannot place: ignore it, ask for the whole listing.
                self.resync.add(rank)
                self.next_seq[rank] = None
                continue
            held = self.held[rank]
            for k in rep.removed:
                held.pop(k, None)
            held.update(rep.added)
            self.next_seq[rank] = rep.seq + 1

    def ready(self) -> bool:
        """Every rank has sent the listing of its store."""
        return all(self.listed)

    def take_resync(self) -> set[int]:
        """Ranks to ask for a full listing in the next step (each asked once per gap)."""
        asked, self.resync = self.resync, set()
        return asked

    def lookup(self, keys: Sequence[bytes], blocks_per_chunk: int) -> tuple[int, int]:
        """Like ``Store.lookup``: (leading chunks every rank holds, paged blocks they hold); a
        chunk of fewer blocks than a full one ends the chain."""
        hit = blocks = 0
        for k in keys:
            n = min((held.get(k, 0) for held in self.held), default=0)
            if n == 0:
                break
            hit += 1
            blocks += n
            if n < blocks_per_chunk:
                break
        return hit, blocks


class StoreReporter:
    """A worker's side: what its store gained and lost since its last report.

    Saves and failed loads are noted as they happen. Evictions are not seen one by one: when
    the store's eviction counter moves, the store is listed again and compared with what the
    scheduler was told; until then the scheduler may believe an evicted chunk is there, which
    costs one failed load. Listings run at most every ``relist_s`` seconds, and no more often
    than keeps their time under ``relist_share`` of the worker's time (a large store takes
    a while to list, and the worker lists it between two steps)."""

    def __init__(self, rank: int, store: Store, relist_s: float = 1.0,
                 relist_share: float = 0.02) -> None:
        self.rank, self.store = rank, store
        self.relist_s, self.relist_share = relist_s, relist_share
        self.relist_cost = 0.0  # seconds the last listing took
        self.seq = 0
        self.mirror: dict[bytes, int] = {}  # what the scheduler was told this store holds
        self.added: dict[bytes, int] = {}
        self.removed: set[bytes] = set()
        self.full = True  # the first report lists the whole store
        self.evictions: int | None = None
        self.last_relist = float("-inf")
        self.lock = threading.Lock()

    def saved(self, key: bytes, blocks: int) -> None:
        with self.lock:
            self.added[key] = blocks
            self.removed.discard(key)

    def failed(self, key: bytes) -> None:
        """A load of ``key`` failed: report what the store holds under it now."""
        try:
            n, blocks = self.store.lookup([key])
        except OSError:
            return
        with self.lock:
            if n:
                self.added[key] = blocks
                self.removed.discard(key)
            else:
                self.added.pop(key, None)
                self.removed.add(key)

    def request_full(self) -> None:
        with self.lock:
            self.full = True

    def report(self) -> RankReport | None:
        """This step's RankReport, or None when there is nothing to say."""
        with self.lock:
            evictions = self.store.stats()["evictions"]
            now = time.monotonic()
            wait = max(self.relist_s, self.relist_cost / self.relist_share)
            if self.full or (evictions != self.evictions and now - self.last_relist >= wait):
                listing = self.store.keys()
                self.relist_cost = time.monotonic() - now
                if self.full:
                    rep = RankReport(self.seq, True, dict(listing))
                else:
                    rep = RankReport(self.seq, False,
                                     {k: v for k, v in listing.items()
                                      if self.mirror.get(k) != v},
                                     [k for k in self.mirror if k not in listing])
                self.mirror, self.full = listing, False
                self.evictions, self.last_relist = evictions, now
                self.added, self.removed = {}, set()
            elif self.added or self.removed:
                rep = RankReport(self.seq, False, self.added, sorted(self.removed))
                for k in self.removed:
                    self.mirror.pop(k, None)
                self.mirror.update(self.added)
                self.added, self.removed = {}, set()
            else:
                return None
            self.seq += 1
            return rep
