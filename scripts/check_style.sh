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

# Modules (HACKING.md, "Rules"): a file of src/<m>/ (or cuda/, the GPU layer's CUDA side)
# includes of another module only its interface, src/<other>/<other>.h; a module's own files
# (in src/<m>/ and its folders, such as src/engine/<name>/) share src/<m>/<m>_impl.h and their
# own headers, which no other module includes. The public API (include/tutti/) is open to all.
# Exceptions, each with its reason:
#   cuda/*.cuh in any .cu file: the GPU layer's interface for CUDA code (its context, the
#     device helpers and the checksum), on which engines build kernels of their own;
#   format/le.h in src/remote/: the byte-order helpers of every on-disk encoder.
module_of() { # file: its module (cuda/ is the GPU layer's CUDA side, a module of its own)
	case "$1" in
	cuda/*) echo cuda ;;
	*) echo "$1" | cut -d/ -f2 ;;
	esac
}
include_allowed() { # file, included path
	local file=$1 inc=$2 mod other
	mod=$(module_of "$file")
	other=${inc%%/*}
	[ "$other" = tutti ] || [ "$other" = "$mod" ] || [ "$inc" = "$other/$other.h" ] && return 0
	case "$file:$inc" in
	*.cu:cuda/*.cuh) return 0 ;;
	esac
	case "$mod:$inc" in
	remote:format/le.h) return 0 ;;
	esac
	return 1
}
for f in "${c_files[@]}"; do
	case "$f" in src/*/* | cuda/*) ;; *) continue ;; esac
	while read -r inc; do
		include_allowed "$f" "$inc" ||
			report "$f includes $inc: other modules include only src/<module>/<module>.h"
	done < <(sed -nE 's/^#include "([a-z0-9_]+\/[a-z0-9_/]+\.(h|cuh))".*/\1/p' "$f")
done

# The tools (tools/: the tutti CLI, and tools/common, the library it lends to the benchmarks)
# are built on the public API: a file of tools/ includes public headers (tutti/*.h), system
# headers (<...>) and the headers of tools/, never a private header of the library (src/) nor
# one of bench/. A benchmark of bench/ includes public headers, its own and the tools' (bench/
# depends on tools/, never the reverse). CUDA headers: only the tools' one door to the CUDA
# runtime (tools/common/gpucopy_cuda.c) and benchmarks that drive the GPU themselves.
# Exceptions, each with its reason:
#   gpu/gpu.h and mover/mover.h in bench/gpu_mover_bench.c: it measures the library's internal
#     CUDA movers themselves, which have no public face.
tools_include_allowed() { # file, included path
	local file=$1 inc=$2 dirs=tools d
	case "$inc" in tutti/*.h) return 0 ;; esac
	case "$file:$inc" in
	bench/gpu_mover_bench.c:gpu/gpu.h | bench/gpu_mover_bench.c:mover/mover.h) return 0 ;;
	esac
	case "$file" in bench/*) dirs="tools bench" ;; esac
	for d in $dirs; do
		[ -n "$(git ls-files "$d/$inc" "$d/*/$inc")" ] && return 0
	done
	return 1
}
for f in "${c_files[@]}"; do
	case "$f" in tools/* | bench/*) ;; *) continue ;; esac
	while read -r inc; do
		tools_include_allowed "$f" "$inc" ||
			report "$f includes \"$inc\": tools/ and bench/ build on the public API (tutti/*.h) and the tools' headers"
	done < <(sed -nE 's/^#include "([^"]+)".*/\1/p' "$f")
	case "$f" in tools/common/gpucopy_cuda.c | bench/*) ;; *)
		grep -nE '^#include <(cuda|cufile)' "$f" | head -1 | grep . >&2 &&
			report "$f: CUDA headers in tools/ only in tools/common/gpucopy_cuda.c" ;;
	esac
done

# Layers: the store's API (tutti/store.h, and the public headers that include it) is for the
# store and the pipeline above it. The modules below the store call no tutti_store_* function;
# they name the KV types (tutti/kv.h) and the engines (tutti/engine.h) from their own headers.
store_api=(tutti/store.h)
while :; do
	n=${#store_api[@]}
	pat=$(printf '%s\n' "${store_api[@]}" | sed 's/\./\\./g' | paste -sd'|')
	mapfile -t store_api < <({
		printf '%s\n' "${store_api[@]}"
		grep -lE "^#include \"($pat)\"" include/tutti/*.h | sed 's|^include/||'
	} | sort -u)
	[ "${#store_api[@]}" = "$n" ] && break
done
pat=$(printf '%s\n' "${store_api[@]}" | sed 's/\./\\./g' | paste -sd'|')
for f in "${c_files[@]}"; do
	case "$f" in src/store/* | src/pipeline/*) continue ;; src/*/* | cuda/*) ;; *) continue ;; esac
	grep -nE "^#include \"($pat)\"" "$f" | head -1 | grep . >&2 &&
		report "$f: below the store, include tutti/kv.h or tutti/engine.h, not the store's API"
done

# No module includes another that includes it back, directly or round a longer loop: the
# modules form layers (tsort finds any loop in the graph of their includes).
module_edges() {
	local f mod other
	for f in "${c_files[@]}"; do
		case "$f" in src/*/* | cuda/*) ;; *) continue ;; esac
		mod=$(module_of "$f")
		sed -nE 's/^#include "([a-z0-9_]+)\/[a-z0-9_/]+\.(h|cuh)".*/\1/p' "$f" | sort -u |
			while read -r other; do
				[ "$other" = "$mod" ] || [ "$other" = tutti ] || echo "$mod $other"
			done
	done | sort -u
}
edges=$(module_edges)
if ! echo "$edges" | tsort >/dev/null 2>&1; then
	echo "$edges" | tsort 2>&1 >/dev/null | sed 's/^/  /' >&2
	echo "$edges" | awk '{e[$1 " " $2] = 1} END {for (k in e) {split(k, m, " ");
		if ((m[2] " " m[1]) in e && m[1] < m[2]) print "  " m[1] " <-> " m[2]}}' >&2
	report "modules include each other (above: the loop); move what both need into one of them"
