/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Movers copy between registered paged KV memory and objects in the canonical layout: an
 * object's payload is its chunk's layer blocks in token order, each the concatenation of the
 * layer's segments. A call moves one layer of a whole batch of objects. The CPU mover is the
 * reference; the CUDA mover (one kernel launch per call) must produce the same bytes. Which one
 * runs is decided by where the KV memory lives (tt_mover_for).
 */
#ifndef TT_MOVER_H
#define TT_MOVER_H

#include <stdint.h>

#include "common/common.h"
#include "gpu/gpu.h"
#include "kv/kv.h"
#include "layout/layout.h"

struct tt_mover_ops {
	const char *name;
	/* Copy each move's blocks of layer \p layer of \p kv into move->obj, packed. */
	int (*gather)(void *ctx, const struct tutti_kv *kv, uint32_t layer,
	              const struct tt_move *moves, uint32_t nr_moves);
	/* Copy each move->obj, packed, into its blocks of layer \p layer of \p kv. */
	int (*scatter)(void *ctx, const struct tutti_kv *kv, uint32_t layer,
	               const struct tt_move *moves, uint32_t nr_moves);
	/* Wait until every move issued so far is complete (the objects may be reused). */
	int (*sync)(void *ctx);
};

/* Block ids are checked against kv->nr_blocks by the caller before any mover runs. */
extern const struct tt_mover_ops tt_mover_cpu;  /* ctx unused; synchronous */
extern const struct tt_mover_ops tt_mover_cuda; /* ctx: struct tt_gpu *; asynchronous */

/* A mover with a context of its own, for modules that copy KV outside an engine (the layerwise
 * pipeline's copies into its save staging). */
struct tt_mover {
	const struct tt_mover_ops *ops;
	void *ctx;
};

/* The mover for \p kv's memory: the CPU mover for host KV; for GPU KV, the CUDA mover on a GPU
 * context of the KV's device (launches on a normal-priority stream of its own). Returns 0,
 * -EOPNOTSUPP (no CUDA), -ENODEV, -ENOMEM. */
int tt_mover_open(const struct tutti_kv *kv, const struct tt_log *log, struct tt_mover *out);
/* NULL ops (never opened) is allowed. */
void tt_mover_close(struct tt_mover *m);

/*
 * Object movers: waves of whole objects between host staging and KV, each checked against its
 * checksum (load) or hashed (save) where the KV lives: the CPU-driven engines' way to GPU KV.
 * The mover's staging is cut into buffers (below TT_OBJMOVER_BUFS); copy moves a wave between
 * host staging and one buffer (one DMA across PCIe for CUDA), objs checks and scatters a run of
 * objects out of a buffer, or gathers and hashes them into it (for CUDA one kernel launch per 16
 * layers), object k of the call in the slot mem + k * slot_bytes; the run is in layer-major
 * order, per_layer objects a layer, its first object the skip-th of layer \p layer
 * (tt_gpu_objs). Steps run asynchronously, each buffer's
 * in the order queued (a copy after the buffer's earlier objs, objs after its earlier copy),
 * different buffers' side by side; wait sleeps until a buffer's latest copy is done, sync until
 * everything is. Statuses and checksums land in objs (memory the mover can write) once a later
 * sync returns. Return 0 or a negative errno.
 *
 * The CUDA mover (ctx: struct tt_gpu *) copies on a stream of its own beside the kernels'. Its
 * twin, for CI, does the same steps on the CPU with host memory standing in for the device's,
 * each as late as the order allows (when a wait or sync needs it), so that a pipeline that
 * touches memory a queued step still reads gets wrong bytes there as it could on the GPU.
 */
#define TT_OBJMOVER_BUFS TT_GPU_BUFS

struct tt_objmover_ops {
	const char *name;
	int (*stage_alloc)(void *ctx, size_t bytes, void **out); /* the mover's staging */
	void (*stage_free)(void *ctx, void *p);
	int (*copy)(void *ctx, unsigned buf, void *dst, const void *src, size_t bytes);
	int (*objs)(void *ctx, unsigned buf, const struct tutti_kv *kv, uint32_t layer,
	            uint32_t per_layer, uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr,
	            const uint32_t *ids, uint8_t *mem, uint64_t slot_bytes, bool write);
	int (*wait)(void *ctx, unsigned buf);
	int (*sync)(void *ctx);
};

extern const struct tt_objmover_ops tt_objmover_cuda; /* ctx: struct tt_gpu * */
extern const struct tt_objmover_ops tt_objmover_twin; /* ctx: struct tt_objmover_twin * */

struct tt_objmover_twin;
/* A twin of its own, with nothing queued. Returns 0 or -ENOMEM. */
int tt_objmover_twin_open(struct tt_objmover_twin **out);
/* Runs what is still queued first. NULL is allowed. */
void tt_objmover_twin_close(struct tt_objmover_twin *t);

#endif /* TT_MOVER_H */
