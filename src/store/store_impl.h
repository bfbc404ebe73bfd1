/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store handle, shared by the files of this module only.
 */
#ifndef TT_STORE_IMPL_H
#define TT_STORE_IMPL_H

#include <pthread.h>
#include <stdbool.h>

#include "common/common.h"
#include "engine/engine.h"
#include "gds/cufile.h"
#include "gpu/gpu.h"
#include "gring/gring.h"
#include "index/index.h"
#include "layout/layout.h"
#include "mover/mover.h"
#include "pool/pool.h"

/* objs.c: pinned, mapped host memory for object lists, grown on demand; pinned so that launches
 * and result copies stay asynchronous. Freeing pinned memory synchronises the device, which a
 * compute stream waiting on the pipeline for a load would deadlock: outgrown buffers are kept
 * until tt_list_mem_free. One owner at a time (the store under io_lock, or a load op). */
struct tt_list_mem {
	void *cur;
	size_t bytes;
	void *old[16];
	uint32_t nr_old;
};
/* objs.c: the per-layer object lists of the GPU object paths (gpu-uring, gds). Layer l's
 * objects are objs[l * n, (l + 1) * n), one per chunk still in play, in chunk order; ids holds
 * every such chunk's moved block ids; failed has one int per layer. All of it lives in \p mem
 * (reused by the next call that uses the same memory). */
struct tt_obj_lists {
	struct tt_gring_obj *objs;
	uint32_t *ids;
	int *failed;
	uint32_t n, nr_ids, nr_layers;
};
struct tutti_store {
	struct tt_log log;
	uint32_t flags;          /* TUTTI_OPEN_* */
	uint32_t durability;     /* enum tutti_durability */
	uint32_t gpu_io_workers; /* worker groups of a gpu-uring layer kernel */
	uint32_t gpu_io_sms;     /* blocks they are packed into */
	struct tt_geo geo;
	uint32_t key_bytes;
	struct tt_pool *pool;
	struct tt_index *idx;

	/* Guards idx, pool allocation and stats. Never held across I/O. */
	pthread_mutex_t lock;
	struct tutti_stats stats;

	/* Serialises loads and saves: they share the engine and the staging buffers. */
	pthread_mutex_t io_lock;
	struct tt_engine *engine;
	uint8_t *staging;     /* nr_staging * unit_bytes, owned */
	uint32_t nr_staging;  /* staging buffers: most staged I/Os in flight */
	uint32_t nr_units;    /* most I/Os in flight (queue depth); >= nr_staging */
	uint32_t unit_layers; /* objects (layers) per I/O */
	uint64_t unit_bytes;
	bool engine_broken; /* a ring-level failure: refuse further I/O */
	/* Per-call scratch with one entry per staging buffer, allocated at open. */
	struct tt_unit *units; /* what each unit slot holds */
	uint32_t *free_bufs;
	struct tt_io *ios;
	struct tt_io_done *dones;
	/* Direct I/O between the files and aligned host paged KV, without staging: one vector of
	 * up to max_iov block segments per I/O, max_iov entries per unit slot. */
	uint32_t max_iov;
	struct iovec *unit_iovs;
	/* Integrity: the object checksums of every slot (nr_slots * nr_layers), read back from the
	 * slot headers at open; a slot's entries change only while it is not indexed or pinned. */
	uint64_t *slot_csums;
	uint64_t next_seq; /* commit sequence for slot headers; under io_lock */
	/* GPU KV: a context on its device and the staging pinned and mapped for it, made on first
	 * use (under io_lock). One device per store. */
	struct tt_gpu *gpu;
	bool staging_mapped;
	/* Engine gpu-uring: the data-path ring, and how many object-sized bounce slots of the
	 * staging it cycles through (its in-flight window). */
	struct tt_gring *gring;
	uint32_t gring_slots;
	bool gring_broken;
	uint64_t gring_ios; /* I/Os driven through the ring; under io_lock */
	/* The layer kernels' object lists and results (under io_lock). */
	struct tt_list_mem lists;
	/* Layer kernels of a tt_load_op may still be running on the GPU context's stream, using
	 * the staging's bounce slots: tt_io_lock waits for them, then reads their per-layer
	 * timeout words (op_failed[0..op_launched)) so that a ring with I/O still in flight is
	 * marked broken before anyone else drives it. Under io_lock. */
	bool gpu_inflight;
	const int *op_failed;
	uint32_t op_launched;
	/* Engine gds: libcufile, one cuFile handle per data file, a batch handle per staging half
	 * (NULL without the batch API), and the device staging of 2 x gds_batch_nr object slots
	 * (made on first use). Under io_lock. */
	struct tt_cufile *cufile;
	int *gds_fds; /* the data files reopened without O_NOFOLLOW, which cuFile refuses */
	void **gds_fh;
	void *gds_batch[2];
	uint32_t gds_batch_nr;
	struct tt_cufile_io_params *gds_params; /* 2 x gds_batch_nr */
	struct tt_cufile_io_event *gds_events;  /* gds_batch_nr */
	uint8_t *gds_staging;
	bool gds_buf_registered;
	bool gds_broken;
	uint64_t gds_ios, gds_calls;
};

