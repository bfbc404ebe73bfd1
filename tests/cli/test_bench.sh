#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Description: the tutti CLI end to end: bench runs store, retrieve and verification on small
# workloads (staged and direct paths, both engines) with the ceiling as the limit, prints the
# JSON fields it promises; ceiling measures a directory alone; both reject bad options.
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
		cpu_s_per_gb page_cpu_s_per_gb verified read_limit_gbps write_limit_gbps \
		store_ratio_to_limit retrieve_ratio_to_limit page_retrieve_ratio_to_limit ceiling; do
		grep -q "\"$field\":" <<<"$out" || fail "missing $field in: $out"
	done
	grep -q '"verified":true' <<<"$out" || fail "not verified: $out"
}

grep -q '^tutti [0-9]' <<<"$("$tutti" version)" || fail "version"

# Tiny geometry: 2 KiB blocks, not O_DIRECT aligned, so the staged path and no baseline.
out=$("$tutti" bench --model tiny --context 1024 --requests 3 --shared 512 --repeats 1 \
	--ceiling-s 0.2 --dir "$dir/tiny" --json)
check_json "$out"

# An engine's options reach it: posix with two threads (tutti --help lists every engine's).
out=$("$tutti" bench --model tiny --context 1024 --requests 2 --repeats 1 --ceiling-s 0 --no-raw \
	--no-baseline --engine posix --engine-opts threads=2 --dir "$dir/tiny-posix" --json)
check_json "$out"
help=$("$tutti" --help)
for want in "gpu-uring" "threads=0..4096 (default 0)" "submit=auto|sqpoll|host (default auto)" \
	"workers=1..64 (default 29)" "copy=auto|sm|dma (default auto)"; do
	grep -qF "$want" <<<"$help" || fail "tutti --help does not list $want"
done

# Llama geometry, aligned blocks: the direct path, the raw sweep and the baseline, both engines.
for engine in uring posix; do
	for layout in kv-first cross-layer; do
		out=$("$tutti" bench --context 1024 --requests 2 --shared 512 --repeats 1 \
			--engine $engine --layout $layout --ceiling-s 0.2 --dir "$dir/llama" --json)
		check_json "$out"
		grep -q '"retrieve_ratio_to_limit":0.0000' <<<"$out" && fail "no limit: $out"
		grep -q '"page_retrieve_gbps":0.0000' <<<"$out" && fail "baseline did not run: $out"
	done
done
out=$("$tutti" bench --context 1024 --requests 2 --shared 512 --repeats 1 --layerwise \
	--no-raw --no-baseline --ceiling-s 0 --dir "$dir/llama" --json)
check_json "$out"
grep -q '"ceiling":null' <<<"$out" || fail "--ceiling-s 0 should skip the ceiling: $out"

# The ceiling alone: best read and write points from a sweep, every point listed, no GPU copies
# unless asked for (and then measured, or said why not), nothing left in the directory.
mkdir "$dir/ceil"
out=$("$tutti" ceiling --dir "$dir/ceil" --budget-s 0.4 --file-mib 16 --mem-mib 64 --max-files 2 \
	--json)
for field in read write gbps threads files io_kib depth mem_kib staged sweep h2d_gbps \
	host_read_limit_gbps host_write_limit_gbps gpu_read_limit_gbps; do
	grep -q "\"$field\":" <<<"$out" || fail "ceiling: missing $field in: $out"
done
# Points are [threads,files,io_kib,depth,mem_kib,gbps]; where io_uring works the sweep reaches
# depths beyond one I/O per thread. Without a GPU limit asked for there is no staged phase.
grep -q '"sweep_point":"\[threads,files,io_kib,depth,mem_kib,gbps\]"' <<<"$out" ||
	fail "ceiling points: $out"
grep -q '"staged":{' <<<"$out" && fail "ceiling: staged points without --gpu: $out"
grep -q '"through":"skipped: asked for only' <<<"$out" || fail "through phase unasked: $out"
grep -q '"read_through":null,"write_through":null' <<<"$out" || fail "through points: $out"
out_depth=$("$tutti" ceiling --dir "$dir/ceil" --budget-s 1 --file-mib 16 --mem-mib 256 --max-files 1 \
	--reads-only --json 2>"$dir/ceil-depth.err")
