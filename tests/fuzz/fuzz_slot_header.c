/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: libFuzzer target for the slot header decoder. Any bytes must decode without
 * crashing or reading out of bounds, decoded sizes must be within the format's limits, and
 * whatever decodes must encode back to the same fields.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "format/format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[TUTTI_SLOT_HEADER_BYTES];
	static struct tt_slot_header h, again;

	if (tt_slot_decode(data, size, &h) != 0) {
		return 0;
	}
	if (h.nr_objects == 0 || h.nr_objects > TT_SLOT_MAX_LAYERS || h.key_bytes == 0 ||
	    h.key_bytes > TT_MAX_KEY_BYTES || h.has_parent > 1) {
		__builtin_trap();
	}
	tt_slot_encode(&h, buf);
	if (tt_slot_decode(buf, sizeof(buf), &again) != 0 || memcmp(&h, &again, sizeof(h)) != 0) {
		__builtin_trap();
	}
	return 0;
}