fi

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

# CUDA lives in .cu and .cuh files (cuda/, and an engine's kernels beside its C files): the C
# files of the library and its public headers name no CUDA type.
grep -rnE 'cuda_runtime|cudaStream_t' src include --include='*.c' --include='*.h' | head -3 | grep . >&2 &&
	report "CUDA identifiers in C files or headers (they live in .cu/.cuh files)"

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

# Comments quote no measurements: a comment states the rule and cites the claim id, the figure
# lives in docs/results.md (scripts/check_comments.py says what counts as one).
python3 scripts/check_comments.py ||
	report "comments quote measured figures (above): state the rule and cite the claim id instead"

# Every result file a claim cites exists, and every file in bench/results/ backs a current claim.
bash scripts/check_results.sh || report "results: see the findings above (HACKING.md, \"Benchmarks\")"

# The serving core (python/tutti/serving/) names no serving engine: it imports none, in any form
# (import, from ... import, importlib's import_module or __import__ of the name), so that another
# engine's adapter reuses it whole (docs/design.md, "The serving core"). An engine's code lives
# in its adapter (python/tutti/vllm/ for vLLM); a new engine's import name joins the list.
engines='vllm|sglang'
sp='[[:space:]]'
imp="^$sp*import$sp+([[:alnum:]_.]+($sp+as$sp+[[:alnum:]_]+)?$sp*,$sp*)*($engines)([.,[:space:]]|\$)"
frm="^$sp*from$sp+($engines)([.[:space:]]|\$)"
dyn="(import_module|__import__)\($sp*[\"']($engines)([.\"']|\$)"
if find python/tutti/serving -name '*.py' -print0 | xargs -0 -r grep -nE "$imp|$frm|$dyn" |
	grep . >&2; then
	report "python/tutti/serving/ imports a serving engine: move that code into the engine's adapter"
fi

exit $fail
