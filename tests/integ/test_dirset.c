/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: a store's directories are one set, and an open writes nothing before it is known
 * to succeed. A store of three directories opens given all of them in any order; given some of
 * them it fails with -ENOENT and the log names each missing directory by the path it was last
 * opened at; directories of two stores are -EEXIST; a directory given twice, a copied data file
 * or an empty directory added to a store are -EINVAL. Every failed open leaves every file
 * byte-for-byte as it was, with its size and mtime, and its ctime but where a full disk made it
 * cut grown files back (docs/errors.md), and removes what it created (the example that lost
 * data: a typo in the last directory while the capacity asks for another size). A resize is
 * written only once the open succeeded, and one interrupted between two directories is finished
 * by the next open; a full disk during a resize cuts the files back. A directory that moved is
 * named where it is now. Killing a process while it creates a store of three directories leaves
 * directories that either open as the store or say its creation never finished, and
 * TUTTI_OPEN_CREATE makes it anew. As root, the full disk is a tiny tmpfs in a private mount
 * namespace; otherwise that test is skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
#define NR_DIRS 3u
#define SLOTS 24u /* per directory */
#define NR_CHAINS 12u
#define KEYS 3u /* chunks per chain */

static bool g_mounts; /* root in a private mount namespace */

struct fixture {
	char *tmp;
	char *dirs[NR_DIRS + 2]; /* tmp/d0.. d2, and two more for the tests' own use */
	struct tutti_geometry geo;
	struct t_log rec;
	struct t_rng r;
	struct t_kv *kv;
	uint32_t data_files; /* of a new store; 0: the default */
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	for (uint32_t d = 0; d < NR_DIRS + 2; d++) {
		char name[16];

		snprintf(name, sizeof(name), "d%u", d);
		f->dirs[d] = t_path_join(f->tmp, name);
	}
	f->geo = t_geo_small(2, BPC);
	t_rng_init(&f->r, t_seed(19));
	if (t_kv_alloc(&f->geo, T_LAYOUT_BLOCKS_FIRST, KEYS * BPC, &f->kv) != 0) {
		return -1;
	}
	t_kv_fill_random(f->kv, &f->r);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	if (g_mounts) {
		umount2(f->dirs[1], MNT_DETACH); /* a test's tmpfs, if it failed before its own */
	}
	t_kv_free(f->kv);
	for (uint32_t d = 0; d < NR_DIRS + 2; d++) {
		free(f->dirs[d]);
	}
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

/* Open the directories \p dirs with \p slots slots in all (0: TUTTI_OPEN_EXISTING keeps the
 * store's), \p flags added to TUTTI_OPEN_CREATE unless \p flags has TUTTI_OPEN_EXISTING. */
static int
open_dirs(struct fixture *f, const char **dirs, uint32_t nr, uint64_t slots, uint32_t flags,
          struct tutti_store **st)
{
	struct tutti_store_opts o;
	int rc;

