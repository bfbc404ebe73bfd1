/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/common/common.c: logging through the caller's hook (levels, truncation, no
 * hook), aligned zeroed allocation, rounding helpers, tutti_version() and tutti_strerror().
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/common.h"
#include "tutti/geometry.h"
#include "t_util.h"

static void
test_log_passes_messages_up_to_the_level(void **state)
{
	struct t_log rec;
	struct tt_log log = {.fn = t_log_fn, .arg = &rec, .level = TUTTI_LOG_WARN};

	t_log_reset(&rec);
	tt_log_err(&log, "disk %d failed", 3);
	tt_log_warn(&log, "slow %s", "path");
	tt_log_info(&log, "not shown");
	tt_log_debug(&log, "not shown");
	assert_int_equal(rec.nr, 2);
	assert_int_equal(rec.nr_err, 1);
	assert_string_equal(rec.msgs[0], "disk 3 failed");
	assert_int_equal(rec.levels[1], TUTTI_LOG_WARN);
	assert_string_equal(rec.msgs[1], "slow path");
	log.level = TUTTI_LOG_DEBUG;
	tt_log_debug(&log, "now shown");
	assert_int_equal(rec.nr, 3);
}

static void
test_log_without_hook_is_silent_and_long_lines_are_cut(void **state)
{
	struct t_log rec;
	struct tt_log none = {.fn = NULL, .level = TUTTI_LOG_DEBUG};
	struct tt_log log = {.fn = t_log_fn, .arg = &rec, .level = TUTTI_LOG_DEBUG};
	char big[2000];

	tt_log_err(NULL, "nobody listens");
	tt_log_err(&none, "nobody listens");
	t_log_reset(&rec);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	tt_log_err(&log, "%s", big);
	assert_int_equal(rec.nr, 1);
	assert_true(strlen(rec.msgs[0]) < sizeof(rec.msgs[0]));
	assert_true(strlen(rec.msgs[0]) > 100);
}

static void
test_aligned_alloc_is_aligned_and_zeroed(void **state)
{
	const size_t sizes[] = {0, 1, 4095, 4096, 4097, 1 << 20};

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint8_t *p = tt_aligned_alloc(sizes[i]);
		size_t n = sizes[i] ? sizes[i] : 1;

		assert_non_null(p);
		assert_int_equal((uintptr_t)p % TUTTI_ALIGN, 0);
		for (size_t j = 0; j < n; j++) {
			assert_int_equal(p[j], 0);
		}
		tt_aligned_free(p);
	}
	tt_aligned_free(NULL);
}

static void
test_round_up_and_div_round_up(void **state)
{
	assert_int_equal(tt_round_up(0, 4096), 0);
	assert_int_equal(tt_round_up(1, 4096), 4096);
	assert_int_equal(tt_round_up(4096, 4096), 4096);
	assert_int_equal(tt_round_up(4097, 4096), 8192);
	assert_int_equal(tt_round_up(10, 3), 12);
	assert_int_equal(tt_div_round_up(0, 7), 0);
	assert_int_equal(tt_div_round_up(7, 7), 1);
	assert_int_equal(tt_div_round_up(8, 7), 2);
}

static void
test_version_and_strerror(void **state)
{
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.%d", TUTTI_VERSION_MAJOR, TUTTI_VERSION_MINOR,
	         TUTTI_VERSION_PATCH);
	assert_string_equal(tutti_version(), want);
	assert_string_equal(tutti_strerror(0), "Success");
	assert_string_equal(tutti_strerror(-ENOENT), tutti_strerror(ENOENT));
	assert_string_equal(tutti_strerror(-ENOSPC), strerror(ENOSPC));
	assert_non_null(tutti_strerror(-123456));
	assert_non_null(tutti_strerror(INT32_MIN + 1));
}

static void
test_strerror_of_int_min_does_not_overflow(void **state)
{
	/* "Positive values are treated like their negation": INT_MIN has no negation in int. */
	assert_non_null(tutti_strerror(INT32_MIN));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_log_passes_messages_up_to_the_level),
	    cmocka_unit_test(test_log_without_hook_is_silent_and_long_lines_are_cut),
	    cmocka_unit_test(test_aligned_alloc_is_aligned_and_zeroed),
	    cmocka_unit_test(test_round_up_and_div_round_up),
	    cmocka_unit_test(test_version_and_strerror),
	    cmocka_unit_test(test_strerror_of_int_min_does_not_overflow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
