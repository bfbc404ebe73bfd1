# tutti-stripe-bench: retrieve over 1, 2 and 4 directories, emulated and disk.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Retrieve bandwidth over 1, 2 and 4 directories (one data file each) against raw O_DIRECT
# reads of the same files in parallel, on /dev/shm (emulated) and on the disk holding the
# working tree: $OUT/stripe.{jsonl,csv}. Sizes are chosen for about 2-3 minutes on an H200
# machine (estimated from the store-emulated and store-disk figures): a 128K-token Llama-3-8B
# request (17 GB) per load on tmpfs, 32K (4.3 GB) on the disk, whose reads run at about
# 1.5 GB/s. STRIPE_ARGS adds options; STRIPE_ENGINES, STRIPE_SHM_TOKENS and STRIPE_DISK_TOKENS
# change its defaults.
for where in emulated disk; do
	base=$(work_dir stripe $where)
	if [ $where = emulated ]; then
		tokens=${STRIPE_SHM_TOKENS:-131072}
	else
		tokens=${STRIPE_DISK_TOKENS:-32768}
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
