/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: filesystem errors at open: a read-only directory or filesystem (-EACCES or
 * -EROFS) and a disk too small for the capacity (-ENOSPC, with no file left behind). As root,
 * read-only and small filesystems are tmpfs mounts in a private mount namespace (permissions do
 * not stop root); otherwise read-only is chmod 0500 and the disk-full tests are skipped.
 */
#include <errno.h>
#include <sched.h>
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

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_read_only_directory_is_eacces_or_erofs),
	    T(test_store_on_a_filesystem_remounted_read_only_is_erofs),
	    T(test_disk_full_is_enospc_and_leaves_no_file),
	    T(test_disk_full_on_a_later_directory_leaves_no_file_in_earlier_ones),
	};

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	if (geteuid() == 0) {
		/* Mounts made from here on vanish with this process and are seen by nobody else. */
		if (unshare(CLONE_NEWNS) != 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
			return T_EXIT_SKIP;
		}
		g_mounts = true;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
