/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/format/slot.c: encode/decode round trip; -ENODATA for a slot never
 * committed; one flipped bit anywhere in the encoded header (every bit of every field: magic,
 * version, size, the fixed fields, the object checksums and the header's own checksum) is
 * damage, -EBADMSG (-EPROTO for the magic: not a slot header at all), never "another version's";
 * an intact header of another version, sealed by its checksum under the rule every version keeps
 * (the header's size at byte 12, XXH3-64 of every byte before it in its last 8 bytes), is
 * -EPROTO, whatever its size. Regression for issue 48: a flipped version bit was taken for
 * another version's header, which repair keeps, so repair never converged.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>
#include <xxhash.h>

#include "format/format.h"

/* Offsets fixed by the on-disk format (docs/format.md, "Slot header"). */
#define OFF_VERSION 8
#define OFF_HDR_BYTES 12
#define OFF_CSUMS 176
#define NR_LAYERS 3
#define HDR_LEN (OFF_CSUMS + 8 * NR_LAYERS + 8)

static uint8_t buf[TUTTI_SLOT_HEADER_BYTES];

static struct tt_slot_header
sample(void)
{
	struct tt_slot_header h;

	memset(&h, 0, sizeof(h));
	h.store_uid = 0xfeedfacecafebeefull;
	h.seq = 0x0102030405060708ull;
	h.nr_blocks = 3;
	h.key_bytes = 40;
	h.nr_objects = NR_LAYERS;
	h.has_parent = 1;
	for (uint32_t i = 0; i < h.key_bytes; i++) {
		h.key[i] = (uint8_t)(0x10 + i);
		h.parent[i] = (uint8_t)(0x80 + i);
	}
	for (uint32_t l = 0; l < NR_LAYERS; l++) {
		h.csum[l] = 0x1111111111111111ull * (l + 1);
	}
	return h;
}

static void
put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

/* Seal \p len encoded bytes as every version does: the size at byte 12, XXH3-64 of the bytes
 * before the last 8 in them. */
static void
reseal(uint8_t *b, uint32_t len)
{
	uint64_t c;

	put32(b + OFF_HDR_BYTES, len);
	c = XXH3_64bits(b, len - 8);
	for (int i = 0; i < 8; i++) {
		b[len - 8 + i] = (uint8_t)(c >> (8 * i));
	}
}

static void
test_slot_round_trip_preserves_every_field(void **state)
{
	struct tt_slot_header in = sample(), out;

	(void)state;
	tt_slot_encode(&in, buf);
	assert_int_equal(tt_slot_decode(buf, sizeof(buf), &out), 0);
	assert_memory_equal(&in, &out, sizeof(in));
	in.has_parent = 0;
	memset(in.parent, 0, sizeof(in.parent));
	tt_slot_encode(&in, buf);
	assert_int_equal(tt_slot_decode(buf, sizeof(buf), &out), 0);
	assert_memory_equal(&in, &out, sizeof(in));
}

static void
test_slot_never_committed_is_enodata(void **state)
{
	struct tt_slot_header out;

	(void)state;
	memset(buf, 0, sizeof(buf));
	assert_int_equal(tt_slot_decode(buf, sizeof(buf), &out), -ENODATA);
}

static void
test_slot_any_flipped_bit_is_damage_not_another_version(void **state)
{
	struct tt_slot_header in = sample(), out;

	(void)state;
	for (uint32_t i = 0; i < HDR_LEN; i++) {
		for (int bit = 0; bit < 8; bit++) {
			int rc;

			tt_slot_encode(&in, buf);
			buf[i] ^= (uint8_t)(1u << bit);
			rc = tt_slot_decode(buf, sizeof(buf), &out);
			if (i < OFF_VERSION) {
				assert_int_equal(rc, -EPROTO); /* no slot magic */
			} else if (rc != -EBADMSG) {
				fail_msg("bit %d of byte %u flipped: %d, not -EBADMSG", bit, i, rc);
			}
		}
	}
	/* Beyond the encoded bytes nothing is read. */
	tt_slot_encode(&in, buf);
	buf[HDR_LEN] ^= 1;
	assert_int_equal(tt_slot_decode(buf, sizeof(buf), &out), 0);
}

static void
test_slot_intact_header_of_another_version_is_eproto(void **state)
{
	struct tt_slot_header in = sample(), out;
	const uint32_t versions[] = {0, 1, TT_SLOT_VERSION + 1, 0x100, UINT32_MAX};
	/* Another version may have another size: any that holds magic, version, size and checksum.
	 */
	const uint32_t lens[] = {HDR_LEN, 24, 100, TUTTI_SLOT_HEADER_BYTES};

	(void)state;
	for (size_t v = 0; v < sizeof(versions) / sizeof(versions[0]); v++) {
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
			tt_slot_encode(&in, buf);
			put32(buf + OFF_VERSION, versions[v]);
			reseal(buf, lens[l]);
			assert_int_equal(tt_slot_decode(buf, sizeof(buf), &out), -EPROTO);
		}
	}
	/* Sealed, this version, but a size that is not its own: damage no writer made. */
	tt_slot_encode(&in, buf);
	reseal(buf, HDR_LEN + 8);
	assert_int_equal(tt_slot_decode(buf, sizeof(buf), &out), -EBADMSG);
}

static void
test_slot_size_that_cannot_hold_its_checksum_is_ebadmsg(void **state)
{
	struct tt_slot_header in = sample(), out;
	const uint32_t lens[] = {0, 8, 16, 23, TUTTI_SLOT_HEADER_BYTES + 1, UINT32_MAX};

	(void)state;
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		tt_slot_encode(&in, buf);
		put32(buf + OFF_VERSION, TT_SLOT_VERSION + 1);
		put32(buf + OFF_HDR_BYTES, lens[l]);
		assert_int_equal(tt_slot_decode(buf, sizeof(buf), &out), -EBADMSG);
	}
}

static void
test_slot_short_buffer_is_ebadmsg(void **state)
{
	struct tt_slot_header in = sample(), out;

	(void)state;
	tt_slot_encode(&in, buf);
	for (size_t len = 8; len < HDR_LEN; len++) {
		assert_int_equal(tt_slot_decode(buf, len, &out), -EBADMSG);
	}
	assert_int_equal(tt_slot_decode(buf, HDR_LEN, &out), 0);
	assert_int_equal(tt_slot_decode(NULL, sizeof(buf), &out), -EBADMSG);
	assert_int_equal(tt_slot_decode(buf, sizeof(buf), NULL), -EBADMSG);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slot_round_trip_preserves_every_field),
	    cmocka_unit_test(test_slot_never_committed_is_enodata),
	    cmocka_unit_test(test_slot_any_flipped_bit_is_damage_not_another_version),
	    cmocka_unit_test(test_slot_intact_header_of_another_version_is_eproto),
	    cmocka_unit_test(test_slot_size_that_cannot_hold_its_checksum_is_ebadmsg),
	    cmocka_unit_test(test_slot_short_buffer_is_ebadmsg),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
