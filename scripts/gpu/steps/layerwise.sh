# bench/layerwise_ttft.py: the layerwise pipeline's TTFT and stall.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# A Llama-3-8B-shaped model in PyTorch with the pipeline at every layer, against a DRAM tier and
# bench/block_loader.c, the per-block CPU baseline (LAYERWISE_ARGS="--prompt 8192 --prefixes
# 2048" for a quick check). The disk directory is on the disk holding the working tree, the
# other one in /dev/shm (emulated). Results in $OUT (layerwise-*.{jsonl,csv}, trace-*.json with trace-*-steps.txt:
# per step of each pipeline trace, reads (span, busy), stall, compute), log $OUT/layerwise.log.
log "layerwise: ${LAYERWISE_ARGS:-defaults}"
mkdir -p build/layerwise-disk
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-900}" python3 bench/layerwise_ttft.py --out "$OUT" \
	--disk-dir "$PWD/build/layerwise-disk" ${LAYERWISE_ARGS:-} > "$OUT/layerwise.log" 2>&1
log "layerwise exit $?"
tail -60 "$OUT/layerwise.log" >> "$OUT/summary.txt"
for trace in "$OUT"/trace-*.json; do
	[ -e "$trace" ] || continue
	python3 bench/trace_summary.py "$trace" > "${trace%.json}-steps.txt" 2>&1
done
rm -rf build/layerwise-disk "$(work_dir layerwise emulated)"