	t_store_opts(&o, slots ? &f->geo : NULL, dirs, nr, slots, TUTTI_ENGINE_POSIX, &f->rec);
	o.data_files = f->data_files;
	o.flags = flags;
	t_log_reset(&f->rec);
	rc = tutti_store_open(slots ? &f->geo : NULL, &o, st);
	if (rc != 0) {
		assert_null(*st);
		assert_true(f->rec.nr_err > 0); /* the reason is logged */
	}
	return rc;
}

static void
chain_keys(uint32_t id, uint8_t *keys)
{
	struct t_rng r;

	t_rng_init(&r, 0xd1500000ull + id);
	t_rng_fill(&r, keys, KEYS * KB);
}

static void
save_chain(struct tutti_store *st, const struct t_kv *kv, uint32_t id)
{
	uint8_t keys[KEYS * KB];
	uint32_t ids[KEYS * BPC];
	int32_t status[KEYS];
	struct tutti_request r;

	chain_keys(id, keys);
	for (uint32_t b = 0; b < KEYS * BPC; b++) {
		ids[b] = b;
	}
	r = t_request(keys, KEYS, 0, 0, ids, KEYS * BPC);
	assert_int_equal(tutti_store_save(st, kv->kv, &r, 1, status), KEYS);
}

/* How many chunks of chain \p id a lookup finds. */
static int64_t
chain_found(struct tutti_store *st, uint32_t id)
{
	uint8_t keys[KEYS * KB];

	chain_keys(id, keys);
	return tutti_store_lookup(st, keys, KEYS, NULL);
}

/* The store of the fixture: NR_DIRS directories, NR_CHAINS chains. */
static void
make_store(struct fixture *f)
{
	struct tutti_store *st = NULL;

	assert_int_equal(
	    open_dirs(f, (const char **)f->dirs, NR_DIRS, NR_DIRS * SLOTS, TUTTI_OPEN_CREATE, &st),
	    0);
	for (uint32_t i = 0; i < NR_CHAINS; i++) {
		save_chain(st, f->kv, i);
	}
	tutti_store_close(st);
}

static void
assert_store_whole(struct fixture *f, const char **dirs, uint32_t nr)
{
	struct tutti_store *st = NULL;

	assert_int_equal(open_dirs(f, dirs, nr, 0, TUTTI_OPEN_EXISTING, &st), 0);
	for (uint32_t i = 0; i < NR_CHAINS; i++) {
		assert_int_equal(chain_found(st, i), KEYS);
	}
	tutti_store_close(st);
}

/* ---- what a failed open leaves: everything as it was ---- */

/* What docs/errors.md says a failed open keeps: size, bytes, mtime; and ctime, but where an open
 * grew files and cut them back (a full disk), which changes it. */
struct file_state {
	bool exists;
	uint64_t size;
	struct timespec mtime;
	struct timespec ctime;
	uint64_t hash;
};

struct snapshot {
	struct file_state files[NR_DIRS + 2];
	bool dir_exists[NR_DIRS + 2];
};

static void
take_snapshot(const struct fixture *f, struct snapshot *s)
{
	memset(s, 0, sizeof(*s));
	for (uint32_t d = 0; d < NR_DIRS + 2; d++) {
		char *path = t_data_path(f->dirs[d]);
		struct stat sb;

		s->dir_exists[d] = t_path_exists(f->dirs[d]);
		if (stat(path, &sb) == 0) {
			size_t len = 0;
			uint8_t *bytes = t_file_read_all(path, &len);

			assert_non_null(bytes);
			s->files[d] = (struct file_state){true, (uint64_t)sb.st_size, sb.st_mtim,
			                                  sb.st_ctim, XXH3_64bits(bytes, len)};
			free(bytes);
		}
		free(path);
	}
}

static bool
same_time(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* Every file as \p before found it: size, bytes, mtime, and, unless \p ctime_may_change (an
 * open that grew files and cut them back), ctime. */
static void
assert_kept(const struct fixture *f, const struct snapshot *before, const char *what,
            bool ctime_may_change)
{
	struct snapshot now;

	take_snapshot(f, &now);
	for (uint32_t d = 0; d < NR_DIRS + 2; d++) {
		const struct file_state *a = &before->files[d], *b = &now.files[d];

		if (before->dir_exists[d] != now.dir_exists[d] || a->exists != b->exists ||
		    a->size != b->size || a->hash != b->hash || !same_time(a->mtime, b->mtime) ||
		    (!ctime_may_change && !same_time(a->ctime, b->ctime))) {
			fail_msg("%s: directory %u changed (exists %d -> %d, size %llu -> %llu, "
			         "contents %s, mtime %s, ctime %s)",
			         what, d, a->exists, b->exists, (unsigned long long)a->size,
			         (unsigned long long)b->size,
			         a->hash == b->hash ? "same" : "CHANGED",
			         same_time(a->mtime, b->mtime) ? "same" : "CHANGED",
			         same_time(a->ctime, b->ctime) ? "same" : "CHANGED");
		}
	}
}

static void
assert_unchanged(const struct fixture *f, const struct snapshot *before, const char *what)
{
	assert_kept(f, before, what, false);
}

static void
test_a_failed_open_leaves_every_file_as_it_was(void **state)
{
	struct fixture *f = *state;
	const char *typo[NR_DIRS] = {f->dirs[0], f->dirs[1], f->dirs[3]}; /* d3 for d2 */
	const char *all_and_new[NR_DIRS + 1] = {f->dirs[0], f->dirs[1], f->dirs[2], f->dirs[3]};
	struct tutti_store *st = NULL;
	struct snapshot before;

	make_store(f);
	take_snapshot(f, &before);
	/* The example: a typo in the last directory, with a capacity that would have
	 * resized the others (it shrank them before failing, and lost a fifth of the chains). */
	assert_int_equal(open_dirs(f, typo, NR_DIRS, NR_DIRS * SLOTS / 2, 0, &st), -ENOENT);
	assert_unchanged(f, &before, "typo, no CREATE");
	/* With CREATE the typo is an empty directory added to a store: refused, and the
	 * directory made for it is removed again. */
	assert_int_equal(open_dirs(f, typo, NR_DIRS, NR_DIRS * SLOTS * 2, TUTTI_OPEN_CREATE, &st),
	                 -EINVAL);
	assert_true(t_log_contains(&f->rec, "holds no store"));
	assert_unchanged(f, &before, "typo, CREATE");
	/* One directory more than the store has, even an empty existing one. */
	assert_int_equal(mkdir(f->dirs[3], 0700), 0);
	take_snapshot(f, &before);
	assert_int_equal(open_dirs(f, all_and_new, NR_DIRS + 1, 4 * SLOTS, 0, &st), -ENOENT);
	assert_int_equal(open_dirs(f, all_and_new, NR_DIRS + 1, 4 * SLOTS, TUTTI_OPEN_CREATE, &st),
	                 -EINVAL);
	assert_unchanged(f, &before, "a directory added");
	/* Part of the store, with a new capacity: nothing resized. */
	assert_int_equal(open_dirs(f, (const char **)f->dirs, 2, 2 * SLOTS, 0, &st), -ENOENT);
	assert_unchanged(f, &before, "part of the store");
	/* Another geometry in the last directory checked. */
	{
		struct tutti_geometry saved = f->geo;

		f->geo.nr_kv_heads = 2;
		assert_int_equal(
		    open_dirs(f, (const char **)f->dirs, NR_DIRS, NR_DIRS * SLOTS * 2, 0, &st),
		    -EEXIST);
		f->geo = saved;
	}
	assert_unchanged(f, &before, "another geometry");
	/* A live owner of one of the directories. */
	{
		struct tutti_store *owner = NULL;
		const char *last[1] = {f->dirs[2]};

		assert_int_equal(open_dirs(f, last, 1, 0, TUTTI_OPEN_EXISTING, &owner), -ENOENT);
		assert_int_equal(
		    open_dirs(f, (const char **)f->dirs, NR_DIRS, 0, TUTTI_OPEN_EXISTING, &owner),
		    0);
		take_snapshot(f, &before);
		assert_int_equal(
		    open_dirs(f, (const char **)f->dirs, NR_DIRS, NR_DIRS * SLOTS * 2, 0, &st),
		    -EBUSY);
		tutti_store_close(owner);
		assert_unchanged(f, &before, "busy");
	}
	assert_store_whole(f, (const char **)f->dirs, NR_DIRS);
}

static void
test_a_new_store_that_fails_to_open_leaves_nothing(void **state)
{
	struct fixture *f = *state;
	const char *two[2] = {f->dirs[0], f->dirs[1]};
	struct tutti_store *st = NULL;

	/* d1 holds a store of its own: creating [d0 d1] fails, and d0, made by this open, goes. */
	assert_int_equal(open_dirs(f, two + 1, 1, SLOTS, TUTTI_OPEN_CREATE, &st), 0);
	tutti_store_close(st);
	assert_int_equal(open_dirs(f, two, 2, 2 * SLOTS, TUTTI_OPEN_CREATE, &st), -EINVAL);
	assert_false(t_path_exists(f->dirs[0]));
}

/* ---- the directory set ---- */

static void
test_a_store_opens_given_all_its_directories_in_any_order(void **state)
{
	struct fixture *f = *state;
	const char *shuffled[NR_DIRS] = {f->dirs[2], f->dirs[0], f->dirs[1]};

	make_store(f);
	assert_store_whole(f, (const char **)f->dirs, NR_DIRS);
	assert_store_whole(f, shuffled, NR_DIRS);
}

static void
test_part_of_a_store_is_enoent_naming_what_is_missing(void **state)
{
	struct fixture *f = *state;
	const char *first_and_last[2] = {f->dirs[0], f->dirs[2]};
	const char *middle[1] = {f->dirs[1]};
	char *real, *real0, want[4200];
	struct tutti_store *st = NULL;

	make_store(f);
	real = realpath(f->dirs[1], NULL);
	real0 = realpath(f->dirs[0], NULL);
	assert_non_null(real);
	for (uint32_t flags = 0; flags <= TUTTI_OPEN_CREATE; flags += TUTTI_OPEN_CREATE) {
		assert_int_equal(open_dirs(f, first_and_last, 2, 2 * SLOTS, flags, &st), -ENOENT);
		snprintf(want, sizeof(want), "missing directory 2 (last opened as %s)", real);
		if (!t_log_contains(&f->rec, want)) {
			fail_msg("no \"%s\" in \"%s\"", want, f->rec.msgs[0]);
		}
		assert_true(t_log_contains(&f->rec, "of a store of 3 directories"));
	}
	/* What inspect and fsck do: the same refusal, read-only. */
	assert_int_equal(
	    open_dirs(f, middle, 1, 0, TUTTI_OPEN_EXISTING | TUTTI_OPEN_READ_ONLY, &st), -ENOENT);
	snprintf(want, sizeof(want), "missing directories 1 (last opened as %s)", real0);
	assert_true(t_log_contains(&f->rec, want));
	assert_int_equal(open_dirs(f, middle, 1, 0, TUTTI_OPEN_EXISTING | TUTTI_OPEN_REPAIR, &st),
	                 -ENOENT);
	assert_store_whole(f, (const char **)f->dirs, NR_DIRS);
	free(real);
	free(real0);
}

static void
test_directories_of_two_stores_are_eexist(void **state)
{
	struct fixture *f = *state;
	const char *other[1] = {f->dirs[3]};
	const char *mixed[NR_DIRS] = {f->dirs[0], f->dirs[1], f->dirs[3]};
	const char *mixed_more[NR_DIRS + 1] = {f->dirs[0], f->dirs[1], f->dirs[2], f->dirs[3]};
	struct tutti_store *st = NULL;

	make_store(f);
	assert_int_equal(open_dirs(f, other, 1, SLOTS, TUTTI_OPEN_CREATE, &st), 0);
	tutti_store_close(st);
	assert_int_equal(open_dirs(f, mixed, NR_DIRS, NR_DIRS * SLOTS, 0, &st), -EEXIST);
	assert_true(t_log_contains(&f->rec, "two different stores"));
	assert_int_equal(open_dirs(f, mixed_more, NR_DIRS + 1, 4 * SLOTS, 0, &st), -EEXIST);
	assert_store_whole(f, (const char **)f->dirs, NR_DIRS);
	assert_int_equal(open_dirs(f, other, 1, 0, TUTTI_OPEN_EXISTING, &st), 0);
	tutti_store_close(st);
}

static void
test_a_directory_given_twice_or_copied_is_einval(void **state)
{
	struct fixture *f = *state;
	char *alias = t_path_join(f->tmp, "alias"), *copy_file = t_data_path(f->dirs[3]);
	char *src_file = t_data_path(f->dirs[0]);
	const char *twice[NR_DIRS] = {f->dirs[0], f->dirs[1], f->dirs[0]};
	const char *aliased[NR_DIRS] = {f->dirs[0], f->dirs[1], alias};
	const char *with_copy[NR_DIRS + 1] = {f->dirs[0], f->dirs[1], f->dirs[2], f->dirs[3]};
	struct tutti_store *st = NULL;

	make_store(f);
	assert_int_equal(open_dirs(f, twice, NR_DIRS, NR_DIRS * SLOTS, 0, &st), -EINVAL);
	assert_true(t_log_contains(&f->rec, "are one directory"));
	assert_int_equal(symlink(f->dirs[0], alias), 0);
	assert_int_equal(open_dirs(f, aliased, NR_DIRS, NR_DIRS * SLOTS, 0, &st), -EINVAL);
	/* A copy of a data file holds the same place in the store as its original. */
	assert_int_equal(mkdir(f->dirs[3], 0700), 0);
	assert_int_equal(t_file_copy(src_file, copy_file), 0);
	assert_int_equal(open_dirs(f, with_copy, NR_DIRS + 1, 4 * SLOTS, 0, &st), -EINVAL);
	assert_true(t_log_contains(&f->rec, "both hold directory 1"));
	assert_store_whole(f, (const char **)f->dirs, NR_DIRS);
	free(src_file);
	free(copy_file);
	free(alias);
}

static void
test_a_directory_that_moved_is_named_where_it_is_now(void **state)
{
	struct fixture *f = *state;
	const char *moved[NR_DIRS] = {f->dirs[0], f->dirs[4], f->dirs[2]};
	const char *without[2] = {f->dirs[0], f->dirs[2]};
	struct tutti_store *st = NULL;
	char *real, want[4200];

	make_store(f);
	assert_int_equal(rename(f->dirs[1], f->dirs[4]), 0);
	assert_store_whole(f, moved, NR_DIRS);
	real = realpath(f->dirs[4], NULL);
	assert_non_null(real);
	assert_int_equal(open_dirs(f, without, 2, 0, TUTTI_OPEN_EXISTING, &st), -ENOENT);
	snprintf(want, sizeof(want), "(last opened as %s)", real);
	assert_true(t_log_contains(&f->rec, want));
	free(real);
}

/* ---- resizes ---- */

static uint64_t
sb_nr_slots(const char *dir)
{
	char *path = t_data_path(dir);
	uint8_t sb[T_SB_BYTES];
	uint64_t v = 0;

	assert_int_equal(t_disk_read(path, 0, sb, sizeof(sb)), 0);
	for (int i = 7; i >= 0; i--) {
		v = v << 8 | sb[T_SB_OFF_NR_SLOTS + i];
	}
	free(path);
	return v;
}

static void
test_a_resize_is_written_whole_and_an_interrupted_one_is_finished(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *st = NULL;
	uint64_t slot_bytes = tutti_geometry_slot_bytes(&f->geo);
	uint8_t sb[T_SB_BYTES];
	char *path = t_data_path(f->dirs[1]);
	uint64_t csum;

	f->data_files = 1; /* the test sizes and rewrites the files by hand */
	make_store(f);
	/* Grown: every file and superblock, and the chains are kept. */
	assert_int_equal(open_dirs(f, (const char **)f->dirs, NR_DIRS, NR_DIRS * 2 * SLOTS, 0, &st),
	                 0);
	assert_true(t_log_contains(&f->rec, "resized from 24 to 48 slots per directory"));
	tutti_store_close(st);
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		char *p = t_data_path(f->dirs[d]);

		assert_int_equal(sb_nr_slots(f->dirs[d]), 2 * SLOTS);
		assert_int_equal(t_file_size(p), T_DATA_OFF + 2 * SLOTS * slot_bytes);
		free(p);
	}
	assert_store_whole(f, (const char **)f->dirs, NR_DIRS);
	/* As if killed while writing the superblocks of a grow to 64: files grown, directory 1's
	 * superblock still at 48. */
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		char *p = t_data_path(f->dirs[d]);

		assert_int_equal(truncate(p, (off_t)(T_DATA_OFF + 64 * slot_bytes)), 0);
		free(p);
	}
	for (uint32_t d = 0; d < NR_DIRS; d += 2) {
		char *p = t_data_path(f->dirs[d]);

		assert_int_equal(t_disk_read(p, 0, sb, sizeof(sb)), 0);
		sb[T_SB_OFF_NR_SLOTS] = 64;
		csum = XXH3_64bits(sb, T_SB_OFF_CSUM);
		memcpy(sb + T_SB_OFF_CSUM, &csum, 8); /* little-endian hosts */
		assert_int_equal(t_disk_write(p, 0, sb, sizeof(sb)), 0);
		free(p);
	}
	assert_int_equal(open_dirs(f, (const char **)f->dirs, NR_DIRS, 0,
	                           TUTTI_OPEN_EXISTING | TUTTI_OPEN_READ_ONLY, &st),
	                 0);
	assert_true(t_log_contains(&f->rec, "a resize was interrupted"));
	assert_int_equal(t_store_stats(st).capacity_slots, NR_DIRS * 64);
	tutti_store_close(st);
	assert_int_equal(sb_nr_slots(f->dirs[1]), 2 * SLOTS); /* read-only wrote nothing */
	assert_store_whole(f, (const char **)f->dirs, NR_DIRS);
	assert_int_equal(sb_nr_slots(f->dirs[1]), 64);
	free(path);
}

