# SPDX-License-Identifier: Apache-2.0
"""The differences between the vLLM releases the connector supports (0.26 on the GPU machine,
0.32 here), each through the branch this machine's vLLM takes, with vLLM's real classes; and the
defaults, which follow where the KV lives. docs/vllm.md ("vLLM versions") lists them all."""

import errno
import json
import logging
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from tutti.store import KV, ChunkRequest  # noqa: E402
from tutti.vllm import compat  # noqa: E402
from tutti.vllm.connector import (  # noqa: E402
    LoadSpec,
    TuttiConnector,
    TuttiConnectorMetadata,
    chunk_key,
)
from tutti.vllm.log import LOGGER_NAME  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from vllm_configs import (  # noqa: E402
    RIG_BS,
    RIG_CHUNK,
    RIG_LAYERS,
    RIG_NUM_BLOCKS,
    rig_config,
    rig_extra,
    rig_kv_cache_config,
    rig_worker,
)

BS = RIG_BS
CHUNK = RIG_CHUNK  # 2 blocks
NUM_BLOCKS = RIG_NUM_BLOCKS
LAYERS = RIG_LAYERS
extra, config, kcc, worker = rig_extra, rig_config, rig_kv_cache_config, rig_worker


def store_chunks(w, nr_chunks, src=40):
    keys = [chunk_key(b"v" + bytes([c])) for c in range(nr_chunks)]
    n, _ = w.worker.store.save(w.worker.kv,
                               [ChunkRequest(keys, list(range(src, src + 2 * nr_chunks)))])
    assert n == nr_chunks
    return keys


def loaded(w, dst, src):
    return all(torch.equal(t[dst], t[src]) for t in w.test_kv.values())


def request(tokens):
    params = SamplingParams(max_tokens=4, temperature=0)
    params.update_from_generation_config({}, 0)
    return Request(request_id=f"r{len(tokens)}-{tokens[0]}", prompt_token_ids=list(tokens),
                   sampling_params=params, pooling_params=None,
                   block_hasher=get_request_block_hasher(BS, sha256))


