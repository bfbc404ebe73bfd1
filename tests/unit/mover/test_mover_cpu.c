/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/mover/mover_cpu.c: gather produces the canonical object layout (block-major,
 * segment-minor) for every paged KV layout, scatter writes only the listed blocks, and
 * gather/scatter round-trip across layouts for random block tables.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "mover/mover.h"
#include "t_kv.h"

#define NR_BLOCKS 37u
#define POISON 0xa5

/* One move of one layer through the CPU mover's batched interface. */
static void
t_gather(const struct tutti_kv *kv, uint32_t layer, const uint32_t *ids, uint32_t n, void *obj)
{
	struct tt_move m = {.obj = obj, .block_ids = ids, .nr_blocks = n};

	assert_int_equal(tt_mover_cpu.gather(NULL, kv, layer, &m, 1), 0);
}

static void
t_scatter(const struct tutti_kv *kv, uint32_t layer, const uint32_t *ids, uint32_t n,
          const void *obj)
{
	struct tt_move m = {.obj = (void *)obj, .block_ids = ids, .nr_blocks = n};

	assert_int_equal(tt_mover_cpu.scatter(NULL, kv, layer, &m, 1), 0);
}

static struct tutti_geometry
geometry(int which)
{
	struct tutti_geometry g;

	if (which == 0) {
		assert_int_equal(tutti_geometry_preset("tiny", &g), 0);
	} else {
		/* Three layers of a single latent plane with an odd-sized block (2 x 3 x 5 x 7). */
		tutti_geometry_init(&g);
		g.nr_layers = 3;
		g.kv_planes = 1;
		g.nr_kv_heads = 5;
		g.head_dim = 7;
		g.elem_bytes = 3;
		g.block_tokens = 2;
		g.chunk_tokens = 10;
	}
	return g;
}

/* Address of layer block (l, b) segment i of a t_kv, from the raw memory layout that t_kv.c
 * documents, computed independently of the segment table. Returns the segment's length. */
static const uint8_t *
raw_seg(const struct t_kv *k, uint32_t l, uint32_t b, uint32_t i, uint64_t *len)
{
	uint64_t lbb = k->lbb, n = k->nr_blocks, L = k->geo.nr_layers, half = lbb / 2;
	const uint8_t *m = k->mem;

	switch (k->layout) {
	case T_LAYOUT_KV_FIRST:
		*len = i == 0 ? half : lbb - half;
		return m + l * n * lbb + (i == 0 ? b * half : n * half + b * (lbb - half));
	case T_LAYOUT_BLOCKS_FIRST:
		*len = lbb;
		return m + (l * n + b) * lbb;
	case T_LAYOUT_CROSS_LAYER:
		*len = lbb;
		return m + (b * L + l) * lbb;
	default: {
		uint64_t sz[3] = {lbb / 4, lbb / 2, lbb - lbb / 4 - lbb / 2};
		const uint8_t *p = m + l * n * (lbb + 3 * T_SPLIT3_GAP);

		for (uint32_t j = 0; j < i; j++) {
			p += n * (sz[j] + T_SPLIT3_GAP);
		}
		*len = sz[i];
		return p + b * (sz[i] + T_SPLIT3_GAP);
	}
	}
}

/* The canonical bytes of layer block (l, b): its segments in order. */
static void
canonical_block(const struct t_kv *k, uint32_t l, uint32_t b, uint8_t *out)
{
	uint64_t len, done = 0;

	for (uint32_t i = 0; i < k->segs_per_layer; i++) {
		const uint8_t *p = raw_seg(k, l, b, i, &len);

		memcpy(out + done, p, len);
		done += len;
	}
	assert_int_equal(done, k->lbb);
}

static struct t_kv *
make_kv(const struct tutti_geometry *g, int layout, struct t_rng *r)
{
	struct t_kv *k;

	assert_int_equal(t_kv_alloc(g, (enum t_layout)layout, NR_BLOCKS, &k), 0);
	if (r != NULL) {
		t_kv_fill_random(k, r);
	} else {
		t_kv_poison(k, POISON);
	}
	return k;
}

static void
test_mover_gather_matches_hand_computed_canonical_layout(void **state)
{
	struct t_rng r;

	t_rng_init(&r, t_seed(11));
	for (int gi = 0; gi < 2; gi++) {
		struct tutti_geometry g = geometry(gi);

		for (int lay = 0; lay < T_NR_LAYOUTS; lay++) {
			struct t_kv *k = make_kv(&g, lay, &r);
			uint32_t ids[12];
			uint8_t *obj = malloc(12 * k->lbb), *want = malloc(12 * k->lbb);

			assert_non_null(obj);
			assert_non_null(want);
			t_random_distinct(&r, ids, 11, NR_BLOCKS);
			ids[11] = ids[3]; /* a block may be gathered twice */
			for (uint32_t l = 0; l < g.nr_layers; l++) {
				memset(obj, 0, 12 * k->lbb);
				t_gather(k->kv, l, ids, 12, obj);
				for (uint32_t i = 0; i < 12; i++) {
					canonical_block(k, l, ids[i], want + i * k->lbb);
				}
				assert_memory_equal(obj, want, 12 * k->lbb);
			}
			free(obj);
			free(want);
			t_kv_free(k);
		}
	}
}

