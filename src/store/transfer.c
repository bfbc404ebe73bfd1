/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loads and saves: planning under the store lock, then a bounded I/O pipeline.
 *
 * A call is split into chunks (one per key moved) and each chunk into units: runs of up to
 * unit_layers consecutive objects of its slot, one I/O each. The pipeline keeps every staging
 * buffer busy: it fills all free buffers (gathering from paged KV for a save), hands the whole
 * batch to the engine in one submission, then reaps what completed (scattering into paged KV for
 * a load) and refills. Staging memory is fixed at open, so it never grows with the context
 * length; CPU copies of one unit overlap the I/O of the others.
 *
 * When every segment of the paged KV is 4 KiB aligned in host memory, no staging or copy is
 * needed: each I/O is a vector of the blocks' segments, and the kernel moves the bytes between
 * the file and the paged blocks directly (direct mode). The canonical object layout is exactly
 * the concatenation of those segments, so both modes write the same bytes to disk.
 *
 * Slots being read are pinned, and a chunk becomes visible only after all its objects are
 * written (commit), so a lookup never returns a chunk whose bytes are not all on disk and an
 * eviction never reuses a slot under a read.
 */
#include <errno.h>
#include <string.h>

#include "store/store_impl.h"

/* One chunk of a call. */
struct chunk_op {
	const struct tutti_request *req;
	uint32_t key;       /* index of the chunk in its request's key chain */
	uint32_t slot;      /* TT_NO_SLOT until planned */
	uint32_t id_off;    /* index in req->block_ids of the first block moved */
	uint32_t nr_moved;  /* blocks moved */
	uint32_t obj_skip;  /* blocks of the object before the first one moved (load) */
	uint32_t nr_blocks; /* blocks the chunk holds from its start to the last one moved */
	int32_t status;
	bool owned; /* save: slot allocated by this call (free it unless committed) */
	bool pinned;
};

struct transfer {
	struct tutti_store *st;
	const struct tutti_kv *kv;
	struct chunk_op *chunks;
	uint32_t nr_chunks;
	uint32_t layer_begin, layer_end;
	uint8_t op;             /* TT_IO_READ: load; TT_IO_WRITE: save */
	uint32_t direct_layers; /* direct mode: layers per I/O of a whole chunk; 0: staged mode */
	/* unit cursor */
	uint32_t next_chunk;
	uint32_t next_layer;
};

/* ---- planning ---- */

static int
check_request(const struct tutti_store *st, const struct tutti_kv *kv,
              const struct tutti_request *r, bool load, uint32_t *nr_chunks)
{
	uint64_t bpc = st->geo.blocks_per_chunk, moved, total;

	if (r->size != sizeof(*r) || r->reserved != 0 || r->keys == NULL || r->nr_keys == 0 ||
	    r->first_chunk >= r->nr_keys || r->nr_blocks == 0 || r->block_ids == NULL) {
		return -EINVAL;
	}
	if (r->skip_blocks >= bpc || (!load && r->skip_blocks != 0)) {
		return -EINVAL;
	}
	moved = r->nr_keys - r->first_chunk;
	total = (uint64_t)r->skip_blocks + r->nr_blocks;
	/* Every chunk but the last is whole; the last holds at least one block. */
	if (total <= (moved - 1) * bpc || total > moved * bpc) {
		tt_log_err(&st->log,
		           "request of %u chunks from chunk %u has %u blocks (skip %u); "
		           "%u blocks per chunk",
		           r->nr_keys, r->first_chunk, r->nr_blocks, r->skip_blocks, (unsigned)bpc);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < r->nr_blocks; i++) {
		if (r->block_ids[i] >= kv->nr_blocks) {
			tt_log_err(&st->log, "block id %u is beyond the %u registered blocks",
			           r->block_ids[i], kv->nr_blocks);
			return -EINVAL;
		}
	}
	*nr_chunks = (uint32_t)moved;
	return 0;
}