if ! grep -q 'io_uring refused' "$dir/ceil-depth.err"; then
	grep -qE '\[[0-9]+,[0-9]+,[0-9]+,(4|16|32),[0-9]+,[0-9.]+\]' <<<"$out_depth" ||
		fail "ceiling: no point with I/Os in flight: $out_depth"
fi
grep -q '"host_read_limit_gbps":0.000' <<<"$out" && fail "ceiling: no read limit: $out"
# Every point listed moved data: 0 GB/s is a point that measured nothing, however loaded the
# machine.
grep -q ',0\.000\]' <<<"$out" && fail "ceiling: a point of 0 GB/s: $out"
grep -q '"copies":"skipped: not asked for' <<<"$out" || fail "ceiling: copies: $out"
out=$("$tutti" ceiling --dir "$dir/ceil" --budget-s 0.2 --file-mib 16 --mem-mib 64 --max-files 1 \
	--reads-only --gpu 0 --json)
grep -qE '"copies":"(measured|skipped: built without CUDA|skipped: no GPU)"' <<<"$out" ||
	fail "ceiling --gpu: $out"
grep -q '"write":{"gbps":0.000' <<<"$out" || fail "ceiling --reads-only wrote: $out"
# Off tmpfs the data arrives by DMA whatever the buffer: no staged phase even with --gpu.
if [ "$(stat -f -c %T "$dir")" != tmpfs ]; then
	grep -q '"staged":{' <<<"$out" && fail "ceiling --gpu: staged points off tmpfs: $out"
fi
out=$("$tutti" ceiling --dir "$dir/ceil" --budget-s 0.2 --file-mib 16 --mem-mib 64 --max-files 1)
grep -q "O_DIRECT read  ceiling .* GB/s" <<<"$out" || fail "ceiling table: $out"
[ -z "$(ls -A "$dir/ceil")" ] || fail "ceiling left files: $(ls "$dir/ceil")"
# On tmpfs every read is a copy out of memory, and one of a region the CPU's cache holds comes
# from that cache: by default the scratch files there are at least 4x the largest cache sysfs
# reports (1 GiB where it reports none), unless the room is short, which it says; --file-mib
# is taken as it is.
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ]; then
	cache_kib=0
	for f in /sys/devices/system/cpu/cpu0/cache/index*/size; do
		[ -r "$f" ] || continue
		v=$(<"$f")
		case $v in
		*K) v=${v%K} ;;
		*M) v=$((${v%M} * 1024)) ;;
		*G) v=$((${v%G} * 1024 * 1024)) ;;
		*) v=$((v / 1024)) ;;
		esac
		[ "$v" -gt "$cache_kib" ] && cache_kib=$v
	done
	want_mib=1024
	[ "$cache_kib" -gt 0 ] && want_mib=$(((4 * cache_kib / 1024 + 15) / 16 * 16))
	shm=$(mktemp -d /dev/shm/tutti-cli.XXXXXX)
	out=$("$tutti" ceiling --dir "$shm" --budget-s 0.2 --mem-mib 64 --max-files 1 --reads-only \
		--json 2>"$dir/shm.err") || {
		rm -rf "$shm"
		fail "ceiling on tmpfs: $(cat "$dir/shm.err")"
	}
	exact=$("$tutti" ceiling --dir "$shm" --budget-s 0.2 --file-mib 16 --mem-mib 64 --max-files 1 \
		--reads-only --json 2>/dev/null) || {
		rm -rf "$shm"
		fail "ceiling on tmpfs with --file-mib 16 failed"
	}
	# With the GPU limit asked for, tmpfs reads are searched a second time into buffers each
	# thread reuses (what an engine staging KV for the GPU reads into), and that phase's best
	# is given apart; without it, they are not.
	gpu_out=$("$tutti" ceiling --dir "$shm" --budget-s 0.4 --file-mib 16 --mem-mib 64 \
		--max-files 1 --reads-only --gpu 0 --json 2>/dev/null) || {
		rm -rf "$shm"
		fail "ceiling on tmpfs with --gpu 0 failed"
	}
	rm -rf "$shm"
	grep -q '"file_mib":16,' <<<"$exact" || fail "ceiling on tmpfs, --file-mib 16: $exact"
	grep -q '"read":{[^}]*"staged":null' <<<"$exact" || fail "staged points without --gpu: $exact"
	# Beside the staged phase, the through phase into the GPU, or why it could not run; where
	# it ran, its points copied every buffer to the GPU, 1, 2, 4 or 8 per I/O in flight.
	grep -qE '"through":"(gpu|skipped: built without CUDA, or io_uring refused|skipped: no GPU)"' \
		<<<"$gpu_out" || fail "through phase on tmpfs with --gpu 0: $gpu_out"
	python3 -c '