static void
test_mover_scatter_writes_only_listed_blocks(void **state)
{
	struct t_rng r;

	t_rng_init(&r, t_seed(12));
	for (int gi = 0; gi < 2; gi++) {
		struct tutti_geometry g = geometry(gi);

		for (int lay = 0; lay < T_NR_LAYOUTS; lay++) {
			struct t_kv *k = make_kv(&g, lay, NULL);
			uint8_t *want = malloc(k->mem_bytes);
			uint32_t ids[9], layer = g.nr_layers - 1;
			uint8_t *obj = malloc(9 * k->lbb);

			assert_non_null(want);
			assert_non_null(obj);
			t_random_distinct(&r, ids, 9, NR_BLOCKS);
			t_rng_fill(&r, obj, 9 * k->lbb);
			/* Expected memory: the poison, with each listed block's segments replaced.
			 */
			memcpy(want, k->mem, k->mem_bytes);
			for (uint32_t i = 0; i < 9; i++) {
				uint64_t len, done = 0;

				for (uint32_t s = 0; s < k->segs_per_layer; s++) {
					const uint8_t *p = raw_seg(k, layer, ids[i], s, &len);

					memcpy(want + (p - k->mem), obj + i * k->lbb + done, len);
					done += len;
				}
			}
			t_scatter(k->kv, layer, ids, 9, obj);
			/* Every other block, every other layer and every gap keeps its poison. */
			assert_memory_equal(k->mem, want, k->mem_bytes);
			free(want);
			free(obj);
			t_kv_free(k);
		}
	}
}

static void
test_mover_round_trip_across_layouts_with_random_tables(void **state)
{
	struct t_rng r;

	t_rng_init(&r, t_seed(13));
	for (int gi = 0; gi < 2; gi++) {
		struct tutti_geometry g = geometry(gi);

		for (int from = 0; from < T_NR_LAYOUTS; from++) {
			for (int to = 0; to < T_NR_LAYOUTS; to++) {
				struct t_kv *src = make_kv(&g, from, &r),
				            *dst = make_kv(&g, to, NULL);
				uint32_t n = 1 + t_rng_below(&r, NR_BLOCKS), a[NR_BLOCKS],
				         b[NR_BLOCKS];
				uint8_t *obj = malloc(n * src->lbb), *back = malloc(n * src->lbb);

				assert_non_null(obj);
				assert_non_null(back);
				t_random_distinct(&r, a, n, NR_BLOCKS);
				t_random_distinct(&r, b, n, NR_BLOCKS);
				for (uint32_t l = 0; l < g.nr_layers; l++) {
					t_gather(src->kv, l, a, n, obj);
					t_scatter(dst->kv, l, b, n, obj);
					t_gather(dst->kv, l, b, n, back);
					assert_memory_equal(obj, back, n * src->lbb);
					for (uint32_t i = 0; i < n; i++) {
						assert_true(
						    t_kv_block_equal(src, a[i], dst, b[i], l));
					}
				}
				/* Blocks outside table b were never written, in any layer. */
				for (uint32_t blk = 0; blk < NR_BLOCKS; blk++) {
					bool listed = false;

					for (uint32_t i = 0; i < n; i++) {
						listed |= b[i] == blk;
					}
					for (uint32_t l = 0; !listed && l < g.nr_layers; l++) {
						assert_true(t_kv_block_is(dst, l, blk, POISON));
					}
				}
				free(obj);
				free(back);
				t_kv_free(src);
				t_kv_free(dst);
			}
		}
	}
}

static void
test_mover_zero_blocks_touch_nothing(void **state)
{
	struct tutti_geometry g = geometry(0);
	struct t_kv *k = make_kv(&g, T_LAYOUT_CROSS_LAYER, NULL);
	uint8_t obj[16] = {0};
	uint32_t id = 0;

	t_scatter(k->kv, 0, &id, 0, obj);
	t_gather(k->kv, 1, &id, 0, obj);
	for (size_t i = 0; i < sizeof(obj); i++) {
		assert_int_equal(obj[i], 0);
	}
	for (uint32_t b = 0; b < NR_BLOCKS; b++) {
		assert_true(t_kv_block_is(k, 0, b, POISON));
		assert_true(t_kv_block_is(k, 1, b, POISON));
	}
	t_kv_free(k);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mover_gather_matches_hand_computed_canonical_layout),
	    cmocka_unit_test(test_mover_scatter_writes_only_listed_blocks),
	    cmocka_unit_test(test_mover_round_trip_across_layouts_with_random_tables),
	    cmocka_unit_test(test_mover_zero_blocks_touch_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