static void
test_a_resize_that_finds_a_full_disk_cuts_the_files_back(void **state)
{
	struct fixture *f = *state;
	uint64_t slot_bytes = tutti_geometry_slot_bytes(&f->geo);
	uint64_t per_dir = 24, bytes = T_DATA_OFF + per_dir * slot_bytes;
	char opts[64];
	const char *dirs[2] = {f->dirs[0], f->dirs[1]};
	struct tutti_store *st = NULL;
	struct snapshot before;

	if (!g_mounts) {
		skip();
	}
	f->data_files = 1; /* the filesystem has room for one file's slots and little more */
	/* d1 on a filesystem with room for the store and little more. */
	assert_int_equal(mkdir(f->dirs[1], 0700), 0);
	snprintf(opts, sizeof(opts), "size=%llu", (unsigned long long)(bytes + 2 * T_DATA_OFF));
	assert_int_equal(mount("tutti-test", f->dirs[1], "tmpfs", 0, opts), 0);
	assert_int_equal(open_dirs(f, dirs, 2, 2 * per_dir, TUTTI_OPEN_CREATE, &st), 0);
	for (uint32_t i = 0; i < 4; i++) {
		save_chain(st, f->kv, i);
	}
	tutti_store_close(st);
	take_snapshot(f, &before);
	/* Growing d0 succeeds, d1 is full: d0 is cut back, no superblock changes. Size, bytes
	 * and mtime are as they were; the ctime of what was grown and cut back is the undo's
	 * (docs/errors.md). */
	assert_int_equal(open_dirs(f, dirs, 2, 2 * 16 * per_dir, 0, &st), -ENOSPC);
	assert_kept(f, &before, "full disk during a resize", true);
	assert_int_equal(open_dirs(f, dirs, 2, 0, TUTTI_OPEN_EXISTING, &st), 0);
	for (uint32_t i = 0; i < 4; i++) {
		assert_int_equal(chain_found(st, i), KEYS);
	}
	tutti_store_close(st);
	umount2(f->dirs[1], MNT_DETACH);
}

