#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Description: tutti-gpu-store-bench without a GPU (--kv host): the latency mode gives one row per
# (engine, size), every load bit-exact, its p50 / p99 / max the nearest ranks of the loads it
# lists, its target 1.3 x bytes / limit + 1 ms from the limit of the run's own ceiling, and the
# ratios and verdicts from those; the default sizes are 8 chunks and 1 chunk; the bandwidth rows
# run on host KV too, record gpu-uring's kernel footprint, the queue depth asked for and where the
# CPU went; no files are left behind; bad options exit 2.
set -euo pipefail
bench=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/tutti-latency.XXXXXX")
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# The value of "name": in one JSON line (numbers, booleans and strings without commas).
field() {
	grep -oE "\"$2\":[^,}]*" <<<"$1" | head -1 | cut -d: -f2 | tr -d '"'
}

mkdir "$dir/store"
"$bench" --dir "$dir/store" --kv host --latency 3 --contexts 512,256 \
	--paths gpu-uring,uring,posix --ceiling-s 0.3 --json "$dir/lat.jsonl" >"$dir/lat.txt" ||
	fail "latency run: $(cat "$dir/lat.txt")"
[ -z "$(ls -A "$dir/store")" ] || fail "left behind: $(ls "$dir/store")"

[ "$(grep -c '"op":"ceiling"' "$dir/lat.jsonl")" -eq 1 ] || fail "one ceiling line: $(cat "$dir/lat.jsonl")"
ceiling=$(grep '"op":"ceiling"' "$dir/lat.jsonl")
limit=$(field "$ceiling" host_read_limit_gbps)
awk -v l="$limit" 'BEGIN { exit !(l > 0) }' || fail "no read limit: $ceiling"
[ "$(grep -c '"op":"load-latency"' "$dir/lat.jsonl")" -eq 6 ] || fail "expected 6 rows: $(cat "$dir/lat.jsonl")"
[ "$(grep -c ' latency .* 3 loads bit-exact$' "$dir/lat.txt")" -eq 6 ] || fail "text rows: $(cat "$dir/lat.txt")"

for path in gpu-uring uring posix; do
	for tokens in 512 256; do
		row=$(grep "\"context_tokens\":$tokens,.*\"op\":\"load-latency\",\"path\":\"$path\"" \
			"$dir/lat.jsonl") || fail "no row for $path $tokens"
		[ "$(wc -l <<<"$row")" -eq 1 ] || fail "several rows for $path $tokens"
		# Llama-3-8B: 128 KiB of KV per token, 256-token chunks.
		[ "$(field "$row" bytes)" -eq $((tokens * 131072)) ] || fail "bytes: $row"
		[ "$(field "$row" chunks)" -eq $((tokens / 256)) ] || fail "chunks: $row"
		for f in loads:3 verified_loads:3 mismatched_loads:0 mismatched_blocks:0 \
			bit_exact:true kv:host; do
			[ "$(field "$row" "${f%%:*}")" = "${f#*:}" ] || fail "${f%%:*}: $row"
		done
		[ "$(field "$row" limit_gbps)" = "$limit" ] || fail "limit not the ceiling's: $row"
		# The figures from the loads themselves: nearest ranks of 3 (p50 the 2nd, p99 the 3rd),
		# the first load, and the target arithmetic.
		loads=$(grep -oE '"loads_ms":\[[^]]*\]' <<<"$row" | sed 's/.*\[//; s/\]//')
		[ "$(tr ',' '\n' <<<"$loads" | wc -l)" -eq 3 ] || fail "loads_ms: $row"
		sorted=$(tr ',' '\n' <<<"$loads" | sort -g)
		[ "$(field "$row" min_ms)" = "$(sed -n 1p <<<"$sorted")" ] || fail "min: $row"
		[ "$(field "$row" p50_ms)" = "$(sed -n 2p <<<"$sorted")" ] || fail "p50: $row"
		[ "$(field "$row" p99_ms)" = "$(sed -n 3p <<<"$sorted")" ] || fail "p99: $row"
		[ "$(field "$row" max_ms)" = "$(sed -n 3p <<<"$sorted")" ] || fail "max: $row"
		[ "$(field "$row" first_ms)" = "${loads%%,*}" ] || fail "first: $row"
		awk -v b="$(field "$row" bytes)" -v l="$limit" \
			-v ideal="$(field "$row" bytes_over_limit_ms)" -v t="$(field "$row" target_ms)" \
			-v p50="$(field "$row" p50_ms)" -v p99="$(field "$row" p99_ms)" \
			-v r50="$(field "$row" p50_over_target)" -v r99="$(field "$row" p99_over_target)" \
			-v w50="$(field "$row" p50_within_target)" -v w99="$(field "$row" p99_within_target)" '
			function abs(x) { return x < 0 ? -x : x }
			BEGIN {
				want = b / (l * 1e6)
				ok = abs(ideal - want) <= 2e-3 * want + 1e-4 && abs(t - (1.3 * ideal + 1)) <= 1e-3 &&
					abs(r50 - p50 / t) <= 1e-3 && abs(r99 - p99 / t) <= 1e-3 &&
					(w50 == "true") == (p50 <= t) && (w99 == "true") == (p99 <= t) && p50 <= p99
				exit !ok
			}' || fail "target arithmetic: $row"
	done
