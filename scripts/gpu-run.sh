#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build, test and benchmark the GPU data path on a GPU machine, writing every log and result
# under $OUT (default ./gpu-out). Needs nvcc, cmake and a GPU. Libraries the machine lacks
# (liburing, libxxhash, cmocka) may be supplied as Debian packages in .debs/: they are unpacked
# into a private prefix.
#
# Usage: scripts/gpu-run.sh [STEP...]   steps: build (the build alone), test (ctest +
# compute-sanitizer), gpu-test (the
# GPU and pipeline tests only, test_gpu_pipeline under memcheck), mover (the
# CUDA kernels' bandwidth), store-emulated (tutti-gpu-store-bench on a /dev/shm file, labelled
# emulated), store-disk (the same on the disk holding the working tree), latency-emulated and
# latency-disk (tutti-gpu-store-bench --latency: LATENCY_LOADS loads, default 100, of a 2K-token
# prefix and of one chunk per engine, p50/p99 against 1.3 x bytes / limit + 1 ms; /dev/shm
# labelled emulated, and the disk holding the working tree; LATENCY_ARGS adds options), stripe
# (tutti-stripe-bench: retrieve over 1, 2 and 4 directories against raw reads of the same files,
# emulated and disk), tp (bench/tp_ttft.py with TP_ARGS: TTFT at TP=2 on two GPUs), layerwise
# (bench/layerwise_ttft.py with LAYERWISE_ARGS), footprint (bench/io_footprint.py with
# FOOTPRINT_ARGS), iowq (tutti-iowq-burst with IOWQ_ARGS), vllm-gpu (outputs with Tutti
# identical to vLLM's, inside vLLM; VLLM_GPU_CASES names a subset), vllm-versions (the connector's vLLM-version tests,
# python/tests/vllm/test_versions.py and test_async_save.py, in the GPU machine's vLLM), serve-emulated and serve-disk (bench/serve/serve_bench.py
# with SERVE_ARGS), lmcache-micro (LMCache's store and retrieve beside tutti-gpu-store-bench,
# bench/lmcache_micro.py with LMCACHE_MICRO_ARGS), ceiling (tutti ceiling: the limit every bench
# divides by, emulated and disk, CEILING_ARGS), host-kv-emulated and host-kv-disk (tutti bench:
# KV in host memory, engines uring and posix, HOST_KV_CONTEXTS and HOST_KV_ARGS), posix-threads
# (engine posix into GPU KV by its thread count, POSIX_THREADS and POSIX_TURNS), variants
# (tutti-gpu-store-bench once per variant of BENCH_VARIANTS, in turns); default: test mover.
# BENCH_ARGS adds arguments to tutti-gpu-store-bench; STRIPE_ARGS to tutti-stripe-bench
# (STRIPE_ENGINES, STRIPE_SHM_TOKENS and STRIPE_DISK_TOKENS change its defaults).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
# A step's folder of results and logs as one archive, $OUT/NAME.tgz (a step writes one file per
# vLLM process; one archive comes back whole where a cap on the number of files would not).
pack() { [ -d "$OUT/$1" ] && tar czf "$OUT/$1.tgz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"; }

# shellcheck source=scripts/gpu-deps.sh
. scripts/gpu-deps.sh

{ nvidia-smi; nvcc --version; uname -a; } > "$OUT/machine.txt" 2>&1
log "configure and build (CUDA on, sm_90)"
cmake -S . -B build/gpu -DTUTTI_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/build.log" 2>&1 &&
	cmake --build build/gpu -j"$(nproc)" >> "$OUT/build.log" 2>&1
rc=$?
log "build exit $rc"
[ $rc -eq 0 ] || { tail -40 "$OUT/build.log"; exit 1; }

