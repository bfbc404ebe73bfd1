/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/pool/pool.c on real files: creating preallocated data files with their
 * superblock at commit (an open that is not committed leaves nothing), reopening (same
 * geometry, resized capacity), refusing another geometry, key size or namespace, damaged
 * superblocks, locking, slot allocation with striping across directories, fallback and
 * exhaustion, and slot offsets striped over a directory's data files: the file count a store
 * records and keeps, a sibling file missing, empty, of another directory or renamed (refused),
 * truncated (extended), read-only opens of every file, and stale files removed.
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
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "pool/pool.h"
#include "t_util.h"

#define NR_DIRS 3u
#define SLOTS 4u
#define FILES 3u /* per directory: rows of 2, 1 and 1 slots */

struct fixture {
	char *tmp;
	char *dirs[NR_DIRS];
	struct tt_geo geo;
	uint8_t ns_fp[TT_NS_FP_BYTES];
	struct t_log rec;
	struct tt_log log;
	struct tt_pool_conf conf;
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct tutti_geometry g;

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		char name[16];

		snprintf(name, sizeof(name), "disk%u", d);
		f->dirs[d] = t_path_join(f->tmp, name);
	}
	if (tutti_geometry_preset("tiny", &g) != 0 || tt_geo_derive(&g, &f->geo) != 0) {
		return -1;
	}
	tt_ns_fingerprint("model/bf16/tp0", 14, f->ns_fp);
	f->log = (struct tt_log){.fn = t_log_fn, .arg = &f->rec, .level = TUTTI_LOG_DEBUG};
	f->conf = (struct tt_pool_conf){
	    .dirs = (const char *const *)f->dirs,
	    .nr_dirs = NR_DIRS,
	    .create = true,
	    .slots_per_dir = SLOTS,
	    .files_per_dir = FILES,
	    .geo = &f->geo,
	    .key_bytes = 32,
	    .ns_fp = f->ns_fp,
	    .log = &f->log,
	};
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	for (uint32_t d = 0; d < NR_DIRS; d++) {
		free(f->dirs[d]);
	}
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

/* Open and commit, as a store's open does once everything else succeeded. */
static struct tt_pool *
open_ok(const struct tt_pool_conf *conf)
{
	struct tt_pool *p = NULL;

	assert_int_equal(tt_pool_open(conf, &p), 0);
	assert_non_null(p);
	assert_int_equal(tt_pool_commit(p), 0);
	return p;
}

static char *
data_file_k(const struct fixture *f, uint32_t d, uint32_t k)
{
	char name[TT_POOL_NAME_BYTES];

	assert_int_equal(tt_pool_file_name(k, name, sizeof(name)), 0);
	return t_path_join(f->dirs[d], name);
}

static char *
data_file(const struct fixture *f, uint32_t d)
{
	return data_file_k(f, d, 0);
}

/* The size file \p k of a directory of \p slots slots has. */
static uint64_t
want_bytes(const struct fixture *f, uint32_t k, uint32_t slots)
{
	return TT_POOL_DATA_OFF + (slots / FILES + (k < slots % FILES)) * f->geo.slot_bytes;
}

static off_t
file_size_k(const struct fixture *f, uint32_t d, uint32_t k)
{
	char *path = data_file_k(f, d, k);
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	free(path);
	return st.st_size;
}

static off_t
file_size(const struct fixture *f, uint32_t d)
{
	char *path = data_file(f, d);
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	free(path);
	return st.st_size;
}

static int
read_sb_k(const struct fixture *f, uint32_t d, uint32_t k, struct tt_superblock *sb)
{
	char *path = data_file_k(f, d, k);
	uint8_t buf[TT_SB_BYTES];
	int fd = open(path, O_RDONLY);

	free(path);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, sizeof(buf), 0), sizeof(buf));
	close(fd);
	return tt_sb_decode(buf, sizeof(buf), sb);
}

static int
read_sb(const struct fixture *f, uint32_t d, struct tt_superblock *sb)
{
	return read_sb_k(f, d, 0, sb);
}

static void
write_at(const struct fixture *f, uint32_t d, off_t off, const void *buf, size_t len)
{
	char *path = data_file(f, d);
	int fd = open(path, O_WRONLY);

	free(path);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, off), (ssize_t)len);
	close(fd);
}

