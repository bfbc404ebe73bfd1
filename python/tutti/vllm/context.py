# SPDX-License-Identifier: Apache-2.0
"""What both sides of TuttiConnector derive from vLLM's configuration: ``ConnectorContext``, the
serving core's context (tutti/serving/config.py) built from ``VllmConfig`` and the KV-cache
config: the store geometry of vLLM's KV-cache spec, the namespace's parts, the rank, and
whether the scheduler may open the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import vllm
from vllm.v1.kv_cache_interface import AttentionSpec

from tutti.serving.config import ServingContext, TuttiConfig
from tutti.serving.fingerprint import overrides_digest
from tutti.serving.keys import Namespace
from tutti.store import Geometry
from tutti.vllm import compat

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig


def geometry_of(kv_cache_config: KVCacheConfig, chunk_tokens: int) -> tuple[Geometry,
                                                                              AttentionSpec]:
    """The store geometry of this rank's KV: one full-attention group of uniform layers."""
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise ValueError("TuttiConnector supports models with one KV-cache group (plain full "
                         f"attention); this one has {len(groups)}")
    spec = groups[0].kv_cache_spec
    if not isinstance(spec, AttentionSpec):
        raise ValueError(f"TuttiConnector: unsupported KV-cache spec {type(spec).__name__}")
    geo = Geometry(nr_layers=len(groups[0].layer_names), nr_kv_heads=spec.num_kv_heads,
                   head_dim=spec.head_size, elem_bytes=spec.dtype.itemsize, kv_planes=2,
                   block_tokens=spec.block_size, chunk_tokens=chunk_tokens)
    if geo.layer_block_bytes != spec.page_size_bytes:
        raise ValueError(f"TuttiConnector: a KV page is {spec.page_size_bytes} bytes, not the "
                         f"{geo.layer_block_bytes} of K and V for {spec.num_kv_heads} heads x "
                         f"{spec.head_size} x {spec.block_size} tokens")
    return geo, spec


class ConnectorContext(ServingContext):
    """What the scheduler side and the worker side of one connector derive from vLLM's
    configuration and ``kv_connector_extra_config``."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig) -> None:
        kv_transfer = vllm_config.kv_transfer_config
        assert kv_transfer is not None  # vLLM creates connectors only when it is set
        pc = vllm_config.parallel_config
        if pc.pipeline_parallel_size != 1:
            raise ValueError("TuttiConnector does not support pipeline parallelism "
                             f"(pipeline_parallel_size={pc.pipeline_parallel_size}); use "
                             "tensor_parallel_size for several devices")
        if kv_transfer.kv_role != "kv_both":
            raise ValueError(f"TuttiConnector: kv_role must be \"kv_both\" (the server stores "
                             f"and loads), not {kv_transfer.kv_role!r}")
        self.vllm_config = vllm_config
        block_size: int = vllm_config.cache_config.block_size
        cfg = TuttiConfig.from_extra(kv_transfer.kv_connector_extra_config, block_size)
        geo, self.spec = geometry_of(kv_cache_config, cfg.chunk_tokens)
        self.weights: str | None = None  # the weights' fingerprint, once the checks pass
        # Whether vLLM runs this engine's worker in the scheduler's process: only then may the
        # scheduler open the store (a store admits one process). Its uni-process executor does
        # (and the external launcher, which runs one engine per process); the multiprocess one,
        # which vLLM's CPU build always uses unless VLLM_ENABLE_V1_MULTIPROCESSING=0, and Ray
        # run workers elsewhere. Otherwise the scheduler learns what the store holds from the
        # worker's reports (tutti/serving/ranks.py), as with tensor parallelism.
        backend = pc.distributed_executor_backend
        super().__init__(
            cfg, geo, self._namespace, block_size=block_size,
            max_model_len=vllm_config.model_config.max_model_len,
            kv_on_gpu=vllm_config.device_config.device_type == "cuda",
            rank=getattr(pc, "rank", 0), tp=pc.tensor_parallel_size,
            pp=pc.pipeline_parallel_size, num_blocks=kv_cache_config.num_blocks,
            layer_names=list(kv_cache_config.kv_cache_groups[0].layer_names),
            scheduler_opens_store=(pc.tensor_parallel_size == 1
                                   and backend in ("uni", "external_launcher")))

    def _namespace(self, ctx: ServingContext) -> Namespace:
        """This connector's namespace (ServingContext asks once its checks have passed)."""
        vc = self.vllm_config
        mc, lc, pc, cc = vc.model_config, vc.load_config, vc.parallel_config, vc.cache_config
        self.weights = ctx.fingerprint(mc.model, mc.revision, str(lc.load_format),
                                       lc.download_dir)
        algo = getattr(cc, "prefix_caching_hash_algo", None)
        return Namespace(
            engine="vllm", engine_version=".".join(vllm.__version__.split(".")[:2]),
            model=mc.model, revision=mc.revision, weights=self.weights,
            quant=str(mc.quantization) if mc.quantization else None,
            overrides=overrides_digest(mc.hf_overrides) if mc.hf_overrides else None,
            dtype=str(self.spec.dtype), geo=ctx.geo, layout=compat.kv_cache_layout(vc),
            device=str(vc.device_config.device_type), rank=getattr(pc, "rank", 0),
            tp=pc.tensor_parallel_size, pp=pc.pipeline_parallel_size,
            hash_algo=str(algo) if algo is not None else None, user=ctx.cfg.namespace)
