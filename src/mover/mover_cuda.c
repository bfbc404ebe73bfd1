/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA mover: the mover table over the GPU kernels of src/gpu (one launch per call), and movers
 * with a context of their own. Without CUDA support every call fails with -EOPNOTSUPP.
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

/* ---- the object mover: waves through device staging ---- */

static int
cuda_stage_alloc(void *ctx, size_t bytes, void **out)
{
	return tt_gpu_buf_alloc(ctx, bytes, out);
}

static void
cuda_stage_free(void *ctx, void *p)
{
	tt_gpu_buf_free(ctx, p);
}

static int
cuda_copy(void *ctx, unsigned buf, void *dst, const void *src, size_t bytes)
{
	return tt_gpu_buf_copy(ctx, buf, dst, src, bytes);
}

static int
cuda_objs(void *ctx, unsigned buf, const struct tutti_kv *kv, uint32_t layer, uint32_t per_layer,
          uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr, const uint32_t *ids, uint8_t *mem,
          uint64_t slot_bytes, bool write)
{
	return tt_gpu_buf_objs(ctx, buf, kv, layer, per_layer, skip, objs, nr, ids, mem, slot_bytes,
	                       write);
}

static int
cuda_wait(void *ctx, unsigned buf)
{
	return tt_gpu_buf_wait(ctx, buf);
}

const struct tt_objmover_ops tt_objmover_cuda = {
    .name = "cuda",
    .stage_alloc = cuda_stage_alloc,
    .stage_free = cuda_stage_free,
    .copy = cuda_copy,
    .objs = cuda_objs,
    .wait = cuda_wait,
    .sync = cuda_sync,
};

/* Paged blocks one launch of a mover's own context moves; larger calls are split. */
#define MOVER_MAX_BLOCKS 65536u

int
tt_mover_open(const struct tutti_kv *kv, const struct tt_log *log, struct tt_mover *out)
{
	struct tt_gpu_conf conf = {.max_blocks = MOVER_MAX_BLOCKS, .log = log};
	struct tt_gpu *g;
	int rc;

	*out = (struct tt_mover){.ops = &tt_mover_cpu};
	if (kv->mem != TUTTI_MEM_CUDA) {
		return 0;
	}
	conf.device = kv->device;
	rc = tt_gpu_open(&conf, &g);
	if (rc < 0) {
		out->ops = NULL;
		return rc;
	}
	*out = (struct tt_mover){.ops = &tt_mover_cuda, .ctx = g};
	return 0;
}

void
tt_mover_close(struct tt_mover *m)
{
	if (m->ops == &tt_mover_cuda) {
		tt_gpu_close(m->ctx);
	}
	*m = (struct tt_mover){0};
}
