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

#endif /* TT_MOVER_H */
