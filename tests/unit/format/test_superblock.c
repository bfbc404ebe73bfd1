/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/format/superblock.c: encode/decode round trip, the fixed little-endian
 * field offsets, -EPROTO for a bad magic or an intact superblock of another version (sealed by
 * its checksum, whatever its size), -EBADMSG for any flipped header bit (the version's included),
 * a short buffer, a wrong header size or an impossible directory or file set, the path table's
 * entries (round trip, and refused when damaged or of another store or directory), and the
 * namespace fingerprint.
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

/* Offsets fixed by the on-disk format; a change here is a format change. */
#define OFF_VERSION 8
#define OFF_HDR_BYTES 12
#define OFF_GEO 16
#define OFF_KEY_BYTES 44
#define OFF_NS_FP 48
#define OFF_SLOT_BYTES 64
#define OFF_DATA_OFF 72
#define OFF_NR_SLOTS 80
#define OFF_STORE_UID 88
#define OFF_SET_UID 96
#define OFF_NR_DIRS 104
#define OFF_DIR_INDEX 108
#define OFF_FLAGS 112
#define OFF_NR_FILES 116
#define OFF_FILE_INDEX 120
#define OFF_RESERVED 124
#define OFF_CSUM 128
#define HDR_BYTES 136

static uint8_t buf[TT_SB_BYTES];

static struct tt_superblock
sample(void)
{
	struct tt_superblock sb;

	memset(&sb, 0, sizeof(sb));
	sb.version = TT_SB_VERSION;
	assert_int_equal(tutti_geometry_preset("glm-4-9b", &sb.geo), 0);
	sb.geo.kv_planes = 1;
	sb.geo.elem_bytes = 1;
	sb.key_bytes = 48;
	for (int i = 0; i < (int)TT_NS_FP_BYTES; i++) {
		sb.ns_fp[i] = (uint8_t)(0xf0 + i);
	}
	sb.slot_bytes = 0x0102030405060708ull;
	sb.data_off = 1u << 20;
	sb.nr_slots = 0x1122334455ull;
	sb.store_uid = 0xfeedfacecafebeefull;
	sb.set_uid = 0x0badc0ffee0ddf00ull;
	sb.nr_dirs = 7;
	sb.dir_index = 5;
	sb.flags = TT_SB_CREATING;
	sb.nr_files = 9;
	sb.file_index = 4;
	return sb;
}

static uint64_t
le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--) {
		v = v << 8 | p[i];
	}
	return v;
}

static uint32_t
le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void
put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

/* Recompute the checksum after editing a field, as a writer of that content would. */
static void
reseal(uint8_t *b)
{
	uint64_t c = XXH3_64bits(b, OFF_CSUM);

	for (int i = 0; i < 8; i++) {
		b[OFF_CSUM + i] = (uint8_t)(c >> (8 * i));
	}
}

static void
test_sb_round_trip_preserves_every_field(void **state)
{
	struct tt_superblock in = sample(), out;

	memset(buf, 0xee, sizeof(buf));
	tt_sb_encode(&in, buf);
	memset(&out, 0xcc, sizeof(out));
	assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), 0);
	assert_int_equal(out.version, TT_SB_VERSION);
	assert_int_equal(out.geo.size, sizeof(out.geo));
	assert_memory_equal(&out.geo, &in.geo, sizeof(in.geo));
	assert_int_equal(out.key_bytes, 48);
	assert_memory_equal(out.ns_fp, in.ns_fp, TT_NS_FP_BYTES);
	assert_int_equal(out.slot_bytes, in.slot_bytes);
	assert_int_equal(out.data_off, in.data_off);
	assert_int_equal(out.nr_slots, in.nr_slots);
	assert_int_equal(out.store_uid, in.store_uid);
	assert_int_equal(out.set_uid, in.set_uid);
	assert_int_equal(out.nr_dirs, 7);
	assert_int_equal(out.dir_index, 5);
	assert_int_equal(out.flags, TT_SB_CREATING);
	assert_int_equal(out.nr_files, 9);
	assert_int_equal(out.file_index, 4);
	/* The rest of the 4 KiB is zero, not stale buffer bytes. */
	for (size_t i = HDR_BYTES; i < sizeof(buf); i++) {
		assert_int_equal(buf[i], 0);
	}
}

