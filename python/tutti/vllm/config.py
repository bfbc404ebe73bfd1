# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector's configuration: ``kv_connector_extra_config`` parsed and checked
(``TuttiConfig``), and what both sides of the connector derive from it and from vLLM's
configuration (``ConnectorContext``: the store geometry, the namespace, the rank)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import vllm
from vllm.v1.kv_cache_interface import AttentionSpec

from tutti.store import Geometry
from tutti.vllm import ranks, remote_tier

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig

KNOWN_KEYS = frozenset({
    "dirs", "dir", "capacity_gb", "capacity_bytes", "chunk_tokens", "engine", "durability",
    "staging_mb", "gpu_io_workers", "gpu_io_sms", "namespace", "async_load", "layerwise",
    "remote",
})


@dataclass
class TuttiConfig:
    """``kv_connector_extra_config`` (docs/vllm.md, "Configuration")."""

    # A list of paths, or one list of paths per tensor-parallel rank (tutti/vllm/ranks.py).
    dirs: list[Any]
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
    remote: remote_tier.RemoteConfig | None = None  # the cross-node tier (docs/cluster.md)

    @classmethod
    def from_extra(cls, extra: dict[str, Any] | None, block_size: int) -> TuttiConfig:
        extra = dict(extra or {})
        unknown = sorted(set(extra) - KNOWN_KEYS)
        if unknown:
            raise ValueError(f"TuttiConnector: unknown kv_connector_extra_config keys {unknown}; "
                             f"known: {sorted(KNOWN_KEYS)}")
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
        async_load = parse_flag(extra.get("async_load", False), "async_load")
        layerwise = parse_flag(extra.get("layerwise", False), "layerwise")
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


def parse_flag(v: Any, name: str) -> bool:
    if isinstance(v, bool):
        return v
    if str(v).lower() in ("1", "true", "yes", "on"):
        return True
    if str(v).lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"TuttiConnector: {name} must be true or false, not {v!r}")


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


class ConnectorContext:
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
        self.vllm_config = vllm_config
        self.block_size: int = vllm_config.cache_config.block_size
        self.cfg = TuttiConfig.from_extra(kv_transfer.kv_connector_extra_config,
                                          self.block_size)
        # Tensor parallelism (tutti/vllm/ranks.py): each worker process opens the store of its
        # rank; the scheduler, in a process of its own, opens none and learns what every rank
        # holds from the workers' reports.
        self.tp: int = pc.tensor_parallel_size
        self.rank: int = getattr(pc, "rank", 0) % self.tp
        ranks.check_disjoint(self.cfg.dirs, self.tp)
        if self.tp > 1 and self.cfg.remote is not None:
            raise ValueError("TuttiConnector: the remote tier (\"remote\") does not support "
                             "tensor parallelism yet")
        self.blocks_per_chunk = self.cfg.chunk_tokens // self.block_size
        self.geo, self.spec = geometry_of(kv_cache_config, self.cfg.chunk_tokens)
        self.ns = self.namespace()
        self.num_blocks: int = kv_cache_config.num_blocks
        self.layer_names: list[str] = list(kv_cache_config.kv_cache_groups[0].layer_names)

    @property
    def dirs(self) -> list[str]:
        """This rank's store directories."""
        return ranks.rank_dirs(self.cfg.dirs, self.rank)

    def namespace(self, with_rank: bool = True) -> bytes:
        """What must not mix, as bytes. Without the rank: the namespace shared by every rank of
        a deployment (the remote tier's, whose keys and records carry the rank themselves)."""
        vc, spec, geo = self.vllm_config, self.spec, self.geo
        mc, pc, cc = vc.model_config, vc.parallel_config, vc.cache_config
        parts = [
            "tutti-vllm/1",
            f"model={mc.model}@{getattr(mc, 'revision', None)}",
            f"dtype={spec.dtype}",
            f"block={spec.block_size}",
            f"kv={geo.nr_layers}x{spec.num_kv_heads}x{spec.head_size}",
            f"page={spec.page_size_bytes}",
            f"layout={getattr(cc, 'kv_cache_layout', None)}",
            f"device={vc.device_config.device_type}",
            f"tp={getattr(pc, 'rank', 0) if with_rank else '*'}/{pc.tensor_parallel_size}",
            f"pp={pc.pipeline_parallel_size}",
            f"hash={getattr(cc, 'prefix_caching_hash_algo', None)}",
            f"vllm={'.'.join(vllm.__version__.split('.')[:2])}",
            f"user={self.cfg.namespace}",
        ]
        return "|".join(parts).encode()
