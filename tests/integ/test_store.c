/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the store through the public API, for both engines: save from host paged KV with
 * random content and block tables, longest-prefix lookup, bit-exact loads into other layouts and
 * shuffled tables (staged and direct paths), listing the stored chunks, layer ranges, skip_blocks,
 * partial last chunks, per-chunk status codes, eviction under capacity pressure that keeps chains
 * reachable, statistics, small pipelines, two stores in one process and concurrent callers.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <cmocka.h>

#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define KB 32u /* key bytes (the default) */
#define NR_BLOCKS 256u
#define BPC 4u /* blocks per chunk of the tiny geometry */

static int g_engine;

struct fixture {
	char *tmp;
	struct tutti_geometry geo; /* tiny */
	struct tutti_store *st;    /* on tmp/main, 64 slots */
	struct t_log rec;
	struct t_rng r;
};

/* ---- helpers ---- */

static struct tutti_geometry
tiny(void)
{
	struct tutti_geometry g;

	assert_int_equal(tutti_geometry_preset("tiny", &g), 0);
	return g;
}

/* tiny with 8 KiB layer blocks: every segment of the KV-first, blocks-first and cross-layer
 * layouts is 4 KiB aligned, so those take the direct (vectored, no staging) path. */
static struct tutti_geometry
aligned(void)
{
	struct tutti_geometry g = tiny();

	g.head_dim = 64;
	return g;
}

/* Open a store on \p nr_dirs new directories tmp/<name>.<i>, \p slots slots in all. */
static struct tutti_store *
open_store(struct fixture *f, const struct tutti_geometry *g, const char *name, uint32_t nr_dirs,
           uint64_t slots, void (*tweak)(struct tutti_store_opts *))
{
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;
	char *dirs[8];

	assert_true(nr_dirs <= 8);
	for (uint32_t d = 0; d < nr_dirs; d++) {
		char sub[64];

		snprintf(sub, sizeof(sub), "%s.%u", name, d);
		dirs[d] = t_path_join(f->tmp, sub);
	}
	t_store_opts(&o, g, (const char **)dirs, nr_dirs, slots, (uint32_t)g_engine, &f->rec);
	if (tweak != NULL) {
		tweak(&o);
	}
	assert_int_equal(tutti_store_open(g, &o, &st), 0);
	assert_non_null(st);
	for (uint32_t d = 0; d < nr_dirs; d++) {
		free(dirs[d]);
	}
	return st;
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	*state = f;
	f->geo = tiny();
	t_rng_init(&f->r, t_seed(61));
	f->st = open_store(f, &f->geo, "main", 1, 64, NULL);
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	tutti_store_close(f->st);
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

/* Save one request and check the call's count against the statuses. */
static int64_t
save1(struct tutti_store *st, const struct t_kv *kv, const uint8_t *keys, uint32_t nr_keys,
      uint32_t first, const uint32_t *ids, uint32_t nr_ids, int32_t *status)
{
	struct tutti_request r = t_request(keys, nr_keys, first, 0, ids, nr_ids);

	return tutti_store_save(st, kv->kv, &r, 1, status);
}

static int64_t
load1(struct tutti_store *st, const struct t_kv *kv, const uint8_t *keys, uint32_t nr_keys,
      uint32_t first, uint32_t skip, const uint32_t *ids, uint32_t nr_ids, uint32_t lb, uint32_t le,
      int32_t *status)
{
	struct tutti_request r = t_request(keys, nr_keys, first, skip, ids, nr_ids);

	return tutti_store_load(st, kv->kv, &r, 1, lb, le, status);
}

static void
assert_all_status(const int32_t *status, uint32_t n, int32_t want)
{
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(status[i], want);
	}
}

/*
 * Block dids[i] of dst holds block sids[i] of src in layers [lb, le) and the poison in the
 * others; every block of dst not in dids holds the poison in every layer.
 */
static void
assert_moved(const struct t_kv *src, const uint32_t *sids, const struct t_kv *dst,
             const uint32_t *dids, uint32_t n, uint32_t lb, uint32_t le)
{
	bool listed[NR_BLOCKS] = {false};

	for (uint32_t i = 0; i < n; i++) {
		listed[dids[i]] = true;
		for (uint32_t l = 0; l < dst->geo.nr_layers; l++) {
			if (l >= lb && l < le) {
				assert_true(t_kv_block_equal(src, sids[i], dst, dids[i], l));
			} else {
				assert_true(t_kv_block_is(dst, l, dids[i], T_POISON));
			}
		}
	}
	for (uint32_t b = 0; b < dst->nr_blocks; b++) {
		for (uint32_t l = 0; !listed[b] && l < dst->geo.nr_layers; l++) {
			assert_true(t_kv_block_is(dst, l, b, T_POISON));
		}
	}
}

/* Save a chain of \p nr_keys keys (all blocks) from random blocks of \p src, load it into random
 * blocks of a poisoned \p dst, and check every byte. */
static void
round_trip(struct fixture *f, struct tutti_store *st, struct t_kv *src, struct t_kv *dst,
           uint32_t nr_keys, uint32_t nr_blocks)
{
	uint8_t *keys = t_keys_new(&f->r, nr_keys, KB);
	uint32_t sids[NR_BLOCKS], dids[NR_BLOCKS];
	int32_t status[64];
	uint64_t blocks = 0;

	t_random_distinct(&f->r, sids, nr_blocks, NR_BLOCKS);
	t_random_distinct(&f->r, dids, nr_blocks, NR_BLOCKS);
	t_kv_poison(dst, T_POISON);
	assert_int_equal(save1(st, src, keys, nr_keys, 0, sids, nr_blocks, status), nr_keys);
	assert_all_status(status, nr_keys, 0);
	assert_int_equal(tutti_store_lookup(st, keys, nr_keys, &blocks), nr_keys);
	assert_int_equal(blocks, nr_blocks);
	assert_int_equal(
	    load1(st, dst, keys, nr_keys, 0, 0, dids, nr_blocks, 0, src->geo.nr_layers, status),
	    nr_keys);
	assert_all_status(status, nr_keys, 0);
	assert_moved(src, sids, dst, dids, nr_blocks, 0, src->geo.nr_layers);
	free(keys);
}

/* ---- round trips ---- */

static void
test_store_round_trip_across_layouts(void **state)
{
	struct fixture *f = *state;
	const enum t_layout pairs[][2] = {
	    {T_LAYOUT_KV_FIRST, T_LAYOUT_CROSS_LAYER},
	    {T_LAYOUT_BLOCKS_FIRST, T_LAYOUT_SPLIT3},
	    {T_LAYOUT_CROSS_LAYER, T_LAYOUT_KV_FIRST},
	    {T_LAYOUT_SPLIT3, T_LAYOUT_BLOCKS_FIRST},
	};

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		struct t_kv *src = t_kv_new(&f->geo, pairs[i][0], NR_BLOCKS, &f->r);
		struct t_kv *dst = t_kv_new(&f->geo, pairs[i][1], NR_BLOCKS, NULL);

		round_trip(f, f->st, src, dst, 5, 5 * BPC);
		t_kv_free(src);
		t_kv_free(dst);
	}
	assert_int_equal(f->rec.nr_err, 0);
}