static void
test_sb_fields_sit_at_fixed_little_endian_offsets(void **state)
{
	struct tt_superblock in = sample();

	tt_sb_encode(&in, buf);
	assert_memory_equal(buf, "TUTTISB\0", 8);
	assert_int_equal(le32(buf + OFF_VERSION), TT_SB_VERSION);
	assert_int_equal(le32(buf + OFF_HDR_BYTES), HDR_BYTES);
	assert_int_equal(le32(buf + OFF_GEO + 0), 40);
	assert_int_equal(le32(buf + OFF_GEO + 4), 2);
	assert_int_equal(le32(buf + OFF_GEO + 8), 128);
	assert_int_equal(le32(buf + OFF_GEO + 12), 1);
	assert_int_equal(le32(buf + OFF_GEO + 16), 1);
	assert_int_equal(le32(buf + OFF_GEO + 20), 16);
	assert_int_equal(le32(buf + OFF_GEO + 24), 256);
	assert_int_equal(le32(buf + OFF_KEY_BYTES), 48);
	assert_memory_equal(buf + OFF_NS_FP, in.ns_fp, TT_NS_FP_BYTES);
	assert_int_equal(buf[OFF_SLOT_BYTES], 0x08); /* least significant byte first */
	assert_int_equal(le64(buf + OFF_SLOT_BYTES), 0x0102030405060708ull);
	assert_int_equal(le64(buf + OFF_DATA_OFF), 1u << 20);
	assert_int_equal(le64(buf + OFF_NR_SLOTS), 0x1122334455ull);
	assert_int_equal(le64(buf + OFF_STORE_UID), 0xfeedfacecafebeefull);
	assert_int_equal(le64(buf + OFF_SET_UID), 0x0badc0ffee0ddf00ull);
	assert_int_equal(le32(buf + OFF_NR_DIRS), 7);
	assert_int_equal(le32(buf + OFF_DIR_INDEX), 5);
	assert_int_equal(le32(buf + OFF_FLAGS), TT_SB_CREATING);
	assert_int_equal(le32(buf + OFF_NR_FILES), 9);
	assert_int_equal(le32(buf + OFF_FILE_INDEX), 4);
	assert_int_equal(le32(buf + OFF_RESERVED), 0);
	assert_int_equal(le64(buf + OFF_CSUM), XXH3_64bits(buf, OFF_CSUM));
}

static void
test_sb_bad_magic_is_eproto(void **state)
{
	struct tt_superblock in = sample(), out;

	for (int i = 0; i < 8; i++) {
		tt_sb_encode(&in, buf);
		buf[i] ^= 0x20;
		reseal(buf);
		assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), -EPROTO);
	}
	memset(buf, 0, sizeof(buf));
	assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), -EPROTO);
}

static void
test_sb_unknown_version_is_eproto(void **state)
{
	struct tt_superblock in = sample(), out;
	const uint32_t versions[] = {0, 1, 2, TT_SB_VERSION + 1, 0x100, UINT32_MAX};

	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		tt_sb_encode(&in, buf);
		put32(buf + OFF_VERSION, versions[i]);
		reseal(buf); /* a well-formed superblock of another version */
		assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), -EPROTO);
	}
}

static void
test_sb_any_flipped_header_byte_is_detected(void **state)
{
	struct tt_superblock in = sample(), out;

	for (int i = 0; i < HDR_BYTES; i++) {
		for (int bit = 0; bit < 8; bit++) {
			int rc;

			tt_sb_encode(&in, buf);
			buf[i] ^= (uint8_t)(1u << bit);
			rc = tt_sb_decode(buf, sizeof(buf), &out);
			/* The magic says whether this is a Tutti file at all (-EPROTO); any other
			 * flipped bit, the version's included, breaks the checksum: damage, not
			 * another version (issue 48). */
			assert_int_equal(rc, i < OFF_VERSION ? -EPROTO : -EBADMSG);
		}
	}
}

