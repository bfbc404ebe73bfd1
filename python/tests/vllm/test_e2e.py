# SPDX-License-Identifier: Apache-2.0
"""End to end with real vLLM (its CPU build): TuttiConnector in separate vLLM processes.

Process A serves prompts with a long shared prefix and stores their KV; it exits. Process B, on
the same store, serves the same prompts and extended ones: most prompt tokens come from the
store and the generated tokens equal those of a run without the connector; again with loads
asynchronous. Then the store is
damaged: process C still answers identically, by recomputing, and no error reaches the user.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SERVE = HERE / "serve_prompts.py"

pytest.importorskip("vllm")


def run(model_dir, prompts, tmp, name, store=None, mode="sync", tp=1, env=None):
    """One vLLM process (with ``tp`` workers; ``env`` added to its environment); returns its
    JSON result."""
    p_path, o_path = tmp / f"{name}-prompts.json", tmp / f"{name}-out.json"
    p_path.write_text(json.dumps(prompts))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1", **(env or {}))
    args = [sys.executable, str(SERVE)] + (["--tp", str(tp)] if tp > 1 else [])
    args += [str(model_dir), str(p_path), str(o_path)]
    if store is not None:
        args += [str(store), mode]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    (tmp / f"{name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stderr[-4000:]}"
    return json.loads(o_path.read_text())


@pytest.fixture(scope="module")
def prompts():
    r = random.Random(7)
    shared = [r.randrange(1, 500) for _ in range(400)]
    first = [shared + [r.randrange(1, 500) for _ in range(r.randrange(40, 90))]
             for _ in range(4)]
    extended = [p + [r.randrange(1, 500) for _ in range(16)] for p in first]
    return first, first + extended


def damage_every_slot(store_dir, slot_bytes):
    """Flip one byte of the first object of every slot of the store's data file."""
    path = Path(store_dir) / "tutti.data"
    size = path.stat().st_size
    with open(path, "r+b") as f:
        off = (1 << 20) + 4096 + 100  # past the superblock area and the first slot header
        while off < size:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0xFF]))
            off += slot_bytes


def check_installed(result):
    """Under TUTTI_TEST_INSTALLED (scripts/test-wheel.sh): the process used the installed
    package, outside this source tree, and the library inside it."""
    if not os.environ.get("TUTTI_TEST_INSTALLED"):
        return
    package = Path(result["tutti"]["package"]).resolve().parent
    assert HERE.parents[2] not in package.parents, package
    assert result["tutti"]["library"] == str(package / "lib" / "libtutti.so"), result["tutti"]


def test_prefix_kv_survives_a_restart_and_a_damaged_store_is_recomputed(model_dir, prompts,
                                                                         tmp_path):
    first, second = prompts
    store = tmp_path / "store"
    reference = run(model_dir, second, tmp_path, "reference")

    a = run(model_dir, first, tmp_path, "a", store)
    check_installed(a)
    assert a["tokens"] == reference["tokens"][: len(first)]
    assert a["metrics"]["vllm:tutti_save_tokens"] > 0
    assert a["metrics"]["vllm:tutti_load_tokens"] == 0  # an empty store

    b = run(model_dir, second, tmp_path, "b", store)
    prompt_tokens = sum(len(p) for p in second)
    loaded = b["metrics"]["vllm:tutti_load_tokens"]
    assert loaded >= 0.9 * prompt_tokens, (loaded, prompt_tokens)
    assert b["metrics"]["vllm:tutti_load_errors"] == 0
    assert b["tokens"] == reference["tokens"]

    # The same with asynchronous loads: requests wait while a loader thread reads their KV.
    b2 = run(model_dir, second, tmp_path, "b-async", store, mode="async")
    assert b2["metrics"]["vllm:tutti_load_tokens"] >= 0.9 * prompt_tokens
    assert b2["metrics"]["vllm:tutti_load_errors"] == 0
    assert b2["tokens"] == reference["tokens"]

    from tutti.store import Geometry

    # The test model: 2 layers, 2 KV heads of 32, fp32, 32-token blocks, 64-token chunks.
    geo = Geometry(nr_layers=2, nr_kv_heads=2, head_dim=32, elem_bytes=4, block_tokens=32,
                   chunk_tokens=64)
    damage_every_slot(store, geo.slot_bytes)
    c = run(model_dir, second, tmp_path, "c", store)
    assert c["metrics"]["vllm:tutti_load_errors"] > 0
    assert c["metrics"]["vllm:tutti_load_tokens"] == 0
    assert c["tokens"] == reference["tokens"]
    assert "checksum mismatch" in (tmp_path / "c.log").read_text()
