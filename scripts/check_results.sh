#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The results and the files behind them (HACKING.md, "Benchmarks"): every result file that
# docs/results.md or docs/results-history.md cites exists under bench/results/; every file of
# bench/results/ backs a current claim (cited by docs/results.md) and is listed in its README,
# every file of bench/results/archive/ in the archive's README. A claim cites a file as a
# backquoted name relative to bench/results/ (archive/NAME for an archived one), with brace
# alternatives or a glob (`run{1,2}-h200.{jsonl,txt}`), or as a path under bench/results/.
# Exits non-zero on any finding.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

fail=0
report() {
	echo "results: $1" >&2
	fail=1
}

results=bench/results
ext='\.(json|jsonl|txt|csv|md|png|log|tgz)$'

# names FILE [PREFIX]: the result files FILE names (brace alternatives and globs expanded in
# bench/results/), one per line; with PREFIX, only names under it.
names() {
	local tok word
	local -a words
	{
		grep -oE '`[^` ]+`' "$1" | tr -d '`'
		grep -oE '(\.\./)?bench/results/[A-Za-z0-9_.,{}*/-]+' "$1"
	} | sed -E 's#^(\.\./)?bench/results/##' | sort -u | while read -r tok; do
		# Names of this repository's files only: no other path, nothing the shell would run.
		[[ $tok =~ ^[A-Za-z0-9_.,{}*/-]+$ ]] || continue
		case $tok in */*) [[ $tok == archive/* ]] || continue ;; esac
		eval "words=($tok)"
		for word in "${words[@]}"; do
			[[ $word =~ $ext && $word != .* ]] && echo "$word"
		done
	done
}

# check_cited DOC: every result file DOC cites exists; those that do in $cited, one a line.
check_cited() {
	local f
	cited=
	while read -r f; do
		if [ -e "$results/$f" ]; then
			cited+=$f$'\n'
		else
			report "$1 cites $results/$f, which does not exist"
		fi
	done < <(cd "$results" && names "../../$1")
}

check_cited docs/results-history.md
check_cited docs/results.md
current=$cited
listed=$(cd "$results" && names README.md)
archived=$(cd "$results/archive" && names README.md)

for f in "$results"/*; do
	name=${f#"$results"/}
	[ -f "$f" ] && [ "$name" != README.md ] || continue
	grep -qxF "$name" <<<"$current" ||
		report "$f backs no claim of docs/results.md: cite it, or git mv it to $results/archive/"
	grep -qxF "$name" <<<"$listed" || report "$f is not listed in $results/README.md"
done
for f in "$results"/archive/*; do
	name=${f#"$results"/archive/}
	[ "$name" != README.md ] || continue
	grep -qxF "$name" <<<"$archived" || report "$f is not listed in $results/archive/README.md"
done
exit $fail
