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

#endif /* TT_MOVER_H */
