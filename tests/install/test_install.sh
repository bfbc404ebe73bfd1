#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Description: libtutti as an installed package. `cmake --install` into a fresh prefix; then the
# examples are built against that prefix as another project would build them, once through
# pkg-config and once through find_package(tutti), and run; the README's example compiles
# against it; the installed tutti program loads the installed library by its run path; versions
# agree everywhere.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR C_COMPILER [EXTRA_CFLAGS]
# (EXTRA_CFLAGS: the sanitizer flags of a sanitized build, which its consumers need too)
set -euo pipefail
build=$1 src=$2 cc=$3 extra=${4:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/tutti-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/tutti/tutti.h include/tutti/store.h bin/tutti; do
	[ -e "$prefix/$f" ] || fail "$f not installed"
done
pc=$(find "$prefix" -name tutti.pc)
[ -n "$pc" ] || fail "tutti.pc not installed"
libdir=$(cd "$(dirname "$pc")/.." && pwd)
[ -e "$libdir/libtutti.so" ] || fail "libtutti.so not in $libdir"
[ -e "$libdir/cmake/tutti/tuttiConfig.cmake" ] || fail "CMake package not in $libdir/cmake/tutti"

# The installed tutti links the installed libtutti.so, found from where the program lies (its
# run path, $ORIGIN-relative): no LD_LIBRARY_PATH, and nothing of the build tree.
runpath=$(readelf -d "$prefix/bin/tutti" | sed -nE 's/.*\((RUNPATH|RPATH)\).*\[(.*)\]/\2/p')
[[ $runpath == '$ORIGIN/'* && $runpath != *"$build"* && $runpath != *:* ]] ||
	fail "bin/tutti's run path is '$runpath', want \$ORIGIN/ and the way to $libdir only"
[ "$(cd "$prefix/bin/${runpath#\$ORIGIN/}" && pwd -P)" = "$(cd "$libdir" && pwd -P)" ] ||
	fail "bin/tutti's run path $runpath does not lead to $libdir"
deps=$(env -u LD_LIBRARY_PATH ldd "$prefix/bin/tutti")
needed=$(awk '$1 ~ /^libtutti\.so/ {print $1}' <<<"$deps")
loaded=$(awk '$1 ~ /^libtutti\.so/ {print $3}' <<<"$deps")
[ -n "$needed" ] || fail "bin/tutti does not link libtutti.so: $deps"
[ "$(realpath "$loaded")" = "$(realpath "$libdir/$needed")" ] ||
	fail "bin/tutti loads '$loaded', not the installed $libdir/$needed"

# One version: the header, the CLI (run with no LD_LIBRARY_PATH), pkg-config.
want=$(awk '/#define TUTTI_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' \
	"$prefix/include/tutti/base.h")
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/tutti" --version) || fail "tutti --version: $out"
grep -q "^tutti $want (on-disk format [0-9]" <<<"$out" || fail "tutti --version: $out, want $want"
export PKG_CONFIG_PATH=$(dirname "$pc")
[ "$(pkg-config --modversion tutti)" = "$want" ] || fail "tutti.pc version"

# pkg-config: one line builds a program against the installed library (and nothing else: the
# source tree's headers are not on the include path).
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -Wall -Wextra -Werror $extra $(pkg-config --cflags tutti) \
	"$src/examples/save_and_load.c" -o "$work/save_and_load" $(pkg-config --libs tutti)
deps=$(LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ldd "$work/save_and_load")
grep -q "$libdir/libtutti.so" <<<"$deps" ||
	fail "save_and_load does not load the installed library"
out=$(LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/save_and_load" "$work/store" tiny) ||
	fail "save_and_load: $out"
grep -q "^loaded 3 chunks" <<<"$out" || fail "save_and_load: $out"

# The README's example, as printed there, compiles and links against the installed library.
awk '/^## Using the library/ {in_section = 1} in_section && /^```c$/ {code = 1; next}
	code && /^```$/ {exit} code' "$src/README.md" >"$work/readme.c.in"
grep -q tutti_store_load "$work/readme.c.in" || fail "no C example in README.md's Using the library"
{
	grep '^#include' "$work/readme.c.in"
	echo 'int main(void) {'
	grep -v '^#include' "$work/readme.c.in"
	echo 'return 0; }'
} >"$work/readme.c"
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -Wall -Wno-unused-variable -Wno-unused-but-set-variable -Werror $extra \
	$(pkg-config --cflags tutti) "$work/readme.c" -o "$work/readme" $(pkg-config --libs tutti) ||
	fail "README.md's example does not compile"

# find_package(tutti): the examples' own CMake project, outside Tutti's build.
cmake -S "$src/examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$prefix" \
	-DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$extra" -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$work/examples" >/dev/null
# CMake records the imported library's directory in the build tree's run path: no
# LD_LIBRARY_PATH.
out=$("$work/examples/list_chunks" "$work/store") || fail "list_chunks: $out"
grep -q "^3 chunks" <<<"$out" || fail "list_chunks: $out"
out=$("$work/examples/save_and_load" "$work/store" tiny) || fail "save_and_load (CMake): $out"
grep -q "^saved 0 chunks, 3 already stored" <<<"$out" || fail "save_and_load (CMake): $out"
echo "installed package OK: $want"
