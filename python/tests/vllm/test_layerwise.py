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

from tutti.serving import stores  # noqa: E402
from tutti.store import ChunkRequest, Geometry  # noqa: E402
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
    n, _ = w.worker.store.save(w.worker.kv,
                               [ChunkRequest(keys, list(range(SRC, SRC + 2 * nr_chunks)))])
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
    assert not TuttiConnector.requires_piecewise_for_cudagraph({"layerwise": False})
    # The default ("auto") is off, for GPU KV too: no piecewise CUDA graphs asked for
    # (tests/vllm/test_versions.py has the defaults).
    assert not TuttiConnector.requires_piecewise_for_cudagraph({})


def test_gpu_io_footprint_keys_are_checked_and_reach_the_store(tmp_path):
    for bad in (5, ["workers=5"], {"workers": True}, {"workers": 2.5}, {"workers": "5,sms=1"}):
        with pytest.raises(ValueError, match="engine_opts"):
            TuttiConfig.from_extra(extra(tmp_path, engine_opts=bad), BS)
    # The keys of earlier releases are refused, naming what replaced them.
    for old, new in (("gpu_io_workers", "workers"), ("gpu_io_sms", "sms")):
        with pytest.raises(ValueError, match=f"\"{old}\" is now engine_opts \"{new}=N\""):
            TuttiConfig.from_extra(extra(tmp_path, **{old: 2}), BS)
    cfg = TuttiConfig.from_extra(extra(tmp_path, engine_opts={"workers": 11, "sms": 2}), BS)
    assert cfg.engine_opts == "workers=11,sms=2"
    assert TuttiConfig.from_extra(extra(tmp_path, engine_opts="workers=11,sms=2"),
                                  BS).engine_opts == "workers=11,sms=2"
    assert TuttiConfig.from_extra(extra(tmp_path), BS).engine_opts == ""
    geo = Geometry(nr_layers=2, nr_kv_heads=2, head_dim=64, elem_bytes=2, block_tokens=16,
                   chunk_tokens=CHUNK)
    key, _ = stores.acquire_store(cfg, cfg.dirs, geo, b"footprint")
    stores.release_store(key)
    # The engine checks the packing it is given: 11 workers and the ring's driver do not fit
    # in 1 SM (6 groups at most); and the values it takes.
    for opts, says in (("workers=11,sms=1", "sms=1 cannot hold 11 workers"),
                       ("sms=-1", "sms=-1 is not a whole number in 0..64")):
        cfg = TuttiConfig.from_extra(extra(tmp_path, engine_opts=opts), BS)
        with pytest.raises(OSError) as e:
            stores.acquire_store(cfg, cfg.dirs, geo, b"footprint")
        assert e.value.errno == errno.EINVAL and says in str(e.value)


# vLLM's hooks: in order; the last layer first (each earlier one is then waited for at that
# hook, and their own hooks do nothing); one layer's hook skipped; no hook at all (a forward
# without connector hooks: the step's end waits for every layer); a repeated hook and a name
# that is not a registered layer (both ignored).
@pytest.mark.parametrize("hooks,waits,unhooked", [
    (LAYERS, 3, 0),
    ([LAYERS[2], LAYERS[0], LAYERS[1]], 1, 2),
    ([LAYERS[0], LAYERS[2]], 2, 1),
    ([], 0, 3),
    ([LAYERS[0], LAYERS[0], "model.layers.9.cross_attn", LAYERS[1], LAYERS[2]], 3, 0),
])
def test_each_layer_is_loaded_before_its_hook_returns(worker, hooks, waits, unhooked):
    keys = store_chunks(worker, 3)
    dst = list(range(0, 6))
    src = list(range(SRC, SRC + 6))
    assert not any(loaded(worker, layer, dst, src) for layer in range(3))

    def check(name):
        if name in LAYERS:
            upto = LAYERS.index(name)
            for layer in range(upto + 1):
                assert loaded(worker, layer, dst, src), (name, layer)

    errors, st = step(worker, [LoadSpec("r0", keys, 0, 0, dst)], hooks, check)
    assert errors == set()
    for layer in range(3):
        assert loaded(worker, layer, dst, src)
    assert st["load_tokens"] == 6 * BS and st["load_errors"] == 0
    assert st["pipeline_steps"] == 1
    assert st["pipeline_layers_loaded"] == 3
    assert (st["pipeline_waits"], st["pipeline_waits_unhooked"]) == (waits, unhooked)

    # A step without loads is no pipeline step: the hooks do nothing.
    errors, st = step(worker, [], LAYERS)
    assert errors == set() and st.get("pipeline_steps", 0) == 0


