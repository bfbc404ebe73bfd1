#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Description: the tutti CLI end to end: bench runs store, retrieve and verification on small
# workloads (staged and direct paths, both engines), prints the JSON fields it promises, and
# rejects bad options.
set -euo pipefail
tutti=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/tutti-cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

check_json() {
	local out=$1
	for field in store_gbps retrieve_gbps raw_read_gbps raw_write_gbps page_retrieve_gbps \
		cpu_s_per_gb page_cpu_s_per_gb verified; do
		grep -q "\"$field\":" <<<"$out" || fail "missing $field in: $out"
	done
	grep -q '"verified":true' <<<"$out" || fail "not verified: $out"
}

"$tutti" version | grep -q '^tutti [0-9]' || fail "version"

# Tiny geometry: 2 KiB blocks, not O_DIRECT aligned, so the staged path and no baseline.
out=$("$tutti" bench --model tiny --context 1024 --requests 3 --shared 512 --repeats 1 \
	--dir "$dir/tiny" --json)
check_json "$out"

# Llama geometry, aligned blocks: the direct path, the raw sweep and the baseline, both engines.
for engine in uring posix; do
	for layout in kv-first cross-layer; do
		out=$("$tutti" bench --context 1024 --requests 2 --shared 512 --repeats 1 \
			--engine $engine --layout $layout --dir "$dir/llama" --json)
		check_json "$out"
		grep -q '"page_retrieve_gbps":0.0000' <<<"$out" && fail "baseline did not run: $out"
	done
done
out=$("$tutti" bench --context 1024 --requests 2 --shared 512 --repeats 1 --layerwise \
	--no-raw --no-baseline --dir "$dir/llama" --json)
check_json "$out"

# The offline profile: storage measured, compute lines given, then kept on a re-profile.
"$tutti" profile --dir "$dir/llama" --out "$dir/prof" --mib 64 --layer-ns-per-token 12.5 |
	grep -q "read .* GB/s" || fail "profile"
head -1 "$dir/prof" | grep -qx "tutti-profile 1" || fail "profile header"
grep -qE '^read_bytes_per_s [0-9.e+]+$' "$dir/prof" || fail "profile read bandwidth"
grep -q '^layer_ns_per_token 31 12.5$' "$dir/prof" || fail "profile compute: $(cat "$dir/prof")"
"$tutti" profile --dir "$dir/llama" --out "$dir/prof" --mib 64 >/dev/null || fail "re-profile"
grep -q '^layer_ns_per_token 31 12.5$' "$dir/prof" || fail "compute not kept on re-profile"
[ ! -e "$dir/llama/profile.scratch" ] || fail "scratch file left behind"

# Bad input: a clear error and exit code 2, never a crash.
set +e
"$tutti" profile --mib 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "profile --mib 0 should exit 2"
"$tutti" profile --model nope >/dev/null 2>&1
[ $? -eq 2 ] || fail "profile of an unknown model should exit 2"
"$tutti" bench --engine nope >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown engine should exit 2"
"$tutti" bench --context abc >/dev/null 2>&1
[ $? -eq 2 ] || fail "bad number should exit 2"
"$tutti" frobnicate >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown command should exit 2"
"$tutti" bench --model tiny --chunk-tokens 24 --no-raw --dir "$dir/bad" >/dev/null 2>&1
[ $? -eq 1 ] || fail "invalid geometry should fail with 1"
set -e
echo PASS