class Catch(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def caught():
    h = Catch()
    logger = logging.getLogger(LOGGER_NAME)
    old = logger.level
    logger.addHandler(h)
    logger.setLevel(logging.DEBUG)
    yield h.lines
    logger.removeHandler(h)
    logger.setLevel(old)


def test_versions_outside_the_tested_range_are_warned_about(caught):
    for ok in ("0.26.0", "0.26.0+cu130", "0.29.1", "0.32.0"):
        assert compat.check_version(ok)
    assert not caught
    for old_or_new in ("0.25.3", "0.33.0", "1.0.0"):
        assert not compat.check_version(old_or_new)
    assert len(caught) == 3 and "outside the versions TuttiConnector is tested with" in caught[0]


def test_hits_are_counted_as_the_disk_tiers(model_dir, tmp_path):
    """vLLM 0.32 counts prompt tokens by the tier that supplied them (CacheHitSource; 0.26
    has no such metric): the store's hits are disk hits."""
    cfg = config(model_dir, extra(tmp_path))
    w = TuttiConnector(cfg, KVConnectorRole.WORKER, kcc())
    sched = Scheduler(vllm_config=cfg, kv_cache_config=kcc(),
                      structured_output_manager=StructuredOutputManager(cfg), block_size=BS,
                      log_stats=True)
    tokens = list(np.random.default_rng(3).integers(1, 500, size=300))
    probe = request(tokens)
    src = np.zeros((2, NUM_BLOCKS, w.ctx.geo.layer_block_bytes), dtype=np.uint8)
    kv = KV(w.ctx.geo, [(src[i].ctypes.data, src.shape[2], src.shape[2]) for i in range(2)], 1,
            NUM_BLOCKS)
    keys = [chunk_key(probe.block_hashes[b]) for b in (1, 3, 5)]
    assert w.worker.store.save(kv, [ChunkRequest(keys, list(range(6)))])[0] == 3
    kv.close()
    req = request(tokens)
    sched.add_request(req)
    out = sched.schedule()
    assert out.scheduled_new_reqs[0].num_computed_tokens == 6 * BS
    if compat.CacheHitSource is None:  # vLLM 0.26
        assert not hasattr(sched, "connector_prefix_cache_stats") or \
            not getattr(sched.connector_prefix_cache_stats, "hits_by_source", None)
    else:
        assert TuttiConnector._cache_hit_source == compat.CacheHitSource.DISK
        assert sched.connector_prefix_cache_stats.hits_by_source == {
            compat.CacheHitSource.DISK: 6 * BS}
    sched.connector.shutdown()
    w.shutdown()


def test_a_best_effort_cache_needs_no_kv_delivery(model_dir, tmp_path):
    """vLLM 0.32's scheduler asks requires_kv_delivery (a producer's default: recompute a
    preempted request whose hand-off is pending); 0.26 never asks. A cache answers no."""
    cfg = config(model_dir, extra(tmp_path))
    sched = Scheduler(vllm_config=cfg, kv_cache_config=kcc(),
                      structured_output_manager=StructuredOutputManager(cfg), block_size=BS,
                      log_stats=True)
    assert sched.connector.requires_kv_delivery is False
    if hasattr(sched, "requires_kv_delivery"):  # vLLM 0.32
        assert sched.requires_kv_delivery is False
    sched.connector.shutdown()


def test_async_loads_reach_vllm_through_either_transfer_call(model_dir, tmp_path):
    """vLLM 0.32 calls start_load_kv after the forward when no load of the step is synchronous
    (asynchronous ones), and collects completions with get_transfer_results, whose default
    wraps get_finished; 0.26 starts loads before the forward and calls get_finished."""
    w = worker(model_dir, extra(tmp_path, async_load=True))
    keys = store_chunks(w, 2)
    dst, src = [0, 1, 2, 3], list(range(40, 44))
    # 0.32's order: the forward (its hooks) first, then start_load_kv.
    w.bind_connector_metadata(TuttiConnectorMetadata(loads=[LoadSpec("a", keys, 0, 0, dst)]))
    for name in LAYERS:
        w.wait_for_layer_load(name)
    w.start_load_kv(None)
    w.wait_for_save()
    w.worker._loader.shutdown(wait=True)  # the loader thread has finished the load
    w.worker._loader = None
    if hasattr(w, "get_transfer_results"):  # vLLM 0.32
        res = w.get_transfer_results(set())
        assert res.finished_recving == {"a"} and not res.finished_sending
    else:
        assert w.get_finished(set()) == (None, {"a"})
    assert w.get_block_ids_with_load_errors() == set()
    w.clear_connector_metadata()
    assert loaded(w, dst, src)
    w.shutdown()


def test_an_asynchronous_load_that_raises_is_reported_failed(model_dir, tmp_path, caught):
    """A waiting request is told its load is over even when the load raises something the
    store does not (a bug, memory): every block failed, recomputed by vLLM, and the error
    logged, never a request waiting forever."""
    w = worker(model_dir, extra(tmp_path, async_load=True))
    keys = store_chunks(w, 2)
    dst = [0, 1, 2, 3]

    def broken(*args, **kwargs):
        raise RuntimeError("injected")

    w.worker.store.load = broken
    w.bind_connector_metadata(TuttiConnectorMetadata(loads=[LoadSpec("a", keys, 0, 0, dst)]))
    w.start_load_kv(None)
    w.worker._loader.shutdown(wait=True)
    w.worker._loader = None
    assert w.get_finished(set()) == (None, {"a"})
    assert w.get_block_ids_with_load_errors() == set(dst)
    assert any("asynchronous load of a failed" in m for m in caught)
    w.clear_connector_metadata()
    w.shutdown()


def test_a_layerwise_step_ends_without_wait_for_save(model_dir, tmp_path):
    """vLLM 0.26 skips wait_for_save in steps without a forward (and defers it past a draft
    model's forward), 0.32 calls it every step. A layerwise step is ended by whichever of
    get_block_ids_with_load_errors and the next start_load_kv comes first."""
    w = worker(model_dir, extra(tmp_path, layerwise=True))
    keys = store_chunks(w, 2)
    dst, src = [0, 1, 2, 3], list(range(40, 44))
    w.bind_connector_metadata(TuttiConnectorMetadata(loads=[LoadSpec("a", keys, 0, 0, dst)],
                                                     compute_tokens=64))
    w.start_load_kv(None)
    w.wait_for_layer_load(LAYERS[0])
    # No wait_for_save: the step's results are collected here, every layer loaded.
    assert w.get_block_ids_with_load_errors() == set()
    w.clear_connector_metadata()
    assert loaded(w, dst, src)
    st = w.get_kv_connector_stats().data
    assert st["pipeline_steps"] == 1 and st["load_tokens"] == 4 * BS
    assert (st["pipeline_waits"], st["pipeline_waits_unhooked"]) == (1, 1)
    # A step without a forward (0.26: start_load_kv, no hooks, no wait_for_save).
    w.bind_connector_metadata(TuttiConnectorMetadata())
    w.start_load_kv(None)
    assert w.get_finished(set()) == (None, None)
    assert w.get_block_ids_with_load_errors() == set()
    w.clear_connector_metadata()
    w.shutdown()


def test_a_block_is_one_dense_page_in_any_dimension_order(model_dir, tmp_path):
    """vLLM 0.26's GPU model runner gives FlashAttention's KV as a logical (blocks, heads,
    tokens, 2 x head size) view of (blocks, tokens, heads, 2 x head size) memory: each block a
    dense page, though not a contiguous view. Such blocks are stored and loaded as their bytes;
    a view with gaps is refused."""
    w = TuttiConnector(config(model_dir, extra(tmp_path)), KVConnectorRole.WORKER, kcc())
    mem = {n: torch.randn(NUM_BLOCKS, BS, 2, 64, generator=torch.Generator().manual_seed(i))
           for i, n in enumerate(LAYERS)}
    w.test_kv = {n: m.permute(0, 2, 1, 3) for n, m in mem.items()}
    assert not w.test_kv[LAYERS[0]][0].is_contiguous()
    w.register_kv_caches(w.test_kv)
    keys = store_chunks(w, 2)
    dst, src = [0, 1, 2, 3], list(range(40, 44))
    w.bind_connector_metadata(TuttiConnectorMetadata(loads=[LoadSpec("a", keys, 0, 0, dst)]))
    w.start_load_kv(None)
    w.wait_for_save()
    assert w.get_block_ids_with_load_errors() == set()
    w.clear_connector_metadata()
    assert loaded(w, dst, src)
    assert all(torch.equal(m[dst], m[src]) for m in mem.values())
    w.shutdown()

    gaps = {n: torch.zeros(NUM_BLOCKS, BS, 2, 128)[..., :64] for n in LAYERS}
    w = TuttiConnector(config(model_dir, extra(tmp_path)), KVConnectorRole.WORKER, kcc())
    with pytest.raises(ValueError, match="is not one dense page"):
        w.register_kv_caches(gaps)
    w.shutdown()


def test_prefix_hashes_that_would_not_survive_a_restart_are_warned_about(model_dir, tmp_path,
                                                                         caught, monkeypatch):
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    # vLLM 0.32 seeds sha256 with a fixed default and xxhash at random; 0.26 all at random.
    fixed = compat.VLLM >= (0, 27)
    assert compat.hashes_survive_restarts("sha256") is fixed
    assert compat.hashes_survive_restarts("xxhash") is False
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert compat.hashes_survive_restarts("xxhash") is True
    monkeypatch.delenv("PYTHONHASHSEED")
    cfg = config(model_dir, extra(tmp_path))
    cfg.cache_config.prefix_caching_hash_algo = "xxhash"
    sched = Scheduler(vllm_config=cfg, kv_cache_config=kcc(),
                      structured_output_manager=StructuredOutputManager(cfg), block_size=BS)
    sched.connector.shutdown()
    assert any("not found again after a restart. Set PYTHONHASHSEED" in m for m in caught)


def test_the_kv_layout_is_part_of_the_namespace(model_dir, tmp_path):
    """vLLM 0.32 resolves the layout into the cache config; 0.26 asks its backends' function."""
    cfg = config(model_dir, extra(tmp_path))
    if compat.VLLM >= (0, 27):
        object.__setattr__(cfg.cache_config, "kv_cache_layout", "LBHNC")
    layout = compat.kv_cache_layout(cfg)
    assert layout
    w = TuttiConnector(cfg, KVConnectorRole.WORKER, kcc())
    assert f"|layout={layout}|".encode() in w.ctx.ns
    w.shutdown()


def test_defaults_follow_where_the_kv_lives(model_dir, tmp_path, caught):
    """engine, layerwise and async_load auto: for host KV the CPU-driven engine and loads
    before the forward; for GPU KV (device "cuda") asynchronous loads through the store's auto
    (gpu-uring), with or without vLLM's asynchronous scheduling; layerwise loads only where an
    explicit "layerwise": true chooses them; vLLM is asked for piecewise CUDA graphs only
    then (the per-layer hooks need them)."""
    w = worker(model_dir, {"dirs": [str(tmp_path / "s")], "capacity_gb": 0.05})
    assert w.ctx.cfg.engine == "auto" and w.ctx.cfg.layerwise is False
    assert w.worker.engine == "uring" and w.worker.layerwise is None
    assert not any("fall" in m for m in caught)  # host KV: nothing to fall back from
    assert any(m.startswith("tutti: registered") and "engine uring" in m for m in caught)
    w.shutdown()
    assert not TuttiConnector.requires_piecewise_for_cudagraph({})
    assert not TuttiConnector.requires_piecewise_for_cudagraph({"layerwise": "auto"})
    assert not TuttiConnector.requires_piecewise_for_cudagraph({"layerwise": False})
    assert not TuttiConnector.requires_piecewise_for_cudagraph({"async_load": True})
    assert TuttiConnector.requires_piecewise_for_cudagraph({"layerwise": True})
    from tutti.vllm.context import ConnectorContext

    cfg = config(model_dir, {"dirs": [str(tmp_path / "g")], "capacity_gb": 0.05})
    cfg.device_config.device_type = "cuda"  # what vLLM's GPU build says
    extra = cfg.kv_transfer_config.kv_connector_extra_config

    def chosen():
        c = ConnectorContext(cfg, kcc()).cfg
        return c.layerwise, c.async_load, c.engine

    # A failed load inside a step crashed vLLM 0.26 on the GPU with and without its
    # asynchronous scheduling (docs/results.md, V2 and V4): asynchronous loads either way.
    for async_sched in (False, True):
        cfg.scheduler_config.async_scheduling = async_sched
        assert chosen() == (False, True, "auto")  # the store's auto: gpu-uring for GPU KV
    extra["layerwise"] = True
    assert chosen() == (True, False, "auto")  # the store's auto: gpu-uring for GPU KV
    extra["engine"] = "uring"
    assert chosen() == (True, False, "uring")
    del extra["layerwise"], extra["engine"]
    extra["async_load"] = False
    assert chosen() == (False, False, "auto")
    extra["engine"] = "gpu-uring"
    extra["async_load"] = True
    assert chosen() == (False, True, "gpu-uring")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the seccomp filter is x86-64's")
@pytest.mark.parametrize("err", [errno.EPERM, errno.ENOSYS])
def test_engine_auto_falls_back_where_io_uring_is_refused(model_dir, tmp_path, err):
    """Where a container's seccomp profile refuses io_uring, the engine "auto" (the connector's
    default, for GPU and host KV alike) opens as posix with one warning; a uring the
    configuration named fails with the kernel's errno."""
    def open_store(*engine):
        d = tmp_path / "-".join(engine)
        proc = subprocess.run([sys.executable, str(HERE / "no_io_uring.py"), str(d), str(err),
                               *engine], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        # The log, wherever vLLM's logging configuration sends it (0.26: stdout).
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout + proc.stderr

    chosen, log = open_store("auto")
    assert chosen == {"engine": "posix"}
    assert "io_uring is refused here" in log and "posix" in log, log[-2000:]
    assert "io_uring setup failed" not in log  # one line, a warning, not an error
    named, _ = open_store("uring")
    assert named["errno"] == err and "io_uring" in named["error"]
    from tutti.vllm.context import ConnectorContext  # "auto" reaches the store as "auto"

    cfg = config(model_dir, {"dirs": [str(tmp_path / "g")], "capacity_gb": 0.05})
    cfg.device_config.device_type = "cuda"
    assert ConnectorContext(cfg, kcc()).cfg.engine == "auto"
