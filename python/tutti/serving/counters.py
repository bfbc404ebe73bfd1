# SPDX-License-Identifier: Apache-2.0
"""What each side of a connector counts (``Counters``), by name. An adapter hands a side's
counters to its engine's metrics (tutti/vllm/metrics.py: vLLM's "KV Transfer metrics" log
line and its Prometheus counters) and starts a new set."""

from __future__ import annotations

# Saves: tokens and bytes stored; chunks not stored because their parent is not (harmless: a
# chunk whose parent failed to save, or was evicted, is saved again with it), because no slot
# could be freed (the store is too small or all pinned by loads), or because a write failed
# (an I/O error, or a full disk).
COUNTERS: tuple[str, ...] = (
    "lookup_tokens", "hit_tokens", "load_tokens", "load_bytes", "load_errors", "save_tokens",
    "save_bytes", "save_orphans", "save_no_space", "save_errors", "load_ns", "save_ns")
# The remote tier: hits accepted and refused (cost), chunks fetched and failed, bytes and time,
# records rejected, and what the publish thread did.
REMOTE_COUNTERS: tuple[str, ...] = (
    "remote_hit_tokens", "remote_rejected_tokens", "remote_load_tokens", "remote_load_bytes",
    "remote_load_errors", "remote_load_ns", "remote_verify_failures", "remote_timeouts",
    "remote_breaker_trips", "remote_publish_chunks", "remote_publish_bytes",
    "remote_publish_dropped")
# The layerwise pipeline (``layerwise``): steps that loaded through it, layer reads it issued,
# compute time spent waiting for a layer (measured on the GPU with GPU KV), the forward's thread
# blocked at the hooks until a layer's read was issued (on the CPU-driven engines, the read
# itself), layers waited for at the engine's hook for that very layer,
# and layers waited for earlier or later than their hook (the engine skipped the hook or called
# the layers out of order: still correct, less overlap).
PIPELINE_COUNTERS: tuple[str, ...] = (
    "pipeline_steps", "pipeline_layers_loaded", "pipeline_stall_ns", "pipeline_host_wait_ns",
    "pipeline_waits", "pipeline_waits_unhooked")
# Tokens found in the store that the load plan left to the engine to compute, because reading
# them was measured slower than computing them (tutti/serving/planner.py); lookups answered
# "ask again" because another request was loading the same chunks (one per step the request
# waited).
PLAN_COUNTERS: tuple[str, ...] = ("declined_tokens", "delayed_lookups")
ALL_COUNTERS: tuple[str, ...] = COUNTERS + REMOTE_COUNTERS + PIPELINE_COUNTERS + PLAN_COUNTERS


class Counters:
    """Counts since the last report, one per name of ``ALL_COUNTERS`` (durations in ns)."""

    def __init__(self) -> None:
        self.data: dict[str, int] = dict.fromkeys(ALL_COUNTERS, 0)

    def add(self, name: str, value: int) -> None:
        self.data[name] += value

    def is_empty(self) -> bool:
        return not any(self.data.values())