# bench_turns NAME TURNS VARIANT...: tutti-gpu-store-bench on /dev/shm with BENCH_ARGS and each
# VARIANT's options, the variants in turn TURNS times, each run on a fresh directory; rows to
# $OUT/NAME.jsonl, the text to $OUT/NAME.txt.
bench_turns() {
	local name=$1 turns=$2 dir=/dev/shm/tutti-$1 turn v
	shift 2
	for turn in $(seq "$turns"); do
		for v in "$@"; do
			rm -rf "$dir" && mkdir -p "$dir"
			log "$name: '$v', turn $turn, in $dir: ${BENCH_ARGS:-defaults}"
			# shellcheck disable=SC2086
			timeout "${BENCH_TIMEOUT:-300}" build/gpu/tutti-gpu-store-bench --dir "$dir" \
				--json "$OUT/$name.jsonl" ${BENCH_ARGS:-} $v 2>> "$OUT/$name.err" |
				tee -a "$OUT/$name.txt" >> "$OUT/summary.txt"
			log "$name exit ${PIPESTATUS[0]}"
		done
	done
	rm -rf "$dir"
}

steps=${*:-test mover}

for step in $steps; do
case $step in
build)
	# The build alone (it runs before every step).
	;;
test)
	log "libcufile here: $(ls /usr/lib/x86_64-linux-gnu/libcufile.so* /usr/local/cuda/lib64/libcufile.so* 2>/dev/null | tr '\n' ' ')"
	cmake --build build/gpu --target tutti_cufile_abi_check >> "$OUT/build.log" 2>&1
	log "cuFile ABI check against the real cufile.h: exit $? (no such target: no cufile.h)"
	log "every test, GPU tests included"
	(cd build/gpu && ctest --output-on-failure -j4) > "$OUT/ctest.log" 2>&1
	log "ctest exit $?"
	grep -E "tests passed|Failed|Skipped|\*\*\*" "$OUT/ctest.log" | tee -a "$OUT/summary.txt"

	log "GPU tests under compute-sanitizer memcheck"
	for t in test_gpu_mover test_gpu_uring test_gpu_pipeline; do
		timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 build/gpu/tests/gpu/$t \
			> "$OUT/memcheck-$t.log" 2>&1
		log "memcheck $t exit $?"
		tail -3 "$OUT/memcheck-$t.log" | tee -a "$OUT/summary.txt"
	done
	;;
gpu-test)
	# The GPU tests and the pipeline's CPU twin only (a quicker "test").
	(cd build/gpu && ctest --output-on-failure -R "gpu|pipeline") > "$OUT/ctest-gpu.log" 2>&1
	log "ctest (GPU and pipeline tests) exit $?"
	grep -E "tests passed|Failed|Skipped|\*\*\*" "$OUT/ctest-gpu.log" | tee -a "$OUT/summary.txt"
	timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 build/gpu/tests/gpu/test_gpu_pipeline \
		> "$OUT/memcheck-test_gpu_pipeline.log" 2>&1
	log "memcheck test_gpu_pipeline exit $?"
	tail -3 "$OUT/memcheck-test_gpu_pipeline.log" | tee -a "$OUT/summary.txt"
	;;
mover)
	log "GPU mover bandwidth"
	build/gpu/tutti-gpu-bench --repeats 10 --json > "$OUT/gpu-mover.json" 2> "$OUT/gpu-mover.err"
	log "bench exit $?"
	build/gpu/tutti-gpu-bench --repeats 10 2>&1 | tee "$OUT/gpu-mover.txt" | tee -a "$OUT/summary.txt"
	;;
latency-emulated | latency-disk)
	# Small loads: per engine (gpu-uring, uring, posix) a 2K-token prefix (256 MiB) and one
	# chunk (32 MiB) stored once and loaded LATENCY_LOADS times into GPU KV, each timed from the
	# call until the data is in HBM and checked bit for bit; one JSON object per (engine, size)
	# in $OUT/$step.jsonl beside the ceiling the limit comes from.
	if [ "$step" = latency-emulated ]; then dir=/dev/shm/tutti-latency; else dir=$PWD/build/tutti-latency; fi
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
	;;
store-emulated | store-disk)
	if [ $step = store-emulated ]; then dir=/dev/shm/tutti-bench; else dir=$PWD/build/tutti-bench; fi
	mkdir -p "$dir"
	df -h "$dir" >> "$OUT/summary.txt"
	log "store bench ($step) in $dir: ${BENCH_ARGS:-defaults}"
	# shellcheck disable=SC2086
	timeout "${BENCH_TIMEOUT:-900}" build/gpu/tutti-gpu-store-bench --dir "$dir" --json "$OUT/$step.jsonl" ${BENCH_ARGS:-} \
		2> "$OUT/$step.err" | tee "$OUT/$step.txt" | tee -a "$OUT/summary.txt"
	log "store bench exit ${PIPESTATUS[0]}"
	tail -5 "$OUT/$step.err" >> "$OUT/summary.txt"
	rm -rf "$dir"
	;;
