/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Slot header codec. Fixed fields first, then one checksum per object, then the header's own
 * XXH3-64 over every byte before it. The encoded length depends on the object count, so the
 * decoder bounds it before trusting it, and checks the seal before the version: a header that
 * breaks it is damaged, whatever version it claims.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <xxhash.h>

#include "format/format.h"
#include "format/le.h"

enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 8,
	OFF_HDR_BYTES = 12,
	OFF_STORE_UID = 16,
	OFF_SEQ = 24,
	OFF_NR_BLOCKS = 32,
	OFF_KEY_BYTES = 36,
	OFF_NR_OBJECTS = 40,
	OFF_HAS_PARENT = 44,
	OFF_KEY = 48,
	OFF_PARENT = OFF_KEY + TT_MAX_KEY_BYTES,
	OFF_CSUMS = OFF_PARENT + TT_MAX_KEY_BYTES,
};

_Static_assert(OFF_CSUMS + 8 * TT_SLOT_MAX_LAYERS + 8 <= TUTTI_SLOT_HEADER_BYTES,
               "object checksums must fit in the slot header");

static uint32_t
encoded_bytes(uint32_t nr_objects)
{
	return OFF_CSUMS + 8 * nr_objects + 8;
}

void
tt_slot_encode(const struct tt_slot_header *h, uint8_t *buf)
{
	uint32_t len = encoded_bytes(h->nr_objects);

	memset(buf, 0, TUTTI_SLOT_HEADER_BYTES);
	memcpy(buf + OFF_MAGIC, TT_SLOT_MAGIC, 8);
	put32(buf + OFF_VERSION, TT_SLOT_VERSION);
	put32(buf + OFF_HDR_BYTES, len);
	put64(buf + OFF_STORE_UID, h->store_uid);
	put64(buf + OFF_SEQ, h->seq);
	put32(buf + OFF_NR_BLOCKS, h->nr_blocks);
	put32(buf + OFF_KEY_BYTES, h->key_bytes);
	put32(buf + OFF_NR_OBJECTS, h->nr_objects);
	put32(buf + OFF_HAS_PARENT, h->has_parent ? 1 : 0);
	memcpy(buf + OFF_KEY, h->key, h->key_bytes);
	if (h->has_parent) {
		memcpy(buf + OFF_PARENT, h->parent, h->key_bytes);
	}
	for (uint32_t i = 0; i < h->nr_objects; i++) {
		put64(buf + OFF_CSUMS + 8 * i, h->csum[i]);
	}
	put64(buf + len - 8, XXH3_64bits(buf, len - 8));
}

static bool
all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != 0) {
			return false;
		}
	}
	return true;
}

/*
 * Whether the \p len bytes at \p buf hold a header sealed by its own checksum, under the rule
 * every version of the slot header keeps (docs/format.md): its size in bytes at OFF_HDR_BYTES,
 * XXH3-64 of every byte before them in its last 8. This is what tells a header of another version
 * from a damaged one: a flipped bit anywhere, the version's included, breaks the seal.
 */
static bool
sealed(const uint8_t *buf, size_t len)
{
	uint32_t hdr_bytes = get32(buf + OFF_HDR_BYTES);

	return hdr_bytes >= OFF_HDR_BYTES + 4 + 8 && hdr_bytes <= len &&
	       get64(buf + hdr_bytes - 8) == XXH3_64bits(buf, hdr_bytes - 8);
}

int
tt_slot_decode(const uint8_t *buf, size_t len, struct tt_slot_header *out)
{
	uint32_t hdr_bytes, nr_objects, key_bytes;

	if (buf == NULL || out == NULL || len < OFF_HDR_BYTES + 4) {
		return -EBADMSG;
	}
	if (memcmp(buf + OFF_MAGIC, TT_SLOT_MAGIC, 8) != 0) {
		return all_zero(buf + OFF_MAGIC, 8) ? -ENODATA : -EPROTO;
	}
	if (!sealed(buf, len)) {
		return -EBADMSG;
	}
	if (get32(buf + OFF_VERSION) != TT_SLOT_VERSION) {
		return -EPROTO; /* intact, of another version */
	}
	hdr_bytes = get32(buf + OFF_HDR_BYTES);
	nr_objects = get32(buf + OFF_NR_OBJECTS);
	key_bytes = get32(buf + OFF_KEY_BYTES);
	/* Sealed but impossible: written by no version of this format. */
	if (nr_objects == 0 || nr_objects > TT_SLOT_MAX_LAYERS ||
	    hdr_bytes != encoded_bytes(nr_objects) || key_bytes == 0 ||
	    key_bytes > TT_MAX_KEY_BYTES || get32(buf + OFF_HAS_PARENT) > 1) {
		return -EBADMSG;
	}
	memset(out, 0, sizeof(*out));
	out->store_uid = get64(buf + OFF_STORE_UID);
	out->seq = get64(buf + OFF_SEQ);
	out->nr_blocks = get32(buf + OFF_NR_BLOCKS);
	out->key_bytes = key_bytes;
	out->nr_objects = nr_objects;
	out->has_parent = get32(buf + OFF_HAS_PARENT);
	memcpy(out->key, buf + OFF_KEY, key_bytes);
	if (out->has_parent) {
		memcpy(out->parent, buf + OFF_PARENT, key_bytes);
	}
	for (uint32_t i = 0; i < nr_objects; i++) {
		out->csum[i] = get64(buf + OFF_CSUMS + 8 * i);
	}
	return 0;
}
