/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the CPU path's lanes (src/engine/cpu_path.c), engines uring and posix: many chunks
 * saved and loaded bit-exact through lanes that share one batch, on the direct path and on the
 * staged path with fewer staging buffers than lanes; a damaged object fails its chunk alone
 * while the lanes move the others; fsck checks everything through them; and on page-cache-backed
 * files every object is an I/O of its own, hashed by pieces as it is copied. Each runs in $TMPDIR
 * and, where $TMPDIR is not tmpfs, again in a directory of /dev/shm when that is tmpfs.
 */
#include <errno.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <cmocka.h>

#include "t_disk.h"
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
	struct tutti_geometry geo;
	struct t_log rec;
	struct t_rng r;
	uint8_t *keys;
	uint32_t src_ids[BLOCKS], dst_ids[BLOCKS];
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
	f->geo = t_geo_small(LAYERS, BPC);
	t_rng_init(&f->r, t_seed(97));
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
	t_tmpdir_remove(f->shm);
	free(f->keys);
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
open_store(struct fixture *f, const char *dir, uint32_t staging_units)
{
	const char *dirs[1] = {dir};
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;

	t_store_opts(&o, &f->geo, dirs, 1, CHUNKS + 4, (uint32_t)g_engine, &f->rec);
	o.key_bytes = KB;
	o.queue_depth = DEPTH;
	o.max_io_bytes = 2 * tutti_geometry_object_bytes(&f->geo);
	o.staging_bytes = staging_units * o.max_io_bytes;
	o.posix_threads = DEPTH;
	assert_int_equal(tutti_store_open(&f->geo, &o, &st), 0);
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

/* Load every chunk into a poisoned destination; statuses into \p status. */
static int64_t
load_all(struct fixture *f, struct tutti_store *st, struct t_kv *dst, int32_t *status)
{
	struct tutti_request r = request(f, f->dst_ids);

	t_kv_poison(dst, T_POISON);
	return tutti_store_load(st, dst->kv, &r, 1, 0, LAYERS, status);
}

/* Chunk \p k loaded bit-exact (every layer of each of its blocks). */
static bool
chunk_equal(const struct fixture *f, const struct t_kv *src, const struct t_kv *dst, uint32_t k)
{
	for (uint32_t b = k * BPC; b < (k + 1) * BPC; b++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			if (!t_kv_block_equal(src, f->src_ids[b], dst, f->dst_ids[b], l)) {
				return false;
			}
		}
	}
	return true;
}

static void
round_trip_in(struct fixture *f, const char *where, const char *name, enum t_layout layout,
              uint32_t staging_units)
{
	char *dir = t_path_join(where, name);
	struct t_kv *src = t_kv_new(&f->geo, layout, BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, layout, BLOCKS, NULL);
	struct tutti_store *st = open_store(f, dir, staging_units);
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	int32_t status[CHUNKS];

	save_all(f, st, src);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(load_all(f, st, dst, status), CHUNKS);
		for (uint32_t k = 0; k < CHUNKS; k++) {
			assert_int_equal(status[k], 0);
			assert_true(chunk_equal(f, src, dst, k));
		}
	}
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	assert_int_equal(rep.chunks_checked, CHUNKS);
	assert_int_equal(rep.corrupt_chunks, 0);
	assert_int_equal(rep.bytes_checked, (uint64_t)CHUNKS * LAYERS * BPC *
	                                        tutti_geometry_layer_block_bytes(&f->geo));
	assert_int_equal(f->rec.nr_err, 0);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
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
	char *dir = t_path_join(where, "damaged");
	char *path = t_data_path(dir);
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, BLOCKS, NULL);
	struct tutti_store *st = open_store(f, dir, 4);
	const uint32_t bad = CHUNKS / 2;
	int32_t status[CHUNKS];
	uint32_t slot;

	save_all(f, st, src);
	slot = t_key_slot(path, &f->geo, f->keys + (uint64_t)bad * KB, KB);
	assert_int_equal(t_disk_flip_bit(path, t_object_off(&f->geo, slot, LAYERS - 1) + 77, 2), 0);
	/* Chunks are independent: the others load while one lane finds the damage. */
	assert_int_equal(load_all(f, st, dst, status), CHUNKS - 1);
	for (uint32_t k = 0; k < CHUNKS; k++) {
		if (k == bad) {
			assert_int_equal(status[k], -EBADMSG);
		} else {
			assert_int_equal(status[k], 0);
			assert_true(chunk_equal(f, src, dst, k));
		}
	}
	assert_int_equal(t_store_stats(st).load_corrupt, 1);
	assert_true(t_log_contains(&f->rec, "checksum mismatch"));
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(path);
	free(dir);
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

/* Whether lanes run for this engine here: posix always (posix_threads), uring with more than one
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
	struct t_kv *src, *dst;
	struct tutti_store *st;
	struct tutti_stats s0, s1;
	int32_t status[CHUNKS];
	char *dir;

	if (where == NULL || !lanes_here()) {
		skip();
	}
	dir = t_path_join(where, "pages");
	src = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, BLOCKS, &f->r);
	dst = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, BLOCKS, NULL);
	st = open_store(f, dir, 4);
	save_all(f, st, src);
	s0 = t_store_stats(st);
	assert_int_equal(load_all(f, st, dst, status), CHUNKS);
	s1 = t_store_stats(st);
	/* Two objects per I/O elsewhere (max_io_bytes); one on tmpfs, copied by the lane. */
	assert_int_equal(s1.io_ops - s0.io_ops, (uint64_t)CHUNKS * LAYERS);
	for (uint32_t k = 0; k < CHUNKS; k++) {
		assert_true(chunk_equal(f, src, dst, k));
	}
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
}

static void
test_other_files_take_whole_runs_of_objects(void **state)
{
	struct fixture *f = *state;
	char *dir = t_path_join(f->tmp, "runs");
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, BLOCKS, &f->r);
	struct t_kv *dst = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, BLOCKS, NULL);
	struct tutti_store *st = open_store(f, dir, 4);
	struct tutti_stats s0, s1;
	int32_t status[CHUNKS];

	if (f->tmp_is_tmpfs) {
		tutti_store_close(st);
		t_kv_free(src);
		t_kv_free(dst);
		free(dir);
		skip(); /* $TMPDIR is tmpfs: the test above covers it */
	}
	save_all(f, st, src);
	s0 = t_store_stats(st);
	assert_int_equal(load_all(f, st, dst, status), CHUNKS);
	s1 = t_store_stats(st);
	assert_int_equal(s1.io_ops - s0.io_ops, (uint64_t)CHUNKS * LAYERS / 2);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
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
	};

	return t_run_per_engine("lanes", tests, sizeof(tests) / sizeof(tests[0]), false, &g_engine);
}
