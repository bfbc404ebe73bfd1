# SPDX-License-Identifier: Apache-2.0
"""The serving core (tutti/serving/) through its own API, with no serving engine: it imports
without vLLM, parses and checks the configuration, names chunks and namespaces, plans loads,
fences blocks behind the saver, and serves a stored prefix between a scheduler side and a
worker side driven as an engine's adapter would drive them."""

import dataclasses
import json
import logging
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tutti.serving import LOGGER_NAME
from tutti.serving.config import ServingContext, TuttiConfig
from tutti.serving.keys import KEY_BYTES, Namespace, chunk_key, chunk_keys
from tutti.serving.planner import LoadPlanner, Rates
from tutti.serving.ranks import RankReport, WorkerReport
from tutti.serving.saver import SAVE_PIECE_CHUNKS, Saver
from tutti.serving.scheduler import Scheduled, SchedulerCore
from tutti.serving.steps import LoadSpec, SaveSpec, StepPlan
from tutti.serving.worker import WorkerCore
from tutti.store import KV, Geometry

PYTHON_DIR = Path(__file__).resolve().parents[2]
BS = 16  # tokens a block
CHUNK = 32  # tokens a chunk: 2 blocks
NUM_BLOCKS = 64
GEO = Geometry(nr_layers=2, nr_kv_heads=2, head_dim=32, elem_bytes=4, block_tokens=BS,
               chunk_tokens=CHUNK)


def test_the_core_imports_without_vllm():
    """Every module of tutti.serving imports in a process that never imports vLLM (nor
    SGLang): the core names no serving engine. Nor torch: the core imports it only where it
    times or orders GPU work, once there is some."""
    code = ("import importlib, json, pkgutil, sys\n"
            "import tutti.serving as s\n"
            "names = [m.name for m in pkgutil.iter_modules(s.__path__, 'tutti.serving.')]\n"
            "for n in names:\n"
            "    importlib.import_module(n)\n"
            "print(json.dumps({'modules': names, 'vllm': 'vllm' in sys.modules,\n"
            "                  'sglang': 'sglang' in sys.modules,\n"
            "                  'torch': 'torch' in sys.modules}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=PYTHON_DIR)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"tutti.serving.config", "tutti.serving.scheduler", "tutti.serving.worker",
            "tutti.serving.saver", "tutti.serving.planner"} <= set(got["modules"])
    assert (got["vllm"], got["sglang"], got["torch"]) == (False, False, False)


# ---- configuration ----


def extra(tmp_path, **kw):
    return dict({"dirs": [str(tmp_path / "s")], "capacity_gb": 0.05, "chunk_tokens": CHUNK},
                **kw)


def namespace(**kw):
    return Namespace(**dict(dict(
        engine="test", engine_version="1.0", model="m", revision=None, weights="w" * 32,
        dtype="float32", geo=GEO, layout=None, device="cpu", rank=0, tp=1, pp=1,
        hash_algo="sha256"), **kw))


def context(cfg, max_model_len=256, kv_on_gpu=False, **kw):
    ns = namespace(**kw.pop("ns", {}))
    return ServingContext(cfg, GEO, lambda ctx: ns, block_size=BS,
                          max_model_len=max_model_len, kv_on_gpu=kv_on_gpu,
                          num_blocks=NUM_BLOCKS, layer_names=["l0", "l1"], **kw)


def test_the_configuration_names_the_key_at_fault(tmp_path):
    cfg = TuttiConfig.from_extra(extra(tmp_path), BS)
    assert (cfg.chunk_tokens, cfg.engine, cfg.async_save) == (CHUNK, "auto", True)
    assert cfg.capacity_bytes == int(0.05 * 2**30)
    # No chunk size given: the multiple of the block size nearest 256 tokens.
    assert TuttiConfig.from_extra({"dir": str(tmp_path), "capacity_gb": 1}, 48).chunk_tokens \
        == 240
    for key, value, says in (("chunk_tokens", 24, "positive multiple of .* block size 16"),
                             ("capacity_gb", 0, "\"capacity_gb\" must be positive"),
                             ("load_policy", "never", "\"load_policy\" must be one of"),
                             ("layerwise", "maybe", "layerwise must be true or false")):
        with pytest.raises(ValueError, match=says):
            TuttiConfig.from_extra(extra(tmp_path, **{key: value}), BS)
    with pytest.raises(ValueError, match="unknown .* keys \\['colour'\\]"):
        TuttiConfig.from_extra(extra(tmp_path, colour="red"), BS)


