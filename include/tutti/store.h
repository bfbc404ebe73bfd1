/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * The KV object store: open a store on one or more directories, register paged KV memory, look up
 * key chains, load chunks into paged KV and save chunks from it.
 *
 * Keys. A chunk is named by a caller-provided key of key_bytes bytes (16..64), such as vLLM's hash
 * of the chunk's last block, which already chains in every earlier token. A request passes the
 * whole chain from the root; chunk i's parent is chunk i-1. A chunk is only stored when its parent
 * is stored, and eviction removes chains from their tail, so every stored chunk is reachable.
 *
 * Thread safety. A store handle may be used from several threads at once. Lookups run in
 * parallel with I/O; loads and saves on one store are serialised (they share its I/O engine and
 * staging memory). A kv handle is immutable after creation and may be shared.
 */
#ifndef TUTTI_STORE_H
#define TUTTI_STORE_H

#include "tutti/base.h"
#include "tutti/engine.h"
#include "tutti/geometry.h"
#include "tutti/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tutti_store; /* opaque; thread-safe */

/** Create missing directories (mode 0700) and store files; without it a missing store is -ENOENT.
 */
#define TUTTI_OPEN_CREATE 0x1u
/**
 * Open an existing store with the geometry, key size and namespace it was created with (for
 * tools such as inspect and fsck): \p geo may be NULL and opts->ns is ignored.
 */
#define TUTTI_OPEN_EXISTING 0x2u
/**
 * Erase (zero) the slot headers that recovery finds damaged (they fail their own checksum or
 * hold no slot magic), once the open has succeeded, so that they are not met again. Nothing else
 * is erased: headers of another store or configuration, older copies of a key and chunks whose
 * parent is missing are left as they are.
 */
#define TUTTI_OPEN_REPAIR 0x4u
/**
 * Open read-only, for tools such as inspect and fsck: the files are opened O_RDONLY under
 * shared locks (read-only opens may run together, never beside a writer), nothing is written
 * (not the superblock, not a size, not a header), and it works on a read-only filesystem. Saves
 * and repairs fail with -EROFS. Not with TUTTI_OPEN_CREATE or TUTTI_OPEN_REPAIR.
 */
#define TUTTI_OPEN_READ_ONLY 0x8u
/**
 * A directory whose store has another geometry, key size or namespace gets an empty store of the
 * requested ones (logged as a warning), instead of failing with -EEXIST: its chunks are dropped.
 * For caches whose namespace changes with what they cache (a model's new weights). Not with
 * TUTTI_OPEN_EXISTING or TUTTI_OPEN_READ_ONLY.
 */
#define TUTTI_OPEN_REPLACE 0x10u

/**
 * When a saved chunk is committed. In both modes objects are written before the slot header
 * that commits them, and every object carries a checksum, so a torn or lost write is never
 * served: it is a miss. They differ in what survives a power loss.
 */
enum tutti_durability {
	/** Commit when the header write completes (O_DIRECT). Survives process crashes; a power
	 *  loss may lose chunks whose writes sat in a volatile device cache. The default. */
	TUTTI_DURABILITY_FAST = 0,
	/** Also flush the device before and after writing the headers of each save call: a
	 *  committed chunk survives power loss. Costs two flushes per call. */
	TUTTI_DURABILITY_DURABLE = 1,
};