import json, sys
r = json.loads(sys.argv[1])
if r["through"] == "gpu":
    t = r["read_through"]
    assert t and t["gbps"] > 0 and t["points"] == len(t["sweep"]) > 0, t
    for p in t["sweep"]:
        assert p[4] / (p[0] * p[3] * p[2]) in (1, 2, 4, 8) and p[5] > 0, p
else:
    assert r["read_through"] is None, r
' "$gpu_out" || fail "through phase on tmpfs with --gpu 0: $gpu_out"
	# Its best reuses threads x depth buffers of one I/O each, 64 MiB at most.
	python3 -c '
import json, sys
r = json.loads(sys.argv[1])["read"]
st = r["staged"]
assert st and st["gbps"] > 0, "no staged best"
assert st["mem_kib"] == st["threads"] * st["depth"] * st["io_kib"] <= 65536, st
assert st in [dict(zip(("threads", "files", "io_kib", "depth", "mem_kib", "gbps"), p))
              for p in r["sweep"]], "the staged best is not a point of the sweep"
' "$gpu_out" || fail "ceiling on tmpfs, --gpu 0: $gpu_out"
fi
# The through phase: asked for into host memory it runs on any storage, each direction's points
# copying every buffer on (reads) or in first (writes), with 1, 2, 4 or 8 buffers per I/O in
# flight (without it asked for, or the GPU limit on tmpfs, it does not run: above).
out=$("$tutti" ceiling --dir "$dir/ceil" --budget-s 0.8 --file-mib 16 --mem-mib 256 --max-files 2 \
	--through-host --json 2>"$dir/through.err") || fail "ceiling --through-host: $(cat "$dir/through.err")"
if grep -q 'io_uring refused' "$dir/through.err"; then
	grep -q '"through":"skipped: built without CUDA, or io_uring refused"' <<<"$out" ||
		fail "ceiling --through-host without io_uring: $out"
else
	python3 -c '
import json, sys
r = json.loads(sys.argv[1])
assert r["through"] == "host", r["through"]
keys = ("threads", "files", "io_kib", "depth", "mem_kib", "gbps")
for d in ("read_through", "write_through"):
    t = r[d]
    assert t and t["gbps"] > 0 and t["points"] == len(t["sweep"]) > 0, (d, t)
    pts = [dict(zip(keys, p)) for p in t["sweep"]]
    assert {k: t[k] for k in keys} in pts, (d, "the best is not a point of its sweep")
    for p in pts:
        per_slot = p["mem_kib"] / (p["threads"] * p["depth"] * p["io_kib"])
        assert per_slot in (1, 2, 4, 8) and p["gbps"] > 0, (d, p)
    # A through phase sweeps the buffers per I/O in flight first, from 1: where the first
    # point has room for 2 (256 MiB in all), that is the next point measured.
    # It starts from the best point through mem_bytes, with one buffer per I/O in flight.
    best = r[d.replace("_through", "")]
    p0 = pts[0]
    assert [p0[k] for k in keys[:4]] == [best[k] for k in keys[:4]], (d, p0, best)
    assert p0["mem_kib"] == p0["threads"] * p0["depth"] * p0["io_kib"], (d, p0)
    if len(pts) > 1 and p0["threads"] * p0["depth"] * p0["io_kib"] * 2 <= 256 << 10:
        assert pts[1]["mem_kib"] == 2 * p0["mem_kib"] and all(
            pts[1][k] == p0[k] for k in keys[:4]), (d, "buffers per I/O not swept first", pts[:2])
' "$out" || fail "ceiling --through-host: $out"
	table=$("$tutti" ceiling --dir "$dir/ceil" --budget-s 0.4 --file-mib 16 --mem-mib 64 \
		--max-files 1 --reads-only --through-host)
	grep -q "O_DIRECT read  through .* GB/s: .* every byte copied to host memory" <<<"$table" ||
		fail "ceiling --through-host table: $table"
