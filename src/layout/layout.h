/* SPDX-License-Identifier: Apache-2.0 */
/*
 * KV geometry with its derived sizes, and the object and slot math shared by the movers, the
 * pool and the store: pure arithmetic, no memory (registered KV is src/kv).
 */
#ifndef TT_LAYOUT_H
#define TT_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "tutti/geometry.h"

/* A checked geometry and the sizes derived from it. */
struct tt_geo {
	struct tutti_geometry g;
	uint64_t layer_block_bytes; /* one paged block of one layer */
	uint32_t blocks_per_chunk;
	uint64_t chunk_layer_bytes; /* blocks_per_chunk * layer_block_bytes: an object's payload */
	uint64_t object_bytes;      /* chunk_layer_bytes padded to TUTTI_ALIGN */
	uint64_t slot_bytes;        /* header + nr_layers objects */
};

/* Check \p in and derive sizes into \p out. Returns 0 or -EINVAL. */
int tt_geo_derive(const struct tutti_geometry *in, struct tt_geo *out);

/* True when two geometries describe the same on-disk and in-memory shapes. */
bool tt_geo_equal(const struct tt_geo *a, const struct tt_geo *b);

/* Offset of layer \p layer's object inside a slot. */
static inline uint64_t
tt_geo_object_off(const struct tt_geo *geo, uint32_t layer)
{
	return TUTTI_SLOT_HEADER_BYTES + (uint64_t)layer * geo->object_bytes;
}

/* One object of a batched move: its blocks, in order, are block_ids[0..nr_blocks) of a layer. */
struct tt_move {
	void *obj;
	const uint32_t *block_ids;
	uint32_t nr_blocks;
};

#endif /* TT_LAYOUT_H */