static void
test_sb_intact_superblock_of_another_size_and_version_is_eproto(void **state)
{
	struct tt_superblock in = sample(), out;
	/* Every version kept the size at byte 12 and the checksum in the size's last 8 bytes:
	 * version 1 had 96 bytes, version 4 128. */
	const uint32_t lens[] = {24, 96, 104, 128, TT_SB_BYTES};

	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
		uint64_t c;

		tt_sb_encode(&in, buf);
		put32(buf + OFF_VERSION, 1);
		put32(buf + OFF_HDR_BYTES, lens[l]);
		c = XXH3_64bits(buf, lens[l] - 8);
		for (int i = 0; i < 8; i++) {
			buf[lens[l] - 8 + i] = (uint8_t)(c >> (8 * i));
		}
		assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), -EPROTO);
		buf[OFF_GEO] ^= 1; /* the same, damaged */
		assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), -EBADMSG);
	}
}

static void
test_sb_wrong_header_size_is_ebadmsg(void **state)
{
	struct tt_superblock in = sample(), out;

	tt_sb_encode(&in, buf);
	put32(buf + OFF_HDR_BYTES, HDR_BYTES + 8);
	reseal(buf);
	assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), -EBADMSG);
}

static void
test_sb_short_buffer_is_ebadmsg(void **state)
{
	struct tt_superblock in = sample(), out;

	tt_sb_encode(&in, buf);
	for (size_t len = 0; len < HDR_BYTES; len++) {
		assert_int_equal(tt_sb_decode(buf, len, &out), -EBADMSG);
	}
	assert_int_equal(tt_sb_decode(buf, HDR_BYTES, &out), 0);
	assert_int_equal(tt_sb_decode(NULL, sizeof(buf), &out), -EBADMSG);
	assert_int_equal(tt_sb_decode(buf, sizeof(buf), NULL), -EBADMSG);
}

static void
test_sb_decode_leaves_out_untouched_on_error(void **state)
{
	struct tt_superblock in = sample(), out, before;

	tt_sb_encode(&in, buf);
	buf[OFF_NR_SLOTS] ^= 1;
	memset(&out, 0x5c, sizeof(out));
	before = out;
	assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), -EBADMSG);
	assert_memory_equal(&out, &before, sizeof(out));
}

static void
test_sb_impossible_directory_set_is_ebadmsg(void **state)
{
	static const struct {
		uint32_t off, value;
	} bad[] = {
	    {OFF_NR_DIRS, 0},    {OFF_NR_DIRS, TT_SB_MAX_DIRS + 1},
	    {OFF_DIR_INDEX, 7},  {OFF_DIR_INDEX, 1000},
	    {OFF_FLAGS, 2},      {OFF_FLAGS, UINT32_MAX},
	    {OFF_NR_FILES, 0},   {OFF_NR_FILES, TT_SB_MAX_FILES + 1},
	    {OFF_FILE_INDEX, 9}, {OFF_FILE_INDEX, 1000},
	    {OFF_RESERVED, 1},
	};
	struct tt_superblock in = sample(), out;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tt_sb_encode(&in, buf);
		put32(buf + bad[i].off, bad[i].value);
		reseal(buf); /* checksummed, yet written by no version of this format */
		assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), -EBADMSG);
	}
	in.nr_dirs = TT_SB_MAX_DIRS;
	in.dir_index = TT_SB_MAX_DIRS - 1;
	in.nr_files = TT_SB_MAX_FILES;
	in.file_index = TT_SB_MAX_FILES - 1;
	in.flags = 0;
	tt_sb_encode(&in, buf);
	assert_int_equal(tt_sb_decode(buf, sizeof(buf), &out), 0);
}

static uint8_t path_buf[TT_SB_PATH_BYTES];

