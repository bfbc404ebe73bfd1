/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device-side signals between the layerwise pipeline's host thread and a serving engine's compute
 * stream (src/gpu/gpu.h, "pipeline signals"). Both kernels are one thread of one block: their SM
 * footprint is a single resident block for as long as they run.
 *
 * The words live in mapped pinned host memory with one writer each (the GPU cannot do atomics on
 * host memory and needs none): the host publishes "layer l is loaded for step s" with a release
 * store; the wait kernel polls with system-scope acquire loads, so the loads of the compute
 * kernels behind it on the stream see the KV the load kernels wrote (they completed before the
 * host published). The signal kernel publishes "the compute before me on the stream is done".
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <time.h>

#include "cuda/gpu.cuh"

/* A system-scope acquire load and release store of a word in mapped host memory: the GPU cannot
 * do atomics on host memory and needs none (one writer each). */
__device__ static inline uint32_t
ld_acquire_sys(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline void
st_release_sys(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ static unsigned long long
globaltimer_ns(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Wait until the sequence number at \p word reaches \p value (wrap-around safe); record when the
 * kernel started and when it let the stream go (bit 63 of the end set on a timeout). */
__global__ static void
wait_kernel(const uint32_t *word, uint32_t value, unsigned long long timeout_ns,
            unsigned long long *times)
{
	unsigned long long start = globaltimer_ns(), now = start, flag = 0;
	unsigned sleep = 32;

	while ((int32_t)(ld_acquire_sys(word) - value) < 0) {
		now = globaltimer_ns();
		if (now - start > timeout_ns) {
			flag = 1ull << 63;
			break;
		}
		__nanosleep(sleep);
		sleep = sleep < 1024 ? sleep * 2 : sleep;
	}
	now = globaltimer_ns();
	times[0] = start;
	/* The end last, with release semantics: the host reads the pair once the end is non-zero.
	 */
	__threadfence_system();
	*(volatile unsigned long long *)&times[1] = now | flag;
}

__global__ static void
signal_kernel(uint32_t *word, uint32_t value, unsigned long long *time)
{
	if (time != NULL) {
		*(volatile unsigned long long *)time = globaltimer_ns();
	}
	st_release_sys(word, value);
}

/* Launch on \p stream's device, leaving the calling thread's current device as it was. */
template <typename Launch>
static int
on_device(int device, Launch launch)
{
	int prev = -1, rc;

	rc = cuda_errno(cudaGetDevice(&prev));
	if (rc == 0 && prev != device) {
		rc = cuda_errno(cudaSetDevice(device));
	}
	if (rc == 0) {
		launch();
		rc = cuda_errno(cudaGetLastError());
	}
	if (prev >= 0 && prev != device) {
		cudaSetDevice(prev);
	}
	return rc;
}

int
tt_cuda_load_signal_kernels(const struct tt_gpu *g)
{
	const void *const funcs[] = {reinterpret_cast<const void *>(wait_kernel),
	                             reinterpret_cast<const void *>(signal_kernel)};

	return tt_cuda_load_funcs(g, funcs, 2);
}

extern "C" int
tt_gpu_stream_wait(int device, void *stream, const uint32_t *word, uint32_t value,
                   uint64_t timeout_ns, uint64_t *times)
{
	if (word == NULL || times == NULL) {
		return -EINVAL;
	}
	return on_device(device, [&] {
		wait_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(word, value, timeout_ns,
		                                               (unsigned long long *)times);
	});
}

extern "C" int
tt_gpu_stream_signal(int device, void *stream, uint32_t *word, uint32_t value, uint64_t *time)
{
	if (word == NULL) {
		return -EINVAL;
	}
	return on_device(device, [&] {
		signal_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(word, value,
		                                                 (unsigned long long *)time);
	});
}

extern "C" int
tt_gpu_ctx_signal(struct tt_gpu *g, uint32_t *word, uint32_t value, uint64_t *time)
{
	if (g == NULL) {
		return -EINVAL;
	}
	return tt_gpu_stream_signal(g->device, g->stream, word, value, time);
}

extern "C" int
tt_gpu_idle(struct tt_gpu *g)
{
	cudaError_t err;

	if (g == NULL) {
		return -EINVAL;
	}
	err = cudaStreamQuery(g->stream);
	if (err == cudaErrorNotReady) {
		return 0;
	}
	return err == cudaSuccess ? 1 : check(g, err, "cudaStreamQuery");
}

extern "C" int
tt_gpu_timer_offset(int device, int64_t *offset_ns)
{
	uint32_t *word = NULL;
	uint64_t *time = NULL;
	struct timespec a, b;
	int rc;

	if (offset_ns == NULL) {
		return -EINVAL;
	}
	rc = cuda_errno(cudaHostAlloc((void **)&word, sizeof(*word) + 16, cudaHostAllocMapped));
	if (rc < 0) {
		return rc;
	}
	time = (uint64_t *)((uint8_t *)word + 8);
	*time = 0;
	clock_gettime(CLOCK_MONOTONIC, &a);
	rc = tt_gpu_stream_signal(device, NULL, word, 1, time);
	if (rc == 0) {
		rc = cuda_errno(cudaStreamSynchronize(NULL));
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (rc == 0) {
		int64_t host = ((int64_t)a.tv_sec * (int64_t)TT_NS_PER_S + a.tv_nsec +
		                (int64_t)b.tv_sec * (int64_t)TT_NS_PER_S + b.tv_nsec) /
		               2;
		*offset_ns = (int64_t) * (volatile uint64_t *)time - host;
	}
	cudaFreeHost(word);
	return rc;
}

extern "C" int
tt_gpu_stream_create(int device, void **out)
{
	cudaStream_t s = NULL;
	int rc;

	if (out == NULL) {
		return -EINVAL;
	}
	rc = on_device(device, [&] { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); });
	*out = rc == 0 ? (void *)s : NULL;
	return rc == 0 && s == NULL ? -EIO : rc;
}

extern "C" int
tt_gpu_stream_sync(void *stream)
{
	return cuda_errno(cudaStreamSynchronize((cudaStream_t)stream));
}

extern "C" void
tt_gpu_stream_destroy(void *stream)
{
	if (stream != NULL) {
		cudaStreamDestroy((cudaStream_t)stream);
	}
}

extern "C" int
tt_gpu_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
	return cuda_errno(
	    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
}

extern "C" int
tt_gpu_event_create(int device, void **out)
{
	cudaEvent_t e = NULL;
	cudaError_t err = cudaSuccess;
	int rc;

	if (out == NULL) {
		return -EINVAL;
	}
	rc = on_device(device, [&] {
		err = cudaEventCreateWithFlags(&e, cudaEventBlockingSync | cudaEventDisableTiming);
	});
	rc = rc == 0 ? cuda_errno(err) : rc;
	*out = rc == 0 ? (void *)e : NULL;
	return rc == 0 && e == NULL ? -EIO : rc;
}

extern "C" int
tt_gpu_event_record(void *event, void *stream)
{
	return cuda_errno(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
}

extern "C" int
tt_gpu_event_sync(void *event)
{
	return cuda_errno(cudaEventSynchronize((cudaEvent_t)event));
}

extern "C" void
tt_gpu_event_destroy(void *event)
{
	if (event != NULL) {
		cudaEventDestroy((cudaEvent_t)event);
	}
}
