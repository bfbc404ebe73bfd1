# SPDX-License-Identifier: Apache-2.0
"""End to end with real vLLM (its CPU build): TuttiConnector in separate vLLM processes, with
vLLM's default settings (its engine core and its worker each in a process of their own).

Process A serves prompts with a long shared prefix and stores their KV; it exits. Process B, on
the same store, serves the same prompts and extended ones: most prompt tokens come from the
store and the generated tokens equal those of a run without the connector; again with loads
asynchronous, and with the worker in the scheduler's process (VLLM_ENABLE_V1_MULTIPROCESSING=0).
Then the store is damaged: process C still answers identically, by recomputing, and no error
reaches the user. Then the model gets new weights at the same path: D loads nothing the old
weights computed, and answers as the new model does.
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
sys.path.insert(0, str(HERE))

import store_files  # noqa: E402

pytest.importorskip("vllm")


def run(model_dir, prompts, tmp, name, store=None, mode="sync", tp=1, env=None):
    """One vLLM process (with ``tp`` workers; ``env`` added to its environment, which otherwise
    keeps vLLM's defaults); returns its JSON result."""
    p_path, o_path = tmp / f"{name}-prompts.json", tmp / f"{name}-out.json"
    p_path.write_text(json.dumps(prompts))
    base = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env = dict(base, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0",
               VLLM_CPU_KVCACHE_SPACE="1", **(env or {}))
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
    # Prompts no process has seen: computed in long forward passes, which the load plan times.
    fresh = [[r.randrange(1, 500) for _ in range(700)] for _ in range(2)]
    return first, first + extended, fresh


def damage_every_slot(store_dir):
    """Flip one byte of the first object of every slot of the store's directory, in whichever
    of its data files the slot lives."""
    lay = store_files.layout(store_dir)
    for slot in range(lay["nr_slots"]):
        path, off = store_files.slot_location(store_dir, lay, slot)
        store_files.flip_byte(path, off + store_files.SLOT_HEADER_BYTES + 100)


def check_installed(result, library=True):
    """Under TUTTI_TEST_INSTALLED (scripts/test-wheel.sh): the process used the installed
    package, outside this source tree, and (``library``: where the engine core, the worker with
    it, ran in that process) the library inside it."""
    if not os.environ.get("TUTTI_TEST_INSTALLED"):
        return
    package = Path(result["tutti"]["package"]).resolve().parent
    assert HERE.parents[2] not in package.parents, package
    if library:
        assert result["tutti"]["library"] == str(package / "lib" / "libtutti.so"), \
            result["tutti"]


def test_prefix_kv_survives_a_restart_and_a_damaged_store_is_recomputed(model_dir, prompts,
                                                                         tmp_path):
    first, second, fresh = prompts
    store = tmp_path / "store"
    reference = run(model_dir, second + fresh, tmp_path, "reference")
    computed = reference["tokens"][:len(second)]

    a = run(model_dir, first, tmp_path, "a", store)
    # vLLM's defaults: the engine core, and the library with it, in a child process.
    check_installed(a, library=False)
    assert a["tokens"] == reference["tokens"][: len(first)]
    assert a["metrics"]["vllm:tutti_save_tokens"] > 0
    # The store starts empty; what A loads (if anything) it saved itself: with vLLM's
    # defaults the requests reach the engine one by one, and a later prompt may find the
    # shared prefix an earlier one stored.
    # The worker's process alone opened the store (the scheduler's would have made it fail
    # with EBUSY), and the connector's and the library's INFO lines are in vLLM's log.
    log = (tmp_path / "a.log").read_text()
    assert log.count("tutti: store ") == 1 and "opened (tutti-vllm/2|" in log
    assert "tutti: registered 2 layers" in log and "store open: 1 dirs" in log

    b = run(model_dir, second, tmp_path, "b", store)
    prompt_tokens = sum(len(p) for p in second)
    loaded = b["metrics"]["vllm:tutti_load_tokens"]
    assert loaded >= 0.9 * prompt_tokens, (loaded, prompt_tokens)
    assert b["metrics"]["vllm:tutti_load_errors"] == 0
    assert b["tokens"] == computed

    # The same with asynchronous loads: requests wait while a loader thread reads their KV;
    # and with the worker in the scheduler's process, where both use one handle of the store.
    # New prompts beside them are computed meanwhile.
    b2 = run(model_dir, second + fresh, tmp_path, "b-async", store, mode="async",
             env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert b2["metrics"]["vllm:tutti_load_tokens"] >= 0.9 * prompt_tokens
    assert b2["metrics"]["vllm:tutti_load_errors"] == 0
    assert b2["tokens"] == reference["tokens"]
    # The worker's measurements of its loads and of the long forward passes reached the
    # scheduler's load plan through vLLM's worker metadata.
    assert b2["plan"]["read_bytes_per_s"] > 0, b2["plan"]
    assert b2["plan"]["compute_tokens_per_s"] > 0, b2["plan"]
    assert (tmp_path / "b-async.log").read_text().count("tutti: store ") == 1
    check_installed(b2)

    # With vLLM's prefix cache on, the prompts that share the first one's prefix wait while it
    # is read, then find it in vLLM's cache: the shared chunks are read once, not per prompt.
    b3 = run(model_dir, second, tmp_path, "b-shared", store, mode="async-prefix-cache",
             env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert b3["tokens"] == computed
    assert b3["metrics"]["vllm:tutti_delayed_lookups"] > 0
    assert b3["metrics"]["vllm:tutti_load_errors"] == 0
    assert 0 < b3["metrics"]["vllm:tutti_load_tokens"] < 0.5 * prompt_tokens, b3["metrics"]

    damage_every_slot(store)
    # Every prompt reaches the scheduler before the first step (the engine core in this
    # process), so that no prompt of C loads what an earlier one of C stored again.
    c = run(model_dir, second, tmp_path, "c", store, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert c["metrics"]["vllm:tutti_load_errors"] > 0
    assert c["metrics"]["vllm:tutti_load_tokens"] == 0
    assert c["tokens"] == computed
    assert "checksum mismatch" in (tmp_path / "c.log").read_text()

    # New weights at the same path (same geometry, same file sizes): a new namespace. The store
    # of the old one is replaced, nothing it held is loaded, and the answers are the new
    # model's.
    import tiny_llama

    tiny_llama.make(model_dir, seed=1)
    new_reference = run(model_dir, second, tmp_path, "reference-new")
    assert new_reference["tokens"] != computed
    # Every prompt of D reaches the scheduler before the first step (as C's), so any hit would
    # be the old weights' KV.
    d = run(model_dir, second, tmp_path, "d", store, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert "replaced by an empty store" in (tmp_path / "d.log").read_text()
    assert d["metrics"]["vllm:tutti_hit_tokens"] == 0
    assert d["metrics"]["vllm:tutti_load_tokens"] == 0
    assert d["tokens"] == new_reference["tokens"]
