# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism without a model: vLLM's real Scheduler with tensor_parallel_size=2 (whose
connector opens no store), two worker-side connectors (ranks 0 and 1) on real stores of their
own, and vLLM's real KVOutputAggregator carrying the workers' outputs to the scheduler, as its
multiprocess executor does. A chunk is a hit only when both ranks hold it; a rank's failed load
fails the blocks for the request as a whole."""

import itertools
import os

import numpy as np
import pytest

pytest.importorskip("vllm")

import store_files  # noqa: E402
import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from tutti.serving import ranks  # noqa: E402
from tutti.store import KV, ChunkRequest, Geometry, Store  # noqa: E402
from tutti.vllm.connector import TuttiConnector, chunk_key  # noqa: E402
from tutti.vllm.data import TuttiWorkerMetadata  # noqa: E402

from vllm_configs import kv_cache_config as group_config  # noqa: E402
from vllm_configs import tutti_vllm_config  # noqa: E402

BS = 32
CHUNK = 64  # 2 blocks
NUM_BLOCKS = 128
_ids = itertools.count()


def vllm_config(model_dir, extra, tp=2, pp=1, rank=0, executor=None):
    init_none_hash(sha256)
    return tutti_vllm_config(model_dir, extra, BS, NUM_BLOCKS, tp=tp, pp=pp, rank=rank,
                             executor=executor)


def kv_cache_config(tp=2):
    # One rank's share of the model's two KV heads.
    return group_config(["l0", "l1"], BS, NUM_BLOCKS, kv_heads=2 // tp)


def extra(tmp_path, **kw):
    return dict({"dirs": [str(tmp_path / "r{rank}")], "capacity_gb": 0.05,
                 "chunk_tokens": CHUNK}, **kw)


class Rig:
    """The scheduler and ``tp`` worker-side connectors (in the multiprocess executor's
    processes, so: the scheduler opens no store), stepped by hand."""

    def __init__(self, model_dir, ext, tp=2):
        cfg = vllm_config(model_dir, ext, tp=tp, executor="mp")
        self.sched = Scheduler(vllm_config=cfg, kv_cache_config=kv_cache_config(tp),
                               structured_output_manager=StructuredOutputManager(cfg),
                               block_size=BS, log_stats=True)
        assert self.sched.connector.scheduler.store is None  # the scheduler holds no store
        self.workers, self.kv = [], []
        for rank in range(tp):
            w = TuttiConnector(vllm_config(model_dir, ext, tp=tp, rank=rank, executor="mp"),
                               KVConnectorRole.WORKER, kv_cache_config(tp))
            # Per layer one (blocks, 2, block, heads, head) tensor, distinct content per rank.
            layers = {f"l{i}": torch.randn(NUM_BLOCKS, 2, BS, 2 // tp, 32,
                                           generator=torch.Generator().manual_seed(rank * 10 + i))
                      for i in range(2)}
            w.register_kv_caches(layers)
            self.workers.append(w)
            self.kv.append(layers)
        self.aggregator = KVOutputAggregator(expected_finished_count=tp)

    def worker_step(self, meta, req_ids):
        outputs = []
        for w in self.workers:
            w.bind_connector_metadata(meta)
            w.start_load_kv(None)
            w.wait_for_save()
            # What the saver thread writes is reported once written: these steps stand for
            # steps far enough apart for it (test_async_save.py runs them back to back).
            w.worker.drain_saves()
            out = KVConnectorOutput(invalid_block_ids=w.get_block_ids_with_load_errors(),
                                    kv_connector_worker_meta=w.build_connector_worker_meta())
            w.clear_connector_metadata()
            # Every scheduled request samples token 7 (the scheduler decides what counts).
            outputs.append(ModelRunnerOutput(
                req_ids=list(req_ids), req_id_to_index={r: i for i, r in enumerate(req_ids)},
                sampled_token_ids=[[7] for _ in req_ids], logprobs=None,
                prompt_logprobs_dict={}, pooler_output=None, kv_connector_output=out))
        return self.aggregator.aggregate(outputs)

    def step(self):
        """One engine step: schedule, the workers' connector calls, the aggregated output
        back to the scheduler (which hands the connector its part)."""
        out = self.sched.schedule()
        req_ids = list(out.num_scheduled_tokens)
        agg = self.worker_step(out.kv_connector_metadata, req_ids)
        kv_out = agg.kv_connector_output
        self.sched.update_from_output(out, agg)
        return out, kv_out

    def close(self):
        for w in self.workers:
            w.shutdown()
        self.sched.connector.shutdown()


def request(tokens):
    params = SamplingParams(max_tokens=4, temperature=0)
    params.update_from_generation_config({}, 0)
    return Request(request_id=f"r{next(_ids)}", prompt_token_ids=list(tokens),
                   sampling_params=params, pooling_params=None,
                   block_hasher=get_request_block_hasher(BS, sha256))


def prompt(n, seed=1):
    return list(np.random.default_rng(seed).integers(1, 500, size=n))


SRC = 100  # populate() saves from blocks SRC, SRC + 1, ... (the scheduler allocates low ids)


def populate(worker, req, nr_chunks):
    """Store the first ``nr_chunks`` chunks of ``req`` in one rank's store, from its KV."""
    keys = [chunk_key(req.block_hashes[(c + 1) * 2 - 1]) for c in range(nr_chunks)]
    n, _ = worker.worker.store.save(worker.worker.kv, [ChunkRequest(
        keys, list(range(SRC, SRC + nr_chunks * 2)))])
    assert n == nr_chunks


