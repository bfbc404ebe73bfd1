#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Description: the tutti CLI as an operator meets it: inspect and fsck change nothing (not a
# byte, not a file's time) and work on a read-only mount (as root, in a private mount
# namespace); given part of a store's directories they refuse, naming what is missing, and
# fsck --repair touches none of them; on things that are not a healthy store (a FIFO or an empty
# file where the data file should be) they answer at once with a message that says what is
# there; profile never writes through a symbolic link and never replaces a good profile with a
# failed measurement; every numeric option takes a plain decimal number in its range and
# nothing else; one flipped bit of a slot header is damage that one fsck --repair erases for
# good, and a damaged superblock is refused alike by every command, changing nothing; a FIFO, a
# device or a directory where a profile or a data file should be is refused at once and left
# as it is.
set -euo pipefail
tutti=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/tutti-cli-admin.XXXXXX")
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# expect CODE PATTERN CMD...: CMD exits with CODE within 20 s and its stderr matches PATTERN.
expect() {
	local code=$1 pattern=$2 rc=0
	shift 2
	timeout 20 "$@" >"$dir/out" 2>"$dir/err" || rc=$?
	[ "$rc" -ne 124 ] || fail "hung: $*"
	[ "$rc" -eq "$code" ] || fail "exit $rc, not $code: $* ($(cat "$dir/err"))"
	grep -q -- "$pattern" "$dir/err" || fail "no '$pattern' from: $* ($(cat "$dir/err"))"
}

# A store over two directories, from a small benchmark run.
store() {
	"$tutti" bench --model tiny --context 1024 --requests 2 --repeats 1 --no-raw \
		--no-baseline "$@" --json >/dev/null || fail "bench to make a store: $*"
}
state() { # the data files' bytes and times
	for d in "$@"; do
		stat -c '%s %Y.%y %Z' "$d/tutti.data"
		sha256sum <"$d/tutti.data"
	done
}

# ---- inspect and fsck change nothing ----
store --dir "$dir/a" --dir "$dir/b"
before=$(state "$dir/a" "$dir/b")
sleep 1.1 # a time written now would differ
grep -q "^store .*(2 directories)" <<<"$("$tutti" inspect "$dir/a" "$dir/b")" || fail "inspect"
grep -q '"chunks":' <<<"$("$tutti" inspect --json "$dir/b" "$dir/a")" || fail "inspect --json"
grep -q "^result     clean" <<<"$("$tutti" fsck "$dir/a" "$dir/b")" || fail "fsck"
[ "$(state "$dir/a" "$dir/b")" = "$before" ] || fail "inspect or fsck changed the store"

# ---- part of a store: refused, naming what is missing; --repair erases nothing ----
expect 1 "missing directory 2 (last opened as $(realpath "$dir/b"))" "$tutti" inspect "$dir/a"
expect 8 "missing directory 1 (last opened as $(realpath "$dir/a"))" "$tutti" fsck "$dir/b"
expect 8 "missing directory 2" "$tutti" fsck --repair "$dir/a"
mkdir "$dir/c"
expect 8 "c/tutti.data: No such file" "$tutti" fsck --repair "$dir/a" "$dir/b" "$dir/c"
[ "$(state "$dir/a" "$dir/b")" = "$before" ] || fail "a refused fsck --repair changed the store"
[ ! -e "$dir/c/tutti.data" ] || fail "fsck --repair created a data file"

# ---- a read-only mount ----
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
	mkdir "$dir/ro"
	unshare -m bash -c "
		set -e
		mount --make-rprivate /
		mount -t tmpfs -o size=8g tutti-test '$dir/ro'
		'$tutti' bench --model tiny --context 1024 --requests 2 --repeats 1 --no-raw \
			--no-baseline --dir '$dir/ro' --json >/dev/null
		mount -o remount,ro '$dir/ro'
		'$tutti' inspect '$dir/ro' >/dev/null
		'$tutti' fsck '$dir/ro' | grep -q 'result     clean'
		! '$tutti' fsck --repair '$dir/ro' >/dev/null 2>&1
	" || fail "inspect and fsck on a read-only mount"
fi

