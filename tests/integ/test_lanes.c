/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the CPU path's lanes (src/engine/cpu_path.c), engines uring and posix: many chunks
 * saved and loaded bit-exact through lanes that share one batch, on the direct path and on the
 * staged path with fewer staging buffers than lanes; a damaged object fails its chunk alone
 * while the lanes move the others; fsck checks everything through them; and on page-cache-backed
 * files every object is an I/O of its own, hashed by pieces as it is copied. Each runs in $TMPDIR
 * and, where $TMPDIR is not tmpfs, again in a directory of /dev/shm when that is tmpfs.
 */
#include <linux/magic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>
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
#define CHUNKS 48u
#define BLOCKS (CHUNKS * BPC)
#define KB 32u
#define DEPTH 8u /* unit slots: lanes share them */

static int g_engine;

struct fixture {
	char *tmp;
	char *shm;         /* a tmpfs directory when $TMPDIR is not tmpfs, or NULL */
	bool tmp_is_tmpfs; /* $TMPDIR is tmpfs */
	struct t_log rec;
	struct t_rng r;
	struct t_batch batch; /* CHUNKS chunks of LAYERS layers */
};

static bool
is_tmpfs(const char *dir)
{
	struct statfs sfs;

	return statfs(dir, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC;
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char tmpl[] = "/dev/shm/tutti-lanes.XXXXXX";

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	f->tmp_is_tmpfs = is_tmpfs(f->tmp);
	if (!f->tmp_is_tmpfs && mkdtemp(tmpl) != NULL) {
		f->shm = strdup(tmpl);
		if (!is_tmpfs(f->shm)) {
			t_tmpdir_remove(f->shm);
			f->shm = NULL;
		}
	}
	t_rng_init(&f->r, t_seed(97));
	t_batch_init(&f->batch, &f->r, LAYERS, BPC, CHUNKS, KB);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	t_tmpdir_remove(f->tmp);
	t_tmpdir_remove(f->shm);
	t_batch_free(&f->batch);
	free(f);
	return 0;
}

/* The directories to run in: $TMPDIR, then the tmpfs one (if any); NULL past the end. */
static const char *
base(const struct fixture *f, int i)
{
	return i == 0 ? f->tmp : i == 1 ? f->shm : NULL;
}

/* A tmpfs directory to run in, or NULL. */
static const char *
tmpfs_base(const struct fixture *f)
{
	return f->tmp_is_tmpfs ? f->tmp : f->shm;
}

/* A store in \p dir whose staging holds \p staging_units I/Os of two objects each: fewer staging
 * buffers than lanes, so that lanes without one leave staged units to the others. */
static struct tutti_store *
open_store_threads(struct fixture *f, const char *dir, uint32_t staging_units,
                   uint32_t posix_threads)
{
	const char *dirs[1] = {dir};
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;
	char opts[32];

	t_batch_store_opts(&f->batch, &o, dirs, (uint32_t)g_engine, &f->rec);
	o.queue_depth = DEPTH;
	o.max_io_bytes = 2 * tutti_geometry_object_bytes(&f->batch.geo);
	o.staging_bytes = staging_units * o.max_io_bytes;
	if (posix_threads != 0 && g_engine == TUTTI_ENGINE_POSIX) {
		snprintf(opts, sizeof(opts), "threads=%u", posix_threads);
		o.engine_opts = opts;
	}
	assert_int_equal(tutti_store_open(&f->batch.geo, &o, &st), 0);
	return st;
}

static struct tutti_store *
open_store(struct fixture *f, const char *dir, uint32_t staging_units)
{
	return open_store_threads(f, dir, staging_units, DEPTH);
}

/* The case of directory \p name in \p where, both KV in \p layout. */
static struct t_store_case
case_new(struct fixture *f, const char *where, const char *name, enum t_layout layout)
{
	return t_store_case_new(where, name, &f->batch.geo, BLOCKS, layout, layout, &f->r);
}

static void
round_trip_in(struct fixture *f, const char *where, const char *name, enum t_layout layout,
              uint32_t staging_units)
{
	struct t_store_case tc = case_new(f, where, name, layout);
	struct tutti_store *st = open_store(f, tc.dir, staging_units);
	struct tutti_fsck_report rep = {.size = sizeof(rep)};

	t_batch_save(&f->batch, st, tc.src);
	for (int round = 0; round < 2; round++) {
		t_batch_assert_load(&f->batch, st, tc.src, tc.dst, 0, LAYERS, T_BATCH_NONE);
	}
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	assert_int_equal(rep.chunks_checked, CHUNKS);
	assert_int_equal(rep.corrupt_chunks, 0);
	assert_int_equal(rep.bytes_checked, (uint64_t)CHUNKS * LAYERS * BPC *
	                                        tutti_geometry_layer_block_bytes(&f->batch.geo));
	assert_int_equal(f->rec.nr_err, 0);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

static void
round_trip(struct fixture *f, const char *name, enum t_layout layout, uint32_t staging_units)
{
	for (int i = 0; base(f, i) != NULL; i++) {
		round_trip_in(f, base(f, i), name, layout, staging_units);
	}
}

static void
test_direct_units_over_lanes_are_bit_exact(void **state)
{
	round_trip(*state, "direct", T_LAYOUT_BLOCKS_FIRST, 4);
}

static void
test_staged_units_with_fewer_buffers_than_lanes_are_bit_exact(void **state)
{
	/* One staging buffer: a single lane carries every staged unit, the others stand aside. */
	round_trip(*state, "staged1", T_LAYOUT_KV_FIRST, 1);
	round_trip(*state, "staged3", T_LAYOUT_KV_FIRST, 3);
}

static void
damaged_in(struct fixture *f, const char *where)
{
	struct t_store_case tc = case_new(f, where, "damaged", T_LAYOUT_BLOCKS_FIRST);
	struct tutti_store *st = open_store(f, tc.dir, 4);
	const uint32_t bad = CHUNKS / 2;

	t_batch_save(&f->batch, st, tc.src);
	t_batch_flip_bit(&f->batch, tc.path, bad, LAYERS - 1, 77, 2);
	/* Chunks are independent: the others load while one lane finds the damage. */
	t_batch_assert_load(&f->batch, st, tc.src, tc.dst, 0, LAYERS, bad);
	assert_int_equal(t_store_stats(st).load_corrupt, 1);
	assert_true(t_log_contains(&f->rec, "checksum mismatch"));
	tutti_store_close(st);
	t_store_case_free(&tc);
}

static void
test_a_damaged_object_fails_its_chunk_alone(void **state)
{
	struct fixture *f = *state;

	for (int i = 0; base(f, i) != NULL; i++) {
		t_log_reset(&f->rec);
		damaged_in(f, base(f, i));
	}
}

/* Whether lanes run for this engine here: posix always (its threads), uring with more than one
 * online CPU. */
static bool
lanes_here(void)
{
	return g_engine == TUTTI_ENGINE_POSIX || sysconf(_SC_NPROCESSORS_ONLN) > 1;
}

static void
test_page_cache_reads_are_one_object_each(void **state)
{
	struct fixture *f = *state;
	const char *where = tmpfs_base(f);
	struct t_store_case tc;
	struct tutti_store *st;
	struct tutti_stats s0, s1;
	int32_t status[CHUNKS];

	if (where == NULL || !lanes_here()) {
		skip();
	}
	tc = case_new(f, where, "pages", T_LAYOUT_BLOCKS_FIRST);
	st = open_store(f, tc.dir, 4);
	t_batch_save(&f->batch, st, tc.src);
	s0 = t_store_stats(st);
	assert_int_equal(t_batch_load(&f->batch, st, tc.dst, 0, LAYERS, status), CHUNKS);
	s1 = t_store_stats(st);
	/* Two objects per I/O elsewhere (max_io_bytes); one on tmpfs, copied by the lane. */
	assert_int_equal(s1.io_ops - s0.io_ops, (uint64_t)CHUNKS * LAYERS);
	for (uint32_t k = 0; k < CHUNKS; k++) {
		assert_true(t_batch_chunk_equal(&f->batch, tc.src, tc.dst, k, 0, LAYERS));
	}
	tutti_store_close(st);
	t_store_case_free(&tc);
}

static void
test_other_files_take_whole_runs_of_objects(void **state)
{
	struct fixture *f = *state;
	struct t_store_case tc = case_new(f, f->tmp, "runs", T_LAYOUT_BLOCKS_FIRST);
	struct tutti_store *st = open_store(f, tc.dir, 4);
	struct tutti_stats s0, s1;
	int32_t status[CHUNKS];

	if (f->tmp_is_tmpfs) {
		tutti_store_close(st);
		t_store_case_free(&tc);
		skip(); /* $TMPDIR is tmpfs: the test above covers it */
	}
	t_batch_save(&f->batch, st, tc.src);
	s0 = t_store_stats(st);
	assert_int_equal(t_batch_load(&f->batch, st, tc.dst, 0, LAYERS, status), CHUNKS);
	s1 = t_store_stats(st);
	assert_int_equal(s1.io_ops - s0.io_ops, (uint64_t)CHUNKS * LAYERS / 2);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

/* A round trip through engine posix with \p posix_threads (its option threads; 0: the default)
 * in \p where, bit-exact, over \p lanes lanes (0: the calling thread alone). */
static void
expect_lanes(struct fixture *f, const char *where, const char *name, uint32_t posix_threads,
             uint32_t lanes)
{
	struct t_store_case tc = case_new(f, where, name, T_LAYOUT_BLOCKS_FIRST);
	struct tutti_store *st = open_store_threads(f, tc.dir, 4, posix_threads);

	t_batch_save(&f->batch, st, tc.src);
	t_batch_assert_load(&f->batch, st, tc.src, tc.dst, 0, LAYERS, T_BATCH_NONE);
	assert_int_equal(st->engine->lanes != NULL ? st->engine->lanes->nr : 0, lanes);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

/* Engine posix's lanes by default: one per unit slot, but on tmpfs, where every I/O is a copy by
 * the lane's own thread, no more than the online CPUs; its option threads set, that many. */
static void
test_posix_lanes_on_page_cache_no_more_than_cpus(void **state)
{
	struct fixture *f = *state;
	uint32_t cpus = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t on_tmpfs = cpus < DEPTH ? cpus : DEPTH;

	if (g_engine != TUTTI_ENGINE_POSIX) {
		skip();
	}
	if (tmpfs_base(f) != NULL) {
		expect_lanes(f, tmpfs_base(f), "cpus", 0, on_tmpfs < 2 ? 0 : on_tmpfs);
		expect_lanes(f, tmpfs_base(f), "asked", DEPTH, DEPTH);
	}
	if (!f->tmp_is_tmpfs) {
		expect_lanes(f, f->tmp, "files", 0, DEPTH);
	}
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_direct_units_over_lanes_are_bit_exact),
	    T(test_staged_units_with_fewer_buffers_than_lanes_are_bit_exact),
	    T(test_a_damaged_object_fails_its_chunk_alone),
	    T(test_page_cache_reads_are_one_object_each),
	    T(test_other_files_take_whole_runs_of_objects),
	    T(test_posix_lanes_on_page_cache_no_more_than_cpus),
	};

	return t_run_per_engine("lanes", tests, sizeof(tests) / sizeof(tests[0]), false, &g_engine);
}