struct tutti_store_opts {
	uint32_t size;           /**< = sizeof(struct tutti_store_opts); set by _opts_init */
	uint32_t flags;          /**< TUTTI_OPEN_* */
	const char *const *dirs; /**< store directories, one per disk; not retained after open */
	uint32_t nr_dirs;        /**< 1..64 */
	uint32_t engine;         /**< enum tutti_engine; default TUTTI_ENGINE_URING */
	/** The engine's options: key=value pairs separated by commas ("workers=29,sms=5" for
	 *  gpu-uring, "threads=8" for posix); NULL or "" for its defaults. The keys, their ranges
	 *  and defaults are the engine's own (tutti_engine_option() in engine.h); an unknown key
	 *  or a bad value fails the open with -EINVAL and one log line. Not retained. */
	const char *engine_opts;
	uint64_t
	    capacity_bytes; /**< total store size over all directories, split evenly; required */
	const void *ns;     /**< namespace bytes (model, dtype, layout, rank); not retained */
	uint32_t ns_bytes;  /**< length of ns; 0 for the empty namespace */
	uint32_t key_bytes; /**< bytes per key, 16..64; default 32 */
	/** Staging memory for I/O, allocated at open; default 64 MiB. It is cut into buffers of
	 *  one I/O (max_io_bytes of whole objects), at most queue_depth of them, so staging beyond
	 *  queue_depth x max_io_bytes is not allocated (the stats give what was). Engine gpu-uring
	 *  uses it as bounce slots of one object each, at most 64 MiB of it on page-cache-backed
	 *  files (tmpfs), where more reads in flight only slow its copies (the rest is then
	 *  allocated but unused by that engine), unless its option copy is dma. */
	uint64_t staging_bytes;
	uint64_t max_io_bytes; /**< largest single I/O; default 4 MiB; at least one object */
	uint32_t queue_depth;  /**< most I/Os in flight; default 32 */
	tutti_log_fn log_fn;   /**< where log lines go; NULL: nowhere */
	void *log_arg;         /**< passed to log_fn */
	uint32_t log_level;    /**< most verbose enum tutti_log_level passed on; default WARN */
	uint32_t durability;   /**< enum tutti_durability; default TUTTI_DURABILITY_FAST */
	/** Data files in each directory of a new store, 1..16; an existing store keeps the count
	 *  it was made with. Consecutive chunks of a directory go to consecutive files, so that
	 *  concurrent writes meet in one file only when there are more of them than files: a
	 *  filesystem that serialises the writers of one file (tmpfs) then writes as many files
	 *  side by side. 0 (the default): 16, fewer when 64 files over all directories or the
	 *  store's slots per directory allow fewer. */
	uint32_t data_files;
};

/** Fill \p opts with defaults and set opts->size. This function can't fail. */
TUTTI_API void tutti_store_opts_init(struct tutti_store_opts *opts);

/**
 * Open the store held by opts->dirs for geometry \p geo, creating it when TUTTI_OPEN_CREATE is
 * set. Each directory holds preallocated data files of fixed-size slots (opts->data_files),
 * opened with O_DIRECT and locked against a second opener. The directories are one set, fixed when
 * the store is created: an open must be given all of them (in any order) and no other. An existing
 * store is resized to the requested capacity, with a warning in the log (capacity_bytes 0 with
 * TUTTI_OPEN_EXISTING keeps it).
 *
 * Nothing is written before the open is known to succeed: the files are read and checked, the
 * index recovered, and only then are a new store's superblocks, a resize or a repair written. A
 * failed open leaves the store as it found it.
 *
 * Recovery: the index is rebuilt from the slot headers. Headers that are torn, damaged, of
 * another store or key size, or older copies of a key are dropped and their slots reused; a
 * chunk whose parent is missing is kept, and joins its chain again when the parent is saved
 * anew. The stats count what was found (recovered_chunks, recovery_*).
 *
 * \param geo   KV geometry; not retained.
 * \param opts  options; not retained (strings and arrays are copied).
 * \param out   receives the handle; release it with tutti_store_close(). NULL on failure.
 * \return 0, or a negative errno:
 *         -EINVAL bad geometry or options (sizes zero or out of range, capacity below one slot,
 *                 staging below one object, unknown flags, READ_ONLY with CREATE or REPAIR);
 *                 a directory given twice; a directory without a store given with those of
 *                 an existing store (a store's directories are fixed at its creation);
 *         -ENOENT a directory or store file is missing (or empty, or its creation never
 *                 finished) and TUTTI_OPEN_CREATE is not set; directories of the store are
 *                 missing from opts->dirs (the log names them);
 *         -EEXIST the directory holds a store of another geometry, key size or namespace (and
 *                 TUTTI_OPEN_REPLACE is not set), or opts->dirs names directories of two
 *                 stores;
 *         -EPROTO the data file is not a Tutti store, has an unknown format version, or is
 *                 not a regular file;
 *         -EMLINK the data file has other hard links;
 *         -ENOTDIR a store directory is not a directory;
 *         -EBADMSG the data file's superblock is damaged (checksum mismatch);
 *         -EBUSY another live handle (in this or another process) has the store open; a store
 *                 whose owner was killed is waited for (at most 30 s) while the kernel
 *                 finishes the dead owner's I/O, and then opens;
 *         -EOPNOTSUPP the filesystem refuses O_DIRECT or needs an alignment above 4 KiB;
 *         -ENOSPC the filesystem cannot hold the requested capacity;
 *         -EACCES, -EROFS, -ENOMEM, or the errno of the failing system call.
 */