def test_rank_directories_are_per_rank_and_shared_ones_are_refused(tmp_path):
    assert ranks.rank_dirs(["/a/t-{rank}", "/b/t-{rank}"], 1) == ["/a/t-1", "/b/t-1"]
    assert ranks.rank_dirs([["/a", "/b"], ["/c"]], 1) == ["/c"]
    ranks.check_disjoint(["/a/t-{rank}"], 4)
    ranks.check_disjoint([["/a"], ["/b"]], 2)
    ranks.check_disjoint(["/a"], 1)
    with pytest.raises(ValueError, match="ranks 0 and 1 would both use"):
        ranks.check_disjoint(["/a"], 2)
    with pytest.raises(ValueError, match="ranks 0 and 1 would both use"):
        ranks.check_disjoint([["/a", "/b"], ["/b"]], 2)
    with pytest.raises(ValueError, match="none for rank 2"):
        ranks.check_disjoint([["/a"], ["/b"]], 3)
    with pytest.raises(ValueError, match="not a mix"):
        ranks.rank_dirs(["/a", ["/b"]], 0)
    # The same directory under two names.
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(ValueError, match="would both use"):
        ranks.check_disjoint([[str(tmp_path / "real")], [str(tmp_path / "link")]], 2)


def test_the_connector_refuses_shared_directories_and_pipeline_parallelism(model_dir, tmp_path):
    shared = {"dirs": [str(tmp_path / "s")], "capacity_gb": 0.05, "chunk_tokens": CHUNK}
    with pytest.raises(ValueError, match=r"put \{rank\} in the paths"):
        TuttiConnector(vllm_config(model_dir, shared), KVConnectorRole.WORKER,
                       kv_cache_config())
    assert not (tmp_path / "s").exists()  # refused before anything was created
    with pytest.raises(ValueError, match="pipeline parallelism"):
        TuttiConnector(vllm_config(model_dir, extra(tmp_path), tp=1, pp=2),
                       KVConnectorRole.WORKER, kv_cache_config())


def test_aggregated_reports_reach_the_scheduler_and_a_hit_needs_every_rank(model_dir,
                                                                           tmp_path):
    rig = Rig(model_dir, extra(tmp_path))
    tokens = prompt(300)  # 9 full blocks: 4 chunks and a 1-block tail
    populate(rig.workers[0], request(tokens), 4)
    populate(rig.workers[1], request(tokens), 2)  # rank 1 has half the prefix
    req = request(tokens)
    rig.sched.add_request(req)
    # No listing yet: the request waits rather than miss what the stores hold.
    out, agg = rig.step()
    assert req.request_id not in out.num_scheduled_tokens
    meta = agg.kv_connector_worker_meta
    assert isinstance(meta, TuttiWorkerMetadata)
    assert sorted(meta.reports) == [0, 1] and all(r.full for r in meta.reports.values())
    assert len(meta.reports[0].added) == 4 and len(meta.reports[1].added) == 2
    # Both listed: the hit is what both ranks hold, two chunks.
    out, agg = rig.step()
    assert out.scheduled_new_reqs[0].num_computed_tokens == 2 * CHUNK
    (load,) = out.kv_connector_metadata.loads
    assert len(load.keys) == 2
    # Each rank loaded its own share, from its own store.
    ids = out.scheduled_new_reqs[0].block_ids[0]
    for rank in range(2):
        for layer in ("l0", "l1"):
            t = rig.kv[rank][layer]
            assert torch.equal(t[ids[:4]], t[SRC:SRC + 4])
    # What the step saved (chunks 2, 3 and the tail) is reported by both ranks as a delta.
    reports = agg.kv_connector_worker_meta.reports
    assert all(not r.full and len(r.added) >= 2 for r in reports.values())
    assert reports[0].seq == reports[1].seq == 1
    req2 = request(tokens)
    rig.sched.add_request(req2)
    out, _ = rig.step()
    new = [r for r in out.scheduled_new_reqs if r.req_id == req2.request_id][0]
    assert new.num_computed_tokens == 9 * BS  # all 9 full blocks, on both ranks
    rig.close()