/* ---- open, reopen ---- */

static void
test_pool_create_makes_preallocated_files_with_superblocks(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = open_ok(&f->conf);
	char *stale;

	assert_int_equal(tt_pool_nr_dirs(p), NR_DIRS);
	assert_int_equal(tt_pool_nr_files(p), NR_DIRS * FILES);
	assert_int_equal(tt_pool_nr_slots(p), NR_DIRS * SLOTS);
	assert_int_equal(tt_pool_nr_free(p), NR_DIRS * SLOTS);
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		struct stat st;
		struct tt_superblock head;

		assert_int_equal(stat(f->dirs[d], &st), 0);
		assert_int_equal(st.st_mode & 0777, 0700);
		assert_int_equal(read_sb(f, d, &head), 0);
		for (uint32_t k = 0; k < FILES; k++) {
			char *path = data_file_k(f, d, k);
			uint64_t want = want_bytes(f, k, SLOTS);
			int fd = tt_pool_fds(p)[d * FILES + k];
			struct tt_superblock sb;

			assert_int_equal(stat(path, &st), 0);
			assert_int_equal(st.st_mode & 0777, 0600);
			assert_int_equal(st.st_size, want);
			/* Reserved, not sparse: a full disk shows up at open, not as a failed
			 * write. Only the gap before the slots, never used, is a hole. */
			assert_true((uint64_t)st.st_blocks * 512 >=
			            want - TT_POOL_DATA_OFF + TT_SB_BYTES);
			assert_int_equal(read_sb_k(f, d, k, &sb), 0);
			assert_memory_equal(&sb.geo, &f->geo.g, sizeof(sb.geo));
			assert_int_equal(sb.key_bytes, 32);
			assert_memory_equal(sb.ns_fp, f->ns_fp, TT_NS_FP_BYTES);
			assert_int_equal(sb.slot_bytes, f->geo.slot_bytes);
			assert_int_equal(sb.data_off, TT_POOL_DATA_OFF);
			/* The size is file 0's alone. */
			assert_int_equal(sb.nr_slots, k == 0 ? SLOTS : 0);
			assert_int_equal(sb.flags, 0);
			assert_int_equal(sb.nr_files, FILES);
			assert_int_equal(sb.file_index, k);
			assert_int_equal(sb.dir_index, head.dir_index);
			assert_int_equal(sb.store_uid, head.store_uid);
			assert_int_equal(sb.set_uid, head.set_uid);
			/* The descriptors are the data files, opened for O_DIRECT. */
			assert_true(fcntl(fd, F_GETFL) & O_DIRECT);
			assert_int_equal(fstat(fd, &st), 0);
			assert_int_equal(st.st_size, want);
			free(path);
		}
		stale = data_file_k(f, d, FILES);
		assert_false(t_path_exists(stale));
		free(stale);
	}
	tt_pool_close(p);
}

static void
test_pool_reopen_with_same_geometry_succeeds(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = open_ok(&f->conf);

	tt_pool_close(p);
	f->conf.create = false;
	p = open_ok(&f->conf);
	assert_int_equal(tt_pool_nr_slots(p), NR_DIRS * SLOTS);
	tt_pool_close(p);
	tt_pool_close(NULL);
}

static void
test_pool_reopen_resizes_to_the_requested_capacity(void **state)
{
	struct fixture *f = *state;
	struct tt_superblock sb;

	tt_pool_close(open_ok(&f->conf));
	f->conf.create = false;
	f->conf.slots_per_dir = 9;
	tt_pool_close(open_ok(&f->conf));
	for (uint32_t k = 0; k < FILES; k++) {
		assert_int_equal(file_size_k(f, 1, k), want_bytes(f, k, 9));
	}
	assert_int_equal(read_sb(f, 1, &sb), 0);
	assert_int_equal(sb.nr_slots, 9);
	f->conf.slots_per_dir = 2;
	tt_pool_close(open_ok(&f->conf));
	for (uint32_t k = 0; k < FILES; k++) {
		assert_int_equal(file_size_k(f, 2, k), want_bytes(f, k, 2));
	}
	assert_int_equal(read_sb(f, 2, &sb), 0);
	assert_int_equal(sb.nr_slots, 2);
	/* The other files record no size: a resize leaves their superblocks as they were. */
	assert_int_equal(read_sb_k(f, 2, 1, &sb), 0);
	assert_int_equal(sb.nr_slots, 0);
}

