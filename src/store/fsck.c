/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti_store_fsck: read back every stored chunk and check every object's checksum.
 */
#include <errno.h>

#include "store/store_impl.h"

/* Pin every stored chunk and describe it as a whole-chunk read. Under the store lock. */
static int
plan_all(struct tutti_store *st, struct tt_batch *t)
{
	uint32_t nr_slots = tt_pool_nr_slots(st->pool), n = 0;

	t->chunks = tt_calloc(TT_MAX(tt_index_count(st->idx), 1u), sizeof(*t->chunks));
	if (t->chunks == NULL) {
		return -ENOMEM;
	}
	for (uint32_t s = 0; s < nr_slots && n < tt_index_count(st->idx); s++) {
		uint32_t blocks = tt_index_nr_blocks(st->idx, s);

		if (blocks == 0) {
			continue;
		}
		tt_index_pin(st->idx, s);
		t->chunks[n++] = (struct tt_chunk_op){
		    .slot = s,
		    .nr_moved = blocks,
		    .nr_blocks = blocks,
		    .stored_blocks = blocks,
		    .pinned = true,
		};
	}
	t->nr_chunks = n;
	return 0;
}

int
tutti_store_fsck(struct tutti_store *st, uint32_t flags, struct tutti_fsck_report *out)
{
	struct tt_batch t = {.kind = TT_BATCH_VERIFY};
	bool repair = (flags & TUTTI_FSCK_REPAIR) != 0;
	uint64_t t0 = tt_now_ns();
	uint32_t *bad = NULL, nr_bad = 0, nr_failed = 0;
	int rc;

	if (st == NULL || out == NULL || out->size != sizeof(*out) ||
	    (flags & ~TUTTI_FSCK_REPAIR) != 0) {
		return -EINVAL;
	}
	if (repair && st->read_only) {
		tt_log_err(&st->log, "fsck: a repair writes, and the store was opened read-only");
		return -EROFS;
	}
	t.layer_begin = 0;
	t.layer_end = st->geo.g.nr_layers;

	pthread_mutex_lock(&st->lock);
	rc = plan_all(st, &t);
	pthread_mutex_unlock(&st->lock);
	if (rc < 0) {
		return rc;
	}
	tt_batch_locate(st, &t, NULL);
	bad = tt_malloc(TT_MAX(t.nr_chunks, 1u) * sizeof(*bad));
	if (bad == NULL) {
		rc = -ENOMEM;
	}

	tt_io_lock(st);
	if (rc == 0) {
		rc = tt_engine_transfer(st->engine, &t);
	}
	/* Damaged: what failed its checksum (proven) or could not be read. Only the first kind
	 * is removed: a read error may pass, and the chunk is never served while it lasts. */
	for (uint32_t i = 0; bad != NULL && i < t.nr_chunks; i++) {
		const struct tt_chunk_op *c = &t.chunks[i];

		if (c->status != 0) {
			nr_failed++;
			tt_log_warn(&st->log, "fsck: slot %u is damaged: %s", c->slot,
			            tutti_strerror(c->status));
		}
		if (c->status != 0 && c->corrupt) {
			bad[nr_bad++] = c->slot;
		}
	}
	if (repair && rc == 0 && nr_bad > 0) {
		tt_erase_headers(st, bad, nr_bad);
	}
	pthread_mutex_unlock(&st->io_lock);

	pthread_mutex_lock(&st->lock);
	if (repair && rc == 0) {
		/* Their children stay indexed, as roots: valid content, whole again once the
		 * removed chunk is saved anew (tt_index_kill). */
		for (uint32_t i = 0; i < nr_bad; i++) {
			tt_drop_chunk(st, bad[i]);
		}
	}
	tt_unpin_all(st, t.chunks, t.nr_chunks);
	pthread_mutex_unlock(&st->lock);

	out->chunks_checked = t.nr_chunks;
	out->bytes_checked = t.bytes_verified;
	out->corrupt_chunks = nr_failed;
	out->removed_chunks = repair && rc == 0 ? nr_bad : 0;
	out->elapsed_ns = tt_now_ns() - t0;
	tt_free(bad);
	tt_free(t.chunks);
	return rc;
}