def test_a_chunk_that_cannot_be_loaded_reports_its_blocks(worker):
    keys = store_chunks(worker, 1) + [chunk_key(b"never stored")]
    # Two requests in one step: the second one's chunks are all stored.
    keys2 = store_chunks(worker, 2, tag=b"q")
    dst, dst2 = [0, 1, 2, 3], [10, 11, 12, 13]
    errors, st = step(worker, [LoadSpec("r0", keys, 0, 0, dst),
                               LoadSpec("r1", keys2, 0, 0, dst2)], LAYERS)
    assert errors == {2, 3}
    assert st["load_errors"] == 1 and st["load_tokens"] == 6 * BS
    for layer in range(3):
        assert loaded(worker, layer, dst[:2], [SRC, SRC + 1])
        assert loaded(worker, layer, dst2, list(range(SRC, SRC + 4)))
    # Errors are reported once.
    errors, _ = step(worker, [], LAYERS)
    assert errors == set()
    # Loading from the middle of a chunk: the first chunk's first block is skipped.
    errors, st = step(worker, [LoadSpec("r2", keys2, 0, 1, [20, 21, 22])], LAYERS)
    assert errors == set() and st["load_tokens"] == 3 * BS
    for layer in range(3):
        assert loaded(worker, layer, [20, 21, 22], [SRC + 1, SRC + 2, SRC + 3])


def test_a_refused_step_loads_before_the_forward_and_a_failed_wait_fails_the_step(
        worker, monkeypatch):
    keys = store_chunks(worker, 2)
    src = list(range(SRC, SRC + 4))

    def refuse(**kw):
        raise OSError(errno.EBUSY, "busy")

    # The pipeline refuses the step: the loads complete in start_load_kv instead.
    with monkeypatch.context() as m:
        m.setattr(worker.worker.layerwise.pipe, "begin_step", refuse)
        errors, st = step(worker, [LoadSpec("r0", keys, 0, 0, [0, 1, 2, 3])], [])
    assert errors == set() and st["load_tokens"] == 4 * BS
    assert st.get("pipeline_steps", 0) == 0
    for layer in range(3):
        assert loaded(worker, layer, [0, 1, 2, 3], src)

    # A wait that fails: the step's chunks are reported failed (vLLM recomputes them), and
    # later steps load before the forward.
    def fail(layer):
        raise OSError(errno.EIO, "wait failed")

    with monkeypatch.context() as m:
        m.setattr(worker.worker.layerwise.pipe, "wait_layer", fail)
        errors, st = step(worker, [LoadSpec("r1", keys, 0, 0, [4, 5, 6, 7])], LAYERS)
    assert errors == {4, 5, 6, 7} and st["load_errors"] == 2
    errors, st = step(worker, [LoadSpec("r2", keys, 0, 0, [8, 9, 10, 11])], LAYERS)
    assert errors == set() and st["load_tokens"] == 4 * BS
    assert st.get("pipeline_steps", 0) == 0
    for layer in range(3):
        assert loaded(worker, layer, [8, 9, 10, 11], src)


# ---- end to end ----


LAYERS_E2E = 4


@pytest.fixture(scope="module")
def model4(tmp_path_factory):
    import tiny_llama

    return tiny_llama.make(tmp_path_factory.mktemp("model4") / "tiny-llama-4",
                           layers=LAYERS_E2E)


