/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti_store_load: plan under the store lock (find and pin every chunk), move under the I/O
 * lock, then drop what proved damaged and unpin.
 */
#include <errno.h>

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

int64_t
tutti_store_load(struct tutti_store *st, const struct tutti_kv *kv,
                 const struct tutti_request *reqs, uint32_t nr_reqs, uint32_t layer_begin,
                 uint32_t layer_end, int32_t *status)
{
	struct tt_transfer t = {.st = st, .kv = kv, .kind = TT_TRANSFER_LOAD};
	uint64_t t0 = tt_now_ns(), loaded = 0, errors = 0, corrupt = 0;
	int rc;

	if (st == NULL || layer_begin >= layer_end || layer_end > st->geo.g.nr_layers) {
		return -EINVAL;
	}
	rc = tt_plan_chunks(st, kv, reqs, nr_reqs, true, &t.chunks, &t.nr_chunks);
	if (rc < 0) {
		return rc;
	}
	t.layer_begin = layer_begin;
	t.layer_end = layer_end;
	t.direct_layers = tt_direct_layers(st, kv);

	pthread_mutex_lock(&st->lock);
	plan_load(st, &t);
	pthread_mutex_unlock(&st->lock);

	pthread_mutex_lock(&st->io_lock);
	if (st->gring != NULL) {
		tt_gring_transfer(&t);
	} else if (st->cufile != NULL) {
		tt_gds_transfer(&t);
	} else {
		tt_transfer_run(&t);
	}
	erase_corrupt(st, &t);
	tt_store_note_io(st);
	pthread_mutex_unlock(&st->io_lock);

	pthread_mutex_lock(&st->lock);
	for (uint32_t i = 0; i < t.nr_chunks; i++) {
		struct tt_chunk_op *c = &t.chunks[i];

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
	tt_unpin_all(st, t.chunks, t.nr_chunks);
	st->stats.load_chunks += loaded;
	st->stats.load_errors += errors;
	st->stats.load_corrupt += corrupt;
	st->stats.load_bytes += loaded * (layer_end - layer_begin) * st->geo.object_bytes;
	st->stats.load_ns += tt_now_ns() - t0;
	pthread_mutex_unlock(&st->lock);

	if (status != NULL) {
		for (uint32_t i = 0; i < t.nr_chunks; i++) {
			status[i] = t.chunks[i].status;
		}
	}
	tt_free(t.chunks);
	return (int64_t)loaded;
}
