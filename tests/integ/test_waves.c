/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the waves of the CPU-driven engines' GPU path (src/engine/waves.c), engines uring
 * and posix, run in CI through the object mover's CPU twin (host KV, the engine's test switch
 * host_waves): saves and loads bit-exact with staging of 8, 2 and 1 object slots (hundreds of
 * waves, every buffer reused), across layouts; what waves write the lanes' path reads and the
 * reverse (the same objects, checksums and padding); a layer range; a damaged object fails its
 * chunk alone. The twin runs the mover's steps only when a marker is waited for, so a wave
 * buffer reused before its copy ran would show here as wrong bytes.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/engine_impl.h"
#include "store/store_impl.h"
#include "t_disk.h"
#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define LAYERS 8u
#define BPC 4u
#define CHUNKS 40u
#define BLOCKS (CHUNKS * BPC)
#define KB 32u

static int g_engine;

struct fixture {
	char *tmp;
	struct tutti_geometry geo;
	struct t_log rec;
	struct t_rng r;
	uint8_t *keys;
	uint32_t src_ids[BLOCKS], dst_ids[BLOCKS];
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	f->geo = t_geo_small(LAYERS, BPC);
	t_rng_init(&f->r, t_seed(211));
	f->keys = t_keys_new(&f->r, CHUNKS, KB);
	t_random_distinct(&f->r, f->src_ids, BLOCKS, BLOCKS);
	t_random_distinct(&f->r, f->dst_ids, BLOCKS, BLOCKS);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	t_tmpdir_remove(f->tmp);
	free(f->keys);
	free(f);
	return 0;
}

/* A store whose staging holds \p slots objects; host KV goes through waves when \p waves. */
static struct tutti_store *
open_store(struct fixture *f, const char *dir, uint32_t slots, bool waves)
{
	const char *dirs[1] = {dir};
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;

	t_store_opts(&o, &f->geo, dirs, 1, CHUNKS + 4, (uint32_t)g_engine, &f->rec);
	o.key_bytes = KB;
	o.queue_depth = 8;
	o.posix_threads = 4;
	o.max_io_bytes = (slots > 1 ? 2 : 1) * tutti_geometry_object_bytes(&f->geo);
	o.staging_bytes = (uint64_t)slots * tutti_geometry_object_bytes(&f->geo);
	assert_int_equal(tutti_store_open(&f->geo, &o, &st), 0);
	st->engine->host_waves = waves;
	return st;
}

static struct tutti_request
request(struct fixture *f, const uint32_t *ids)
{
	return t_request(f->keys, CHUNKS, 0, 0, ids, BLOCKS);
}

static void
save_all(struct fixture *f, struct tutti_store *st, struct t_kv *src)
{
	struct tutti_request r = request(f, f->src_ids);
	int32_t status[CHUNKS];

	assert_int_equal(tutti_store_save(st, src->kv, &r, 1, status), CHUNKS);
	for (uint32_t i = 0; i < CHUNKS; i++) {
		assert_int_equal(status[i], 0);
	}
}

static int64_t
load_range(struct fixture *f, struct tutti_store *st, struct t_kv *dst, uint32_t lb, uint32_t le,
           int32_t *status)
{
	struct tutti_request r = request(f, f->dst_ids);

	t_kv_poison(dst, T_POISON);
	return tutti_store_load(st, dst->kv, &r, 1, lb, le, status);
}

/* Chunk \p k's layers [lb, le) loaded bit-exact, and the others untouched. */
static bool
chunk_equal(const struct fixture *f, const struct t_kv *src, const struct t_kv *dst, uint32_t k,
            uint32_t lb, uint32_t le)
{
	for (uint32_t b = k * BPC; b < (k + 1) * BPC; b++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			bool in = l >= lb && l < le;

			if (in && !t_kv_block_equal(src, f->src_ids[b], dst, f->dst_ids[b], l)) {
				return false;
			}
			if (!in && !t_kv_block_is(dst, l, f->dst_ids[b], T_POISON)) {
				return false;
			}
		}
	}
	return true;
}