done
# Where each load's time went: one entry per load in each array; no GPU kernels on host KV; the
# CPU engines make at least one submission call a load, gpu-uring's ring threads run during its
# loads; the text names the slowest load and its figures, with the SQ thread's CPU and how many
# io-wq workers ran.
python3 - "$dir/lat.jsonl" "$dir/lat.txt" <<'PY' || fail "per-load figures: $(cat "$dir/lat.jsonl")"
import json, re, sys
text = open(sys.argv[2]).read()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["op"] != "load-latency":
        continue
    n = r["loads"]
    for k in ("loads_kernel_ms", "loads_io_cpu_ms", "loads_io_wait_ms", "loads_sq_cpu_ms",
              "loads_submits", "loads_io_workers"):
        assert len(r[k]) == n and min(r[k]) >= 0, (k, r)
    assert all(isinstance(v, int) for v in r["loads_io_workers"]), r
    # The time inside each call lies within its timed span; host KV goes through the lanes, not
    # waves, so nothing waited for a wave (the wave waits are GPU KV's, through uring and posix).
    for k in ("loads_call_ms", "loads_storage_wait_ms", "loads_gpu_wait_ms"):
        assert len(r[k]) == n and min(r[k]) >= 0, (k, r)
    assert all(0 < c <= t + 0.01 for c, t in zip(r["loads_call_ms"], r["loads_ms"])), r
    assert max(r["loads_storage_wait_ms"]) == 0 and max(r["loads_gpu_wait_ms"]) == 0, r
    assert max(r["loads_kernel_ms"]) == 0, r
    if r["path"] in ("uring", "posix"):
        assert min(r["loads_submits"]) >= 1, r
    else:
        assert sum(r["loads_io_cpu_ms"]) > 0, r
    w = max(range(n), key=lambda i: (r["loads_ms"][i], -i))
    m = re.search(r"%d tok latency\s+%s\s+slowest load (\d+): ([0-9.]+) ms, io kernels "
                  r"([0-9.]+) ms, io threads on a CPU ([0-9.]+) ms \(SQ thread ([0-9.]+), (\d+) "
                  r"io-wq workers ran\) and waiting for one ([0-9.]+) ms, (\d+) submissions"
                  % (r["context_tokens"], r["path"]), text)
    assert m and int(m[1]) == w, (m and m.groups(), w, r)
    assert abs(float(m[2]) - r["loads_ms"][w]) < 0.01, (m.groups(), r)
    assert abs(float(m[5]) - r["loads_sq_cpu_ms"][w]) < 0.01, (m.groups(), r)
    assert int(m[6]) == r["loads_io_workers"][w], (m.groups(), r)
    assert int(m[8]) == r["loads_submits"][w], (m.groups(), r)
PY

# Default sizes: a prefix of 8 chunks and one chunk (tiny geometry: 64-token chunks).
"$bench" --dir "$dir/store" --kv host --latency 2 --model tiny --paths uring --ceiling-s 0.2 \
	--json "$dir/tiny.jsonl" >"$dir/tiny.txt" || fail "tiny: $(cat "$dir/tiny.txt")"
