/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti_store_load: plan under the store lock (find and pin every chunk), move under the I/O
 * lock, then drop what proved damaged and unpin.
 */
#include <errno.h>
#include <string.h>

#include "store/store_impl.h"

static void
plan_load(struct tutti_store *st, struct tt_transfer *t)
{
	uint32_t last = TT_NO_SLOT;

	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		struct tt_chunk_op *c = &t->chunks[i];
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
			/* Direct reads must cover the whole stored payload for its checksum. */
			c->direct = t->direct_layers > 0 && c->obj_skip == 0 &&
			            c->nr_moved == c->stored_blocks;
			last = c->slot;
		}
		/* A request's chunks are used together: refresh each chain once, at its end. */
		if (last != TT_NO_SLOT &&
		    (i + 1 == t->nr_chunks || t->chunks[i + 1].req != c->req)) {
			tt_index_touch_chain(st->idx, last);
			last = TT_NO_SLOT;
		}
	}
}

/* Erase the headers of damaged chunks while they are still pinned (so their slots cannot be
 * reused under the erase), so that a restart does not find them again. Under io_lock. */
static uint32_t
erase_corrupt(struct tutti_store *st, struct tt_transfer *t)
{
	uint32_t nr = 0, *slots;

	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		nr += t->chunks[i].corrupt;
	}
	if (nr == 0) {
		return 0;
	}
	slots = tt_malloc(nr * sizeof(*slots));
	if (slots != NULL) {
		nr = 0;
		for (uint32_t i = 0; i < t->nr_chunks; i++) {
			if (t->chunks[i].corrupt) {
				slots[nr++] = t->chunks[i].slot;
			}
		}
		tt_erase_headers(st, slots, nr);
	}
	tt_free(slots);
	return nr;
}

