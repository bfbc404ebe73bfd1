# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector's counters in vLLM: ``TuttiConnectorStats`` (what each side counted since its
last report, tutti/serving/counters.py, summed over the workers by vLLM and printed in its "KV
Transfer metrics" log line) and ``TuttiPromMetrics`` (the same counters on vLLM's Prometheus
/metrics as vllm:tutti_*_total)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
    PromMetric,
    PromMetricT,
)

from tutti.serving.counters import ALL_COUNTERS, PIPELINE_COUNTERS, REMOTE_COUNTERS

if TYPE_CHECKING:
    from vllm.config import VllmConfig


@dataclass
class TuttiConnectorStats(KVConnectorStats):
    """Counters since the last report: prompt tokens looked up and found, tokens and bytes
    loaded and saved, chunks that failed to load or save, and time spent moving."""

    def __post_init__(self) -> None:
        for k in ALL_COUNTERS:
            self.data.setdefault(k, 0)

    def reset(self) -> None:
        self.data = {k: 0 for k in ALL_COUNTERS}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for k in ALL_COUNTERS:
            self.data[k] = self.data.get(k, 0) + other.data.get(k, 0)
        return self

    def reduce(self) -> dict[str, int | float]:
        d = self.data
        out: dict[str, int | float] = {
            "lookup_tokens": d["lookup_tokens"],
            "hit_tokens": d["hit_tokens"],
            "hit_rate": round(d["hit_tokens"] / d["lookup_tokens"], 4) if d["lookup_tokens"]
            else 0.0,
            "load_tokens": d["load_tokens"],
            "load_errors": d["load_errors"],
            "save_tokens": d["save_tokens"],
            "save_errors": d["save_errors"],
        }
        for k in ("save_orphans", "save_no_space", "declined_tokens", "delayed_lookups"):
            if d.get(k, 0):
                out[k] = d[k]
        for op in ("load", "save"):
            ns = d[f"{op}_ns"]
            out[f"{op}_GBps"] = round(d[f"{op}_bytes"] / ns, 3) if ns else 0.0
        if any(d.get(k, 0) for k in PIPELINE_COUNTERS):
            for k in PIPELINE_COUNTERS:
                if not k.endswith("_ns"):
                    out[k] = d.get(k, 0)
            out["pipeline_stall_ms"] = round(d.get("pipeline_stall_ns", 0) / 1e6, 3)
            out["pipeline_host_wait_ms"] = round(d.get("pipeline_host_wait_ns", 0) / 1e6, 3)
        if any(d.get(k, 0) for k in REMOTE_COUNTERS):
            for k in REMOTE_COUNTERS:
                if not k.endswith(("_ns", "_bytes")):
                    out[k] = d.get(k, 0)
            ns = d.get("remote_load_ns", 0)
            out["remote_load_GBps"] = round(d.get("remote_load_bytes", 0) / ns, 3) if ns \
                else 0.0
        return out

    def is_empty(self) -> bool:
        return not any(self.data.get(k, 0) for k in ALL_COUNTERS)


class TuttiPromMetrics(KVConnectorPromMetrics):
    """The counters above as Prometheus counters on vLLM's /metrics (vllm:tutti_*_total)."""

    def __init__(self, vllm_config: VllmConfig,
                 metric_types: dict[type[PromMetric], type[PromMetricT]],
                 labelnames: list[str], per_engine_labelvalues: dict[int, list[object]]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters: dict[str, dict[int, Any]] = {}
        for k in ALL_COUNTERS:
            name = k[:-3] + "_seconds" if k.endswith("_ns") else k
            counter = self._counter_cls(name=f"vllm:tutti_{name}", labelnames=labelnames,
                                        documentation=f"TuttiConnector: {name.replace('_', ' ')}")
            self._counters[k] = {i: counter.labels(*v) for i, v in
                                 per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for k, per_engine in self._counters.items():
            v = transfer_stats_data.get(k, 0)
            if v:
                per_engine[engine_idx].inc(v / 1e9 if k.endswith("_ns") else v)