TUTTI_API int tutti_store_open(const struct tutti_geometry *geo,
                               const struct tutti_store_opts *opts, struct tutti_store **out);

/**
 * Close \p st and release its memory, files and locks. No call on \p st may be running.
 * NULL is allowed. This function can't fail.
 */
TUTTI_API void tutti_store_close(struct tutti_store *st);

/**
 * Longest-prefix lookup: how many leading chunks of the chain \p keys are stored.
 *
 * \param keys       nr_keys * key_bytes bytes, the chain from the root.
 * \param nr_blocks  if not NULL, receives the number of paged blocks the hit chunks hold.
 * \return the number of leading chunks stored (0..nr_keys), or -EINVAL.
 * Hit chunks count as used for eviction.
 */
TUTTI_API int64_t tutti_store_lookup(struct tutti_store *st, const uint8_t *keys, uint32_t nr_keys,
                                     uint64_t *nr_blocks);

/**
 * Load layers [layer_begin, layer_end) of every chunk of every request into the paged blocks of
 * \p kv. Chunks are independent: one that fails leaves its blocks in an unspecified state and the
 * others are still loaded.
 *
 * Every object is checked against the checksum written with it before the call returns; a
 * mismatch fails the chunk with -EBADMSG and removes it from the store (never served).
 *
 * \param status  NULL, or one entry per chunk moved (in request order) receiving 0 (loaded),
 *                -ENOENT (not stored, e.g. evicted since the lookup), -ERANGE (stored with fewer
 *                blocks than requested), -EBADMSG (damaged on disk) or the I/O error.
 * \return the number of chunks loaded, or a negative errno for the whole call: -EINVAL (bad
 *         arguments: sizes, block ids, a kv of another geometry).
 */
TUTTI_API int64_t tutti_store_load(struct tutti_store *st, const struct tutti_kv *kv,
                                   const struct tutti_request *reqs, uint32_t nr_reqs,
                                   uint32_t layer_begin, uint32_t layer_end, int32_t *status);

/**
 * Save every chunk of every request (all layers) from the paged blocks of \p kv. A chunk is
 * committed (visible to lookups) only after all its objects are written and its parent is stored.
 * When the store is full, least recently used chains are evicted from their tails.
 *
 * \param status  NULL, or one entry per chunk (in request order) receiving 0 (stored),
 *                1 (already stored; nothing written), -ENOENT (its parent is not stored),
 *                -ENOSPC (no slot could be freed), or the I/O error (-ENOSPC too where the
 *                device is full: a store file without reserved space). A chunk already stored
 *                whose parent had been removed (damaged, or missing at open) joins its chain
 *                again when this call stores the parent.
 * \return the number of chunks written, or a negative errno for the whole call (-EINVAL;
 *         -EROFS: the store was opened with TUTTI_OPEN_READ_ONLY).
 */
TUTTI_API int64_t tutti_store_save(struct tutti_store *st, const struct tutti_kv *kv,
                                   const struct tutti_request *reqs, uint32_t nr_reqs,
                                   int32_t *status);

/**
 * List the stored chunks, a batch at a time: for a process that must know what a store holds
 * without asking it key by key (a scheduler matching prompts against several stores).
 *
 * \param cursor     in: 0 to start, or the value a previous call left; out: where the next call
 *                   continues. The listing is complete when a call returns 0.
 * \param keys       room for \p max keys of key_bytes bytes each.
 * \param nr_blocks  NULL, or room for \p max entries receiving the paged blocks of each chunk.
 * \return the number of chunks written (0..max), or -EINVAL.
 * Does not count as a use for eviction. Chunks stored or removed while a listing is under way
 * may or may not appear; every other chunk appears exactly once.
 */
TUTTI_API int64_t tutti_store_list(struct tutti_store *st, uint64_t *cursor, uint8_t *keys,
                                   uint32_t *nr_blocks, uint32_t max);

