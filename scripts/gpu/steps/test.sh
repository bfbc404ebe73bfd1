# Every test, GPU tests included, then the GPU tests under compute-sanitizer.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Also checks our cuFile declarations against the machine's cufile.h. Logs: $OUT/ctest.log,
# $OUT/memcheck-TEST.log; the cuFile check's output goes to $OUT/build.log.
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