static void
assert_open_fails(struct fixture *f, int want)
{
	struct tt_pool *p = (struct tt_pool *)(uintptr_t)1;

	t_log_reset(&f->rec);
	assert_int_equal(tt_pool_open(&f->conf, &p), want);
	assert_null(p);
	assert_true(f->rec.nr_err > 0); /* the reason is logged */
}

static void
test_pool_reopen_with_other_identity_is_eexist(void **state)
{
	struct fixture *f = *state;
	struct tutti_geometry other_g = f->geo.g;
	struct tt_geo saved = f->geo, other;
	uint8_t other_fp[TT_NS_FP_BYTES];
	struct tt_superblock sb;

	tt_pool_close(open_ok(&f->conf));
	f->conf.create = false;
	other_g.nr_kv_heads = 4;
	assert_int_equal(tt_geo_derive(&other_g, &other), 0);
	f->conf.geo = &other;
	assert_open_fails(f, -EEXIST);
	f->conf.geo = &saved;
	f->conf.key_bytes = 16;
	assert_open_fails(f, -EEXIST);
	f->conf.key_bytes = 32;
	tt_ns_fingerprint("model/bf16/tp1", 14, other_fp);
	f->conf.ns_fp = other_fp;
	assert_open_fails(f, -EEXIST);
	/* The refused opens left the store as it was. */
	assert_int_equal(read_sb(f, 0, &sb), 0);
	assert_int_equal(sb.geo.nr_kv_heads, f->geo.g.nr_kv_heads);
	assert_int_equal(sb.nr_slots, SLOTS);
	assert_int_equal(file_size(f, 0), want_bytes(f, 0, SLOTS));
	f->conf.ns_fp = f->ns_fp;
	tt_pool_close(open_ok(&f->conf));
}

static void
test_pool_missing_directory_or_file_without_create_is_enoent(void **state)
{
	struct fixture *f = *state;
	char *path;

	f->conf.create = false;
	assert_open_fails(f, -ENOENT);
	assert_false(t_path_exists(f->dirs[0]));
	assert_int_equal(mkdir(f->dirs[0], 0700), 0);
	assert_int_equal(mkdir(f->dirs[1], 0700), 0);
	assert_int_equal(mkdir(f->dirs[2], 0700), 0);
	assert_open_fails(f, -ENOENT);
	path = data_file(f, 0);
	assert_false(t_path_exists(path));
	free(path);
}

static void
test_pool_directory_that_is_a_file_is_enotdir(void **state)
{
	struct fixture *f = *state;
	int fd = open(f->dirs[1], O_CREAT | O_WRONLY, 0600);

	assert_true(fd >= 0);
	close(fd);
	assert_open_fails(f, -ENOTDIR);
}

static void
test_pool_garbage_superblock_is_eproto_and_the_file_is_kept(void **state)
{
	struct fixture *f = *state;
	uint8_t junk[TT_SB_BYTES];
	struct t_rng r;
	char *path = data_file(f, 2);

	tt_pool_close(open_ok(&f->conf));
	t_rng_init(&r, t_seed(41));
	t_rng_fill(&r, junk, sizeof(junk));
	write_at(f, 2, 0, junk, sizeof(junk));
	assert_open_fails(f, -EPROTO);
	assert_true(t_path_exists(path)); /* not ours to delete */
	free(path);
}

static void
test_pool_damaged_superblock_is_refused(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = NULL;
	uint8_t byte = 0x7f;
	int rc;

	tt_pool_close(open_ok(&f->conf));
	write_at(f, 0, 20, &byte, 1); /* inside the geometry, checksum not updated */
	t_log_reset(&f->rec);
	rc = tt_pool_open(&f->conf, &p);
	assert_true(rc == -EBADMSG || rc == -EPROTO);
	assert_null(p);
}

static void
test_pool_second_open_of_a_locked_store_is_ebusy(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = open_ok(&f->conf);

	assert_open_fails(f, -EBUSY);
	tt_pool_close(p);
	tt_pool_close(open_ok(&f->conf));
}

