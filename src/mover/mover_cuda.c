/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA mover: the mover table over the GPU kernels of src/gpu (one launch per call). Without
 * CUDA support every call fails with -EOPNOTSUPP.
 */
#include "gpu/gpu.h"
#include "mover/mover.h"

static int
cuda_gather(void *ctx, const struct tutti_kv *kv, uint32_t layer, const struct tt_move *moves,
            uint32_t nr_moves)
{
	return tt_gpu_gather(ctx, kv, layer, moves, nr_moves);
}

static int
cuda_scatter(void *ctx, const struct tutti_kv *kv, uint32_t layer, const struct tt_move *moves,
             uint32_t nr_moves)
{
	return tt_gpu_scatter(ctx, kv, layer, moves, nr_moves);
}

static int
cuda_sync(void *ctx)
{
	return tt_gpu_sync(ctx);
}

const struct tt_mover_ops tt_mover_cuda = {
    .name = "cuda",
    .gather = cuda_gather,
    .scatter = cuda_scatter,
    .sync = cuda_sync,
};
