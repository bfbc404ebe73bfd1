# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by scripts/gpu-run.sh (from the repository root): what its steps share. A step runs in
# the runner's shell with $step (its name) and $OUT set.

steps_dir=scripts/gpu/steps
# Written by `scripts/vllm-gpu-payload.sh install`: PYTHONPATH and the settings vLLM runs with.
VLLM_ENV=build/vllm-prefix/env.sh

log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

# A step's folder of results and logs as one archive, $OUT/NAME.tgz (a step writes one file per
# vLLM process; one archive comes back whole where a cap on the number of files would not).
pack() { [ -d "$OUT/$1" ] && tar czf "$OUT/$1.tgz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"; }

# work_dir NAME WHERE: the scratch directory of a bench on WHERE: "emulated" is a tmpfs
# directory standing in for NVMe, "disk" the disk that holds the working tree.
work_dir() {
	case $2 in
	emulated) echo "/dev/shm/tutti-$1" ;;
	disk) echo "$PWD/build/tutti-$1" ;;
	*) echo "work_dir: no storage '$2' (emulated or disk)" >&2 && return 1 ;;
	esac
}

# need_vllm [WITHOUT]: true where the vLLM payload is installed; otherwise logs that the step
# cannot run, or, given WITHOUT, what it runs without, and returns false. A dry run has it.
need_vllm() {
	{ [ -f "$VLLM_ENV" ] || [ -n "${dry:-}" ]; } && return 0
	log "$step: no vLLM here ($VLLM_ENV): ${1:-run scripts/vllm-gpu-payload.sh install first}"
	return 1
}

# vllm_env: the payload's environment in the calling shell (a subshell, for a step's own runs).
vllm_env() {
	# shellcheck disable=SC1090
	. "$VLLM_ENV"
}

# bench_turns NAME TURNS VARIANT...: tutti-gpu-store-bench on /dev/shm with BENCH_ARGS and each
# VARIANT's options, the variants in turn TURNS times, each run on a fresh directory; rows to
# $OUT/NAME.jsonl, the text to $OUT/NAME.txt.
bench_turns() {
	local name=$1 turns=$2 dir turn v
	dir=$(work_dir "$1" emulated)
	shift 2
	for turn in $(seq "$turns"); do
		for v in "$@"; do
			rm -rf "$dir" && mkdir -p "$dir"
			log "$name: '$v', turn $turn, in $dir: ${BENCH_ARGS:-defaults}"
			# shellcheck disable=SC2086
			timeout "${BENCH_TIMEOUT:-300}" build/gpu/tutti-gpu-store-bench --dir "$dir" \
				--json "$OUT/$name.jsonl" ${BENCH_ARGS:-} $v 2>> "$OUT/$name.err" |
				tee -a "$OUT/$name.txt" >> "$OUT/summary.txt"
			log "$name exit ${PIPESTATUS[0]}"
		done
	done
	rm -rf "$dir"
}

# known_step NAME: true when NAME is a step, a file of $steps_dir.
known_step() {
	case $1 in '' | *[!a-z0-9-]*) return 1 ;; esac
	[ -f "$steps_dir/$1.sh" ]
}

# The steps and what each does: a step's first line.
step_list() {
	local f
	for f in "$steps_dir"/*.sh; do
		f=${f##*/}
		printf '%-18s %s\n' "${f%.sh}" "$(head -n 1 "$steps_dir/$f" | sed 's/^# *//')"
	done
}

# A dry run: every command that builds, runs a bench or a test, or makes or removes a directory
# prints itself (on the runner's stdout, whatever the step redirects) instead of running, so a
# step's commands can be read, and tested, without a GPU. Each stub is a shell function, which
# the shell looks up before the program, even for a name with a slash.
dry_run() {
	local c
	exec 9>&1
	for c in cmake ctest nvidia-smi nvcc compute-sanitizer timeout python3 tar rm mkdir df \
		build/gpu/tutti-gpu-bench; do
		eval "$c() { dry_print '$c' \"\$@\"; }"
	done
	vllm_env() { dry_print . "$VLLM_ENV"; }
	cd() { dry_print cd "$@"; }
}
# dry_print WORD...: "+ WORD..." on the dry run's stdout, a word quoted where the shell needs it.
dry_print() {
	local w line=+
	for w in "$@"; do
		if [[ $w =~ ^[A-Za-z0-9_./,:=+@%-]+$ ]]; then line+=" $w"; else line+=" $(printf '%q' "$w")"; fi
	done
	echo "$line" >&9
}
