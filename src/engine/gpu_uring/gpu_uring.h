/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine gpu-uring as the engines built on it see it (auto: src/engine/auto/), and its tests:
 * the engine's struct, its opening for another table entry, its set-up for GPU KV, and the
 * operations of its table. The ring is ring.h, the GPU's driver kernel.h.
 */
#ifndef TT_ENGINE_GPU_URING_GPU_URING_H
#define TT_ENGINE_GPU_URING_GPU_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine_impl.h"
#include "engine/gpu_uring/kernel.h"
#include "engine/gpu_uring/ring.h"

struct tt_gpu_uring_engine {
	struct tt_engine base;
	struct tt_gpu_uring *ring;
	bool ring_mapped;   /* the ring's memory is pinned and mapped for the GPU */
	uint32_t slots;     /* object-sized bounce slots of the staging: the in-flight window */
	uint32_t in_flight; /* the most I/Os in flight, <= slots */
	bool broken;        /* a ring-level failure: refuse further batches */
	uint64_t ios;       /* I/Os driven through the ring */
	uint64_t kernel_ns, block_ns;
	struct tt_gpu_uring_dev *dev; /* the driver kernel's state on the engine's GPU context */
	/* Layer kernels of a launched load may still be running on the GPU context's stream,
	 * using the staging's bounce slots: quiesce waits for them, then reads their per-layer
	 * timeout words (op_failed[0..op_launched)) so that a ring with I/O still in flight is
	 * marked broken before anyone else drives it. */
	bool inflight;
	const int *op_failed;
	uint32_t op_launched;
};

/* Open the engine for table entry \p ops (gpu-uring's, or that of an engine built on it):
 * \p bytes (at least the struct's; 0 for the struct alone) are allocated and zeroed, so that the
 * caller's own struct may embed it first. Returns 0, -EINVAL or -ENOMEM. */
int tt_gpu_uring_open_as(const struct tt_engine_ops *ops, const struct tt_engine_conf *conf,
                         size_t bytes, struct tt_engine **out);
/* Set the ring up for GPU KV on \p device after open (the attach of an engine that does not
 * start with it), or say in \p why why it cannot be: layer blocks too small for the GPU hash,
 * no CUDA device, a GPU with too few SMs, no such io_uring, memory that cannot be mapped.
 * Returns 0 or a negative errno. */
int tt_gpu_uring_setup(struct tt_gpu_uring_engine *g, int device, char *why, size_t len);

/* The operations of gpu-uring's table entry. */
void tt_gpu_uring_close(struct tt_engine *e);
int tt_gpu_uring_transfer(struct tt_engine *e, struct tt_batch *b);
void tt_gpu_uring_stats(struct tt_engine *e, struct tt_engine_stats *out);
int tt_gpu_uring_prepare(struct tt_engine *e, const struct tutti_kv *kv, struct tt_gpu *gpu);
int tt_gpu_uring_launch_open(struct tt_engine *e, struct tt_batch *b, struct tt_list_mem *mem,
                             struct tt_launch **out);
int tt_gpu_uring_launch_layer(struct tt_engine *e, struct tt_launch *l, uint32_t layer,
                              uint32_t *word, uint32_t value, uint64_t *done_ns);
int tt_gpu_uring_launch_idle(struct tt_engine *e, struct tt_launch *l);
int tt_gpu_uring_launch_finish(struct tt_engine *e, struct tt_launch *l);
void tt_gpu_uring_quiesce(struct tt_engine *e);

/* Object-sized I/Os engine gpu-uring keeps in \p staging_bytes of staging for objects of
 * \p object_bytes (at most staging_bytes / object_bytes, which the store makes at least 1): all of
 * it, but on page-cache-backed files (\p page_cache) no more than 64 MiB of it, and never more
 * than the ring's 4096. With page_cache it is also the most I/Os in flight on such files. */
uint32_t tt_gpu_uring_bounce_slots(uint64_t staging_bytes, uint64_t object_bytes, bool page_cache);

#endif /* TT_ENGINE_GPU_URING_GPU_URING_H */