/* Check the whole call and split it into chunks. *out is owned by the caller (tt_free). */
static int
plan_chunks(const struct tutti_store *st, const struct tutti_kv *kv,
            const struct tutti_request *reqs, uint32_t nr_reqs, bool load, struct chunk_op **out,
            uint32_t *nr_out)
{
	uint64_t nr = 0, bpc = st->geo.blocks_per_chunk;
	struct chunk_op *chunks;
	uint32_t c = 0;

	if (kv == NULL || (reqs == NULL && nr_reqs > 0) || !tt_geo_equal(&kv->geo, &st->geo)) {
		return -EINVAL;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		uint32_t n;
		int rc = check_request(st, kv, &reqs[i], load, &n);

		if (rc < 0) {
			return rc;
		}
		nr += n;
	}
	if (nr > UINT32_MAX) {
		return -EINVAL;
	}
	chunks = tt_calloc(nr, sizeof(*chunks));
	if (chunks == NULL) {
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		const struct tutti_request *r = &reqs[i];
		uint64_t total = (uint64_t)r->skip_blocks + r->nr_blocks;

		for (uint32_t k = r->first_chunk; k < r->nr_keys; k++, c++) {
			uint64_t start = (uint64_t)(k - r->first_chunk) * bpc;
			uint64_t end = TT_MIN(start + bpc, total);
			uint64_t from = TT_MAX(start, (uint64_t)r->skip_blocks);

			chunks[c] = (struct chunk_op){
			    .req = r,
			    .key = k,
			    .slot = TT_NO_SLOT,
			    .id_off = (uint32_t)(from - r->skip_blocks),
			    .nr_moved = (uint32_t)(end - from),
			    .obj_skip = (uint32_t)(from - start),
			    .nr_blocks = (uint32_t)(end - start),
			};
		}
	}
	*out = chunks;
	*nr_out = c;
	return 0;
}

static const uint8_t *
chunk_key(const struct tutti_store *st, const struct chunk_op *c)
{
	return tt_req_key(st, c->req, c->key);
}

static void
unpin_all(struct tutti_store *st, struct chunk_op *chunks, uint32_t nr)
{
	for (uint32_t i = 0; i < nr; i++) {
		if (chunks[i].pinned) {
			tt_index_unpin(st->idx, chunks[i].slot);
			chunks[i].pinned = false;
		}
	}
}

/* ---- the pipeline ---- */

static bool
next_unit(struct transfer *t, struct tt_unit *u)
{
	while (t->next_chunk < t->nr_chunks) {
		const struct chunk_op *c = &t->chunks[t->next_chunk];

		if (c->status == 0 && t->next_layer < t->layer_end) {
			uint32_t layers = t->st->unit_layers;

			if (t->direct_layers > 0) {
				/* Objects of a chunk are adjacent on disk only when whole. */
				bool whole =
				    c->obj_skip == 0 && c->nr_moved == t->st->geo.blocks_per_chunk;

				layers = whole ? t->direct_layers : 1;
			}
			u->chunk = t->next_chunk;
			u->layer = t->next_layer;
			u->nr_layers = TT_MIN(layers, t->layer_end - t->next_layer);
			t->next_layer += u->nr_layers;
			return true;
		}
		t->next_chunk++;
		t->next_layer = t->layer_begin;
	}
	return false;
}

static uint8_t *
unit_buf(const struct tutti_store *st, uint32_t b)
{
	return st->staging + (uint64_t)b * st->unit_bytes;
}

static void
gather_unit(const struct transfer *t, const struct tt_unit *u, uint8_t *buf)
{
	const struct tutti_store *st = t->st;
	const struct chunk_op *c = &t->chunks[u->chunk];
	uint64_t payload = (uint64_t)c->nr_moved * st->geo.layer_block_bytes;

	for (uint32_t i = 0; i < u->nr_layers; i++) {
		uint8_t *obj = buf + (uint64_t)i * st->geo.object_bytes;

		st->mover->gather(t->kv, u->layer + i, c->req->block_ids + c->id_off, c->nr_moved,
		                  obj);
		/* Padding of a partial or unaligned object is zero, never stale staging bytes. */
		memset(obj + payload, 0, st->geo.object_bytes - payload);
	}
}

static void
scatter_unit(const struct transfer *t, const struct tt_unit *u, const uint8_t *buf)
{
	const struct tutti_store *st = t->st;
	const struct chunk_op *c = &t->chunks[u->chunk];
	uint64_t skip = (uint64_t)c->obj_skip * st->geo.layer_block_bytes;

	for (uint32_t i = 0; i < u->nr_layers; i++) {
		st->mover->scatter(t->kv, u->layer + i, c->req->block_ids + c->id_off, c->nr_moved,
		                   buf + (uint64_t)i * st->geo.object_bytes + skip);
	}
}

