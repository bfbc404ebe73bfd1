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
/* Version 2 added the store id and slot headers; version 3 keyed object checksums with
 * tt_csum_secret; version 4 records the store's directory set (set id, count, this directory's
 * place, an unfinished creation) and each directory's path; version 5 spreads a directory's
 * slots over several data files (their count and each file's place). Other versions are refused
 * (-EPROTO). */
#define TT_SB_VERSION 5u
#define TT_SB_BYTES 4096u /* the superblock's share of the file */
#define TT_NS_FP_BYTES 16u
#define TT_SB_MAX_DIRS 64u  /* directories of one store */
#define TT_SB_MAX_FILES 64u /* data files of one directory */
/* sb.flags: the store's creation has not finished (every directory is written first with this
 * flag, then without it): such a file holds nothing yet and is made anew. */
#define TT_SB_CREATING 0x1u

/* The superblock at offset 0 of every store data file. Every file of a directory holds the same
 * superblock but for file_index. */
struct tt_superblock {
	uint32_t version;
	struct tutti_geometry geo;
	uint32_t key_bytes;
	uint8_t ns_fp[TT_NS_FP_BYTES]; /* fingerprint of the namespace */
	uint64_t slot_bytes;
	uint64_t data_off; /* file offset of slot 0 */
	uint64_t nr_slots;
	uint64_t store_uid;  /* random per directory at creation: slots of an earlier store, or of
	                      * another directory, are never taken */
	uint64_t set_uid;    /* random at creation, the same in every directory of the store */
	uint32_t nr_dirs;    /* directories of the store, 1..TT_SB_MAX_DIRS */
	uint32_t dir_index;  /* this directory's place among them */
	uint32_t flags;      /* TT_SB_CREATING */
	uint32_t nr_files;   /* data files of each directory, 1..TT_SB_MAX_FILES */
	uint32_t file_index; /* this file's place among its directory's files */
};

/* Serialise \p sb into \p buf (TT_SB_BYTES bytes, little-endian, checksummed). */
void tt_sb_encode(const struct tt_superblock *sb, uint8_t *buf);

/*
 * Parse \p len bytes at \p buf. Returns 0, or -EPROTO (bad magic, unknown version) or -EBADMSG
 * (short buffer, bad sizes, a directory or file count or place out of range, unknown flags,
 * checksum mismatch).
 */
int tt_sb_decode(const uint8_t *buf, size_t len, struct tt_superblock *out);

/*
 * The path table after the superblock: entry i (TT_SB_PATH_BYTES at TT_SB_PATHS_OFF + i x
 * TT_SB_PATH_BYTES) holds the path directory i of the store was last opened at, so that an open
 * given only some of a store's directories can name the others. Every directory holds the whole
 * table. Paths are hints for messages only: nothing is opened through them.
 */
#define TT_SB_PATHS_OFF TT_SB_BYTES
#define TT_SB_PATH_BYTES 4096u
#define TT_SB_PATH_MAX (TT_SB_PATH_BYTES - 24u) /* longest path kept (longer ones are cut) */

/* Serialise the path of directory \p index of store \p set_uid into \p buf (TT_SB_PATH_BYTES). */
void tt_sb_path_encode(uint64_t set_uid, uint32_t index, const char *path, uint8_t *buf);

/* Parse the entry at \p buf (\p len bytes) as the path of directory \p index of store
 * \p set_uid, NUL-terminated into \p out (\p out_len > TT_SB_PATH_MAX). Returns 0, or -EBADMSG
 * for an entry that is empty, damaged or of another store or directory. */
int tt_sb_path_decode(const uint8_t *buf, size_t len, uint64_t set_uid, uint32_t index, char *out,
                      size_t out_len);

/* ---- slot header ---- */

#define TT_SLOT_MAGIC "TUTTISL\0"
#define TT_SLOT_VERSION 2u
#define TT_MAX_KEY_BYTES 64u
/* Object checksums fill the 4 KiB header: layers beyond this are refused at open. */
#define TT_SLOT_MAX_LAYERS 480u

/*
 * The header at the start of every slot, written after all the slot's objects (commit record).
 * csum[l] is tt_csum of object l's payload: nr_blocks layer blocks in the canonical layout.
 */
struct tt_slot_header {
	uint64_t store_uid;
	uint64_t seq;        /* commit order within the store, increasing across restarts */
	uint32_t nr_blocks;  /* paged blocks held, 1..blocks_per_chunk */
	uint32_t key_bytes;  /* 16..TT_MAX_KEY_BYTES */
	uint32_t nr_objects; /* = nr_layers */
	uint32_t has_parent; /* 0 for the root of a chain */
	uint8_t key[TT_MAX_KEY_BYTES];
	uint8_t parent[TT_MAX_KEY_BYTES];
	uint64_t csum[TT_SLOT_MAX_LAYERS];
};

/* Serialise \p h into \p buf (TUTTI_SLOT_HEADER_BYTES bytes, little-endian, checksummed). */
void tt_slot_encode(const struct tt_slot_header *h, uint8_t *buf);

/*
 * Parse \p len bytes at \p buf. Returns 0; -ENODATA for a slot never committed (zero magic);
 * -EPROTO for a bad magic or unknown version; -EBADMSG for a short buffer, sizes out of range
 * or a checksum mismatch (a torn or damaged header).
 */
int tt_slot_decode(const uint8_t *buf, size_t len, struct tt_slot_header *out);

/* ---- object checksums ---- */

/*
 * XXH3 hashes inputs of up to this many bytes with its short paths, and longer ones with its
 * striped long path. The GPU's hash (cuda/xxh3.cuh) implements the long path only, so checksums
 * are checked or computed on the GPU only where every payload is longer: layer blocks of more
 * than TT_XXH3_MIDSIZE_MAX bytes. Smaller ones take the CPU's path.
 */
#define TT_XXH3_MIDSIZE_MAX 240u

/* 192 bytes: XXH3's secret size, which gives the long path 16 stripes per block. */
#define TT_CSUM_SECRET_WORDS 24u

/* The secret of every object checksum (see csum.c for how it was made). */
extern const uint64_t tt_csum_secret[TT_CSUM_SECRET_WORDS];

/* An object's checksum: XXH3-64 of its payload with tt_csum_secret. */
uint64_t tt_csum(const void *p, size_t len);

/* Fingerprint of a namespace (XXH3-128 of its bytes). */
void tt_ns_fingerprint(const void *ns, size_t len, uint8_t out[TT_NS_FP_BYTES]);

#endif /* TT_FORMAT_H */
