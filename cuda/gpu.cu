/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA implementation of src/gpu/gpu.h: the gather and scatter kernels that move one layer of a
 * whole batch between paged KV in device memory and packed objects, and the memory helpers.
 *
 * Kernel layout. A launch moves B paged blocks of one layer; block i goes to (or comes from)
 * object address obj[i] and is paged block ids[i]. CUDA block b copies paged block b (grid-stride
 * over B): for each of the layer's segments, seg.bytes bytes between seg.base + id * seg.stride
 * and the next bytes of the object. Threads copy 16-byte vectors when every address and length
 * is 16-byte aligned (the common case: KV rows are at least 16 bytes), bytes otherwise, and keep
 * several vectors in flight each so that reads from mapped host memory across PCIe, which take
 * microseconds, overlap. Launch configuration: 256 threads, up to 16 CUDA blocks per SM.
 *
 * Descriptors (obj[], ids[]) are written by the host into one of two pinned halves, copied to
 * the device on the stream, and read by the kernel from device memory: one copy and one launch
 * per call, whatever the batch size.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/gpu.cuh"

#define THREADS 256
#define UNROLL 4

struct seg_param {
	unsigned long long base, stride, bytes;
};

struct layer_param {
	seg_param seg[TT_MAX_SEGS_PER_LAYER];
	unsigned nr_segs;
};