def test_a_worker_in_a_process_of_its_own_keeps_the_store_to_itself(model_dir, tmp_path):
    """vLLM's defaults on its CPU build: one worker, in a process of its own (the multiprocess
    executor). The scheduler must not open the store there (the worker's open would fail with
    EBUSY); it learns what the store holds from the worker's reports, as with several ranks."""
    rig = Rig(model_dir, extra(tmp_path, dirs=[str(tmp_path / "s")]), tp=1)
    (w,) = rig.workers
    assert rig.sched.connector.scheduler.store is None
    assert w.worker.reporter is not None  # reports the store to the scheduler
    tokens = prompt(300, seed=9)
    populate(w, request(tokens), 3)
    req = request(tokens)
    rig.sched.add_request(req)
    out, _ = rig.step()  # the listing
    assert req.request_id not in out.num_scheduled_tokens
    out, agg = rig.step()
    assert out.scheduled_new_reqs[0].num_computed_tokens == 6 * BS
    ids = out.scheduled_new_reqs[0].block_ids[0]
    for t in rig.kv[0].values():
        assert torch.equal(t[ids[:6]], t[SRC:SRC + 6])
    rig.close()
    # With the uni-process executor the worker runs in the scheduler's process: both use one
    # handle of the store, and the scheduler looks it up directly.
    cfg = vllm_config(model_dir, extra(tmp_path, dirs=[str(tmp_path / "s")]), tp=1,
                      executor="uni")
    w = TuttiConnector(cfg, KVConnectorRole.WORKER, kv_cache_config(1))
    sched = Scheduler(vllm_config=cfg, kv_cache_config=kv_cache_config(1),
                      structured_output_manager=StructuredOutputManager(cfg), block_size=BS,
                      log_stats=True)
    assert sched.connector.scheduler.store is w.worker.store
    assert w.worker.reporter is None
    assert sched.connector.scheduler.store.lookup(
        [chunk_key(req.block_hashes[b]) for b in (1, 3, 5)])[0] == 3
    sched.connector.shutdown()
    w.shutdown()


def test_a_rank_that_never_lists_its_store_delays_requests_only_so_long(model_dir, tmp_path):
    rig = Rig(model_dir, extra(tmp_path))
    tokens = prompt(300, seed=5)
    for w in rig.workers:
        populate(w, request(tokens), 2)
    rig.sched.connector.scheduler.VIEW_WAIT_S = 0.0  # give up waiting at once
    req = request(tokens)
    rig.sched.add_request(req)
    out, _ = rig.step()
    # Scheduled before any listing arrived: a miss, not a wait.
    assert out.scheduled_new_reqs[0].num_computed_tokens == 0
    assert out.kv_connector_metadata.loads == []
    # The listings and saves of that step count for the requests after it.
    req2 = request(tokens)
    rig.sched.add_request(req2)
    out, _ = rig.step()
    new = [r for r in out.scheduled_new_reqs if r.req_id == req2.request_id][0]
    assert new.num_computed_tokens == 9 * BS
    rig.close()


