/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: TUTTI_OPEN_READ_ONLY, what tutti inspect and fsck use. On a filesystem mounted
 * read-only (as root: a tmpfs in a private mount namespace; otherwise a directory and file
 * without write permission) a store opens, its chains are found and load bit-exact, fsck reads
 * every object; saves and repairs fail with -EROFS; and nothing is written: not a byte, not a
 * size, not a file's time, even where a writable open would have extended a truncated file or
 * erased damaged headers. Read-only opens may look at a store together, never beside a writer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <xxhash.h>

#include "t_disk.h"
#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define KB 32u
#define BPC 2u
#define SLOTS 32u
#define NR_CHAINS 8u
#define KEYS 3u

static bool g_mounts; /* root in a private mount namespace */

struct fixture {
	char *tmp;
	char *dir; /* tmp/mnt: the store, on a mount of its own when root */
	bool mounted;
	struct tutti_geometry geo;
	struct t_log rec;
	struct t_rng r;
	struct t_kv *src, *dst;
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	f->dir = t_path_join(f->tmp, "mnt");
	if (mkdir(f->dir, 0700) != 0) {
		return -1;
	}
	f->geo = t_geo_small(2, BPC);
	t_rng_init(&f->r, t_seed(23));
	if (t_kv_alloc(&f->geo, T_LAYOUT_BLOCKS_FIRST, KEYS * BPC, &f->src) != 0 ||
	    t_kv_alloc(&f->geo, T_LAYOUT_KV_FIRST, KEYS * BPC, &f->dst) != 0) {
		return -1;
	}
	t_kv_fill_random(f->src, &f->r);
	if (g_mounts) {
		if (mount("tutti-test", f->dir, "tmpfs", 0, "size=16m") != 0) {
			return -1;
		}
		f->mounted = true;
	}
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char *file = t_data_path(f->dir);

	if (f->mounted) {
		umount2(f->dir, MNT_DETACH);
	}
	chmod(file, 0600);
	chmod(f->dir, 0700);
	free(file);
	t_kv_free(f->src);
	t_kv_free(f->dst);
	free(f->dir);
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

static int
open_flags(struct fixture *f, uint32_t flags, struct tutti_store **st)
{
	struct tutti_store_opts o;
	const char *dirs[1] = {f->dir};
	bool existing = (flags & TUTTI_OPEN_EXISTING) != 0;

	t_store_opts(&o, existing ? NULL : &f->geo, dirs, 1, existing ? 0 : SLOTS,
	             TUTTI_ENGINE_URING, &f->rec);
	/* One data file: the tests cut it and compare it whole, before and after. */
	o.data_files = 1;
	if (t_uring_probe() != 0) {
		o.engine = TUTTI_ENGINE_POSIX;
	}
	o.flags = flags;
	t_log_reset(&f->rec);
	*st = NULL;
	return tutti_store_open(existing ? NULL : &f->geo, &o, st);
}

static void
chain(uint32_t id, uint8_t *keys, uint32_t *ids, struct tutti_request *r)
{
	struct t_rng rng;

	t_rng_init(&rng, 0x7230000ull + id);
	t_rng_fill(&rng, keys, KEYS * KB);
	for (uint32_t b = 0; b < KEYS * BPC; b++) {
		ids[b] = b;
	}
	*r = t_request(keys, KEYS, 0, 0, ids, KEYS * BPC);
}

/* The chains that load whole and bit-exact. */
static uint32_t
chains_exact(struct fixture *f, struct tutti_store *st)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < NR_CHAINS; i++) {
		uint8_t keys[KEYS * KB];
		uint32_t ids[KEYS * BPC];
		int32_t status[KEYS];
		struct tutti_request r;
		bool same = true;

		chain(i, keys, ids, &r);
		t_kv_poison(f->dst, T_POISON);
		if (tutti_store_lookup(st, keys, KEYS, NULL) != KEYS ||
		    tutti_store_load(st, f->dst->kv, &r, 1, 0, f->geo.nr_layers, status) != KEYS) {
			continue;
		}
		for (uint32_t b = 0; b < KEYS * BPC; b++) {
			for (uint32_t l = 0; l < f->geo.nr_layers; l++) {
				same = same && t_kv_block_equal(f->src, b, f->dst, b, l);
			}
		}
		n += same;
	}
	return n;
}

static void
make_store(struct fixture *f)
{
	struct tutti_store *st = NULL;

	assert_int_equal(open_flags(f, TUTTI_OPEN_CREATE, &st), 0);
	for (uint32_t i = 0; i < NR_CHAINS; i++) {
		uint8_t keys[KEYS * KB];
		uint32_t ids[KEYS * BPC];
		struct tutti_request r;

		chain(i, keys, ids, &r);
		assert_int_equal(tutti_store_save(st, f->src->kv, &r, 1, NULL), KEYS);
	}
	tutti_store_close(st);
}

/* The file as it is: size, times, contents. */
struct file_state {
	uint64_t size;
	struct timespec mtime, ctime;
	uint64_t hash;
};

static struct file_state
file_state(const struct fixture *f)
{
	char *path = t_data_path(f->dir);
	struct stat sb;
	size_t len = 0;
	uint8_t *bytes;
	struct file_state s;

	assert_int_equal(stat(path, &sb), 0);
	bytes = t_file_read_all(path, &len);
	assert_non_null(bytes);
	s = (struct file_state){(uint64_t)sb.st_size, sb.st_mtim, sb.st_ctim,
	                        XXH3_64bits(bytes, len)};
	free(bytes);
	free(path);
	return s;
}

