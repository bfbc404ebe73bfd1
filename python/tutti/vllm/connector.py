# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector: vLLM v1 KV connector backed by a Tutti store (SSD prefix cache).

Turn it on with::

    --kv-transfer-config '{"kv_connector": "TuttiConnector",
                           "kv_connector_module_path": "tutti.vllm.connector",
                           "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                           "kv_connector_extra_config": {"dirs": ["/mnt/nvme0/tutti"],
                                                         "capacity_gb": 500}}'

How it maps vLLM onto the store (docs/vllm.md has the reference):

* A chunk is ``chunk_tokens`` tokens (a multiple of vLLM's block size), stored once per layer as
  one contiguous object. Its key is a digest of vLLM's block hash of the chunk's last block; vLLM
  chains block hashes over the whole prefix, so a key names the prefix up to that chunk. A
  prompt's trailing full blocks that do not fill a chunk are stored as a partial chunk, found
  again by a prompt with the same prefix and length.
* Everything that must not mix lives in the store's namespace: model, dtype, block size, KV
  shape, tensor-parallel rank, vLLM version. A store opened with another namespace is refused.
* Scheduler side: ``get_num_new_matched_tokens`` asks the store for the longest stored prefix of
  the prompt (block-aligned, leaving at least one token to compute); ``build_connector_meta``
  sends the worker this step's loads and the chunks that became complete.
* Worker side: loads run in ``start_load_kv`` before the forward (all layers, every chunk
  checked against its checksum), or, with ``async_load``, on a loader thread while the request
  waits and other requests compute (reported done through ``get_finished``), or, with
  ``layerwise``, layer by layer behind the forward through the library's pipeline
  (``start_load_kv`` begins a pipeline step, vLLM's ``wait_for_layer_load`` waits for one
  layer, ``wait_for_save`` ends the step); saves run in
  ``wait_for_save``, after the step's forward wrote the KV and while the blocks still belong
  to their request. A chunk that cannot be loaded
  (evicted, damaged, I/O error) is reported through ``get_block_ids_with_load_errors``: with
  ``kv_load_failure_policy="recompute"`` vLLM recomputes it, and no error reaches the user.
* Tensor parallelism (``tutti/vllm/ranks.py``): every worker opens the store of its rank; the
  scheduler opens none and counts a chunk as a hit only when every rank reported holding it.
"""

import errno
import hashlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import vllm
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

from tutti.pipeline import Pipeline
from tutti.store import KV, ChunkRequest, Geometry, Store
from tutti.vllm import ranks, remote_tier

log = logging.getLogger("tutti.vllm")

KEY_BYTES = 32


# ---- configuration ----


@dataclass
class TuttiConfig:
    """``kv_connector_extra_config`` (docs/vllm.md, "Configuration")."""

    dirs: list
    capacity_bytes: int
    chunk_tokens: int = 256
    engine: str = "uring"
    durability: str = "fast"
    staging_bytes: int = 0
    gpu_io_workers: int = 0  # 0: the store's defaults (include/tutti/store.h)
    gpu_io_sms: int = 0
    namespace: str = ""
    async_load: bool = False
    layerwise: bool = False
    remote: Any = None  # remote_tier.RemoteConfig: the cross-node tier (docs/cluster.md)

    @classmethod
    def from_extra(cls, extra, block_size):
        extra = dict(extra or {})
        known = {"dirs", "dir", "capacity_gb", "capacity_bytes", "chunk_tokens", "engine",
                 "durability", "staging_mb", "gpu_io_workers", "gpu_io_sms", "namespace",
                 "async_load", "layerwise", "remote"}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ValueError(f"TuttiConnector: unknown kv_connector_extra_config keys {unknown}; "
                             f"known: {sorted(known)}")
        dirs = extra.get("dirs", extra.get("dir"))
        if isinstance(dirs, str):
            dirs = [dirs]
        if not dirs:
            raise ValueError("TuttiConnector: kv_connector_extra_config needs \"dirs\" (a list "
                             "of store directories, one per disk)")
        if "capacity_bytes" in extra:
            capacity = int(extra["capacity_bytes"])
        elif "capacity_gb" in extra:
            capacity = int(float(extra["capacity_gb"]) * 2**30)
        else:
            raise ValueError("TuttiConnector: kv_connector_extra_config needs \"capacity_gb\" "
                             "(store size over all directories)")
        chunk = int(extra.get("chunk_tokens", max(256 // block_size, 1) * block_size))
        if chunk <= 0 or chunk % block_size:
            raise ValueError(f"TuttiConnector: chunk_tokens {chunk} must be a positive multiple "
                             f"of vLLM's block size {block_size}")
        dirs = [[str(x) for x in d] if isinstance(d, (list, tuple)) else str(d) for d in dirs]
        async_load = _flag(extra.get("async_load", False), "async_load")
        layerwise = _flag(extra.get("layerwise", False), "layerwise")
        if async_load and layerwise:
            # An asynchronous load completes while the request waits, outside any forward
            # pass: there is no layer of compute for it to hide behind.
            raise ValueError("TuttiConnector: async_load and layerwise exclude each other: "
                             "async_load loads while the request waits, before its forward "
                             "pass; layerwise loads during the forward pass. Set one of them")
        io = {}
        for k in ("gpu_io_workers", "gpu_io_sms"):
            v = extra.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"TuttiConnector: {k} must be a whole number >= 0 (0: the "
                                 f"store's default), not {v!r}")
            io[k] = v
        return cls(dirs=dirs, capacity_bytes=capacity, chunk_tokens=chunk, **io,
                   engine=str(extra.get("engine", "uring")),
                   durability=str(extra.get("durability", "fast")),
                   staging_bytes=int(float(extra.get("staging_mb", 0)) * 2**20),
                   namespace=str(extra.get("namespace", "")),
                   async_load=async_load, layerwise=layerwise,
                   remote=remote_tier.RemoteConfig.from_extra(extra.get("remote")))


def _flag(v, name):
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("1", "true", "yes", "on"):
        return True
    if str(v).lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"TuttiConnector: {name} must be true or false, not {v!r}")


def _geometry_of(kv_cache_config, chunk_tokens):
    """The store geometry of this rank's KV: one full-attention group of uniform layers."""
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise ValueError("TuttiConnector supports models with one KV-cache group (plain full "
                         f"attention); this one has {len(groups)}")
    spec = groups[0].kv_cache_spec
    for attr in ("block_size", "num_kv_heads", "head_size", "dtype", "page_size_bytes"):
        if not hasattr(spec, attr):
            raise ValueError(f"TuttiConnector: unsupported KV-cache spec {type(spec).__name__}")
    elem = spec.dtype.itemsize
    geo = Geometry(nr_layers=len(groups[0].layer_names), nr_kv_heads=spec.num_kv_heads,
                   head_dim=spec.head_size, elem_bytes=elem, kv_planes=2,
                   block_tokens=spec.block_size, chunk_tokens=chunk_tokens)
    if geo.layer_block_bytes != spec.page_size_bytes:
        raise ValueError(f"TuttiConnector: a KV page is {spec.page_size_bytes} bytes, not the "
                         f"{geo.layer_block_bytes} of K and V for {spec.num_kv_heads} heads x "
                         f"{spec.head_size} x {spec.block_size} tokens")
    return geo, spec


def _namespace(vllm_config, spec, geo, cfg, with_rank=True):
    """What must not mix, as bytes. Without the rank: the namespace shared by every rank of a
    deployment (the remote tier's, whose keys and records carry the rank themselves)."""
    mc, pc, cc = vllm_config.model_config, vllm_config.parallel_config, vllm_config.cache_config
    parts = [
        "tutti-vllm/1",
        f"model={mc.model}@{getattr(mc, 'revision', None)}",
        f"dtype={spec.dtype}",
        f"block={spec.block_size}",
        f"kv={geo.nr_layers}x{spec.num_kv_heads}x{spec.head_size}",
        f"page={spec.page_size_bytes}",
        f"layout={getattr(cc, 'kv_cache_layout', None)}",
        f"device={vllm_config.device_config.device_type}",
        f"tp={getattr(pc, 'rank', 0) if with_rank else '*'}/{pc.tensor_parallel_size}",
        f"pp={pc.pipeline_parallel_size}",
        f"hash={getattr(cc, 'prefix_caching_hash_algo', None)}",
        f"vllm={'.'.join(vllm.__version__.split('.')[:2])}",
        f"user={cfg.namespace}",
    ]
    return "|".join(parts).encode()


# ---- one store per process ----

# The scheduler and the worker of one engine run in one process when tensor parallelism is 1,
# and the store file admits one opener: both roles share the handle through this table, keyed
# by what the store was opened with. It is process-wide because the file lock is.
_stores_lock = threading.Lock()
_stores = {}


def _acquire_store(cfg, dirs, geo, ns):
    key = (tuple(dirs), geo, ns, cfg.engine, cfg.durability)
    with _stores_lock:
        entry = _stores.get(key)
        if entry is None:
            store = Store(dirs, geo, capacity_bytes=cfg.capacity_bytes, ns=ns,
                          engine=cfg.engine, durability=cfg.durability, key_bytes=KEY_BYTES,
                          staging_bytes=cfg.staging_bytes, gpu_io_workers=cfg.gpu_io_workers,
                          gpu_io_sms=cfg.gpu_io_sms)
            entry = _stores[key] = [store, 0]
            log.info("tutti: store %s opened (%s)", dirs, ns.decode())
        entry[1] += 1
        return key, entry[0]


def _release_store(key):
    with _stores_lock:
        entry = _stores.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            entry[0].close()
            del _stores[key]


def chunk_key(block_hash):
    """The store key of the chunk ending with the block of ``block_hash``."""
    return hashlib.blake2b(bytes(block_hash), digest_size=KEY_BYTES).digest()


# ---- metadata (scheduler -> worker) ----


@dataclass
class LoadSpec:
    req_id: str
    keys: list
    first_chunk: int
    skip_blocks: int
    block_ids: list
    remote_from: int = -1  # chunks from this index on come from the remote tier (-1: none)


@dataclass
class SaveSpec:
    req_id: str
    keys: list
    first_chunk: int
    block_ids: list


@dataclass
class TuttiConnectorMetadata(KVConnectorMetadata):
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    resync: set = field(default_factory=set)  # ranks asked to list their whole store
    compute_tokens: int = 0  # tokens the step computes (the layerwise pipeline plans with it)


# ---- statistics ----

_COUNTERS = ("lookup_tokens", "hit_tokens", "load_tokens", "load_bytes", "load_errors",
             "save_tokens", "save_bytes", "save_errors", "load_ns", "save_ns")
# The remote tier: hits accepted and refused (cost), chunks fetched and failed, bytes and time,
# records rejected, and what the publish thread did.
_REMOTE_COUNTERS = ("remote_hit_tokens", "remote_rejected_tokens", "remote_load_tokens",
                    "remote_load_bytes", "remote_load_errors", "remote_load_ns",
                    "remote_verify_failures", "remote_timeouts", "remote_breaker_trips",
                    "remote_publish_chunks", "remote_publish_bytes", "remote_publish_dropped")
_COUNTERS += _REMOTE_COUNTERS
# The layerwise pipeline (``layerwise``): steps that loaded through it, layer reads it issued,
# compute time spent waiting for a layer, layers waited for at vLLM's hook for that very layer,
# and layers waited for earlier or later than their hook (vLLM skipped the hook or called the
# layers out of order: still correct, less overlap).
_PIPELINE_COUNTERS = ("pipeline_steps", "pipeline_layers_loaded", "pipeline_stall_ns",
                      "pipeline_waits", "pipeline_waits_unhooked")
_COUNTERS += _PIPELINE_COUNTERS


@dataclass
class TuttiConnectorStats(KVConnectorStats):
    """Counters since the last report: prompt tokens looked up and found, tokens and bytes
    loaded and saved, chunks that failed to load or save, and time spent moving."""

    def __post_init__(self):
        for k in _COUNTERS:
            self.data.setdefault(k, 0)

    def reset(self):
        self.data = {k: 0 for k in _COUNTERS}

    def aggregate(self, other):
        for k in _COUNTERS:
            self.data[k] = self.data.get(k, 0) + other.data.get(k, 0)
        return self

    def reduce(self):
        d = self.data
        out = {
            "lookup_tokens": d["lookup_tokens"],
            "hit_tokens": d["hit_tokens"],
            "hit_rate": round(d["hit_tokens"] / d["lookup_tokens"], 4) if d["lookup_tokens"]
            else 0.0,
            "load_tokens": d["load_tokens"],
            "load_errors": d["load_errors"],
            "save_tokens": d["save_tokens"],
            "save_errors": d["save_errors"],
        }
        for op in ("load", "save"):
            ns = d[f"{op}_ns"]
            out[f"{op}_GBps"] = round(d[f"{op}_bytes"] / ns, 3) if ns else 0.0
        if any(d.get(k, 0) for k in _PIPELINE_COUNTERS):
            for k in _PIPELINE_COUNTERS:
                if not k.endswith("_ns"):
                    out[k] = d.get(k, 0)
            out["pipeline_stall_ms"] = round(d.get("pipeline_stall_ns", 0) / 1e6, 3)
        if any(d.get(k, 0) for k in _REMOTE_COUNTERS):
            for k in _REMOTE_COUNTERS:
                if not k.endswith(("_ns", "_bytes")):
                    out[k] = d.get(k, 0)
            ns = d.get("remote_load_ns", 0)
            out["remote_load_GBps"] = round(d.get("remote_load_bytes", 0) / ns, 3) if ns \
                else 0.0
        return out

    def is_empty(self):
        return not any(self.data.get(k, 0) for k in _COUNTERS)


class TuttiPromMetrics(KVConnectorPromMetrics):
    """The counters above as Prometheus counters on vLLM's /metrics (vllm:tutti_*_total)."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters = {}
        for k in _COUNTERS:
            name = k[:-3] + "_seconds" if k.endswith("_ns") else k
            counter = self._counter_cls(name=f"vllm:tutti_{name}", labelnames=labelnames,
                                        documentation=f"TuttiConnector: {name.replace('_', ' ')}")
            self._counters[k] = {i: counter.labels(*v) for i, v in
                                 per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data, engine_idx=0):
        for k, per_engine in self._counters.items():
            v = transfer_stats_data.get(k, 0)
            if v:
                per_engine[engine_idx].inc(v / 1e9 if k.endswith("_ns") else v)


# ---- the connector ----


@dataclass
class _LayerwiseStep:
    sid: int  # the pipeline's step id
    specs: list  # its loads, in the order of the chunk statuses
    t0: int
    next_layer: int = 0  # the first layer not waited for yet
    broken: bool = False  # a wait failed: the step's chunks count as failed


@dataclass
class _ReqState:
    request: Any
    prompt_blocks: int  # full blocks of the prompt
    block_ids: list = field(default_factory=list)
    saved_chunks: int = 0  # leading full chunks known to be stored
    tail_done: bool = False  # the prompt's partial chunk stored (or loaded)
    loaded: Any = None  # (index of the first block loaded, their block ids) of the last load


class TuttiConnector(KVConnectorBase_V1):
    """vLLM v1 KV connector storing prefix KV in a Tutti store."""

    @property
    def requires_kv_delivery(self):
        return False  # a cache: a dropped save is a future miss, never a correctness issue

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config):
        # Layerwise loads wait in vLLM's per-layer hooks, which a replayed full CUDA graph
        # skips: the forward would read layers not loaded yet.
        try:
            return _flag((extra_config or {}).get("layerwise", False), "layerwise")
        except ValueError:
            return False  # refused with a clear message when the connector starts

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        if kv_cache_config is None:
            raise ValueError("TuttiConnector needs the KV-cache config (vLLM >= 0.11)")
        pc = vllm_config.parallel_config
        if pc.pipeline_parallel_size != 1:
            raise ValueError("TuttiConnector does not support pipeline parallelism "
                             f"(pipeline_parallel_size={pc.pipeline_parallel_size}); use "
                             "tensor_parallel_size for several devices")
        self.block_size = vllm_config.cache_config.block_size
        self.cfg = TuttiConfig.from_extra(
            self._kv_transfer_config.kv_connector_extra_config, self.block_size)
        # Tensor parallelism (tutti/vllm/ranks.py): each worker process opens the store of its
        # rank; the scheduler, in a process of its own, opens none and learns what every rank
        # holds from the workers' reports.
        self.tp = pc.tensor_parallel_size
        self.rank = getattr(pc, "rank", 0) % self.tp
        ranks.check_disjoint(self.cfg.dirs, self.tp)
        if self.tp > 1 and self.cfg.remote is not None:
            raise ValueError("TuttiConnector: the remote tier (\"remote\") does not support "
                             "tensor parallelism yet")
        self.bpc = self.cfg.chunk_tokens // self.block_size
        self.geo, spec = _geometry_of(kv_cache_config, self.cfg.chunk_tokens)
        self.ns = _namespace(vllm_config, spec, self.geo, self.cfg)
        self._num_blocks = kv_cache_config.num_blocks
        self._view = self._reporter = None
        self._store_key, self.store = None, None
        if self.tp > 1 and role == KVConnectorRole.SCHEDULER:
            self._view = ranks.RankView(self.tp)
            self._view_since = None  # when the scheduler first waited for the listings
        else:
            self._store_key, self.store = _acquire_store(
                self.cfg, ranks.rank_dirs(self.cfg.dirs, self.rank), self.geo, self.ns)
            if self.tp > 1:
                self._reporter = ranks.StoreReporter(self.rank, self.store)
        # With several ranks, rank 0 alone counts tokens (each rank moves its share of the
        # same tokens); bytes, times and errors are counted by every rank.
        self._count_tokens = self.rank == 0
        self._remote_key, self.remote = None, None
        self._remote_seen = {}  # the remote handle's publish counters already reported
        self._remote_local_hits = {}  # request -> local chunks, when the remote tier adds some
        if self.cfg.remote is not None:
            try:
                pc = vllm_config.parallel_config
                self._remote_key, self.remote = remote_tier.acquire(
                    self.cfg.remote, self.geo,
                    _namespace(vllm_config, spec, self.geo, self.cfg, with_rank=False),
                    rank=getattr(pc, "rank", 0),
                    nr_ranks=pc.tensor_parallel_size * pc.pipeline_parallel_size,
                    tp=pc.tensor_parallel_size, pp=pc.pipeline_parallel_size)
            except Exception as e:  # the cluster is a cache: serve from the local store
                log.warning("tutti: remote tier unavailable (%s); serving from the local store "
                            "only", e)
        self._stats = TuttiConnectorStats()
        # scheduler side
        self._reqs = {}
        self._lookups = {}
        self._pending_loads = {}
        # worker side
        self._kv = None
        self._load_errors = set()
        # asynchronous loads: one thread moves them; finished ids and their errors are handed
        # to vLLM together (errors no later than the step that reports the request done)
        self._loader = None
        self._done_lock = threading.Lock()
        self._loads_done = set()
        # layerwise loads: the pipeline over this worker's store and KV, the position of each
        # layer name in the KV's layer order, and the step in flight between start_load_kv
        # and wait_for_save
        self._config_layers = list(kv_cache_config.kv_cache_groups[0].layer_names)
        self._pipe = None
        self._layer_index = {}
        self._kv_mem = "host"
        self._step = None
        self._pipe_failed = False  # a wait failed: the pipeline is not used again
        self._pipe_seen = {}  # the pipeline's counters already reported

    # -- keys --

    def _chunk_keys(self, block_hashes, nr_blocks):
        """Keys of the chunks holding the first ``nr_blocks`` blocks (the last may be partial)."""
        keys = [chunk_key(block_hashes[end - 1])
                for end in range(self.bpc, nr_blocks + 1, self.bpc)]
        if nr_blocks % self.bpc:
            keys.append(chunk_key(block_hashes[nr_blocks - 1]))
        return keys

    # -- scheduler side --

    def on_new_request(self, request):
        prompt = request.num_prompt_tokens
        self._reqs[request.request_id] = _ReqState(request, prompt // self.block_size)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        bs = self.block_size
        hashes = request.block_hashes
        # At least one prompt token is computed (for the logits); counts stay block-aligned.
        limit = min(len(hashes), (request.num_prompt_tokens - 1) // bs)
        if limit * bs <= num_computed_tokens:
            return 0, False
        # The keys the chunks of these blocks were saved under: every full chunk, then the
        # trailing full blocks as a partial chunk. A chunk stored whole may be loaded in part.
        keys = self._chunk_keys(hashes, len(hashes))
        if self._view is not None:
            if not self._view_ready():
                return None, False  # asked again next step
            hit, hit_blocks = self._view.lookup(keys, self.bpc)
        else:
            hit, hit_blocks = self.store.lookup(keys)
        local_hit = hit
        if self.remote is not None and hit < len(keys) and hit_blocks < limit:
            more = self._remote_lookup(keys, hit, hit_blocks, limit, num_computed_tokens)
            if more:
                hit += more
                hit_blocks = min(hit * self.bpc, len(hashes))
                self._remote_local_hits[request.request_id] = local_hit
            else:
                self._remote_local_hits.pop(request.request_id, None)
        ext = max(0, min(hit_blocks, limit) * bs - num_computed_tokens)
        # Counted when the request is admitted (this may be asked again before then).
        # Chunks from the remote tier are not in the local store yet: they are saved (promoted)
        # like computed ones once loaded.
        partial_hit = local_hit == len(keys) and len(hashes) % self.bpc != 0
        self._lookups[request.request_id] = (num_computed_tokens, keys[:hit],
                                             limit * bs - num_computed_tokens,
                                             local_hit - partial_hit, partial_hit)
        return ext, self.cfg.async_load and ext > 0

    # How long the scheduler holds requests back at start-up waiting for every rank's listing;
    # past it, it schedules them with what it has (a rank not heard from holds nothing).
    VIEW_WAIT_S = 60.0

    def _view_ready(self):
        if self._view.ready():
            return True
        now = time.monotonic()
        if self._view_since is None:
            self._view_since = now
        if now - self._view_since < self.VIEW_WAIT_S:
            return False
        log.warning("tutti: no store listing from ranks %s after %.0f s; scheduling without "
                    "their chunks", [r for r, ok in enumerate(self._view.listed) if not ok],
                    self.VIEW_WAIT_S)
        self._view.listed = [True] * self.tp
        return True

    def update_connector_output(self, connector_output):
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if self._view is not None and isinstance(meta, ranks.TuttiWorkerMetadata):
            self._view.apply(meta.reports)
        if connector_output.invalid_block_ids:
            self._after_failed_loads(connector_output.invalid_block_ids)

    def _after_failed_loads(self, bad):
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

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        found = self._lookups.pop(request.request_id, None)
        if found is None:
            return
        num_computed, keys, looked_up, full_hit, partial_hit = found
        self._stats.data["lookup_tokens"] += looked_up
        self._stats.data["hit_tokens"] += num_external_tokens
        if num_external_tokens == 0:
            return
        bs = self.block_size
        first = num_computed // bs
        last = (num_computed + num_external_tokens) // bs
        nr_keys = -(-last // self.bpc)
        block_ids = list(blocks.get_block_ids()[0])
        local_hit = self._remote_local_hits.pop(request.request_id, None)
        self._pending_loads[request.request_id] = LoadSpec(
            request.request_id, keys[:nr_keys], first // self.bpc, first % self.bpc,
            block_ids[first:last],
            remote_from=local_hit if local_hit is not None and local_hit < nr_keys else -1)
        state = self._reqs.get(request.request_id)
        if state is not None:
            # What was found need not be written again.
            state.saved_chunks = max(state.saved_chunks, full_hit)
            state.tail_done = state.tail_done or partial_hit
            state.loaded = (first, block_ids[first:last])

    def _saves_of(self, state, req_id, done_tokens):
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

    def build_connector_meta(self, scheduler_output):
        meta = TuttiConnectorMetadata()
        scheduled = scheduler_output.num_scheduled_tokens
        # Every load decided since the last step: synchronous ones belong to requests scheduled
        # now, asynchronous ones to requests that wait for them (WAITING_FOR_REMOTE_KVS).
        meta.loads = list(self._pending_loads.values())
        self._pending_loads.clear()
        meta.compute_tokens = int(getattr(scheduler_output, "total_num_scheduled_tokens", 0))
        if self._view is not None:
            meta.resync = self._view.take_resync()
        for new in scheduler_output.scheduled_new_reqs:
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

    def request_finished(self, request, block_ids):
        self._reqs.pop(request.request_id, None)
        self._lookups.pop(request.request_id, None)
        self._pending_loads.pop(request.request_id, None)
        self._remote_local_hits.pop(request.request_id, None)
        return False, None  # saves finish within the step that computed the blocks

    # -- worker side --

    def register_kv_caches(self, kv_caches):
        """Each layer's paged tensor as segments: (B, ...) tensors are one segment per layer,
        K/V-first (2, B, ...) tensors two."""
        segs, per_layer, mem = [], None, "host"
        if len(kv_caches) != self.geo.nr_layers:
            raise ValueError(f"TuttiConnector: {len(kv_caches)} KV tensors for "
                             f"{self.geo.nr_layers} layers")
        page = self.geo.layer_block_bytes
        for name, t in kv_caches.items():
            item = t.element_size()
            if t.shape[0] == self._num_blocks:
                layer = [(t.data_ptr(), t.stride(0) * item, page)]
            elif t.shape[0] == 2 and t.shape[1] == self._num_blocks:
                layer = [(t[i].data_ptr(), t.stride(1) * item, page // 2) for i in range(2)]
            else:
                raise ValueError(f"TuttiConnector: layer {name}: KV tensor of shape "
                                 f"{tuple(t.shape)} is neither (blocks, ...) nor (2, blocks, ...)"
                                 f" with {self._num_blocks} blocks")
            block = t[0] if len(layer) == 1 else t[0][0]
            if not block.is_contiguous() or block.numel() * item != layer[0][2]:
                raise ValueError(f"TuttiConnector: layer {name}: a block of shape "
                                 f"{tuple(block.shape)} is not one contiguous page")
            if per_layer not in (None, len(layer)):
                raise ValueError("TuttiConnector: layers with different KV layouts")
            per_layer = len(layer)
            mem = "cuda" if t.is_cuda else "host"
            segs.extend(layer)
        self._kv = KV(self.geo, segs, per_layer, self._num_blocks, mem=mem)
        self._kv_mem = mem
        # The store's layer l is the l-th tensor registered here; the pipeline's layers are
        # the store's.
        self._layer_index = {name: i for i, name in enumerate(kv_caches)}
        log.info("tutti: registered %d layers, %d blocks of %d bytes (%s, %d segment%s/layer)",
                 self.geo.nr_layers, self._num_blocks, page, mem, per_layer,
                 "s" if per_layer > 1 else "")
        if self.cfg.layerwise:
            self._start_pipeline(list(kv_caches))

    def _start_pipeline(self, names):
        if names != self._config_layers:
            # Correct either way (a layer waited for early or late is still loaded before it
            # is read), but loads then overlap less with compute.
            log.warning("tutti: vLLM registered the KV of layers %s in another order than its "
                        "KV-cache config lists them (%s); layerwise loads follow the "
                        "registration order", names, self._config_layers)
        # No save staging (saves stay in wait_for_save, see there) and no timeline: the
        # pipeline only loads.
        self._pipe = Pipeline(self.store, self._kv, save_staging_bytes=0, trace_events=0)
        log.info("tutti: layerwise loads over %d layers (%s KV)", len(names), self._kv_mem)

    def _chunk_blocks(self, spec, index):
        """Block ids of chunk ``spec.first_chunk + index`` within the spec's block list."""
        start = 0 if index == 0 else self.bpc - spec.skip_blocks + (index - 1) * self.bpc
        length = self.bpc - spec.skip_blocks if index == 0 else self.bpc
        return spec.block_ids[start:start + length]

    def _load(self, spec):
        """One request's load; returns the block ids that could not be loaded."""
        t0 = time.perf_counter_ns()
        try:
            if spec.remote_from >= 0 and self.remote is not None:
                status = self._load_with_remote(spec)
            else:
                _, status = self.store.load(self._kv, [ChunkRequest(
                    spec.keys, spec.block_ids, spec.first_chunk, spec.skip_blocks)])
        except OSError as e:
            log.warning("tutti: load of %s failed: %s; vLLM recomputes it", spec.req_id, e)
            status = [-e.errno] * (len(spec.keys) - spec.first_chunk)
        return self._account_load(spec, status, time.perf_counter_ns() - t0)

    def _account_load(self, spec, status, ns):
        """Count one request's load (``status``: one entry per chunk, 0 or -errno); returns
        the block ids that could not be loaded."""
        failed = set()
        with self._done_lock:
            self._stats.data["load_ns"] += ns
            for i, rc in enumerate(status):
                blocks = self._chunk_blocks(spec, i)
                if rc != 0:
                    failed.update(blocks)
                    self._stats.data["load_errors"] += 1
                else:
                    if self._count_tokens:
                        self._stats.data["load_tokens"] += len(blocks) * self.block_size
                    self._stats.data["load_bytes"] += len(blocks) * self.geo.layer_block_bytes \
                        * self.geo.nr_layers
        if self._reporter is not None:
            for i, rc in enumerate(status):
                if rc != 0:
                    self._reporter.failed(spec.keys[spec.first_chunk + i])
        return failed

    def _load_async(self, spec):
        failed = self._load(spec)
        with self._done_lock:
            self._load_errors.update(failed)
            self._loads_done.add(spec.req_id)

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        if self._reporter is not None and self.rank in meta.resync:
            self._reporter.request_full()
        if self._pipe is not None and not self._pipe_failed:
            self._start_layerwise(meta)
            return
        for spec in meta.loads:
            if self.cfg.async_load:
                if self._loader is None:
                    self._loader = ThreadPoolExecutor(1, thread_name_prefix="tutti-load")
                self._loader.submit(self._load_async, spec)
            else:
                failed = self._load(spec)
                with self._done_lock:
                    self._load_errors.update(failed)

    def wait_for_layer_load(self, layer_name):
        # Without layerwise, loads complete in start_load_kv.
        if self._step is None:
            return
        layer = self._layer_index.get(layer_name)
        if layer is None:
            return  # not a layer whose KV was registered (nothing of it is loaded)
        self._wait_through(layer, hooked=True)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return  # whole chunks are saved in wait_for_save, once every layer is written

    def wait_for_save(self):
        # The forward pass is over: every layer of the step's loads has been read by now.
        self._finish_layerwise()
        meta = self._get_connector_metadata()
        for spec in meta.saves:
            spec = self._without_failed_loads(spec)
            if spec is None:
                continue
            t0 = time.perf_counter_ns()
            try:
                _, status = self.store.save(self._kv, [ChunkRequest(
                    spec.keys, spec.block_ids, spec.first_chunk)])
            except OSError as e:
                log.warning("tutti: save of %s failed: %s", spec.req_id, e)
                status = [-e.errno] * (len(spec.keys) - spec.first_chunk)
            with self._done_lock:
                self._stats.data["save_ns"] += time.perf_counter_ns() - t0
                for i, rc in enumerate(status):
                    nb = min(self.bpc, len(spec.block_ids) - i * self.bpc)
                    if rc >= 0 and self._reporter is not None:
                        self._reporter.saved(spec.keys[spec.first_chunk + i], nb)
                    if rc == 0:
                        if self._count_tokens:
                            self._stats.data["save_tokens"] += nb * self.block_size
                        self._stats.data["save_bytes"] += nb * self.geo.layer_block_bytes \
                            * self.geo.nr_layers
                    elif rc < 0:
                        self._stats.data["save_errors"] += 1
            if self.remote is not None and self.remote.publish_enabled:
                self._publish(spec, status)

    def build_connector_worker_meta(self):
        if self._reporter is None:
            return None
        rep = self._reporter.report()
        if rep is None:
            return None
        return ranks.TuttiWorkerMetadata({self.rank: rep})

    def get_block_ids_with_load_errors(self):
        # vLLM calls this before wait_for_save when it defers that call past a draft model's
        # forward (speculative decoding): a step's failed chunks are still reported with it.
        self._finish_layerwise()
        with self._done_lock:
            errors, self._load_errors = self._load_errors, set()
        return errors

    def get_finished(self, finished_req_ids):
        # Saves finish within their step; asynchronous loads finish here.
        with self._done_lock:
            done, self._loads_done = self._loads_done, set()
        return None, (done or None)

    def get_kv_connector_stats(self):
        self._remote_stats()
        self._pipeline_stats()
        with self._done_lock:
            if self._stats.is_empty():
                return None
            out, self._stats = self._stats, TuttiConnectorStats()
        return out

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return TuttiConnectorStats(data=dict(data) if data else {})

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return TuttiPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self):
        if self._loader is not None:
            self._loader.shutdown(wait=True)  # no load may run into freed memory
            self._loader = None
        if self._pipe is not None:
            self._finish_layerwise()
            self._pipe.close()  # before the KV and the store it uses
            self._pipe = None
        if self._remote_key is not None:
            remote_tier.release(self._remote_key, self.cfg.remote.flush_on_exit_ms)
            self._remote_key, self.remote = None, None
        if self._kv is not None:
            self._kv.close()
            self._kv = None
        if self._store_key is not None:
            _release_store(self._store_key)
            self._store_key = None

    # -- layerwise loads (``layerwise``) --
    #
    # A step's loads are one pipeline step: start_load_kv begins it (the pipeline's thread
    # starts reading, layer by layer), vLLM's attention hook calls wait_for_layer_load before
    # each layer's attention, and wait_for_save ends it and collects the per-chunk statuses.
    # The pipeline needs every layer waited for, in order: a hook for layer l waits for every
    # layer up to l not waited for yet (so a skipped or early hook costs overlap, never
    # correctness), and the end of the step waits for the layers no hook asked for.
    # Requests with chunks from the remote tier load before the forward, as without
    # layerwise. Saves keep the wait_for_save path: it reports per chunk what was stored,
    # which the tensor-parallel reporter and the metrics need, and a chunk is complete only
    # once every layer is written.

    def _start_layerwise(self, meta):
        self._finish_layerwise()  # a step left open by a forward that never ended
        piped, others = [], []
        for spec in meta.loads:
            remote = spec.remote_from >= 0 and self.remote is not None
            (others if remote else piped).append(spec)
        if piped:
            stream = None
            if self._kv_mem == "cuda":
                # The forward's stream: vLLM runs it on a stream of its own per process (not
                # the legacy default stream, which the pipeline refuses).
                from vllm.utils.torch_utils import current_stream

                stream = current_stream().cuda_stream
            try:
                sid = self._pipe.begin_step(
                    loads=[ChunkRequest(s.keys, s.block_ids, s.first_chunk, s.skip_blocks)
                           for s in piped],
                    compute_tokens=meta.compute_tokens, stream=stream)
                self._step = _LayerwiseStep(sid, piped, time.perf_counter_ns())
            except OSError as e:
                log.warning("tutti: layerwise step refused (%s); loading before the forward "
                            "pass", e)
                others = meta.loads
        for spec in others:
            failed = self._load(spec)
            with self._done_lock:
                self._load_errors.update(failed)

    def _wait_through(self, layer, hooked=False):
        """Wait for the step's layers up to ``layer``, in order."""
        st = self._step
        if layer < st.next_layer:
            return  # waited for already (an earlier hook, or a repeated one)
        with self._done_lock:
            self._stats.data["pipeline_waits"] += 1 if hooked else 0
            self._stats.data["pipeline_waits_unhooked"] += layer - st.next_layer + \
                (0 if hooked else 1)
        while st.next_layer <= layer:
            if not st.broken:
                try:
                    self._pipe.wait_layer(st.next_layer)
                except OSError as e:
                    # The pipeline cannot take this step's later layers any more (it takes
                    # them in order only), nor another step: load before the forward from
                    # now on.
                    log.error("tutti: layerwise wait for layer %d failed (%s); the step's "
                              "chunks are recomputed, and later loads complete before the "
                              "forward pass", st.next_layer, e)
                    st.broken = True
                    self._pipe_failed = True
            st.next_layer += 1

    def _finish_layerwise(self):
        """End the step in flight, if any, and account its loads."""
        st = self._step
        if st is None:
            return
        self._wait_through(self.geo.nr_layers - 1)
        self._step = None
        res = None
        if not st.broken:
            try:
                self._pipe.end_step()
                res = self._step_result(st.sid)
            except OSError as e:
                log.error("tutti: layerwise step %d failed (%s); its chunks are recomputed, "
                          "and later loads complete before the forward pass", st.sid, e)
                self._pipe_failed = True
        status = res["status"] if res is not None else None
        ns = res["load_ns"] if res is not None else time.perf_counter_ns() - st.t0
        at = 0
        for spec in st.specs:
            n = len(spec.keys) - spec.first_chunk
            failed = self._account_load(
                spec, status[at:at + n] if status is not None else [-errno.EIO] * n,
                ns if at == 0 else 0)
            at += n
            with self._done_lock:
                self._load_errors.update(failed)

    def _step_result(self, sid):
        """The step's result once the pipeline finalised it (right after the last layer in
        CPU mode; in GPU mode once the stream passed the last wait)."""
        deadline = time.monotonic() + 120
        delay = 20e-6
        while True:
            res = self._pipe.result(sid)
            if res is not None:
                return res
            if time.monotonic() > deadline:
                raise OSError(errno.ETIMEDOUT, f"step {sid} not final after 120 s")
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    def _pipeline_stats(self):
        if self._pipe is None:
            return
        st = self._pipe.stats()
        with self._done_lock:
            for name, src in (("pipeline_steps", "steps"),
                              ("pipeline_layers_loaded", "layers_loaded"),
                              ("pipeline_stall_ns", "stall_ns")):
                delta = st[src] - self._pipe_seen.get(src, 0)
                if delta > 0:
                    self._stats.data[name] += delta
                    self._pipe_seen[src] = st[src]

    # -- the remote tier (docs/cluster.md) --

    def _remote_lookup(self, keys, hit, hit_blocks, limit, num_computed):
        """Chunks after the local hit that the remote tier holds and that are worth fetching."""
        try:
            more = self.remote.lookup(keys, hit)
        except OSError as e:
            log.debug("tutti: remote lookup failed (%s); local hits only", e)
            return 0
        if more == 0:
            return 0
        tokens = (min((hit + more) * self.bpc, limit) - max(hit_blocks, num_computed
                                                             // self.block_size)) \
            * self.block_size
        if tokens <= 0:
            return 0
        if not remote_tier.worth_fetching(self.cfg.remote, self.remote, more, tokens,
                                          self.remote.record_bytes):
            self._stats.data["remote_rejected_tokens"] += tokens
            return 0
        self._stats.data["remote_hit_tokens"] += tokens
        return more

    def _load_with_remote(self, spec):
        """Chunks before spec.remote_from from the local store, the others from the remote
        tier (fetched, verified, scattered); one status per chunk."""
        split = max(spec.remote_from, spec.first_chunk)
        nr_local = len(spec.keys[spec.first_chunk:split])
        local_blocks = 0 if nr_local == 0 else self.bpc - spec.skip_blocks + \
            (nr_local - 1) * self.bpc
        status = []
        if nr_local:
            _, status = self.store.load(self._kv, [ChunkRequest(
                spec.keys[:split], spec.block_ids[:local_blocks], spec.first_chunk,
                spec.skip_blocks)])
        t0 = time.perf_counter_ns()
        _, remote_status = self.remote.fetch(self._kv, [ChunkRequest(
            spec.keys, spec.block_ids[local_blocks:], split,
            spec.skip_blocks if nr_local == 0 else 0)])
        with self._done_lock:
            d = self._stats.data
            d["remote_load_ns"] += time.perf_counter_ns() - t0
            for i, rc in enumerate(remote_status):
                if rc == 0:
                    blocks = len(self._chunk_blocks(spec, nr_local + i))
                    d["remote_load_tokens"] += blocks * self.block_size
                    d["remote_load_bytes"] += self.remote.record_bytes
                else:
                    d["remote_load_errors"] += 1
        if any(rc != 0 for rc in remote_status):
            log.info("tutti: %d of %d remote chunks of %s failed to load (%s); vLLM "
                     "recomputes them", sum(rc != 0 for rc in remote_status),
                     len(remote_status), spec.req_id, remote_status)
        return list(status) + list(remote_status)

    def _without_failed_loads(self, spec):
        """The save spec cut before its first chunk holding a block whose load failed in this
        step: such a block holds no verified KV yet (vLLM recomputes it later), and must not be
        stored under the chunk's key."""
        with self._done_lock:
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

    def _publish(self, spec, status):
        """Queue the chunks of a save that are in the local store (stored or already present)
        for the remote tier, up to the first that is not."""
        ok = 0
        while ok < len(status) and status[ok] >= 0:
            ok += 1
        if ok == 0:
            return
        try:
            self.remote.publish(self._kv, [ChunkRequest(
                spec.keys[:spec.first_chunk + ok], spec.block_ids[:ok * self.bpc],
                spec.first_chunk)])
        except OSError as e:
            log.debug("tutti: publishing %s failed: %s", spec.req_id, e)

    def _remote_stats(self):
        """Fold the remote handle's counters (publish thread, verification) into the stats.
        The worker does it: a scheduler in the same process shares the handle."""
        if self.remote is None or self._kv is None:
            return
        st = self.remote.stats()
        with self._done_lock:
            for name, src in (("remote_publish_chunks", "publish_chunks"),
                              ("remote_publish_bytes", "publish_bytes"),
                              ("remote_publish_dropped", "publish_dropped"),
                              ("remote_verify_failures", "verify_failures"),
                              ("remote_timeouts", "timeouts"),
                              ("remote_breaker_trips", "breaker_trips")):
                delta = st[src] - self._remote_seen.get(src, 0)
                if delta > 0:
                    self._stats.data[name] += delta
                    self._remote_seen[src] = st[src]
