/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Superblock codec. Fields are written at fixed offsets in little-endian order; the checksum is
 * XXH3-64 over every byte before it, and is checked before the version (sealed()).
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <xxhash.h>

#include "format/format.h"
#include "format/le.h"

/* Field offsets, fixed by the format. */
enum {
	OFF_MAGIC = 0,
	OFF_VERSION = 8,
	OFF_HDR_BYTES = 12,
	OFF_GEO = 16, /* 7 x u32: layers, heads, head_dim, elem, planes, block, chunk */
	OFF_KEY_BYTES = 44,
	OFF_NS_FP = 48,
	OFF_SLOT_BYTES = 64,
	OFF_DATA_OFF = 72,
	OFF_NR_SLOTS = 80,
	OFF_STORE_UID = 88,
	OFF_SET_UID = 96,
	OFF_NR_DIRS = 104,
	OFF_DIR_INDEX = 108,
	OFF_FLAGS = 112,
	OFF_NR_FILES = 116,
	OFF_FILE_INDEX = 120,
	OFF_RESERVED = 124,
	OFF_CSUM = 128,
	HDR_BYTES = 136,
};

/* Path table entry: length, directory index, set id, the path, then a checksum of all before. */
enum {
	PATH_OFF_LEN = 0,
	PATH_OFF_INDEX = 4,
	PATH_OFF_SET_UID = 8,
	PATH_OFF_PATH = 16,
};

void
tt_sb_encode(const struct tt_superblock *sb, uint8_t *buf)
{
	const struct tutti_geometry *g = &sb->geo;
	const uint32_t geo[7] = {g->nr_layers, g->nr_kv_heads,  g->head_dim,    g->elem_bytes,
	                         g->kv_planes, g->block_tokens, g->chunk_tokens};

	memset(buf, 0, TT_SB_BYTES);
	memcpy(buf + OFF_MAGIC, TT_SB_MAGIC, 8);
	put32(buf + OFF_VERSION, TT_SB_VERSION);
	put32(buf + OFF_HDR_BYTES, HDR_BYTES);
	for (int i = 0; i < 7; i++) {
		put32(buf + OFF_GEO + 4 * i, geo[i]);
	}
	put32(buf + OFF_KEY_BYTES, sb->key_bytes);
	memcpy(buf + OFF_NS_FP, sb->ns_fp, TT_NS_FP_BYTES);
	put64(buf + OFF_SLOT_BYTES, sb->slot_bytes);
	put64(buf + OFF_DATA_OFF, sb->data_off);
	put64(buf + OFF_NR_SLOTS, sb->nr_slots);
	put64(buf + OFF_STORE_UID, sb->store_uid);
	put64(buf + OFF_SET_UID, sb->set_uid);
	put32(buf + OFF_NR_DIRS, sb->nr_dirs);
	put32(buf + OFF_DIR_INDEX, sb->dir_index);
	put32(buf + OFF_FLAGS, sb->flags);
	put32(buf + OFF_NR_FILES, sb->nr_files);
	put32(buf + OFF_FILE_INDEX, sb->file_index);
	put32(buf + OFF_RESERVED, 0);
	put64(buf + OFF_CSUM, XXH3_64bits(buf, OFF_CSUM));
}

/*
 * Whether the \p len bytes at \p buf hold a superblock sealed by its own checksum, under the rule
 * every version of the format has kept (docs/format.md): its encoded size at OFF_HDR_BYTES,
 * XXH3-64 of every byte before them in its last 8. What tells a store of another version from a
 * damaged superblock: a flipped bit anywhere, the version's included, breaks the seal.
 */
static bool
sealed(const uint8_t *buf, size_t len)
{
	uint32_t hdr_bytes = get32(buf + OFF_HDR_BYTES);

	return hdr_bytes >= OFF_HDR_BYTES + 4 + 8 && hdr_bytes <= len && hdr_bytes <= TT_SB_BYTES &&
	       get64(buf + hdr_bytes - 8) == XXH3_64bits(buf, hdr_bytes - 8);
}

