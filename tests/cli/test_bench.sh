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

# Bad input: a clear error and exit code 2, never a crash.
set +e
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
