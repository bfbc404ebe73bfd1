# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector: vLLM v1 KV connector backed by a Tutti store (SSD prefix cache).

Turn it on with::

    --kv-transfer-config '{"kv_connector": "TuttiConnector",
                           "kv_connector_module_path": "tutti.vllm.connector",
                           "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                           "kv_connector_extra_config": {"dirs": ["/mnt/nvme0/tutti"],
                                                         "capacity_gb": 500}}'

vLLM creates the connector twice: once in the scheduler's process (role SCHEDULER) and once in
every worker (role WORKER). This class is the thin shape vLLM sees; the work is done by
``TuttiScheduler`` (tutti/vllm/scheduler.py) or ``TuttiWorker`` (tutti/vllm/worker.py), vLLM's
faces of the serving core (tutti/serving/), from a ``ConnectorContext``
(tutti/vllm/context.py). docs/vllm.md has the reference:

* A chunk is ``chunk_tokens`` tokens (a multiple of vLLM's block size), stored once per layer as
  one contiguous object. Its key is a digest of vLLM's block hash of the chunk's last block; vLLM
  chains block hashes over the whole prefix, so a key names the prefix up to that chunk. A
  prompt's trailing full blocks that do not fill a chunk are stored as a partial chunk, found
  again by a prompt with the same prefix and length.
* Everything that must not mix lives in the store's namespace: the weights (fingerprinted,
  tutti/serving/fingerprint.py), dtype, block size, KV shape, tensor-parallel rank, vLLM version.
  A directory that holds a store of another namespace gets an empty one (logged).
* Processes: every worker opens the store of its rank. The scheduler opens it only where the
  worker runs in its process (vLLM's uni-process executor); elsewhere (the multiprocess
  executor, tensor parallelism: ``tutti/serving/ranks.py``) it opens none and counts a chunk as a
  hit only when every rank reported holding it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
    PromMetric,
    PromMetricT,
)

from tutti.serving.config import TuttiConfig, parse_auto_flag
from tutti.serving.keys import KEY_BYTES, chunk_key
from tutti.serving.steps import LoadSpec, SaveSpec
from tutti.vllm import compat
from tutti.vllm.context import ConnectorContext
from tutti.vllm.data import TuttiConnectorMetadata
from tutti.vllm.metrics import TuttiConnectorStats, TuttiPromMetrics
from tutti.vllm.scheduler import TuttiScheduler
from tutti.vllm.worker import TuttiWorker

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

__all__ = ["KEY_BYTES", "LoadSpec", "SaveSpec", "TuttiConfig", "TuttiConnector",
           "TuttiConnectorMetadata", "chunk_key"]


class TuttiConnector(KVConnectorBase_V1):
    """vLLM v1 KV connector storing prefix KV in a Tutti store."""

    if compat.CacheHitSource is not None:  # vLLM 0.32: hits counted by tier
        _cache_hit_source = compat.CacheHitSource.DISK

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a cache: a dropped save is a future miss, never a correctness issue

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        # Layerwise loads wait in vLLM's per-layer hooks, which a replayed full CUDA graph
        # skips: the forward would read layers not loaded yet. Only an explicit
        # "layerwise": true turns them on (with "async_load": true it is refused at start-up).
        try:
            return parse_auto_flag((extra_config or {}).get("layerwise", "auto"),
                                   "layerwise") is True
        except ValueError:
            return False  # refused with a clear message when the connector starts

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole,
                 kv_cache_config: KVCacheConfig | None = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role,
                         kv_cache_config=kv_cache_config)  # type: ignore[arg-type]
        if kv_cache_config is None:
            raise ValueError("TuttiConnector needs the KV-cache config (vLLM >= 0.11)")
        self.ctx = ConnectorContext(vllm_config, kv_cache_config)
        self.scheduler: TuttiScheduler | None = None
        self.worker: TuttiWorker | None = None
        if role == KVConnectorRole.SCHEDULER:
            compat.check_version()  # once per engine: its scheduler
            self.scheduler = TuttiScheduler(self.ctx)
        else:
            self.worker = TuttiWorker(self.ctx)

    def _sched(self) -> TuttiScheduler:
        assert self.scheduler is not None, "a scheduler-side call on a worker's connector"
        return self.scheduler

    def _work(self) -> TuttiWorker:
        assert self.worker is not None, "a worker-side call on the scheduler's connector"
        return self.worker

    def _meta(self) -> TuttiConnectorMetadata:
        meta = self._get_connector_metadata()
        assert isinstance(meta, TuttiConnectorMetadata)
        return meta

    # -- scheduler side --

    def on_new_request(self, request: Request) -> None:
        self._sched().on_new_request(request)

    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        return self._sched().get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        self._sched().update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        return self._sched().build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        self._sched().update_connector_output(connector_output)

    def get_external_cache_hit_sources(self, request: Request,
                                       num_external_tokens: int) -> dict[Any, int]:
        """vLLM 0.32 (no such call in 0.26): the tokens of a hit by the tier that supplied
        them, the local store (disk) or the remote tier (another node's pool, which vLLM counts
        as unspecified)."""
        if compat.CacheHitSource is None or num_external_tokens == 0:
            return {}
        remote = self._sched().remote_hit_tokens(request.request_id, num_external_tokens)
        out = {compat.CacheHitSource.DISK: num_external_tokens - remote,
               compat.CacheHitSource.EXTERNAL_UNSPECIFIED: remote}
        return {k: v for k, v in out.items() if v}

    def request_finished(self, request: Request,
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self._sched().request_finished(request, block_ids)

    # -- worker side --

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._work().register_kv_caches(kv_caches)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        # vLLM binds a step's metadata before its forward pass in every model runner: the
        # worker times the pass from here (tutti/serving/planner.py).
        super().bind_connector_metadata(connector_metadata)
        if self.worker is not None and isinstance(connector_metadata, TuttiConnectorMetadata):
            self.worker.step_begins(connector_metadata)

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        assert isinstance(kv_connector_metadata, TuttiConnectorMetadata)
        self._work().handle_preemptions(kv_connector_metadata)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        self._work().start_load_kv(self._meta())

    def wait_for_layer_load(self, layer_name: str) -> None:
        self._work().wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: AttentionMetadata, **kwargs: Any) -> None:
        return  # whole chunks are saved in wait_for_save, once every layer is written

    def wait_for_save(self) -> None:
        self._work().wait_for_save(self._meta())

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        return self._work().build_connector_worker_meta()

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._work().get_block_ids_with_load_errors()

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None,
                                                               set[str] | None]:
        return self._work().get_finished(finished_req_ids)

    # -- both sides --

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        if self.worker is not None:
            return self.worker.take_stats()
        return self._sched().take_stats()

    @classmethod
    def build_kv_connector_stats(cls,
                                 data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return TuttiConnectorStats(data=dict(data) if data else {})

    @classmethod
    def build_prom_metrics(cls, vllm_config: VllmConfig,
                           metric_types: dict[type[PromMetric], type[PromMetricT]],
                           labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]
                           ) -> KVConnectorPromMetrics:
        return TuttiPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()
        if self.scheduler is not None:
            self.scheduler.shutdown()
