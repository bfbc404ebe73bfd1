# SPDX-License-Identifier: Apache-2.0
"""Layerwise loads (``layerwise``): the worker's connector driven as vLLM's model runner and
attention layers drive it, with the hooks in order, out of order, skipped, and with a chunk
that cannot be loaded; then end to end with real vLLM (its CPU build): a restarted engine
loads the stored prefix layer by layer, every layer through vLLM's own hook and in order, and
answers as a run without the connector does, also from a damaged store."""

import errno
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402

from tutti.store import ChunkRequest, Geometry  # noqa: E402
from tutti.vllm import connector  # noqa: E402
from tutti.vllm.connector import (  # noqa: E402
    LoadSpec,
    TuttiConfig,
    TuttiConnector,
    TuttiConnectorMetadata,
    chunk_key,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from test_e2e import damage_every_slot, run  # noqa: E402
from vllm_configs import kv_cache_config, tutti_vllm_config  # noqa: E402

BS = 32
CHUNK = 64  # 2 blocks
NUM_BLOCKS = 64
LAYERS = [f"model.layers.{i}.self_attn.attn" for i in range(3)]
SRC = 40  # stored chunks are saved from blocks SRC, SRC + 1, ...


def extra(tmp_path, **kw):
    return dict({"dirs": [str(tmp_path / "s")], "capacity_gb": 0.05, "chunk_tokens": CHUNK,
                 "layerwise": True}, **kw)


@pytest.fixture
def worker(model_dir, tmp_path):
    cfg = tutti_vllm_config(model_dir, extra(tmp_path), BS, NUM_BLOCKS)
    kcc = kv_cache_config(LAYERS, BS, NUM_BLOCKS, kv_heads=1)
    w = TuttiConnector(cfg, KVConnectorRole.WORKER, kcc)
    gen = torch.Generator().manual_seed(3)
    w.test_kv = {name: torch.randn(NUM_BLOCKS, 2, BS, 1, 32, generator=gen) for name in LAYERS}
    w.register_kv_caches(w.test_kv)
    yield w
    w.shutdown()


def store_chunks(w, nr_chunks, tag=b"p"):
    keys = [chunk_key(tag + bytes([c])) for c in range(nr_chunks)]
    n, _ = w.store.save(w._kv, [ChunkRequest(keys, list(range(SRC, SRC + 2 * nr_chunks)))])
    assert n == nr_chunks
    return keys


def loaded(w, layer, dst, src):
    t = w.test_kv[LAYERS[layer]]
    return torch.equal(t[dst], t[src])


def step(w, loads, hooks, check=None):
    """One engine step as vLLM's model runner drives the worker: bind, start_load_kv, the
    attention hooks in ``hooks`` order, wait_for_save, the step's load errors and stats."""
    w.bind_connector_metadata(TuttiConnectorMetadata(loads=loads, compute_tokens=128))
    w.start_load_kv(None)
    for name in hooks:
        w.wait_for_layer_load(name)
        if check is not None:
            check(name)
        w.save_kv_layer(name, w.test_kv.get(name), None)
    w.wait_for_save()
    errors = w.get_block_ids_with_load_errors()
    stats = w.get_kv_connector_stats()
    w.clear_connector_metadata()
    return errors, (stats.data if stats is not None else {})


def test_async_load_and_layerwise_are_refused_together(tmp_path):
    with pytest.raises(ValueError, match="async_load and layerwise exclude each other"):
        TuttiConfig.from_extra(extra(tmp_path, async_load=True), BS)
    with pytest.raises(ValueError, match="layerwise must be true or false"):
        TuttiConfig.from_extra(extra(tmp_path, layerwise="maybe"), BS)
    assert TuttiConfig.from_extra(extra(tmp_path), BS).layerwise
    assert not TuttiConfig.from_extra(extra(tmp_path, layerwise=False), BS).layerwise
    assert TuttiConnector.requires_piecewise_for_cudagraph({"layerwise": True})
    assert not TuttiConnector.requires_piecewise_for_cudagraph({})


def test_gpu_io_footprint_keys_are_checked_and_reach_the_store(tmp_path):
    for bad in (-1, "5", 2.5, True):
        with pytest.raises(ValueError, match="gpu_io_sms must be a whole number"):
            TuttiConfig.from_extra(extra(tmp_path, gpu_io_sms=bad), BS)
    cfg = TuttiConfig.from_extra(extra(tmp_path, gpu_io_workers=11, gpu_io_sms=2), BS)
    assert (cfg.gpu_io_workers, cfg.gpu_io_sms) == (11, 2)
    assert TuttiConfig.from_extra(extra(tmp_path), BS).gpu_io_sms == 0
    geo = Geometry(nr_layers=2, nr_kv_heads=2, head_dim=64, elem_bytes=2, block_tokens=16,
                   chunk_tokens=CHUNK)
    key, _ = connector._acquire_store(cfg, cfg.dirs, geo, b"footprint")
    connector._release_store(key)
    # The library checks the packing it is given: 11 workers and the ring's driver do not fit
    # in 1 SM (6 groups at most).
    cfg = TuttiConfig.from_extra(extra(tmp_path, gpu_io_workers=11, gpu_io_sms=1), BS)
    with pytest.raises(OSError) as e:
        connector._acquire_store(cfg, cfg.dirs, geo, b"footprint")
    assert e.value.errno == errno.EINVAL