/* Direct mode is possible when the kernel can move every block segment itself: O_DIRECT needs
 * addresses and lengths aligned, and a whole layer's vector must fit in one I/O. */
static uint32_t
direct_layers(const struct tutti_store *st, const struct tutti_kv *kv)
{
	uint64_t per_layer = (uint64_t)st->geo.blocks_per_chunk * kv->segs_per_layer;

	if (kv->mem != TUTTI_MEM_HOST || per_layer > st->max_iov) {
		return 0;
	}
	for (uint64_t i = 0; i < (uint64_t)st->geo.g.nr_layers * kv->segs_per_layer; i++) {
		const struct tutti_segment *s = &kv->segs[i];

		if (s->base % TUTTI_ALIGN != 0 || s->bytes % TUTTI_ALIGN != 0 ||
		    (kv->nr_blocks > 1 && s->block_stride % TUTTI_ALIGN != 0)) {
			return 0;
		}
	}
	return (uint32_t)TT_MIN((uint64_t)st->unit_layers, st->max_iov / per_layer);
}

/* The vector of unit \p u in direct mode: each moved block's segments, layer by layer. The
 * entry count never exceeds layers x blocks x segments, which direct_layers() bounds. */
static uint32_t
unit_vector(const struct transfer *t, const struct tt_unit *u, struct iovec *iov)
{
	const struct chunk_op *c = &t->chunks[u->chunk];
	const uint32_t *ids = c->req->block_ids + c->id_off;
	uint32_t n = 0;

	for (uint32_t l = u->layer; l < u->layer + u->nr_layers; l++) {
		const struct tutti_segment *segs = tt_kv_layer_segs(t->kv, l);

		for (uint32_t i = 0; i < c->nr_moved; i++) {
			for (uint32_t s = 0; s < t->kv->segs_per_layer; s++) {
				uint8_t *addr =
				    (uint8_t *)(uintptr_t)(segs[s].base +
				                           (uint64_t)ids[i] * segs[s].block_stride);

				/* Adjacent memory (consecutive block ids, say) is one entry: fewer
				 * descriptors per I/O for the device. */
				if (n > 0 &&
				    (uint8_t *)iov[n - 1].iov_base + iov[n - 1].iov_len == addr) {
					iov[n - 1].iov_len += segs[s].bytes;
					continue;
				}
				iov[n].iov_base = addr;
				iov[n].iov_len = segs[s].bytes;
				n++;
			}
		}
	}
	return n;
}

static void
fail_chunk(struct chunk_op *c, int rc)
{
	if (c->status == 0) {
		c->status = rc;
	}
}

/* Fill free buffers with units and submit them as one batch. */
static void
fill(struct transfer *t, uint32_t *nr_free)
{
	struct tutti_store *st = t->st;
	uint32_t n = 0;
	struct tt_unit u;
	int rc;

	while (*nr_free > 0 && next_unit(t, &u)) {
		uint32_t b = st->free_bufs[--*nr_free];
		const struct chunk_op *c = &t->chunks[u.chunk];
		uint32_t dir;
		uint64_t off;

		st->units[b] = u;
		tt_pool_locate(st->pool, c->slot, &dir, &off);
		off += tt_geo_object_off(&st->geo, u.layer);
		if (t->direct_layers > 0) {
			struct iovec *iov = st->unit_iovs + (size_t)b * st->max_iov;

			st->ios[n++] = (struct tt_io){
			    .tag = b,
			    .off = off + (uint64_t)c->obj_skip * st->geo.layer_block_bytes,
			    .iov = iov,
			    .nr_iov = unit_vector(t, &u, iov),
			    .len =
			        (uint32_t)(u.nr_layers * c->nr_moved * st->geo.layer_block_bytes),
			    .file = (uint16_t)dir,
			    .op = t->op,
			};
			continue;
		}
		if (t->op == TT_IO_WRITE) {
			gather_unit(t, &u, unit_buf(st, b));
		}
		st->ios[n++] = (struct tt_io){
		    .tag = b,
		    .off = off,
		    .buf = unit_buf(st, b),
		    .len = (uint32_t)(u.nr_layers * st->geo.object_bytes),
		    .file = (uint16_t)dir,
		    .op = t->op,
		};
	}
	rc = tt_engine_submit(st->engine, st->ios, n);
	if (rc < 0) {
		tt_log_err(&st->log, "submitting %u I/Os failed: %s", n, tutti_strerror(rc));
		for (uint32_t i = 0; i < n; i++) {
			uint32_t b = (uint32_t)st->ios[i].tag;

			fail_chunk(&t->chunks[st->units[b].chunk], rc);
			st->free_bufs[(*nr_free)++] = b;
		}
	}
}

