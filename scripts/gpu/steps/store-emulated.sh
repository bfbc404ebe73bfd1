# tutti-gpu-store-bench: store and retrieve per engine, on /dev/shm.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# BENCH_ARGS adds options (BENCH_TIMEOUT, default 900 s); results: $OUT/store-emulated.{jsonl,txt}.
# store_step (scripts/gpu/per_storage.sh) is shared with store-disk.
store_step emulated
