/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engines: what moves a store's objects between its data files and paged KV, one table entry
 * per enum tutti_engine. The store plans (which chunks, which slots, which checksums); an engine
 * moves a planned batch and says per chunk what failed.
 *
 * Every engine has a CPU-driven I/O queue (io_uring, or a pool of threads): it carries the
 * store's own records (slot headers, flushes), fsck's reads, and the batches whose KV the engine
 * does not take itself (the table's kv_mems; gds, say, takes GPU KV only). An engine belongs to
 * one thread at a time: the store calls it under its I/O lock.
 *
 * Life: open (sizes checked, staging allocated, libraries loaded: nothing on disk yet), attach
 * (the data files, once the store has them), then batches, records and flushes, then close.
 */
#ifndef TT_ENGINE_H
#define TT_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "kv/kv.h"

#include <sys/uio.h>

struct tutti_request;

/* Options an engine takes, at most. */
#define TT_ENGINE_MAX_OPTS 16u

/* Data files an engine does I/O on, at most (the store's directories). */
#define TT_ENGINE_MAX_FILES 64u /* one bit each in a flush's set (tt_engine_flush) */

enum tt_io_op {
	TT_IO_READ = 0,
	TT_IO_WRITE = 1,
	TT_IO_FSYNC = 2, /* fdatasync of the file: no buffer, off and len 0; res 0 on success */
};

/*
 * One extent I/O: either one buffer (nr_iov == 0) or a vector of nr_iov buffers (copied at
 * submission, so the array need not outlive the call). Buffers, lengths and offsets are
 * TUTTI_ALIGN-aligned; len is the total length.
 */
struct tt_io {
	uint64_t tag; /* handed back in the completion */
	uint64_t off;
	void *buf;
	const struct iovec *iov;
	uint32_t nr_iov;
	uint32_t len;
	uint16_t file; /* index into the data files */
	uint8_t op;    /* enum tt_io_op */
};

enum tt_batch_kind {
	TT_BATCH_LOAD,
	TT_BATCH_SAVE,
	TT_BATCH_VERIFY, /* fsck: read and checksum, move nothing */
};

/*
 * One chunk of a batch: the objects of one slot, layers [layer_begin, layer_end) of the batch.
 * The planner (the store) fills in what and where (the first fields from src/plan's struct
 * tt_chunk_plan); the engine fills in the outcome.
 */
struct tt_chunk_op {
	const struct tutti_request *req; /* NULL for fsck */
	uint32_t key;                    /* index of the chunk in its request's key chain */
	uint32_t slot;                   /* TT_NO_SLOT until planned */
	uint32_t id_off;                 /* index in req->block_ids of the first block moved */
	uint32_t nr_moved;               /* blocks moved */
	uint32_t obj_skip;      /* blocks of the object before the first one moved (load) */
	uint32_t nr_blocks;     /* blocks the chunk holds from its start to the last one moved */
	uint32_t stored_blocks; /* load, fsck: blocks the slot holds, noted when pinned */
	/* Where the slot is, and its object checksums, one per layer: load and fsck read the ones
	 * written with it; a save's engine writes those of what it wrote. */
	uint16_t file;
	uint64_t off;
	uint64_t *csums;
	/* The outcome. */
	int32_t status;
	bool direct;  /* moved by direct I/O between the file and the paged KV */
	bool corrupt; /* load, fsck: an object failed its checksum */
	/* The planner's own bookkeeping, which engines leave alone. */
	bool owned;  /* save: slot allocated by this call (free it unless committed) */
	bool pinned; /* the slot is pinned in the index */
	bool erase;  /* save: lost a commit race; its header is erased before the slot is freed */
};

/* A planned batch: every chunk whose status is 0 is moved, layers [layer_begin, layer_end). */
struct tt_batch {
	enum tt_batch_kind kind;
	const struct tutti_kv *kv; /* NULL for fsck */
	struct tt_chunk_op *chunks;
	uint32_t nr_chunks;
	uint32_t layer_begin, layer_end;
	uint64_t bytes_verified; /* out: object bytes read and checksummed (load, fsck) */
};

/* The chunk's first moved block id. */
static inline const uint32_t *
tt_chunk_ids(const struct tt_chunk_op *c)
{
	return c->req->block_ids + c->id_off;
}

/* Every chunk of \p b still in play fails with \p rc (a negative errno). */
void tt_batch_fail_all(struct tt_batch *b, int rc);
/* Chunk \p c fails with \p rc unless it already failed. */
void tt_chunk_fail(struct tt_chunk_op *c, int rc);

struct tt_engine_conf {
	const struct tt_geo *geo; /* borrowed for the engine's lifetime */
	/* Staging: cut into buffers of one I/O (max_io_bytes of whole objects), at most
	 * queue_depth of them. */
	uint64_t staging_bytes;
	uint64_t max_io_bytes;
	uint32_t queue_depth;
	/* The engine's own options (tutti_store_opts.engine_opts), borrowed during open: checked
	 * and parsed by tt_engine_open against the engine's table into opt[], which the engine
	 * reads in the order of its table (engine_impl.h, struct tt_engine_opt). */
	const char *opts;
	uint32_t opt[TT_ENGINE_MAX_OPTS];
	const struct tt_log *log;
};

struct tt_engine;

/* Counters of an engine's data path, for the store's stats. */
struct tt_engine_stats {
	uint64_t io_ops;     /* I/Os issued (queue, ring, cuFile) */
	uint64_t io_submits; /* system calls that issued them (ring: see gpu_uring_stats) */
	uint64_t gpu_io_kernel_ns;
	uint64_t gpu_io_block_ns;
	uint64_t staging_bytes;
	uint64_t wave_io_wait_ns;   /* waves (CPU engines, GPU KV): the caller waited for storage */
	uint64_t wave_copy_wait_ns; /* ... and for the mover's copies */
};

/* The name of enum tutti_engine \p kind as tutti_engine_parse spells it, or NULL for none. */
const char *tt_engine_kind_name(uint32_t kind);

/*
 * Open engine \p kind (enum tutti_engine) for the sizes and options of \p conf. Nothing touches
 * the disk. Returns 0, -EINVAL (an unknown kind; an option the engine does not take, or out of its
 * range; staging below one object; objects above the 4 GiB I/O limit; the log says why),
 * -EOPNOTSUPP / -EIO (gds: libcufile missing, or its driver not opening), -ENOMEM.
 */
int tt_engine_open(uint32_t kind, const struct tt_engine_conf *conf, struct tt_engine **out);
/* Start doing I/O on the store's data files (1..TT_ENGINE_MAX_FILES, borrowed until close).
 * Returns 0 or -errno (the I/O queue, ring or cuFile handles could not be set up; the log says
 * why). */
int tt_engine_attach(struct tt_engine *e, const int *fds, uint32_t nr_fds);
/* Waits for anything still running on the GPU first. NULL is allowed. */
void tt_engine_close(struct tt_engine *e);
/* The engine's name as tutti_engine_parse spells it. */
const char *tt_engine_name(const struct tt_engine *e);

/*
 * Move batch \p b. Chunk statuses say what failed (-EBADMSG with corrupt set: a checksum
 * mismatch). Returns 0, or a negative errno when the engine broke down: every unfinished chunk
 * has then failed, and the path that broke refuses further batches with -EIO.
 */
int tt_engine_transfer(struct tt_engine *e, struct tt_batch *b);
/* The engine (enum tutti_engine, never TUTTI_ENGINE_AUTO) that moves batches of \p kv: the
 * engine itself, or its CPU-driven queue's engine for KV it does not take. For auto with GPU KV
 * this sets gpu-uring up (once) or falls back. */
uint32_t tt_engine_moved_by(struct tt_engine *e, const struct tutti_kv *kv);
/* Make now what moving \p kv would make at its first batch: the GPU context, its device words
 * and checksum secret, and the object mover's staging. A batch that made them itself would
 * allocate and copy on the GPU while a compute stream may be waiting for one of its layers
 * (the layerwise pipeline), and some such calls wait for that very stream; the engine's object
 * lists are grown for \p kv's largest batch (tt_list_mem_reserve) for the same reason. Nothing
 * for host KV. Returns 0 or the GPU's -errno. */
int tt_engine_prepare(struct tt_engine *e, const struct tutti_kv *kv);

/* Synchronous extent I/O for the store's own records (slot headers): \p nr I/Os of any number,
 * res[i] the result of ios[i] (the full length or -errno). Returns 0 or the queue's breakdown. */
int tt_engine_io(struct tt_engine *e, struct tt_io *ios, uint32_t nr, int32_t *res);
/*
 * Read \p nr records of \p bytes (<= 4 KiB multiples, at most one staging buffer) through the
 * queue, many in flight: where(arg, i, &file, &off) names record i; got(arg, i, buf, res) takes
 * it (buf valid during the call) once read, in completion order. Returns 0 or the queue's
 * breakdown.
 */
int tt_engine_read_records(struct tt_engine *e, uint32_t nr, uint32_t bytes,
                           void (*where)(void *arg, uint32_t i, uint16_t *file, uint64_t *off),
                           void (*got)(void *arg, uint32_t i, const uint8_t *buf, int32_t res),
                           void *arg);
/* The most I/Os the queue keeps in flight: the batch size for records. */
uint32_t tt_engine_queue_depth(const struct tt_engine *e);
/* fdatasync the data files whose bits are set in \p files (bit i: file i; an engine has at most
 * 64 files), side by side. Returns 0 or the first failure. */
int tt_engine_flush(struct tt_engine *e, uint64_t files);
void tt_engine_stats(struct tt_engine *e, struct tt_engine_stats *out);

/*
 * Layerwise loads launched on the GPU (gpu-uring with GPU KV): each layer's kernel is queued on
 * the engine's GPU stream behind the previous one, followed by a one-thread kernel that stores
 * a signal word, without waiting. Where an engine cannot launch a batch, open returns 0 and the
 * caller runs each layer as a batch of its own (tt_engine_transfer).
 *
 * open: 1 when \p b runs launched (*out set; its object lists made in \p mem, which must stay
 * untouched until finish), 0 when it cannot (*out NULL), or a negative errno. layer: launch layer
 * \p layer (in order from 0) and its signal; *done_ns receives the GPU time it ran
 * (%globaltimer); on a failure nothing is signalled. idle: 1 once every launched layer is done,
 * 0 while not, or -errno; never blocks, and may be called without the store's I/O lock. finish:
 * wait for the launched layers and fold their results into the chunks; frees \p l.
 */
struct tt_list_mem;
struct tt_launch;
int tt_engine_launch_open(struct tt_engine *e, struct tt_batch *b, struct tt_list_mem *mem,
                          struct tt_launch **out);
int tt_engine_launch_layer(struct tt_engine *e, struct tt_launch *l, uint32_t layer, uint32_t *word,
                           uint32_t value, uint64_t *done_ns);
int tt_engine_launch_idle(struct tt_engine *e, struct tt_launch *l);
int tt_engine_launch_finish(struct tt_engine *e, struct tt_launch *l);
/* Wait for layers a launched load left running (they depend on nothing but their I/O), before
 * anything else uses the staging; a layer that timed out takes the GPU path out of service. */
void tt_engine_quiesce(struct tt_engine *e);

/* Pinned, mapped host memory for object lists, grown on demand; pinned so that launches and
 * result copies stay asynchronous. Freeing pinned memory synchronises the device, which a
 * compute stream waiting on a launched load would deadlock: outgrown buffers are kept until
 * tt_list_mem_free. One owner at a time. Zero-initialised is empty; plain set before first use
 * makes it ordinary memory (lists read by the CPU twin of a GPU path). */
struct tt_list_mem {
	void *cur;
	size_t bytes;
	void *old[16];
	uint32_t nr_old;
	bool plain;
};
void tt_list_mem_free(struct tt_list_mem *m);
/* Grow \p m now to hold the object lists of the largest batch \p kv is likely to see (every
 * block of the KV moved, in chunks, plus a partial chunk for each of 256 requests), at most
 * 64 MiB: growing it during a layerwise step allocates pinned memory, which may wait for the
 * compute stream that waits for that step. A larger batch still grows it. Returns 0 or
 * -ENOMEM. */
int tt_list_mem_reserve(struct tt_list_mem *m, const struct tutti_kv *kv);

#endif /* TT_ENGINE_H */
