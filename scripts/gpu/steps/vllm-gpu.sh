# Greedy outputs with Tutti identical to vLLM's, inside vLLM (needs the payload).
# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# python/tests/vllm/outputs_matrix.py: a Llama-3-8B-shaped model (dummy weights, re-drawn at a
# trained model's scale so that outputs depend on the prompt), twelve vLLM processes in turn (two
# of them references without the connector, one per model runner) over a store on /dev/shm and
# one on the disk (first run, restart, layerwise on and off, gpu-uring and uring, damaged
# objects under either model runner and without asynchronous scheduling), greedy outputs
# compared token for token with vLLM's; about 5-7 minutes. VLLM_GPU_CASES names a subset, VLLM_GPU_DEADLINE bounds it (default 520 s).
# Results: $OUT/vllm-gpu.tgz; the table also goes into $OUT/summary.txt.
need_vllm || return 0
log "vllm-gpu: output matrix"
root=$PWD
rm -rf build/vllm-gpu-work build/vllm-gpu-disk
(
	vllm_env
	cd python &&
		PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} TUTTI_LIBRARY=$root/build/gpu/libtutti.so \
			timeout --kill-after=30 $((${VLLM_GPU_DEADLINE:-520} + 60)) python3 tests/vllm/outputs_matrix.py \
			--out "$OUT/vllm-gpu" --work "$root/build/vllm-gpu-work" \
			--disk-dir "$root/build/vllm-gpu-disk" --deadline "${VLLM_GPU_DEADLINE:-520}" \
			${VLLM_GPU_CASES:+--cases "$VLLM_GPU_CASES"}
) > "$OUT/vllm-gpu.log" 2>&1
log "vllm-gpu exit $?"
cat "$OUT/vllm-gpu/outputs-matrix.md" >> "$OUT/summary.txt" 2>/dev/null ||
	tail -30 "$OUT/vllm-gpu.log" >> "$OUT/summary.txt"
pack vllm-gpu
rm -rf build/vllm-gpu-work build/vllm-gpu-disk