static void
test_store_direct_and_staged_paths_agree_on_disk(void **state)
{
	struct fixture *f = *state;
	struct tutti_geometry g = aligned();
	struct tutti_store *st = open_store(f, &g, "aligned", 2, 32, NULL);
	/* kv-first, blocks-first and cross-layer move directly; split3 (64-byte gaps) is staged. */
	const enum t_layout from[] = {T_LAYOUT_KV_FIRST, T_LAYOUT_SPLIT3, T_LAYOUT_CROSS_LAYER};
	const enum t_layout to[] = {T_LAYOUT_SPLIT3, T_LAYOUT_BLOCKS_FIRST, T_LAYOUT_SPLIT3};

	for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++) {
		struct t_kv *src = t_kv_new(&g, from[i], NR_BLOCKS, &f->r);
		struct t_kv *dst = t_kv_new(&g, to[i], NR_BLOCKS, NULL);
		struct t_kv *dst2 = t_kv_new(&g, T_LAYOUT_CROSS_LAYER, NR_BLOCKS, NULL);
		uint8_t *keys = t_keys_new(&f->r, 3, KB);
		uint32_t sids[10], dids[10];
		int32_t status[3];

		/* Whole chunks, a partial last chunk, and a load that skips into a chunk. */
		round_trip(f, st, src, dst, 3, 3 * BPC);
		t_random_distinct(&f->r, sids, 10, NR_BLOCKS);
		t_random_distinct(&f->r, dids, 10, NR_BLOCKS);
		assert_int_equal(save1(st, src, keys, 3, 0, sids, 10, status), 3);
		assert_int_equal(load1(st, dst2, keys, 3, 1, 1, dids, 5, 0, 2, status), 2);
		assert_moved(src, sids + 5, dst2, dids, 5, 0, 2);
		t_kv_poison(dst2, T_POISON);
		assert_int_equal(load1(st, dst2, keys, 3, 0, 0, dids, 10, 1, 2, status), 3);
		assert_moved(src, sids, dst2, dids, 10, 1, 2);
		free(keys);
		t_kv_free(src);
		t_kv_free(dst);
		t_kv_free(dst2);
	}
	tutti_store_close(st);
	assert_int_equal(f->rec.nr_err, 0);
}

static void
test_store_llama_sized_objects_round_trip(void **state)
{
	struct fixture *f = *state;
	struct tutti_geometry g;
	struct tutti_store *st;
	struct t_kv *a, *b;
	uint8_t *keys = t_keys_new(&f->r, 2, KB);
	uint32_t sids[32], dids[32];
	int32_t status[2];

	/* llama-3-8b's 64 KiB blocks and 1 MiB objects, with two layers to stay small. */
	assert_int_equal(tutti_geometry_preset("llama-3-8b", &g), 0);
	g.nr_layers = 2;
	st = open_store(f, &g, "llama", 1, 4, NULL);
	assert_int_equal(t_kv_alloc(&g, T_LAYOUT_KV_FIRST, 32, &a), 0); /* direct */
	assert_int_equal(t_kv_alloc(&g, T_LAYOUT_SPLIT3, 32, &b), 0);   /* staged */
	t_kv_fill_random(a, &f->r);
	t_kv_poison(b, T_POISON);
	t_random_distinct(&f->r, sids, 32, 32);
	t_random_distinct(&f->r, dids, 32, 32);
	assert_int_equal(save1(st, a, keys, 2, 0, sids, 32, status), 2);
	assert_int_equal(load1(st, b, keys, 2, 0, 0, dids, 32, 0, 2, status), 2);
	for (uint32_t i = 0; i < 32; i++) {
		assert_true(t_kv_block_equal(a, sids[i], b, dids[i], 0));
		assert_true(t_kv_block_equal(a, sids[i], b, dids[i], 1));
	}
	/* And back the other way, from staged memory into direct. */
	t_kv_poison(a, T_POISON);
	t_kv_fill_random(b, &f->r);
	t_rng_fill(&f->r, keys, 2 * KB);
	assert_int_equal(save1(st, b, keys, 2, 0, dids, 32, status), 2);
	assert_int_equal(load1(st, a, keys, 2, 0, 0, sids, 32, 0, 2, status), 2);
	for (uint32_t i = 0; i < 32; i++) {
		assert_true(t_kv_block_equal(b, dids[i], a, sids[i], 0));
		assert_true(t_kv_block_equal(b, dids[i], a, sids[i], 1));
	}
	t_kv_free(a);
	t_kv_free(b);
	free(keys);
	tutti_store_close(st);
}

/* ---- lookup ---- */

static void
test_store_lookup_returns_longest_stored_prefix(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	uint8_t *keys = t_keys_new(&f->r, 5, KB);
	uint32_t ids[3 * BPC];
	uint64_t blocks = 99;

	t_random_distinct(&f->r, ids, 3 * BPC, NR_BLOCKS);
	assert_int_equal(save1(f->st, src, keys, 3, 0, ids, 3 * BPC, NULL), 3);
	assert_int_equal(tutti_store_lookup(f->st, keys, 5, &blocks), 3);
	assert_int_equal(blocks, 3 * BPC);
	assert_int_equal(tutti_store_lookup(f->st, keys, 3, &blocks), 3);
	assert_int_equal(tutti_store_lookup(f->st, keys, 2, &blocks), 2);
	assert_int_equal(blocks, 2 * BPC);
	assert_int_equal(tutti_store_lookup(f->st, keys, 0, &blocks), 0);
	assert_int_equal(blocks, 0);
	assert_int_equal(tutti_store_lookup(f->st, keys, 4, NULL), 3);
	/* A chain that diverges after its first chunk shares only that chunk. */
	keys[KB + 7] ^= 1;
	assert_int_equal(tutti_store_lookup(f->st, keys, 5, &blocks), 1);
	assert_int_equal(blocks, BPC);
	keys[0] ^= 1;
	assert_int_equal(tutti_store_lookup(f->st, keys, 5, &blocks), 0);
	assert_int_equal(blocks, 0);
	t_kv_free(src);
	free(keys);
}

/* Index of \p key among the \p n keys of \p keys, or -1. */
static int
key_index(const uint8_t *keys, uint32_t n, const uint8_t *key)
{
	for (uint32_t i = 0; i < n; i++) {
		if (memcmp(keys + (size_t)i * KB, key, KB) == 0) {
			return (int)i;
		}
	}
	return -1;
}

