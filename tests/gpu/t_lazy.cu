/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: a kernel of the test's own, in a module of its own, that nothing launches before
 * a test does: under CUDA's lazy module loading its first launch loads it, as a serving
 * engine's first forward over a cached prefix loads attention kernels it has not run yet.
 */
#include <cuda_runtime.h>
#include <errno.h>

#include "t_lazy.h"

__device__ static unsigned t_lazy_count;

__global__ static void
t_lazy_kernel(void)
{
	t_lazy_count++;
}

extern "C" int
t_lazy_launch(void *stream)
{
	t_lazy_kernel<<<1, 1, 0, (cudaStream_t)stream>>>();
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
