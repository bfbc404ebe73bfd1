/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: filesystem errors at open: a read-only directory or filesystem (-EACCES or
 * -EROFS) and a disk too small for the capacity (-ENOSPC, with no file left behind); and a disk
 * that fills up under a store whose space is not reserved, during a save. As root,
 * read-only and small filesystems are tmpfs mounts in a private mount namespace (permissions do
 * not stop root); otherwise read-only is chmod 0500 and the disk-full tests are skipped.
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

#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

static bool g_mounts; /* root in a private mount namespace */

struct fixture {
	char *tmp;
	char *mnt; /* tmp/mnt: a mount point */
	bool mounted;
	struct tutti_geometry geo;
	struct tutti_store_opts opts;
	const char *dirs[2];
	struct t_log rec;
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	f->mnt = t_path_join(f->tmp, "mnt");
	if (mkdir(f->mnt, 0700) != 0 || tutti_geometry_preset("tiny", &f->geo) != 0) {
		return -1;
	}
	t_store_opts(&f->opts, &f->geo, f->dirs, 1, 16, TUTTI_ENGINE_POSIX, &f->rec);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	if (f->mounted) {
		umount2(f->mnt, MNT_DETACH);
	}
	chmod(f->mnt, 0700);
	free(f->mnt);
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

static void
mount_tmpfs(struct fixture *f, const char *data, unsigned long flags)
{
	assert_int_equal(mount("tutti-test", f->mnt, "tmpfs", flags, data), 0);
	f->mounted = true;
}

static int
open_rc(struct fixture *f)
{
	struct tutti_store *st = (struct tutti_store *)(uintptr_t)1;
	int rc;

	t_log_reset(&f->rec);
	rc = tutti_store_open(&f->geo, &f->opts, &st);
	if (rc == 0) {
		tutti_store_close(st);
	} else {
		assert_null(st);
		assert_true(f->rec.nr_err > 0);
	}
	return rc;
}

static void
assert_read_only_error(int rc)
{
	if (rc != -EACCES && rc != -EROFS) {
		fail_msg("expected -EACCES or -EROFS, got %d (%s)", rc, tutti_strerror(rc));
	}
}

static void
test_read_only_directory_is_eacces_or_erofs(void **state)
{
	struct fixture *f = *state;
	char *sub = t_path_join(f->mnt, "store");

	if (g_mounts) {
		mount_tmpfs(f, "size=4m", MS_RDONLY);
	} else {
		assert_int_equal(chmod(f->mnt, 0500), 0);
	}
	/* The directory itself cannot take the data file... */
	f->dirs[0] = f->mnt;
	assert_read_only_error(open_rc(f));
	/* ...and no directory can be made in it. */
	f->dirs[0] = sub;
	assert_read_only_error(open_rc(f));
	assert_false(t_path_exists(sub));
	free(sub);
}

static void
test_store_on_a_filesystem_remounted_read_only_is_erofs(void **state)
{
	struct fixture *f = *state;

	if (!g_mounts) {
		skip();
	}
	mount_tmpfs(f, "size=4m", 0);
	f->dirs[0] = f->mnt;
	assert_int_equal(open_rc(f), 0);
	assert_int_equal(mount(NULL, f->mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
	f->opts.flags = 0;
	assert_int_equal(open_rc(f), -EROFS);
}

static void
test_disk_full_is_enospc_and_leaves_no_file(void **state)
{
	struct fixture *f = *state;
	char *file = t_path_join(f->mnt, "tutti.data");

	if (!g_mounts) {
		skip();
	}
	mount_tmpfs(f, "size=4m", 0);
	f->dirs[0] = f->mnt;
	f->opts.capacity_bytes = 64ull << 20;
	assert_int_equal(open_rc(f), -ENOSPC);
	assert_false(t_path_exists(file));
	/* The filesystem itself works: a store that fits opens there. */
	f->opts.capacity_bytes = 1ull << 20;
	assert_int_equal(open_rc(f), 0);
	assert_true(t_path_exists(file));
	free(file);
}

static void
test_disk_full_on_a_later_directory_leaves_no_file_in_earlier_ones(void **state)
{
	struct fixture *f = *state;
	char *big = t_path_join(f->tmp, "big");
	char *file = t_path_join(big, "tutti.data");

	if (!g_mounts) {
		skip();
	}
	mount_tmpfs(f, "size=4m", 0);
	/* 2 x 32 MiB: the first directory has room, the second (4 MiB) does not. */
	f->dirs[0] = big;
	f->dirs[1] = f->mnt;
	f->opts.nr_dirs = 2;
	f->opts.capacity_bytes = 64ull << 20;
	assert_int_equal(open_rc(f), -ENOSPC);
	/* A failed open gives back the space it reserved. */
	assert_false(t_path_exists(file));
	free(file);
	free(big);
}

/* Fill the filesystem of \p path with a file of zeros there until it is full. */
static void
fill_filesystem(const char *path)
{
	static const uint8_t zeros[64 << 10];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	while (write(fd, zeros, sizeof(zeros)) > 0) {
	}
	assert_int_equal(errno, ENOSPC);
	close(fd);
}

/*
 * A store whose file lost its reserved space (a filesystem without fallocate leaves it sparse)
 * on a disk that then fills up: the save fails with -ENOSPC, and the stats count a write error,
 * not a store that could not free a slot (every slot is free).
 */
static void
test_disk_full_during_a_save_is_a_write_error_not_a_full_store(void **state)
{
	struct fixture *f = *state;
	char *file = t_path_join(f->mnt, "tutti.data");
	char *filler = t_path_join(f->mnt, "filler");
	uint32_t bpc = tutti_geometry_blocks_per_chunk(&f->geo), ids[64];
	struct tutti_stats s = {.size = sizeof(s)};
	struct tutti_store *st = NULL;
	struct tutti_request req;
	uint8_t key[32] = {1, 2, 3};
	struct t_kv *kv = NULL;
	int32_t status = 0;
	struct stat sb;
	int fd;

	if (!g_mounts) {
		skip();
	}
	assert_true(bpc <= 64);
	mount_tmpfs(f, "size=4m", 0);
	f->dirs[0] = f->mnt;
	assert_int_equal(tutti_store_open(&f->geo, &f->opts, &st), 0);
	/* The slots' space goes back to the filesystem (the superblock's stays), which fills up. */
	fd = open(file, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1 << 20,
	                           sb.st_size - (1 << 20)),
	                 0);
	close(fd);
	fill_filesystem(filler);
	assert_int_equal(t_kv_alloc(&f->geo, T_LAYOUT_BLOCKS_FIRST, bpc, &kv), 0);
	for (uint32_t b = 0; b < bpc; b++) {
		ids[b] = b;
	}
	req = (struct tutti_request){
	    .size = sizeof(req), .nr_keys = 1, .keys = key, .nr_blocks = bpc, .block_ids = ids};
	assert_int_equal(tutti_store_save(st, kv->kv, &req, 1, &status), 0);
	assert_int_equal(status, -ENOSPC);
	assert_int_equal(tutti_store_get_stats(st, &s), 0);
	assert_int_equal(s.save_no_space, 0);
	assert_int_equal(s.save_errors, 1);
	assert_int_equal(s.used_slots, 0);
	tutti_store_close(st);
	t_kv_free(kv);
	free(filler);
	free(file);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_read_only_directory_is_eacces_or_erofs),
	    T(test_store_on_a_filesystem_remounted_read_only_is_erofs),
	    T(test_disk_full_is_enospc_and_leaves_no_file),
	    T(test_disk_full_on_a_later_directory_leaves_no_file_in_earlier_ones),
	    T(test_disk_full_during_a_save_is_a_write_error_not_a_full_store),
	};

	return t_run_with_private_mounts("fs_errors", tests, sizeof(tests) / sizeof(tests[0]),
	                                 &g_mounts, T_EXIT_SKIP);
}