static void
test_store_list_returns_every_chunk_once_with_its_blocks(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *st = open_store(f, &f->geo, "list", 1, 8, NULL);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	uint8_t *a = t_keys_new(&f->r, 3, KB), *b = t_keys_new(&f->r, 2, KB),
	        *c = t_keys_new(&f->r, 4, KB);
	uint8_t want[5 * KB], got[8 * KB];
	uint32_t ids[4 * BPC], blocks[8], seen[5] = {0};
	uint64_t cursor = 0;
	int64_t n;
	uint32_t total = 0;

	assert_int_equal(tutti_store_list(st, &cursor, got, blocks, 8), 0); /* empty */
	t_random_distinct(&f->r, ids, 4 * BPC, NR_BLOCKS);
	assert_int_equal(save1(st, src, a, 3, 0, ids, 2 * BPC + 1, NULL), 3); /* partial tail */
	assert_int_equal(save1(st, src, b, 2, 0, ids, 2 * BPC, NULL), 2);
	memcpy(want, a, 3 * KB);
	memcpy(want + 3 * KB, b, 2 * KB);
	/* Batches of two: the cursor carries on where the last one stopped. */
	cursor = 0;
	while ((n = tutti_store_list(st, &cursor, got, blocks, 2)) > 0) {
		assert_true(n <= 2);
		for (int64_t i = 0; i < n; i++) {
			int k = key_index(want, 5, got + i * KB);

			assert_true(k >= 0);
			seen[k]++;
			assert_int_equal(blocks[i], k == 2 ? 1 : BPC);
			total++;
		}
	}
	assert_int_equal(n, 0);
	assert_int_equal(total, 5);
	for (uint32_t k = 0; k < 5; k++) {
		assert_int_equal(seen[k], 1);
	}
	/* Without block counts; a listing is not a use: B stays the least recently used. */
	cursor = 0;
	assert_int_equal(tutti_store_list(st, &cursor, got, NULL, 8), 5);
	assert_int_equal(tutti_store_lookup(st, a, 3, NULL), 3);
	/* C needs four slots, three are free: B's tail is evicted and leaves the listing. */
	assert_int_equal(save1(st, src, c, 4, 0, ids, 4 * BPC, NULL), 4);
	cursor = 0;
	n = tutti_store_list(st, &cursor, got, blocks, 8);
	assert_int_equal(n, 8);
	assert_int_equal(key_index(got, 8, b + KB), -1);
	assert_true(key_index(got, 8, b) >= 0);
	for (uint32_t k = 0; k < 4; k++) {
		assert_true(key_index(got, 8, c + k * KB) >= 0);
	}
	assert_int_equal(tutti_store_list(st, &cursor, got, blocks, 8), 0);
	/* Bad arguments. */
	assert_int_equal(tutti_store_list(NULL, &cursor, got, blocks, 8), -EINVAL);
	assert_int_equal(tutti_store_list(st, NULL, got, blocks, 8), -EINVAL);
	assert_int_equal(tutti_store_list(st, &cursor, NULL, blocks, 8), -EINVAL);
	cursor = 0;
	assert_int_equal(tutti_store_list(st, &cursor, NULL, NULL, 0), 0);
	t_kv_free(src);
	free(a);
	free(b);
	free(c);
	tutti_store_close(st);
}

/* ---- partial loads ---- */

static void
max_io_two_objects(struct tutti_store_opts *o)
{
	o->max_io_bytes = 2 * 8192; /* units of two layers */
}

static void
test_store_layer_range_loads_only_those_layers(void **state)
{
	struct fixture *f = *state;
	struct tutti_geometry g = tiny();
	struct tutti_store *st;
	struct t_kv *src, *dst;
	uint8_t *keys = t_keys_new(&f->r, 2, KB);
	uint32_t sids[2 * BPC], dids[2 * BPC];
	int32_t status[2];

	g.nr_layers = 5;
	st = open_store(f, &g, "five", 1, 16, max_io_two_objects);
	src = t_kv_new(&g, T_LAYOUT_CROSS_LAYER, NR_BLOCKS, &f->r);
	dst = t_kv_new(&g, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, NULL);
	t_random_distinct(&f->r, sids, 2 * BPC, NR_BLOCKS);
	t_random_distinct(&f->r, dids, 2 * BPC, NR_BLOCKS);
	assert_int_equal(save1(st, src, keys, 2, 0, sids, 2 * BPC, status), 2);
	assert_int_equal(load1(st, dst, keys, 2, 0, 0, dids, 2 * BPC, 1, 4, status), 2);
	assert_all_status(status, 2, 0);
	assert_moved(src, sids, dst, dids, 2 * BPC, 1, 4);
	assert_int_equal(load1(st, dst, keys, 2, 0, 0, dids, 2 * BPC, 4, 5, status), 2);
	assert_moved(src, sids, dst, dids, 2 * BPC, 1, 5);
	assert_int_equal(load1(st, dst, keys, 2, 0, 0, dids, 2 * BPC, 0, 1, status), 2);
	assert_moved(src, sids, dst, dids, 2 * BPC, 0, 5);
	/* Empty and out-of-range ranges are invalid. */
	assert_int_equal(load1(st, dst, keys, 2, 0, 0, dids, 2 * BPC, 2, 2, status), -EINVAL);
	assert_int_equal(load1(st, dst, keys, 2, 0, 0, dids, 2 * BPC, 3, 2, status), -EINVAL);
	assert_int_equal(load1(st, dst, keys, 2, 0, 0, dids, 2 * BPC, 0, 6, status), -EINVAL);
	t_kv_free(src);
	t_kv_free(dst);
	free(keys);
	tutti_store_close(st);
}

static void
test_store_skip_blocks_loads_from_inside_a_chunk(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_SPLIT3, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);
	uint8_t *keys = t_keys_new(&f->r, 3, KB);
	uint32_t sids[3 * BPC], dids[3 * BPC];
	int32_t status[3];
	const struct {
		uint32_t nr_keys, first, skip, nr, loaded;
	} cases[] = {
	    {3, 1, 1, 7, 2}, /* chunk 1 from its block 1, then chunk 2 */
	    {3, 0, 3, 9, 3}, /* the last block of chunk 0 on */
	    {3, 2, 0, 2, 1}, /* the first half of the last chunk */
	    {2, 1, 2, 1, 1}, /* one block from the middle of a chunk */
	    {2, 0, 1, 6, 2}, /* a chain cut short after a partial second chunk */
	    {3, 0, 0, 12, 3},
	};

	t_random_distinct(&f->r, sids, 3 * BPC, NR_BLOCKS);
	assert_int_equal(save1(f->st, src, keys, 3, 0, sids, 3 * BPC, status), 3);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint32_t from = cases[i].first * BPC + cases[i].skip;

		t_kv_poison(dst, T_POISON);
		t_random_distinct(&f->r, dids, cases[i].nr, NR_BLOCKS);
		assert_int_equal(load1(f->st, dst, keys, cases[i].nr_keys, cases[i].first,
		                       cases[i].skip, dids, cases[i].nr, 0, 2, status),
		                 cases[i].loaded);
		assert_all_status(status, cases[i].loaded, 0);
		assert_moved(src, sids + from, dst, dids, cases[i].nr, 0, 2);
	}
	t_kv_free(src);
	t_kv_free(dst);
	free(keys);
}

