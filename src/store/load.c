/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti_store_load: plan under the store lock (find and pin every chunk), move under the I/O
 * lock, then drop what proved damaged and unpin. And the same load a layer at a time, for the
 * layerwise pipeline.
 */
#include <errno.h>
#include <string.h>

#include "store/store_impl.h"

static void
plan_load(struct tutti_store *st, struct tt_batch *b)
{
	uint32_t last = TT_NO_SLOT;

	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		struct tt_chunk_op *c = &b->chunks[i];
		const uint8_t *key = tt_req_key(st, c->req, c->key);

		c->slot = tt_index_find(st->idx, key);
		if (c->slot == TT_NO_SLOT) {
			c->status = -ENOENT;
		} else if (tt_index_nr_blocks(st->idx, c->slot) < c->nr_blocks) {
			c->status = -ERANGE;
		} else {
			tt_index_pin(st->idx, c->slot);
			c->pinned = true;
			c->stored_blocks = tt_index_nr_blocks(st->idx, c->slot);
			last = c->slot;
		}
		/* A request's chunks are used together: refresh each chain once, at its end. */
		if (last != TT_NO_SLOT &&
		    (i + 1 == b->nr_chunks || b->chunks[i + 1].req != c->req)) {
			tt_index_touch_chain(st->idx, last);
			last = TT_NO_SLOT;
		}
	}
}

/* Erase the headers of damaged chunks while they are still pinned (so their slots cannot be
 * reused under the erase), so that a restart does not find them again. Under io_lock. */
static uint32_t
erase_corrupt(struct tutti_store *st, struct tt_batch *b)
{
	uint32_t nr = 0, *slots;

	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		nr += b->chunks[i].corrupt;
	}
	if (nr == 0) {
		return 0;
	}
	slots = tt_malloc(nr * sizeof(*slots));
	if (slots != NULL) {
		nr = 0;
		for (uint32_t i = 0; i < b->nr_chunks; i++) {
			if (b->chunks[i].corrupt) {
				slots[nr++] = b->chunks[i].slot;
			}
		}
		tt_erase_headers(st, slots, nr);
	}
	tt_free(slots);
	return nr;
}

/* The part of a load before any I/O: check, plan, find and pin every chunk. */
static int
load_begin(struct tt_batch *b, struct tutti_store *st, const struct tutti_kv *kv,
           const struct tutti_request *reqs, uint32_t nr_reqs, uint32_t layer_begin,
           uint32_t layer_end)
{
	int rc;

	*b = (struct tt_batch){.kv = kv, .kind = TT_BATCH_LOAD};
	if (st == NULL || layer_begin >= layer_end || layer_end > st->geo.g.nr_layers) {
		return -EINVAL;
	}
	rc = tt_plan_chunks(st, kv, reqs, nr_reqs, true, &b->chunks, &b->nr_chunks);
	if (rc < 0) {
		return rc;
	}
	b->layer_begin = layer_begin;
	b->layer_end = layer_end;

	pthread_mutex_lock(&st->lock);
	plan_load(st, b);
	pthread_mutex_unlock(&st->lock);
	tt_batch_locate(st, b, NULL);
	return 0;
}

/* The rest, with the I/O done (caller holds io_lock, released here): erase damaged chunks,
 * unpin, count, report. */
static int64_t
load_end(struct tutti_store *st, struct tt_batch *b, uint64_t busy_ns, int32_t *status)
{
	uint64_t loaded = 0, errors = 0, corrupt = 0;

	erase_corrupt(st, b);
	tt_store_note_io(st);
	pthread_mutex_unlock(&st->io_lock);

	pthread_mutex_lock(&st->lock);
	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		struct tt_chunk_op *c = &b->chunks[i];

		if (c->corrupt) {
			tt_drop_chunk(st,
			              c->slot); /* never served again; the slot frees at unpin */
			corrupt++;
		}
		if (c->status == 0) {
			loaded++;
		} else {
			errors++;
		}
	}
	tt_unpin_all(st, b->chunks, b->nr_chunks);
	st->stats.load_chunks += loaded;
	st->stats.load_errors += errors;
	st->stats.load_corrupt += corrupt;
	st->stats.load_bytes += loaded * (b->layer_end - b->layer_begin) * st->geo.object_bytes;
	st->stats.load_ns += busy_ns;
	pthread_mutex_unlock(&st->lock);

	if (status != NULL) {
		for (uint32_t i = 0; i < b->nr_chunks; i++) {
			status[i] = b->chunks[i].status;
		}
	}
	tt_free(b->chunks);
	b->chunks = NULL;
	return (int64_t)loaded;
}

int64_t
tutti_store_load(struct tutti_store *st, const struct tutti_kv *kv,
                 const struct tutti_request *reqs, uint32_t nr_reqs, uint32_t layer_begin,
                 uint32_t layer_end, int32_t *status)
{
	struct tt_batch b;
	uint64_t t0 = tt_now_ns();
	int rc;

	rc = load_begin(&b, st, kv, reqs, nr_reqs, layer_begin, layer_end);
	if (rc < 0) {
		return rc;
	}
	tt_io_lock(st);
	tt_engine_transfer(st->engine, &b);
	return load_end(st, &b, tt_now_ns() - t0, status);
}

/* ---- layer by layer ---- */

