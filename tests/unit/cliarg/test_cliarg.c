/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: tools/common/cliarg.c, the command line's number parser: only a plain decimal
 * number is taken (no sign, spaces, other bases, inf or nan), values outside an option's range
 * are refused rather than wrapped, and the error names the option.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_whole_numbers_in_range_are_taken),
	    cmocka_unit_test(test_anything_but_a_plain_decimal_is_einval),
	    cmocka_unit_test(test_out_of_range_and_overflow_are_erange),
	    cmocka_unit_test(test_the_u32_form_keeps_to_its_range),
	    cmocka_unit_test(test_finite_numbers_only),
	};

	return cmocka_run_group_tests_name("cliarg", tests, NULL, NULL);
}
