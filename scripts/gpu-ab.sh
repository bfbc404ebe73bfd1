#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Before and after on one GPU machine in one run: tutti-gpu-store-bench built from an earlier
# revision and from the working tree, run in turn with the same arguments, so that the drift of
# shared storage between machines and runs does not pass for the change's effect.
#
# Usage, in two halves (the GPU machine has no git history):
#   scripts/gpu-ab.sh pack REV     here: the tree of REV into build/ab/before.tgz (git archive)
#   scripts/gpu-ab.sh run          on the GPU machine (carry build/ab and .debs): builds both,
#                                  then AB_PASSES (default 2) passes of after, then before, each
#                                  `tutti-gpu-store-bench --dir AB_DIR AB_ARGS`, its JSON rows
#                                  gathered in $OUT/ab.jsonl (emptied first), each with
#                                  "build": "after" or "before" and "pass": N added, and its
#                                  text in $OUT/ab-BUILD-PASS.txt. AB_DIR defaults to /dev/shm/tutti-ab
#                                  (emulated NVMe); AB_ARGS to "--contexts 8192,32768,131072
#                                  --paths gpu-uring --repeats 3 --ceiling-s 4".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

case ${1:-} in
pack)
	rev=${2:?usage: scripts/gpu-ab.sh pack REV}
	mkdir -p build/ab
	git archive --format=tar.gz -o build/ab/before.tgz "$rev" CMakeLists.txt cmake cuda src \
		include bench tests tools examples || exit 1
	echo "build/ab/before.tgz: the tree of $(git rev-parse --short "$rev")"
	;;
run)
	OUT=${OUT:-$PWD/gpu-out}
	mkdir -p "$OUT"
	[ -f build/ab/before.tgz ] || { echo "no build/ab/before.tgz: run 'pack REV' first" >&2; exit 2; }
	# The working tree's build.
	# gpu-run.sh exits 1 when its build fails; a binary left by an earlier build must not be
	# measured as the working tree's.
	bash scripts/gpu-run.sh build > "$OUT/ab-build-after.log" 2>&1 ||
		{ tail -20 "$OUT/ab-build-after.log"; exit 1; }
	# The earlier tree's build, with the same libraries.
	# shellcheck source=scripts/gpu-deps.sh
	. scripts/gpu-deps.sh
	rm -rf build/ab/before && mkdir -p build/ab/before && tar xzf build/ab/before.tgz -C build/ab/before
	{ cmake -S build/ab/before -B build/ab/before/build -DTUTTI_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
		cmake --build build/ab/before/build -j"$(nproc)" --target tutti_gpu_store_bench; } \
		> "$OUT/ab-build-before.log" 2>&1 || { tail -20 "$OUT/ab-build-before.log"; exit 1; }
	dir=${AB_DIR:-/dev/shm/tutti-ab}
	args=${AB_ARGS:---contexts 8192,32768,131072 --paths gpu-uring --repeats 3 --ceiling-s 4}
	status=0
	: > "$OUT/ab.jsonl"
	for pass in $(seq "${AB_PASSES:-2}"); do
		for v in after before; do
			bin=build/gpu/tutti-gpu-store-bench
			[ $v = before ] && bin=build/ab/before/build/tutti-gpu-store-bench
			rm -rf "$dir" && mkdir -p "$dir"
			# shellcheck disable=SC2086
			timeout "${BENCH_TIMEOUT:-300}" $bin --dir "$dir" --json "$OUT/ab-pass.jsonl" $args \
				> "$OUT/ab-$v-$pass.txt" 2> "$OUT/ab-$v-$pass.err"
			rc=$?
			[ $rc -eq 0 ] || status=$rc
			echo "== $v, pass $pass: exit $rc"
			grep -vE '^#' "$OUT/ab-$v-$pass.txt"
			sed "s/}\$/,\"build\":\"$v\",\"pass\":$pass}/" "$OUT/ab-pass.jsonl" >> "$OUT/ab.jsonl"
			rm -f "$OUT/ab-pass.jsonl"
		done
	done
	rm -rf "$dir"
	exit $status
	;;
*)
	sed -n '3,15p' "$0" >&2
	exit 2
	;;
esac