static void
test_store_partial_last_chunk_round_trips_and_ends_the_chain(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_CROSS_LAYER, NR_BLOCKS, NULL);
	uint8_t *keys = t_keys_new(&f->r, 4, KB);
	uint32_t sids[3 * BPC], dids[3 * BPC];
	int32_t status[4];
	uint64_t blocks;

	t_random_distinct(&f->r, sids, 3 * BPC, NR_BLOCKS);
	t_random_distinct(&f->r, dids, 3 * BPC, NR_BLOCKS);
	assert_int_equal(save1(f->st, src, keys, 3, 0, sids, 2 * BPC + 2, status), 3);
	assert_all_status(status, 3, 0);
	assert_int_equal(tutti_store_lookup(f->st, keys, 3, &blocks), 3);
	assert_int_equal(blocks, 2 * BPC + 2);
	assert_int_equal(tutti_store_lookup(f->st, keys, 4, &blocks), 3);
	assert_int_equal(blocks, 2 * BPC + 2);
	assert_int_equal(load1(f->st, dst, keys, 3, 0, 0, dids, 2 * BPC + 2, 0, 2, status), 3);
	assert_moved(src, sids, dst, dids, 2 * BPC + 2, 0, 2);
	/* Asking for the whole last chunk is more than was stored. */
	t_kv_poison(dst, T_POISON);
	assert_int_equal(load1(f->st, dst, keys, 3, 0, 0, dids, 3 * BPC, 0, 2, status), 2);
	assert_int_equal(status[0], 0);
	assert_int_equal(status[1], 0);
	assert_int_equal(status[2], -ERANGE);
	for (uint32_t i = 0; i < 2 * BPC; i++) {
		assert_true(t_kv_block_equal(src, sids[i], dst, dids[i], 0));
		assert_true(t_kv_block_equal(src, sids[i], dst, dids[i], 1));
	}
	/* A partial chunk ends a chain even when the next key is stored (here as another root). */
	assert_int_equal(save1(f->st, src, keys + 3 * KB, 1, 0, sids, BPC, status), 1);
	assert_int_equal(tutti_store_lookup(f->st, keys + 3 * KB, 1, NULL), 1);
	assert_int_equal(tutti_store_lookup(f->st, keys, 4, &blocks), 3);
	assert_int_equal(blocks, 2 * BPC + 2);
	/* A stored partial chunk also serves fewer blocks than it holds. */
	t_kv_poison(dst, T_POISON);
	assert_int_equal(load1(f->st, dst, keys, 3, 2, 0, dids, 1, 0, 2, status), 1);
	assert_moved(src, sids + 2 * BPC, dst, dids, 1, 0, 2);
	t_kv_free(src);
	t_kv_free(dst);
	free(keys);
}

/* How many times \p block occurs in the file at \p path. */
static int
count_in_file(const char *path, const uint8_t *block, size_t len)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *file;
	const uint8_t *p, *hit;
	long size;
	int found = 0;

	assert_non_null(fp);
	assert_int_equal(fseek(fp, 0, SEEK_END), 0);
	size = ftell(fp);
	rewind(fp);
	file = malloc((size_t)size);
	assert_non_null(file);
	assert_int_equal(fread(file, 1, (size_t)size, fp), (size_t)size);
	fclose(fp);
	for (p = file; (hit = memmem(p, (size_t)(file + size - p), block, len)) != NULL;
	     p = hit + 1) {
		found++;
	}
	free(file);
	return found;
}

static void
test_store_padding_on_disk_never_holds_stale_bytes(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	uint8_t *a = t_keys_new(&f->r, 1, KB), *b = t_keys_new(&f->r, 1, KB),
	        *block = malloc(src->lbb);
	char *path = t_path_join(f->tmp, "main.0/tutti.data");
	uint32_t ids[BPC];

	assert_non_null(block);
	/* A whole chunk, then a one-block chunk through the same staging buffers. */
	t_random_distinct(&f->r, ids, BPC, NR_BLOCKS);
	assert_int_equal(save1(f->st, src, a, 1, 0, ids, BPC, NULL), 1);
	assert_int_equal(save1(f->st, src, b, 1, 0, ids + BPC - 1, 1, NULL), 1);
	/* Blocks 0..2 of the first chunk are on disk once: none leaked into the second chunk's
	 * padding. (Block 3 is in both chunks.) */
	for (uint32_t l = 0; l < 2; l++) {
		for (uint32_t i = 0; i + 1 < BPC; i++) {
			t_kv_read_block(src, l, ids[i], block);
			assert_int_equal(count_in_file(path, block, src->lbb), 1);
		}
	}
	free(block);
	free(path);
	free(a);
	free(b);
	t_kv_free(src);
}

static void
test_store_consecutive_chunks_are_striped_across_directories(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *st = open_store(f, &f->geo, "stripe", 3, 12, NULL);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, &f->r);
	uint8_t *keys = t_keys_new(&f->r, 6, KB), *block = malloc(src->lbb);
	uint32_t ids[6 * BPC];

	assert_non_null(block);
	t_random_distinct(&f->r, ids, 6 * BPC, NR_BLOCKS);
	assert_int_equal(save1(st, src, keys, 6, 0, ids, 6 * BPC, NULL), 6);
	/* Chunk i lives in directory i mod 3, so a chain reads from every disk at once; and in
	 * it, the directory's consecutive chunks in consecutive data files (4 slots per
	 * directory: 4 files), so that their writes do not queue on one file. */
	for (uint32_t i = 0; i < 6; i++) {
		t_kv_read_block(src, 1, ids[i * BPC + 2], block);
		for (uint32_t d = 0; d < 3; d++) {
			for (uint32_t k = 0; k < 4; k++) {
				char sub[48];
				char *path;

				snprintf(sub, sizeof(sub),
				         k == 0 ? "stripe.%u/tutti.data"
				                : "stripe.%u/tutti.data.%u",
				         d, k);
				path = t_path_join(f->tmp, sub);
				assert_int_equal(count_in_file(path, block, src->lbb),
				                 d == i % 3 && k == i / 3);
				free(path);
			}
		}
	}
	free(block);
	free(keys);
	t_kv_free(src);
	tutti_store_close(st);
}

/* ---- status codes ---- */

static void
test_store_save_and_load_status_codes(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);
	uint8_t *keys = t_keys_new(&f->r, 5, KB), *other = t_keys_new(&f->r, 2, KB);
	uint32_t ids[5 * BPC];
	int32_t status[8];
	struct tutti_request reqs[2];

	t_random_distinct(&f->r, ids, 5 * BPC, NR_BLOCKS);
	assert_int_equal(save1(f->st, src, keys, 3, 0, ids, 3 * BPC, status), 3);
	/* Already stored: nothing written, status 1. */
	assert_int_equal(save1(f->st, src, keys, 3, 0, ids, 3 * BPC, status), 0);
	assert_all_status(status, 3, 1);
	/* Chunk 4 without chunk 3: its parent is not stored. */
	assert_int_equal(save1(f->st, src, keys, 5, 4, ids + 4 * BPC, BPC, status), 0);
	assert_int_equal(status[0], -ENOENT);
	assert_int_equal(tutti_store_lookup(f->st, keys, 5, NULL), 3);
	/* Another chain's second chunk without its first. */
	assert_int_equal(save1(f->st, src, other, 2, 1, ids, BPC, status), 0);
	assert_int_equal(status[0], -ENOENT);
	assert_int_equal(tutti_store_lookup(f->st, other, 2, NULL), 0);
	/* Extending the chain: the stored prefix is skipped, the rest written. */
	assert_int_equal(save1(f->st, src, keys, 5, 0, ids, 5 * BPC, status), 2);
	assert_int_equal(status[0], 1);
	assert_int_equal(status[2], 1);
	assert_int_equal(status[3], 0);
	assert_int_equal(status[4], 0);
	assert_int_equal(tutti_store_lookup(f->st, keys, 5, NULL), 5);
	/* Loads: an unknown key is -ENOENT, the others of the call still load. */
	assert_int_equal(load1(f->st, dst, other, 1, 0, 0, ids, BPC, 0, 2, status), 0);
	assert_int_equal(status[0], -ENOENT);
	assert_true(t_kv_block_is(dst, 0, ids[0], T_POISON));
	reqs[0] = t_request(keys, 5, 0, 0, ids, 5 * BPC);
	reqs[1] = t_request(other, 1, 0, 0, ids, BPC);
	memset(status, 0x55, sizeof(status));
	assert_int_equal(tutti_store_load(f->st, dst->kv, reqs, 2, 0, 2, status), 5);
	assert_all_status(status, 5, 0);
	assert_int_equal(status[5], -ENOENT);
	assert_moved(src, ids, dst, ids, 5 * BPC, 0, 2);
	t_kv_free(src);
	t_kv_free(dst);
	free(keys);
	free(other);
}

