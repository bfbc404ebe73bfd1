# The connector's vLLM-version tests in the vLLM here (needs the payload).
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# The differences between the vLLM releases the connector supports, each through the branch of
# the vLLM installed here (0.26 on the GPU machine; make test runs 0.32's):
# python/tests/vllm/test_versions.py and test_async_save.py. Log: $OUT/vllm-versions.log.
need_vllm || return 0
log "vllm-versions: tests/vllm/test_versions.py tests/vllm/test_async_save.py"
root=$PWD
(
	vllm_env
	python3 -c "import pytest" 2>/dev/null ||
		{ echo "no pytest in this Python: ship it with the vLLM payload"; exit 1; }
	cd python &&
		PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} TUTTI_LIBRARY=$root/build/gpu/libtutti.so \
			timeout 600 python3 -m pytest -q -p no:cacheprovider tests/vllm/test_versions.py \
			tests/vllm/test_async_save.py
) > "$OUT/vllm-versions.log" 2>&1
log "vllm-versions exit $?"
tail -15 "$OUT/vllm-versions.log" >> "$OUT/summary.txt"
