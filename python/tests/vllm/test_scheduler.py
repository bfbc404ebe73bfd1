# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector's scheduler side inside vLLM's real Scheduler (no model, no GPU): what it
finds in the store, what the scheduler then computes, and the metadata the worker receives."""

import itertools

import numpy as np
import pytest

pytest.importorskip("vllm")

from vllm import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from tutti.store import KV, ChunkRequest  # noqa: E402
from tutti.vllm.connector import TuttiConnectorMetadata, chunk_key  # noqa: E402

from vllm_configs import kv_cache_config, tutti_vllm_config  # noqa: E402

BS = 32  # tokens per block
CHUNK = 64  # tokens per chunk: 2 blocks
NUM_BLOCKS = 256
_ids = itertools.count()


def make_scheduler(model_dir, store_dir, extra=None, prefix_caching=False):
    init_none_hash(sha256)
    vllm_config = tutti_vllm_config(
        model_dir, extra or {"dirs": [str(store_dir)], "capacity_gb": 0.05, "chunk_tokens": CHUNK},
        BS, NUM_BLOCKS, prefix_caching=prefix_caching)
    return Scheduler(vllm_config=vllm_config,
                     kv_cache_config=kv_cache_config(["l0", "l1"], BS, NUM_BLOCKS, kv_heads=2),
                     structured_output_manager=StructuredOutputManager(vllm_config),
                     block_size=BS, log_stats=True)


def request(tokens):
    params = SamplingParams(max_tokens=4, temperature=0)
    params.update_from_generation_config({}, 0)
    return __import__("vllm.v1.request", fromlist=["Request"]).Request(
        request_id=f"r{next(_ids)}", prompt_token_ids=list(tokens), sampling_params=params,
        pooling_params=None, block_hasher=get_request_block_hasher(BS, sha256))


def prompt(n, seed=1):
    return list(np.random.default_rng(seed).integers(1, 500, size=n))


def populate(connector, req, nr_chunks):
    """Store the first ``nr_chunks`` chunks of ``req`` (KV bytes do not matter here)."""
    geo = connector.ctx.geo
    pages = np.zeros((geo.nr_layers, NUM_BLOCKS, geo.layer_block_bytes), dtype=np.uint8)
    segs = [(pages[i].ctypes.data, geo.layer_block_bytes, geo.layer_block_bytes)
            for i in range(geo.nr_layers)]
    kv = KV(geo, segs, 1, NUM_BLOCKS)
    keys = [chunk_key(req.block_hashes[(c + 1) * 2 - 1]) for c in range(nr_chunks)]
    n, _ = connector.scheduler.store.save(kv, [ChunkRequest(keys, list(range(nr_chunks * 2)))])
    assert n == nr_chunks
    kv.close()


def schedule_one(sched, req):
    sched.add_request(req)
    out = sched.schedule()
    meta = out.kv_connector_metadata
    assert isinstance(meta, TuttiConnectorMetadata)
    return out, meta


def test_empty_store_schedules_everything_and_saves_complete_chunks(model_dir, tmp_path):
    sched = make_scheduler(model_dir, tmp_path / "s")
    req = request(prompt(300))  # 9 full blocks: 4 chunks and a 1-block tail
    out, meta = schedule_one(sched, req)
    assert out.num_scheduled_tokens[req.request_id] == 300
    assert meta.loads == []
    (save,) = meta.saves
    block_ids = out.scheduled_new_reqs[0].block_ids[0]
    assert save.first_chunk == 0
    assert save.block_ids == block_ids[:9]
    assert len(save.keys) == 5  # 4 full chunks, then the partial one of block 8
    assert save.keys[-1] == chunk_key(req.block_hashes[8])
    sched.connector.shutdown()


def test_stored_prefix_is_loaded_and_not_computed(model_dir, tmp_path):
    sched = make_scheduler(model_dir, tmp_path / "s")
    tokens = prompt(300)
    populate(sched.connector, request(tokens), 3)  # 6 blocks = 192 tokens
    req = request(tokens)
    out, meta = schedule_one(sched, req)
    assert out.scheduled_new_reqs[0].num_computed_tokens == 192
    assert out.num_scheduled_tokens[req.request_id] == 300 - 192
    (load,) = meta.loads
    block_ids = out.scheduled_new_reqs[0].block_ids[0]
    assert (load.first_chunk, load.skip_blocks) == (0, 0)
    assert load.block_ids == block_ids[:6]
    assert load.keys == [chunk_key(req.block_hashes[b]) for b in (1, 3, 5)]
    # The rest is saved: chunk 3 and the 1-block tail, not what was found.
    (save,) = meta.saves
    assert save.first_chunk == 3 and save.block_ids == block_ids[6:9]
    stats = sched.connector.get_kv_connector_stats().reduce()
    assert stats["hit_tokens"] == 192 and stats["lookup_tokens"] == 288
    sched.connector.shutdown()


def test_a_whole_prompt_hit_leaves_the_last_token_to_compute(model_dir, tmp_path):
    sched = make_scheduler(model_dir, tmp_path / "s")
    tokens = prompt(256)  # exactly 8 blocks, 4 chunks
    populate(sched.connector, request(tokens), 4)
    req = request(tokens)
    out, meta = schedule_one(sched, req)
    # 255 tokens may come from the store, block-aligned: 7 blocks.
    assert out.scheduled_new_reqs[0].num_computed_tokens == 224
    assert out.num_scheduled_tokens[req.request_id] == 32
    (load,) = meta.loads
    assert len(load.block_ids) == 7 and len(load.keys) == 4  # the last chunk only in part
    sched.connector.shutdown()


def test_a_different_prompt_misses(model_dir, tmp_path):
    sched = make_scheduler(model_dir, tmp_path / "s")
    populate(sched.connector, request(prompt(300, seed=1)), 4)
    req = request(prompt(300, seed=2))
    out, meta = schedule_one(sched, req)
    assert out.scheduled_new_reqs[0].num_computed_tokens == 0 and meta.loads == []
    sched.connector.shutdown()


def test_configuration_errors_are_clear(model_dir, tmp_path):
    with pytest.raises(ValueError, match="dirs"):
        make_scheduler(model_dir, tmp_path, extra={"capacity_gb": 1})
    with pytest.raises(ValueError, match="multiple"):
        make_scheduler(model_dir, tmp_path, extra={"dirs": [str(tmp_path)], "capacity_gb": 1,
                                                   "chunk_tokens": 48})
    with pytest.raises(ValueError, match="unknown"):
        make_scheduler(model_dir, tmp_path, extra={"dirs": [str(tmp_path)], "capacity_gb": 1,
                                                   "capacty": 3})
    with pytest.raises(ValueError, match="\"engine\" must be one of .*, not 'nope'"):
        make_scheduler(model_dir, tmp_path, extra={"dirs": [str(tmp_path)], "capacity_gb": 1,
                                                   "engine": "nope"})


def test_async_loads_park_the_request_until_the_worker_reports_them(model_dir, tmp_path):
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import RequestStatus

    store = tmp_path / "s"
    sched = make_scheduler(model_dir, store, extra={
        "dirs": [str(store)], "capacity_gb": 0.05, "chunk_tokens": CHUNK, "async_load": True})
    tokens = prompt(300)
    populate(sched.connector, request(tokens), 3)
    req = request(tokens)
    out, meta = schedule_one(sched, req)
    # Parked while its KV is read: nothing of it is computed in this step.
    assert req.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert req.request_id not in out.num_scheduled_tokens
    (load,) = meta.loads
    assert load.req_id == req.request_id and len(load.block_ids) == 6
    # The worker reports the load done; the next step computes the rest only.
    sched.update_from_output(out, ModelRunnerOutput(
        req_ids=[], req_id_to_index={}, sampled_token_ids=[], logprobs=None,
        prompt_logprobs_dict={}, pooler_output=None,
        kv_connector_output=KVConnectorOutput(finished_recving={req.request_id})))
    out2 = sched.schedule()
    assert out2.num_scheduled_tokens[req.request_id] == 300 - 192
    assert out2.kv_connector_metadata.loads == []
    sched.connector.shutdown()


def shared_document(model_dir, tmp_path, **extra):
    """A scheduler with asynchronous loads and vLLM's prefix cache on, over a store holding
    the first 3 chunks (192 tokens) of a 256-token document; returns (scheduler, document)."""
    store = tmp_path / "s"
    sched = make_scheduler(model_dir, store, extra={
        "dirs": [str(store)], "capacity_gb": 0.05, "chunk_tokens": CHUNK, "async_load": True,
        **extra}, prefix_caching=True)
    doc = prompt(256)
    populate(sched.connector, request(doc), 3)
    return sched, doc


def test_a_request_whose_chunks_another_is_loading_waits_for_vllms_prefix_cache(model_dir,
                                                                                tmp_path):
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import RequestStatus

    sched, doc = shared_document(model_dir, tmp_path)
    first = request(doc + prompt(44, seed=7))
    out, meta = schedule_one(sched, first)
    (load,) = meta.loads
    assert load.req_id == first.request_id and len(load.block_ids) == 6
    # A second question on the same document arrives while the first's chunks are read: it is
    # asked again later rather than reading the same bytes a second time.
    second = request(doc + prompt(44, seed=8))
    out, meta = schedule_one(sched, second)
    assert meta.loads == [] and second.request_id not in out.num_scheduled_tokens
    assert second.status == RequestStatus.WAITING
    stats = sched.connector.get_kv_connector_stats().reduce()
    assert stats["delayed_lookups"] >= 1 and stats["hit_tokens"] == 192
    # A different document is not held back by it.
    other = request(prompt(300, seed=3))
    out, meta = schedule_one(sched, other)
    assert out.num_scheduled_tokens[other.request_id] == 300
    # Reported finished, the first load is not in vLLM's prefix cache until vLLM takes the
    # first request up again, which its waiting queue may do after the second: until then a
    # request that shares it still waits.
    sched.connector.update_connector_output(
        KVConnectorOutput(finished_recving={first.request_id}))
    third = request(doc + prompt(44, seed=9))
    sched.connector.scheduler.on_new_request(third)
    assert sched.connector.get_num_new_matched_tokens(third, 0) == (None, False)
    # The first load lands: the first request computes its rest and the second finds the
    # document in vLLM's prefix cache (the 192 tokens loaded and the 64 the first computed),
    # with nothing to load.
    sched.update_from_output(out, ModelRunnerOutput(
        req_ids=[other.request_id], req_id_to_index={other.request_id: 0},
        sampled_token_ids=[[5]], logprobs=None, prompt_logprobs_dict={}, pooler_output=None,
        kv_connector_output=KVConnectorOutput(finished_recving={first.request_id})))
    out = sched.schedule()
    assert out.kv_connector_metadata.loads == []
    assert out.num_scheduled_tokens[first.request_id] == 300 - 192
    assert out.num_scheduled_tokens[second.request_id] == 300 - 256
    assert sched.connector.get_kv_connector_stats().reduce()["hit_tokens"] == 0
    sched.connector.shutdown()


def test_share_loads_false_reads_the_chunks_again(model_dir, tmp_path):
    sched, doc = shared_document(model_dir, tmp_path, share_loads=False)
    schedule_one(sched, request(doc + prompt(44, seed=7)))
    second = request(doc + prompt(44, seed=8))
    _, meta = schedule_one(sched, second)
    (load,) = meta.loads
    assert load.req_id == second.request_id and len(load.block_ids) == 6
    sched.connector.shutdown()


def test_a_finished_request_no_longer_holds_back_its_chunks(model_dir, tmp_path):
    sched, doc = shared_document(model_dir, tmp_path)
    first = request(doc + prompt(44, seed=7))
    schedule_one(sched, first)
    sched.finish_requests(first.request_id,
                          __import__("vllm.v1.request", fromlist=["RequestStatus"])
                          .RequestStatus.FINISHED_ABORTED)
    second = request(doc + prompt(44, seed=8))
    out, meta = schedule_one(sched, second)
    (load,) = meta.loads
    assert load.req_id == second.request_id and len(load.block_ids) == 6
    sched.connector.shutdown()


def report_rates(connector, read_bytes_per_s, compute_tokens_per_s, steps=2, totals=None):
    """What the worker reports (its running totals, from ``totals`` on) after ``steps`` steps
    that each loaded and computed for a second at these rates (tutti/serving/planner.py), as vLLM
    hands it to the scheduler's connector; returns the new totals."""
    from vllm.v1.outputs import KVConnectorOutput

    from tutti.serving.planner import Rates
    from tutti.vllm.data import TuttiWorkerMetadata

    t = totals or Rates()
    for _ in range(steps):
        t = Rates(t.load_bytes + int(read_bytes_per_s), t.load_ns + 10**9,
                  t.compute_tokens + int(compute_tokens_per_s), t.compute_ns + 10**9)
        connector.update_connector_output(KVConnectorOutput(
            kv_connector_worker_meta=TuttiWorkerMetadata({}, {0: t})))
    return t


