# tutti bench: KV in host memory, engines uring and posix, on the disk.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# HOST_KV_CONTEXTS and HOST_KV_ARGS; results: $OUT/host-kv-disk.jsonl.
# host_kv_step (scripts/gpu/per_storage.sh) is shared with host-kv-emulated.
host_kv_step disk
