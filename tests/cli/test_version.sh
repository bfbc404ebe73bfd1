#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Description: one version everywhere. The public header's TUTTI_VERSION_* macros are its only
# source; `tutti --version` prints it with the on-disk format version of src/format/format.h;
# CHANGELOG.md's latest entry is that version; docs/format.md's title and compatibility table
# name that format, first written by a release no later than this one.
# Usage: test_version.sh TUTTI_CLI SOURCE_DIR
set -euo pipefail
tutti=$1 src=$2

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

version=$(awk '/^#define TUTTI_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' \
	"$src/include/tutti/base.h")
format=$(awk '/^#define TT_SB_VERSION /{sub(/u$/, "", $3); print $3}' "$src/src/format/format.h")
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "version macros: '$version'"
[[ $format =~ ^[0-9]+$ ]] || fail "TT_SB_VERSION: '$format'"

out=$("$tutti" --version)
[[ $out == "tutti $version (on-disk format $format; "* ]] || fail "tutti --version: $out"
[ "$("$tutti" version)" = "$out" ] || fail "tutti version differs from tutti --version"

latest=$(grep -m1 -E '^## [0-9]' "$src/CHANGELOG.md" | awk '{print $2}')
[ "$latest" = "$version" ] || fail "CHANGELOG.md's latest entry is $latest, the version $version"

head -n1 "$src/docs/format.md" | grep -q "(version $format)" ||
	fail "docs/format.md's title does not name format $format"
first=$(grep -E "^\| $format \| Tutti [0-9.]+ and later \|" "$src/docs/format.md" |
	sed -E 's/^\| [0-9]+ \| Tutti ([0-9.]+) .*/\1/')
[ -n "$first" ] || fail "docs/format.md has no compatibility row for format $format"
[ "$(printf '%s\n%s\n' "$first" "$version" | sort -V | tail -n1)" = "$version" ] ||
	fail "docs/format.md: format $format first written by $first, after this release $version"
echo "version $version, on-disk format $format"