int
cuda_errno(cudaError_t err)
{
	switch (err) {
	case cudaSuccess:
		return 0;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
		return -ENODEV;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* Convert once at the boundary, logging the CUDA error's name where it happened. */
int
check(const struct tt_gpu *g, cudaError_t err, const char *what)
{
	if (err != cudaSuccess && g != NULL) {
		tt_log_err(g->log, "%s: %s", what, cudaGetErrorString(err));
	}
	return cuda_errno(err);
}

/* ---- kernels ---- */

template <bool GATHER>
__device__ static void
copy16(uint8_t *kv, uint8_t *obj, unsigned long long bytes)
{
	int4 *dst = reinterpret_cast<int4 *>(GATHER ? obj : kv);
	const int4 *src = reinterpret_cast<const int4 *>(GATHER ? kv : obj);
	unsigned long long n = bytes / 16;

	for (unsigned long long i = threadIdx.x; i < n; i += (unsigned long long)THREADS * UNROLL) {
		int4 v[UNROLL];

		/* All loads first: several reads in flight per thread. */
#pragma unroll
		for (int k = 0; k < UNROLL; k++) {
			unsigned long long j = i + (unsigned long long)k * THREADS;

			if (j < n) {
				v[k] = src[j];
			}
		}
#pragma unroll
		for (int k = 0; k < UNROLL; k++) {
			unsigned long long j = i + (unsigned long long)k * THREADS;

			if (j < n) {
				dst[j] = v[k];
			}
		}
	}
}

template <bool GATHER>
__device__ static void
copy1(uint8_t *kv, uint8_t *obj, unsigned long long bytes)
{
	uint8_t *dst = GATHER ? obj : kv;
	const uint8_t *src = GATHER ? kv : obj;

	for (unsigned long long i = threadIdx.x; i < bytes; i += THREADS) {
		dst[i] = src[i];
	}
}

template <bool GATHER, bool VEC16>
__global__ static void
__launch_bounds__(THREADS)
    move_kernel(layer_param p, const unsigned long long *obj, const uint32_t *ids, uint32_t nr)
{
	for (uint32_t b = blockIdx.x; b < nr; b += gridDim.x) {
		uint8_t *o = reinterpret_cast<uint8_t *>(obj[b]);
		unsigned long long id = ids[b];

		for (unsigned s = 0; s < p.nr_segs; s++) {
			uint8_t *kv =
			    reinterpret_cast<uint8_t *>(p.seg[s].base + id * p.seg[s].stride);

			if (VEC16) {
				copy16<GATHER>(kv, o, p.seg[s].bytes);
			} else {
				copy1<GATHER>(kv, o, p.seg[s].bytes);
			}
			o += p.seg[s].bytes;
		}
	}
}

int
tt_cuda_load_funcs(const struct tt_gpu *g, const void *const *funcs, unsigned n)
{
	cudaFuncAttributes a;
	int rc = 0;

	for (unsigned i = 0; rc == 0 && i < n; i++) {
		rc = check(g, cudaFuncGetAttributes(&a, funcs[i]), "cudaFuncGetAttributes");
	}
	return rc;
}

int
tt_cuda_load_move_kernels(const struct tt_gpu *g)
{
	const void *const funcs[] = {
	    reinterpret_cast<const void *>(move_kernel<true, true>),
	    reinterpret_cast<const void *>(move_kernel<true, false>),
	    reinterpret_cast<const void *>(move_kernel<false, true>),
	    reinterpret_cast<const void *>(move_kernel<false, false>),
	};

	return tt_cuda_load_funcs(g, funcs, sizeof(funcs) / sizeof(funcs[0]));
}

extern "C" int
tt_gpu_prepare(struct tt_gpu *g)
{
	int rc;

	if (g == NULL) {
		return -EINVAL;
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc == 0) {
		rc = tt_cuda_load_move_kernels(g);
	}
	if (rc == 0) {
		rc = tt_cuda_load_signal_kernels(g);
	}
	return rc < 0 ? rc : tt_cuda_prepare_objs(g);
}

/* ---- context ---- */

extern "C" int
tt_gpu_device_count(void)
{
	int n = 0;
	cudaError_t err = cudaGetDeviceCount(&n);

	return err == cudaSuccess ? n : cuda_errno(err);
}

extern "C" void
tt_gpu_close(struct tt_gpu *g)
{
	if (g == NULL) {
		return;
	}
	cudaSetDevice(g->device);
	if (g->stream != NULL) {
		cudaStreamSynchronize(g->stream);
		cudaStreamDestroy(g->stream);
	}
	if (g->done != NULL) {
		cudaEventDestroy(g->done);
	}
	for (int i = 0; i < 2; i++) {
		if (g->mark[i] != NULL) {
			cudaEventDestroy(g->mark[i]);
		}
	}
	if (g->copy_stream != NULL) {
		cudaStreamSynchronize(g->copy_stream);
		cudaStreamDestroy(g->copy_stream);
	}
	for (unsigned i = 0; i < TT_GPU_BUFS; i++) {
		if (g->buf_copied[i] != NULL) {
			cudaEventDestroy(g->buf_copied[i]);
		}
		if (g->buf_used[i] != NULL) {
			cudaEventDestroy(g->buf_used[i]);
		}
	}
	if (g->copy_idle != NULL) {
		cudaEventDestroy(g->copy_idle);
	}
	for (int h = 0; h < 2; h++) {
		cudaFreeHost(g->h_obj[h]);
		cudaFreeHost(g->h_ids[h]);
		if (g->copied[h] != NULL) {
			cudaEventDestroy(g->copied[h]);
		}
	}
	cudaFree(g->d_obj);
	cudaFree(g->d_ids);
	free(g);
}

extern "C" int
tt_gpu_open(const struct tt_gpu_conf *conf, struct tt_gpu **out)
{
	struct tt_gpu *g;
	int rc;

	if (conf == NULL || out == NULL || conf->max_blocks == 0) {
		return -EINVAL;
	}
	*out = NULL;
	g = static_cast<struct tt_gpu *>(calloc(1, sizeof(*g)));
	if (g == NULL) {
		return -ENOMEM;
	}
	g->device = conf->device;
	g->max_blocks = conf->max_blocks;
	g->log = conf->log;
	rc = check(g, cudaSetDevice(conf->device), "cudaSetDevice");
	if (rc == 0) {
		rc = check(g,
		           cudaDeviceGetAttribute(&g->nr_sms, cudaDevAttrMultiProcessorCount,
		                                  conf->device),
		           "cudaDeviceGetAttribute");
	}
	if (rc == 0) {
		int least = 0, greatest = 0;

		rc = check(g, cudaDeviceGetStreamPriorityRange(&least, &greatest),
		           "cudaDeviceGetStreamPriorityRange");
		if (rc == 0) {
			rc = check(
			    g,
			    cudaStreamCreateWithPriority(&g->stream, cudaStreamNonBlocking,
			                                 conf->high_priority ? greatest : least),
			    "cudaStreamCreate");
		}
	}
	for (int i = 0; rc == 0 && i < 3; i++) {
		rc = check(g,
		           cudaEventCreateWithFlags(i < 2 ? &g->mark[i] : &g->done,
		                                    cudaEventBlockingSync | cudaEventDisableTiming),
		           "cudaEventCreate");
	}
	for (int h = 0; rc == 0 && h < 2; h++) {
		rc = check(g,
		           cudaHostAlloc(&g->h_obj[h], conf->max_blocks * sizeof(*g->h_obj[h]), 0),
		           "cudaHostAlloc");
		if (rc == 0) {
			rc = check(
			    g,
			    cudaHostAlloc(&g->h_ids[h], conf->max_blocks * sizeof(*g->h_ids[h]), 0),
			    "cudaHostAlloc");
		}
		if (rc == 0) {
			rc = check(g,
			           cudaEventCreateWithFlags(&g->copied[h], cudaEventDisableTiming),
			           "cudaEventCreate");
		}
	}
	if (rc == 0) {
		rc = check(g, cudaMalloc(&g->d_obj, conf->max_blocks * sizeof(*g->d_obj)),
		           "cudaMalloc");
	}
	if (rc == 0) {
		rc = check(g, cudaMalloc(&g->d_ids, conf->max_blocks * sizeof(*g->d_ids)),
		           "cudaMalloc");
	}
	if (rc < 0) {
		tt_gpu_close(g);
		return rc;
	}
	*out = g;
	return 0;
}

extern "C" int
tt_gpu_device(const struct tt_gpu *g)
{
	return g->device;
}

extern "C" int
tt_gpu_sms(const struct tt_gpu *g)
{
	return g->nr_sms;
}

extern "C" uint64_t
tt_gpu_launches(const struct tt_gpu *g)
{
	return g->launches;
}

extern "C" int
tt_gpu_sync(struct tt_gpu *g)
{
	int rc = 0;

	if (g == NULL) {
		return -EINVAL;
	}
	/* The copy stream's work first joins the kernel stream. */
	if (g->copy_stream != NULL) {
		rc = check(g, cudaEventRecord(g->copy_idle, g->copy_stream), "cudaEventRecord");
		if (rc == 0) {
			rc = check(g, cudaStreamWaitEvent(g->stream, g->copy_idle, 0),
			           "cudaStreamWaitEvent");
		}
	}
	/* A blocking-sync event: the caller sleeps instead of spinning a core for the whole
	 * transfer (cudaStreamSynchronize spins under the default scheduling). */
	if (rc == 0) {
		rc = check(g, cudaEventRecord(g->done, g->stream), "cudaEventRecord");
	}
	return rc < 0 ? rc : check(g, cudaEventSynchronize(g->done), "kernel");
}

/* ---- waves: copies beside the kernels ---- */

/* The copy stream (at the kernel stream's priority) and the buffers' events, on first use. */
static int
bufs_ready(struct tt_gpu *g)
{
	int prio = 0, rc;

	if (g->copy_stream != NULL) {
		return check(g, cudaSetDevice(g->device), "cudaSetDevice");
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc == 0) {
		rc = check(g, cudaStreamGetPriority(g->stream, &prio), "cudaStreamGetPriority");
	}
	for (unsigned i = 0; rc == 0 && i < TT_GPU_BUFS; i++) {
		rc = check(g,
		           cudaEventCreateWithFlags(&g->buf_copied[i],
		                                    cudaEventBlockingSync | cudaEventDisableTiming),
		           "cudaEventCreate");
		if (rc == 0) {
			rc = check(
			    g, cudaEventCreateWithFlags(&g->buf_used[i], cudaEventDisableTiming),
			    "cudaEventCreate");
		}
	}
	if (rc == 0) {
		rc = check(g, cudaEventCreateWithFlags(&g->copy_idle, cudaEventDisableTiming),
		           "cudaEventCreate");
	}
	/* The stream last: its existence says the rest is there. */
	if (rc == 0) {
		rc = check(
		    g, cudaStreamCreateWithPriority(&g->copy_stream, cudaStreamNonBlocking, prio),
		    "cudaStreamCreate");
	}
	return rc;
}

extern "C" int
tt_gpu_buf_copy(struct tt_gpu *g, unsigned buf, void *dst, const void *src, size_t bytes)
{
	int rc;

	if (g == NULL || buf >= TT_GPU_BUFS || dst == NULL || src == NULL) {
		return -EINVAL;
	}
	rc = bufs_ready(g);
	/* An event never recorded is passed at once: the first copy into a buffer waits for
	 * nothing. */
	if (rc == 0) {
		rc = check(g, cudaStreamWaitEvent(g->copy_stream, g->buf_used[buf], 0),
		           "cudaStreamWaitEvent");
	}
	if (rc == 0) {
		rc = check(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g->copy_stream),
		           "cudaMemcpyAsync");
	}
	if (rc == 0) {
		rc = check(g, cudaEventRecord(g->buf_copied[buf], g->copy_stream),
		           "cudaEventRecord");
	}
	return rc;
}

extern "C" int
tt_gpu_buf_objs(struct tt_gpu *g, unsigned buf, const struct tutti_kv *kv, uint32_t layer,
                uint32_t per_layer, uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr,
                const uint32_t *ids, uint8_t *mem, uint64_t slot_bytes, bool write)
{
	int rc;

	if (g == NULL || buf >= TT_GPU_BUFS) {
		return -EINVAL;
	}
	rc = bufs_ready(g);
	if (rc == 0) {
		rc = check(g, cudaStreamWaitEvent(g->stream, g->buf_copied[buf], 0),
		           "cudaStreamWaitEvent");
	}
	if (rc == 0) {
		rc = tt_gpu_objs(g, kv, layer, per_layer, skip, objs, nr, ids, mem, slot_bytes,
		                 write);
	}
	if (rc == 0) {
		rc = check(g, cudaEventRecord(g->buf_used[buf], g->stream), "cudaEventRecord");
	}
	return rc;
}

extern "C" int
tt_gpu_buf_alloc(struct tt_gpu *g, size_t bytes, void **out)
{
	int rc;

	*out = NULL;
	if (g == NULL) {
		return -EINVAL;
	}
	rc = bufs_ready(g);
	if (rc == 0) {
		rc = check(g, cudaMallocAsync(out, bytes, g->stream), "cudaMallocAsync");
	}
	/* The copy stream uses it only once the allocation is done in the kernel stream's order. */
	if (rc == 0) {
		rc = check(g, cudaEventRecord(g->copy_idle, g->stream), "cudaEventRecord");
	}
	if (rc == 0) {
		rc = check(g, cudaStreamWaitEvent(g->copy_stream, g->copy_idle, 0),
		           "cudaStreamWaitEvent");
	}
	if (rc < 0 && *out != NULL) {
		cudaFreeAsync(*out, g->stream);
		*out = NULL;
	}
	return rc;
}

extern "C" void
tt_gpu_buf_free(struct tt_gpu *g, void *p)
{
	if (g == NULL || p == NULL) {
		return;
	}
	cudaSetDevice(g->device);
	/* After everything either stream queued on it. */
	if (g->copy_stream != NULL &&
	    cudaEventRecord(g->copy_idle, g->copy_stream) == cudaSuccess) {
		cudaStreamWaitEvent(g->stream, g->copy_idle, 0);
	}
	cudaFreeAsync(p, g->stream);
}

extern "C" int
tt_gpu_buf_wait(struct tt_gpu *g, unsigned buf)
{
	if (g == NULL || buf >= TT_GPU_BUFS) {
		return -EINVAL;
	}
	if (g->copy_stream == NULL) {
		return 0; /* nothing was ever copied */
	}
	return check(g, cudaEventSynchronize(g->buf_copied[buf]), "copy");
}

extern "C" int
tt_gpu_mark(struct tt_gpu *g, unsigned i)
{
	if (g == NULL || i > 1) {
		return -EINVAL;
	}
	return check(g, cudaEventRecord(g->mark[i], g->stream), "cudaEventRecord");
}

extern "C" int
tt_gpu_wait_mark(struct tt_gpu *g, unsigned i)
{
	if (g == NULL || i > 1) {
		return -EINVAL;
	}
	return check(g, cudaEventSynchronize(g->mark[i]), "kernel");
}

/* ---- launches ---- */

static bool
aligned16(unsigned long long v)
{
	return v % 16 == 0;
}

/* Describe layer \p layer of \p kv for the kernel; false when a 16-byte vector copy is not
 * possible for its segments. */
static bool
layer_params(const struct tutti_kv *kv, uint32_t layer, layer_param *p)
{
	const struct tutti_segment *segs = tt_kv_layer_segs(kv, layer);
	bool vec = true;

	memset(p, 0, sizeof(*p));
	p->nr_segs = kv->segs_per_layer;
	for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
		p->seg[s].base = segs[s].base;
		p->seg[s].stride = segs[s].block_stride;
		p->seg[s].bytes = segs[s].bytes;
		vec = vec && aligned16(segs[s].base) && aligned16(segs[s].bytes) &&
		      (kv->nr_blocks == 1 || aligned16(segs[s].block_stride));
	}
	return vec;
}