struct tt_load_op {
	struct tutti_store *st;
	struct tt_batch b;
	struct tt_launch
	    *launch;      /* the engine's launched layers, or NULL: layers run in the call */
	uint32_t next;    /* the next layer to issue */
	uint64_t busy_ns; /* time spent in the op's calls (the store's load_ns) */
	const uint32_t *last_word; /* launched: the newest layer's signal word and value */
	uint32_t last_value;
	int rc; /* the first failure of the op as a whole (every chunk then fails) */
};

/* The engine's list memory, behind the store's interface: its owner need not know the engine. */
struct tt_load_mem {
	struct tt_list_mem lists;
};

int
tt_load_mem_create(const struct tutti_kv *kv, struct tt_load_mem **out)
{
	struct tt_load_mem *m = tt_calloc(1, sizeof(*m));
	int rc = 0;

	*out = NULL;
	if (m == NULL) {
		return -ENOMEM;
	}
	if (kv->mem == TUTTI_MEM_CUDA) {
		rc = tt_list_mem_reserve(&m->lists, kv);
	}
	if (rc < 0) {
		tt_load_mem_destroy(m);
		return rc;
	}
	*out = m;
	return 0;
}

void
tt_load_mem_destroy(struct tt_load_mem *m)
{
	if (m != NULL) {
		tt_list_mem_free(&m->lists);
		tt_free(m);
	}
}

int
tt_load_op_open(struct tutti_store *st, const struct tutti_kv *kv, const struct tutti_request *reqs,
                uint32_t nr_reqs, struct tt_load_mem *mem, struct tt_load_op **out)
{
	uint64_t t0 = tt_now_ns();
	struct tt_load_op *op;
	int rc;

	*out = NULL;
	if (st == NULL) {
		return -EINVAL;
	}
	op = tt_calloc(1, sizeof(*op));
	if (op == NULL) {
		return -ENOMEM;
	}
	op->st = st;
	rc = load_begin(&op->b, st, kv, reqs, nr_reqs, 0, st->geo.g.nr_layers);
	if (rc < 0) {
		tt_free(op);
		return rc;
	}
	tt_io_lock(st);
	rc = tt_engine_launch_open(st->engine, &op->b, &mem->lists, &op->launch);
	pthread_mutex_unlock(&st->io_lock);
	if (rc < 0) {
		op->rc = rc;
		tt_batch_fail_all(&op->b, rc);
	}
	op->busy_ns = tt_now_ns() - t0;
	*out = op;
	return 0;
}

int
tt_load_op_layer(struct tt_load_op *op, uint32_t *word, uint32_t value, uint64_t *done_ns)
{
	struct tutti_store *st = op->st;
	uint64_t t0 = tt_now_ns();
	uint32_t l = op->next;
	int rc = op->rc;

	if (l >= st->geo.g.nr_layers) {
		return -EINVAL;
	}
	op->next++;
	if (op->launch != NULL && rc == 0) {
		/* Not tt_io_lock: the op's own kernels run on. */
		pthread_mutex_lock(&st->io_lock);
		rc = tt_engine_launch_layer(st->engine, op->launch, l, word, value, done_ns);
		pthread_mutex_unlock(&st->io_lock);
		op->busy_ns += tt_now_ns() - t0;
		if (rc == 0) {
			op->last_word = word;
			op->last_value = value;
			return 0;
		}
		op->rc = rc;
		tt_batch_fail_all(&op->b, rc);
	} else if (rc == 0) {
		op->b.layer_begin = l;
		op->b.layer_end = l + 1;
		tt_io_lock(st);
		tt_engine_transfer(st->engine, &op->b);
		pthread_mutex_unlock(&st->io_lock);
	}
	/* Done (or failed) in the call: publish from here. A launched op's times are the GPU's:
	 * a layer that failed on the host has none (its call time is counted above). */
	*done_ns = 0;
	if (op->launch == NULL) {
		*done_ns = tt_now_ns();
		op->busy_ns += *done_ns - t0;
	}
	tt_word_store_release(word, value);
	return rc;
}

int
tt_load_op_done(struct tt_load_op *op)
{
	if (op->launch == NULL) {
		return 1;
	}
	/* The newest layer's signal runs after every result copy of the op: it alone says the op
	 * is done, whatever else the shared stream carries. A stream that went idle without it
	 * (a CUDA error) is done too: close reports the failure. */
	if (op->last_word != NULL &&
	    (int32_t)(tt_word_load_acquire(op->last_word) - op->last_value) >= 0) {
		return 1;
	}
	return tt_engine_launch_idle(op->st->engine, op->launch);
}

bool
tt_load_op_launched(const struct tt_load_op *op)
{
	return op->launch != NULL;
}

int64_t
tt_load_op_close(struct tt_load_op *op, int32_t *status)
{
	struct tutti_store *st = op->st;
	uint64_t t0 = tt_now_ns();
	int64_t loaded;

	tt_io_lock(st);
	if (op->launch != NULL) {
		int rc = tt_engine_launch_finish(st->engine, op->launch);

		if (rc < 0) {
			tt_batch_fail_all(&op->b, rc);
		}
	}
	op->b.layer_begin = 0;
	op->b.layer_end = op->next;
	loaded = load_end(st, &op->b, op->busy_ns + (tt_now_ns() - t0), status);
	tt_free(op);
	return loaded;
}