posix-threads)
	# Engine posix into GPU KV by its thread count: POSIX_THREADS (default 32 16 8; 32 is the
	# store's default, one per I/O in flight), each POSIX_TURNS times (default 2) in turn, so
	# that tmpfs's drift between runs falls on every count alike; one JSON object per row in
	# $OUT/posix-threads.jsonl, each with the caller's waits (io_wait_share, gpu_wait_share).
	variants=()
	for n in ${POSIX_THREADS:-32 16 8}; do variants+=("--paths posix --posix-threads $n"); done
	bench_turns posix-threads "${POSIX_TURNS:-2}" "${variants[@]}"
	;;
variants)
	# tutti-gpu-store-bench on /dev/shm once per variant, the variants of BENCH_VARIANTS
	# (separated by ';', each a set of options added to BENCH_ARGS, split at spaces, with no
	# quoting; an empty one, or none, runs BENCH_ARGS alone) in turn, VARIANT_TURNS times
	# (default 2), so that tmpfs's drift between runs falls on every variant alike; one JSON
	# object per row in $OUT/variants.jsonl.
	# The ';' appended keeps a trailing empty variant, which read would drop, and gives an
	# empty BENCH_VARIANTS one empty variant.
	IFS=';' read -r -a variants <<< "${BENCH_VARIANTS:-};"
	bench_turns variants "${VARIANT_TURNS:-2}" "${variants[@]}"
	;;
stripe)
	# Retrieve bandwidth over 1, 2 and 4 directories (one data file each) against raw O_DIRECT
	# reads of the same files in parallel (tutti-stripe-bench), on /dev/shm (emulated) and on
	# the disk holding the working tree. Sizes are chosen for about 2-3 minutes on an H200
	# machine (estimated from the store-emulated and store-disk figures): a 128K-token
	# Llama-3-8B request (17 GB) per load on tmpfs, 32K (4.3 GB) on the disk, whose reads run
	# at about 1.5 GB/s.
	for where in emulated disk; do
		if [ $where = emulated ]; then
			base=/dev/shm/tutti-stripe tokens=${STRIPE_SHM_TOKENS:-131072}
		else
			base=$PWD/build/tutti-stripe tokens=${STRIPE_DISK_TOKENS:-32768}
		fi
		mkdir -p "$base"
		df -h "$base" >> "$OUT/summary.txt"
		log "stripe ($where) in $base: $tokens tokens, engines ${STRIPE_ENGINES:-gpu-uring,gds} ${STRIPE_ARGS:-}"
		# shellcheck disable=SC2086
		timeout "${BENCH_TIMEOUT:-300}" build/gpu/tutti-stripe-bench --dir "$base" --dirs 1,2,4 \
			--kv gpu --engines "${STRIPE_ENGINES:-gpu-uring,gds}" --tokens "$tokens" \
			--repeats 3 --json "$OUT/stripe.jsonl" --csv "$OUT/stripe.csv" \
			--summary "$OUT/summary.txt" ${STRIPE_ARGS:-} > "$OUT/stripe-$where.txt" \
			2> "$OUT/stripe-$where.err"
		log "stripe ($where) exit $?"
		tail -3 "$OUT/stripe-$where.err" >> "$OUT/summary.txt"
		rm -rf "$base"
	done
	;;
tp)
	# TTFT at TP=2 (bench/tp_ttft.py, GLM-4-9B-shaped, one process per GPU, NCCL): needs two
	# GPUs (nvidia-h200-x2). Each rank's stores go to /dev/shm (emulated) and to the disk
	# holding the working tree; lengths whose stores do not fit the free space are skipped,
	# and the summary says so.
	log "tp: ${TP_ARGS:-defaults}"
	rm -rf build/tp-disk /dev/shm/tutti-tp
	# shellcheck disable=SC2086
	timeout --kill-after=30 "${BENCH_TIMEOUT:-900}" python3 bench/tp_ttft.py --out "$OUT" \
		--shm-dir /dev/shm/tutti-tp --disk-dir "$PWD/build/tp-disk" ${TP_ARGS:-} > "$OUT/tp.log" 2>&1
	log "tp exit $?"
	# The bench's summary, or, when it wrote none, the end of its log.
	if [ -s "$OUT/tp-ttft-summary.txt" ]; then
		cat "$OUT/tp-ttft-summary.txt" >> "$OUT/summary.txt"
	else
		tail -20 "$OUT/tp.log" >> "$OUT/summary.txt"
	fi
	rm -rf build/tp-disk /dev/shm/tutti-tp
	;;
