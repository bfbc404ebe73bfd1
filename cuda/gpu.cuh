/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU layer's interface for CUDA code: the context and error conversion, for the layer's
 * own files (cuda/*.cu) and for the kernels engines build on it (engine gpu-uring's,
 * src/engine/gpu_uring/kernel.cu). CUDA-only: the C interface is src/gpu/gpu.h.
 */
#ifndef TT_CUDA_GPU_CUH
#define TT_CUDA_GPU_CUH

#include <cuda_runtime.h>

extern "C" {
#include "gpu/gpu.h"
#include "kv/kv.h"
}

struct tt_gpu {
	int device;
	int nr_sms;
	uint32_t max_blocks;
	cudaStream_t stream;
	cudaEvent_t done;    /* blocking-sync: tt_gpu_sync sleeps on it */
	cudaEvent_t mark[2]; /* blocking-sync markers (tt_gpu_mark) */
	/* Waves (tt_gpu_buf_*), made on first use: the copy stream, per buffer the end of its
	 * latest copy (blocking-sync: the host waits on it) and of its latest kernels, and the copy
	 * stream's end for tt_gpu_sync. */
	cudaStream_t copy_stream;
	cudaEvent_t buf_copied[TT_GPU_BUFS];
	cudaEvent_t buf_used[TT_GPU_BUFS];
	cudaEvent_t copy_idle;
	/* descriptors: two pinned host halves (written while the other may still be copied) and
	 * one device copy read by the kernel */
	unsigned long long *h_obj[2];
	uint32_t *h_ids[2];
	cudaEvent_t copied[2];
	int half;
	unsigned long long *d_obj;
	uint32_t *d_ids;
	uint64_t launches;
	const struct tt_log *log;
	bool csum_secret_set; /* the checksum secret is in cuda/objs.cu's constant memory */
};

/* A CUDA error as a negative errno. */
int cuda_errno(cudaError_t err);
/* The same, logging \p what and the CUDA error's name. */
int check(const struct tt_gpu *g, cudaError_t err, const char *what);
/*
 * Load each file's kernels now (cudaFuncGetAttributes loads a kernel's module). Under CUDA's lazy
 * module loading, the default since CUDA 12.2, a kernel's first launch loads its module, and that
 * may synchronise the context: behind a pipeline's wait kernel, which spins until a load's
 * kernels have run, the load's first launch would wait for the wait kernel and the wait kernel
 * for it, until the wait timeout. tt_cuda_load_funcs loads the \p n kernels \p funcs; the others
 * load their file's own. Return 0 or -EIO.
 */
int tt_cuda_load_funcs(const struct tt_gpu *g, const void *const *funcs, unsigned n);
int tt_cuda_load_move_kernels(const struct tt_gpu *g);
int tt_cuda_load_signal_kernels(const struct tt_gpu *g);
/* The objects kernel's module, and the checksum secret in its file's constant memory. */
int tt_cuda_prepare_objs(struct tt_gpu *g);

#endif /* TT_CUDA_GPU_CUH */
