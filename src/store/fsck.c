/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti_store_fsck: read back every stored chunk and check every object's checksum. A repair
 * removes the chunks that fail, and checks the older copies of their keys that the next open
 * would find instead (check_older_copies), so that it converges: one repair run to the end
 * leaves nothing damaged behind.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "format/format.h"
#include "store/store_impl.h"

/* The size of struct tutti_fsck_report in 0.2.0, before the header counts. */
#define REPORT_BYTES_0_2 offsetof(struct tutti_fsck_report, damaged_headers)

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

/* Read \p len bytes at \p off within \p slot from its data file. 0, -EIO (short) or -errno. */
static int
read_slot(const struct tutti_store *st, uint32_t slot, uint64_t off, uint8_t *buf, size_t len)
{
	uint32_t file;
	uint64_t at;
	ssize_t n;

	tt_pool_locate(st->pool, slot, &file, &at);
	n = pread(tt_pool_fds(st->pool)[file], buf, len, (off_t)(at + off));
	return n < 0 ? -errno : (size_t)n == len ? 0 : -EIO;
}

/* Whether \p slot holds a header of this store (as recovery takes one) into \p h. */
static bool
read_ours(const struct tutti_store *st, uint32_t slot, uint8_t *buf, struct tt_slot_header *h)
{
	return tt_pool_on_disk(st->pool, slot) &&
	       read_slot(st, slot, 0, buf, TUTTI_SLOT_HEADER_BYTES) == 0 &&
	       tt_slot_decode(buf, TUTTI_SLOT_HEADER_BYTES, h) == 0 &&
	       h->store_uid == tt_pool_slot_uid(st->pool, slot) && h->key_bytes == st->key_bytes &&
	       h->nr_objects == st->geo.g.nr_layers && h->nr_blocks > 0 &&
	       h->nr_blocks <= st->geo.blocks_per_chunk;
}

/* 1 when every object of the chunk \p h in \p slot matches its checksum, 0 when one does not,
 * or the read's error. */
static int
objects_match(const struct tutti_store *st, uint32_t slot, const struct tt_slot_header *h,
              uint8_t *obj)
{
	for (uint32_t l = 0; l < st->geo.g.nr_layers; l++) {
		int rc =
		    read_slot(st, slot, tt_geo_object_off(&st->geo, l), obj, st->geo.object_bytes);

		if (rc < 0) {
			return rc;
		}
		if (tt_csum(obj, h->nr_blocks * st->geo.layer_block_bytes) != h->csum[l]) {
			return 0;
		}
	}
	return 1;
}

/*
 * The older copies of the keys of the chunks a repair removes (\p bad): once a chunk's header is
 * erased, the next open finds the newest older copy of its key (a second copy that recovery
 * dropped: st->older), whose objects nothing has checked. Each is checked now, as a load would
 * check it: the first whose objects match is the key's from the next open on; those that fail
 * go into \p erase (after the \p nr_erase there), and the walk goes on to the next older one. A
 * slot reused since (its header names another key, or a newer chunk) or a read error ends the
 * walk: nothing is proven there. Returns the new count of \p erase, or -ENOMEM. Caller holds
 * io_lock, so no save writes meanwhile; the slots read are free, so they are read directly.
 */
static int64_t
check_older_copies(struct tutti_store *st, const uint32_t *bad, uint32_t nr_bad, uint32_t *erase,
                   uint32_t nr_erase)
{
	uint8_t *buf =
	    tt_aligned_alloc(TT_MAX((uint64_t)TUTTI_SLOT_HEADER_BYTES, st->geo.object_bytes));
	struct tt_slot_header *h = tt_malloc(2 * sizeof(*h));
	int64_t n = nr_erase;

	if (buf == NULL || h == NULL) {
		n = -ENOMEM;
	}
	for (uint32_t i = 0; n >= 0 && i < nr_bad; i++) {
		struct tt_slot_header *newer = &h[0], *cand = &h[1];
		uint32_t o = st->older[bad[i]];

		st->older[bad[i]] = TT_NO_SLOT;
		if (o == TT_NO_SLOT || !read_ours(st, bad[i], buf, newer)) {
			continue;
		}
		while (o != TT_NO_SLOT && read_ours(st, o, buf, cand) &&
		       memcmp(cand->key, newer->key, st->key_bytes) == 0 &&
		       cand->seq < newer->seq && objects_match(st, o, cand, buf) == 0) {
			uint32_t next = st->older[o];

			tt_log_warn(&st->log,
			            "fsck: slot %u, an older copy of the damaged chunk of slot %u, "
			            "is damaged too: removed",
			            o, bad[i]);
			erase[n++] = o;
			st->older[o] = TT_NO_SLOT;
			*newer = *cand;
			o = next;
		}
	}
	tt_aligned_free(buf);
	tt_free(h);
	return n;
}

static void
fill_report(const struct tutti_store *st, const struct tutti_fsck_report *rep,
            struct tutti_fsck_report *out)
{
	struct tutti_fsck_report r = *rep;

	r.size = out->size;
	r.damaged_headers = st->hdr_damaged;
	r.foreign_headers = st->hdr_foreign;
	r.unreadable_headers = st->hdr_unreadable;
	memcpy(out, &r, out->size);
}

int
tutti_store_fsck(struct tutti_store *st, uint32_t flags, struct tutti_fsck_report *out)
{
	struct tt_batch t = {.kind = TT_BATCH_VERIFY};
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	bool repair = (flags & TUTTI_FSCK_REPAIR) != 0;
	uint64_t t0 = tt_now_ns();
	uint32_t *bad = NULL, nr_bad = 0, nr_erase = 0, nr_failed = 0;
	int64_t n;
	int rc;

	if (st == NULL || out == NULL ||
	    (out->size != sizeof(*out) && out->size != REPORT_BYTES_0_2) ||
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
	/* The damaged chunks first, then the older copies of their keys found damaged too. */
	bad = tt_malloc(((size_t)t.nr_chunks + tt_pool_nr_slots(st->pool)) * sizeof(*bad));
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
		n = check_older_copies(st, bad, nr_bad, bad, nr_bad);
		rc = n < 0 ? (int)n : 0;
		nr_erase = n < 0 ? 0 : (uint32_t)n;
	}
	if (repair && rc == 0 && nr_erase > 0) {
		tt_erase_headers(st, bad, nr_erase);
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

	rep.chunks_checked = t.nr_chunks;
	rep.bytes_checked = t.bytes_verified;
	rep.corrupt_chunks = nr_failed;
	rep.removed_chunks = repair && rc == 0 ? nr_bad : 0;
	rep.elapsed_ns = tt_now_ns() - t0;
	fill_report(st, &rep, out);
	tt_free(bad);
	tt_free(t.chunks);
	return rc;
}
