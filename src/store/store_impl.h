/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store handle, shared by the files of this module only.
 */
#ifndef TT_STORE_IMPL_H
#define TT_STORE_IMPL_H

#include <pthread.h>

#include "common/common.h"
#include "engine/engine.h"
#include "index/index.h"
#include "layout/layout.h"
#include "mover/mover.h"
#include "pool/pool.h"

struct tutti_store {
	struct tt_log log;
	struct tt_geo geo;
	uint32_t key_bytes;
	struct tt_pool *pool;
	struct tt_index *idx;
	const struct tt_mover_ops *mover;

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
	struct tt_unit *units; /* what each staging buffer holds */
	uint32_t *free_bufs;
	struct tt_io *ios;
	struct tt_io_done *dones;
	/* Direct I/O between the files and aligned host paged KV, without staging: one vector of
	 * up to max_iov block segments per I/O, max_iov entries per unit slot. */
	uint32_t max_iov;
	struct iovec *unit_iovs;
};

/* One I/O: layers [layer, layer + nr_layers) of one chunk of a load or save. */
struct tt_unit {
	uint32_t chunk;
	uint32_t layer;
	uint32_t nr_layers;
};

/* The key of chunk \p i of request \p req. */
static inline const uint8_t *
tt_req_key(const struct tutti_store *st, const struct tutti_request *req, uint32_t i)
{
	return req->keys + (uint64_t)i * st->key_bytes;
}

#endif /* TT_STORE_IMPL_H */
