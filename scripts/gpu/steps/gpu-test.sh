# The GPU and pipeline tests only, test_gpu_pipeline under memcheck (quick).
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# A quicker "test". Logs: $OUT/ctest-gpu.log, $OUT/memcheck-test_gpu_pipeline.log.
(cd build/gpu && ctest --output-on-failure -R "gpu|pipeline") > "$OUT/ctest-gpu.log" 2>&1
log "ctest (GPU and pipeline tests) exit $?"
grep -E "tests passed|Failed|Skipped|\*\*\*" "$OUT/ctest-gpu.log" | tee -a "$OUT/summary.txt"
timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 build/gpu/tests/gpu/test_gpu_pipeline \
	> "$OUT/memcheck-test_gpu_pipeline.log" 2>&1
log "memcheck test_gpu_pipeline exit $?"
tail -3 "$OUT/memcheck-test_gpu_pipeline.log" | tee -a "$OUT/summary.txt"
