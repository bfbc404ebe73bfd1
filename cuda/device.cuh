/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device code shared by the kernels that move objects between slots and paged KV: the GPU
 * layer's objects kernel (cuda/objs.cu) and engine gpu-uring's layer kernel
 * (src/engine/gpu_uring/kernel.cu). CUDA-only.
 */
#ifndef TT_CUDA_DEVICE_CUH
#define TT_CUDA_DEVICE_CUH

#include <stdint.h>

#include "cuda/gpu.cuh"
#include "cuda/xxh3.cuh"

/* One segment of a layer of paged KV, as the kernels read it (struct tutti_segment). */
struct seg_param {
	unsigned long long base, stride, bytes;
};

/* Loads each thread keeps in flight while copying: a load from host memory takes a microsecond
 * or more and one from HBM most of one, so one at a time leaves a group latency-bound, and few
 * workers then fall behind the storage (more so when a prefill shares the SM). Eight 16-byte
 * loads a thread keep a block's copies at the PCIe link's limit (docs/results.md, row F2). */
#define LOADS_IN_FLIGHT 8

/* Copy \p n 16-byte vectors with every thread of team \p t, LOADS_IN_FLIGHT loads at a time;
 * from a bounce slot (\p from_host) with cache-volatile loads (ld.global.cv), because the slot
 * was rewritten by DMA since this SM may last have cached it. */
template <bool from_host>
__device__ static void
team_copy_vectors(const team &t, int4 *d, const int4 *s, uint64_t n)
{
	for (uint64_t i = t.lane; i < n; i += (uint64_t)t.size * LOADS_IN_FLIGHT) {
		int4 v[LOADS_IN_FLIGHT];

#pragma unroll
		for (unsigned k = 0; k < LOADS_IN_FLIGHT; k++) {
			uint64_t j = i + (uint64_t)k * t.size;

			if (j < n) {
				v[k] = from_host ? __ldcv(&s[j]) : s[j];
			}
		}
#pragma unroll
		for (unsigned k = 0; k < LOADS_IN_FLIGHT; k++) {
			uint64_t j = i + (uint64_t)k * t.size;

			if (j < n) {
				d[j] = v[k];
			}
		}
	}
}

__device__ static void
team_copy(const team &t, uint8_t *dst, const uint8_t *src, uint64_t bytes)
{
	if ((((uintptr_t)dst | (uintptr_t)src | bytes) & 15) == 0) {
		team_copy_vectors<false>(t, reinterpret_cast<int4 *>(dst),
		                         reinterpret_cast<const int4 *>(src), bytes / 16);
		return;
	}
	for (uint64_t i = t.lane; i < bytes; i += t.size) {
		dst[i] = src[i];
	}
}

/* Move an object's blocks between \p obj (canonical layout) and the paged KV. */
__device__ static void
move_segs(const team &t, const seg_param *seg, unsigned nr_segs, const uint32_t *ids, uint32_t n,
          uint8_t *obj, bool gather)
{
	for (uint32_t b = 0; b < n; b++) {
		for (unsigned s = 0; s < nr_segs; s++) {
			uint8_t *kv =
			    reinterpret_cast<uint8_t *>(seg[s].base + ids[b] * seg[s].stride);

			if (gather) {
				team_copy(t, obj, kv, seg[s].bytes);
			} else {
				team_copy(t, kv, obj, seg[s].bytes);
			}
			obj += seg[s].bytes;
		}
	}
}

/* The segments of \p layer of \p kv into \p seg (kv->segs_per_layer of them). */
static void
fill_segs(seg_param *seg, const struct tutti_kv *kv, uint32_t layer)
{
	const struct tutti_segment *segs = tt_kv_layer_segs(kv, layer);

	for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
		seg[s].base = segs[s].base;
		seg[s].stride = segs[s].block_stride;
		seg[s].bytes = segs[s].bytes;
	}
}

#endif /* TT_CUDA_DEVICE_CUH */
