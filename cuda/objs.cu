/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Objects in device memory (src/gpu/gpu.h, tt_gpu_objs), for engine gds and the CPU-driven
 * engines' waves: one kernel launch checks and scatters (load) or gathers and hashes (save) a
 * run of whole objects, one CUDA block per object. And the object checksum alone, for tests.
 */
#include <errno.h>
#include <string.h>

#include "cuda/device.cuh"
#include "cuda/gpu.cuh"
#include "cuda/xxh3.cuh"

extern "C" {
#include "format/format.h"
}

/* Threads of a block: one block checks one object. */
#define GROUP 256

/* The checksum secret into this file's constant memory, once per context, on the context's own
 * stream: a copy to a symbol without a stream goes on the legacy default stream, where a
 * compute's wait for a layer may sit ahead of it, waiting for the very load that needs the
 * secret. */
static int
secret_set(struct tt_gpu *g)
{
	int rc = 0;

	if (!g->csum_secret_set) {
		rc = check(g,
		           cudaMemcpyToSymbolAsync(c_xxh_secret, tt_csum_secret,
		                                   sizeof(c_xxh_secret), 0, cudaMemcpyHostToDevice,
		                                   g->stream),
		           "cudaMemcpyToSymbolAsync");
		if (rc == 0) {
			rc = check(g, cudaStreamSynchronize(g->stream), "checksum secret copy");
		}
		g->csum_secret_set = rc == 0;
	}
	return rc;
}

/* Layers one launch of objs_kernel covers: their segments travel in the kernel's parameters
 * (16 x 8 segments of 24 bytes, within the 4 KiB that every CUDA version accepts). */
#define OBJS_LAYERS 16u

/* A run of objects in layer-major order, per_layer objects a layer: block b owns object
 * skip + b of the run, whose layer is seg[(skip + b) / per_layer]. */
struct objs_param {
	seg_param seg[OBJS_LAYERS][TT_MAX_SEGS_PER_LAYER];
	unsigned nr_segs;
	uint64_t layer_block_bytes;
	uint64_t slot_bytes;
	uint32_t per_layer, skip;
	uint32_t write;
};

/* Block b owns object b, in slot b of \p mem: load checks and scatters it, save gathers and
 * hashes it (zeroing the slot's padding). An object's checksum is one XXH3 over the whole
 * object, whose stripes depend on each other every kilobyte, so one block checks one object:
 * the blocks of several layers run side by side so that a small load (one chunk:
 * one object a layer) is not a chain of one-block launches. */
__global__ static void
__launch_bounds__(GROUP) objs_kernel(const __grid_constant__ objs_param param,
                                     struct tt_gpu_obj *objs, const uint32_t *ids, uint8_t *mem)
{
	__shared__ xxh_shared block_mem;
	__shared__ struct tt_gpu_obj
	    obj; /* the descriptor lives in mapped host memory: read once */
	uint8_t *slot = mem + (uint64_t)blockIdx.x * param.slot_bytes;
	const seg_param *seg = param.seg[(param.skip + blockIdx.x) / param.per_layer];
	const team t = {threadIdx.x, GROUP, 0};

	if (threadIdx.x == 0) {
		obj = objs[blockIdx.x];
	}
	__syncthreads();
	if (obj.status != 0) {
		return;
	}
	if (param.write) {
		uint64_t moved = (uint64_t)obj.nr_moved * param.layer_block_bytes, h;

		move_segs(t, seg, param.nr_segs, ids + obj.ids_off, obj.nr_moved, slot, true);
		__syncthreads();
		h = xxh3_64_block(slot, moved, &block_mem, t);
		for (uint64_t b = moved + threadIdx.x; b < param.slot_bytes; b += GROUP) {
			slot[b] = 0; /* padding is zero, never stale */
		}
		if (threadIdx.x == 0) {
			objs[blockIdx.x].csum = h;
		}
		return;
	}
	if (xxh3_64_block(slot, (uint64_t)obj.stored * param.layer_block_bytes, &block_mem, t) !=
	    obj.csum) {
		if (threadIdx.x == 0) {
			objs[blockIdx.x].status = -EBADMSG;
		}
		return; /* never scattered */
	}
	move_segs(t, seg, param.nr_segs, ids + obj.ids_off, obj.nr_moved,
	          slot + (uint64_t)obj.skip * param.layer_block_bytes, false);
}

