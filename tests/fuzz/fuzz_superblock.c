/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: libFuzzer target for the superblock decoder. Any bytes must decode without
 * crashing or reading out of bounds, and whatever decodes must encode back to the same fields.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[TT_SB_BYTES];
	struct tt_superblock sb, again;

	if (tt_sb_decode(data, size, &sb) != 0) {
		return 0;
	}
	tt_sb_encode(&sb, buf);
	if (tt_sb_decode(buf, sizeof(buf), &again) != 0 || memcmp(&sb, &again, sizeof(sb)) != 0) {
		__builtin_trap();
	}
	return 0;
}