static void
test_pool_invalid_conf_is_einval(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = NULL;

	f->conf.nr_dirs = 0;
	assert_int_equal(tt_pool_open(&f->conf, &p), -EINVAL);
	f->conf.nr_dirs = TT_POOL_MAX_DIRS + 1;
	assert_int_equal(tt_pool_open(&f->conf, &p), -EINVAL);
	f->conf.nr_dirs = NR_DIRS;
	f->conf.slots_per_dir = 0;
	assert_int_equal(tt_pool_open(&f->conf, &p), -EINVAL);
	f->conf.slots_per_dir = UINT32_MAX;
	assert_int_equal(tt_pool_open(&f->conf, &p), -EINVAL);
	assert_null(p);
	assert_false(t_path_exists(f->dirs[0]));
}

static void
test_pool_an_open_not_committed_leaves_nothing_behind(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = NULL;
	struct tt_superblock sb;

	/* A new store: the directories and files the open made go again. */
	assert_int_equal(tt_pool_open(&f->conf, &p), 0);
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		assert_int_equal(file_size(f, d), 0); /* nothing written before the commit */
	}
	tt_pool_close(p);
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		assert_false(t_path_exists(f->dirs[d]));
	}
	/* An existing store asked to resize: not before the commit. */
	tt_pool_close(open_ok(&f->conf));
	f->conf.slots_per_dir = SLOTS + 5;
	assert_int_equal(tt_pool_open(&f->conf, &p), 0);
	assert_int_equal(tt_pool_nr_slots(p), NR_DIRS * (SLOTS + 5));
	for (uint32_t l = 0; l < SLOTS + 5; l++) { /* what recovery reads */
		assert_int_equal(tt_pool_on_disk(p, l), l < SLOTS);
	}
	tt_pool_close(p);
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		for (uint32_t k = 0; k < FILES; k++) {
			assert_int_equal(file_size_k(f, d, k), want_bytes(f, k, SLOTS));
		}
		assert_int_equal(read_sb(f, d, &sb), 0);
		assert_int_equal(sb.nr_slots, SLOTS);
	}
}

/* ---- slots ---- */

static uint32_t
alloc_dir(struct tt_pool *p, uint32_t hint, uint32_t *slot)
{
	assert_int_equal(tt_pool_alloc(p, hint, slot), 0);
	assert_true(*slot < tt_pool_nr_slots(p));
	return *slot / SLOTS;
}

static void
test_pool_consecutive_hints_land_in_consecutive_directories(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = open_ok(&f->conf);
	bool seen[NR_DIRS * SLOTS] = {false};
	uint32_t slot;

	for (uint32_t i = 0; i < NR_DIRS * SLOTS; i++) {
		assert_int_equal(alloc_dir(p, i, &slot), i % NR_DIRS);
		assert_false(seen[slot]);
		seen[slot] = true;
		assert_int_equal(tt_pool_nr_free(p), NR_DIRS * SLOTS - i - 1);
	}
	assert_int_equal(tt_pool_alloc(p, 0, &slot), -ENOSPC);
	tt_pool_close(p);
}

static void
test_pool_allocation_falls_back_to_other_directories(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = open_ok(&f->conf);
	uint32_t slot, first_in_0;

	for (uint32_t i = 0; i < SLOTS; i++) {
		assert_int_equal(alloc_dir(p, 1, &slot), 1);
	}
	assert_int_equal(alloc_dir(p, 1, &slot), 2); /* dir 1 full: the next one */
	assert_int_equal(alloc_dir(p, 4, &slot), 2); /* hint 4 is dir 1 too */
	for (uint32_t i = 0; i < SLOTS - 2; i++) {
		assert_int_equal(alloc_dir(p, 2, &slot), 2);
	}
	/* dirs 1 and 2 full: hint 2 wraps around to dir 0 */
	assert_int_equal(alloc_dir(p, 2, &first_in_0), 0);
	while (tt_pool_nr_free(p) > 0) {
		assert_int_equal(alloc_dir(p, 1, &slot), 0);
	}
	assert_int_equal(tt_pool_alloc(p, 0, &slot), -ENOSPC);
	assert_int_equal(tt_pool_alloc(p, 1, &slot), -ENOSPC);
	assert_int_equal(tt_pool_alloc(p, 2, &slot), -ENOSPC);
	/* A freed slot is found again from any hint. */
	tt_pool_free(p, first_in_0);
	assert_int_equal(tt_pool_nr_free(p), 1);
	assert_int_equal(tt_pool_alloc(p, 1, &slot), 0);
	assert_int_equal(slot, first_in_0);
	assert_int_equal(tt_pool_alloc(p, 1, &slot), -ENOSPC);
	tt_pool_close(p);
}

