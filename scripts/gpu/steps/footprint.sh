# bench/io_footprint.py: what resident I/O blocks cost a prefill beside them.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Also the rate at which blocks read host memory, and how the emulated storage's reads share
# host memory with the GPU's. Results in $OUT, log $OUT/footprint.log.
log "footprint: ${FOOTPRINT_ARGS:-defaults}"
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-600}" python3 bench/io_footprint.py --out "$OUT" ${FOOTPRINT_ARGS:-} \
	> "$OUT/footprint.log" 2>&1
log "footprint exit $?"
tail -40 "$OUT/footprint.log" >> "$OUT/summary.txt"
