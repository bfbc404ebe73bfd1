/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine gpu-uring's GPU driver in a build without CUDA: nothing to launch. The twin (a host
 * thread speaking the same protocol) still drives the ring for host KV.
 */
#include <errno.h>

#include "engine/gpu_uring/kernel.h"

int
tt_gpu_uring_dev_open(struct tt_gpu *g, struct tt_gpu_uring_dev **out)
{
	*out = NULL;
	return -EOPNOTSUPP;
}

void
tt_gpu_uring_dev_close(struct tt_gpu_uring_dev *dev)
{
}

int
tt_gpu_uring_layers(struct tt_gpu_uring_dev *dev, const struct tt_gpu_uring_view *ring,
                    const struct tt_gpu_uring_job *job)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_uring_dma_supported(struct tt_gpu_uring_dev *dev)
{
	return 0;
}

int
tt_gpu_uring_elapsed(struct tt_gpu_uring_dev *dev, uint64_t *ns, uint32_t *blocks)
{
	*ns = 0;
	*blocks = 0;
	return 0;
}