/*
 * Move every unit of every chunk whose status is 0. A chunk whose I/O fails gets the error as
 * its status and no further units. Returns 0, or a negative errno when the engine broke down
 * (then every unfinished chunk has failed and the engine is unusable).
 */
static int
run(struct transfer *t)
{
	struct tutti_store *st = t->st;
	uint32_t nr_free;

	t->next_chunk = 0;
	t->next_layer = t->layer_begin;
	t->direct_layers = direct_layers(st, t->kv);
	/* Unit slots double as staging buffers in staged mode; direct mode may use them all. */
	nr_free = t->direct_layers > 0 ? st->nr_units : st->nr_staging;
	for (uint32_t b = 0; b < nr_free; b++) {
		st->free_bufs[b] = nr_free - 1 - b;
	}
	for (;;) {
		int got;

		fill(t, &nr_free);
		if (st->engine->inflight == 0) {
			if (t->next_chunk >= t->nr_chunks) {
				return 0;
			}
			continue; /* a submission failed; its chunks have failed, go on */
		}
		got = tt_engine_reap(st->engine, st->dones, st->nr_units, 1);
		if (got < 0) {
			/* In-flight I/O may still target the staging: it cannot be reused. */
			st->engine_broken = true;
			tt_log_err(&st->log, "I/O engine failed: %s; the store refuses further I/O",
			           tutti_strerror(got));
			for (uint32_t i = 0; i < t->nr_chunks; i++) {
				fail_chunk(&t->chunks[i], got);
			}
			return got;
		}
		for (int i = 0; i < got; i++) {
			uint32_t b = (uint32_t)st->dones[i].tag;
			const struct tt_unit *u = &st->units[b];
			struct chunk_op *c = &t->chunks[u->chunk];

			if (st->dones[i].res < 0) {
				tt_log_warn(&st->log, "%s of slot %u layers %u..%u failed: %s",
				            t->op == TT_IO_READ ? "read" : "write", c->slot,
				            u->layer, u->layer + u->nr_layers - 1,
				            tutti_strerror(st->dones[i].res));
				fail_chunk(c, st->dones[i].res);
			} else if (t->op == TT_IO_READ && c->status == 0 && t->direct_layers == 0) {
				scatter_unit(t, u, unit_buf(st, b));
			}
			st->free_bufs[nr_free++] = b;
		}
	}
}

static void
note_engine_stats(struct tutti_store *st)
{
	st->stats.io_ops = st->engine->nr_ios;
	st->stats.io_submits = st->engine->nr_submits;
}

static void
copy_status(const struct chunk_op *chunks, uint32_t nr, int32_t *status)
{
	if (status == NULL) {
		return;
	}
	for (uint32_t i = 0; i < nr; i++) {
		status[i] = chunks[i].status;
	}
}

/* ---- load ---- */

static void
plan_load(struct tutti_store *st, struct chunk_op *chunks, uint32_t nr)
{
	uint32_t last = TT_NO_SLOT;

	for (uint32_t i = 0; i < nr; i++) {
		struct chunk_op *c = &chunks[i];

		c->slot = tt_index_find(st->idx, chunk_key(st, c));
		if (c->slot == TT_NO_SLOT) {
			c->status = -ENOENT;
		} else if (tt_index_nr_blocks(st->idx, c->slot) < c->nr_blocks) {
			c->status = -ERANGE;
		} else {
			tt_index_pin(st->idx, c->slot);
			c->pinned = true;
			last = c->slot;
		}
		/* A request's chunks are used together: refresh each chain once, at its end. */
		if (last != TT_NO_SLOT && (i + 1 == nr || chunks[i + 1].req != c->req)) {
			tt_index_touch_chain(st->idx, last);
			last = TT_NO_SLOT;
		}
	}
}

