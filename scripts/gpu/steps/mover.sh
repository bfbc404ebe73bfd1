# tutti-gpu-bench: the CUDA kernels' gather and scatter bandwidth.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Two runs: $OUT/gpu-mover.json (with --json), then the table, $OUT/gpu-mover.txt.
log "GPU mover bandwidth"
build/gpu/tutti-gpu-bench --repeats 10 --json > "$OUT/gpu-mover.json" 2> "$OUT/gpu-mover.err"
log "bench exit $?"
build/gpu/tutti-gpu-bench --repeats 10 2>&1 | tee "$OUT/gpu-mover.txt" | tee -a "$OUT/summary.txt"
