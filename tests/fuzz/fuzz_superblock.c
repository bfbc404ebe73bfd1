/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: libFuzzer target for the superblock decoder and the path table's entry decoder.
 * Any bytes must decode without crashing or reading out of bounds, and whatever decodes must
 * encode back to the same fields (an entry is decoded for the store and place it names).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t
le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--) {
		v = v << 8 | p[i];
	}
	return v;
}

static void
path_entry(const uint8_t *data, size_t size)
{
	static uint8_t entry[TT_SB_PATH_BYTES];
	static char path[TT_SB_PATH_MAX + 1], again[TT_SB_PATH_MAX + 1];
	uint32_t index;
	uint64_t set;

	if (size < 16) {
		return;
	}
	index = (uint32_t)le(data + 4, 4);
	set = le(data + 8, 8);
	if (tt_sb_path_decode(data, size, set, index, path, sizeof(path)) != 0) {
		return;
	}
	tt_sb_path_encode(set, index, path, entry);
	if (tt_sb_path_decode(entry, sizeof(entry), set, index, again, sizeof(again)) != 0 ||
	    strcmp(path, again) != 0) {
		__builtin_trap();
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[TT_SB_BYTES];
	struct tt_superblock sb, again;

	path_entry(data, size);
	if (tt_sb_decode(data, size, &sb) != 0) {
		return 0;
	}
	tt_sb_encode(&sb, buf);
	if (tt_sb_decode(buf, sizeof(buf), &again) != 0 || memcmp(&sb, &again, sizeof(sb)) != 0) {
		__builtin_trap();
	}
	return 0;
}