int64_t
tutti_store_load(struct tutti_store *st, const struct tutti_kv *kv,
                 const struct tutti_request *reqs, uint32_t nr_reqs, uint32_t layer_begin,
                 uint32_t layer_end, int32_t *status)
{
	struct transfer t = {.st = st, .kv = kv, .op = TT_IO_READ};
	uint64_t t0 = tt_now_ns(), loaded = 0, errors = 0;
	int rc;

	if (st == NULL || layer_begin >= layer_end || layer_end > st->geo.g.nr_layers) {
		return -EINVAL;
	}
	rc = plan_chunks(st, kv, reqs, nr_reqs, true, &t.chunks, &t.nr_chunks);
	if (rc < 0) {
		return rc;
	}
	t.layer_begin = layer_begin;
	t.layer_end = layer_end;

	pthread_mutex_lock(&st->lock);
	plan_load(st, t.chunks, t.nr_chunks);
	pthread_mutex_unlock(&st->lock);

	pthread_mutex_lock(&st->io_lock);
	if (st->engine_broken) {
		for (uint32_t i = 0; i < t.nr_chunks; i++) {
			fail_chunk(&t.chunks[i], -EIO);
		}
	} else {
		run(&t);
	}
	pthread_mutex_lock(&st->lock);
	note_engine_stats(st);
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_unlock(&st->io_lock);

	pthread_mutex_lock(&st->lock);
	unpin_all(st, t.chunks, t.nr_chunks);
	for (uint32_t i = 0; i < t.nr_chunks; i++) {
		if (t.chunks[i].status == 0) {
			loaded++;
		} else {
			errors++;
		}
	}
	st->stats.load_chunks += loaded;
	st->stats.load_errors += errors;
	st->stats.load_bytes += loaded * (layer_end - layer_begin) * st->geo.object_bytes;
	st->stats.load_ns += tt_now_ns() - t0;
	pthread_mutex_unlock(&st->lock);

	copy_status(t.chunks, t.nr_chunks, status);
	tt_free(t.chunks);
	return (int64_t)loaded;
}

/* ---- save ---- */

/*
 * Free at least \p needed slots, evicting least recently used chain tails. Evicting all victims
 * before allocating, rather than one per allocation, matters for locality: a chain's tail goes
 * first, so its slots are freed in descending order and handed out again in ascending order,
 * and a new chain is written and later read front to back.
 */
static void
make_room(struct tutti_store *st, uint32_t needed)
{
	while (tt_pool_nr_free(st->pool) < needed) {
		uint32_t victim = tt_index_victim(st->idx);

		if (victim == TT_NO_SLOT) {
			return; /* everything left is pinned or a parent of a pinned chunk */
		}
		tt_index_remove(st->idx, victim);
		tt_pool_free(st->pool, victim);
		st->stats.evictions++;
	}
}

/* Decide per chunk: already stored (status 1, pinned as a parent), to write (status 0, slot
 * allocated), or skipped. Runs under the store lock. */
static void
plan_save(struct tutti_store *st, struct chunk_op *chunks, uint32_t nr, uint32_t *parent_pins)
{
	uint32_t nr_dirs = tt_pool_nr_dirs(st->pool), needed = 0;
	int chain_rc = 0;

	for (uint32_t i = 0; i < nr; i++) {
		struct chunk_op *c = &chunks[i];
		const struct tutti_request *r = c->req;

		if (c->key == r->first_chunk) {
			chain_rc = 0;
			parent_pins[i] = TT_NO_SLOT;
			if (c->key > 0) {
				uint32_t p = tt_index_find(st->idx, tt_req_key(st, r, c->key - 1));

				if (p == TT_NO_SLOT) {
					chain_rc = -ENOENT; /* would never be reachable */
				} else {
					tt_index_pin(st->idx, p);
					parent_pins[i] = p;
				}
			}
		}
		if (chain_rc < 0) {
			c->status = chain_rc;
			continue;
		}
		c->slot = tt_index_find(st->idx, chunk_key(st, c));
		if (c->slot != TT_NO_SLOT) {
			tt_index_pin(st->idx, c->slot);
			c->pinned = true;
			c->status = 1;
			continue;
		}
		c->status = 0;
		needed++;
	}
	make_room(st, needed);
	for (uint32_t i = 0; i < nr; i++) {
		struct chunk_op *c = &chunks[i];

		if (c->key == c->req->first_chunk) {
			chain_rc = 0;
		}
		if (c->status != 0) {
			continue;
		}
		if (chain_rc < 0) {
			c->status =
			    chain_rc; /* its parent has no slot: it could never be reached */
			continue;
		}
		/* Consecutive chunks of a chain go to consecutive directories. */
		chain_rc = tt_pool_alloc(st->pool, c->key % nr_dirs, &c->slot);
		if (chain_rc < 0) {
			c->slot = TT_NO_SLOT;
			c->status = chain_rc;
			continue;
		}
		c->owned = true;
	}
}