static void
assert_loaded(struct fixture *f, struct tutti_store *st, struct t_kv *src, struct t_kv *dst,
              uint32_t lb, uint32_t le)
{
	int32_t status[CHUNKS];

	assert_int_equal(load_range(f, st, dst, lb, le, status), CHUNKS);
	for (uint32_t k = 0; k < CHUNKS; k++) {
		assert_int_equal(status[k], 0);
		assert_true(chunk_equal(f, src, dst, k, lb, le));
	}
}

static void
round_trip(struct fixture *f, const char *name, enum t_layout layout, uint32_t slots)
{
	char *dir = t_path_join(f->tmp, name);
	struct t_kv *src = t_kv_new(&f->geo, layout, BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, layout, BLOCKS, NULL);
	struct tutti_store *st = open_store(f, dir, slots, true);

	save_all(f, st, src);
	/* The path ran: the twin and its staging exist. */
	assert_non_null(st->engine->twin);
	assert_true(st->engine->stage_ops == &tt_objmover_twin);
	assert_loaded(f, st, src, dst, 0, LAYERS);
	assert_loaded(f, st, src, dst, 3, 7);
	/* What waves wrote, the lanes' path reads (same bytes, checksums and padding). */
	st->engine->host_waves = false;
	assert_loaded(f, st, src, dst, 0, LAYERS);
	assert_int_equal(f->rec.nr_err, 0);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
}

static void
test_waves_round_trip_bit_exact(void **state)
{
	struct fixture *f = *state;

	round_trip(f, "s8-blocks", T_LAYOUT_BLOCKS_FIRST, 8);
	round_trip(f, "s8-kvfirst", T_LAYOUT_KV_FIRST, 8);
	round_trip(f, "s2-split3", T_LAYOUT_SPLIT3, 2);
	round_trip(f, "s1-cross", T_LAYOUT_CROSS_LAYER, 1);
}

static void
test_waves_read_what_the_lanes_wrote(void **state)
{
	struct fixture *f = *state;
	char *dir = t_path_join(f->tmp, "lanes-wrote");
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_KV_FIRST, BLOCKS, NULL);
	struct tutti_store *st = open_store(f, dir, 8, false);

	save_all(f, st, src);
	st->engine->host_waves = true;
	assert_loaded(f, st, src, dst, 0, LAYERS);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
}

static void
test_waves_damaged_object_fails_its_chunk_alone(void **state)
{
	struct fixture *f = *state;
	char *dir = t_path_join(f->tmp, "damaged");
	char *path = t_data_path(dir);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, BLOCKS, NULL);
	struct tutti_store *st = open_store(f, dir, 8, true);
	const uint32_t bad = 7;
	int32_t status[CHUNKS];
	uint32_t slot;

	save_all(f, st, src);
	slot = t_key_slot(path, &f->geo, f->keys + (uint64_t)bad * KB, KB);
	assert_int_equal(t_disk_flip_bit(path, t_object_off(&f->geo, slot, 2) + 300, 6), 0);
	assert_int_equal(load_range(f, st, dst, 0, LAYERS, status), CHUNKS - 1);
	for (uint32_t k = 0; k < CHUNKS; k++) {
		if (k == bad) {
			assert_int_equal(status[k], -EBADMSG);
		} else {
			assert_int_equal(status[k], 0);
			assert_true(chunk_equal(f, src, dst, k, 0, LAYERS));
		}
	}
	assert_int_equal(t_store_stats(st).load_corrupt, 1);
	assert_true(t_log_contains(&f->rec, "checksum mismatch"));
	/* The damaged chunk is gone; the others load again. */
	assert_int_equal(tutti_store_lookup(st, f->keys, CHUNKS, NULL), bad);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(path);
	free(dir);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_waves_round_trip_bit_exact),
	    T(test_waves_read_what_the_lanes_wrote),
	    T(test_waves_damaged_object_fails_its_chunk_alone),
	};

	return t_run_per_engine("waves", tests, sizeof(tests) / sizeof(tests[0]), false, &g_engine);
}