/* Launch one kernel over blocks [0, nr) of the current descriptor half. */
static int
launch(struct tt_gpu *g, bool gather, bool vec, const layer_param *p, uint32_t nr)
{
	int h = g->half;
	unsigned grid = (unsigned)(nr < (uint32_t)g->nr_sms * 16 ? nr : (uint32_t)g->nr_sms * 16);
	int rc;

	rc = check(g,
	           cudaMemcpyAsync(g->d_obj, g->h_obj[h], nr * sizeof(*g->d_obj),
	                           cudaMemcpyHostToDevice, g->stream),
	           "cudaMemcpyAsync");
	if (rc == 0) {
		rc = check(g,
		           cudaMemcpyAsync(g->d_ids, g->h_ids[h], nr * sizeof(*g->d_ids),
		                           cudaMemcpyHostToDevice, g->stream),
		           "cudaMemcpyAsync");
	}
	if (rc == 0) {
		rc = check(g, cudaEventRecord(g->copied[h], g->stream), "cudaEventRecord");
	}
	if (rc < 0) {
		return rc;
	}
	if (gather && vec) {
		move_kernel<true, true>
		    <<<grid, THREADS, 0, g->stream>>>(*p, g->d_obj, g->d_ids, nr);
	} else if (gather) {
		move_kernel<true, false>
		    <<<grid, THREADS, 0, g->stream>>>(*p, g->d_obj, g->d_ids, nr);
	} else if (vec) {
		move_kernel<false, true>
		    <<<grid, THREADS, 0, g->stream>>>(*p, g->d_obj, g->d_ids, nr);
	} else {
		move_kernel<false, false>
		    <<<grid, THREADS, 0, g->stream>>>(*p, g->d_obj, g->d_ids, nr);
	}
	g->launches++;
	g->half = 1 - h;
	return check(g, cudaGetLastError(), "kernel launch");
}

