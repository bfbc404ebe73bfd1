#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build, test and benchmark the GPU data path on a GPU machine, writing every log and result
# under $OUT (default ./gpu-out):
#
#   OUT=dir bash scripts/gpu-run.sh [--dry-run] [STEP...]   (default steps: test mover)
#   bash scripts/gpu-run.sh --list                           every step, with what it does
#
# Each step is a file, scripts/gpu/steps/STEP.sh, whose first line says what it does and whose
# comments name the variables it reads (BENCH_TIMEOUT bounds most benches). Every run first
# builds build/gpu with CUDA on; libraries the machine lacks (liburing, libxxhash, cmocka) may
# be given as Debian packages in .debs/ (scripts/gpu-deps.sh). --dry-run prints the commands the
# build and the steps would run instead of running them: it needs no GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
# shellcheck source=scripts/gpu/per_storage.sh
. scripts/gpu/per_storage.sh

dry=
case ${1:-} in
--list)
	step_list
	exit 0
	;;
--dry-run)
	dry=1
	shift
	;;
-h | --help)
	sed -n '3,13p' "$0"
	exit 0
	;;
esac

steps=${*:-test mover}
for step in $steps; do
	known_step "$step" ||
		{ echo "gpu-run.sh: no step '$step' (scripts/gpu-run.sh --list names them)" >&2; exit 2; }
done

OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
if [ -n "$dry" ]; then
	dry_run
	dry_print . scripts/gpu-deps.sh
else
	# shellcheck source=scripts/gpu-deps.sh
	. scripts/gpu-deps.sh
fi

{ nvidia-smi; nvcc --version; uname -a; } > "$OUT/machine.txt" 2>&1
log "configure and build (CUDA on, sm_90)"
cmake -S . -B build/gpu -DTUTTI_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/build.log" 2>&1 &&
	cmake --build build/gpu -j"$(nproc)" >> "$OUT/build.log" 2>&1
rc=$?
log "build exit $rc"
[ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit 1; }

for step in $steps; do
	# shellcheck source=/dev/null
	. "$steps_dir/$step.sh"
done
