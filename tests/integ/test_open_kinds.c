/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: every path the library opens is refused unless it is a regular file, or a
 * directory where one is meant, before it is opened for reading or writing, promptly (a FIFO
 * without a peer would block the open) and with a log line naming it (issue 48: tutti profile
 * hung in tutti_profile_read's fopen of a FIFO). Covered: the helper itself (tt_open_kind: a
 * FIFO, /dev/null, a socket, a directory and a regular file where each is not meant, for reading
 * and for writing, and a symbolic link with O_NOFOLLOW); a store's directory and its data files
 * (tutti.data and tutti.data.1) being anything else, for every kind of open; profile files read
 * and written. A test that blocks is ended by an alarm, so a regression fails rather than hangs.
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/common.h"
#include "t_disk.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define SLOTS 64u
/* Long enough for a loaded machine, short enough that a hang fails the test in good time. */
#define ALARM_S 20

static int
setup(void **state)
{
	struct tutti_geometry geo;

	if (tutti_geometry_preset("tiny", &geo) != 0) {
		return -1;
	}
	return t_tmp_fixture_setup(state, &geo, t_seed(48));
}

/* What can stand at a path. */
enum kind { K_FIFO, K_SOCKET, K_DIR, K_FILE, K_CHAR, K_NR };
static const char *const g_kind_names[K_NR] = {"a FIFO", "a socket", "a directory",
                                               "a regular file", "a character device"};

/* Make \p kind at \p path; false when this process may not (a device node needs root). */
static bool
make(enum kind kind, const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd;

	switch (kind) {
	case K_FIFO:
		assert_int_equal(mkfifo(path, 0600), 0);
		return true;
	case K_SOCKET:
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		assert_true(fd >= 0 && strlen(path) < sizeof(a.sun_path));
		memcpy(a.sun_path, path, strlen(path));
		assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
		close(fd);
		return true;
	case K_DIR:
		assert_int_equal(mkdir(path, 0700), 0);
		return true;
	case K_FILE:
		fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, "x", 1), 1);
		close(fd);
		return true;
	case K_CHAR:
		/* The node of /dev/null: opening it changes nothing. */
		return mknod(path, S_IFCHR | 0600, makedev(1, 3)) == 0;
	default:
		return false;
	}
}

static void
unmake(enum kind kind, const char *path)
{
	assert_int_equal(kind == K_DIR ? rmdir(path) : unlink(path), 0);
}

/* The file at \p path is still \p kind: nothing replaced or wrote it. */
static void
assert_still(enum kind kind, const char *path)
{
	static const mode_t types[K_NR] = {S_IFIFO, S_IFSOCK, S_IFDIR, S_IFREG, S_IFCHR};
	struct stat st;

	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(st.st_mode & S_IFMT, types[kind]);
	if (kind == K_FILE) {
		assert_int_equal(st.st_size, 1);
	}
}

/* ---- the helper ---- */

static void
test_open_kind_refuses_what_is_not_meant_without_blocking(void **state)
{
	struct t_tmp_fixture *f = *state;
	struct tt_log log = {.fn = t_log_fn, .arg = &f->rec, .level = TUTTI_LOG_ERR};
	/* Reading, writing (as a trace is written: created, truncated), and O_DIRECT. */
	const int flags[] = {O_RDONLY, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW,
	                     O_RDWR | O_DIRECT | O_NOFOLLOW};

	alarm(ALARM_S);
	for (int k = 0; k < K_NR; k++) {
		char *path = t_path_join(f->tmp, "thing");

		if (!make((enum kind)k, path)) {
			free(path);
			continue;
		}
		for (size_t i = 0; i < TT_ARRAY_SIZE(flags); i++) {
			for (int want = 0; want < 2; want++) {
				enum tt_kind tk = want ? TT_KIND_DIR : TT_KIND_FILE;
				bool fits =
				    (k == K_FILE && tk == TT_KIND_FILE) ||
				    (k == K_DIR && tk == TT_KIND_DIR && flags[i] == O_RDONLY);
				int fd;

				t_log_reset(&f->rec);
				fd = tt_open_kind(AT_FDCWD, path, flags[i], 0600, tk, -EINVAL, path,
				                  &log);
				if (fits) {
					assert_true(fd >= 0);
					/* O_NONBLOCK, used for the check, is cleared again. */
					assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
					close(fd);
					continue;
				}
				if (k == K_DIR && tk == TT_KIND_DIR) {
					assert_true(fd <
					            0); /* a directory is not opened to write */
					continue;
				}
				if (fd != -EINVAL || !t_log_contains(&f->rec, path) ||
				    !t_log_contains(&f->rec, g_kind_names[k])) {
					fail_msg("%s, flags 0x%x, %s wanted: %d, log: %s",
					         g_kind_names[k], flags[i],
					         want ? "a directory" : "a file", fd,
					         f->rec.nr > 0 ? f->rec.msgs[0] : "(none)");
				}
			}
		}
		if (k != K_FILE) { /* which the opens to write truncated */
			assert_still((enum kind)k, path);
		}
		unmake((enum kind)k, path);
		free(path);
	}
	alarm(0);
}

