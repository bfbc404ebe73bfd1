# SPDX-License-Identifier: Apache-2.0
"""End to end with tensor parallelism: real vLLM (its CPU build) with tensor_parallel_size=2, two
worker processes each holding one of the tiny model's two KV heads, each with a store of its
own ("dirs": ["store-{rank}"]).

A stores the prompts' prefixes on both ranks; B loads them from both, synchronously and then
asynchronously, then layer by layer. Then rank 1's store is
deleted: rank 0 still holds every chunk, but a chunk held by one rank only is a miss, so D
loads nothing, fails nothing and stores the chunks again on rank 1. Then every chunk of rank 1
is damaged on disk: C's loads fail on rank 1 only, vLLM recomputes those blocks on both ranks,
and rank 1 stores them again, so E loads everything from both.
Every run answers exactly as a run without the connector.
"""

import os
import random
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytest.importorskip("vllm")
sys.path.insert(0, str(HERE))

from test_e2e import damage_every_slot  # noqa: E402
from test_e2e import run as e2e_run  # noqa: E402

TP = 2


def cpus():
    return sorted(os.sched_getaffinity(0))


pytestmark = pytest.mark.skipif(len(cpus()) < TP, reason=f"tensor parallelism over {TP} "
                                "CPU workers needs one CPU each")


def run(model_dir, prompts, tmp, name, store=None, mode="sync"):
    """One vLLM process with TP workers; returns its JSON result."""
    # vLLM's CPU workers bind their threads to NUMA nodes, one node each; on a machine with one
    # node they must be given CPUs by hand: one each.
    bind = "|".join(str(c) for c in cpus()[:TP])
    # The engine core in the test's process (its workers in processes of their own, as with
    # vLLM's defaults): every prompt reaches the scheduler before the first step, so that a
    # run's hits are what earlier runs stored (test_e2e.py runs vLLM's defaults).
    return e2e_run(model_dir, prompts, tmp, name, store, mode, tp=TP,
                   env={"VLLM_CPU_OMP_THREADS_BIND": bind, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})


def test_tp2_loads_from_every_rank_and_a_chunk_one_rank_lacks_is_never_used(model_dir, tmp_path):
    r = random.Random(11)
    shared = [r.randrange(1, 500) for _ in range(400)]
    first = [shared + [r.randrange(1, 500) for _ in range(r.randrange(40, 90))]
             for _ in range(4)]
    second = first + [p + [r.randrange(1, 500) for _ in range(16)] for p in first]
    prompt_tokens = sum(len(p) for p in second)
    store = tmp_path / "store-{rank}"
    rank0, rank1 = tmp_path / "store-0", tmp_path / "store-1"
    reference = run(model_dir, second, tmp_path, "reference")

    a = run(model_dir, first, tmp_path, "a", store)
    assert a["tokens"] == reference["tokens"][: len(first)]
    assert a["metrics"]["vllm:tutti_save_tokens"] > 0
    assert (rank0 / "tutti.data").exists() and (rank1 / "tutti.data").exists()

    b = run(model_dir, second, tmp_path, "b", store)
    assert b["metrics"]["vllm:tutti_load_tokens"] >= 0.9 * prompt_tokens, b["metrics"]
    assert b["metrics"]["vllm:tutti_load_errors"] == 0
    assert b["tokens"] == reference["tokens"]
    # Asynchronous loads: a request waits until both ranks report its load done.
    b2 = run(model_dir, second, tmp_path, "b-async", store, mode="async")
    assert b2["metrics"]["vllm:tutti_load_tokens"] >= 0.9 * prompt_tokens, b2["metrics"]
    assert b2["metrics"]["vllm:tutti_load_errors"] == 0
    assert b2["tokens"] == reference["tokens"]
    # Layerwise loads: each rank's worker loads through a pipeline of its own, every layer
    # waited for at vLLM's hook for it (the counters are summed over the ranks).
    b3 = run(model_dir, second, tmp_path, "b-layerwise", store, mode="layerwise")
    m = b3["metrics"]
    assert m["vllm:tutti_load_tokens"] >= 0.9 * prompt_tokens, m
    assert m["vllm:tutti_load_errors"] == 0
    assert m["vllm:tutti_pipeline_steps"] >= TP
    assert m["vllm:tutti_pipeline_waits"] == m["vllm:tutti_pipeline_layers_loaded"] > 0
    assert m["vllm:tutti_pipeline_waits_unhooked"] == 0
    assert b3["tokens"] == reference["tokens"]

    # Rank 1 loses its store: what rank 0 alone holds is not a hit.
    shutil.rmtree(rank1)
    d = run(model_dir, second, tmp_path, "d", store)
    assert d["metrics"]["vllm:tutti_load_tokens"] == 0, d["metrics"]
    assert d["metrics"]["vllm:tutti_load_errors"] == 0
    assert d["metrics"]["vllm:tutti_hit_tokens"] == 0
    assert d["tokens"] == reference["tokens"]

    # D stored the chunks on rank 1 again, so C finds them on both ranks and loads; rank 1's
    # copies are damaged: its loads fail, and the blocks are recomputed on both ranks.
    damage_every_slot(rank1)
    c = run(model_dir, second, tmp_path, "c", store)
    assert c["metrics"]["vllm:tutti_hit_tokens"] > 0
    assert c["metrics"]["vllm:tutti_load_errors"] > 0
    assert c["tokens"] == reference["tokens"]
    assert "checksum mismatch" in (tmp_path / "c.log").read_text()

    # C stored the recomputed chunks on rank 1 again: E loads everything from both ranks.
    e = run(model_dir, second, tmp_path, "e", store)
    assert e["metrics"]["vllm:tutti_load_tokens"] >= 0.9 * prompt_tokens, e["metrics"]
    assert e["metrics"]["vllm:tutti_load_errors"] == 0
    assert e["tokens"] == reference["tokens"]
