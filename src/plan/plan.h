/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plan of a call: the rules every struct tutti_request of a call must follow, and the chunks
 * it moves (which of its blocks go to which blocks of which chunk's object). The store's loads,
 * saves and pipeline, and the remote tier's fetches and publishes, plan by these rules alone, so
 * that a request one accepts the others accept too, and moves the same blocks.
 *
 * A request names a key chain from its root; it moves chunks [first_chunk, nr_keys), whose
 * blocks are block_ids in order, starting skip_blocks into chunk first_chunk (loads only: a save
 * writes whole chunks from their first block). Every chunk but the last is whole; the last holds
 * at least one block.
 */
#ifndef TT_PLAN_H
#define TT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "kv/kv.h"
#include "tutti/kv.h"

/* One chunk a call moves. */
struct tt_chunk_plan {
	const struct tutti_request *req;
	uint32_t key;       /* index of the chunk in req's key chain */
	uint32_t id_off;    /* index in req->block_ids of the first block moved */
	uint32_t nr_moved;  /* blocks moved */
	uint32_t obj_skip;  /* blocks of the chunk's object before the first one moved (load) */
	uint32_t nr_blocks; /* blocks the chunk holds from its start to the last one moved */
};

/*
 * Check the \p nr_reqs requests of a call that moves blocks between chunks of geometry \p geo and
 * the paged KV \p kv: into it (\p load) or out of it. Returns the number of chunks the call moves
 * (0 for no request), or -EINVAL, logged into \p log (NULL: not logged), for anything a request
 * breaks: size, reserved, keys, chunk range, block count (too few or too many for its chunks),
 * skip_blocks (a whole chunk or more, or any on a save), a block id outside kv, a kv of another
 * geometry, or more chunks than a uint32_t counts.
 */
int64_t tt_plan_check(const struct tt_geo *geo, const struct tutti_kv *kv,
                      const struct tutti_request *reqs, uint32_t nr_reqs, bool load,
                      const struct tt_log *log);

/* A walk over the chunks of checked requests, in request order, chunks in chain order. */
struct tt_plan_iter {
	const struct tutti_request *reqs;
	uint32_t nr_reqs;
	uint32_t blocks_per_chunk;
	uint32_t req; /* request of the next chunk */
	uint32_t key; /* its index in that request's chain */
};

/* Start a walk over the chunks of \p reqs, which tt_plan_check() accepted. */
void tt_plan_begin(struct tt_plan_iter *it, const struct tt_geo *geo,
                   const struct tutti_request *reqs, uint32_t nr_reqs);
/* The next chunk into \p out; false when every chunk has been walked. */
bool tt_plan_next(struct tt_plan_iter *it, struct tt_chunk_plan *out);

/*
 * tt_plan_check(), then every chunk of the call into a new array (*out, tt_free it; allocated
 * even for 0 chunks) of *nr_out entries. Returns 0, -EINVAL (nothing allocated) or -ENOMEM.
 */
int tt_plan_call(const struct tt_geo *geo, const struct tutti_kv *kv,
                 const struct tutti_request *reqs, uint32_t nr_reqs, bool load,
                 const struct tt_log *log, struct tt_chunk_plan **out, uint32_t *nr_out);

#endif /* TT_PLAN_H */