static void
test_open_kind_keeps_the_open_flags_meaning(void **state)
{
	struct t_tmp_fixture *f = *state;
	struct tt_log log = {.fn = t_log_fn, .arg = &f->rec, .level = TUTTI_LOG_ERR};
	char *path = t_path_join(f->tmp, "new"), *link = t_path_join(f->tmp, "link");
	int fd;

	/* Created when missing, with the mode given. */
	fd = tt_open_kind(AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL, 0640, TT_KIND_FILE, -EINVAL,
	                  path, &log);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(tt_open_kind(AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL, 0640,
	                              TT_KIND_FILE, -EINVAL, path, &log),
	                 -EEXIST);
	/* A missing file is the open's error, not logged here. */
	t_log_reset(&f->rec);
	assert_int_equal(
	    tt_open_kind(AT_FDCWD, link, O_RDONLY, 0, TT_KIND_FILE, -EINVAL, link, &log), -ENOENT);
	assert_int_equal(f->rec.nr, 0);
	/* A symbolic link is followed, unless O_NOFOLLOW says not to; then -ELOOP. */
	assert_int_equal(symlink(path, link), 0);
	fd = tt_open_kind(AT_FDCWD, link, O_RDONLY, 0, TT_KIND_FILE, -EINVAL, link, &log);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(tt_open_kind(AT_FDCWD, link, O_RDONLY | O_NOFOLLOW, 0, TT_KIND_FILE,
	                              -EINVAL, link, &log),
	                 -ELOOP);
	/* A link to a FIFO is what it points to. */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkfifo(path, 0600), 0);
	alarm(ALARM_S);
	assert_int_equal(
	    tt_open_kind(AT_FDCWD, link, O_RDONLY, 0, TT_KIND_FILE, -EPROTO, link, &log), -EPROTO);
	alarm(0);
	free(path);
	free(link);
}

/* ---- a store's directory and data files ---- */

static int
open_dir(struct t_tmp_fixture *f, const char *dir, uint32_t flags, struct tutti_store **st)
{
	struct tutti_store_opts o;
	const char *dirs[1] = {dir};

	t_store_opts(&o, (flags & TUTTI_OPEN_EXISTING) ? NULL : &f->geo, dirs, 1, SLOTS,
	             TUTTI_ENGINE_POSIX, &f->rec);
	o.flags = flags;
	o.staging_bytes = 1u << 20;
	t_log_reset(&f->rec);
	return tutti_store_open((flags & TUTTI_OPEN_EXISTING) ? NULL : &f->geo, &o, st);
}

static const uint32_t g_open_kinds[] = {0, TUTTI_OPEN_CREATE, TUTTI_OPEN_EXISTING,
                                        TUTTI_OPEN_EXISTING | TUTTI_OPEN_READ_ONLY,
                                        TUTTI_OPEN_EXISTING | TUTTI_OPEN_REPAIR};

