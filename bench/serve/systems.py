# SPDX-License-Identifier: Apache-2.0
"""The systems the serving benchmark compares, each as vLLM's KV-transfer configuration (and
environment) over the same engine:

- ``recompute``: vLLM alone; a prefix not in its GPU prefix cache is computed again.
- ``tutti``: TuttiConnector with its defaults (a store of the trace's size on the storage).
- ``lmcache``: LMCacheConnectorV1 with its local-disk backend on the storage, O_DIRECT on
  (``extra_config.use_odirect``), its CPU buffer (``max_local_cpu_size``) at the documented
  default, 5 GB.
- ``lmcache-min``: the same with the smallest CPU buffer that serves the trace. LMCache reads
  a request's chunks from disk into buffers taken from that pool, all of the request's chunks
  at once before copying them to the GPU, and a retrieve that cannot get a buffer waits for
  one to be freed: the pool must hold the longest prefix of the trace, in whole chunks
  (``lmcache_min_cpu_gb``).
- ``offload-cpu``: vLLM's OffloadingConnector to CPU memory (what ``--kv-offloading-size``
  sets up), large enough for the trace: the DRAM tier the others are measured against.

``storage_dir`` is None for the systems that use no storage (recompute, offload-cpu).
"""

import math

SYSTEMS = ("recompute", "tutti", "lmcache", "lmcache-min", "offload-cpu")
USES_STORAGE = {"tutti", "lmcache", "lmcache-min"}
LMCACHE_CHUNK = 256  # LMCache's default chunk_size, in tokens
LMCACHE_DEFAULT_CPU_GB = 5.0  # LMCache's default max_local_cpu_size


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


def unavailable(system, device):
    """Why a system cannot run here, or None."""
    if system == "offload-cpu" and device != "cuda":
        return "vLLM's OffloadingConnector needs a GPU"
    if system.startswith("lmcache"):
        try:
            import lmcache  # noqa: F401
        except ImportError:
            return "LMCache is not installed"
    return None


def config(system, storage_dir, work_dir, summary, kv_bytes_per_token):
    """(kv_transfer_config as a dict or None, extra environment, what to record)."""
    cap = store_gb(summary, kv_bytes_per_token)
    if system == "recompute":
        return None, {}, {}
    if system == "tutti":
        extra = {"dirs": [str(storage_dir)], "capacity_gb": cap}
        return ({"kv_connector": "TuttiConnector",
                 "kv_connector_module_path": "tutti.vllm.connector",
                 "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                 "kv_connector_extra_config": extra}, {}, {"capacity_gb": cap})
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