static void
test_store_requests_sharing_a_prefix_in_one_call(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, NULL);
	uint8_t *keys = t_keys_new(&f->r, 4, KB);
	uint32_t ids[4 * BPC], dids[4 * BPC];
	int32_t status[6];
	struct tutti_request reqs[2];
	struct tutti_stats s = {.size = sizeof(s)};

	t_random_distinct(&f->r, ids, 4 * BPC, NR_BLOCKS);
	t_random_distinct(&f->r, dids, 4 * BPC, NR_BLOCKS);
	/* [a b] and [a b c d] in one call: a and b are stored once, c and d after them. */
	reqs[0] = t_request(keys, 2, 0, 0, ids, 2 * BPC);
	reqs[1] = t_request(keys, 4, 0, 0, ids, 4 * BPC);
	assert_int_equal(tutti_store_save(f->st, src->kv, reqs, 2, status), 4);
	assert_int_equal(status[0], 0);
	assert_int_equal(status[1], 0);
	assert_true(status[2] == 0 || status[2] == 1);
	assert_true(status[3] == 0 || status[3] == 1);
	assert_int_equal(status[4], 0);
	assert_int_equal(status[5], 0);
	assert_int_equal(tutti_store_get_stats(f->st, &s), 0);
	assert_int_equal(s.used_slots, 4);
	assert_int_equal(tutti_store_lookup(f->st, keys, 4, NULL), 4);
	assert_int_equal(load1(f->st, dst, keys, 4, 0, 0, dids, 4 * BPC, 0, 2, status), 4);
	assert_moved(src, ids, dst, dids, 4 * BPC, 0, 2);
	t_kv_free(src);
	t_kv_free(dst);
	free(keys);
}

/* ---- eviction ---- */

static void
test_store_evicts_least_recently_used_chain_tail_first(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *st = open_store(f, &f->geo, "lru", 1, 8, NULL);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	uint8_t *a = t_keys_new(&f->r, 4, KB), *b = t_keys_new(&f->r, 4, KB),
	        *c = t_keys_new(&f->r, 2, KB), *d = t_keys_new(&f->r, 2, KB);
	uint32_t ids[4 * BPC];
	struct tutti_stats s = {.size = sizeof(s)};

	t_random_distinct(&f->r, ids, 4 * BPC, NR_BLOCKS);
	assert_int_equal(save1(st, src, a, 4, 0, ids, 4 * BPC, NULL), 4);
	assert_int_equal(save1(st, src, b, 4, 0, ids, 4 * BPC, NULL), 4);
	/* Full. A hit on A makes B the least recent chain. */
	assert_int_equal(tutti_store_lookup(st, a, 4, NULL), 4);
	assert_int_equal(save1(st, src, c, 2, 0, ids, 2 * BPC, NULL), 2);
	assert_int_equal(tutti_store_lookup(st, c, 2, NULL), 2);
	assert_int_equal(tutti_store_lookup(st, a, 4, NULL), 4);
	assert_int_equal(tutti_store_lookup(st, b, 4, NULL), 2); /* lost its last two chunks */
	/* Now C is the least recent: D replaces it entirely. */
	assert_int_equal(save1(st, src, d, 2, 0, ids, 2 * BPC, NULL), 2);
	assert_int_equal(tutti_store_lookup(st, c, 2, NULL), 0);
	assert_int_equal(tutti_store_lookup(st, d, 2, NULL), 2);
	assert_int_equal(tutti_store_lookup(st, a, 4, NULL), 4);
	assert_int_equal(tutti_store_lookup(st, b, 4, NULL), 2);
	assert_int_equal(tutti_store_get_stats(st, &s), 0);
	assert_int_equal(s.evictions, 4);
	assert_int_equal(s.used_slots, 8);
	t_kv_free(src);
	free(a);
	free(b);
	free(c);
	free(d);
	tutti_store_close(st);
}

static void
test_store_saving_a_stored_chain_counts_as_a_use(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *st = open_store(f, &f->geo, "use", 1, 8, NULL);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);
	uint8_t *a = t_keys_new(&f->r, 4, KB), *b = t_keys_new(&f->r, 4, KB),
	        *c = t_keys_new(&f->r, 2, KB);
	uint32_t ids[4 * BPC];
	int32_t status[4];

	t_random_distinct(&f->r, ids, 4 * BPC, NR_BLOCKS);
	assert_int_equal(save1(st, src, a, 2, 0, ids, 2 * BPC, NULL), 2);
	assert_int_equal(save1(st, src, b, 4, 0, ids, 4 * BPC, NULL), 4);
	/* Extending A (two chunks present, two new) makes all of A more recent than B. */
	assert_int_equal(save1(st, src, a, 4, 0, ids, 4 * BPC, status), 2);
	assert_int_equal(status[0], 1);
	assert_int_equal(status[3], 0);
	assert_int_equal(save1(st, src, c, 1, 0, ids, BPC, NULL), 1);
	/* B's tail went, not A's. */
	assert_int_equal(load1(st, dst, b, 4, 3, 0, ids, BPC, 0, 2, status), 0);
	assert_int_equal(status[0], -ENOENT);
	assert_int_equal(load1(st, dst, a, 4, 3, 0, ids, BPC, 0, 2, status), 1);
	/* Saving a chain that is wholly present is a use too. Hits make the order C, B, A. */
	assert_int_equal(tutti_store_lookup(st, b, 3, NULL), 3);
	assert_int_equal(tutti_store_lookup(st, c, 1, NULL), 1);
	assert_int_equal(save1(st, src, a, 4, 0, ids, 4 * BPC, status), 0);
	assert_all_status(status, 4, 1);
	/* Now A, C, B: a new chunk takes B's tail. */
	assert_int_equal(save1(st, src, c + KB, 1, 0, ids, BPC, NULL), 1);
	assert_int_equal(load1(st, dst, a, 4, 0, 0, ids, 4 * BPC, 0, 2, status), 4);
	assert_int_equal(load1(st, dst, c, 1, 0, 0, ids, BPC, 0, 2, status), 1);
	assert_int_equal(load1(st, dst, b, 3, 0, 0, ids, 3 * BPC, 0, 2, status), 2);
	assert_int_equal(status[2], -ENOENT);
	t_kv_free(src);
	t_kv_free(dst);
	free(a);
	free(b);
	free(c);
	tutti_store_close(st);
}

