# bench/tp_ttft.py: TTFT at tensor parallelism 2, one store per GPU (two GPUs).
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# One process per GPU, NCCL; needs two GPUs (nvidia-h200-x2). Each rank's stores go to /dev/shm
# (emulated) and to the disk holding the working tree; lengths whose stores do not fit the free
# space are skipped, and the summary says so. Results: $OUT/tp-ttft*, log $OUT/tp.log.
log "tp: ${TP_ARGS:-defaults}"
shm=$(work_dir tp emulated)
rm -rf build/tp-disk "$shm"
# shellcheck disable=SC2086
timeout --kill-after=30 "${BENCH_TIMEOUT:-900}" python3 bench/tp_ttft.py --out "$OUT" \
	--shm-dir "$shm" --disk-dir "$PWD/build/tp-disk" ${TP_ARGS:-} > "$OUT/tp.log" 2>&1
log "tp exit $?"
# The bench's summary, or, when it wrote none, the end of its log.
if [ -s "$OUT/tp-ttft-summary.txt" ]; then
	cat "$OUT/tp-ttft-summary.txt" >> "$OUT/summary.txt"
else
	tail -20 "$OUT/tp.log" >> "$OUT/summary.txt"
fi
rm -rf build/tp-disk "$shm"