/* Every kind of open of \p dir fails with \p want, at once, naming \p path and what it is. */
static void
assert_refused(struct t_tmp_fixture *f, const char *dir, const char *path, enum kind kind, int want)
{
	alarm(ALARM_S);
	for (size_t i = 0; i < TT_ARRAY_SIZE(g_open_kinds); i++) {
		struct tutti_store *st = NULL;
		int rc = open_dir(f, dir, g_open_kinds[i], &st);

		if (rc != want || st != NULL || !t_log_contains(&f->rec, path) ||
		    !t_log_contains(&f->rec, g_kind_names[kind])) {
			fail_msg("%s at %s, open flags 0x%x: %d (%d expected), log: %s",
			         g_kind_names[kind], path, g_open_kinds[i], rc, want,
			         f->rec.nr > 0 ? f->rec.msgs[0] : "(none)");
		}
	}
	alarm(0);
	assert_still(kind, path);
}

static void
test_store_refuses_a_data_file_that_is_not_a_regular_file(void **state)
{
	struct t_tmp_fixture *f = *state;

	for (int k = 0; k < K_NR; k++) {
		char name[32];
		char *dir, *file, *file1;
		struct tutti_store *st = NULL;

		if (k == K_FILE) {
			continue;
		}
		snprintf(name, sizeof(name), "data.%d", k);
		dir = t_path_join(f->tmp, name);
		file = t_data_path(dir);
		file1 = t_path_join(dir, "tutti.data.1");
		/* tutti.data itself, in a directory of its own. */
		assert_int_equal(mkdir(dir, 0700), 0);
		if (!make((enum kind)k, file)) {
			free(file1);
			free(file);
			free(dir);
			continue;
		}
		assert_refused(f, dir, file, (enum kind)k, -EPROTO);
		unmake((enum kind)k, file);
		/* Another data file of an existing store. */
		assert_int_equal(open_dir(f, dir, TUTTI_OPEN_CREATE, &st), 0);
		tutti_store_close(st);
		assert_int_equal(unlink(file1), 0);
		assert_true(make((enum kind)k, file1));
		assert_refused(f, dir, file1, (enum kind)k, -EPROTO);
		free(file1);
		free(file);
		free(dir);
	}
}

static void
test_store_refuses_a_directory_that_is_not_one(void **state)
{
	struct t_tmp_fixture *f = *state;

	for (int k = 0; k < K_NR; k++) {
		char *dir = t_path_join(f->tmp, "notdir");

		if (k != K_DIR && make((enum kind)k, dir)) {
			assert_refused(f, dir, dir, (enum kind)k, -ENOTDIR);
			unmake((enum kind)k, dir);
		}
		free(dir);
	}
}

/* ---- profile files ---- */

static void
test_profile_refuses_what_is_not_a_regular_file(void **state)
{
	struct t_tmp_fixture *f = *state;
	double ns[4] = {1, 2, 3, 4}, back[4];
	struct tutti_profile prof = {.size = sizeof(prof),
	                             .nr_layers = 4,
	                             .read_bytes_per_s = 1e9,
	                             .write_bytes_per_s = 1e9,
	                             .layer_ns_per_token = ns};
	struct tutti_profile got = {
	    .size = sizeof(got), .nr_layers = 4, .layer_ns_per_token = back};

	alarm(ALARM_S);
	for (int k = 0; k < K_NR; k++) {
		char *path = t_path_join(f->tmp, "tutti.profile");

		if (k == K_FILE || !make((enum kind)k, path)) {
			free(path);
			continue;
		}
		/* Read (a FIFO without a writer blocked fopen for good), and written: the
		 * profile is renamed over the path, which would replace the FIFO, the socket or
		 * (as root) the device node. */
		assert_int_equal(tutti_profile_read(path, &got), -EINVAL);
		assert_int_equal(tutti_profile_write(path, &prof), -EINVAL);
		assert_still((enum kind)k, path);
		unmake((enum kind)k, path);
		free(path);
	}
	assert_int_equal(tutti_profile_read("/dev/null", &got), -EINVAL);
	alarm(0);
}

int
main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, t_tmp_fixture_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_open_kind_refuses_what_is_not_meant_without_blocking),
	    T(test_open_kind_keeps_the_open_flags_meaning),
	    T(test_store_refuses_a_data_file_that_is_not_a_regular_file),
	    T(test_store_refuses_a_directory_that_is_not_one),
	    T(test_profile_refuses_what_is_not_a_regular_file),
	};

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	return cmocka_run_group_tests_name("open_kinds", tests, NULL, NULL);
}