def test_a_hit_slower_to_read_than_to_compute_is_computed_and_not_saved_again(model_dir,
                                                                              tmp_path):
    sched = make_scheduler(model_dir, tmp_path / "s")
    tokens = prompt(300)
    populate(sched.connector, request(tokens), 3)  # 192 tokens stored
    token_bytes = sched.connector.ctx.geo.layer_block_bytes * 2 / BS
    # Reading a token takes 10 ms, computing one 1 us.
    totals = report_rates(sched.connector, token_bytes * 100, 10**6)
    req = request(tokens)
    out, meta = schedule_one(sched, req)
    assert out.scheduled_new_reqs[0].num_computed_tokens == 0
    assert out.num_scheduled_tokens[req.request_id] == 300
    assert meta.loads == []
    # Recomputed, the stored chunks are not written again: chunk 3 and the tail only.
    (save,) = meta.saves
    block_ids = out.scheduled_new_reqs[0].block_ids[0]
    assert save.first_chunk == 3 and save.block_ids == block_ids[6:9]
    stats = sched.connector.get_kv_connector_stats().reduce()
    assert stats["hit_tokens"] == 0 and stats["declined_tokens"] == 192

    # The store reads fast again (reading a token 0.1 us): the same prefix loads.
    report_rates(sched.connector, token_bytes * 10**7, 10**6, steps=3, totals=totals)
    req2 = request(tokens)
    out2, meta2 = schedule_one(sched, req2)
    assert out2.num_scheduled_tokens[req2.request_id] == 300 - 192
    (load,) = meta2.loads
    assert load.req_id == req2.request_id and len(load.block_ids) == 6
    sched.connector.shutdown()


def test_load_policy_always_loads_a_slow_hit(model_dir, tmp_path):
    store = tmp_path / "s"
    sched = make_scheduler(model_dir, store, extra={
        "dirs": [str(store)], "capacity_gb": 0.05, "chunk_tokens": CHUNK,
        "load_policy": "always"})
    tokens = prompt(300)
    populate(sched.connector, request(tokens), 3)
    report_rates(sched.connector, 1, 10**6)  # a byte a second
    req = request(tokens)
    out, meta = schedule_one(sched, req)
    assert out.num_scheduled_tokens[req.request_id] == 300 - 192 and len(meta.loads) == 1
    with pytest.raises(ValueError, match="\"load_policy\" must be one of auto, always"):
        make_scheduler(model_dir, tmp_path / "t", extra={
            "dirs": [str(tmp_path / "t")], "capacity_gb": 0.05, "load_policy": "never"})
    sched.connector.shutdown()