static void
test_pool_locate_stripes_a_directory_s_slots_over_its_files(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = open_ok(&f->conf);
	bool seen[NR_DIRS * FILES][SLOTS] = {{false}};

	for (uint32_t s = 0; s < NR_DIRS * SLOTS; s++) {
		uint32_t file, local = s % SLOTS;
		uint64_t off;

		tt_pool_locate(p, s, &file, &off);
		/* Consecutive slots of a directory go to consecutive files of it. */
		assert_int_equal(file, s / SLOTS * FILES + local % FILES);
		assert_int_equal(off, TT_POOL_DATA_OFF + (local / FILES) * f->geo.slot_bytes);
		assert_int_equal(off % TUTTI_ALIGN, 0);
		assert_true(off >= TT_SB_BYTES);
		assert_true(off + f->geo.slot_bytes <= want_bytes(f, file % FILES, SLOTS));
		assert_false(seen[file][(off - TT_POOL_DATA_OFF) / f->geo.slot_bytes]);
		seen[file][(off - TT_POOL_DATA_OFF) / f->geo.slot_bytes] = true;
	}
	tt_pool_close(p);
}

static void
unlink_k(const struct fixture *f, uint32_t d, uint32_t k)
{
	char *path = data_file_k(f, d, k);

	assert_int_equal(unlink(path), 0);
	free(path);
}

static void
rename_k(const struct fixture *f, uint32_t from_d, uint32_t from_k, uint32_t to_d, uint32_t to_k)
{
	char *from = data_file_k(f, from_d, from_k), *to = data_file_k(f, to_d, to_k);

	assert_int_equal(rename(from, to), 0);
	free(from);
	free(to);
}

/* Swap file \p a_k of directory \p a_d with file \p b_k of directory \p b_d. */
static void
swap_k(const struct fixture *f, uint32_t a_d, uint32_t a_k, uint32_t b_d, uint32_t b_k)
{
	rename_k(f, a_d, a_k, a_d, TT_SB_MAX_FILES);
	rename_k(f, b_d, b_k, a_d, a_k);
	rename_k(f, a_d, TT_SB_MAX_FILES, b_d, b_k);
}

static void
test_pool_default_file_count_is_recorded_and_kept(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p;

	/* A new store takes TT_POOL_FILES_PER_DIR, never more files than slots... */
	f->conf.files_per_dir = 0;
	f->conf.slots_per_dir = 64;
	p = open_ok(&f->conf);
	assert_int_equal(tt_pool_nr_files(p), NR_DIRS * TT_POOL_FILES_PER_DIR);
	tt_pool_close(p);
	/* ...and an existing one keeps the count its superblocks give. */
	f->conf.create = false;
	f->conf.files_per_dir = 2;
	f->conf.slots_per_dir = 8;
	p = open_ok(&f->conf);
	assert_int_equal(tt_pool_nr_files(p), NR_DIRS * TT_POOL_FILES_PER_DIR);
	tt_pool_close(p);
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		unlink_k(f, d, 0);
	}
	f->conf.create = true;
	f->conf.files_per_dir = 0;
	f->conf.slots_per_dir = 5;
	p = open_ok(&f->conf);
	assert_int_equal(tt_pool_nr_files(p), NR_DIRS * 5);
	tt_pool_close(p);
	/* Within the store's budget of files. */
	f->conf.files_per_dir = TT_POOL_MAX_FILES / NR_DIRS + 1;
	assert_int_equal(tt_pool_open(&f->conf, &p), -EINVAL);
}

/* ---- a directory's files: each must be there, and its own ---- */

