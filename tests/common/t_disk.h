/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: byte-level access to a store's data file from under the library, for tests that
 * damage it or inspect it: O_DIRECT reads and read-modify-writes (so that the store's own
 * O_DIRECT I/O sees them at once), copies, truncation, and the on-disk slot layout
 * (docs/format.md; the slot header fields of src/format/slot.c).
 *
 * A directory spreads its slots over several files (tutti.data, tutti.data.1, ...). Given the
 * path of a directory's tutti.data, the reads and writes here and the slot helpers see the
 * directory's slots as if its files were one: slot s at t_slot_off(s), wherever it lies (the
 * superblock says how the files share the slots). Other paths are plain files.
 */
#ifndef T_DISK_H
#define T_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tutti/tutti.h"

#define T_DATA_FILE "tutti.data"
/* File offset of slot 0. */
#define T_DATA_OFF (1u << 20)
/* Superblock: the encoded bytes (checksum included) and the offsets the tests touch. */
#define T_SB_BYTES 136u
#define T_SB_VERSION 5u
#define T_SB_OFF_VERSION 8u
#define T_SB_OFF_SLOT_BYTES 64u
#define T_SB_OFF_NR_SLOTS 80u
#define T_SB_OFF_NR_FILES 116u
#define T_SB_OFF_CSUM 128u
/* Slot header fields. */
#define T_SLOT_MAGIC "TUTTISL\0"
#define T_SLOT_OFF_STORE_UID 16u
#define T_SLOT_OFF_SEQ 24u
#define T_SLOT_OFF_NR_BLOCKS 32u
#define T_SLOT_OFF_KEY 48u
#define T_SLOT_OFF_CSUMS 176u

/* Bytes of a slot header that its checksum covers, the checksum included, for L layers. */
static inline uint32_t
t_slot_hdr_len(uint32_t nr_layers)
{
	return T_SLOT_OFF_CSUMS + 8 * nr_layers + 8;
}

/* Offset of \p slot of a directory (in its files seen as one; see above). */
static inline uint64_t
t_slot_off(const struct tutti_geometry *g, uint32_t slot)
{
	return T_DATA_OFF + (uint64_t)slot * tutti_geometry_slot_bytes(g);
}

/* File offset of the object of \p layer in \p slot. */
static inline uint64_t
t_object_off(const struct tutti_geometry *g, uint32_t slot, uint32_t layer)
{
	return t_slot_off(g, slot) + TUTTI_SLOT_HEADER_BYTES +
	       (uint64_t)layer * tutti_geometry_object_bytes(g);
}

/* "\p dir/tutti.data", malloc'd; never NULL. */
char *t_data_path(const char *dir);

/* Size of the file at \p path, or 0 when it cannot be stat'ed. */
uint64_t t_file_size(const char *path);

/*
 * Read or write \p len bytes at \p off of the file at \p path with O_DIRECT: the 4 KiB sectors
 * covering the range are read, patched and written back. Returns 0 or a negative errno (-EIO
 * for a short transfer, e.g. a range beyond the end of the file).
 */
int t_disk_read(const char *path, uint64_t off, void *buf, size_t len);
int t_disk_write(const char *path, uint64_t off, const void *buf, size_t len);
/* Flip bit \p bit (0..7) of the byte at \p off. */
int t_disk_flip_bit(const char *path, uint64_t off, unsigned bit);
/* Set \p len bytes at \p off to zero. */
int t_disk_zero(const char *path, uint64_t off, size_t len);

/* Copy the file \p src to \p dst (created with mode 0600, replaced if present). 0 or -errno. */
int t_file_copy(const char *src, const char *dst);

/* Create (or replace) the file \p path, mode 0600, holding \p len bytes of \p buf (len a
 * multiple of 4 KiB), with O_DIRECT. 0 or -errno. */
int t_file_create(const char *path, const void *buf, size_t len);

/* Read the whole file at \p path into malloc'd memory (4 KiB aligned); its size in \p len.
 * NULL on failure. */
uint8_t *t_file_read_all(const char *path, size_t *len);

/* Whole slots in the data files (seen as one) of geometry \p g at \p path. */
uint32_t t_nr_slots(const char *path, const struct tutti_geometry *g);

/*
 * Read the header of every slot of the file (t_nr_slots() of them) into one malloc'd array of
 * nr * TUTTI_SLOT_HEADER_BYTES bytes; NULL on failure.
 */
uint8_t *t_read_headers(const char *path, const struct tutti_geometry *g, uint32_t *nr);

/* True when the header \p hdr carries the slot magic (a slot that was committed once). */
bool t_hdr_committed(const uint8_t *hdr);
/* True when the committed header \p hdr names \p key. */
bool t_hdr_has_key(const uint8_t *hdr, const uint8_t *key, uint32_t key_bytes);

/*
 * The slots whose headers name \p key: up to \p max of them into \p slots; returns how many
 * there are (possibly more than max), or a negative errno.
 */
int t_find_key_slots(const char *path, const struct tutti_geometry *g, const uint8_t *key,
                     uint32_t key_bytes, uint32_t *slots, uint32_t max);

/* The one slot holding \p key; aborts the test program when there is not exactly one. */
uint32_t t_key_slot(const char *path, const struct tutti_geometry *g, const uint8_t *key,
                    uint32_t key_bytes);

/* A free slot (header never committed), the lowest one; UINT32_MAX when none is free. */
uint32_t t_free_slot(const char *path, const struct tutti_geometry *g);

#endif /* T_DISK_H */
