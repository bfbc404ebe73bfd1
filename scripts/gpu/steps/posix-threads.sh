# Engine posix into GPU KV by its thread count, on /dev/shm.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# POSIX_THREADS (default 32 16 8; 32 is the store's default, one per I/O in flight), each
# POSIX_TURNS times (default 2) in turn, so that tmpfs's drift between runs falls on every count
# alike; one JSON object per row in $OUT/posix-threads.jsonl, each with the caller's waits
# (io_wait_share, gpu_wait_share). BENCH_ARGS adds options.
variants=()
for n in ${POSIX_THREADS:-32 16 8}; do variants+=("--paths posix --posix-threads $n"); done
bench_turns posix-threads "${POSIX_TURNS:-2}" "${variants[@]}"
