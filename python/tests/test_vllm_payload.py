# SPDX-License-Identifier: Apache-2.0
"""scripts/vllm_payload.py, the packing and unpacking behind scripts/vllm-gpu-payload.sh, on
small made-up distributions: parts within their size, a unit larger than a part cut into pieces
and joined, install over several calls (each unpacking only what arrived, naming what is
missing), a corrupt part refused, if-missing distributions left to the machine's Python."""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vllm_payload.py"
MIB = 1 << 20


def run(*args, check=True):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       check=False, env={**os.environ, "PYTHON": sys.executable})
    if check and r.returncode != 0:
        raise AssertionError(f"rc {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def make_dist(stage, name, files):
    for rel, data in files.items():
        p = stage / name / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def packed(tmp_path):
    stage, wheels, out = tmp_path / "stage", tmp_path / "wheels", tmp_path / "payload"
    for d in (stage, wheels, out):
        d.mkdir()
    big = os.urandom(3 * MIB)  # incompressible: larger than a part once compressed
    make_dist(stage, "vllm", {
        "vllm/__init__.py": b"__version__ = '0.26.0'\n",
        "vllm/_C.abi3.so": big,
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": b"x" * 4096,  # pruned
        "vllm/models/llama.py": b"# llama\n" * 5000,
        "bin/vllm": b"#!/usr/bin/python3\n",  # pruned
    })
    make_dist(stage, "smallpkg", {"smallpkg/__init__.py": os.urandom(600 * 1024)})
    # The test's own Python has pytest: an if-missing distribution it skips.
    make_dist(stage, "pytest", {"pytest/__init__.py": b"raise ImportError\n"})
    rows = [("vllm", "0.26.0", "always"), ("smallpkg", "1.0", "always"),
            ("pytest", "0.0", "if-missing")]
    with open(tmp_path / "packages.tsv", "w") as f:
        for name, version, policy in rows:
            whl = f"{name}-{version}-py3-none-any.whl"
            (wheels / whl).write_bytes(name.encode())
            f.write(f"{name}\t{version}\t{policy}\t{whl}\n")
    run("pack", "--stage", str(stage), "--packages", str(tmp_path / "packages.tsv"),
        "--wheels", str(wheels), "--units", str(tmp_path / "units"), "--out", str(out),
        "--part-bytes", str(1 * MIB), "--call-bytes", str(2 * MIB))
    return out, json.loads((out / "manifest.json").read_text())


def test_pack_limits_prunes_and_checksums(tmp_path):
    out, m = packed(tmp_path)
    assert {p["example"] for p in m["pruned"]} == {
        "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "bin/vllm"}
    assert sum(p["bytes"] for p in m["pruned"]) == 4096 + len(b"#!/usr/bin/python3\n")
    for p in m["parts"]:
        data = (out / p["file"]).read_bytes()
        assert len(data) == p["bytes"] <= 1 * MIB
        assert hashlib.sha256(data).hexdigest() == p["sha256"]
    split = [u for u in m["units"] if u["pieces"] > 1]
    assert split, "the 3 MiB unit must be cut into pieces"
    # Every call carries one or two parts that fit together.
    assert all(1 <= len(c) <= 2 for c in m["calls"])
    assert sorted(f for c in m["calls"] for f in c) == sorted(p["file"] for p in m["parts"])
    plan = run("plan", "--out", str(out)).stdout
    assert len(re.findall(r"^  call \d+: carry ", plan, re.MULTILINE)) == len(m["calls"])


def test_install_over_several_calls(tmp_path):
    out, m = packed(tmp_path)
    prefix = tmp_path / "prefix"
    held = tmp_path / "held"
    held.mkdir()
    files = [p["file"] for p in m["parts"]]
    for f in files:
        os.rename(out / f, held / f)

    # No part yet: nothing unpacked, every part named as missing.
    r = run("install", "--out", str(out), "--prefix", str(prefix), "--no-smoke", check=False)
    assert r.returncode == 3 and "INCOMPLETE" in r.stdout
    assert all(f in r.stdout for f in files)
    assert "the machine has" in r.stdout  # pytest: left to the machine's Python

    # The calls, one after another; a corrupt part is refused, then carried again.
    for n, call in enumerate(m["calls"]):
        for f in call:
            data = (held / f).read_bytes()
            if n == 0:
                (out / f).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        if n == 0:
            r = run("install", "--out", str(out), "--prefix", str(prefix), "--no-smoke",
                    check=False)
            assert r.returncode == 3 and "CHECKSUM MISMATCH" in r.stdout
        for f in call:
            (out / f).write_bytes((held / f).read_bytes())
        r = run("install", "--out", str(out), "--prefix", str(prefix), "--no-smoke",
                check=False)
        last = n == len(m["calls"]) - 1
        assert r.returncode == (0 if last else 3), r.stdout + r.stderr
    site = prefix / "site"
    assert (site / "vllm" / "_C.abi3.so").stat().st_size == 3 * MIB
    assert (site / "smallpkg" / "__init__.py").exists()
    assert not (site / "pytest").exists()
    assert not (site / "vllm" / "vllm_flash_attn" / "_vllm_fa2_C.abi3.so").exists()
    env = (prefix / "env.sh").read_text()
    assert f'PYTHONPATH="{site}' in env and "VLLM_USE_FLASHINFER_SAMPLER=0" in env

    # Idempotent: a rerun unpacks nothing and says the parts are done.
    (site / "smallpkg" / "__init__.py").unlink()
    r = run("install", "--out", str(out), "--prefix", str(prefix), "--no-smoke")
    assert "unpacked 0 units" in r.stdout and "already unpacked, skipped" in r.stdout
    assert not (site / "smallpkg" / "__init__.py").exists()
