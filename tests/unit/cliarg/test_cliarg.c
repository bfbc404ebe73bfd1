/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: tools/common/cliarg.c, the command line's number parser: only a plain decimal
 * number is taken (no sign, spaces, other bases, inf or nan), values outside an option's range
 * are refused rather than wrapped, and the error names the option. And its open of a path
 * given on the command line (cliarg_open): a regular file opens with the flags asked for (not
 * left non-blocking, close-on-exec); a FIFO, a directory or a device is refused at once, without
 * blocking, and left as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
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

#include "cliarg.h"

static void
test_whole_numbers_in_range_are_taken(void **state)
{
	uint64_t v = 7;

	assert_int_equal(cliarg_parse_u64("0", 0, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(cliarg_parse_u64("10", 0, 10, &v), 0);
	assert_int_equal(v, 10);
	assert_int_equal(cliarg_parse_u64("007", 0, 10, &v), 0);
	assert_int_equal(v, 7); /* decimal, not octal */
	assert_int_equal(cliarg_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
}

static void
test_anything_but_a_plain_decimal_is_einval(void **state)
{
	static const char *const bad[] = {"",    " -1", "-1",  "+1",  "1 ",  " 1", "0x10",
	                                  "1e3", "1.0", "ten", "1,0", "\t2", "1\n"};
	uint64_t v = 42;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(cliarg_parse_u64(bad[i], 0, UINT64_MAX, &v), -EINVAL);
	}
	assert_int_equal(cliarg_parse_u64(NULL, 0, 1, &v), -EINVAL);
	assert_int_equal(v, 42); /* untouched */
}

static void
test_out_of_range_and_overflow_are_erange(void **state)
{
	uint64_t v = 42;

	assert_int_equal(cliarg_parse_u64("11", 0, 10, &v), -ERANGE);
	assert_int_equal(cliarg_parse_u64("0", 1, 10, &v), -ERANGE);
	assert_int_equal(cliarg_parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(cliarg_parse_u64("99999999999999999999999", 0, UINT64_MAX, &v), -ERANGE);
	/* A MiB count whose shift by 20 would wrap to 0 is out of any sane range. */
	assert_int_equal(cliarg_parse_u64("17592186044416", 1, 1u << 20, &v), -ERANGE);
	assert_int_equal(v, 42);
}

static void
test_the_u32_form_keeps_to_its_range(void **state)
{
	uint32_t v = 5;

	assert_int_equal(cliarg_u32("prog", "--n", "4294967295", 1, 65536, &v), -ERANGE);
	assert_int_equal(cliarg_u32("prog", "--n", "4294967296", 1, UINT32_MAX, &v), -ERANGE);
	assert_int_equal(v, 5);
	assert_int_equal(cliarg_u32("prog", "--n", "65536", 1, 65536, &v), 0);
	assert_int_equal(v, 65536);
}

static void
test_finite_numbers_only(void **state)
{
	static const char *const bad[] = {"inf", "nan", "-1", " 1", "1x", "", "+2", "e5", "."};
	double v = 3;

	assert_int_equal(cliarg_parse_double("12.5", 0, 1e9, &v), 0);
	assert_true(v == 12.5);
	assert_int_equal(cliarg_parse_double(".5", 0, 1, &v), 0);
	assert_int_equal(cliarg_parse_double("2e3", 0, 1e9, &v), 0);
	assert_true(v == 2000);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(cliarg_parse_double(bad[i], 0, 1e9, &v), -EINVAL);
	}
	assert_int_equal(cliarg_parse_double("1e400", 0, INFINITY, &v), -ERANGE);
	assert_int_equal(cliarg_parse_double("2e9", 0, 1e9, &v), -ERANGE);
	assert_true(v == 2000);
}

/* A temporary directory for the open tests, "" when none could be made. */
static char g_tmp[4096];

static int
tmp_setup(void **state)
{
	const char *base = getenv("TMPDIR");

	snprintf(g_tmp, sizeof(g_tmp), "%s/tutti-cliarg.XXXXXX", base != NULL ? base : "/tmp");
	return mkdtemp(g_tmp) != NULL ? 0 : -1;
}

static int
tmp_teardown(void **state)
{
	static const char *const names[] = {"file", "fifo", "dir"};
	char path[4200];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", g_tmp, names[i]);
		unlink(path);
		rmdir(path);
	}
	return rmdir(g_tmp);
}

static void
test_open_takes_a_regular_file_with_the_flags_asked_for(void **state)
{
	char path[4200];
	int fd, fl;

	snprintf(path, sizeof(path), "%s/file", g_tmp);
	fd = cliarg_open("prog", "--out", path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	assert_true(fd >= 0);
	fl = fcntl(fd, F_GETFL);
	assert_true((fl & O_APPEND) != 0);
	assert_true((fl & O_NONBLOCK) == 0);
	assert_true((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	/* An existing file, for reading; O_NONBLOCK kept where it is asked for. */
	fd = cliarg_open("prog", NULL, path, O_RDONLY | O_NONBLOCK, 0);
	assert_true(fd >= 0);
	assert_true((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
	close(fd);
	/* A path that cannot be opened: the open's own error, for the caller to report. */
	snprintf(path, sizeof(path), "%s/none/file", g_tmp);
	assert_int_equal(cliarg_open("prog", "--out", path, O_WRONLY | O_CREAT, 0600), -ENOENT);
}

static void
test_open_refuses_what_is_not_a_regular_file_without_blocking(void **state)
{
	char fifo[4200], dir[4200];
	struct stat st;

	snprintf(fifo, sizeof(fifo), "%s/fifo", g_tmp);
	snprintf(dir, sizeof(dir), "%s/dir", g_tmp);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(mkdir(dir, 0700), 0);
	alarm(20); /* a FIFO's open that blocks fails the test rather than hanging it */
	assert_int_equal(cliarg_open("prog", "--json", fifo, O_WRONLY | O_CREAT | O_APPEND, 0644),
	                 -EINVAL);
	assert_int_equal(cliarg_open("prog", "--json", fifo, O_RDONLY, 0), -EINVAL);
	assert_int_equal(cliarg_open("prog", "--json", dir, O_WRONLY | O_CREAT, 0644), -EINVAL);
	assert_int_equal(cliarg_open("prog", NULL, "/dev/null", O_WRONLY, 0), -EINVAL);
	alarm(0);
	assert_int_equal(lstat(fifo, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_whole_numbers_in_range_are_taken),
	    cmocka_unit_test(test_anything_but_a_plain_decimal_is_einval),
	    cmocka_unit_test(test_out_of_range_and_overflow_are_erange),
	    cmocka_unit_test(test_the_u32_form_keeps_to_its_range),
	    cmocka_unit_test(test_finite_numbers_only),
	    cmocka_unit_test_setup_teardown(test_open_takes_a_regular_file_with_the_flags_asked_for,
	                                    tmp_setup, tmp_teardown),
	    cmocka_unit_test_setup_teardown(
	        test_open_refuses_what_is_not_a_regular_file_without_blocking, tmp_setup,
	        tmp_teardown),
	};

	return cmocka_run_group_tests_name("cliarg", tests, NULL, NULL);
}
