/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The file pool: preallocated data files of fixed-size slots in each store directory, opened with
 * O_DIRECT and locked; slot allocation with striping of consecutive chunks across directories,
 * and of a directory's consecutive slots across its files (a filesystem that serialises the
 * writers of one file then runs a save's writes side by side).
 *
 * A store's directories are one set, fixed when the store is created: every superblock names
 * the set, its size and the directory's place in it, so an open given part of a store, or parts
 * of two, is refused before anything is touched.
 *
 * An open is two steps: tt_pool_open opens, locks and reads every directory and decides what
 * the store is (new, or the existing one at which size) without writing anything; once the rest
 * of the store's open has succeeded, tt_pool_commit writes what that needs. A pool closed
 * without a commit (a failed open) removes what its open created and changes nothing else.
 *
 * Slot ids are global: the d-th directory given holds slots [d * slots_per_dir, (d + 1) *
 * slots_per_dir); its local slot l lives in its file l % files_per_dir. Files are numbered
 * globally too: directory d's files are [d * files_per_dir, (d + 1) * files_per_dir), the first
 * of each being tutti.data (which holds the store's size and path table). Not thread-safe except
 * for the read-only accessors (fd, locate), which may be called while another thread allocates
 * under the store's lock.
 */
#ifndef TT_POOL_H
#define TT_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "format/format.h"
#include "layout/layout.h"

/* A directory's first data file; the others are named tutti.data.1, tutti.data.2, ... */
#define TT_POOL_FILE_NAME "tutti.data"
#define TT_POOL_NAME_BYTES 32u /* room for any data file's name */
/* Slot 0 starts 1 MiB into the file, so that slots stay aligned for any device up to 1 MiB. */
#define TT_POOL_DATA_OFF (1u << 20)
#define TT_POOL_MAX_DIRS 64u
/* Data files of a store, all directories together: every one is an I/O engine's file. */
#define TT_POOL_MAX_FILES 64u
/* Data files per directory of a new store, unless the budget above or its slots allow fewer:
 * enough that 16 concurrent writers rarely meet in one file. */
#define TT_POOL_FILES_PER_DIR 16u

struct tt_pool;

struct tt_pool_conf {
	const char *const *dirs;
	uint32_t nr_dirs;
	bool create;     /* make missing directories and a new store where none is */
	bool read_only;  /* open the files read-only under shared locks; never write */
	bool replace;    /* a store of another identity becomes a new empty one at commit */
	bool keep_slots; /* an existing store keeps its size (slots_per_dir is for a new one) */
	uint64_t slots_per_dir;
	/* Data files per directory of a new store (an existing one keeps its own); 0: the
	 * default, TT_POOL_FILES_PER_DIR within TT_POOL_MAX_FILES and slots_per_dir. */
	uint32_t files_per_dir;
	const struct tt_geo *geo; /* borrowed for the pool's lifetime */
	uint32_t key_bytes;
	const uint8_t *ns_fp; /* TT_NS_FP_BYTES */
	const struct tt_log *log;
};

/*
 * Open, lock and check the data files; nothing is written (a file or directory this call
 * creates is empty, and removed again unless the pool is committed). Errors as documented for
 * tutti_store_open(), and: -ENOENT when directories of the store are missing from the list (the
 * log names them) or a data file of one is missing or empty, -EEXIST when the list mixes two
 * stores or a directory holds another's data file, -EINVAL when it names a directory twice,
 * adds one that holds no store to an existing store, or a data file holds another's place.
 */
int tt_pool_open(const struct tt_pool_conf *conf, struct tt_pool **out);
/* Write what the open decided: a new store's superblocks, sizes and path table; a resize;
 * files found shorter than their slots extended; the path table where it names other paths.
 * Nothing for a read-only pool. Returns 0 or -errno, leaving the files as they were found
 * where it can. */
int tt_pool_commit(struct tt_pool *pool);
void tt_pool_close(struct tt_pool *pool);

/* Whether \p slot's header is on disk now (recovery reads these): a slot the store keeps that
 * starts inside its file; never in a new store. */
bool tt_pool_on_disk(const struct tt_pool *pool, uint32_t slot);
/* The size data file \p file had when it was opened. */
uint64_t tt_pool_file_bytes(const struct tt_pool *pool, uint32_t file);
/* Whether the pool was opened read-only. */
bool tt_pool_read_only(const struct tt_pool *pool);

uint32_t tt_pool_nr_dirs(const struct tt_pool *pool);
/* Data files, all directories together (nr_dirs x files per directory). */
uint32_t tt_pool_nr_files(const struct tt_pool *pool);
uint32_t tt_pool_nr_slots(const struct tt_pool *pool);
uint32_t tt_pool_nr_free(const struct tt_pool *pool);
/* The data file descriptors (tt_pool_nr_files), in file order. */
const int *tt_pool_fds(const struct tt_pool *pool);

/* Data file (an index into tt_pool_fds) and file offset of \p slot's first byte. */
void tt_pool_locate(const struct tt_pool *pool, uint32_t slot, uint32_t *file, uint64_t *off);

/*
 * Take a free slot, preferring directory \p hint_dir (mod nr_dirs) and then the following ones.
 * Returns 0 and the slot in *slot, or -ENOSPC when every slot is in use.
 */
int tt_pool_alloc(struct tt_pool *pool, uint32_t hint_dir, uint32_t *slot);
void tt_pool_free(struct tt_pool *pool, uint32_t slot);

/* Make exactly the slots whose used[] byte is 0 free (used has one byte per slot). */
void tt_pool_reset_free(struct tt_pool *pool, const uint8_t *used);

/* The store id of the directory holding \p slot (its slot headers carry it). */
uint64_t tt_pool_slot_uid(const struct tt_pool *pool, uint32_t slot);

/* The name of a directory's data file number \p index into \p name (\p len bytes,
 * TT_POOL_NAME_BYTES is enough). Returns 0 or -ENAMETOOLONG. */
int tt_pool_file_name(uint32_t index, char *name, size_t len);

/* Data file \p file (an index into tt_pool_fds): its directory (an index into conf->dirs) and
 * number there, where its slots lie (*off, the offset of its first slot; *bytes, the bytes of
 * the slots it holds) and, unless \p path is NULL, its path (the directory where the open found
 * it, then its name) into \p len bytes. Returns 0 or -ENAMETOOLONG (the rest is still set). */
int tt_pool_file_info(const struct tt_pool *pool, uint32_t file, uint32_t *dir, uint32_t *index,
                      uint64_t *off, uint64_t *bytes, char *path, size_t len);

/* Read the superblock of the store in \p dir (its first data file) without opening it for use.
 * Returns 0, -ENOENT, -EPROTO, -EBADMSG or the errno of open/read. */
int tt_pool_peek(const char *dir, struct tt_superblock *sb, const struct tt_log *log);

#endif /* TT_POOL_H */