static void
test_store_chain_longer_than_the_store_is_enospc_at_its_tail(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *st = open_store(f, &f->geo, "short", 2, 8, NULL);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	uint8_t *keys = t_keys_new(&f->r, 10, KB);
	uint32_t ids[10 * BPC];
	int32_t status[10];
	struct tutti_stats s = {.size = sizeof(s)};

	t_random_distinct(&f->r, ids, 10 * BPC, NR_BLOCKS);
	assert_int_equal(save1(st, src, keys, 10, 0, ids, 10 * BPC, status), 8);
	assert_all_status(status, 8, 0);
	assert_int_equal(status[8], -ENOSPC);
	assert_int_equal(status[9], -ENOSPC);
	assert_int_equal(tutti_store_lookup(st, keys, 10, NULL), 8);
	assert_int_equal(tutti_store_get_stats(st, &s), 0);
	assert_int_equal(s.save_no_space, 2);
	assert_int_equal(s.used_slots, 8);
	t_kv_free(src);
	free(keys);
	tutti_store_close(st);
}

#define TREE_MAX 48u
#define TREE_DEPTH 7u

struct node {
	uint8_t key[KB];
	uint32_t ids[BPC];
	int parent;
	uint32_t depth; /* 0 for a root */
};

/* The chain from the root to \p n: keys and block ids. Returns its length. */
static uint32_t
chain_of(const struct node *nodes, int n, uint8_t *keys, uint32_t *ids)
{
	int path[TREE_DEPTH + 1];
	uint32_t len = 0;

	for (int i = n; i >= 0; i = nodes[i].parent) {
		path[len++] = i;
	}
	for (uint32_t i = 0; i < len; i++) {
		const struct node *x = &nodes[path[len - 1 - i]];

		memcpy(keys + i * KB, x->key, KB);
		memcpy(ids + i * BPC, x->ids, sizeof(x->ids));
	}
	return len;
}

static void
test_store_eviction_under_pressure_keeps_chains_reachable(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *st = open_store(f, &f->geo, "tree", 2, 12, NULL);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_CROSS_LAYER, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);
	struct node *nodes = calloc(TREE_MAX, sizeof(*nodes));
	uint32_t perm[NR_BLOCKS], nr_nodes = 0;
	struct tutti_stats s = {.size = sizeof(s)};

	assert_non_null(nodes);
	t_random_distinct(&f->r, perm, NR_BLOCKS, NR_BLOCKS);
	while (nr_nodes < TREE_MAX) {
		uint8_t keys[(TREE_DEPTH + 1) * KB];
		uint32_t ids[(TREE_DEPTH + 1) * BPC], len, added, written = 0;
		int32_t status[TREE_DEPTH + 1];
		int base = -1;
		int64_t rc;

		/* Grow the tree: a new root, or a branch off a random node (a shared prefix). */
		if (nr_nodes > 0 && t_rng_below(&f->r, 4) != 0) {
			base = (int)t_rng_below(&f->r, nr_nodes);
			if (nodes[base].depth >= TREE_DEPTH) {
				base = nodes[base].parent;
			}
		}
		added = 1 + t_rng_below(&f->r, 3);
		for (uint32_t i = 0; i < added && nr_nodes < TREE_MAX; i++) {
			struct node *x = &nodes[nr_nodes];

			if (base >= 0 && nodes[base].depth >= TREE_DEPTH) {
				break;
			}
			t_rng_fill(&f->r, x->key, KB);
			memcpy(x->ids, perm + nr_nodes * BPC, sizeof(x->ids));
			x->parent = base;
			x->depth = base < 0 ? 0 : nodes[base].depth + 1;
			base = (int)nr_nodes++;
		}
		/* Save the whole chain to the new leaf: evicted ancestors are stored again. */
		len = chain_of(nodes, base, keys, ids);
		rc = save1(st, src, keys, len, 0, ids, len * BPC, status);
		for (uint32_t i = 0; i < len; i++) {
			assert_true(status[i] == 0 || status[i] == 1);
			written += status[i] == 0;
		}
		assert_int_equal(rc, written);
		assert_int_equal(tutti_store_lookup(st, keys, len, NULL), len);
		/* Its data is intact. */
		t_kv_poison(dst, T_POISON);
		assert_int_equal(load1(st, dst, keys, len, 0, 0, ids, len * BPC, 0, 2, status),
		                 len);
		assert_moved(src, ids, dst, ids, len * BPC, 0, 2);
		/* No chunk of any chain is stored while an earlier chunk of its chain is not. */
		for (uint32_t n = 0; n < nr_nodes; n++) {
			uint32_t l = chain_of(nodes, (int)n, keys, ids);
			int64_t h = tutti_store_lookup(st, keys, l, NULL);

			assert_true(h >= 0 && h <= l);
			if (h < l) {
				assert_int_equal(load1(st, dst, keys, l, (uint32_t)h, 0, ids,
				                       (l - (uint32_t)h) * BPC, 0, 2, status),
				                 0);
				assert_all_status(status, l - (uint32_t)h, -ENOENT);
			}
		}
		assert_int_equal(tutti_store_get_stats(st, &s), 0);
		assert_true(s.used_slots <= 12);
	}
	assert_true(s.evictions > 0);
	assert_int_equal(s.used_slots, 12);
	assert_int_equal(s.save_no_space, 0);
	free(nodes);
	t_kv_free(src);
	t_kv_free(dst);
	tutti_store_close(st);
}

/* ---- statistics ---- */

