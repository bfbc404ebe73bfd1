/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Geometry checks, presets and derived sizes.
 */
#include <errno.h>
#include <string.h>

#include "common/common.h"
#include "layout/layout.h"

/* Derived sizes above this are a caller's mistake, and staying far below 2^64 keeps every
 * product of them (slot offsets, capacities) free of overflow. */
#define TT_GEO_MAX_BYTES (1ull << 40)

int
tt_geo_derive(const struct tutti_geometry *in, struct tt_geo *out)
{
	struct tt_geo geo;
	const struct tutti_geometry *g = in;

	if (in == NULL || out == NULL || in->size != sizeof(*in)) {
		return -EINVAL;
	}
	if (g->nr_layers == 0 || g->nr_kv_heads == 0 || g->head_dim == 0 || g->elem_bytes == 0 ||
	    g->block_tokens == 0 || g->chunk_tokens == 0) {
		return -EINVAL;
	}
	if (g->kv_planes != 1 && g->kv_planes != 2) {
		return -EINVAL;
	}
	if (g->chunk_tokens % g->block_tokens != 0) {
		return -EINVAL;
	}
	memset(&geo, 0, sizeof(geo));
	geo.g = *in;
	/* Each factor is a uint32_t; check the running product before every multiplication. */
	geo.layer_block_bytes = (uint64_t)g->kv_planes * g->block_tokens;
	if (geo.layer_block_bytes > TT_GEO_MAX_BYTES / g->nr_kv_heads) {
		return -EINVAL;
	}
	geo.layer_block_bytes *= g->nr_kv_heads;
	if (geo.layer_block_bytes > TT_GEO_MAX_BYTES / g->head_dim) {
		return -EINVAL;
	}
	geo.layer_block_bytes *= g->head_dim;
	if (geo.layer_block_bytes > TT_GEO_MAX_BYTES / g->elem_bytes) {
		return -EINVAL;
	}
	geo.layer_block_bytes *= g->elem_bytes;
	geo.blocks_per_chunk = g->chunk_tokens / g->block_tokens;
	if (geo.layer_block_bytes > TT_GEO_MAX_BYTES / geo.blocks_per_chunk) {
		return -EINVAL;
	}
	geo.chunk_layer_bytes = geo.layer_block_bytes * geo.blocks_per_chunk;
	geo.object_bytes = tt_round_up(geo.chunk_layer_bytes, TUTTI_ALIGN);
	if (geo.object_bytes > (TT_GEO_MAX_BYTES - TUTTI_SLOT_HEADER_BYTES) / g->nr_layers) {
		return -EINVAL;
	}
	geo.slot_bytes = TUTTI_SLOT_HEADER_BYTES + geo.object_bytes * g->nr_layers;
	*out = geo;
	return 0;
}

bool
tt_geo_equal(const struct tt_geo *a, const struct tt_geo *b)
{
	const struct tutti_geometry *x = &a->g, *y = &b->g;

	return x->nr_layers == y->nr_layers && x->nr_kv_heads == y->nr_kv_heads &&
	       x->head_dim == y->head_dim && x->elem_bytes == y->elem_bytes &&
	       x->kv_planes == y->kv_planes && x->block_tokens == y->block_tokens &&
	       x->chunk_tokens == y->chunk_tokens;
}

/* ---- public geometry API ---- */

void
tutti_geometry_init(struct tutti_geometry *geo)
{
	if (geo == NULL) {
		return;
	}
	memset(geo, 0, sizeof(*geo));
	geo->size = sizeof(*geo);
	geo->elem_bytes = 2;
	geo->kv_planes = 2;
	geo->block_tokens = 16;
	geo->chunk_tokens = TUTTI_DEFAULT_CHUNK_TOKENS;
}

struct preset {
	const char *name;
	uint32_t nr_layers, nr_kv_heads, head_dim, chunk_tokens;
};

static const struct preset presets[] = {
    {"llama-3-8b", 32, 8, 128, TUTTI_DEFAULT_CHUNK_TOKENS},
    {"llama-3-70b", 80, 8, 128, TUTTI_DEFAULT_CHUNK_TOKENS},
    {"glm-4-9b", 40, 2, 128, TUTTI_DEFAULT_CHUNK_TOKENS},
    {"tiny", 2, 2, 16, 64},
};

int
tutti_geometry_preset(const char *name, struct tutti_geometry *geo)
{
	if (name == NULL || geo == NULL) {
		return -EINVAL;
	}
	for (size_t i = 0; i < TT_ARRAY_SIZE(presets); i++) {
		if (strcmp(presets[i].name, name) == 0) {
			tutti_geometry_init(geo);
			geo->nr_layers = presets[i].nr_layers;
			geo->nr_kv_heads = presets[i].nr_kv_heads;
			geo->head_dim = presets[i].head_dim;
			geo->chunk_tokens = presets[i].chunk_tokens;
			return 0;
		}
	}
	return -ENOENT;
}

int
tutti_geometry_check(const struct tutti_geometry *geo)
{
	struct tt_geo derived;

	return tt_geo_derive(geo, &derived);
}

uint64_t
tutti_geometry_layer_block_bytes(const struct tutti_geometry *geo)
{
	struct tt_geo d;

	return tt_geo_derive(geo, &d) == 0 ? d.layer_block_bytes : 0;
}

uint32_t
tutti_geometry_blocks_per_chunk(const struct tutti_geometry *geo)
{
	struct tt_geo d;

	return tt_geo_derive(geo, &d) == 0 ? d.blocks_per_chunk : 0;
}

uint64_t
tutti_geometry_object_bytes(const struct tutti_geometry *geo)
{
	struct tt_geo d;

	return tt_geo_derive(geo, &d) == 0 ? d.object_bytes : 0;
}

uint64_t
tutti_geometry_slot_bytes(const struct tutti_geometry *geo)
{
	struct tt_geo d;

	return tt_geo_derive(geo, &d) == 0 ? d.slot_bytes : 0;
}