def test_a_load_failing_on_one_rank_fails_its_blocks_for_all_and_becomes_a_miss(model_dir,
                                                                                tmp_path):
    rig = Rig(model_dir, extra(tmp_path))
    tokens = prompt(300, seed=3)
    for w in rig.workers:
        populate(w, request(tokens), 3)
    rig.step()  # the listings: the scheduler believes both ranks hold all three chunks
    # Rank 1's copies are damaged on disk behind the scheduler's back.
    w1 = rig.workers[1].worker
    w1.store.close()  # damage with the store closed, then reopen it
    w1.store = Store([tmp_path / "r1"], w1.geo, capacity_bytes=int(0.05 * 2**30),
                     ns=w1.ctx.ns, key_bytes=32)
    w1.reporter.store = w1.store
    lay = store_files.layout(tmp_path / "r1")
    for s in range(3):  # a new store's first three slots
        path, off = store_files.slot_location(tmp_path / "r1", lay, s)
        store_files.flip_byte(path, off + store_files.SLOT_HEADER_BYTES + 100)
    req = request(tokens)
    rig.sched.add_request(req)
    out, agg = rig.step()
    assert out.scheduled_new_reqs[0].num_computed_tokens == 6 * BS
    ids = out.scheduled_new_reqs[0].block_ids[0]
    # Rank 0 loaded everything, rank 1 failed: the aggregated output fails the blocks of
    # rank 1's damaged chunks for the request as a whole (vLLM recomputes them on every rank).
    bad = agg.invalid_block_ids
    assert bad and bad <= set(ids[:6])
    assert req.num_computed_tokens < 6 * BS  # vLLM recomputes from the first bad block
    # Rank 1 reported the damaged chunks gone (the store removed them): the next lookup misses
    # them although rank 0 still holds them.
    gone = agg.kv_connector_worker_meta.reports[1].removed
    assert gone
    hit, _ = rig.sched.connector.scheduler.view.lookup(
        [chunk_key(req.block_hashes[b]) for b in (1, 3, 5)], 2)
    assert hit < 3
    keys = [chunk_key(req.block_hashes[b]) for b in (1, 3, 5)]
    assert rig.workers[0].worker.store.lookup(keys)[0] == 3
    # The recomputed chunks are stored again from the first bad one: rank 1 has them again.
    out, agg = rig.step()
    (save,) = [sv for sv in out.kv_connector_metadata.saves if sv.req_id == req.request_id]
    first_bad = min(ids.index(b) for b in bad) // 2
    assert save.first_chunk == first_bad and save.keys[:3] == keys
    assert rig.workers[1].worker.store.lookup(keys)[0] == 3
    assert rig.sched.connector.scheduler.view.lookup(keys, 2)[0] == 3
    rig.close()


def test_layerwise_loads_run_per_rank(model_dir, tmp_path):
    """Each rank's worker runs a pipeline of its own over its store and its share of the KV
    (here without per-layer hooks: the step's end waits for every layer)."""
    rig = Rig(model_dir, extra(tmp_path, layerwise=True))
    tokens = prompt(300, seed=5)
    for w in rig.workers:
        populate(w, request(tokens), 3)
    rig.step()  # the listings
    req = request(tokens)
    rig.sched.add_request(req)
    out, kv_out = rig.step()
    assert out.scheduled_new_reqs[0].num_computed_tokens == 6 * BS
    ids = out.scheduled_new_reqs[0].block_ids[0][:6]
    assert not kv_out.invalid_block_ids
    for w, layers in zip(rig.workers, rig.kv, strict=True):
        for t in layers.values():
            assert torch.equal(t[ids], t[SRC:SRC + 6])  # each rank's own content
        st = w.worker.layerwise.pipe.stats()
        assert st["steps"] == 1 and st["layers_loaded"] == 2 and st["load_errors"] == 0
    rig.close()


def test_the_reporter_sends_evictions_after_a_relisting(tmp_path):
    geo = Geometry(nr_layers=2, nr_kv_heads=1, head_dim=32, elem_bytes=4, block_tokens=32,
                   chunk_tokens=64)
    st = Store([tmp_path / "s"], geo, capacity_bytes=8 * geo.slot_bytes)
    page = geo.layer_block_bytes
    mem = [np.zeros((16, page), dtype=np.uint8) for _ in range(2)]
    kv = KV(geo, [(m.ctypes.data, page, page) for m in mem], 1, 16)
    rep = ranks.StoreReporter(0, st, relist_s=0, relist_share=float("inf"))
    view = ranks.RankView(1)
    view.apply({0: rep.report()})  # the (empty) listing
    assert view.ready()
    a = [bytes([1, i]) * 16 for i in range(6)]
    b = [bytes([2, i]) * 16 for i in range(4)]
    st.save(kv, [ChunkRequest(a, list(range(12)))])
    for k in a:
        rep.saved(k, 2)
    view.apply({0: rep.report()})
    assert view.lookup(a, 2) == (6, 12)
    st.save(kv, [ChunkRequest(b, list(range(8)))])  # evicts two chunks of a
    for k in b:
        rep.saved(k, 2)
    r = rep.report()  # the eviction counter moved: a relisting, sent as a delta
    assert not r.full and len(r.removed) == 2
    view.apply({0: r})
    assert view.lookup(a, 2) == (4, 8)
    assert view.lookup(b, 2) == (4, 8)
    assert rep.report() is None  # nothing new
    # A lost report leaves a gap: the view ignores what follows and asks for a full listing.
    st.save(kv, [ChunkRequest(a[:4], list(range(8)))])
    rep.saved(a[0], 2)
    rep.report()  # lost
    rep.saved(a[1], 2)
    view.apply({0: rep.report()})
    assert view.take_resync() == {0}
    rep.request_full()
    r = rep.report()
    assert r.full
    view.apply({0: r})
    assert view.take_resync() == set()
    assert view.lookup(a, 2) == (4, 8)
    kv.close()
    st.close()