/* One I/O: layers [layer, layer + nr_layers) of one chunk, or the chunk's header. */
struct tt_unit {
	uint32_t chunk;
	uint32_t layer;
	uint32_t nr_layers; /* 0: the slot header */
};

/* One chunk of a call. */
struct tt_chunk_op {
	const struct tutti_request *req; /* NULL for fsck */
	uint32_t key;                    /* index of the chunk in its request's key chain */
	uint32_t slot;                   /* TT_NO_SLOT until planned */
	uint32_t id_off;                 /* index in req->block_ids of the first block moved */
	uint32_t nr_moved;               /* blocks moved */
	uint32_t obj_skip;      /* blocks of the object before the first one moved (load) */
	uint32_t nr_blocks;     /* blocks the chunk holds from its start to the last one moved */
	uint32_t stored_blocks; /* load, fsck: blocks the slot holds, noted when pinned */
	int32_t status;
	bool owned; /* save: slot allocated by this call (free it unless committed) */
	bool pinned;
	bool direct;  /* moved by direct I/O between the file and the paged KV */
	bool corrupt; /* load, fsck: an object failed its checksum */
	bool erase;   /* save: lost a commit race; its header is erased before the slot is freed */
};

enum tt_transfer_kind {
	TT_TRANSFER_LOAD,
	TT_TRANSFER_SAVE,
	TT_TRANSFER_VERIFY, /* fsck: read and checksum, move nothing */
};

struct tt_transfer {
	struct tutti_store *st;
	const struct tutti_kv *kv; /* NULL for fsck */
	struct tt_chunk_op *chunks;
	uint32_t nr_chunks;
	uint32_t layer_begin, layer_end;
	enum tt_transfer_kind kind;
	uint32_t direct_layers; /* layers per direct I/O of a whole chunk; 0: no direct I/O */
	const struct tt_mover_ops *mover; /* chosen by where the KV lives */
	void *mover_ctx;
	uint64_t *csums; /* save: nr_chunks * nr_layers object checksums, owned */
	/* unit cursor */
	uint32_t next_chunk;
	uint32_t next_layer;
	uint64_t bytes_verified; /* fsck */
};

/* transfer.c */
int tt_plan_chunks(const struct tutti_store *st, const struct tutti_kv *kv,
                   const struct tutti_request *reqs, uint32_t nr_reqs, bool load,
                   struct tt_chunk_op **out, uint32_t *nr_out);
uint32_t tt_direct_layers(const struct tutti_store *st, const struct tutti_kv *kv);
int tt_transfer_run(struct tt_transfer *t);
/* Choose the mover by where the KV lives (opening the GPU context on first use). */
int tt_transfer_mover(struct tt_transfer *t);
/* Every chunk of \p t fails with \p rc (a negative errno). */
void tt_transfer_fail_all(struct tt_transfer *t, int rc);
/* Move \p t through the store's engine: gpu-uring, gds, or the I/O engine's transfer_run.
 * Chunk statuses say what failed. Under io_lock. */
void tt_transfer_on_engine(struct tt_transfer *t);
/* The start of every engine's transfer: every chunk fails with -EIO when the engine broke down
 * (\p engine_broken), else tt_transfer_mover(). */
int tt_transfer_prepare(struct tt_transfer *t, bool engine_broken);
/* One unit's CPU-side steps (shared by the pipeline and the gpu-uring path): fill a staging
 * buffer and note checksums (save); check a read against the slot's checksums; copy it into
 * the KV (load). */
int tt_unit_gather(const struct tt_transfer *t, const struct tt_unit *u, uint8_t *buf);
bool tt_unit_verify(struct tt_transfer *t, const struct tt_unit *u, const uint8_t *buf);
int tt_unit_scatter(const struct tt_transfer *t, const struct tt_unit *u, uint8_t *buf);
/* gring_path.c: the same transfer through the GPU-drivable ring (engine gpu-uring). */
int tt_gring_transfer(struct tt_transfer *t);

/*
 * load.c: a load issued one layer at a time, for the layerwise pipeline. Open finds and pins
 * every chunk; each tt_load_op_layer moves the next layer; close drops damaged chunks, unpins
 * and reports per-chunk statuses (a chunk that failed in any layer failed). Other calls on the
 * store may run between these calls.
 *
 * With GPU KV on engine gpu-uring, a layer is launched, not waited for: its kernel runs on the
 * store's GPU stream followed by a one-thread signal kernel, so consecutive layers run back to
 * back with no host round trip between them (each kernel still reaps its own I/O before the
 * next one starts submitting). Otherwise each layer runs to completion in the
 * call. Either way \p word receives \p value (a release store) once the layer is in the KV (or
 * has failed), and *done_ns when that happened (async: the GPU's %globaltimer, or 0 for a layer
 * that failed in the call; otherwise CLOCK_MONOTONIC).
 */