static void
test_store_stats_counters_move_as_expected(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);
	uint8_t *keys = t_keys_new(&f->r, 4, KB), *other = t_keys_new(&f->r, 2, KB);
	uint32_t ids[4 * BPC];
	int32_t status[4];
	struct tutti_stats s;
	const uint64_t obj = 8192;

	memset(&s, 0xff, sizeof(s));
	s.size = sizeof(s);
	assert_int_equal(tutti_store_get_stats(f->st, &s), 0);
	assert_int_equal(s.nr_dirs, 1);
	assert_int_equal(s.slot_bytes, 4096 + 2 * obj);
	assert_int_equal(s.capacity_slots, 64);
	assert_int_equal(s.used_slots, 0);
	assert_int_equal(s.lookups, 0);
	assert_int_equal(s.save_chunks, 0);
	assert_int_equal(s.io_ops, 0);
	assert_true(s.staging_bytes > 0 && s.staging_bytes % 4096 == 0);

	t_random_distinct(&f->r, ids, 4 * BPC, NR_BLOCKS);
	assert_int_equal(save1(f->st, src, keys, 3, 0, ids, 3 * BPC, status), 3);
	assert_int_equal(save1(f->st, src, keys, 3, 0, ids, 3 * BPC, status), 0);
	assert_int_equal(save1(f->st, src, other, 2, 1, ids, BPC, status), 0);
	assert_int_equal(tutti_store_get_stats(f->st, &s), 0);
	assert_int_equal(s.used_slots, 3);
	assert_int_equal(s.save_chunks, 3);
	assert_int_equal(s.save_bytes, 3 * 2 * obj);
	assert_int_equal(s.save_present, 3);
	assert_int_equal(s.save_orphans, 1);
	assert_int_equal(s.save_no_space, 0);
	assert_int_equal(s.save_errors, 0);
	assert_true(s.save_ns > 0);
	assert_true(s.io_ops > 0);
	/* gpu-uring's submissions are the wakeups of the kernel's SQ thread, which follow how
	 * often that thread fell asleep, not the I/O count: none while it never went idle, or more
	 * than the I/Os where a loaded machine was slow to run it after a wakeup. Where the host
	 * issues its I/O they are that thread's calls, at least one for what was saved. */
	if (g_engine != TUTTI_ENGINE_GPU_URING) {
		assert_true(s.io_submits > 0 && s.io_submits <= s.io_ops);
	} else if (t_engine_opts != NULL && strcmp(t_engine_opts, "submit=host") == 0) {
		assert_true(s.io_submits > 0);
	}

	assert_int_equal(tutti_store_lookup(f->st, keys, 4, NULL), 3);
	assert_int_equal(tutti_store_lookup(f->st, other, 2, NULL), 0);
	assert_int_equal(load1(f->st, dst, keys, 3, 0, 0, ids, 3 * BPC, 0, 2, status), 3);
	assert_int_equal(load1(f->st, dst, keys, 3, 2, 0, ids, BPC, 1, 2, status), 1);
	assert_int_equal(load1(f->st, dst, other, 1, 0, 0, ids, BPC, 0, 2, status), 0);
	assert_int_equal(tutti_store_get_stats(f->st, &s), 0);
	assert_int_equal(s.lookups, 2);
	assert_int_equal(s.lookup_keys, 6);
	assert_int_equal(s.lookup_hits, 3);
	assert_int_equal(s.load_chunks, 4);
	assert_int_equal(s.load_bytes, 3 * 2 * obj + obj);
	assert_int_equal(s.load_errors, 1);
	assert_true(s.load_ns > 0);
	assert_int_equal(s.evictions, 0);

	s.size = sizeof(s) - 8;
	assert_int_equal(tutti_store_get_stats(f->st, &s), -EINVAL);
	assert_int_equal(tutti_store_get_stats(f->st, NULL), -EINVAL);
	t_kv_free(src);
	t_kv_free(dst);
	free(keys);
	free(other);
}

/* ---- pipelines, stores, threads ---- */

static void
qd1_one_object(struct tutti_store_opts *o)
{
	o->queue_depth = 1;
	o->max_io_bytes = 1;
}

static void
qd3_one_object(struct tutti_store_opts *o)
{
	o->queue_depth = 3;
	o->max_io_bytes = 4096;
	if (o->engine == TUTTI_ENGINE_POSIX) {
		o->engine_opts = "threads=2";
	}
}

static void
staging_two_units(struct tutti_store_opts *o)
{
	o->staging_bytes = 2 * 2 * 32768; /* two I/Os of two aligned-geometry objects */
}

static void
test_store_small_pipelines_move_many_chunks(void **state)
{
	struct fixture *f = *state;
	void (*tweaks[])(struct tutti_store_opts *) = {qd1_one_object, qd3_one_object,
	                                               staging_two_units};
	const struct tutti_geometry geos[2] = {tiny(), aligned()};

	for (size_t gi = 0; gi < 2; gi++) {
		for (size_t ti = 0; ti < sizeof(tweaks) / sizeof(tweaks[0]); ti++) {
			char name[32];
			struct tutti_store *st;
			struct t_kv *src = t_kv_new(&geos[gi], T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
			struct t_kv *dst = t_kv_new(&geos[gi], T_LAYOUT_SPLIT3, NR_BLOCKS, NULL);
			uint8_t *keys = t_keys_new(&f->r, 12, KB);
			uint32_t sids[12 * BPC], dids[12 * BPC];
			struct tutti_request reqs[3];
			int32_t status[12];

			snprintf(name, sizeof(name), "pipe%zu%zu", gi, ti);
			st = open_store(f, &geos[gi], name, 2, 16, tweaks[ti]);
			t_random_distinct(&f->r, sids, 12 * BPC, NR_BLOCKS);
			t_random_distinct(&f->r, dids, 12 * BPC, NR_BLOCKS);
			/* Three chains of four chunks, the last one partial, in one call. */
			for (uint32_t q = 0; q < 3; q++) {
				reqs[q] = t_request(keys + q * 4 * KB, 4, 0, 0, sids + q * 4 * BPC,
				                    q == 2 ? 3 * BPC + 1 : 4 * BPC);
			}
			assert_int_equal(tutti_store_save(st, src->kv, reqs, 3, status), 12);
			assert_all_status(status, 12, 0);
			for (uint32_t q = 0; q < 3; q++) {
				reqs[q].block_ids = dids + q * 4 * BPC;
			}
			assert_int_equal(tutti_store_load(st, dst->kv, reqs, 3, 0, 2, status), 12);
			assert_all_status(status, 12, 0);
			assert_moved(src, sids, dst, dids, 11 * BPC + 1, 0, 2);
			tutti_store_close(st);
			t_kv_free(src);
			t_kv_free(dst);
			free(keys);
		}
	}
	assert_int_equal(f->rec.nr_err, 0);
}

static void
test_store_two_stores_in_one_process_are_independent(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *other = open_store(f, &f->geo, "other", 1, 16, NULL);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, NULL);
	uint8_t *x = t_keys_new(&f->r, 2, KB), *y = t_keys_new(&f->r, 2, KB);
	uint32_t xs[2 * BPC], ys[2 * BPC], dids[2 * BPC];
	struct tutti_stats s = {.size = sizeof(s)};

	t_random_distinct(&f->r, xs, 2 * BPC, NR_BLOCKS);
	t_random_distinct(&f->r, ys, 2 * BPC, NR_BLOCKS);
	t_random_distinct(&f->r, dids, 2 * BPC, NR_BLOCKS);
	assert_int_equal(save1(f->st, src, x, 2, 0, xs, 2 * BPC, NULL), 2);
	assert_int_equal(tutti_store_lookup(other, x, 2, NULL), 0);
	assert_int_equal(save1(other, src, y, 2, 0, ys, 2 * BPC, NULL), 2);
	assert_int_equal(tutti_store_lookup(f->st, y, 2, NULL), 0);
	/* The same key chain in both stores, with different data in each. */
	assert_int_equal(save1(other, src, x, 2, 0, ys, 2 * BPC, NULL), 2);
	assert_int_equal(load1(f->st, dst, x, 2, 0, 0, dids, 2 * BPC, 0, 2, NULL), 2);
	assert_moved(src, xs, dst, dids, 2 * BPC, 0, 2);
	t_kv_poison(dst, T_POISON);
	assert_int_equal(load1(other, dst, x, 2, 0, 0, dids, 2 * BPC, 0, 2, NULL), 2);
	assert_moved(src, ys, dst, dids, 2 * BPC, 0, 2);
	assert_int_equal(tutti_store_get_stats(f->st, &s), 0);
	assert_int_equal(s.used_slots, 2);
	assert_int_equal(tutti_store_get_stats(other, &s), 0);
	assert_int_equal(s.used_slots, 4);
	tutti_store_close(other);
	/* Closing one leaves the other working. */
	t_kv_poison(dst, T_POISON);
	assert_int_equal(load1(f->st, dst, x, 2, 0, 0, dids, 2 * BPC, 0, 2, NULL), 2);
	assert_moved(src, xs, dst, dids, 2 * BPC, 0, 2);
	t_kv_free(src);
	t_kv_free(dst);
	free(x);
	free(y);
}

