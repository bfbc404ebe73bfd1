#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Ship vLLM for the GPU machine, with LMCache beside it, to a machine without network.
#
# The GPU machine's Python 3.12 has torch 2.11.0 (CUDA 13.0), torchvision 0.26.0, torchaudio 2.11.0,
# transformers and triton. Its commands run over a copy of the working tree of at most 64 MiB, so
# the payload travels in parts over consecutive calls; ignored files left by an earlier call stay
# while the machine is held.
#
#   scripts/vllm-gpu-payload.sh prepare          here, with PyPI: download, prune, pack into
#                                                 .vllm-payload/ (manifest.json, part-NN.txz) and
#                                                 print which parts go in which call
#   scripts/vllm-gpu-payload.sh plan             print that plan again from the manifest
#   scripts/vllm-gpu-payload.sh install [PREFIX] there: check and unpack the parts present into
#                                                 PREFIX (default build/vllm-prefix), write
#                                                 PREFIX/env.sh, and once every part is in, check
#                                                 that vllm and lmcache import
#
# Only package names and versions live here; scripts/vllm_payload.py packs and unpacks.
#
# Versions:
# - vLLM 0.26.0 is the release built for torch 2.11.0: it pins torch==2.11.0, torchvision==0.26.0,
#   torchaudio==2.11.0, and its extensions link libcudart.so.13.
# - LMCache 0.5.3 is the newest release whose compiled ops were built against torch 2.11.0 (its
#   build pins torch==2.11.0; 0.5.4 and later build against torch 2.13.0, and their cuda_ops
#   import c10::NotImplementedError(c10::SourceLocation, std::string), which torch 2.11.0 does not
#   export, so they would fail to load and LMCache would fall back to its slow torch ops).
#   It links libcudart.so.13, libc10 and libtorch*, all from the torch there.
#
# Environment: PAYLOAD_PART_MIB caps a part (default: 62 MiB less the working tree git would
# carry, less 1 MiB for the manifest that travels with every part); PIP_FIND_LINKS may name a
# folder that already holds some of the wheels; PAYLOAD_IMAGE_HAS names (space-separated)
# distributions the target image is known to hold: of the ones installed only where missing,
# these are not packed at all (llvmlite alone is 37 MiB packed), which saves a call.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1

VLLM_VERSION=0.26.0
LMCACHE_VERSION=0.5.3

# vLLM's requirements that the GPU machine lacks (checked there: with these, vLLM starts and
# serves). The rest of its requirements are in that image, or are not imported on the paths we
# use (flashinfer: VLLM_USE_FLASHINFER_SAMPLER=0 in env.sh). openai stays on 2.x (3.x needs
# httpx2); llguidance 1.7 has manylinux_2_31 wheels only.
VLLM_REQUIREMENTS=(
	pydantic==2.14.4 pydantic-core==2.50.5 fastapi==0.136.3 starlette==1.10.0
	openai==2.54.0 openai-harmony==0.0.8 pyzmq==27.3.0 msgspec==0.23.0 cbor2==6.3.0
	cachetools==8.0.2 pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 blake3==1.0.11
	setproctitle==1.3.8 depyf==0.20.0 compressed-tensors==0.17.0 python-json-logger==4.2.0
	llguidance==1.7.6 xgrammar==0.2.7 apache-tvm-ffi==0.1.10
)

# What vLLM imports on the paths we use (vllm, its KV connectors, its OpenAI server) beyond the
# list above that a torch + transformers image lacks; the GPU machine had them when vLLM ran
# there, so these are unpacked only where its Python lacks them (see LMCACHE_REQUIREMENTS).
# The second line on: the rest of the requirement closure of vLLM and the packages above that
# a torch + transformers image may lack and that vLLM imports while it starts, serves and builds
# structured outputs (pydantic's and openai's own requirements among them); found by walking the
# wheels' Requires-Dist against such an image's package list. Left out: what only optional
# features import (mcp, tilelang, quack-kernels, torchcodec, fastsafetensors, opentelemetry-*).
VLLM_IMAGE_REQUIREMENTS=(
	sniffio==1.3.1 distro==1.9.0 cloudpickle==3.1.3 uvloop==0.23.0 uvicorn==0.54.0
	watchfiles==1.3.0 model-hosting-container-standards==0.1.16 jmespath==1.1.0
	annotated-types==0.8.0 typing-inspection==0.4.5 jiter==0.19.0 docstring-parser==0.18.0
	anthropic==2.14.0 ijson==3.6.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
	referencing==0.37.0 rpds-py==2026.9.1 lark==1.2.2 lm-format-enforcer==0.11.3
	interegular==0.3.3 outlines-core==0.2.14 loguru==0.7.3 astor==0.8.1 dill==0.4.1
	prometheus-fastapi-instrumentator==8.1.0 python-multipart==0.0.34 sse-starlette==3.7.0
	httptools==0.9.0 mistral-common==1.13.1 pydantic-extra-types==2.11.1 pycountry==24.6.1
	supervisor==4.3.0 nvtx==0.2.17
)