# ---- a repair converges (issue 48) ----
# flipbit FILE OFFSET BIT: flip one bit of the byte at OFFSET of FILE.
flipbit() {
	local b
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
	# shellcheck disable=SC2059
	printf "$(printf '\\%03o' $((b ^ (1 << $3))))" |
		dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
# fsck_rc CODE [--repair] DIR: fsck exits with CODE.
fsck_rc() {
	local code=$1 rc=0
	shift
	timeout 60 "$tutti" fsck "$@" >"$dir/out" 2>"$dir/err" || rc=$?
	[ "$rc" -eq "$code" ] || fail "fsck $*: exit $rc, not $code: $(cat "$dir/out" "$dir/err")"
}
# The first data file whose first slot holds a committed header.
committed() {
	local f
	for f in "$1"/tutti.data*; do
		if [ "$(dd if="$f" bs=1 skip=1048576 count=7 status=none)" = TUTTISL ]; then
			echo "$f"
			return
		fi
	done
	fail "no committed slot header in $1"
}
store --dir "$dir/r"
# One bit of the version, the magic, the header size, the key: each is damage that one repair
# erases for good (a flipped version bit was kept as another version's header, on every rerun).
for at in "8 0" "11 7" "2 1" "12 3" "60 5"; do
	read -r off bit <<<"$at"
	hdr=$(committed "$dir/r")
	flipbit "$hdr" $((1048576 + off)) "$bit"
	fsck_rc 4 "$dir/r"
	grep -q "^damaged .* 1 damaged slot headers" "$dir/out" || fail "byte $off: $(cat "$dir/out")"
	fsck_rc 1 --repair "$dir/r"
	fsck_rc 0 "$dir/r"
	fsck_rc 0 "$dir/r"
	store --dir "$dir/r" # the chunk saved again, for the next one
done
# A damaged superblock: every open refuses it alike, saying so and what to do; a repair
# changes nothing; with the bit restored the store is whole.
flipbit "$dir/r/tutti.data" 8 0
before=$(state "$dir/r")
expect 8 "damaged superblock.*remove tutti.data" "$tutti" fsck "$dir/r"
expect 8 "damaged superblock" "$tutti" fsck --repair "$dir/r"
expect 1 "damaged superblock" "$tutti" inspect "$dir/r"
[ "$(state "$dir/r")" = "$before" ] || fail "a refused fsck --repair changed a damaged store"
flipbit "$dir/r/tutti.data" 8 0
fsck_rc 0 "$dir/r"

# ---- what stands where the data file should be ----
mkdir "$dir/fifo"
mkfifo "$dir/fifo/tutti.data"
expect 1 "not a regular file" "$tutti" inspect "$dir/fifo"
expect 8 "not a regular file" "$tutti" fsck "$dir/fifo"
expect 8 "not a regular file" "$tutti" fsck --repair "$dir/fifo"
[ -p "$dir/fifo/tutti.data" ] || fail "the FIFO was replaced"

mkdir "$dir/empty"
: >"$dir/empty/tutti.data"
expect 1 "is empty: no store was ever written here" "$tutti" inspect "$dir/empty"
expect 8 "is empty" "$tutti" fsck "$dir/empty"
[ ! -s "$dir/empty/tutti.data" ] || fail "inspect or fsck wrote to an empty file"

expect 1 "No such file or directory" "$tutti" inspect "$dir/none"

# ---- profile and symbolic links ----
mkdir "$dir/prof"
echo "a file worth keeping" >"$dir/victim"
for name in profile.scratch tutti.profile.tmp; do
	ln -s "$dir/victim" "$dir/prof/$name"
done
"$tutti" profile --dir "$dir/prof" --out "$dir/prof/tutti.profile" --mib 24 \
	--layer-ns-per-token 10 >/dev/null || fail "profile"
[ "$(cat "$dir/victim")" = "a file worth keeping" ] || fail "profile wrote through a link"
grep -qx "tutti-profile 1" "$dir/prof/tutti.profile" || fail "no profile written"
grep -q "scratch\.\|\.tmp\." <<<"$(ls "$dir/prof")" && fail "profile left a scratch file: $(ls "$dir/prof")"

# A measurement that cannot be made leaves the existing profile as it was.
cp "$dir/prof/tutti.profile" "$dir/good"
expect 2 "outside 24" "$tutti" profile --dir "$dir/prof" --out "$dir/prof/tutti.profile" --mib 1
expect 1 "left as it was" "$tutti" profile --dir "$dir/none" --out "$dir/prof/tutti.profile" \
	--mib 24
cmp -s "$dir/good" "$dir/prof/tutti.profile" || fail "a failed profile replaced the good one"

# ---- paths that are not regular files: refused at once, left as they are (issue 48) ----
mkdir "$dir/pk"
mkfifo "$dir/pk/fifo"
# Reading the profile to keep (a FIFO hung the profile here) and writing it.
expect 2 "fifo is a FIFO, not a regular file" "$tutti" profile --dir "$dir/pk" \
	--out "$dir/pk/fifo" --mib 24
expect 2 "fifo is a FIFO, not a regular file" "$tutti" profile --dir "$dir/pk" \
	--out "$dir/pk/fifo" --mib 24 --layer-ns-per-token 10
mkfifo "$dir/pk/tutti.profile"
expect 2 "tutti.profile is a FIFO, not a regular file" "$tutti" profile --dir "$dir/pk" --mib 24
mkdir "$dir/pk/adir"
expect 2 "adir is a directory, not a regular file" "$tutti" profile --dir "$dir/pk" \
	--out "$dir/pk/adir" --mib 24
expect 2 "/dev/null is a character device, not a regular file" "$tutti" profile \
	--dir "$dir/pk" --out /dev/null --mib 24
[ -p "$dir/pk/fifo" ] && [ -p "$dir/pk/tutti.profile" ] && [ -d "$dir/pk/adir" ] &&
	[ -c /dev/null ] || fail "profile replaced what stood at its --out"
echo "a file" >"$dir/afile"
expect 2 "dir $dir/afile is a regular file, not a directory" "$tutti" profile --dir "$dir/afile" \
	--mib 24
expect 2 "dir $dir/pk/fifo is a FIFO, not a directory" "$tutti" profile --dir "$dir/pk/fifo" \
	--mib 24
# A directory or a device where a data file should be, and a FIFO beside a store's files (the
# benchmark's flush opened every tutti.data.N until one was missing, and hung on it).
mkdir -p "$dir/dd/tutti.data"
expect 1 "tutti.data is a directory, not a regular file" "$tutti" inspect "$dir/dd"
expect 8 "tutti.data is a directory, not a regular file" "$tutti" fsck --repair "$dir/dd"
if [ "$(id -u)" = 0 ] && mkdir "$dir/cd" && mknod "$dir/cd/tutti.data" c 1 3 2>/dev/null; then
	expect 8 "tutti.data is a character device, not a regular file" "$tutti" fsck "$dir/cd"
	[ -c "$dir/cd/tutti.data" ] || fail "the device node was replaced"
fi
mkdir "$dir/fb"
mkfifo "$dir/fb/tutti.data.16"
timeout 120 "$tutti" bench --model tiny --context 1024 --requests 2 --repeats 1 --no-raw \
	--no-baseline --dir "$dir/fb" --json >/dev/null || fail "bench beside a FIFO: exit $?"
[ -p "$dir/fb/tutti.data.16" ] || fail "the FIFO beside the store was replaced"

# ---- numbers ----
for bad in " -1" "-1" "+3" "3 " "0x10" "1e3" "" "abc" "18446744073709551616"; do
	expect 2 "is not a whole number\|is outside" "$tutti" bench --staging-mib "$bad"
	expect 2 "is not a whole number\|is outside" "$tutti" profile --mib "$bad"
done
expect 2 "outside 1..1048576" "$tutti" bench --staging-mib 17592186044416
expect 2 "outside 4..1048576" "$tutti" bench --io-kib 0
expect 2 "outside 1..65536" "$tutti" bench --requests 4294967295
expect 2 "outside 1..4096" "$tutti" bench --queue-depth 0
expect 2 "outside 1..64" "$tutti" bench --repeats 65
for bad in inf nan -1 1e400 2e9 " 5"; do
	expect 2 "layer-ns-per-token" "$tutti" profile --layer-ns-per-token "$bad"
done
# In range but more than the machine can hold: refused before anything is allocated.
expect 1 "GiB of host KV memory" "$tutti" bench --requests 65536 --context 1048576 --no-raw \
	--no-baseline --dir "$dir/big"
[ ! -e "$dir/big" ] || fail "a refused benchmark created its store"

echo PASS