static int
move(struct tt_gpu *g, bool gather, const struct tutti_kv *kv, uint32_t layer,
     const struct tt_move *moves, uint32_t nr_moves)
{
	layer_param p;
	bool vec;
	uint32_t n = 0;
	int rc;

	if (g == NULL || kv == NULL || (moves == NULL && nr_moves > 0) ||
	    kv->mem != TUTTI_MEM_CUDA || kv->device != g->device || layer >= kv->geo.g.nr_layers) {
		return -EINVAL;
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc < 0) {
		return rc;
	}
	vec = layer_params(kv, layer, &p) && aligned16(kv->geo.layer_block_bytes);
	for (uint32_t m = 0; m < nr_moves; m++) {
		vec = vec && aligned16(reinterpret_cast<uintptr_t>(moves[m].obj));
		for (uint32_t i = 0; i < moves[m].nr_blocks; i++) {
			if (moves[m].block_ids[i] >= kv->nr_blocks) {
				return -EINVAL;
			}
		}
	}
	/* The half about to be written may still be feeding an earlier copy. */
	rc = check(g, cudaEventSynchronize(g->copied[g->half]), "cudaEventSynchronize");
	for (uint32_t m = 0; rc == 0 && m < nr_moves; m++) {
		const struct tt_move *mv = &moves[m];
		uint8_t *obj = static_cast<uint8_t *>(mv->obj);

		for (uint32_t i = 0; rc == 0 && i < mv->nr_blocks; i++) {
			if (n == g->max_blocks) {
				/* A call larger than the descriptors: one more launch. */
				rc = launch(g, gather, vec, &p, n);
				if (rc == 0) {
					rc = check(g, cudaEventSynchronize(g->copied[g->half]),
					           "cudaEventSynchronize");
				}
				n = 0;
				if (rc < 0) {
					break;
				}
			}
			g->h_obj[g->half][n] = reinterpret_cast<uintptr_t>(
			    obj + (uint64_t)i * kv->geo.layer_block_bytes);
			g->h_ids[g->half][n] = mv->block_ids[i];
			n++;
		}
	}
	if (rc == 0 && n > 0) {
		rc = launch(g, gather, vec, &p, n);
	}
	return rc;
}

