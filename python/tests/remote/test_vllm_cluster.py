# SPDX-License-Identifier: Apache-2.0
"""Two vLLM engines (CPU build) in separate processes share prefixes through a real Mooncake
cluster: engine A computes and publishes; engine B, with an empty local store on another
"node", fetches the prefixes instead of computing them, and answers exactly as a run without any
connector. With the master dead, a third engine answers the same by computing."""

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import Cluster, mooncake_env

pytest.importorskip("vllm")

VLLM_TESTS = Path(__file__).resolve().parent.parent / "vllm"
SERVE = VLLM_TESTS / "serve_prompts.py"


def run(model, prompts, tmp, name, store=None, remote=None, mode="sync"):
    p_path, o_path = tmp / f"{name}-prompts.json", tmp / f"{name}-out.json"
    p_path.write_text(json.dumps(prompts))
    env = dict(mooncake_env(), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONHASHSEED="0", VLLM_ENABLE_V1_MULTIPROCESSING="0",
               VLLM_CPU_KVCACHE_SPACE="1")
    args = [sys.executable, str(SERVE), str(model), str(p_path), str(o_path)]
    if store is not None:
        args += [str(store), mode]
        if remote is not None:
            r_path = tmp / f"{name}-remote.json"
            r_path.write_text(json.dumps(remote))
            args.append(str(r_path))
    t0 = time.monotonic()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    (tmp / f"{name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stderr[-4000:]}"
    out = json.loads(o_path.read_text())
    out["seconds"] = time.monotonic() - t0
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    sys.path.insert(0, str(VLLM_TESTS))
    import tiny_llama

    return tiny_llama.make(tmp_path_factory.mktemp("model") / "tiny-llama")


def test_two_engines_share_prefixes_through_the_cluster(model, tmp_path):
    r = random.Random(11)
    shared = [r.randrange(1, 500) for _ in range(400)]
    prompts = [shared + [r.randrange(1, 500) for _ in range(r.randrange(40, 90))]
               for _ in range(4)]
    reference = run(model, prompts, tmp_path, "reference")

    cluster = Cluster(tmp_path / "mooncake").start()
    try:
        def remote(node):
            return {"engine": "mooncake", "master": cluster.master,
                    "metadata": cluster.metadata, "local_hostname": Cluster.node_host(node),
                    "ring_mb": 8, "publish_mb": 8,
                    # generous on a shared 2-core test machine: the counts below assume no
                    # lookup or fetch gives up. An asynchronous fetch runs beside vLLM's CPU
                    # threads, and a process's first one took over 2 s there.
                    "timeout_ms": 10000, "lookup_timeout_ms": 1000}

        a = run(model, prompts, tmp_path, "a", tmp_path / "store-a", remote(0))
        assert a["tokens"] == reference["tokens"]
        assert a["metrics"]["vllm:tutti_remote_publish_chunks"] > 0
        assert a["metrics"].get("vllm:tutti_remote_load_tokens", 0) == 0

        b = run(model, prompts, tmp_path, "b", tmp_path / "store-b", remote(1))
        prompt_tokens = sum(len(p) for p in prompts)
        fetched = b["metrics"]["vllm:tutti_remote_load_tokens"]
        assert fetched >= 0.8 * prompt_tokens, (fetched, prompt_tokens)
        assert b["metrics"]["vllm:tutti_remote_load_errors"] == 0
        # node b's store started empty: every token it loaded came from the pool
        assert b["metrics"]["vllm:tutti_load_tokens"] == fetched
        assert b["tokens"] == reference["tokens"]
        # what b fetched was promoted into its own store: a restart of b loads it locally
        b2 = run(model, prompts, tmp_path, "b2", tmp_path / "store-b", remote(1))
        assert b2["metrics"]["vllm:tutti_load_tokens"] >= 0.8 * prompt_tokens
        assert b2["metrics"].get("vllm:tutti_remote_load_tokens", 0) == 0

        # asynchronous loads: the fetch runs on the loader thread while the request waits
        d = run(model, prompts, tmp_path, "d", tmp_path / "store-d", remote(2), mode="async")
        assert d["metrics"]["vllm:tutti_remote_load_tokens"] >= 0.8 * prompt_tokens
        assert d["metrics"]["vllm:tutti_remote_load_errors"] == 0
        assert d["tokens"] == reference["tokens"]
        assert b2["tokens"] == reference["tokens"]

        # the master dies: a third node gets no remote hits, computes, and answers the same
        cluster.kill_master()
        c = run(model, prompts, tmp_path, "c", tmp_path / "store-c", remote(2))
        assert "remote tier unavailable" in (tmp_path / "c.log").read_text()
        assert c["metrics"].get("vllm:tutti_remote_load_tokens", 0) == 0
        assert c["tokens"] == reference["tokens"]
    finally:
        cluster.stop()