[ "$(grep -c '"op":"load-latency"' "$dir/tiny.jsonl")" -eq 2 ] || fail "tiny rows: $(cat "$dir/tiny.jsonl")"
grep -q '"context_tokens":512,"chunks":8,.*"bit_exact":true' "$dir/tiny.jsonl" || fail "8 chunks: $(cat "$dir/tiny.jsonl")"
grep -q '"context_tokens":64,"chunks":1,.*"bit_exact":true' "$dir/tiny.jsonl" || fail "1 chunk: $(cat "$dir/tiny.jsonl")"

# The bandwidth rows on host KV: store and retrieve, bit-exact, each over its limit.
# --queue-depth reaches the store and its row; every row says where the CPU went, in cores.
"$bench" --dir "$dir/store" --kv host --contexts 512 --repeats 1 --raw-gib 1 --paths uring \
	--ceiling-s 0.2 --queue-depth 8 --json "$dir/bw.jsonl" >"$dir/bw.txt" ||
	fail "bandwidth: $(cat "$dir/bw.txt")"
for op in store retrieve; do
	row=$(grep "\"op\":\"$op\",\"path\":\"uring\"" "$dir/bw.jsonl") || fail "no $op row: $(cat "$dir/bw.jsonl")"
	[ "$(field "$row" kv)" = host ] && [ "$(field "$row" bit_exact)" = true ] || fail "$op: $row"
	# The caller's wave waits are GPU KV's (uring and posix): not on a host KV row.
	grep -q '"io_wait_share"' <<<"$row" && fail "$op: wave waits on host KV: $row"
	awk -v l="$(field "$row" limit_gbps)" 'BEGIN { exit !(l > 0) }' || fail "$op limit: $row"
	# A row above its limit says so, in the JSON and on its line; one below it does not.
	above=$(awk -v g="$(field "$row" gbps)" -v l="$(field "$row" limit_gbps)" \
		'BEGIN { print (g > l) ? "true" : "false" }')
	[ "$(field "$row" above_limit)" = "$above" ] || fail "$op above_limit: $row"
	if [ "$above" = true ]; then
		grep -q " $op .*uring .*above its limit" "$dir/bw.txt" || fail "$op: no note: $(cat "$dir/bw.txt")"
	else
		grep -q " $op .*above its limit" "$dir/bw.txt" && fail "$op: a note below the limit"
	fi
	[ "$(field "$row" staging_mib)" = 256 ] || fail "$op staging_mib: $row"
	[ "$(field "$row" queue_depth)" = 8 ] || fail "$op queue_depth: $row"
	[ "$(field "$row" online_cpus)" = "$(getconf _NPROCESSORS_ONLN)" ] || fail "$op cpus: $row"
	# The process ran (it moved and checked the bytes); no figure is negative or beyond the
	# machine; engine uring on host KV issues from its lanes, with no SQ thread.
	awk -v n="$(field "$row" online_cpus)" -v m="$(field "$row" cores_machine)" \
		-v p="$(field "$row" cores_process)" -v w="$(field "$row" cores_iowq)" \
		-v r="$(field "$row" cores_iowq_runnable)" -v k="$(field "$row" iowq_workers_ran)" \
		-v q="$(field "$row" cores_sq)" 'BEGIN {
			exit !(p > 0 && p <= n + 0.5 && m >= 0 && m <= n + 0.5 && w >= 0 && w <= p + 0.05 &&
				r >= 0 && k >= 0 && q == 0)
		}' || fail "$op cores: $row"
	grep -qE "[0-9]+ tok $op +uring +cores busy: machine [0-9.]+ of [0-9]+, process [0-9.]+, io-wq [0-9.]+ \([0-9]+ workers ran, runnable unrun [0-9.]+\), SQ thread [0-9.]+$" \
		"$dir/bw.txt" || fail "$op cores text: $(cat "$dir/bw.txt")"
done
[ -z "$(ls -A "$dir/store")" ] || fail "left behind: $(ls "$dir/store")"

# --idle-s: the I/O threads' CPU while the store sits open and idle, on the retrieve row only; an
# idling engine takes less than a core (a spinning thread would take one).
# The same run sets gpu-uring's kernel footprint, which each row records.
"$bench" --dir "$dir/store" --kv host --contexts 512 --repeats 1 --raw-gib 1 --paths gpu-uring \
	--ceiling-s 0.2 --idle-s 0.5 --gpu-io-workers 5 --gpu-io-sms 1 --json "$dir/idle.jsonl" \
	>"$dir/idle.txt" || fail "idle: $(cat "$dir/idle.txt")"
