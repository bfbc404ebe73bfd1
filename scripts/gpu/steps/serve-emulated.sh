# bench/serve/serve_bench.py: vLLM serving, Tutti against LMCache and a DRAM tier.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# SERVE_ARGS adds options, SERVE_DEADLINE bounds it; results: $OUT/serve-emulated.tgz.
# serve_step (scripts/gpu/per_storage.sh) is shared with serve-disk.
serve_step emulated
