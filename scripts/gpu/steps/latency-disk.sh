# Small loads into GPU KV per engine, p50/p99 against the target, on the disk.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# LATENCY_LOADS (default 100) and LATENCY_ARGS; results: $OUT/latency-disk.{jsonl,txt}.
# latency_step (scripts/gpu/per_storage.sh) is shared with latency-emulated.
latency_step disk