iowq)
	# How io-wq spreads batched and paced IOSQE_ASYNC reads of a tmpfs file (tutti-iowq-burst
	# with IOWQ_ARGS; no GPU): the reason the store paces reads of page-cache-backed files.
	mkdir -p /dev/shm/tutti-iowq
	log "iowq: ${IOWQ_ARGS:-defaults}"
	# shellcheck disable=SC2086
	timeout "${BENCH_TIMEOUT:-300}" build/gpu/tutti-iowq-burst --dir /dev/shm/tutti-iowq \
		${IOWQ_ARGS:-} > "$OUT/iowq-burst.jsonl" 2> "$OUT/iowq-burst.err"
	log "iowq exit $?"
	cat "$OUT/iowq-burst.jsonl" >> "$OUT/summary.txt"
	rm -rf /dev/shm/tutti-iowq
	;;
footprint)
	# What resident I/O blocks cost the prefill beside them, the rate at which blocks read host
	# memory, and how the emulated storage's reads share host memory with the GPU's
	# (bench/io_footprint.py with FOOTPRINT_ARGS).
	log "footprint: ${FOOTPRINT_ARGS:-defaults}"
	# shellcheck disable=SC2086
	timeout "${BENCH_TIMEOUT:-600}" python3 bench/io_footprint.py --out "$OUT" ${FOOTPRINT_ARGS:-} \
		> "$OUT/footprint.log" 2>&1
	log "footprint exit $?"
	tail -40 "$OUT/footprint.log" >> "$OUT/summary.txt"
	;;
layerwise)
	# The layerwise pipeline on a Llama-3-8B-shaped model (bench/layerwise_ttft.py); the disk
	# directory is on the disk holding the working tree, the other one in /dev/shm (emulated).
	log "layerwise: ${LAYERWISE_ARGS:-defaults}"
	mkdir -p build/layerwise-disk
	# shellcheck disable=SC2086
	timeout "${BENCH_TIMEOUT:-900}" python3 bench/layerwise_ttft.py --out "$OUT" \
		--disk-dir "$PWD/build/layerwise-disk" ${LAYERWISE_ARGS:-} > "$OUT/layerwise.log" 2>&1
	log "layerwise exit $?"
	tail -60 "$OUT/layerwise.log" >> "$OUT/summary.txt"
	# Per step of each pipeline trace: reads (span, busy), stall, compute.
	for trace in "$OUT"/trace-*.json; do
		[ -e "$trace" ] || continue
		python3 bench/trace_summary.py "$trace" > "${trace%.json}-steps.txt" 2>&1
	done
	rm -rf build/layerwise-disk /dev/shm/tutti-layerwise
	;;
vllm-gpu)
	# Greedy outputs with Tutti identical to vLLM without it, inside vLLM on the GPU
	# (python/tests/vllm/outputs_matrix.py): a Llama-3-8B-shaped model, twelve vLLM processes
	# in turn over a store on /dev/shm and one on the disk (first run, restart, layerwise on
	# and off, gpu-uring and uring, damaged objects under either model runner and without
	# asynchronous scheduling). Needs the vLLM payload.
	if [ ! -f build/vllm-prefix/env.sh ]; then
		log "vllm-gpu: no vLLM here (build/vllm-prefix/env.sh): run scripts/vllm-gpu-payload.sh install first"
		continue
	fi
	log "vllm-gpu: output matrix"
	root=$PWD
	rm -rf build/vllm-gpu-work build/vllm-gpu-disk
	(
		. build/vllm-prefix/env.sh
		cd python &&
			PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} TUTTI_LIBRARY=$root/build/gpu/libtutti.so \
				timeout --kill-after=30 $((${VLLM_GPU_DEADLINE:-520} + 60)) python3 tests/vllm/outputs_matrix.py \
				--out "$OUT/vllm-gpu" --work "$root/build/vllm-gpu-work" \
				--disk-dir "$root/build/vllm-gpu-disk" --deadline "${VLLM_GPU_DEADLINE:-520}" \
				${VLLM_GPU_CASES:+--cases "$VLLM_GPU_CASES"}
	) > "$OUT/vllm-gpu.log" 2>&1
	log "vllm-gpu exit $?"
	cat "$OUT/vllm-gpu/outputs-matrix.md" >> "$OUT/summary.txt" 2>/dev/null ||
		tail -30 "$OUT/vllm-gpu.log" >> "$OUT/summary.txt"
	pack vllm-gpu
	rm -rf build/vllm-gpu-work build/vllm-gpu-disk
	;;
