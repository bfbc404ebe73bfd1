/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: host paged KV memory for tests, in the layouts serving engines use, registered
 * with tutti_kv_create(), plus helpers to fill, poison and compare its layer blocks.
 */
#ifndef T_KV_H
#define T_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "t_util.h"
#include "tutti/tutti.h"

enum t_layout {
	/* Per layer, a K array and a V array of nr_blocks entries each: 2 segments per layer. */
	T_LAYOUT_KV_FIRST = 0,
	/* Per layer, one array of nr_blocks layer blocks: 1 segment per layer. */
	T_LAYOUT_BLOCKS_FIRST,
	/* One array of nr_blocks entries, each holding every layer's block: stride L x block. */
	T_LAYOUT_CROSS_LAYER,
	/* Per layer, 3 uneven segments with gaps between blocks (stride > bytes). */
	T_LAYOUT_SPLIT3,
	T_NR_LAYOUTS,
};

/* The byte that tests fill destination KV with, so that a block no load wrote stands out. */
#define T_POISON 0xa5

/* Gap after each block of a T_LAYOUT_SPLIT3 segment. */
#define T_SPLIT3_GAP 64u

struct t_kv {
	struct tutti_geometry geo;
	enum t_layout layout;
	uint32_t nr_blocks;
	uint64_t lbb; /* layer block bytes */
	uint8_t *mem;
	size_t mem_bytes;
	struct tutti_segment *segs;
	uint32_t segs_per_layer;
	struct tutti_kv *kv;
};

const char *t_layout_name(enum t_layout layout);

/* Allocate and register. Returns tutti_kv_create()'s result; *out is NULL on failure. */
int t_kv_alloc(const struct tutti_geometry *geo, enum t_layout layout, uint32_t nr_blocks,
               struct t_kv **out);
void t_kv_free(struct t_kv *k);
/* t_kv_alloc() that must succeed (a cmocka assertion), its blocks filled from \p rng, or with
 * T_POISON when \p rng is NULL. */
struct t_kv *t_kv_new(const struct tutti_geometry *geo, enum t_layout layout, uint32_t nr_blocks,
                      struct t_rng *rng);

void t_kv_fill_random(struct t_kv *k, struct t_rng *r);
void t_kv_poison(struct t_kv *k, uint8_t byte);

/* Copy the layer block (\p layer, \p block) in canonical order (segments concatenated). */
void t_kv_read_block(const struct t_kv *k, uint32_t layer, uint32_t block, uint8_t *out);
/* Set the layer block (\p layer, \p block) from \p in, in canonical order. */
void t_kv_write_block(struct t_kv *k, uint32_t layer, uint32_t block, const uint8_t *in);
/* True when layer block (layer, ba) of \p a has the bytes of (layer, bb) of \p b. */
bool t_kv_block_equal(const struct t_kv *a, uint32_t ba, const struct t_kv *b, uint32_t bb,
                      uint32_t layer);
/* True when every byte of layer block (layer, block) is \p byte. */
bool t_kv_block_is(const struct t_kv *k, uint32_t layer, uint32_t block, uint8_t byte);

#endif /* T_KV_H */
