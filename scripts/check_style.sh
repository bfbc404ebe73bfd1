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

# Modules (HACKING.md, "Rules"): a file of src/<m>/ (or cuda/, the GPU layer's implementation)
# includes of another module only its interface, src/<other>/<other>.h; a module's own files
# share src/<m>/<m>_impl.h, which no other module includes. The public API (include/tutti/) is
# open to all. Exceptions, each with its reason:
#   gpu_uring/proto.h in cuda/: the ring's protocol, which the GPU's driver speaks;
#   format/le.h in src/remote/: the byte-order helpers of every on-disk encoder.
include_allowed() { # file, included path
	local file=$1 inc=$2 mod other
	case "$file" in
	cuda/*) mod=cuda ;;
	*) mod=$(echo "$file" | cut -d/ -f2) ;;
	esac
	other=${inc%%/*}
	[ "$other" = tutti ] || [ "$other" = "$mod" ] || [ "$inc" = "$other/$other.h" ] && return 0
	case "$mod:$inc" in
	cuda:gpu_uring/proto.h | remote:format/le.h) return 0 ;;
	esac
	return 1
}
for f in "${c_files[@]}"; do
	case "$f" in src/*/* | cuda/*) ;; *) continue ;; esac
	while read -r inc; do
		include_allowed "$f" "$inc" ||
			report "$f includes $inc: other modules include only src/<module>/<module>.h"
	done < <(sed -nE 's/^#include "([a-z0-9_]+\/[a-z0-9_]+\.h)".*/\1/p' "$f")
done

# The GPU layer (src/gpu/gpu.h) is called by the engines, the movers and the GPU layer itself,
# and outside them only where HACKING.md names why: the pipeline's stream hooks
# (src/pipeline/stream.c), KV registration asking where memory lives (src/kv/kv.c), and
# the remote tier's transfer buffers (src/remote/).
gpu_calls=$(grep -oE '\btt_gpu_[a-z0-9_]+\(' src/gpu/gpu.h | tr -d '(' | sort -u | paste -sd'|')
if [ -n "$gpu_calls" ] &&
	grep -rnE "\b($gpu_calls)\(" src --include='*.c' |
	grep -vE '^src/(gpu|engine|mover|remote)/|^src/pipeline/stream\.c:|^src/kv/kv\.c:' |
	head -5 | grep . >&2; then
	report "GPU layer calls outside the engines, movers and named hooks (see HACKING.md)"
fi

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

# Python: ruff (lint, import order) over the package and its tests, and mypy (every function
# typed; settings in python/pyproject.toml) over the package. Both come pinned with the vLLM
# environment (scripts/setup-vllm-venv.sh), since mypy reads vLLM's and torch's types.
venv=$(realpath -m "${TUTTI_VENV:-.venv-vllm}")
if [ -x "$venv/bin/ruff" ] && [ -x "$venv/bin/mypy" ]; then
	(cd python && "$venv/bin/ruff" check --quiet tutti tests) ||
		report "ruff: fix the findings above (ruff check --fix fixes the mechanical ones)"
	# mypy itself sometimes crashes ("INTERNAL ERROR") on a cold cache; a crash is not a
	# verdict on the code, so it is run once more, from an empty cache, and then judged.
	mkdir -p build
	if ! (cd python && "$venv/bin/mypy" --cache-dir ../build/mypy-cache) >build/mypy.log 2>&1; then
		cat build/mypy.log
		if grep -q "INTERNAL ERROR" build/mypy.log; then
			echo "style: mypy crashed; running it again from an empty cache"
			rm -rf build/mypy-cache
			(cd python && "$venv/bin/mypy" --cache-dir ../build/mypy-cache --show-traceback) ||
				report "mypy: fix the type errors above"
		else
			report "mypy: fix the type errors above"
		fi
	else
		cat build/mypy.log
	fi
else
	report "ruff and mypy are missing from $venv: run bash scripts/setup-vllm-venv.sh (make style does)"
fi

exit $fail
