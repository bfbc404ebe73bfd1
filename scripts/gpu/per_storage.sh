# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by scripts/gpu-run.sh: the steps that run once per storage, as NAME-emulated and
# NAME-disk, each called with WHERE (work_dir's "emulated" or "disk") and $step set to the step.

# Small loads: per engine (gpu-uring, uring, posix) a 2K-token prefix (256 MiB) and one chunk
# (32 MiB) stored once and loaded LATENCY_LOADS times (default 100) into GPU KV, each timed from
# the call until the data is in HBM and checked bit for bit; p50/p99/max against the target
# 1.3 x bytes / limit + 1 ms. One JSON object per (engine, size) in $OUT/$step.jsonl beside the
# ceiling the limit comes from. LATENCY_ARGS adds options.
latency_step() {
	local dir
	dir=$(work_dir latency "$1")
	rm -rf "$dir" && mkdir -p "$dir"
	df -h "$dir" >> "$OUT/summary.txt"
	log "latency ($step) in $dir: ${LATENCY_LOADS:-100} loads, ${LATENCY_ARGS:-defaults}"
	# shellcheck disable=SC2086
	timeout "${BENCH_TIMEOUT:-600}" build/gpu/tutti-gpu-store-bench --dir "$dir" \
		--latency "${LATENCY_LOADS:-100}" --paths gpu-uring,uring,posix --json "$OUT/$step.jsonl" \
		${LATENCY_ARGS:-} 2> "$OUT/$step.err" | tee "$OUT/$step.txt" | tee -a "$OUT/summary.txt"
	log "latency bench exit ${PIPESTATUS[0]}"
	tail -5 "$OUT/$step.err" >> "$OUT/summary.txt"
	rm -rf "$dir"
}

# tutti-gpu-store-bench with BENCH_ARGS: $OUT/$step.{jsonl,txt,err}.
store_step() {
	local dir
	dir=$(work_dir bench "$1")
	mkdir -p "$dir"
	df -h "$dir" >> "$OUT/summary.txt"
	log "store bench ($step) in $dir: ${BENCH_ARGS:-defaults}"
	# shellcheck disable=SC2086
	timeout "${BENCH_TIMEOUT:-900}" build/gpu/tutti-gpu-store-bench --dir "$dir" --json "$OUT/$step.jsonl" ${BENCH_ARGS:-} \
		2> "$OUT/$step.err" | tee "$OUT/$step.txt" | tee -a "$OUT/summary.txt"
	log "store bench exit ${PIPESTATUS[0]}"
	tail -5 "$OUT/$step.err" >> "$OUT/summary.txt"
	rm -rf "$dir"
}

# KV in host memory (tutti bench): one request per context stored and retrieved through
# engines uring and posix, every load verified, each row's ratio to the ceiling measured in the
# same directory; one JSON object per (engine, context) in $OUT/$step.jsonl.
# HOST_KV_CONTEXTS (default 8192,32768,131072 emulated; 8192,32768 disk, whose reads run at
# about 1.5 GB/s) and HOST_KV_ARGS (added to every run) change it.
host_kv_step() {
	local dir contexts engine ctx
	dir=$(work_dir host-kv "$1")
	if [ "$1" = emulated ]; then
		contexts=${HOST_KV_CONTEXTS:-8192,32768,131072}
	else
		contexts=${HOST_KV_CONTEXTS:-8192,32768}
	fi
	for engine in uring posix; do
		for ctx in ${contexts//,/ }; do
			rm -rf "$dir" && mkdir -p "$dir"
			log "$step: engine $engine, $ctx tokens in $dir: ${HOST_KV_ARGS:-defaults}"
			# shellcheck disable=SC2086
			timeout "${BENCH_TIMEOUT:-600}" build/gpu/tutti bench --dir "$dir" --engine $engine \
				--context "$ctx" --repeats 3 --json ${HOST_KV_ARGS:-} >> "$OUT/$step.jsonl" \
				2>> "$OUT/$step.err"
			log "$step exit $?"
			tail -1 "$OUT/$step.jsonl" | grep -oE '"(engine|context_tokens|retrieve_gbps|retrieve_ratio_to_limit|store_gbps|store_ratio_to_limit|page_retrieve_gbps|verified)":[^,]*' |
				paste -sd' ' | tee -a "$OUT/summary.txt"
		done
	done
	rm -rf "$dir"
}

# The serving benchmark (bench/serve/serve_bench.py): LEval-shaped long-document QA at a sweep of
# Poisson request rates with vLLM's GPU prefix cache capped, each system (bench/serve/systems.py)
# in a vLLM process of its own, the tier on /dev/shm (emulated NVMe) or on the disk holding the
# working tree; one JSON line per system, storage and rate in serve.jsonl. The disk runs only the systems that use storage
# (recompute and the DRAM tier ran with serve-emulated). SERVE_ARGS adds options; SERVE_DEADLINE
# bounds the step (default 560 s emulated, 400 s disk). Results: $OUT/serve-WHERE.tgz.
serve_step() {
	local storage=$1 deadline serve_systems root shm
	need_vllm || return 0
	if [ "$storage" = emulated ]; then
		deadline=${SERVE_DEADLINE:-560} serve_systems=tutti,lmcache-mp,lmcache-mp-large,offload-cpu,recompute
	else
		deadline=${SERVE_DEADLINE:-400} serve_systems=tutti,lmcache-mp,lmcache-mp-large
	fi
	log "$step: ${SERVE_ARGS:-defaults}, deadline $deadline s"
	root=$PWD
	shm=$(work_dir serve emulated)
	rm -rf "$shm" build/serve-disk build/serve-work
	(
		vllm_env
		# shellcheck disable=SC2086
		PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} TUTTI_LIBRARY=$root/build/gpu/libtutti.so \
			timeout --kill-after=30 $((deadline + 60)) python3 bench/serve/serve_bench.py \
			--out "$OUT/serve-$storage" --work "$root/build/serve-work" --storage "$storage" \
			--systems "$serve_systems" --emulated-dir "$shm" \
			--disk-dir "$root/build/serve-disk" --deadline "$deadline" ${SERVE_ARGS:-}
	) > "$OUT/serve-$storage.log" 2>&1
	log "$step exit $?"
	cat "$OUT/serve-$storage/serve-summary.md" >> "$OUT/summary.txt" 2>/dev/null ||
		tail -30 "$OUT/serve-$storage.log" >> "$OUT/summary.txt"
	pack "serve-$storage"
	rm -rf "$shm" build/serve-disk build/serve-work
}