/* ---- killed while creating a store of several directories ---- */

static void
test_a_creation_killed_at_any_moment_opens_or_is_made_anew(void **state)
{
	struct fixture *f = *state;
	uint32_t complete = 0, unfinished = 0, absent = 0;

	for (uint32_t round = 0; round < 30; round++) {
		struct tutti_store *st = NULL;
		pid_t pid = fork();
		int rc;

		assert_true(pid >= 0);
		if (pid == 0) {
			rc = open_dirs(f, (const char **)f->dirs, NR_DIRS, NR_DIRS * 256,
			               TUTTI_OPEN_CREATE, &st);
			_exit(rc == 0 ? 0 : 1);
		}
		usleep(t_rng_below(&f->r, 12000));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		/* Without CREATE: the store, or ENOENT (nothing, or an unfinished creation). */
		rc = open_dirs(f, (const char **)f->dirs, NR_DIRS, NR_DIRS * 256, 0, &st);
		if (rc == 0) {
			complete++;
			tutti_store_close(st);
		} else {
			assert_int_equal(rc, -ENOENT);
			unfinished += t_log_contains(&f->rec, "creation never finished");
			absent += !t_log_contains(&f->rec, "creation never finished");
		}
		/* With CREATE it always opens, and works. */
		assert_int_equal(open_dirs(f, (const char **)f->dirs, NR_DIRS, NR_DIRS * 256,
		                           TUTTI_OPEN_CREATE, &st),
		                 0);
		save_chain(st, f->kv, round);
		assert_int_equal(chain_found(st, round), KEYS);
		tutti_store_close(st);
		for (uint32_t d = 0; d < NR_DIRS; d++) {
			char *p = t_data_path(f->dirs[d]);

			unlink(p);
			free(p);
		}
	}
	print_message("killed creations: %u complete, %u unfinished, %u not begun\n", complete,
	              unfinished, absent);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_a_failed_open_leaves_every_file_as_it_was),
	    T(test_a_new_store_that_fails_to_open_leaves_nothing),
	    T(test_a_store_opens_given_all_its_directories_in_any_order),
	    T(test_part_of_a_store_is_enoent_naming_what_is_missing),
	    T(test_directories_of_two_stores_are_eexist),
	    T(test_a_directory_given_twice_or_copied_is_einval),
	    T(test_a_directory_that_moved_is_named_where_it_is_now),
	    T(test_a_resize_is_written_whole_and_an_interrupted_one_is_finished),
	    T(test_a_resize_that_finds_a_full_disk_cuts_the_files_back),
	    T(test_a_creation_killed_at_any_moment_opens_or_is_made_anew),
	};

	return t_run_with_private_mounts("dirset", tests, sizeof(tests) / sizeof(tests[0]),
	                                 &g_mounts, 1);
}
