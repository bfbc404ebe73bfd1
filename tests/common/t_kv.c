/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: host paged KV memory for tests (see t_kv.h).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "t_kv.h"

const char *
t_layout_name(enum t_layout layout)
{
	switch (layout) {
	case T_LAYOUT_KV_FIRST:
		return "kv-first";
	case T_LAYOUT_BLOCKS_FIRST:
		return "blocks-first";
	case T_LAYOUT_CROSS_LAYER:
		return "cross-layer";
	case T_LAYOUT_SPLIT3:
		return "split3";
	default:
		return "?";
	}
}

static void
split3_sizes(uint64_t lbb, uint64_t sz[3])
{
	sz[0] = lbb / 4;
	sz[1] = lbb / 2;
	sz[2] = lbb - sz[0] - sz[1];
}

/* Lay out the segments of every layer over k->mem. */
static void
place_segments(struct t_kv *k)
{
	uint32_t L = k->geo.nr_layers, n = k->nr_blocks;
	uintptr_t m = (uintptr_t)k->mem;
	uint64_t lbb = k->lbb;

	for (uint32_t l = 0; l < L; l++) {
		struct tutti_segment *s = &k->segs[(size_t)l * k->segs_per_layer];
		uint64_t layer_base = m + (uint64_t)l * n * lbb;

		switch (k->layout) {
		case T_LAYOUT_KV_FIRST:
			s[0] = (struct tutti_segment){layer_base, lbb / 2, lbb / 2};
			s[1] = (struct tutti_segment){layer_base + (uint64_t)n * (lbb / 2),
			                              lbb - lbb / 2, lbb - lbb / 2};
			break;
		case T_LAYOUT_BLOCKS_FIRST:
			s[0] = (struct tutti_segment){layer_base, lbb, lbb};
			break;
		case T_LAYOUT_CROSS_LAYER:
			s[0] =
			    (struct tutti_segment){m + (uint64_t)l * lbb, (uint64_t)L * lbb, lbb};
			break;
		default: {
			uint64_t sz[3], base = m + (uint64_t)l * n * (lbb + 3 * T_SPLIT3_GAP);

			split3_sizes(lbb, sz);
			for (int i = 0; i < 3; i++) {
				s[i] = (struct tutti_segment){base, sz[i] + T_SPLIT3_GAP, sz[i]};
				base += (uint64_t)n * (sz[i] + T_SPLIT3_GAP);
			}
			break;
		}
		}
	}
}

int
t_kv_alloc(const struct tutti_geometry *geo, enum t_layout layout, uint32_t nr_blocks,
           struct t_kv **out)
{
	struct t_kv *k = calloc(1, sizeof(*k));
	int rc;

	*out = NULL;
	if (k == NULL) {
		return -ENOMEM;
	}
	k->geo = *geo;
	k->layout = layout;
	k->nr_blocks = nr_blocks;
	k->lbb = tutti_geometry_layer_block_bytes(geo);
	k->segs_per_layer = layout == T_LAYOUT_KV_FIRST ? 2 : layout == T_LAYOUT_SPLIT3 ? 3 : 1;
	k->mem_bytes = (size_t)geo->nr_layers * nr_blocks *
	               (k->lbb + (layout == T_LAYOUT_SPLIT3 ? 3 * T_SPLIT3_GAP : 0));
	k->mem = t_aligned_alloc(k->mem_bytes);
	k->segs = calloc((size_t)geo->nr_layers * k->segs_per_layer, sizeof(*k->segs));
	if (k->segs == NULL) {
		t_kv_free(k);
		return -ENOMEM;
	}
	place_segments(k);
	rc = tutti_kv_create(geo, k->segs, k->segs_per_layer, nr_blocks, TUTTI_MEM_HOST, &k->kv);
	if (rc < 0) {
		t_kv_free(k);
		return rc;
	}
	*out = k;
	return 0;
}

void
t_kv_free(struct t_kv *k)
{
	if (k == NULL) {
		return;
	}
	tutti_kv_destroy(k->kv);
	free(k->segs);
	free(k->mem);
	free(k);
}

struct t_kv *
t_kv_new(const struct tutti_geometry *geo, enum t_layout layout, uint32_t nr_blocks,
         struct t_rng *rng)
{
	struct t_kv *k;

	assert_int_equal(t_kv_alloc(geo, layout, nr_blocks, &k), 0);
	if (rng != NULL) {
		t_kv_fill_random(k, rng);
	} else {
		t_kv_poison(k, T_POISON);
	}
	return k;
}

void
t_kv_fill_random(struct t_kv *k, struct t_rng *r)
{
	t_rng_fill(r, k->mem, k->mem_bytes);
}

void
t_kv_poison(struct t_kv *k, uint8_t byte)
{
	memset(k->mem, byte, k->mem_bytes);
}

/* A wrong layer or block number is a bug in the test: stop at once rather than read stray memory.
 */
static void
check_block_ref(const struct t_kv *k, uint32_t layer, uint32_t block)
{
	if (layer >= k->geo.nr_layers || block >= k->nr_blocks) {
		fprintf(stderr, "t_kv: layer %u block %u out of range (%u layers, %u blocks)\n",
		        layer, block, k->geo.nr_layers, k->nr_blocks);
		abort();
	}
}

void
t_kv_read_block(const struct t_kv *k, uint32_t layer, uint32_t block, uint8_t *out)
{
	const struct tutti_segment *s = &k->segs[(size_t)layer * k->segs_per_layer];

	check_block_ref(k, layer, block);
	for (uint32_t i = 0; i < k->segs_per_layer; i++) {
		memcpy(out, (const void *)(uintptr_t)(s[i].base + block * s[i].block_stride),
		       s[i].bytes);
		out += s[i].bytes;
	}
}

void
t_kv_write_block(struct t_kv *k, uint32_t layer, uint32_t block, const uint8_t *in)
{
	const struct tutti_segment *s = &k->segs[(size_t)layer * k->segs_per_layer];

	check_block_ref(k, layer, block);
	for (uint32_t i = 0; i < k->segs_per_layer; i++) {
		memcpy((void *)(uintptr_t)(s[i].base + block * s[i].block_stride), in, s[i].bytes);
		in += s[i].bytes;
	}
}

bool
t_kv_block_equal(const struct t_kv *a, uint32_t ba, const struct t_kv *b, uint32_t bb,
                 uint32_t layer)
{
	uint8_t *x = malloc(a->lbb), *y = malloc(b->lbb);
	bool eq;

	if (x == NULL || y == NULL || a->lbb != b->lbb) {
		abort();
	}
	t_kv_read_block(a, layer, ba, x);
	t_kv_read_block(b, layer, bb, y);
	eq = memcmp(x, y, a->lbb) == 0;
	free(x);
	free(y);
	return eq;
}

bool
t_kv_block_is(const struct t_kv *k, uint32_t layer, uint32_t block, uint8_t byte)
{
	uint8_t *x = malloc(k->lbb);
	bool all = true;

	if (x == NULL) {
		abort();
	}
	t_kv_read_block(k, layer, block, x);
	for (uint64_t i = 0; i < k->lbb && all; i++) {
		all = x[i] == byte;
	}
	free(x);
	return all;
}