/* Make written chunks visible, in chain order; free the slots of everything else. */
static uint64_t
commit_save(struct tutti_store *st, struct chunk_op *chunks, uint32_t nr)
{
	uint64_t written = 0;
	uint32_t last = TT_NO_SLOT;

	for (uint32_t i = 0; i < nr; i++) {
		struct chunk_op *c = &chunks[i];
		uint32_t parent = TT_NO_SLOT;

		if (c->status == 0) {
			if (c->key > 0) {
				parent = tt_index_find(st->idx, tt_req_key(st, c->req, c->key - 1));
			}
			if (c->key > 0 && parent == TT_NO_SLOT) {
				c->status = -ENOENT; /* an earlier chunk of the chain failed */
			} else {
				int rc = tt_index_insert(st->idx, chunk_key(st, c), c->slot, parent,
				                         c->nr_blocks);

				if (rc == 0) {
					c->owned = false;
					written++;
				} else {
					/* -EEXIST: written twice in this call; the first one won.
					 */
					c->status = rc == -EEXIST ? 1 : rc;
				}
			}
		}
		if (c->owned) {
			tt_pool_free(st->pool, c->slot);
			c->owned = false;
		}
		switch (c->status) {
		case 0:
		case 1:
			last = tt_index_find(st->idx, chunk_key(st, c));
			break;
		case -ENOENT:
			st->stats.save_orphans++;
			break;
		case -ENOSPC:
			st->stats.save_no_space++;
			break;
		default:
			st->stats.save_errors++;
			break;
		}
		st->stats.save_present += c->status == 1;
		if (last != TT_NO_SLOT && (i + 1 == nr || chunks[i + 1].req != c->req)) {
			tt_index_touch_chain(st->idx, last);
			last = TT_NO_SLOT;
		}
	}
	return written;
}

int64_t
tutti_store_save(struct tutti_store *st, const struct tutti_kv *kv,
                 const struct tutti_request *reqs, uint32_t nr_reqs, int32_t *status)
{
	struct transfer t = {.st = st, .kv = kv, .op = TT_IO_WRITE};
	uint64_t t0 = tt_now_ns(), written;
	uint32_t *parent_pins;
	int rc;

	if (st == NULL) {
		return -EINVAL;
	}
	rc = plan_chunks(st, kv, reqs, nr_reqs, false, &t.chunks, &t.nr_chunks);
	if (rc < 0) {
		return rc;
	}
	parent_pins = tt_malloc((size_t)t.nr_chunks * sizeof(*parent_pins));
	if (parent_pins == NULL) {
		tt_free(t.chunks);
		return -ENOMEM;
	}
	t.layer_begin = 0;
	t.layer_end = st->geo.g.nr_layers;

	pthread_mutex_lock(&st->lock);
	plan_save(st, t.chunks, t.nr_chunks, parent_pins);
	pthread_mutex_unlock(&st->lock);

	pthread_mutex_lock(&st->io_lock);
	if (st->engine_broken) {
		for (uint32_t i = 0; i < t.nr_chunks; i++) {
			fail_chunk(&t.chunks[i], -EIO);
		}
	} else {
		run(&t);
	}
	pthread_mutex_lock(&st->lock);
	note_engine_stats(st);
	pthread_mutex_unlock(&st->lock);
	pthread_mutex_unlock(&st->io_lock);

	pthread_mutex_lock(&st->lock);
	written = commit_save(st, t.chunks, t.nr_chunks);
	unpin_all(st, t.chunks, t.nr_chunks);
	for (uint32_t i = 0; i < t.nr_chunks; i++) {
		if (t.chunks[i].key == t.chunks[i].req->first_chunk &&
		    parent_pins[i] != TT_NO_SLOT) {
			tt_index_unpin(st->idx, parent_pins[i]);
		}
	}
	st->stats.save_chunks += written;
	st->stats.save_bytes += written * st->geo.g.nr_layers * st->geo.object_bytes;
	st->stats.save_ns += tt_now_ns() - t0;
	pthread_mutex_unlock(&st->lock);

	copy_status(t.chunks, t.nr_chunks, status);
	tt_free(parent_pins);
	tt_free(t.chunks);
	return (int64_t)written;
}
