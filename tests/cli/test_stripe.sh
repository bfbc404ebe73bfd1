#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Description: tutti-stripe-bench's CPU path (host KV, engines uring and gpu-uring's host
# driver) over 1, 2 and 4 directories: every load bit-exact, a CSV row and a JSON line per
# (directories, engine) with the limit (the ceiling of the bases used, one JSON line per base
# count) and the one-ring reference measured, one summary line per directory count, no files
# left behind, and bad options rejected with exit code 2.
set -euo pipefail
bench=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/tutti-stripe.XXXXXX")
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

mkdir "$dir/base"
"$bench" --dir "$dir/base" --kv host --engines uring,gpu-uring --dirs 1,2,4 --tokens 1024 \
	--repeats 1 --sweep-mib 64 --ceiling-s 0.3 --json "$dir/out.jsonl" --csv "$dir/out.csv" \
	--summary "$dir/summary.txt" >"$dir/stdout" || fail "bench: $(cat "$dir/stdout")"

[ "$(grep -c '"load_gbps"' "$dir/out.jsonl")" -eq 6 ] || fail "expected 6 rows: $(cat "$dir/out.jsonl")"
[ "$(grep -c '"op":"ceiling"' "$dir/out.jsonl")" -eq 1 ] || fail "expected one ceiling line: $(cat "$dir/out.jsonl")"
[ "$(grep -c '"bit_exact":true' "$dir/out.jsonl")" -eq 6 ] || fail "not bit-exact: $(cat "$dir/out.jsonl")"
grep -q '"raw_gbps":0.000' "$dir/out.jsonl" && fail "raw reference missing: $(cat "$dir/out.jsonl")"
grep -q '"limit_gbps":0.000' "$dir/out.jsonl" && fail "limit missing: $(cat "$dir/out.jsonl")"
for field in storage dirs engine kv load_gbps limit_gbps ratio_to_limit raw_gbps ratio_to_raw \
	speedup_over_first rounds_gbps; do
	grep -q "\"$field\":" "$dir/out.jsonl" || fail "missing $field"
done
head -1 "$dir/out.csv" | grep -q '^storage,dirs,engine,.*,limit_gbps,ratio_to_limit,' || fail "CSV header"
[ "$(grep -c ',1$' "$dir/out.csv")" -eq 6 ] || fail "CSV rows: $(cat "$dir/out.csv")"
[ "$(wc -l <"$dir/summary.txt")" -eq 3 ] || fail "summary: $(cat "$dir/summary.txt")"
grep -q '4 dirs: uring .* x limit .*gpu-uring' "$dir/summary.txt" || fail "summary: $(cat "$dir/summary.txt")"
[ -z "$(ls -A "$dir/base")" ] || fail "left behind: $(ls "$dir/base")"

# Two bases: the directories are spread over both.
mkdir "$dir/b2"
out=$("$bench" --dir "$dir/base" --dir "$dir/b2" --kv host --engines uring --dirs 2 \
	--tokens 512 --repeats 1 --sweep-mib 16 --ceiling-s 0.2)
grep -q '# ceiling of 2 bases' <<<"$out" || fail "two bases' ceiling: $out"
grep -q 'dirs  2  uring .*bit-exact' <<<"$out" || fail "two bases: $out"

set +e
"$bench" --dir "$dir/base" --kv host --dirs 4 --tokens 768 >/dev/null 2>&1
[ $? -eq 2 ] || fail "chunks not a multiple of the directory count should exit 2"
"$bench" --dir "$dir/base" --engines nope >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown engine should exit 2"
"$bench" --dir "$dir/base" --dirs 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "zero directories should exit 2"
"$bench" --kv host >/dev/null 2>&1
[ $? -eq 2 ] || fail "no --dir should exit 2"
"$bench" --dir "$dir/base" --kv host --ceiling-s 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--ceiling-s 0 should exit 2"
set -e
echo PASS