# What LMCache's engine, storage backends and vLLM adapter import that a torch + transformers
# image lacks (found by importing them on such an image). These are unpacked only where the
# GPU machine's Python lacks the distribution: its own copy wins, as pip would keep it.
# LMCache also declares requirements for back ends we do not use, not shipped: cupy-cuda13x,
# cufile-python (GDS), redis, awscrt (S3), google-cloud-bigtable, nixl, opentelemetry's SDK and
# exporters, grpcio, uvicorn, pytest, setuptools-scm; and numpy<=2.2.6, which is not applied:
# the image's numpy stays (vLLM's numba needs a newer one). Its multiprocess server imports
# cryptography (its L2 serialisers' encryption) and opentelemetry's metrics API at start-up:
# those are shipped.
LMCACHE_REQUIREMENTS=(
	numba==0.68.1 llvmlite==0.50.0 prometheus-client==0.24.1 requests==2.34.2 urllib3==2.8.0
	charset-normalizer==3.5.3 py-cpuinfo==9.0.0 sortedcontainers==2.4.0 psutil==7.2.2
	aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0
	propcache==0.5.4 yarl==1.25.1 multidict==7.2.1 attrs==26.1.0 aiofile==3.12.3
	caio==0.12.10 aiofiles==25.1.0 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
	opentelemetry-api==1.40.0 importlib-metadata==8.7.1 zipp==4.1.2
)

# The GPU machine: CPython 3.12 on Ubuntu 24.04 (glibc 2.39). pip does not widen a given
# manylinux tag to the older glibc versions it covers, so every one is named.
PY_VERSION=3.12
PLATFORMS=(manylinux2014_x86_64)
for glibc in $(seq 17 39); do PLATFORMS+=("manylinux_2_${glibc}_x86_64"); done

PAYLOAD_DIR=.vllm-payload
WORK=build/vllm-payload
PYTHON=${PYTHON:-python3}

usage() {
	sed -n '/^#   scripts/,/^# Only/p' "$0" | sed 's/^# \{0,1\}//' | grep -v '^Only' >&2
	exit 2
}

# The bytes git would carry to the GPU machine: tracked files and untracked files it does not
# ignore.
tree_bytes() {
	git ls-files -z --cached --others --exclude-standard |
		xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

prepare() {
	local wheels=$WORK/wheels stage=$WORK/stage budget
	mkdir -p "$wheels" "$PAYLOAD_DIR"
	local pip=("$PYTHON" -m pip)
	local target=(--only-binary=:all: --python-version "$PY_VERSION" --implementation cp)
	local p
	for p in "${PLATFORMS[@]}"; do target+=(--platform "$p"); done

	echo "== downloading wheels for CPython $PY_VERSION, manylinux x86_64 up to glibc 2.39"
	"${pip[@]}" download --no-deps "${target[@]}" -d "$wheels" "vllm==$VLLM_VERSION" \
		"lmcache==$LMCACHE_VERSION" "${VLLM_REQUIREMENTS[@]}" "${VLLM_IMAGE_REQUIREMENTS[@]}" \
		"${LMCACHE_REQUIREMENTS[@]}"

	# One folder per distribution, each installed alone from its wheel: the unit of what
	# install may skip.
	echo "== installing each wheel into $stage/<name>"
	rm -rf "$stage"
	mkdir -p "$stage"
	local spec name whl policy
	: > "$WORK/packages.tsv"
	for spec in "vllm==$VLLM_VERSION" "lmcache==$LMCACHE_VERSION" "${VLLM_REQUIREMENTS[@]}" \
		"${VLLM_IMAGE_REQUIREMENTS[@]}" "${LMCACHE_REQUIREMENTS[@]}"; do
		name=${spec%%==*}
		policy=always
		for s in "${VLLM_IMAGE_REQUIREMENTS[@]}" "${LMCACHE_REQUIREMENTS[@]}"; do
			[ "$s" = "$spec" ] && policy=if-missing
		done
		if [ $policy = if-missing ] && [[ " ${PAYLOAD_IMAGE_HAS:-} " == *" $name "* ]]; then
			echo "   $name: the image has it, not packed"
			continue
		fi
		whl=$("$PYTHON" scripts/vllm_payload.py find-wheel "$wheels" "$spec")
		"${pip[@]}" install --no-deps --no-compile --quiet "${target[@]}" \
			--target "$stage/$name" "$whl"
		printf '%s\t%s\t%s\t%s\n' "$name" "${spec#*==}" "$policy" "$(basename "$whl")" \
			>> "$WORK/packages.tsv"
	done

	if [ -n "${PAYLOAD_PART_MIB:-}" ]; then
		budget=$((PAYLOAD_PART_MIB << 20))
	else
		budget=$(((62 << 20) - $(tree_bytes) - (1 << 20)))
	fi
	if [ "$budget" -lt $((8 << 20)) ]; then
		echo "vllm-gpu-payload: parts of $budget bytes are too small: is the working tree too big?" >&2
		exit 1
	fi
	echo "== pruning and packing (parts of at most $((budget >> 20)) MiB)"
	"$PYTHON" scripts/vllm_payload.py pack --stage "$stage" --packages "$WORK/packages.tsv" \
		--wheels "$wheels" --units "$WORK/units" --out "$PAYLOAD_DIR" --part-bytes "$budget" \
		--call-bytes $(((62 << 20) - $(tree_bytes) - (1 << 20)))
}

case ${1:-} in
prepare) prepare ;;
plan) "$PYTHON" scripts/vllm_payload.py plan --out "$PAYLOAD_DIR" ;;
install) "$PYTHON" scripts/vllm_payload.py install --out "$PAYLOAD_DIR" \
	--prefix "${2:-build/vllm-prefix}" ;;
*) usage ;;
esac
