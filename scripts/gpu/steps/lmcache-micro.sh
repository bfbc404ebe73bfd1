# LMCache's store and retrieve beside tutti-gpu-store-bench, emulated and disk.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# bench/lmcache_micro.py on the same geometry and in the same directory right after the store
# bench there, emulated (/dev/shm) and disk; LMCache comes with the vLLM payload.
# LMCACHE_MICRO_WHERE="emulated" or "disk" runs one of them (each takes a few minutes).
# Results: $OUT/lmcache-micro.jsonl, $OUT/lmcache-micro-tutti-WHERE.{jsonl,txt}.
# The payload's environment stays for the steps after this one, as it always has.
need_vllm "LMCache will be missing (run scripts/vllm-gpu-payload.sh install)" && vllm_env
for where in ${LMCACHE_MICRO_WHERE:-emulated disk}; do
	dir=$(work_dir lmcache "$where")
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