def test_the_context_resolves_auto_and_checks_ranks_and_capacity(tmp_path):
    cfg = TuttiConfig.from_extra(extra(tmp_path), BS)
    assert (cfg.async_load, cfg.layerwise) == (None, None)
    # "auto": asynchronous loads for KV in GPU memory, loads before the forward for host KV.
    gpu, host = context(cfg, kv_on_gpu=True), context(cfg)
    assert (gpu.cfg.async_load, gpu.cfg.layerwise) == (True, False)
    assert (host.cfg.async_load, host.cfg.layerwise) == (False, False)
    lw = context(TuttiConfig.from_extra(extra(tmp_path, layerwise=True), BS), kv_on_gpu=True)
    assert (lw.cfg.async_load, lw.cfg.layerwise) == (False, True)
    assert gpu.blocks_per_chunk == 2 and gpu.dirs == [str(tmp_path / "s")]
    # Tensor parallelism: each rank its directories, never one for two.
    per_rank = TuttiConfig.from_extra(extra(tmp_path, dirs=[str(tmp_path / "r{rank}")]), BS)
    assert context(per_rank, rank=1, tp=2).dirs == [str(tmp_path / "r1")]
    with pytest.raises(ValueError, match="ranks 0 and 1 would both use"):
        context(cfg, tp=2)
    # The store must hold one prompt of the longest length: 0.001 GiB is too small for 4K.
    small = TuttiConfig.from_extra(extra(tmp_path, capacity_gb=0.001), BS)
    with pytest.raises(ValueError, match="at least one prompt of max_model_len 4096 tokens"):
        context(small, max_model_len=4096)


def test_the_namespace_holds_what_must_not_mix():
    ns = namespace()
    assert ns.encode() == (b"tutti-test/2|weights=" + b"w" * 32 + b"|dtype=float32|block=16|"
                           b"kv=2x2x32|page=" + str(GEO.layer_block_bytes).encode() +
                           b"|layout=None|device=cpu|tp=0/1|pp=1|hash=sha256|test=1.0|user=")
    # Weights without a fingerprint (no local folder) or random ones: the model's name too.
    assert b"model=m@None" in namespace(weights=None).encode()
    assert b"model=m@None|weights=dummy" in namespace(weights="dummy").encode()
    # Every rank its own; the remote tier's shared by the ranks.
    r1 = namespace(rank=1, tp=2)
    assert b"tp=1/2" in r1.encode() and r1.encode(with_rank=False) == \
        namespace(rank=0, tp=2).encode(with_rank=False)
    # Any field that differs makes another namespace.
    others = [namespace(weights="v" * 32), namespace(dtype="bfloat16"), namespace(user="a"),
              namespace(engine_version="1.1"), namespace(quant="fp8"),
              namespace(geo=dataclasses.replace(GEO, block_tokens=32, chunk_tokens=64))]
    assert len({ns.encode(), *(o.encode() for o in others)}) == len(others) + 1


# ---- chunk keys ----


def test_a_chunk_key_names_the_prefix_up_to_its_last_block():
    hashes = [bytes([i]) * 8 for i in range(5)]
    keys = chunk_keys(hashes, 5, 2)
    # Two full chunks, then the fifth block as a partial chunk.
    assert keys == [chunk_key(hashes[1]), chunk_key(hashes[3]), chunk_key(hashes[4])]
    assert all(len(k) == KEY_BYTES for k in keys)
    assert chunk_keys(hashes, 4, 2) == keys[:2]
    assert chunk_key(b"a") != chunk_key(b"b") and chunk_key(b"a") == chunk_key(b"a")


# ---- the load plan ----