/* The part of a load before any I/O: check, plan, find and pin every chunk. */
static int
load_begin(struct tt_transfer *t, struct tutti_store *st, const struct tutti_kv *kv,
           const struct tutti_request *reqs, uint32_t nr_reqs, uint32_t layer_begin,
           uint32_t layer_end)
{
	int rc;

	*t = (struct tt_transfer){.st = st, .kv = kv, .kind = TT_TRANSFER_LOAD};
	if (st == NULL || layer_begin >= layer_end || layer_end > st->geo.g.nr_layers) {
		return -EINVAL;
	}
	rc = tt_plan_chunks(st, kv, reqs, nr_reqs, true, &t->chunks, &t->nr_chunks);
	if (rc < 0) {
		return rc;
	}
	t->layer_begin = layer_begin;
	t->layer_end = layer_end;
	t->direct_layers = tt_direct_layers(st, kv);

	pthread_mutex_lock(&st->lock);
	plan_load(st, t);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

/* The rest, with the I/O done (caller holds io_lock, released here): erase damaged chunks,
 * unpin, count, report. */
static int64_t
load_end(struct tt_transfer *t, uint64_t busy_ns, int32_t *status)
{
	struct tutti_store *st = t->st;
	uint64_t loaded = 0, errors = 0, corrupt = 0;

	erase_corrupt(st, t);
	tt_store_note_io(st);
	pthread_mutex_unlock(&st->io_lock);

	pthread_mutex_lock(&st->lock);
	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		struct tt_chunk_op *c = &t->chunks[i];

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
	tt_unpin_all(st, t->chunks, t->nr_chunks);
	st->stats.load_chunks += loaded;
	st->stats.load_errors += errors;
	st->stats.load_corrupt += corrupt;
	st->stats.load_bytes += loaded * (t->layer_end - t->layer_begin) * st->geo.object_bytes;
	st->stats.load_ns += busy_ns;
	pthread_mutex_unlock(&st->lock);

	if (status != NULL) {
		for (uint32_t i = 0; i < t->nr_chunks; i++) {
			status[i] = t->chunks[i].status;
		}
	}
	tt_free(t->chunks);
	t->chunks = NULL;
	return (int64_t)loaded;
}

int64_t
tutti_store_load(struct tutti_store *st, const struct tutti_kv *kv,
                 const struct tutti_request *reqs, uint32_t nr_reqs, uint32_t layer_begin,
                 uint32_t layer_end, int32_t *status)
{
	struct tt_transfer t;
	uint64_t t0 = tt_now_ns();
	int rc;

	rc = load_begin(&t, st, kv, reqs, nr_reqs, layer_begin, layer_end);
	if (rc < 0) {
		return rc;
	}
	tt_io_lock(st);
	tt_transfer_on_engine(&t);
	return load_end(&t, tt_now_ns() - t0, status);
}

/* ---- layer by layer ---- */

int
tt_load_op_open(struct tt_load_op *op, struct tutti_store *st, const struct tutti_kv *kv,
                const struct tutti_request *reqs, uint32_t nr_reqs, struct tt_list_mem *mem)
{
	uint64_t t0 = tt_now_ns();
	int rc;

	memset(op, 0, sizeof(*op));
	if (st == NULL) {
		return -EINVAL;
	}
	rc = load_begin(&op->t, st, kv, reqs, nr_reqs, 0, st->geo.g.nr_layers);
	if (rc < 0) {
		return rc;
	}
	tt_io_lock(st);
	rc = tt_gring_op_open(op, mem);
	pthread_mutex_unlock(&st->io_lock);
	if (rc < 0) {
		op->rc = rc;
		tt_transfer_fail_all(&op->t, rc);
	}
	op->busy_ns = tt_now_ns() - t0;
	return 0;
}

int
tt_load_op_layer(struct tt_load_op *op, uint32_t *word, uint32_t value, uint64_t *done_ns)
{
	struct tutti_store *st = op->t.st;
	uint64_t t0 = tt_now_ns();
	uint32_t l = op->next;
	int rc = op->rc;

	if (l >= st->geo.g.nr_layers) {
		return -EINVAL;
	}
	op->next++;
	if (op->gpu != NULL && rc == 0) {
		pthread_mutex_lock(&st->io_lock); /* not tt_io_lock: the op's own kernels run on */
		rc = tt_gring_op_layer(op, word, value, done_ns);
		pthread_mutex_unlock(&st->io_lock);
		op->busy_ns += tt_now_ns() - t0;
		if (rc == 0) {
			op->last_word = word;
			op->last_value = value;
			return 0;
		}
		op->rc = rc;
		tt_transfer_fail_all(&op->t, rc);
	} else if (rc == 0) {
		op->t.layer_begin = l;
		op->t.layer_end = l + 1;
		tt_io_lock(st);
		tt_transfer_on_engine(&op->t);
		pthread_mutex_unlock(&st->io_lock);
	}
	/* Done (or failed) in the call: publish from here. An async op's times are the GPU's:
	 * a layer that failed on the host has none (its call time is counted above). */
	*done_ns = 0;
	if (op->gpu == NULL) {
		*done_ns = tt_now_ns();
		op->busy_ns += *done_ns - t0;
	}
	tt_st_release(word, value);
	return rc;
}

int
tt_load_op_done(struct tt_load_op *op)
{
	if (op->gpu == NULL) {
		return 1;
	}
	/* The newest layer's signal runs after every result copy of the op: it alone says the op
	 * is done, whatever else the shared stream carries. A stream that went idle without it
	 * (a CUDA error) is done too: close reports the failure. */
	if (op->last_word != NULL &&
	    (int32_t)(tt_ld_acquire(op->last_word) - op->last_value) >= 0) {
		return 1;
	}
	return tt_gpu_idle(op->gpu);
}

int64_t
tt_load_op_close(struct tt_load_op *op, int32_t *status)
{
	struct tutti_store *st = op->t.st;
	uint64_t t0 = tt_now_ns();

	if (st == NULL) {
		return -EINVAL;
	}
	tt_io_lock(st);
	if (op->gpu != NULL) {
		int rc = tt_gring_op_finish(op);

		if (rc < 0) {
			tt_transfer_fail_all(&op->t, rc);
		}
	}
	op->t.layer_begin = 0;
	op->t.layer_end = op->next;
	return load_end(&op->t, op->busy_ns + (tt_now_ns() - t0), status);
}