int
tt_sb_decode(const uint8_t *buf, size_t len, struct tt_superblock *out)
{
	struct tt_superblock sb;
	uint32_t geo[7];

	if (buf == NULL || out == NULL || len < 12) {
		return -EBADMSG;
	}
	if (memcmp(buf + OFF_MAGIC, TT_SB_MAGIC, 8) != 0) {
		return -EPROTO;
	}
	if (len < OFF_HDR_BYTES + 4 || !sealed(buf, len)) {
		return -EBADMSG;
	}
	if (get32(buf + OFF_VERSION) != TT_SB_VERSION) {
		return -EPROTO; /* intact, of another version */
	}
	if (get32(buf + OFF_HDR_BYTES) != HDR_BYTES) {
		return -EBADMSG;
	}
	memset(&sb, 0, sizeof(sb));
	sb.version = TT_SB_VERSION;
	for (int i = 0; i < 7; i++) {
		geo[i] = get32(buf + OFF_GEO + 4 * i);
	}
	sb.geo.size = sizeof(sb.geo);
	sb.geo.nr_layers = geo[0];
	sb.geo.nr_kv_heads = geo[1];
	sb.geo.head_dim = geo[2];
	sb.geo.elem_bytes = geo[3];
	sb.geo.kv_planes = geo[4];
	sb.geo.block_tokens = geo[5];
	sb.geo.chunk_tokens = geo[6];
	sb.key_bytes = get32(buf + OFF_KEY_BYTES);
	memcpy(sb.ns_fp, buf + OFF_NS_FP, TT_NS_FP_BYTES);
	sb.slot_bytes = get64(buf + OFF_SLOT_BYTES);
	sb.data_off = get64(buf + OFF_DATA_OFF);
	sb.nr_slots = get64(buf + OFF_NR_SLOTS);
	sb.store_uid = get64(buf + OFF_STORE_UID);
	sb.set_uid = get64(buf + OFF_SET_UID);
	sb.nr_dirs = get32(buf + OFF_NR_DIRS);
	sb.dir_index = get32(buf + OFF_DIR_INDEX);
	sb.flags = get32(buf + OFF_FLAGS);
	sb.nr_files = get32(buf + OFF_NR_FILES);
	sb.file_index = get32(buf + OFF_FILE_INDEX);
	/* Checksummed but impossible: written by no version of this format. */
	if (sb.nr_dirs == 0 || sb.nr_dirs > TT_SB_MAX_DIRS || sb.dir_index >= sb.nr_dirs ||
	    sb.nr_files == 0 || sb.nr_files > TT_SB_MAX_FILES || sb.file_index >= sb.nr_files ||
	    (sb.flags & ~TT_SB_CREATING) != 0 || get32(buf + OFF_RESERVED) != 0) {
		return -EBADMSG;
	}
	*out = sb;
	return 0;
}

void
tt_sb_path_encode(uint64_t set_uid, uint32_t index, const char *path, uint8_t *buf)
{
	size_t n = strlen(path);

	if (n > TT_SB_PATH_MAX) {
		n = TT_SB_PATH_MAX;
	}
	memset(buf, 0, TT_SB_PATH_BYTES);
	put32(buf + PATH_OFF_LEN, (uint32_t)n);
	put32(buf + PATH_OFF_INDEX, index);
	put64(buf + PATH_OFF_SET_UID, set_uid);
	memcpy(buf + PATH_OFF_PATH, path, n);
	put64(buf + PATH_OFF_PATH + n, XXH3_64bits(buf, PATH_OFF_PATH + n));
}

int
tt_sb_path_decode(const uint8_t *buf, size_t len, uint64_t set_uid, uint32_t index, char *out,
                  size_t out_len)
{
	uint32_t n;

	if (buf == NULL || out == NULL || out_len <= TT_SB_PATH_MAX || len < PATH_OFF_PATH) {
		return -EBADMSG;
	}
	n = get32(buf + PATH_OFF_LEN);
	if (n == 0 || n > TT_SB_PATH_MAX || len < PATH_OFF_PATH + (size_t)n + 8 ||
	    get32(buf + PATH_OFF_INDEX) != index || get64(buf + PATH_OFF_SET_UID) != set_uid ||
	    get64(buf + PATH_OFF_PATH + n) != XXH3_64bits(buf, PATH_OFF_PATH + n) ||
	    memchr(buf + PATH_OFF_PATH, '\0', n) != NULL) {
		return -EBADMSG;
	}
	memcpy(out, buf + PATH_OFF_PATH, n);
	out[n] = '\0';
	return 0;
}

void
tt_ns_fingerprint(const void *ns, size_t len, uint8_t out[TT_NS_FP_BYTES])
{
	XXH128_hash_t h = XXH3_128bits(len ? ns : "", len);
	XXH128_canonical_t c;

	XXH128_canonicalFromHash(&c, h);
	memcpy(out, c.digest, TT_NS_FP_BYTES);
}
