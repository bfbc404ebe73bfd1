# tutti-iowq-burst: how io-wq spreads batched and paced tmpfs reads (no GPU).
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The reason the store paces reads of page-cache-backed files: $OUT/iowq-burst.jsonl.
dir=$(work_dir iowq emulated)
mkdir -p "$dir"
log "iowq: ${IOWQ_ARGS:-defaults}"
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-300}" build/gpu/tutti-iowq-burst --dir "$dir" \
	${IOWQ_ARGS:-} > "$OUT/iowq-burst.jsonl" 2> "$OUT/iowq-burst.err"
log "iowq exit $?"
cat "$OUT/iowq-burst.jsonl" >> "$OUT/summary.txt"
rm -rf "$dir"
