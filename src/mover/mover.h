/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Movers copy between registered paged KV memory and objects in the canonical layout: an
 * object's payload is its chunk's layer blocks in token order, each the concatenation of the
 * layer's segments. The CPU mover is the reference; other movers (CUDA kernels) implement the
 * same table and must produce the same bytes.
 */
#ifndef TT_MOVER_H
#define TT_MOVER_H

#include <stdint.h>

#include "layout/layout.h"

struct tt_mover_ops {
	const char *name;
	/* Copy blocks block_ids[0..nr_blocks) of layer \p layer from \p kv into \p obj, packed. */
	void (*gather)(const struct tutti_kv *kv, uint32_t layer, const uint32_t *block_ids,
	               uint32_t nr_blocks, void *obj);
	/* Copy \p obj, packed, into blocks block_ids[0..nr_blocks) of layer \p layer of \p kv. */
	void (*scatter)(const struct tutti_kv *kv, uint32_t layer, const uint32_t *block_ids,
	                uint32_t nr_blocks, const void *obj);
};

/* Block ids are checked against kv->nr_blocks by the caller before any mover runs. */
extern const struct tt_mover_ops tt_mover_cpu;

#endif /* TT_MOVER_H */