struct tutti_stats {
	uint32_t size; /**< = sizeof(struct tutti_stats), set by the caller */
	uint32_t nr_dirs;
	uint64_t slot_bytes;
	uint64_t capacity_slots;   /**< slots over all directories */
	uint64_t used_slots;       /**< chunks stored */
	uint64_t lookups;          /**< calls of tutti_store_lookup */
	uint64_t lookup_keys;      /**< keys asked for */
	uint64_t lookup_hits;      /**< keys found */
	uint64_t load_chunks;      /**< chunks loaded */
	uint64_t load_bytes;       /**< bytes read for loads */
	uint64_t load_errors;      /**< chunks that failed to load (missing or I/O error) */
	uint64_t load_ns;          /**< wall time inside tutti_store_load */
	uint64_t save_chunks;      /**< chunks written */
	uint64_t save_bytes;       /**< bytes written */
	uint64_t save_present;     /**< chunks skipped because already stored */
	uint64_t save_orphans;     /**< chunks skipped because their parent is not stored */
	uint64_t save_no_space;    /**< chunks skipped because no slot could be freed */
	uint64_t save_errors;      /**< chunks that failed to write (a full device included) */
	uint64_t save_ns;          /**< wall time inside tutti_store_save */
	uint64_t evictions;        /**< chunks evicted to make room */
	uint64_t io_ops;           /**< I/O requests issued to the engine */
	uint64_t io_submits;       /**< submission calls into the engine (system calls for uring;
	                            *   for gpu-uring, wakeups of the kernel's SQ thread, which
	                            *   follow how often it fell asleep, not the I/O count, and
	                            *   the host's submission calls, one per poll with I/O queued,
	                            *   with its option submit=host) */
	uint64_t staging_bytes;    /**< staging memory owned by the store */
	uint64_t load_corrupt;     /**< chunks whose objects failed their checksum (dropped) */
	uint64_t flushes;          /**< device flushes issued (durable mode) */
	uint64_t recovered_chunks; /**< chunks found by recovery at open (orphans included) */
	uint64_t recovery_dropped; /**< torn, damaged or foreign slot headers dropped at open */
	/** Chunks found at open whose parent is missing: kept (counted in recovered_chunks), and
	 *  linked into their chain again when the parent is saved anew. */
	uint64_t recovery_orphans;
	uint64_t recovery_duplicates; /**< second copies of a key dropped at open */
	uint64_t recovery_ns;         /**< time recovery took at open */
	uint64_t gpu_io_kernel_ns;    /**< engine gpu-uring: GPU time of its I/O kernels */
	uint64_t gpu_io_block_ns; /**< the same times the CUDA blocks they held (SM occupancy) */
	/** Engines uring and posix with KV in GPU memory: time the calling thread of a load or
	 *  save waited for the storage (a wave's reads not all in, or its buffer not yet written
	 *  out), and for the GPU (a wave's copy across PCIe not yet done, and at the end its
	 *  checks and scatters). Beside load_ns and save_ns they say which side held a transfer
	 *  back. */
	uint64_t wave_io_wait_ns;
	uint64_t wave_copy_wait_ns;
};

/**
 * Copy the store's counters into \p out. out->size must be set to sizeof(struct tutti_stats).
 * \return 0 or -EINVAL.
 */
TUTTI_API int tutti_store_get_stats(struct tutti_store *st, struct tutti_stats *out);

/**
 * The geometry the store was opened with (useful after TUTTI_OPEN_EXISTING).
 * \return 0 or -EINVAL.
 */
TUTTI_API int tutti_store_geometry(struct tutti_store *st, struct tutti_geometry *out);

/**
 * The engine that moves \p kv's KV through \p st: the one the store was opened with, the
 * CPU-driven engine for KV an engine does not take itself (gds with host KV: uring), or what
 * TUTTI_ENGINE_AUTO chose. For auto with GPU KV this sets gpu-uring up if no load or save has
 * yet (so a fallback's log line may come from this call).
 * \return an enum tutti_engine value other than TUTTI_ENGINE_AUTO, or -EINVAL (NULL arguments,
 *         a kv of another geometry).
 */
TUTTI_API int tutti_store_engine(struct tutti_store *st, const struct tutti_kv *kv);

/** tutti_store_fsck: remove damaged chunks and erase their headers. */
#define TUTTI_FSCK_REPAIR 0x1u

struct tutti_fsck_report {
	uint32_t size; /**< = sizeof(struct tutti_fsck_report), set by the caller */
	uint32_t reserved;
	uint64_t chunks_checked; /**< stored chunks read back */
	uint64_t bytes_checked;  /**< object bytes read and checksummed */
	uint64_t corrupt_chunks; /**< chunks with a checksum mismatch or a read error */
	uint64_t removed_chunks; /**< chunks that failed their checksum, removed (FSCK_REPAIR) */
	uint64_t elapsed_ns;     /**< time taken */
	/* Added after 0.2.0 (a caller built against 0.2.0 passes the smaller size and gets the
	 * fields above): the slot headers recovery dropped at open (recovery_dropped), by kind. */
	/** Damaged: they fail their own checksum (whatever version they claim), hold impossible
	 *  values or hold no slot magic. Erased at open with TUTTI_OPEN_REPAIR. */
	uint64_t damaged_headers;
	/** Intact (sealed by their checksum) but of another format version, store or
	 *  configuration: not damage; left as they are, their slots free. */
	uint64_t foreign_headers;
	/** Could not be read at open (a read error may pass): left as they are. */
	uint64_t unreadable_headers;
};

