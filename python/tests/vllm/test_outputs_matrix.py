# SPDX-License-Identifier: Apache-2.0
"""The output matrix (outputs_matrix.py) as tests: greedy outputs with TuttiConnector identical
to vLLM without it after a first run, a restart, with layerwise loads on and off, each engine,
the store on /dev/shm and on a disk, and with damaged objects. On vLLM's CPU build a tiny model,
the GPU-only cases skipped; on a GPU a Llama-3-8B-shaped one."""

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import outputs_matrix as om  # noqa: E402  (python/tests/vllm is on the path: conftest.py)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    device = om.detect_device()
    if device is None:
        pytest.skip("no vLLM build for a GPU or a CPU")
    out = Path(os.environ.get("TUTTI_OUTPUTS_MATRIX_OUT") or tmp_path_factory.mktemp("matrix"))
    shm = om.shm_default(om.SETUPS[device]["capacity_gb"], out)
    disk = out / "disk-store"
    m = om.Matrix(device, out, shm, disk, deadline_s=float(os.environ.get(
        "TUTTI_OUTPUTS_MATRIX_DEADLINE", "1800")))
    try:
        m.run()
    finally:
        import shutil

        for d in (shm, disk):
            shutil.rmtree(d, ignore_errors=True)
    return {r["case"]: r for r in m.results}


@pytest.mark.parametrize("case", [c["name"] for c in om.CASES])
def test_case(matrix, case):
    r = matrix[case]
    if r["status"] == "skipped":
        pytest.skip("; ".join(r["problems"]))
    assert r["status"] == "pass", "; ".join(r["problems"])