def test_the_plan_loads_a_hit_only_where_reading_beats_computing():
    token_bytes = 128 * 1024
    plan = LoadPlanner(token_bytes, BS, CHUNK, layerwise=False)
    assert plan.plan(1024, 1040) == 1024  # nothing measured yet: every hit loads
    # Reading a token takes 10 us, computing one 100 us: load.
    plan.update({0: Rates(load_bytes=token_bytes * 100_000, load_ns=10**9,
                          compute_tokens=10_000, compute_ns=10**9)})
    assert plan.plan(1024, 1040) == 1024
    # Then the store slows to 1 ms a token: recompute.
    plan.update({0: Rates(load_bytes=token_bytes * 101_000, load_ns=11 * 10**9,
                          compute_tokens=20_000, compute_ns=2 * 10**9)})
    assert plan.plan(1024, 1040) == 0
    # "always" never weighs.
    always = LoadPlanner(token_bytes, BS, CHUNK, layerwise=False, weigh=False)
    always.update({0: Rates(load_bytes=1, load_ns=10**9, compute_tokens=10**6,
                            compute_ns=10**9)})
    assert always.plan(1024, 1040) == 1024


def test_worker_reports_merge_by_rank():
    a = WorkerReport({0: RankReport(3, added={b"k": 2})}, {0: Rates(load_bytes=1, load_ns=1)})
    b = WorkerReport({1: RankReport(0, True)}, {0: Rates(load_bytes=2, load_ns=5)})
    a.merge(b)
    assert set(a.reports) == {0, 1} and a.rates[0].load_ns == 5  # the later totals win
    a.merge(WorkerReport({0: RankReport(2)}))
    assert a.reports[0].seq == 3  # an older report of a rank does not replace a newer one


# ---- the saver and its fence ----


class Gate:
    """A ``Ready`` that holds the saver until it is opened."""

    def __init__(self):
        self.open = threading.Event()

    def synchronize(self):
        assert self.open.wait(30)


def test_the_fence_waits_for_the_save_reading_a_block_handed_out_again():
    written, failed = [], []
    saver = Saver(written.append, failed.append, blocks_per_chunk=2)
    gate = Gate()
    saver.queue(SaveSpec("a", [b"k0", b"k1"], 0, [0, 1, 2, 3]), gate)
    saver.queue(SaveSpec("a", [b"k0", b"k1", b"k2"], 2, [4, 5]))
    assert saver.pending() == 2 and written == []
    saver.fence([10, 11])  # blocks no save reads: no wait
    fenced = threading.Thread(target=saver.fence, args=([5],))
    fenced.start()
    fenced.join(0.3)
    assert fenced.is_alive()  # block 5 is read by the second save, queued behind the first
    gate.open.set()
    fenced.join(30)
    assert not fenced.is_alive()
    assert [w.req_id for w in written] == ["a", "a"]  # in the order queued
    assert [w.first_chunk for w in written] == [0, 2] and failed == []
    saver.close()


def test_a_long_save_is_written_in_pieces_that_chain():
    written = []
    saver = Saver(written.append, lambda s: None, blocks_per_chunk=2)
    n = SAVE_PIECE_CHUNKS + 3
    keys = [bytes([i]) * KEY_BYTES for i in range(n)]
    saver.queue(SaveSpec("long", keys, 0, list(range(2 * n))))
    saver.drain()
    assert [(len(p.keys), p.first_chunk) for p in written] == [(SAVE_PIECE_CHUNKS, 0),
                                                               (n, SAVE_PIECE_CHUNKS)]
    assert written[1].block_ids == list(range(2 * SAVE_PIECE_CHUNKS, 2 * n))
    saver.close()


def test_a_save_that_raises_is_counted_failed_logged_and_the_saver_goes_on():
    failed, written = [], []

    def write(spec):
        if spec.req_id == "bad":
            raise RuntimeError("injected")
        written.append(spec)

    got = []

    class Catch(logging.Handler):
        def emit(self, record):
            got.append((record.levelno, record.getMessage()))

    logger = logging.getLogger(LOGGER_NAME)
    catch = Catch(logging.ERROR)
    logger.addHandler(catch)
    try:
        saver = Saver(write, failed.append, blocks_per_chunk=1)
        saver.queue(SaveSpec("bad", [b"x"], 0, [0]))
        saver.queue(SaveSpec("good", [b"y"], 0, [1]))
        saver.close()  # writes what is queued first
    finally:
        logger.removeHandler(catch)
    assert [s.req_id for s in failed] == ["bad"] and [s.req_id for s in written] == ["good"]
    assert any(lvl == logging.ERROR and "save of bad failed" in m for lvl, m in got), got


# ---- a scheduler side and a worker side, as an engine's adapter drives them ----


