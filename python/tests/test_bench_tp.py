# SPDX-License-Identifier: Apache-2.0
"""bench/tp_ttft.py's CPU smoke path: two ranks (gloo), a tiny model, each rank's KV shard
saved to and loaded from its own store over two directories through the pipeline, with the
all-reduces between ranks; every load bit-exact on both ranks, staging reported, one summary
line per storage, engine and length."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "tp_ttft.py"


def test_tp_ttft_cpu_smoke(tmp_path):
    out = tmp_path / "out"
    subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--model", "tiny",
                    "--lengths", "512,1024", "--suffix", "32", "--engines", "uring,gpu-uring",
                    "--repeats", "2",
                    "--shm-dir", str(tmp_path / "fast"), "--disk-dir", str(tmp_path / "disk"),
                    "--out", str(out)], check=True, timeout=600)
    rows = [json.loads(line) for line in (out / "tp-ttft.jsonl").read_text().splitlines()]
    runs = [r for r in rows if "load_s" in r]
    # 2 storages x 2 engines x 2 lengths x 2 ranks x 2 repeats
    assert len(runs) == 32
    assert all(r["bit_exact"] and r["load_errors"] == 0 for r in runs)
    assert {r["rank"] for r in runs} == {0, 1}
    assert all(r["load_bytes"] > 0 and r["store_staging_bytes"] > 0 for r in runs)
    # The ranks hold different shards: their prefix KV hashes differ.
    by_rank = {r["rank"]: r["kv_hash"] for r in runs if r["prefix"] == 1024 and r["repeat"] == 0}
    assert by_rank[0] != by_rank[1]
    summary = (out / "tp-ttft-summary.txt").read_text()
    assert summary.count("bit-exact on every rank and run") == 8, summary
    assert summary.count("median of 2 runs") == 8, summary
    # Raw reads of each rank's own files, both ranks at once, give every run its bound.
    raws = [r for r in rows if r.get("engine") == "raw-read"]
    assert len(raws) == 2 * 2 * 2 and all(r["raw_gbps"] > 0 for r in raws), raws
    assert summary.count("raw O_DIRECT read per rank") == 2, summary
    assert summary.count("TTFT x bound") == 8, summary
    assert not any(p.name.startswith("rank") for p in tmp_path.rglob("*")), "stores left behind"