extern "C" int
tt_gpu_gather(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer,
              const struct tt_move *moves, uint32_t nr_moves)
{
	return move(g, true, kv, layer, moves, nr_moves);
}

extern "C" int
tt_gpu_scatter(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer,
               const struct tt_move *moves, uint32_t nr_moves)
{
	return move(g, false, kv, layer, moves, nr_moves);
}

/* ---- memory ---- */

extern "C" int
tt_gpu_host_register(void *p, size_t bytes)
{
	return cuda_errno(
	    cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
}

extern "C" void
tt_gpu_host_unregister(void *p)
{
	cudaHostUnregister(p);
}

extern "C" int
tt_gpu_host_alloc(size_t bytes, void **p)
{
	return cuda_errno(cudaHostAlloc(p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
}

extern "C" void
tt_gpu_host_free(void *p)
{
	cudaFreeHost(p);
}

extern "C" int
tt_gpu_set_device(int device)
{
	return cuda_errno(cudaSetDevice(device));
}

extern "C" int
tt_gpu_dev_alloc(size_t bytes, void **p)
{
	return cuda_errno(cudaMalloc(p, bytes));
}

extern "C" void
tt_gpu_dev_free(void *p)
{
	cudaFree(p);
}

/* cudaMemcpy and cudaMemset return before a device-to-device copy or a fill of device memory
 * is done; these helpers promise completion. */
extern "C" int
tt_gpu_copy(void *dst, const void *src, size_t bytes)
{
	cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);

	return cuda_errno(err == cudaSuccess ? cudaStreamSynchronize(0) : err);
}

extern "C" int
tt_gpu_fill(void *dst, int byte, size_t bytes)
{
	cudaError_t err = cudaMemset(dst, byte, bytes);

	return cuda_errno(err == cudaSuccess ? cudaStreamSynchronize(0) : err);
}

extern "C" int
tt_gpu_device_of(const void *p, int *device)
{
	cudaPointerAttributes attr;
	cudaError_t err = cudaPointerGetAttributes(&attr, p);

	if (err != cudaSuccess) {
		cudaGetLastError(); /* clear the sticky-free error state */
		return cuda_errno(err) == -ENODEV ? -ENODEV : -EINVAL;
	}
	if (attr.type != cudaMemoryTypeDevice) {
		return -EINVAL;
	}
	*device = attr.device;
	return 0;
}