def test_a_restarted_engine_loads_the_prefix_layer_by_layer(model4, tmp_path):
    import random

    r = random.Random(11)
    shared = [r.randrange(1, 500) for _ in range(300)]
    prompts = [shared + [r.randrange(1, 500) for _ in range(r.randrange(40, 90))]
               for _ in range(3)]
    store = tmp_path / "store"
    reference = run(model4, prompts, tmp_path, "reference")

    # The prompts are served one at a time: the first stores the shared prefix, which the
    # others load (its first 4 chunks: the 5th block pair ends past the shared tokens).
    a = run(model4, prompts, tmp_path, "a", store, mode="layerwise")
    assert a["tokens"] == reference["tokens"]
    assert a["metrics"]["vllm:tutti_save_tokens"] > 0
    assert a["metrics"]["vllm:tutti_load_tokens"] == 2 * 256
    assert a["metrics"]["vllm:tutti_pipeline_steps"] == 2

    b = run(model4, prompts, tmp_path, "b", store, mode="layerwise")
    m = b["metrics"]
    prompt_tokens = sum(len(p) for p in prompts)
    assert m["vllm:tutti_load_tokens"] >= 0.8 * prompt_tokens, (m, prompt_tokens)
    assert m["vllm:tutti_load_errors"] == 0
    assert b["tokens"] == reference["tokens"]
    # The loads went through the pipeline, and vLLM called the hook of every layer, in order,
    # in every step that loaded.
    steps = m["vllm:tutti_pipeline_steps"]
    assert steps >= len(prompts)  # the prompts are served one at a time
    assert m["vllm:tutti_pipeline_layers_loaded"] == steps * LAYERS_E2E
    assert m["vllm:tutti_pipeline_waits"] == steps * LAYERS_E2E
    assert m["vllm:tutti_pipeline_waits_unhooked"] == 0
    # vLLM registered the KV in the order of its KV-cache config (the connector warns
    # otherwise), so the hooks came in that order too.
    assert "in another order" not in (tmp_path / "b.log").read_text()

    # A damaged store: every chunk fails its checksum in some layer, vLLM recomputes, and the
    # answers are the same. The first prompt's recomputed chunks are stored again, and the
    # others load the shared prefix from them.
    damage_every_slot(store)
    c = run(model4, prompts, tmp_path, "c", store, mode="layerwise")
    m = c["metrics"]
    assert m["vllm:tutti_load_errors"] > 0
    assert m["vllm:tutti_load_tokens"] == 2 * 256
    assert m["vllm:tutti_pipeline_steps"] >= len(prompts)
    assert c["tokens"] == reference["tokens"]
    assert "checksum mismatch" in (tmp_path / "c.log").read_text()


def test_a_failed_load_hazard_is_named_for_loads_inside_the_step(model_dir, tmp_path):
    """With GPU KV and loads inside the step, which only an explicit configuration chooses, a
    warning at registration (docs/vllm.md, "Known problems"), with or without vLLM's
    asynchronous scheduling; not for host KV or with asynchronous loads (the default)."""
    from tutti.vllm.context import ConnectorContext
    from tutti.vllm.worker import failed_load_hazard

    def ctx(async_sched, **kw):
        kw = dict({"layerwise": "auto"}, **kw)
        cfg = tutti_vllm_config(model_dir, extra(tmp_path, **kw), BS, NUM_BLOCKS)
        cfg.device_config.device_type = "cuda"
        cfg.scheduler_config.async_scheduling = async_sched
        return ConnectorContext(cfg, kv_cache_config(LAYERS, BS, NUM_BLOCKS, kv_heads=1))

    for async_sched in (False, True):
        assert failed_load_hazard(ctx(async_sched), "cuda") is None  # auto: asynchronous
        for kw in ({"layerwise": True}, {"async_load": False}):
            why = failed_load_hazard(ctx(async_sched, **kw), "cuda")
            assert why is not None and "Recovered from KV load failure" in why
            assert "async_load" in why and "Known problems" in why
            assert failed_load_hazard(ctx(async_sched, **kw), "host") is None
        assert failed_load_hazard(ctx(async_sched, async_load=True), "cuda") is None
