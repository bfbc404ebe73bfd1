# tutti-gpu-store-bench on /dev/shm once per variant of BENCH_VARIANTS, in turns.
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The variants of BENCH_VARIANTS are separated by ';', each a set of options added to BENCH_ARGS,
# split at spaces, with no quoting; an empty one, or none, runs BENCH_ARGS alone. They run in
# turn VARIANT_TURNS times (default 2), so that tmpfs's drift between runs falls on every
# variant alike; one JSON object per row in $OUT/variants.jsonl, each saying where the CPU went
# (the machine's busy cores, the process's, its io-wq workers' and its SQ thread's).
# The ';' appended keeps a trailing empty variant, which read would drop, and gives an
# empty BENCH_VARIANTS one empty variant.
IFS=';' read -r -a variants <<< "${BENCH_VARIANTS:-};"
bench_turns variants "${VARIANT_TURNS:-2}" "${variants[@]}"
