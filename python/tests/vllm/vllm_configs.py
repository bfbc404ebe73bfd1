# SPDX-License-Identifier: Apache-2.0
"""The vLLM configuration the connector's tests without an engine share: a VllmConfig of vLLM's
CPU build over the tiny model with Tutti as its KV connector, a KV cache of one full-attention
group, and a small worker rig over them."""

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec


def tutti_vllm_config(model_dir, extra, block_size, num_blocks, tp=1, pp=1, rank=0,
                      executor=None, kv_role="kv_both", prefix_caching=False):
    """``extra`` is the connector's kv_connector_extra_config; tp, pp and rank as vLLM's
    ParallelConfig has them (the multiprocess executor when there is more than one rank).
    ``executor``: vLLM's distributed_executor_backend; by default the uni-process one for one
    rank (the worker in the scheduler's process, as with VLLM_ENABLE_V1_MULTIPROCESSING=0),
    else the multiprocess one. ``prefix_caching``: vLLM's GPU prefix cache, off unless a test
    needs it. (vLLM's CPU build turns "uni" into "mp" while the environment
    does not say VLLM_ENABLE_V1_MULTIPROCESSING=0; this sets it after.)"""
    parallel = (ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                               distributed_executor_backend="mp")
                if tp * pp > 1 else ParallelConfig())
    cfg = VllmConfig(
        model_config=ModelConfig(model=str(model_dir), dtype="float32", seed=0,
                                 skip_tokenizer_init=True),
        scheduler_config=SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4096,
                                         max_model_len=1024, is_encoder_decoder=False),
        cache_config=CacheConfig(block_size=block_size,
                                 enable_prefix_caching=prefix_caching),
        parallel_config=parallel,
        kv_transfer_config=KVTransferConfig(
            kv_connector="TuttiConnector", kv_connector_module_path="tutti.vllm.connector",
            kv_role=kv_role, kv_load_failure_policy="recompute",
            kv_connector_extra_config=extra),
        device_config=DeviceConfig("cpu"),
    )
    cfg.parallel_config.rank = rank
    cfg.parallel_config.distributed_executor_backend = executor or ("uni" if tp * pp == 1
                                                                    else "mp")
    cfg.cache_config.num_gpu_blocks = num_blocks
    return cfg


def kv_cache_config(layers, block_size, num_blocks, kv_heads, head_size=32):
    return KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(list(layers), FullAttentionSpec(
            block_size=block_size, num_kv_heads=kv_heads, head_size=head_size,
            dtype=torch.float32))])


# The rig: two layers of 64 blocks of 32 tokens, 64-token chunks (2 blocks), a store of 50 MB.
RIG_BS = 32
RIG_CHUNK = 64
RIG_NUM_BLOCKS = 64
RIG_LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]


def rig_extra(tmp_path, **kw):
    """The connector's config for the rig, with ``kw`` on top."""
    return dict({"dirs": [str(tmp_path / "s")], "capacity_gb": 0.05, "chunk_tokens": RIG_CHUNK},
                **kw)


def rig_config(model_dir, ext, **kw):
    """The rig's vLLM config; ``kw`` goes to tutti_vllm_config (kv_role, ...)."""
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import init_none_hash

    init_none_hash(sha256)
    return tutti_vllm_config(model_dir, ext, RIG_BS, RIG_NUM_BLOCKS, **kw)


def rig_kv_cache_config():
    return kv_cache_config(RIG_LAYERS, RIG_BS, RIG_NUM_BLOCKS, kv_heads=2)


def rig_register(w):
    """Register random KV (seeded per layer) with worker ``w``; it is kept as ``w.test_kv``."""
    w.test_kv = {n: torch.randn(RIG_NUM_BLOCKS, 2, RIG_BS, 2, 32,
                                generator=torch.Generator().manual_seed(i))
                 for i, n in enumerate(RIG_LAYERS)}
    w.register_kv_caches(w.test_kv)
    return w.test_kv


def rig_worker(model_dir, ext, register=True, **kw):
    """A worker-side TuttiConnector of the rig, with random KV registered unless ``register``
    is false; ``kw`` goes to rig_config."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from tutti.vllm.connector import TuttiConnector

    w = TuttiConnector(rig_config(model_dir, ext, **kw), KVConnectorRole.WORKER,
                       rig_kv_cache_config())
    if register:
        rig_register(w)
    return w