row=$(grep '"op":"retrieve","path":"gpu-uring"' "$dir/idle.jsonl") || fail "no retrieve row: $(cat "$dir/idle.jsonl")"
[ "$(field "$row" idle_s)" = 0.5 ] || fail "idle_s: $row"
[ "$(field "$row" gpu_io_workers)" = 5 ] && [ "$(field "$row" gpu_io_sms)" = 1 ] ||
	fail "footprint: $row"
grep -q '"op":"store","path":"gpu-uring".*"gpu_io_workers":5,"gpu_io_sms":1,' "$dir/idle.jsonl" ||
	fail "footprint on the store row: $(cat "$dir/idle.jsonl")"
awk -v c="$(field "$row" idle_io_thread_cores)" 'BEGIN { exit !(c >= 0 && c < 1) }' || fail "idle cores: $row"
! grep '"op":"store"' "$dir/idle.jsonl" | grep -q idle_io_thread_cores || fail "idle on the store row: $(cat "$dir/idle.jsonl")"
grep -q "retrieve gpu-uring idle 0.5 s after the rounds: io threads" "$dir/idle.txt" ||
	fail "idle text: $(cat "$dir/idle.txt")"

# Where the CPU went, where io_uring's threads do the work: gpu-uring on tmpfs punts its reads to
# io-wq and has an SQ thread issue them, so its retrieve row counts io-wq workers that ran, their
# CPU and the SQ thread's, all within the process's. Skipped where /dev/shm is not tmpfs.
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && shm=$(mktemp -d /dev/shm/tutti-cores.XXXXXX); then
	trap 'rm -rf "$dir" "$shm"' EXIT
	"$bench" --dir "$shm" --kv host --contexts 512 --repeats 1 --raw-gib 1 --paths gpu-uring \
		--ceiling-s 0.2 --json "$dir/shm.jsonl" >"$dir/shm.txt" || fail "tmpfs: $(cat "$dir/shm.txt")"
	row=$(grep '"op":"retrieve","path":"gpu-uring"' "$dir/shm.jsonl") || fail "no tmpfs row: $(cat "$dir/shm.jsonl")"
	[ "$(field "$row" gpu_io_submit)" = auto ] || fail "submit: $row"
	awk -v p="$(field "$row" cores_process)" -v w="$(field "$row" cores_iowq)" \
		-v k="$(field "$row" iowq_workers_ran)" -v q="$(field "$row" cores_sq)" 'BEGIN {
			exit !(k >= 1 && w > 0 && q > 0 && w + q <= p + 0.05)
		}' || fail "io_uring threads' cores on tmpfs: $row"
	rm -rf "$shm"
else
	echo "skipped: /dev/shm is not tmpfs here"
fi

set +e
"$bench" --dir "$dir/store" --kv host --paths baseline >/dev/null 2>&1
[ $? -eq 2 ] || fail "the baseline on host KV should exit 2"
"$bench" --dir "$dir/store" --kv host --latency 2 --paths uring,baseline >/dev/null 2>&1
[ $? -eq 2 ] || fail "the baseline in latency mode should exit 2"
"$bench" --dir "$dir/store" --kv disk >/dev/null 2>&1
[ $? -eq 2 ] || fail "--kv disk should exit 2"
"$bench" --dir "$dir/store" --kv host --latency 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--latency 0 should exit 2"
"$bench" --dir "$dir/store" --kv host --latency 2 --contexts 100 >/dev/null 2>&1
[ $? -eq 2 ] || fail "a size of no whole chunks should exit 2"
"$bench" --dir "$dir/store" --kv host --idle-s 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--idle-s 0 should exit 2"
"$bench" --dir "$dir/store" --kv host --gpu-io-workers 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--gpu-io-workers 0 should exit 2"
"$bench" --dir "$dir/store" --kv host --gpu-io-sms 65 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--gpu-io-sms 65 should exit 2"
"$bench" --dir "$dir/store" --kv host --queue-depth 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--queue-depth 0 should exit 2"
set -e
echo PASS