static void
test_store_reopens_and_works_after_close(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);

	round_trip(f, f->st, src, dst, 2, 2 * BPC);
	tutti_store_close(f->st);
	f->st = NULL;
	f->st = open_store(f, &f->geo, "main", 1, 64, NULL);
	round_trip(f, f->st, src, dst, 3, 3 * BPC);
	t_kv_free(src);
	t_kv_free(dst);
}

struct worker {
	struct fixture *f;
	const struct t_kv *src;
	struct t_kv *dst;
	uint64_t seed;
	int failures;
};

/* cmocka's asserts must not run off the main thread: workers count failures instead. */
static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct t_rng r;

	t_rng_init(&r, w->seed);
	for (int it = 0; it < 10; it++) {
		uint8_t keys[3 * KB];
		uint32_t sids[3 * BPC], dids[3 * BPC];
		struct tutti_request req;
		int32_t status[3];

		t_rng_fill(&r, keys, sizeof(keys));
		t_random_distinct(&r, sids, 3 * BPC, NR_BLOCKS);
		t_random_distinct(&r, dids, 3 * BPC, NR_BLOCKS);
		req = t_request(keys, 3, 0, 0, sids, 3 * BPC);
		w->failures += tutti_store_save(w->f->st, w->src->kv, &req, 1, status) != 3;
		w->failures += tutti_store_lookup(w->f->st, keys, 3, NULL) != 3;
		req.block_ids = dids;
		w->failures += tutti_store_load(w->f->st, w->dst->kv, &req, 1, 0, 2, status) != 3;
		for (uint32_t i = 0; i < 3 * BPC; i++) {
			w->failures += !t_kv_block_equal(w->src, sids[i], w->dst, dids[i], 0);
			w->failures += !t_kv_block_equal(w->src, sids[i], w->dst, dids[i], 1);
		}
	}
	return NULL;
}

static void
test_store_concurrent_callers_on_one_handle(void **state)
{
	struct fixture *f = *state;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->r);
	struct worker w[4];
	pthread_t tid[4];
	struct tutti_stats s = {.size = sizeof(s)};

	/* Room for every chunk: a worker's chain must not be evicted between its calls. */
	tutti_store_close(f->st);
	f->st = NULL;
	f->st = open_store(f, &f->geo, "threads", 1, 128, NULL);

	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){.f = f, .src = src, .seed = 1000 + (uint64_t)i};
		w[i].dst = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, NULL);
		assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(tid[i], NULL), 0);
		assert_int_equal(w[i].failures, 0);
		t_kv_free(w[i].dst);
	}
	assert_int_equal(tutti_store_get_stats(f->st, &s), 0);
	assert_int_equal(s.save_chunks, 4 * 10 * 3);
	assert_int_equal(s.used_slots, 4 * 10 * 3);
	assert_int_equal(s.evictions, 0);
	assert_int_equal(s.load_chunks, 4 * 10 * 3);
	t_kv_free(src);
}

/* Engine gpu-uring on tmpfs with loads by the copy engine: the whole staging becomes bounce
 * slots while the I/Os in flight keep the cap of page-cache-backed files (64 MiB), and KV moves
 * bit for bit through more I/Os than either (with host KV the twin drives the ring). */
static void
test_store_gpu_uring_dma_on_tmpfs_keeps_the_cap_on_ios_in_flight(void **state)
{
	struct fixture *f = *state;
	struct tutti_geometry g;
	char shm[] = "/dev/shm/tutti-test.XXXXXX";
	char opts[64];
	char *dir;
	const char *dirs[1];
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;
	struct t_kv *src, *dst;
	struct statfs sfs;

	if (g_engine != TUTTI_ENGINE_GPU_URING) {
		skip();
	}
	if (statfs("/dev/shm", &sfs) != 0 || sfs.f_type != TMPFS_MAGIC || mkdtemp(shm) == NULL) {
		skip(); /* no tmpfs to test on */
	}
	/* Objects of 1 MiB: 8 layers of 16 blocks of 64 KiB a chunk. */
	tutti_geometry_init(&g);
	g.nr_layers = 8;
	g.nr_kv_heads = 8;
	g.head_dim = 128;
	dir = t_path_join(shm, "dma");
	dirs[0] = dir;
	t_store_opts(&o, &g, dirs, 1, 20, (uint32_t)g_engine, &f->rec);
	snprintf(opts, sizeof(opts), "%s%scopy=dma", o.engine_opts != NULL ? o.engine_opts : "",
	         o.engine_opts != NULL ? "," : "");
	o.engine_opts = opts;
	o.staging_bytes = 96ull << 20;
	o.log_level = TUTTI_LOG_DEBUG;
	t_log_reset(&f->rec);
	assert_int_equal(tutti_store_open(&g, &o, &st), 0);
	src = t_kv_new(&g, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, &f->r);
	dst = t_kv_new(&g, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);
	/* 16 chunks: 128 reads, through 96 slots, 64 in flight at most. */
	round_trip(f, st, src, dst, NR_BLOCKS / 16, NR_BLOCKS);
	assert_true(t_log_contains(&f->rec, "96 bounce slots of 1048576 bytes, 64 I/Os in flight"));
	assert_int_equal(f->rec.nr_err, 0);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
	t_tmpdir_remove(strdup(shm));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_store_round_trip_across_layouts),
	    T(test_store_direct_and_staged_paths_agree_on_disk),
	    T(test_store_llama_sized_objects_round_trip),
	    T(test_store_lookup_returns_longest_stored_prefix),
	    T(test_store_list_returns_every_chunk_once_with_its_blocks),
	    T(test_store_layer_range_loads_only_those_layers),
	    T(test_store_skip_blocks_loads_from_inside_a_chunk),
	    T(test_store_partial_last_chunk_round_trips_and_ends_the_chain),
	    T(test_store_padding_on_disk_never_holds_stale_bytes),
	    T(test_store_consecutive_chunks_are_striped_across_directories),
	    T(test_store_save_and_load_status_codes),
	    T(test_store_requests_sharing_a_prefix_in_one_call),
	    T(test_store_evicts_least_recently_used_chain_tail_first),
	    T(test_store_saving_a_stored_chain_counts_as_a_use),
	    T(test_store_chain_longer_than_the_store_is_enospc_at_its_tail),
	    T(test_store_eviction_under_pressure_keeps_chains_reachable),
	    T(test_store_stats_counters_move_as_expected),
	    T(test_store_small_pipelines_move_many_chunks),
	    T(test_store_two_stores_in_one_process_are_independent),
	    T(test_store_reopens_and_works_after_close),
	    T(test_store_concurrent_callers_on_one_handle),
	    T(test_store_gpu_uring_dma_on_tmpfs_keeps_the_cap_on_ios_in_flight),
	};

	return t_run_per_engine("store", tests, sizeof(tests) / sizeof(tests[0]), true, &g_engine);
}