static void
test_path_entry_round_trips_and_is_tied_to_its_store_and_place(void **state)
{
	char out[TT_SB_PATH_MAX + 1], long_path[TT_SB_PATH_MAX + 100];

	tt_sb_path_encode(0x1234, 3, "/mnt/nvme3/tutti", path_buf);
	assert_int_equal(tt_sb_path_decode(path_buf, sizeof(path_buf), 0x1234, 3, out, sizeof(out)),
	                 0);
	assert_string_equal(out, "/mnt/nvme3/tutti");
	/* Another store's entry, or another directory's, names nothing here. */
	assert_int_equal(tt_sb_path_decode(path_buf, sizeof(path_buf), 0x1235, 3, out, sizeof(out)),
	                 -EBADMSG);
	assert_int_equal(tt_sb_path_decode(path_buf, sizeof(path_buf), 0x1234, 2, out, sizeof(out)),
	                 -EBADMSG);
	/* Every byte it covers is checked. */
	for (size_t i = 0; i < 16 + strlen("/mnt/nvme3/tutti") + 8; i++) {
		tt_sb_path_encode(0x1234, 3, "/mnt/nvme3/tutti", path_buf);
		path_buf[i] ^= 0x10;
		assert_int_equal(
		    tt_sb_path_decode(path_buf, sizeof(path_buf), 0x1234, 3, out, sizeof(out)),
		    -EBADMSG);
	}
	/* Never written (zeros), short buffers, a small output. */
	memset(path_buf, 0, sizeof(path_buf));
	assert_int_equal(tt_sb_path_decode(path_buf, sizeof(path_buf), 0, 0, out, sizeof(out)),
	                 -EBADMSG);
	tt_sb_path_encode(0x1234, 3, "/a", path_buf);
	assert_int_equal(tt_sb_path_decode(path_buf, 25, 0x1234, 3, out, sizeof(out)), -EBADMSG);
	assert_int_equal(tt_sb_path_decode(path_buf, 26, 0x1234, 3, out, sizeof(out)), 0);
	assert_int_equal(tt_sb_path_decode(path_buf, sizeof(path_buf), 0x1234, 3, out, 16),
	                 -EBADMSG);
	/* A path longer than an entry holds is cut, not overrun. */
	memset(long_path, 'x', sizeof(long_path) - 1);
	long_path[sizeof(long_path) - 1] = '\0';
	tt_sb_path_encode(1, 0, long_path, path_buf);
	assert_int_equal(tt_sb_path_decode(path_buf, sizeof(path_buf), 1, 0, out, sizeof(out)), 0);
	assert_int_equal(strlen(out), TT_SB_PATH_MAX);
}

static void
test_ns_fingerprint_distinguishes_namespaces(void **state)
{
	uint8_t a[TT_NS_FP_BYTES], b[TT_NS_FP_BYTES], c[TT_NS_FP_BYTES], e[TT_NS_FP_BYTES];

	tt_ns_fingerprint("llama-3-8b/bf16/tp0", 19, a);
	tt_ns_fingerprint("llama-3-8b/bf16/tp0", 19, b);
	tt_ns_fingerprint("llama-3-8b/bf16/tp1", 19, c);
	tt_ns_fingerprint(NULL, 0, e);
	assert_memory_equal(a, b, TT_NS_FP_BYTES);
	assert_memory_not_equal(a, c, TT_NS_FP_BYTES);
	assert_memory_not_equal(a, e, TT_NS_FP_BYTES);
	tt_ns_fingerprint("", 0, b);
	assert_memory_equal(e, b, TT_NS_FP_BYTES);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sb_round_trip_preserves_every_field),
	    cmocka_unit_test(test_sb_fields_sit_at_fixed_little_endian_offsets),
	    cmocka_unit_test(test_sb_bad_magic_is_eproto),
	    cmocka_unit_test(test_sb_unknown_version_is_eproto),
	    cmocka_unit_test(test_sb_any_flipped_header_byte_is_detected),
	    cmocka_unit_test(test_sb_wrong_header_size_is_ebadmsg),
	    cmocka_unit_test(test_sb_intact_superblock_of_another_size_and_version_is_eproto),
	    cmocka_unit_test(test_sb_short_buffer_is_ebadmsg),
	    cmocka_unit_test(test_sb_decode_leaves_out_untouched_on_error),
	    cmocka_unit_test(test_sb_impossible_directory_set_is_ebadmsg),
	    cmocka_unit_test(test_path_entry_round_trips_and_is_tied_to_its_store_and_place),
	    cmocka_unit_test(test_ns_fingerprint_distinguishes_namespaces),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