@dataclass
class Req:
    """An engine's request, as the core reads it (scheduler.Request)."""

    request_id: str
    num_prompt_tokens: int
    block_hashes: list[bytes] = field(default_factory=list)
    waiting: bool = False


def prompt(name, tokens):
    """A request whose block hashes are chained over its prefix, as an engine's are."""
    hashes, h = [], b"root"
    for b in range(tokens // BS):
        h = chunk_key(h + bytes([b]))
        hashes.append(h)
    return Req(name, tokens, hashes)


def step(sched, worker, runs, compute_tokens):
    """One engine step: plan, fence, loads, the forward, saves, the worker's report."""
    plan = sched.plan_step(StepPlan(), runs, compute_tokens)
    worker.step_begins(plan)
    worker.fence(plan.new_blocks)
    worker.start_loads(plan)
    worker.end_step(plan)
    worker.drain_saves()
    sched.worker_output(worker.report(), worker.take_finished_loads(),
                        worker.take_load_errors())
    return plan


def test_a_stored_prefix_is_found_loaded_and_counted_without_an_engine(tmp_path):
    cfg = TuttiConfig.from_extra(extra(tmp_path, load_policy="always"), BS)
    ctx = context(cfg)
    pages = [np.random.default_rng(i).integers(0, 255, (NUM_BLOCKS, GEO.layer_block_bytes),
                                               dtype=np.uint8) for i in range(GEO.nr_layers)]
    page = GEO.layer_block_bytes
    sched = SchedulerCore(ctx, waiting_for_load=lambda r: r.waiting)
    worker = WorkerCore(ctx)
    try:
        kv = KV(GEO, [(a.ctypes.data, page, page) for a in pages], 1, NUM_BLOCKS)
        assert worker.attach_kv(kv, "host", ["l0", "l1"]) in ("uring", "posix")
        # A first request of 5 blocks (2 chunks and a partial one): nothing stored yet.
        first = prompt("a", 5 * BS + 3)
        sched.on_new_request(first)
        assert sched.lookup(first, 0) == (0, False)
        sched.allocated(first, [], 0)
        plan = step(sched, worker, [Scheduled("a", [0, 1, 2, 3, 4, 5], first.num_prompt_tokens,
                                              new=True)], first.num_prompt_tokens)
        assert plan.loads == [] and [s.block_ids for s in plan.saves] == [[0, 1, 2, 3, 4]]
        sched.finished("a")
        # The same prompt again: found (all but the block holding its last token), loaded
        # into the blocks the engine gave it, bit for bit.
        again = prompt("b", 5 * BS + 3)
        sched.on_new_request(again)
        assert sched.lookup(again, 0) == (5 * BS, False)
        blocks = [10, 11, 12, 13, 14, 15]
        sched.allocated(again, blocks, 5 * BS)
        plan = step(sched, worker, [Scheduled("b", blocks, again.num_prompt_tokens, new=True)],
                    3)
        (load,) = plan.loads
        assert load.block_ids == blocks[:5] and plan.saves == []
        for a in pages:
            assert np.array_equal(a[10:15], a[0:5])
        counts = worker.take_counts()
        assert counts.data["load_tokens"] == 5 * BS and counts.data["save_tokens"] == 5 * BS
        sched_counts = sched.take_counts()
        assert sched_counts.data["hit_tokens"] == 5 * BS
        assert sched.take_counts() is None  # reported once
    finally:
        worker.close()
        sched.close()


def test_a_failed_load_is_reported_for_the_engine_to_recompute(tmp_path):
    cfg = TuttiConfig.from_extra(extra(tmp_path, load_policy="always"), BS)
    ctx = context(cfg)
    page = GEO.layer_block_bytes
    pages = [np.zeros((NUM_BLOCKS, page), dtype=np.uint8) for _ in range(GEO.nr_layers)]
    worker = WorkerCore(ctx)
    try:
        worker.attach_kv(KV(GEO, [(a.ctypes.data, page, page) for a in pages], 1, NUM_BLOCKS),
                         "host", ["l0", "l1"])
        keys = [chunk_key(b"never stored")]
        plan = StepPlan(loads=[LoadSpec("x", keys, 0, 0, [7, 8])])
        worker.start_loads(plan)
        worker.end_step(plan)
        assert worker.take_load_errors() == {7, 8}
        assert worker.take_counts().data["load_errors"] == 1
    finally:
        worker.close()
