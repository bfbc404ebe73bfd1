/* SPDX-License-Identifier: Apache-2.0 */
/*
 * On-disk structures and their codecs (docs/format.md is the specification). Decoders accept any
 * bytes: they check magic, then version, then size, then checksum, and never read out of bounds.
 */
#ifndef TT_FORMAT_H
#define TT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "tutti/geometry.h"

#define TT_SB_MAGIC "TUTTISB\0"
#define TT_SB_VERSION 1u
#define TT_SB_BYTES 4096u /* the superblock's share of the file */
#define TT_NS_FP_BYTES 16u

/* The superblock at offset 0 of every store data file. */
struct tt_superblock {
	uint32_t version;
	struct tutti_geometry geo;
	uint32_t key_bytes;
	uint8_t ns_fp[TT_NS_FP_BYTES]; /* fingerprint of the namespace */
	uint64_t slot_bytes;
	uint64_t data_off; /* file offset of slot 0 */
	uint64_t nr_slots;
};

/* Serialise \p sb into \p buf (TT_SB_BYTES bytes, little-endian, checksummed). */
void tt_sb_encode(const struct tt_superblock *sb, uint8_t *buf);

/*
 * Parse \p len bytes at \p buf. Returns 0, or -EPROTO (bad magic, unknown version) or -EBADMSG
 * (short buffer, bad sizes, checksum mismatch).
 */
int tt_sb_decode(const uint8_t *buf, size_t len, struct tt_superblock *out);

/* Fingerprint of a namespace (XXH3-128 of its bytes). */
void tt_ns_fingerprint(const void *ns, size_t len, uint8_t out[TT_NS_FP_BYTES]);

#endif /* TT_FORMAT_H */
