/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What loads, saves and fsck share: planning a call into chunks (checked against the store and
 * the KV), placing planned chunks for the engine, pins, and the slot headers written and erased
 * through the engine's records.
 */
#include <errno.h>
#include <string.h>

#include "format/format.h"
#include "plan/plan.h"
#include "store/store_impl.h"

/* ---- planning ---- */

int
tt_plan_chunks(const struct tutti_store *st, const struct tutti_kv *kv,
               const struct tutti_request *reqs, uint32_t nr_reqs, bool load,
               struct tt_chunk_op **out, uint32_t *nr_out)
{
	int64_t nr = tt_plan_check(&st->geo, kv, reqs, nr_reqs, load, &st->log);
	struct tt_chunk_op *chunks;
	struct tt_plan_iter it;
	struct tt_chunk_plan p;
	uint32_t c = 0;

	if (nr < 0) {
		return (int)nr;
	}
	chunks = tt_calloc((size_t)nr, sizeof(*chunks));
	if (chunks == NULL) {
		return -ENOMEM;
	}
	tt_plan_begin(&it, &st->geo, reqs, nr_reqs);
	while (tt_plan_next(&it, &p)) {
		chunks[c++] = (struct tt_chunk_op){
		    .req = p.req,
		    .key = p.key,
		    .slot = TT_NO_SLOT,
		    .id_off = p.id_off,
		    .nr_moved = p.nr_moved,
		    .obj_skip = p.obj_skip,
		    .nr_blocks = p.nr_blocks,
		};
	}
	*out = chunks;
	*nr_out = c;
	return 0;
}

void
tt_unpin_all(struct tutti_store *st, struct tt_chunk_op *chunks, uint32_t nr)
{
	for (uint32_t i = 0; i < nr; i++) {
		if (chunks[i].pinned) {
			/* The last pin of a chunk removed as damaged releases its slot. */
			if (tt_index_unpin(st->idx, chunks[i].slot)) {
				tt_pool_free(st->pool, chunks[i].slot);
			}
			chunks[i].pinned = false;
		}
	}
}

void
tt_drop_chunk(struct tutti_store *st, uint32_t slot)
{
	if (tt_index_kill(st->idx, slot) == 1) {
		tt_pool_free(st->pool, slot);
	}
}

/* ---- placing chunks for the engine ---- */

void
tt_batch_locate(const struct tutti_store *st, struct tt_batch *b, uint64_t *save_csums)
{
	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		struct tt_chunk_op *c = &b->chunks[i];
		uint32_t file;

		if (c->status != 0 || c->slot == TT_NO_SLOT) {
			continue;
		}
		tt_pool_locate(st->pool, c->slot, &file, &c->off);
		c->file = (uint16_t)file;
		c->csums = b->kind == TT_BATCH_SAVE ? save_csums + (uint64_t)i * st->geo.g.nr_layers
		                                    : tt_slot_csums(st, c->slot);
	}
}

/* ---- headers ---- */

int
tt_write_headers(struct tutti_store *st, const uint32_t *slots, uint32_t nr, const uint8_t *bufs,
                 int32_t *res)
{
	uint32_t batch = tt_engine_queue_depth(st->engine);
	struct tt_io *ios = tt_calloc(TT_MIN(nr, batch) + 1, sizeof(*ios));
	int rc = 0;

	if (ios == NULL) {
		return -ENOMEM;
	}
	for (uint32_t first = 0; rc == 0 && first < nr; first += batch) {
		uint32_t n = TT_MIN(nr - first, batch);

		for (uint32_t i = 0; i < n; i++) {
			uint32_t file;
			uint64_t off;

			tt_pool_locate(st->pool, slots[first + i], &file, &off);
			ios[i] = (struct tt_io){
			    .off = off,
			    .buf = (void *)(bufs + (uint64_t)(first + i) * TUTTI_SLOT_HEADER_BYTES),
			    .len = TUTTI_SLOT_HEADER_BYTES,
			    .file = (uint16_t)file,
			    .op = TT_IO_WRITE,
			};
		}
		rc = tt_engine_io(st->engine, ios, n, res + first);
	}
	tt_free(ios);
	return rc;
}

void
tt_erase_headers(struct tutti_store *st, const uint32_t *slots, uint32_t nr)
{
	uint32_t batch = tt_engine_queue_depth(st->engine);
	uint8_t *zero;
	int32_t *res;

	if (st->read_only) {
		return; /* a read-only store writes nothing; what it found stays as it was */
	}
	/* Zeroed by the allocator. */
	zero = tt_aligned_alloc((size_t)TT_MIN(nr, batch) * TUTTI_SLOT_HEADER_BYTES);
	res = tt_calloc(nr, sizeof(*res));

	if (zero != NULL && res != NULL) {
		for (uint32_t first = 0; first < nr; first += batch) {
			uint32_t n = TT_MIN(nr - first, batch);

			/* Each batch reuses the same zeroed buffers. */
			tt_write_headers(st, slots + first, n, zero, res + first);
		}
		for (uint32_t i = 0; i < nr; i++) {
			if (res[i] < 0) {
				tt_log_warn(&st->log, "erasing the header of slot %u failed: %s",
				            slots[i], tutti_strerror(res[i]));
			}
		}
	}
	tt_aligned_free(zero);
	tt_free(res);
}