struct tt_load_op {
	struct tt_transfer t;
	struct tt_gpu *gpu; /* async: the store's GPU context; NULL: layers run in the call */
	struct tt_obj_lists lists; /* async: every layer's objects, in the opener's list memory */
	uint32_t next;             /* the next layer to issue */
	uint64_t busy_ns;          /* time spent in the op's calls (the store's load_ns) */
	const uint32_t *last_word; /* async: the newest layer's signal word and value */
	uint32_t last_value;
	int rc; /* the first failure of the op as a whole (every chunk then fails) */
};
/* \p mem (the caller's, for the async case) must stay untouched until close. Returns 0 or
 * -EINVAL / -ENOMEM (nothing to close then). */
int tt_load_op_open(struct tt_load_op *op, struct tutti_store *st, const struct tutti_kv *kv,
                    const struct tutti_request *reqs, uint32_t nr_reqs, struct tt_list_mem *mem);
/* Issue layer op->next (every layer is issued, in order). Returns 0 or the op's failure. */
int tt_load_op_layer(struct tt_load_op *op, uint32_t *word, uint32_t value, uint64_t *done_ns);
/* 1 once every issued layer is done, 0 while not, or a negative errno. Never blocks. */
int tt_load_op_done(struct tt_load_op *op);
/* Wait for the issued layers, fold their results, unpin; status[i] per chunk. Returns the
 * chunks loaded. */
int64_t tt_load_op_close(struct tt_load_op *op, int32_t *status);
/* gring_path.c: the async part of a load op. open: 1 when \p op runs async (lists made, ring
 * mapped), 0 when it cannot (layers then run in the call), or a failure. layer: launch one
 * layer and its signal. finish: wait for the issued layers and fold their results. All under
 * io_lock. */
int tt_gring_op_open(struct tt_load_op *op, struct tt_list_mem *mem);
int tt_gring_op_layer(struct tt_load_op *op, uint32_t *word, uint32_t value, uint64_t *done_ns);
int tt_gring_op_finish(struct tt_load_op *op);

/* gds_path.c: the same transfer through cuFile (engine gds). */
int tt_gds_transfer(struct tt_transfer *t);

/* At least \p bytes of \p m, contents undefined. Returns 0 or -ENOMEM / -ENODEV. */
int tt_list_mem_get(struct tt_list_mem *m, size_t bytes, void **out);
void tt_list_mem_free(struct tt_list_mem *m);

/* Build the lists of \p t; n is 0 when no chunk is in play. Returns 0 or -ENOMEM. */
int tt_obj_lists_make(struct tt_transfer *t, struct tt_list_mem *mem, struct tt_obj_lists *out);
/* Fold the objects' statuses (and, for saves, checksums) into the chunks; \p path names the
 * engine in log lines. */
void tt_obj_lists_results(struct tt_transfer *t, const struct tt_obj_lists *lists,
                          const char *path);
void tt_fail_chunk(struct tt_chunk_op *c, int rc);
void tt_unpin_all(struct tutti_store *st, struct tt_chunk_op *chunks, uint32_t nr);
/* Write one 4 KiB header per listed slot from \p bufs (nr * TUTTI_SLOT_HEADER_BYTES, aligned);
 * results in res[]. Returns 0 or the engine's failure. Caller holds io_lock. */
int tt_write_headers(struct tutti_store *st, const uint32_t *slots, uint32_t nr,
                     const uint8_t *bufs, int32_t *res);
/* Flush every data file (durable mode). Caller holds io_lock. */
int tt_flush(struct tutti_store *st);
/* Erase the headers of \p slots (damaged chunks), best effort. Caller holds io_lock. */
void tt_erase_headers(struct tutti_store *st, const uint32_t *slots, uint32_t nr);
/* Remove a damaged chunk from the index, freeing its slot now or at its last unpin. Caller holds
 * the store lock. */
void tt_drop_chunk(struct tutti_store *st, uint32_t slot);

/* store.c: take io_lock, first waiting for any layer kernels a load op left running on the
 * GPU stream (they finish on their own: they wait on nothing but their I/O). */
void tt_io_lock(struct tutti_store *st);

/* store.c: the GPU context for KV on \p device (opened on first use). Caller holds io_lock. */
int tt_store_gpu(struct tutti_store *st, int device, struct tt_gpu **out);

/* Copy the I/O counters of the engines into the stats. Caller holds io_lock. */
void tt_store_note_io(struct tutti_store *st);

/* recover.c */
int tt_store_recover(struct tutti_store *st, bool repair);

static inline uint64_t *
tt_slot_csums(const struct tutti_store *st, uint32_t slot)
{
	return st->slot_csums + (uint64_t)slot * st->geo.g.nr_layers;
}

/* The key of chunk \p i of request \p req. */
static inline const uint8_t *
tt_req_key(const struct tutti_store *st, const struct tutti_request *req, uint32_t i)
{
	return req->keys + (uint64_t)i * st->key_bytes;
}

#endif /* TT_STORE_IMPL_H */
