#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Description: scripts/gpu-run.sh without a GPU: every file of scripts/gpu/ parses, every step
# file starts with its one-line description and --list prints each step with it, an unknown
# step fails with a message before anything runs, and --dry-run prints the commands of the
# default steps and of every step (bench arguments, directories and result files in $OUT) and
# leaves nothing behind but $OUT.
set -euo pipefail
src=$1
run=$src/scripts/gpu-run.sh
steps=$src/scripts/gpu/steps
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tutti-gpu-run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

for f in "$run" "$src"/scripts/gpu/*.sh "$steps"/*.sh; do
	bash -n "$f" || fail "$f does not parse"
done

# --list: one line per step file, "NAME  DESCRIPTION", the description the file's first line.
bash "$run" --list >"$tmp/list" || fail "--list exited $?"
n=0
for f in "$steps"/*.sh; do
	name=$(basename "$f" .sh)
	desc=$(head -n 1 "$f")
	[[ $desc =~ ^#\ [A-Za-z].{20,}$ ]] || fail "$f: the first line must describe the step: '$desc'"
	line=$(grep -E "^$name " "$tmp/list") || fail "--list misses $name: $(cat "$tmp/list")"
	[ "$(echo "$line" | sed -E 's/^[^ ]+ +//')" = "${desc#\# }" ] || fail "--list: '$line' is not $f's description"
	n=$((n + 1))
done
[ "$(wc -l <"$tmp/list")" -eq "$n" ] || fail "--list has $(wc -l <"$tmp/list") lines for $n step files"
[ "$n" -ge 20 ] || fail "only $n step files"

# An unknown step: a message and a non-zero exit, before the build (no $OUT made).
if OUT=$tmp/unknown bash "$run" mover no-such-step 2>"$tmp/err"; then fail "an unknown step succeeded"; fi
grep -q "no-such-step" "$tmp/err" || fail "no message naming the unknown step: $(cat "$tmp/err")"
[ ! -e "$tmp/unknown" ] || fail "an unknown step still made \$OUT"
if bash "$run" --dry-run ../lib 2>/dev/null; then fail "a path was taken for a step"; fi

# The dry run of the default steps (test mover): the build, ctest, memcheck, the mover bench.
OUT=$tmp/out bash "$run" --dry-run >"$tmp/default" 2>&1 || fail "dry run exited $?: $(cat "$tmp/default")"
for want in "+ cmake -S . -B build/gpu -DTUTTI_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo" \
	"+ ctest --output-on-failure -j4" \
	"+ timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 build/gpu/tests/gpu/test_gpu_pipeline" \
	"+ build/gpu/tutti-gpu-bench --repeats 10 --json"; do
	grep -qxF -- "$want" "$tmp/default" || fail "the default dry run lacks '$want': $(cat "$tmp/default")"
done
grep -q "^== build exit 0" "$tmp/out/summary.txt" || fail "no summary in \$OUT"

# Every step, with the variables that shape their commands.
mapfile -t all < <(awk '{print $1}' "$tmp/list")
OUT=$tmp/all BENCH_ARGS="--contexts 8192" BENCH_VARIANTS="--paths uring;" VARIANT_TURNS=1 \
	POSIX_THREADS=16 POSIX_TURNS=1 HOST_KV_CONTEXTS=8192 VLLM_GPU_CASES=reference \
	bash "$run" --dry-run "${all[@]}" >"$tmp/all.txt" 2>&1 || fail "dry run of every step: $(cat "$tmp/all.txt")"
for want in \
	"+ timeout 900 build/gpu/tutti-gpu-store-bench --dir /dev/shm/tutti-bench --json $tmp/all/store-emulated.jsonl --contexts 8192" \
	"+ timeout 900 build/gpu/tutti-gpu-store-bench --dir $src/build/tutti-bench --json $tmp/all/store-disk.jsonl --contexts 8192" \
	"+ timeout 600 build/gpu/tutti-gpu-store-bench --dir /dev/shm/tutti-latency --latency 100 --paths gpu-uring,uring,posix --json $tmp/all/latency-emulated.jsonl" \
	"+ timeout 300 build/gpu/tutti-gpu-store-bench --dir /dev/shm/tutti-variants --json $tmp/all/variants.jsonl --contexts 8192 --paths uring" \
	"+ timeout 300 build/gpu/tutti-gpu-store-bench --dir /dev/shm/tutti-posix-threads --json $tmp/all/posix-threads.jsonl --contexts 8192 --paths posix --posix-threads 16" \
	"+ timeout 600 build/gpu/tutti bench --dir $src/build/tutti-host-kv --engine posix --context 8192 --repeats 3 --json" \
	"+ timeout 300 build/gpu/tutti ceiling --dir /dev/shm/tutti-ceiling --gpu 0 --json" \
	"+ . build/vllm-prefix/env.sh" \
	"+ timeout --kill-after=30 580 python3 tests/vllm/outputs_matrix.py --out $tmp/all/vllm-gpu --work $src/build/vllm-gpu-work --disk-dir $src/build/vllm-gpu-disk --deadline 520 --cases reference" \
	"+ timeout --kill-after=30 460 python3 bench/serve/serve_bench.py --out $tmp/all/serve-disk --work $src/build/serve-work --storage disk --systems tutti,lmcache-mp,lmcache-mp-large --emulated-dir /dev/shm/tutti-serve --disk-dir $src/build/serve-disk --deadline 400"; do
	grep -qxF -- "$want" "$tmp/all.txt" || fail "the dry run lacks '$want'"
done
# Each step logs in the summary; the variants ran once each, the empty one with BENCH_ARGS alone.
[ "$(grep -c "^+ timeout 300 build/gpu/tutti-gpu-store-bench --dir /dev/shm/tutti-variants" "$tmp/all.txt")" -eq 2 ] ||
	fail "variants: expected two runs"
grep -q "^== vllm-gpu exit 0" "$tmp/all/summary.txt" || fail "vllm-gpu did not run in the dry run"
# Nothing was run, so no result file has content.
[ -z "$(find "$tmp/all" -name '*.jsonl' -size +0)" ] || fail "a dry run wrote results"
echo "gpu-run.sh: ${#all[@]} steps listed and dry-run"
