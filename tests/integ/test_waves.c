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
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <cmocka.h>

#include "engine/engine_impl.h"
#include "store/store_impl.h"
#include "t_batch.h"
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
	struct t_log rec;
	struct t_rng r;
	struct t_batch batch; /* CHUNKS chunks of LAYERS layers */
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	t_rng_init(&f->r, t_seed(211));
	t_batch_init(&f->batch, &f->r, LAYERS, BPC, CHUNKS, KB);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	t_tmpdir_remove(f->tmp);
	t_batch_free(&f->batch);
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

	t_batch_store_opts(&f->batch, &o, dirs, (uint32_t)g_engine, &f->rec);
	o.queue_depth = 8;
	if (g_engine == TUTTI_ENGINE_POSIX) {
		o.engine_opts = "threads=4";
	}
	o.max_io_bytes = (slots > 1 ? 2 : 1) * tutti_geometry_object_bytes(&f->batch.geo);
	o.staging_bytes = (uint64_t)slots * tutti_geometry_object_bytes(&f->batch.geo);
	assert_int_equal(tutti_store_open(&f->batch.geo, &o, &st), 0);
	st->engine->host_waves = waves;
	return st;
}

/* The case of directory \p name in the fixture's, both KV in \p layout. */
static struct t_store_case
case_new(struct fixture *f, const char *name, enum t_layout layout)
{
	return t_store_case_new(f->tmp, name, &f->batch.geo, BLOCKS, layout, layout, &f->r);
}

static void
round_trip(struct fixture *f, const char *name, enum t_layout layout, uint32_t slots)
{
	struct t_store_case tc = case_new(f, name, layout);
	struct tutti_store *st = open_store(f, tc.dir, slots, true);
	struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};

	t_batch_save(&f->batch, st, tc.src);
	/* The path ran: the twin and its staging exist. */
	assert_non_null(st->engine->twin);
	assert_true(st->engine->stage_ops == &tt_objmover_twin);
	t_batch_assert_load(&f->batch, st, tc.src, tc.dst, 0, LAYERS, T_BATCH_NONE);
	t_batch_assert_load(&f->batch, st, tc.src, tc.dst, 3, 7, T_BATCH_NONE);
	/* The caller's waits were counted, within the calls' own time. */
	tutti_store_get_stats(st, &s0);
	assert_true(s0.wave_io_wait_ns > 0);
	assert_true(s0.wave_io_wait_ns + s0.wave_copy_wait_ns <= s0.save_ns + s0.load_ns);
	/* What waves wrote, the lanes' path reads (same bytes, checksums and padding); the lanes
	 * have no waves to wait for. */
	st->engine->host_waves = false;
	t_batch_assert_load(&f->batch, st, tc.src, tc.dst, 0, LAYERS, T_BATCH_NONE);
	tutti_store_get_stats(st, &s1);
	assert_int_equal(s1.wave_io_wait_ns, s0.wave_io_wait_ns);
	assert_int_equal(s1.wave_copy_wait_ns, s0.wave_copy_wait_ns);
	assert_int_equal(f->rec.nr_err, 0);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

static void
test_waves_round_trip_bit_exact(void **state)
{
	struct fixture *f = *state;

	round_trip(f, "s8-blocks", T_LAYOUT_BLOCKS_FIRST, 8);
	round_trip(f, "s8-kvfirst", T_LAYOUT_KV_FIRST, 8);
	round_trip(f, "s2-split3", T_LAYOUT_SPLIT3, 2);
	round_trip(f, "s1-cross", T_LAYOUT_CROSS_LAYER, 1);
	/* Staging larger than the loads: every transfer is cut small, over up to eight buffers. */
	round_trip(f, "s256-blocks", T_LAYOUT_BLOCKS_FIRST, 256);
}

/* The cut: four buffers of full waves for a transfer of several stagings; a small one in eight
 * waves at least, over as many buffers as keep its read-ahead, never more than the mover
 * orders nor slots than there are. */
static void
test_waves_cut_small_transfers_finer(void **state)
{
	uint32_t per, bufs;

	(void)state;
	/* slots, total objects: per_wave, buffers. A 2K-token prefix of 32 layers is 256 objects,
	 * one chunk 32. */
	static const uint32_t cases[][4] = {
	    {256, 4096, 64, 4}, {256, 512, 64, 4}, {256, 256, 32, 8}, {256, 32, 4, 8},
	    {256, 300, 37, 6},  {1, 5, 1, 1},      {8, 8, 1, 8},
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		tt_waves_cut(cases[c][0], cases[c][1], &per, &bufs);
		assert_int_equal(per, cases[c][2]);
		assert_int_equal(bufs, cases[c][3]);
	}
	for (uint32_t slots = 1; slots <= 300; slots++) {
		uint32_t full = slots / (slots < 4 ? slots : 4);

		for (uint32_t total = 1; total <= 3000; total += 7) {
			tt_waves_cut(slots, total, &per, &bufs);
			assert_true(per >= 1 && bufs >= 1 && bufs <= TT_OBJMOVER_BUFS);
			assert_true((uint64_t)per * bufs <= slots);
			if (total / 8 < full) {
				assert_true((total + per - 1) / per >= (total < 8 ? total : 8));
			} else {
				assert_int_equal(per, full);
				assert_int_equal(bufs, slots < 4 ? slots : 4);
			}
		}
	}
}

static void
test_waves_read_what_the_lanes_wrote(void **state)
{
	struct fixture *f = *state;
	struct t_store_case tc = case_new(f, "lanes-wrote", T_LAYOUT_KV_FIRST);
	struct tutti_store *st = open_store(f, tc.dir, 8, false);

	t_batch_save(&f->batch, st, tc.src);
	st->engine->host_waves = true;
	t_batch_assert_load(&f->batch, st, tc.src, tc.dst, 0, LAYERS, T_BATCH_NONE);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

static void
test_waves_damaged_object_fails_its_chunk_alone(void **state)
{
	struct fixture *f = *state;
	struct t_store_case tc = case_new(f, "damaged", T_LAYOUT_BLOCKS_FIRST);
	struct tutti_store *st = open_store(f, tc.dir, 8, true);
	const uint32_t bad = 7;

	t_batch_save(&f->batch, st, tc.src);
	t_batch_flip_bit(&f->batch, tc.path, bad, 2, 300, 6);
	t_batch_assert_load(&f->batch, st, tc.src, tc.dst, 0, LAYERS, bad);
	assert_int_equal(t_store_stats(st).load_corrupt, 1);
	assert_true(t_log_contains(&f->rec, "checksum mismatch"));
	/* The damaged chunk is gone; the others load again. */
	assert_int_equal(tutti_store_lookup(st, f->batch.keys, CHUNKS, NULL), bad);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_waves_round_trip_bit_exact),
	    T(test_waves_read_what_the_lanes_wrote),
	    T(test_waves_damaged_object_fails_its_chunk_alone),
	    cmocka_unit_test(test_waves_cut_small_transfers_finer),
	};

	return t_run_per_engine("waves", tests, sizeof(tests) / sizeof(tests[0]), false, &g_engine);
}