fi
[ -z "$(ls -A "$dir/ceil")" ] || fail "ceiling --through-host left files: $(ls "$dir/ceil")"
# Little room: fewer files are swept, and the result says how many; no room for one file per
# directory is an error that says so, and leaves nothing behind.
out=$("$tutti" ceiling --dir "$dir/ceil" --budget-s 0.2 --file-mib 16 --mem-mib 64 --space-mib 40 \
	--json 2>"$dir/ceil.err")
grep -q '"max_files":2,' <<<"$out" || fail "ceiling --space-mib 40: $out"
grep -q '"file_mib":16,' <<<"$out" || fail "ceiling --space-mib 40 file size: $out"
grep -q "room for 2 scratch files of 16 MiB" "$dir/ceil.err" || fail "no note: $(cat "$dir/ceil.err")"
mkdir "$dir/ceil2"
if "$tutti" ceiling --dir "$dir/ceil" --dir "$dir/ceil2" --budget-s 0.2 --space-mib 8 \
	2>"$dir/ceil.err"; then
	fail "ceiling with no room for a file per directory succeeded"
fi
grep -q "no room for 2 scratch files of 16 MiB" "$dir/ceil.err" || fail "$(cat "$dir/ceil.err")"
[ -z "$(ls -A "$dir/ceil" "$dir/ceil2" | grep -v ':$')" ] || fail "ceiling left files"

# The offline profile: storage measured, compute lines given, then kept on a re-profile.
out=$("$tutti" profile --dir "$dir/llama" --out "$dir/prof" --mib 64 --layer-ns-per-token 12.5)
grep -q "read .* GB/s" <<<"$out" || fail "profile: $out"
head -1 "$dir/prof" | grep -qx "tutti-profile 1" || fail "profile header"
grep -qE '^read_bytes_per_s [0-9.e+]+$' "$dir/prof" || fail "profile read bandwidth"
grep -q '^layer_ns_per_token 31 12.5$' "$dir/prof" || fail "profile compute: $(cat "$dir/prof")"
"$tutti" profile --dir "$dir/llama" --out "$dir/prof" --mib 64 >/dev/null || fail "re-profile"
grep -q '^layer_ns_per_token 31 12.5$' "$dir/prof" || fail "compute not kept on re-profile"
[ ! -e "$dir/llama/profile.scratch" ] || fail "scratch file left behind"

# Bad input: a clear error and exit code 2, never a crash.
set +e
"$tutti" ceiling --budget-s 1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "ceiling without --dir should exit 2"
"$tutti" ceiling --dir "$dir/ceil" --budget-s 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "ceiling --budget-s 0 should exit 2"
"$tutti" ceiling --dir "$dir/ceil" --reads-only --writes-only >/dev/null 2>&1
[ $? -eq 2 ] || fail "ceiling --reads-only --writes-only should exit 2"
"$tutti" ceiling --dir "$dir/nowhere" --budget-s 0.1 >/dev/null 2>&1
[ $? -eq 1 ] || fail "ceiling of a missing directory should fail with 1"
"$tutti" bench --ceiling-s -1 >/dev/null 2>&1
[ $? -eq 2 ] || fail "bench --ceiling-s -1 should exit 2"
"$tutti" profile --mib 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "profile --mib 0 should exit 2"
"$tutti" profile --model nope >/dev/null 2>&1
[ $? -eq 2 ] || fail "profile of an unknown model should exit 2"
"$tutti" bench --engine nope >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown engine should exit 2"
"$tutti" bench --model tiny --context 1024 --repeats 1 --ceiling-s 0 --no-raw --no-baseline \
	--engine-opts workers=5 --dir "$dir/opts" >/dev/null 2>"$dir/opts.err"
[ $? -eq 1 ] || fail "an option the engine does not take should fail with 1"
grep -q "engine uring: unknown option 'workers' (it takes none)" "$dir/opts.err" ||
	fail "the refused option is not named: $(cat "$dir/opts.err")"
"$tutti" bench --context abc >/dev/null 2>&1
[ $? -eq 2 ] || fail "bad number should exit 2"
"$tutti" frobnicate >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown command should exit 2"
"$tutti" bench --model tiny --chunk-tokens 24 --no-raw --dir "$dir/bad" >/dev/null 2>&1
[ $? -eq 1 ] || fail "invalid geometry should fail with 1"
set -e
echo PASS
