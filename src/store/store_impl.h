/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store handle, shared by the files of this module only (other modules use store/store.h).
 */
#ifndef TT_STORE_IMPL_H
#define TT_STORE_IMPL_H

#include <pthread.h>
#include <stdbool.h>

#include "common/common.h"
#include "engine/engine.h"
#include "index/index.h"
#include "kv/kv.h"
#include "pool/pool.h"
#include "store/store.h"

struct tutti_store {
	struct tt_log log;
	uint32_t flags;      /* TUTTI_OPEN_* */
	bool read_only;      /* TUTTI_OPEN_READ_ONLY: saves and repairs are refused (-EROFS) */
	uint32_t durability; /* enum tutti_durability */
	struct tt_geo geo;
	uint32_t key_bytes;
	struct tt_pool *pool;
	struct tt_index *idx;

	/* Guards idx, pool allocation and stats. Never held across I/O. */
	pthread_mutex_t lock;
	struct tutti_stats stats;

	/* Serialises loads and saves: they share the engine and its staging. */
	pthread_mutex_t io_lock;
	struct tt_engine *engine;
	/* Integrity: the object checksums of every slot (nr_slots * nr_layers), read back from the
	 * slot headers at open; a slot's entries change only while it is not indexed or pinned. */
	uint64_t *slot_csums;
	uint64_t next_seq; /* commit sequence for slot headers; under io_lock */
	/* The slot headers recovery dropped at open, by kind (tutti_fsck_report): damaged (erased
	 * with TUTTI_OPEN_REPAIR), intact but of another version, store or configuration (left),
	 * unreadable (left: a read error may pass). */
	uint64_t hdr_damaged, hdr_foreign, hdr_unreadable;
	/* Per slot, the slot of the next older copy of the key it held at open (a second copy,
	 * dropped by recovery), or TT_NO_SLOT: the copy the next open finds once a repair removes
	 * this one, so the repair checks it too (fsck.c). A hint only: the slots may have been
	 * reused since, which the repair checks. Under io_lock after the open. */
	uint32_t *older;
};

/* transfer.c: a call's requests checked against the store and \p kv and cut into chunks by
 * src/plan (one per key moved, in request order), each with no slot yet; *out owned by the
 * caller, tt_free. Returns 0, -EINVAL (the log says why) or -ENOMEM. */
int tt_plan_chunks(const struct tutti_store *st, const struct tutti_kv *kv,
                   const struct tutti_request *reqs, uint32_t nr_reqs, bool load,
                   struct tt_chunk_op **out, uint32_t *nr_out);
/* transfer.c: where each planned chunk of \p b lives, and its checksums: the slot's (load,
 * fsck) or, for a save, its row of \p save_csums (nr_chunks x nr_layers). */
void tt_batch_locate(const struct tutti_store *st, struct tt_batch *b, uint64_t *save_csums);
void tt_unpin_all(struct tutti_store *st, struct tt_chunk_op *chunks, uint32_t nr);
/* Write one 4 KiB header per listed slot from \p bufs (nr * TUTTI_SLOT_HEADER_BYTES, aligned);
 * results in res[]. Returns 0 or the engine's failure. Caller holds io_lock. */
int tt_write_headers(struct tutti_store *st, const uint32_t *slots, uint32_t nr,
                     const uint8_t *bufs, int32_t *res);
/* Erase the headers of \p slots (damaged chunks), best effort. Caller holds io_lock. */
void tt_erase_headers(struct tutti_store *st, const uint32_t *slots, uint32_t nr);
/* Remove a damaged chunk from the index, freeing its slot now or at its last unpin. Caller holds
 * the store lock. */
void tt_drop_chunk(struct tutti_store *st, uint32_t slot);

/* store.c: take io_lock, first waiting for any layer kernels a launched load left running on
 * the GPU (they finish on their own: they wait on nothing but their I/O). */
void tt_io_lock(struct tutti_store *st);

/* Copy the I/O counters of the engine into the stats. Caller holds io_lock. */
void tt_store_note_io(struct tutti_store *st);

/* recover.c: rebuild the index from the slot headers on disk, reading only. *damaged receives
 * the slots whose headers are proven damaged (tt_free), for TUTTI_OPEN_REPAIR to erase. */
int tt_store_recover(struct tutti_store *st, uint32_t **damaged, uint32_t *nr_damaged);

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