static void
test_pool_missing_or_empty_sibling_file_is_enoent(void **state)
{
	struct fixture *f = *state;
	char *path = data_file_k(f, 1, 2);
	int fd;

	tt_pool_close(open_ok(&f->conf));
	f->conf.create = false;
	unlink_k(f, 1, 2);
	assert_open_fails(f, -ENOENT);
	assert_true(t_log_contains(&f->rec, "tutti.data.2 is missing"));
	/* Not even an open that may create: the store would silently lose a file's chunks. */
	f->conf.create = true;
	assert_open_fails(f, -ENOENT);
	assert_false(t_path_exists(path)); /* and nothing was made in its place */
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_open_fails(f, -ENOENT);
	assert_true(t_log_contains(&f->rec, "is empty"));
	free(path);
	/* The remedy the message gives: remove tutti.data, and a new store is made. */
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		unlink_k(f, d, 0);
	}
	tt_pool_close(open_ok(&f->conf));
	f->conf.create = false;
	tt_pool_close(open_ok(&f->conf));
}

static void
test_pool_sibling_of_another_directory_or_place_is_refused(void **state)
{
	struct fixture *f = *state;

	tt_pool_close(open_ok(&f->conf));
	f->conf.create = false;
	/* Directories 0 and 2 swapped their files 1. */
	swap_k(f, 0, 1, 2, 1);
	assert_open_fails(f, -EEXIST);
	assert_true(t_log_contains(&f->rec, "another store or directory"));
	swap_k(f, 0, 1, 2, 1);
	tt_pool_close(open_ok(&f->conf));
	/* Two files of one directory swapped. */
	swap_k(f, 1, 1, 1, 2);
	assert_open_fails(f, -EINVAL);
	assert_true(t_log_contains(&f->rec, "renamed"));
	swap_k(f, 1, 1, 1, 2);
	tt_pool_close(open_ok(&f->conf));
}

static void
test_pool_truncated_sibling_file_is_extended(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = open_ok(&f->conf);
	char *path = data_file_k(f, 2, 0);

	tt_pool_close(p);
	/* File 0 of directory 2 holds local slots 0 and 3; cut through slot 3. */
	assert_int_equal(truncate(path, (off_t)(TT_POOL_DATA_OFF + f->geo.slot_bytes + 512)), 0);
	f->conf.create = false;
	t_log_reset(&f->rec);
	assert_int_equal(tt_pool_open(&f->conf, &p), 0);
	/* Slots starting inside their file are read (the cut one too), as before the cut. */
	for (uint32_t l = 0; l < SLOTS; l++) {
		assert_true(tt_pool_on_disk(p, 2 * SLOTS + l));
	}
	assert_int_equal(tt_pool_commit(p), 0);
	assert_true(t_log_contains(&f->rec, "shorter than its slots"));
	tt_pool_close(p);
	assert_int_equal(file_size_k(f, 2, 0), want_bytes(f, 0, SLOTS));
	/* Cut before a slot: that slot is no longer on disk. */
	assert_int_equal(truncate(path, (off_t)(TT_POOL_DATA_OFF + f->geo.slot_bytes)), 0);
	p = open_ok(&f->conf);
	assert_false(tt_pool_on_disk(p, 2 * SLOTS + 3));
	assert_true(tt_pool_on_disk(p, 2 * SLOTS + 2));
	tt_pool_close(p);
	free(path);
}