/**
 * Read every object of every stored chunk and verify its checksum. With TUTTI_FSCK_REPAIR,
 * chunks whose objects fail their checksum are removed and their headers erased (chunks that
 * could not be read are counted, not removed: a read error may pass); the chunks after a
 * removed one in its chain are kept, and join it again once it is saved anew. Without it
 * nothing is changed.
 * Headers found damaged at open are counted in the stats (recovery_dropped) and, by kind, in
 * the report; open with TUTTI_OPEN_REPAIR to erase them. A repair also checks the older copy of
 * a key whose chunk it removes (the copy the next open would find), and removes it as well if
 * its objects fail their checksums, so that one repair run to the end, opened with
 * TUTTI_OPEN_REPAIR, leaves nothing damaged for the next open or fsck to find.
 *
 * \return 0 or -EINVAL (bad arguments; out->size neither this structure's size nor 0.2.0's),
 *         -EROFS (TUTTI_FSCK_REPAIR on a store opened with TUTTI_OPEN_READ_ONLY), -EIO (the I/O
 *         engine failed), -ENOMEM.
 */
TUTTI_API int tutti_store_fsck(struct tutti_store *st, uint32_t flags,
                               struct tutti_fsck_report *out);

/**
 * The on-disk format version this library writes, and the only one it reads: a data file of
 * another version fails tutti_store_open() with -EPROTO (docs/format.md's compatibility table
 * says which releases wrote which). This function can't fail.
 */
TUTTI_API uint32_t tutti_format_version(void);

/**
 * The name of a store directory's data file number \p index: "tutti.data" for 0, then
 * "tutti.data.1", ... (each directory's files are numbered from 0; docs/format.md). For tools
 * that handle a store directory's files while no store has them open (remove, copy, look at
 * them); an open store lists its own with tutti_store_file().
 *
 * \param buf  receives the name, NUL-terminated; \p len bytes (32 are enough for any index).
 * \return the name's length (without the NUL), or a negative errno: -EINVAL (\p buf NULL),
 *         -ERANGE (\p index is not below the most data files a directory can hold: a loop
 *         over every name a directory may hold ends there), -ENAMETOOLONG (\p len too short;
 *         nothing is written).
 */
TUTTI_API int tutti_store_file_name(uint32_t index, char *buf, size_t len);

/** One data file of an open store (tutti_store_file). */
struct tutti_store_file {
	uint32_t size; /**< = sizeof(struct tutti_store_file), set by the caller */
	/** Its directory: an index into the opts->dirs the store was opened with. */
	uint32_t dir;
	/** Its number in that directory (its name: tutti_store_file_name()). */
	uint32_t index;
	uint32_t reserved; /**< 0 */
	/** File offset of its first slot. */
	uint64_t slots_off;
	/** Bytes of slots it holds from slots_off: whole slots of tutti_stats.slot_bytes. */
	uint64_t slots_bytes;
};

/**
 * The data files of an open store, one at a time: for tools that measure or handle the bytes
 * the store keeps (a benchmark reading the same bytes raw, a flush before timing reads). File
 * \p i counts directory by directory, each directory's files in order; call with i = 0, 1, ...
 * until -ENOENT. The files are the store's own, opened and locked by it: a caller may read
 * them and flush them, never write them.
 *
 * \param out   receives the file's place and extent; out->size must be set.
 * \param path  NULL, or \p path_len bytes receiving the file's path: its directory where the
 *              store found it (the canonical path), a slash, its name; NUL-terminated.
 * \return 0, or a negative errno: -ENOENT (\p i is past the last file: the listing is complete),
 *         -EINVAL (\p st or \p out NULL, out->size not this structure's size, \p path NULL with
 *         \p path_len not 0), -ENAMETOOLONG (\p path_len too short; \p out is filled, \p path
 *         holds nothing).
 */
TUTTI_API int tutti_store_file(struct tutti_store *st, uint32_t i, struct tutti_store_file *out,
                               char *path, size_t path_len);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_STORE_H */
