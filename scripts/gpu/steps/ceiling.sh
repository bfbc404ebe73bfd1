# tutti ceiling: the limit every bench divides by, emulated and disk.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# tools/common/ceiling.c: the best O_DIRECT read and write of a sweep over threads x I/O size x files,
# and the pinned copies of GPU 0, on /dev/shm (emulated) and on the disk holding the working
# tree; one JSON object each, $OUT/ceiling-{emulated,disk}.json.
for where in emulated disk; do
	dir=$(work_dir ceiling $where)
	mkdir -p "$dir"
	log "ceiling ($where) in $dir: ${CEILING_ARGS:-defaults}"
	# shellcheck disable=SC2086
	timeout "${BENCH_TIMEOUT:-300}" build/gpu/tutti ceiling --dir "$dir" --gpu 0 --json \
		${CEILING_ARGS:-} > "$OUT/ceiling-$where.json" 2> "$OUT/ceiling-$where.err"
	log "ceiling ($where) exit $?"
	cat "$OUT/ceiling-$where.json" >> "$OUT/summary.txt"
	rm -rf "$dir"
done