extern "C" int
tt_gpu_objs(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer, uint32_t per_layer,
            uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr, const uint32_t *ids, uint8_t *mem,
            uint64_t slot_bytes, bool write)
{
	objs_param param;
	int rc;

	if (g == NULL || kv == NULL || kv->mem != TUTTI_MEM_CUDA || kv->device != g->device ||
	    !tt_kv_run_fits(kv, layer, per_layer, skip, nr) || slot_bytes % 16 != 0 ||
	    kv->geo.layer_block_bytes <= TT_XXH3_MIDSIZE_MAX ||
	    (nr > 0 && (objs == NULL || mem == NULL || ids == NULL))) {
		return -EINVAL;
	}
	if (nr == 0) {
		return 0;
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc == 0) {
		rc = secret_set(g);
	}
	memset(&param, 0, sizeof(param));
	param.nr_segs = kv->segs_per_layer;
	param.layer_block_bytes = kv->geo.layer_block_bytes;
	param.slot_bytes = slot_bytes;
	param.per_layer = per_layer;
	param.write = write;
	/* Launches of up to OBJS_LAYERS layers each; \p layer and \p skip follow the run. */
	for (uint32_t done = 0; rc == 0 && done < nr;) {
		uint32_t room = OBJS_LAYERS * per_layer - skip, n = TT_MIN(room, nr - done);
		uint32_t layers = (skip + n + per_layer - 1) / per_layer;

		for (uint32_t l = 0; l < layers; l++) {
			fill_segs(param.seg[l], kv, layer + l);
		}
		param.skip = skip;
		objs_kernel<<<n, GROUP, 0, g->stream>>>(param, objs + done, ids,
		                                        mem + (uint64_t)done * slot_bytes);
		g->launches++;
		rc = check(g, cudaGetLastError(), "objects kernel launch");
		done += n;
		layer += (skip + n) / per_layer;
		skip = (skip + n) % per_layer;
	}
	return rc;
}

/* ---- the checksum alone, for tests ---- */

__global__ static void
__launch_bounds__(GROUP) csum_kernel(const uint8_t *p, uint64_t len, uint64_t *out)
{
	__shared__ xxh_shared block_mem;
	const team t = {threadIdx.x, GROUP, 0};
	uint64_t h = xxh3_64_block(p, len, &block_mem, t);

	if (threadIdx.x == 0) {
		*out = h;
	}
}

extern "C" int
tt_gpu_csum(struct tt_gpu *g, const void *p, uint64_t len, uint64_t *out)
{
	uint64_t *d_out = NULL;
	int rc;

	if (g == NULL || p == NULL || out == NULL || len <= TT_XXH3_MIDSIZE_MAX) {
		return -EINVAL;
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc == 0) {
		rc = secret_set(g);
	}
	if (rc == 0) {
		rc = check(g, cudaMalloc(&d_out, sizeof(*d_out)), "cudaMalloc");
	}
	if (rc == 0) {
		csum_kernel<<<1, GROUP, 0, g->stream>>>(static_cast<const uint8_t *>(p), len,
		                                        d_out);
		rc = check(g, cudaGetLastError(), "csum kernel");
	}
	if (rc == 0) {
		rc = check(
		    g, cudaMemcpyAsync(out, d_out, sizeof(*out), cudaMemcpyDeviceToHost, g->stream),
		    "cudaMemcpyAsync");
	}
	if (rc == 0) {
		rc = check(g, cudaStreamSynchronize(g->stream), "csum kernel");
	}
	cudaFree(d_out);
	return rc;
}

int
tt_cuda_prepare_objs(struct tt_gpu *g)
{
	const void *const funcs[] = {reinterpret_cast<const void *>(objs_kernel)};
	int rc = tt_cuda_load_funcs(g, funcs, 1);

	return rc < 0 ? rc : secret_set(g);
}
