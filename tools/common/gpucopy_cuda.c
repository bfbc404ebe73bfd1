/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpucopy.h on the CUDA runtime (linked statically, as libtutti links it: the tools run where
 * no driver is, and every call then says -ENODEV).
 */
#include <cuda_runtime_api.h>
#include <errno.h>

#include "gpucopy.h"

/* A CUDA error as a negative errno, once, where the call returns. */
static int
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

int
gpucopy_set_device(int device)
{
	return cuda_errno(cudaSetDevice(device));
}

int
gpucopy_dev_alloc(size_t bytes, void **p)
{
	*p = NULL;
	return cuda_errno(cudaMalloc(p, bytes));
}

void
gpucopy_dev_free(void *p)
{
	if (p != NULL) {
		cudaFree(p);
	}
}

int
gpucopy_host_alloc(size_t bytes, void **p)
{
	*p = NULL;
	return cuda_errno(cudaHostAlloc(p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
}

void
gpucopy_host_free(void *p)
{
	if (p != NULL) {
		cudaFreeHost(p);
	}
}

int
gpucopy_host_register(void *p, size_t bytes)
{
	return cuda_errno(
	    cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
}

void
gpucopy_host_unregister(void *p)
{
	cudaHostUnregister(p);
}

/* cudaMemcpy and cudaMemset may return before a copy or fill of device memory is done: these
 * wait for the stream. */
int
gpucopy_copy(void *dst, const void *src, size_t bytes)
{
	cudaError_t err = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);

	return cuda_errno(err == cudaSuccess ? cudaStreamSynchronize(0) : err);
}

int
gpucopy_fill(void *dst, int byte, size_t bytes)
{
	cudaError_t err = cudaMemset(dst, byte, bytes);

	return cuda_errno(err == cudaSuccess ? cudaStreamSynchronize(0) : err);
}

int
gpucopy_stream_create(int device, void **stream)
{
	cudaStream_t s = NULL;
	cudaError_t err = cudaSetDevice(device);

	if (err == cudaSuccess) {
		err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	}
	*stream = err == cudaSuccess ? (void *)s : NULL;
	return cuda_errno(err);
}

void
gpucopy_stream_destroy(void *stream)
{
	if (stream != NULL) {
		cudaStreamDestroy((cudaStream_t)stream);
	}
}

int
gpucopy_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
	return cuda_errno(
	    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
}

int
gpucopy_event_create(int device, void **event)
{
	cudaEvent_t e = NULL;
	cudaError_t err = cudaSetDevice(device);

	if (err == cudaSuccess) {
		err = cudaEventCreateWithFlags(&e, cudaEventBlockingSync | cudaEventDisableTiming);
	}
	*event = err == cudaSuccess ? (void *)e : NULL;
	return cuda_errno(err);
}

void
gpucopy_event_destroy(void *event)
{
	if (event != NULL) {
		cudaEventDestroy((cudaEvent_t)event);
	}
}

int
gpucopy_event_record(void *event, void *stream)
{
	return cuda_errno(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
}

int
gpucopy_event_sync(void *event)
{
	return cuda_errno(cudaEventSynchronize((cudaEvent_t)event));
}
