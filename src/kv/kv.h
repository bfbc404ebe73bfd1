/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Registered paged KV memory (struct tutti_kv): its geometry, its segments and where it lives.
 * tutti_kv_create checks a registration once, so the movers, engines and planners that read it
 * trust it.
 */
#ifndef TT_KV_H
#define TT_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "layout/layout.h"
#include "tutti/kv.h"

#define TT_MAX_SEGS_PER_LAYER 8u

/* Registered paged KV memory. Immutable after tutti_kv_create. */
struct tutti_kv {
	struct tt_geo geo;
	uint32_t segs_per_layer;
	uint32_t nr_blocks;
	uint32_t mem;               /* enum tutti_mem */
	int device;                 /* TUTTI_MEM_CUDA: the device holding every segment */
	struct tutti_segment *segs; /* nr_layers * segs_per_layer, layer-major; owned */
};

static inline const struct tutti_segment *
tt_kv_layer_segs(const struct tutti_kv *kv, uint32_t layer)
{
	return kv->segs + (uint64_t)layer * kv->segs_per_layer;
}

/* Whether a run of \p nr objects in layer-major order, \p per_layer a layer, starting at object
 * \p skip (below per_layer) of layer \p layer, is well formed and ends within \p kv's layers. */
static inline bool
tt_kv_run_fits(const struct tutti_kv *kv, uint32_t layer, uint32_t per_layer, uint32_t skip,
               uint32_t nr)
{
	return per_layer != 0 && skip < per_layer && layer < kv->geo.g.nr_layers &&
	       (nr == 0 || ((uint64_t)skip + nr - 1) / per_layer < kv->geo.g.nr_layers - layer);
}

#endif /* TT_KV_H */