vllm-versions)
	# The differences between the vLLM releases the connector supports, each through the
	# branch of the vLLM installed here (0.26 on the GPU machine; make test runs 0.32's).
	if [ ! -f build/vllm-prefix/env.sh ]; then
		log "vllm-versions: no vLLM here (build/vllm-prefix/env.sh): run scripts/vllm-gpu-payload.sh install first"
		continue
	fi
	log "vllm-versions: tests/vllm/test_versions.py tests/vllm/test_async_save.py"
	root=$PWD
	(
		. build/vllm-prefix/env.sh
		python3 -c "import pytest" 2>/dev/null ||
			{ echo "no pytest in this Python: ship it with the vLLM payload"; exit 1; }
		cd python &&
			PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} TUTTI_LIBRARY=$root/build/gpu/libtutti.so \
				timeout 600 python3 -m pytest -q -p no:cacheprovider tests/vllm/test_versions.py \
				tests/vllm/test_async_save.py
	) > "$OUT/vllm-versions.log" 2>&1
	log "vllm-versions exit $?"
	tail -15 "$OUT/vllm-versions.log" >> "$OUT/summary.txt"
	;;
serve-emulated | serve-disk)
	# The serving benchmark (bench/serve/serve_bench.py): LEval-shaped long-document QA at a
	# sweep of request rates, each system in a vLLM process of its own, the tier on /dev/shm
	# (emulated NVMe) or on the disk holding the working tree. The disk runs only the systems
	# that use storage (recompute and the DRAM tier ran with serve-emulated). SERVE_ARGS adds
	# options; SERVE_DEADLINE bounds the step (default 560 s emulated, 400 s disk).
	storage=${step#serve-}
	if [ ! -f build/vllm-prefix/env.sh ]; then
		log "$step: no vLLM here (build/vllm-prefix/env.sh): run scripts/vllm-gpu-payload.sh install first"
		continue
	fi
	if [ "$storage" = emulated ]; then
		deadline=${SERVE_DEADLINE:-560} serve_systems=tutti,lmcache-mp,lmcache-mp-large,offload-cpu,recompute
	else
		deadline=${SERVE_DEADLINE:-400} serve_systems=tutti,lmcache-mp,lmcache-mp-large
	fi
	log "$step: ${SERVE_ARGS:-defaults}, deadline $deadline s"
	root=$PWD
	rm -rf /dev/shm/tutti-serve build/serve-disk build/serve-work
	(
		. build/vllm-prefix/env.sh
		# shellcheck disable=SC2086
		PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} TUTTI_LIBRARY=$root/build/gpu/libtutti.so \
			timeout --kill-after=30 $((deadline + 60)) python3 bench/serve/serve_bench.py \
			--out "$OUT/serve-$storage" --work "$root/build/serve-work" --storage "$storage" \
			--systems "$serve_systems" --emulated-dir /dev/shm/tutti-serve \
			--disk-dir "$root/build/serve-disk" --deadline "$deadline" ${SERVE_ARGS:-}
	) > "$OUT/serve-$storage.log" 2>&1
	log "$step exit $?"
	cat "$OUT/serve-$storage/serve-summary.md" >> "$OUT/summary.txt" 2>/dev/null ||
		tail -30 "$OUT/serve-$storage.log" >> "$OUT/summary.txt"
	pack "serve-$storage"
	rm -rf /dev/shm/tutti-serve build/serve-disk build/serve-work
	;;