static void
test_pool_read_only_open_reads_every_file_and_writes_none(void **state)
{
	struct fixture *f = *state;
	struct stat before[NR_DIRS][FILES], after;
	struct tt_pool *p;
	char *path = data_file_k(f, 1, 2);

	tt_pool_close(open_ok(&f->conf));
	/* Cut a sibling: a writable open would extend it. */
	assert_int_equal(truncate(path, (off_t)TT_POOL_DATA_OFF), 0);
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		for (uint32_t k = 0; k < FILES; k++) {
			char *file = data_file_k(f, d, k);

			assert_int_equal(stat(file, &before[d][k]), 0);
			free(file);
		}
	}
	f->conf.create = false;
	f->conf.read_only = true;
	f->conf.slots_per_dir = SLOTS + 3; /* asks for a resize, which read-only never does */
	p = open_ok(&f->conf);
	assert_int_equal(tt_pool_nr_files(p), NR_DIRS * FILES);
	assert_int_equal(tt_pool_nr_slots(p), NR_DIRS * SLOTS);
	for (uint32_t i = 0; i < NR_DIRS * FILES; i++) {
		assert_int_equal(fcntl(tt_pool_fds(p)[i], F_GETFL) & O_ACCMODE, O_RDONLY);
	}
	assert_false(tt_pool_on_disk(p, SLOTS + 2)); /* the cut sibling's slot */
	tt_pool_close(p);
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		for (uint32_t k = 0; k < FILES; k++) {
			char *file = data_file_k(f, d, k);

			assert_int_equal(stat(file, &after), 0);
			assert_int_equal(after.st_size, before[d][k].st_size);
			assert_int_equal(after.st_mtim.tv_sec, before[d][k].st_mtim.tv_sec);
			assert_int_equal(after.st_mtim.tv_nsec, before[d][k].st_mtim.tv_nsec);
			free(file);
		}
	}
	free(path);
}

static void
test_pool_new_store_removes_files_beyond_its_count(void **state)
{
	struct fixture *f = *state;
	char *extra = data_file_k(f, 0, FILES);

	f->conf.files_per_dir = FILES + 1;
	tt_pool_close(open_ok(&f->conf));
	assert_true(t_path_exists(extra));
	for (uint32_t d = 0; d < NR_DIRS; d++) {
		unlink_k(f, d, 0);
	}
	f->conf.files_per_dir = FILES;
	tt_pool_close(open_ok(&f->conf));
	assert_false(t_path_exists(extra));
	free(extra);
}

static void
test_pool_slot_data_survives_reopen(void **state)
{
	struct fixture *f = *state;
	struct tt_pool *p = open_ok(&f->conf);
	uint8_t *buf = t_aligned_alloc(f->geo.slot_bytes),
	        *back = t_aligned_alloc(f->geo.slot_bytes);
	struct t_rng r;
	uint32_t dir;
	uint64_t off;

	t_rng_init(&r, t_seed(42));
	t_rng_fill(&r, buf, f->geo.slot_bytes);
	tt_pool_locate(p, 2 * SLOTS + 3, &dir, &off); /* the last slot of the last file */
	assert_int_equal(pwrite(tt_pool_fds(p)[dir], buf, f->geo.slot_bytes, (off_t)off),
	                 (ssize_t)f->geo.slot_bytes);
	tt_pool_close(p);
	f->conf.create = false;
	p = open_ok(&f->conf);
	assert_int_equal(pread(tt_pool_fds(p)[dir], back, f->geo.slot_bytes, (off_t)off),
	                 (ssize_t)f->geo.slot_bytes);
	assert_memory_equal(buf, back, f->geo.slot_bytes);
	tt_pool_close(p);
	free(buf);
	free(back);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(
	        test_pool_create_makes_preallocated_files_with_superblocks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_reopen_with_same_geometry_succeeds, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_pool_an_open_not_committed_leaves_nothing_behind,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_reopen_resizes_to_the_requested_capacity,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_reopen_with_other_identity_is_eexist, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(
	        test_pool_missing_directory_or_file_without_create_is_enoent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_directory_that_is_a_file_is_enotdir, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(
	        test_pool_garbage_superblock_is_eproto_and_the_file_is_kept, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_damaged_superblock_is_refused, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_pool_second_open_of_a_locked_store_is_ebusy, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_pool_invalid_conf_is_einval, setup, teardown),
	    cmocka_unit_test_setup_teardown(
	        test_pool_consecutive_hints_land_in_consecutive_directories, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_allocation_falls_back_to_other_directories,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(
	        test_pool_locate_stripes_a_directory_s_slots_over_its_files, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_default_file_count_is_recorded_and_kept,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_missing_or_empty_sibling_file_is_enoent,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(
	        test_pool_sibling_of_another_directory_or_place_is_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_truncated_sibling_file_is_extended, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(
	        test_pool_read_only_open_reads_every_file_and_writes_none, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_new_store_removes_files_beyond_its_count,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pool_slot_data_survives_reopen, setup, teardown),
	};

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
