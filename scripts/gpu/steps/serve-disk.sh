# bench/serve/serve_bench.py: vLLM serving with Tutti and LMCache, on the disk.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# SERVE_ARGS adds options, SERVE_DEADLINE bounds it; results: $OUT/serve-disk.tgz.
# serve_step (scripts/gpu/per_storage.sh) is shared with serve-emulated.
serve_step disk