lmcache-micro)
	# LMCache's store and retrieve of the same request beside ours (bench/lmcache_micro.py,
	# LMCACHE_MICRO_ARGS), on the same geometry and in the same directory right after the store
	# bench there, emulated (/dev/shm) and disk; needs the payload (vllm-gpu-payload.sh install).
	if [ -f build/vllm-prefix/env.sh ]; then
		# shellcheck disable=SC1091
		. build/vllm-prefix/env.sh
	else
		log "lmcache-micro: no build/vllm-prefix/env.sh (run scripts/vllm-gpu-payload.sh install): LMCache will be missing"
	fi
	# LMCACHE_MICRO_WHERE="emulated" or "disk" runs one of them (each takes a few minutes).
	for where in ${LMCACHE_MICRO_WHERE:-emulated disk}; do
		if [ "$where" = emulated ]; then dir=/dev/shm/tutti-lmcache; else dir=$PWD/build/tutti-lmcache; fi
		rm -rf "$dir" && mkdir -p "$dir"
		df -h "$dir" >> "$OUT/summary.txt"
		log "lmcache-micro ($where) in $dir: tutti-gpu-store-bench, then LMCache"
		timeout "${BENCH_TIMEOUT:-900}" build/gpu/tutti-gpu-store-bench --dir "$dir" --contexts 32768,131072 \
			--paths gpu-uring,uring --repeats 3 --json "$OUT/lmcache-micro-tutti-$where.jsonl" \
			> "$OUT/lmcache-micro-tutti-$where.txt" 2>&1
		log "store bench exit $?"
		grep -E "tok " "$OUT/lmcache-micro-tutti-$where.txt" | tee -a "$OUT/summary.txt"
		# shellcheck disable=SC2086
		timeout "${BENCH_TIMEOUT:-900}" python3 bench/lmcache_micro.py --dir "$dir" --contexts 32768,131072 \
			--repeats 3 --tutti-json "$OUT/lmcache-micro-tutti-$where.jsonl" \
			--json "$OUT/lmcache-micro.jsonl" ${LMCACHE_MICRO_ARGS:-} > "$OUT/lmcache-micro-$where.log" 2>&1
		log "lmcache-micro ($where) exit $? (77: skipped)"
		grep -E "^(#|emulated|disk)|skipped|Error" "$OUT/lmcache-micro-$where.log" | tail -12 | tee -a "$OUT/summary.txt"
		rm -rf "$dir"
	done
	;;
ceiling)
	# The limit every bench divides by (tutti ceiling, bench/ceiling.c): the best O_DIRECT read
	# and write of a sweep over threads x I/O size x files, and the pinned copies of GPU 0, on
	# /dev/shm (emulated) and on the disk holding the working tree; one JSON object each.
	for where in emulated disk; do
		if [ $where = emulated ]; then dir=/dev/shm/tutti-ceiling; else dir=$PWD/build/tutti-ceiling; fi
		mkdir -p "$dir"
		log "ceiling ($where) in $dir: ${CEILING_ARGS:-defaults}"
		# shellcheck disable=SC2086
		timeout "${BENCH_TIMEOUT:-300}" build/gpu/tutti ceiling --dir "$dir" --gpu 0 --json \
			${CEILING_ARGS:-} > "$OUT/ceiling-$where.json" 2> "$OUT/ceiling-$where.err"
		log "ceiling ($where) exit $?"
		cat "$OUT/ceiling-$where.json" >> "$OUT/summary.txt"
		rm -rf "$dir"
	done
	;;
host-kv-emulated | host-kv-disk)
	# KV in host memory (tutti bench): one request per context stored and retrieved through
	# engines uring and posix, every load verified, each row's ratio to the ceiling measured in
	# the same directory; one JSON object per (engine, context) in $OUT/$step.jsonl.
	# HOST_KV_CONTEXTS (default 8192,32768,131072 emulated; 8192,32768 disk, whose reads run at
	# about 1.5 GB/s) and HOST_KV_ARGS (added to every run) change it.
	if [ $step = host-kv-emulated ]; then
		dir=/dev/shm/tutti-host-kv contexts=${HOST_KV_CONTEXTS:-8192,32768,131072}
	else
		dir=$PWD/build/tutti-host-kv contexts=${HOST_KV_CONTEXTS:-8192,32768}
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
	;;
*)
	log "unknown step $step"
	;;
esac
done