static void
assert_same_file(const struct file_state *a, const struct file_state *b)
{
	assert_int_equal(a->size, b->size);
	assert_int_equal(a->hash, b->hash);
	assert_int_equal(a->mtime.tv_sec, b->mtime.tv_sec);
	assert_int_equal(a->mtime.tv_nsec, b->mtime.tv_nsec);
	assert_int_equal(a->ctime.tv_nsec, b->ctime.tv_nsec);
}

/* Make the store's filesystem (or, without mounts, its directory and file) read-only. */
static void
make_read_only(struct fixture *f)
{
	char *file = t_data_path(f->dir);

	if (g_mounts) {
		assert_int_equal(mount(NULL, f->dir, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
	} else {
		assert_int_equal(chmod(file, 0400), 0);
		assert_int_equal(chmod(f->dir, 0500), 0);
	}
	free(file);
}

static void
test_a_read_only_open_works_on_a_read_only_filesystem(void **state)
{
	struct fixture *f = *state;
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	struct tutti_store *st = NULL;
	uint8_t keys[KEYS * KB];
	uint32_t ids[KEYS * BPC];
	struct tutti_request r;
	struct file_state before, after;
	int rc;

	make_store(f);
	make_read_only(f);
	before = file_state(f);
	/* A writable open is refused, as before. */
	rc = open_flags(f, 0, &st);
	assert_true(rc == -EROFS || rc == -EACCES);
	assert_null(st);
	for (int i = 0; i < 2; i++) {
		uint32_t flags = TUTTI_OPEN_READ_ONLY | (i ? TUTTI_OPEN_EXISTING : 0);

		assert_int_equal(open_flags(f, flags, &st), 0);
		assert_int_equal(chains_exact(f, st), NR_CHAINS);
		assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
		assert_int_equal(rep.chunks_checked, NR_CHAINS * KEYS);
		assert_int_equal(rep.corrupt_chunks, 0);
		/* What would write is refused. */
		chain(100, keys, ids, &r);
		assert_int_equal(tutti_store_save(st, f->src->kv, &r, 1, NULL), -EROFS);
		assert_int_equal(tutti_store_fsck(st, TUTTI_FSCK_REPAIR, &rep), -EROFS);
		tutti_store_close(st);
	}
	after = file_state(f);
	assert_same_file(&before, &after);
}

static void
test_a_read_only_open_writes_nothing_where_a_writable_one_would(void **state)
{
	struct fixture *f = *state;
	char *path = t_data_path(f->dir);
	uint64_t slot_bytes = tutti_geometry_slot_bytes(&f->geo);
	uint8_t junk[TUTTI_SLOT_HEADER_BYTES];
	struct tutti_store *st = NULL;
	struct file_state before, after;
	uint32_t exact;

	make_store(f);
	/* A damaged header (repair would erase it), and the file cut inside the last slots in
	 * use (a writable open extends it again). */
	t_rng_fill(&f->r, junk, sizeof(junk));
	assert_int_equal(t_disk_write(path, t_slot_off(&f->geo, 0), junk, sizeof(junk)), 0);
	assert_int_equal(
	    truncate(path, (off_t)(T_DATA_OFF + (NR_CHAINS * KEYS - 2) * slot_bytes + 2 * 4096)),
	    0);
	before = file_state(f);
	/* Not even with a capacity that asks for another size. */
	{
		struct tutti_store_opts o;
		const char *dirs[1] = {f->dir};

		t_store_opts(&o, &f->geo, dirs, 1, 2 * SLOTS, TUTTI_ENGINE_POSIX, &f->rec);
		o.data_files = 1;
		o.flags = TUTTI_OPEN_READ_ONLY;
		assert_int_equal(tutti_store_open(&f->geo, &o, &st), 0);
		assert_int_equal(t_store_stats(st).capacity_slots, SLOTS);
	}
	assert_true(t_store_stats(st).recovery_dropped >= 1);
	exact = chains_exact(f, st); /* loads of the cut slots fail, and erase nothing */
	assert_true(exact >= NR_CHAINS - 2 && exact < NR_CHAINS);
	tutti_store_close(st);
	after = file_state(f);
	assert_same_file(&before, &after);
	/* A read-only open cannot be asked to create or repair. */
	assert_int_equal(open_flags(f, TUTTI_OPEN_READ_ONLY | TUTTI_OPEN_CREATE, &st), -EINVAL);
	assert_int_equal(open_flags(f, TUTTI_OPEN_READ_ONLY | TUTTI_OPEN_REPAIR, &st), -EINVAL);
	/* The writable open that follows does both. */
	assert_int_equal(open_flags(f, TUTTI_OPEN_REPAIR, &st), 0);
	tutti_store_close(st);
	assert_int_equal(t_file_size(path), T_DATA_OFF + SLOTS * slot_bytes);
	free(path);
}

static void
test_read_only_opens_share_a_store_but_not_with_a_writer(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *a = NULL, *b = NULL, *w = NULL;

	make_store(f);
	assert_int_equal(open_flags(f, TUTTI_OPEN_READ_ONLY, &a), 0);
	assert_int_equal(open_flags(f, TUTTI_OPEN_READ_ONLY | TUTTI_OPEN_EXISTING, &b), 0);
	assert_int_equal(open_flags(f, 0, &w), -EBUSY);
	tutti_store_close(a);
	tutti_store_close(b);
	assert_int_equal(open_flags(f, 0, &w), 0);
	assert_int_equal(open_flags(f, TUTTI_OPEN_READ_ONLY, &a), -EBUSY);
	tutti_store_close(w);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_a_read_only_open_works_on_a_read_only_filesystem),
	    T(test_a_read_only_open_writes_nothing_where_a_writable_one_would),
	    T(test_read_only_opens_share_a_store_but_not_with_a_writer),
	};

	return t_run_with_private_mounts("read_only", tests, sizeof(tests) / sizeof(tests[0]),
	                                 &g_mounts, 1);
}
