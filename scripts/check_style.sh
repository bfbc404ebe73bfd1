#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Mechanical style checks (docs: HACKING.md). Exits non-zero on the first class of problems found.
set -uo pipefail
cd "$(dirname "$0")/.."

fail=0
report() {
	echo "style: $1" >&2
	fail=1
}

mapfile -t c_files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null || find . -name '*.[ch]')

# clang-format, pinned to the version CI installs (Debian's clang-format 14).
if command -v clang-format >/dev/null; then
	clang-format --dry-run -Werror "${c_files[@]}" 2>/dev/null ||
		report "clang-format: run clang-format -i on the files above (clang-format --dry-run lists them)"
fi

for f in "${c_files[@]}"; do
	head -n 1 "$f" | grep -q 'SPDX-License-Identifier' || report "$f: first line must be the SPDX header"
	# // comments (a "://" inside a string or comment, as in a URL, is not one)
	if grep -nE '(^|[^:])//' "$f" | grep -vE '"[^"]*//' | head -3 | grep . >&2; then
		report "$f: use /* */ comments"
	fi
	if grep -nE '(^|[^_a-zA-Z0-9])(strcpy|strcat|sprintf|vsprintf|strtok|atoi|atol|gets) *\(' "$f" | head -3 | grep . >&2; then
		report "$f: forbidden function (use snprintf, strtoull with end checks)"
	fi
done

for h in include/tutti/*.h; do
	grep -q '#ifndef TUTTI_' "$h" || report "$h: missing TUTTI_ header guard"
	grep -q 'extern "C"' "$h" || [ "$(basename "$h")" = tutti.h ] || report "$h: missing extern \"C\" guard"
	grep -nE '#include <(cuda|liburing|Python)' "$h" && report "$h: public headers include only libc headers"
done

# CUDA stays in cuda/: the C library and its public headers name no CUDA type.
grep -rnE 'cuda_runtime|cudaStream_t' src include >/dev/null && report "CUDA identifiers outside cuda/"

# Every exported symbol is a tutti_ function declared in a public header.
lib=$(ls build/*/libtutti.so 2>/dev/null | head -n 1)
if [ -n "$lib" ]; then
	while read -r sym; do
		case "$sym" in
		tutti_*) grep -qw "$sym" include/tutti/*.h || report "$sym exported but not declared in include/tutti" ;;
		*) report "$lib exports $sym (only tutti_* may be exported)" ;;
		esac
	done < <(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBR]/ {print $3}' | sed 's/@.*//')
fi

exit $fail
