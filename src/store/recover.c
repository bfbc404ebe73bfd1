/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recovery at open: rebuild the index from the slot headers.
 *
 * The 4 KiB header of every slot on disk is read through the I/O engine, many in flight. A
 * header is taken when it decodes (magic, version, sizes, its own checksum) and belongs to this
 * store (store id, key size, layer and block counts). Then:
 *  - several slots with one key (a chunk saved again before the old slot was reused): the most
 *    recent sequence number wins;
 *  - chunks are indexed parents first, found by key, so a child never precedes its parent
 *    whatever the order of their sequence numbers; a chunk whose parent is missing (evicted and
 *    overwritten before a crash, or removed as damaged) is kept as the root of what follows it:
 *    its key still names valid content, and once the parent is saved anew the save links it
 *    back, so the chain is whole again without its tail being recomputed (the same for a
 *    chain whose keys form a cycle, which only a caller's keys can);
 *  - every slot not indexed is free.
 * Nothing is written here: the headers proven damaged (their bytes fail their own checksum,
 * whatever version they claim, or hold no slot magic) are listed for the caller, which erases
 * them with TUTTI_OPEN_REPAIR once the open has succeeded. Headers that are intact but not this
 * store's (another version's: sealed by their checksum under the rule every version keeps),
 * older copies of a key, orphans and headers that could not be read are never erased here:
 * nothing proves them damaged. Each copy's next older copy is noted (st->older) for a repair,
 * which checks the older copy of a chunk it removes (fsck.c).
 * Object checksums are kept in memory for the load path; objects themselves are not read, so
 * recovery costs one small read per slot, and data damage is caught at load (or by fsck).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/format.h"
#include "store/store_impl.h"

enum rec_state {
	REC_PENDING = 0,
	REC_STACKED, /* on the insertion stack: its parent is being inserted */
	REC_INDEXED,
	REC_DROPPED,
};

struct rec {
	uint64_t seq;
	uint32_t slot;
	uint32_t nr_blocks;
	uint32_t has_parent;
	uint32_t state;
};

struct recovery {
	struct tutti_store *st;
	struct rec *recs;
	uint8_t *keys;    /* nr_recs * key_bytes */
	uint8_t *parents; /* nr_recs * key_bytes */
	uint32_t nr_recs;
	uint32_t *by_key; /* record numbers sorted by key, then newest first */
	uint32_t *by_seq; /* record numbers sorted by sequence */
	uint32_t *stack;
	uint8_t *used;     /* one byte per slot */
	uint32_t *slots;   /* the slots read: those on disk (tt_pool_on_disk) */
	uint32_t *damaged; /* slots whose headers are proven damaged */
	uint32_t nr_damaged;
	uint64_t max_seq;
	uint64_t dropped, orphans, duplicates;
	uint64_t foreign, unreadable; /* of dropped: intact but not ours; not read */
};

static const uint8_t *
rec_key(const struct recovery *r, uint32_t i)
{
	return r->keys + (uint64_t)i * r->st->key_bytes;
}

static const uint8_t *
rec_parent(const struct recovery *r, uint32_t i)
{
	return r->parents + (uint64_t)i * r->st->key_bytes;
}

/* ---- reading the headers ---- */

static void
take_header(struct recovery *r, uint32_t slot, const uint8_t *buf)
{
	struct tutti_store *st = r->st;
	struct tt_slot_header h;
	uint32_t n;
	int rc = tt_slot_decode(buf, TUTTI_SLOT_HEADER_BYTES, &h);

	if (rc == -ENODATA) {
		return; /* never committed */
	}
	/* Damage: the header breaks its own checksum (whatever version it claims: the checksum
	 * is checked first), holds impossible values, or holds no slot magic at all. */
	if (rc == -EBADMSG || (rc == -EPROTO && memcmp(buf, TT_SLOT_MAGIC, 8) != 0)) {
		r->dropped++;
		r->damaged[r->nr_damaged++] = slot;
		return;
	}
	if (rc < 0 || h.store_uid != tt_pool_slot_uid(st->pool, slot) ||
	    h.key_bytes != st->key_bytes || h.nr_objects != st->geo.g.nr_layers ||
	    h.nr_blocks == 0 || h.nr_blocks > st->geo.blocks_per_chunk) {
		/* Intact, of another version, store or configuration: not ours to erase. */
		r->dropped++;
		r->foreign++;
		return;
	}
	n = r->nr_recs++;
	r->recs[n] = (struct rec){
	    .seq = h.seq, .slot = slot, .nr_blocks = h.nr_blocks, .has_parent = h.has_parent};
	memcpy(r->keys + (uint64_t)n * st->key_bytes, h.key, st->key_bytes);
	memcpy(r->parents + (uint64_t)n * st->key_bytes, h.parent, st->key_bytes);
	memcpy(tt_slot_csums(st, slot), h.csum, st->geo.g.nr_layers * sizeof(h.csum[0]));
	r->max_seq = TT_MAX(r->max_seq, h.seq);
}

static void
header_where(void *arg, uint32_t i, uint16_t *file, uint64_t *off)
{
	const struct recovery *r = arg;
	uint32_t f;

	tt_pool_locate(r->st->pool, r->slots[i], &f, off);
	*file = (uint16_t)f;
}

static void
header_got(void *arg, uint32_t i, const uint8_t *buf, int32_t res)
{
	struct recovery *r = arg;

	if (res < 0) {
		/* Unreadable now, perhaps not for good: not taken, not erased. */
		r->dropped++;
		r->unreadable++;
	} else {
		take_header(r, r->slots[i], buf);
	}
}

/*
 * The header of a slot that a truncation cut through (at most the last slot on disk of each
 * data file): what the file still holds, the rest read as zeros, as it will once the file is
 * extended again. Read apart, since the engine reports a read that meets the end of the file
 * as an error.
 */
static int
read_cut_header(struct recovery *r, uint32_t slot, uint8_t *buf)
{
	uint32_t file;
	uint64_t off;
	ssize_t n;

	tt_pool_locate(r->st->pool, slot, &file, &off);
	memset(buf, 0, TUTTI_SLOT_HEADER_BYTES);
	n = pread(tt_pool_fds(r->st->pool)[file], buf, TUTTI_SLOT_HEADER_BYTES, (off_t)off);
	if (n < 0) {
		return -errno;
	}
	take_header(r, slot, buf);
	return 0;
}

/* Read the header of every slot on disk, many in flight, through the engine. */
static int
read_headers(struct recovery *r)
{
	const struct tt_pool *pool = r->st->pool;
	uint32_t nr = 0, nr_cut = 0;
	uint32_t cut[TT_POOL_MAX_FILES];
	uint8_t *buf;
	int rc;

	for (uint32_t slot = 0; slot < tt_pool_nr_slots(pool); slot++) {
		uint32_t file;
		uint64_t off;

		if (!tt_pool_on_disk(pool, slot)) {
			continue;
		}
		tt_pool_locate(pool, slot, &file, &off);
		if (off + TUTTI_SLOT_HEADER_BYTES > tt_pool_file_bytes(pool, file)) {
			cut[nr_cut++] = slot;
		} else {
			r->slots[nr++] = slot;
		}
	}
	rc = tt_engine_read_records(r->st->engine, nr, TUTTI_SLOT_HEADER_BYTES, header_where,
	                            header_got, r);
	if (rc < 0 || nr_cut == 0) {
		return rc;
	}
	buf = tt_aligned_alloc(TUTTI_SLOT_HEADER_BYTES);
	if (buf == NULL) {
		return -ENOMEM;
	}
	for (uint32_t i = 0; rc == 0 && i < nr_cut; i++) {
		rc = read_cut_header(r, cut[i], buf);
	}
	tt_aligned_free(buf);
	return rc;
}

/* ---- ordering ---- */

static int
cmp_key(const void *a, const void *b, void *arg)
{
	const struct recovery *r = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = memcmp(rec_key(r, x), rec_key(r, y), r->st->key_bytes);

	if (c != 0) {
		return c;
	}
	/* Newest first among copies of one key. */
	return (r->recs[x].seq < r->recs[y].seq) - (r->recs[x].seq > r->recs[y].seq);
}

static int
cmp_seq(const void *a, const void *b, void *arg)
{
	const struct recovery *r = arg;
	uint64_t x = r->recs[*(const uint32_t *)a].seq, y = r->recs[*(const uint32_t *)b].seq;

	return (x > y) - (x < y);
}

/* The kept record holding \p key, or UINT32_MAX. */
static uint32_t
find_key(const struct recovery *r, const uint8_t *key)
{
	uint32_t lo = 0, hi = r->nr_recs;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int c = memcmp(rec_key(r, r->by_key[mid]), key, r->st->key_bytes);

		if (c < 0) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	/* The first of equal keys is the newest copy, the one kept. */
	if (lo < r->nr_recs && memcmp(rec_key(r, r->by_key[lo]), key, r->st->key_bytes) == 0) {
		return r->by_key[lo];
	}
	return UINT32_MAX;
}

/* Drop every copy of a key but the newest, noting each copy's next older one (st->older). */
static void
drop_duplicates(struct recovery *r)
{
	for (uint32_t i = 1; i < r->nr_recs; i++) {
		uint32_t prev = r->by_key[i - 1], cur = r->by_key[i];

		if (memcmp(rec_key(r, prev), rec_key(r, cur), r->st->key_bytes) == 0) {
			r->recs[cur].state = REC_DROPPED;
			r->duplicates++;
			r->st->older[r->recs[prev].slot] = r->recs[cur].slot;
		}
	}
}

/* Index record \p i after its ancestors, without recursion (chains can be thousands long). */
static void
index_with_parents(struct recovery *r, uint32_t i)
{
	struct tutti_store *st = r->st;
	uint32_t top = 0;

	r->stack[top++] = i;
	while (top > 0) {
		uint32_t cur = r->stack[top - 1], p = UINT32_MAX, parent_slot = TT_NO_SLOT;
		struct rec *c = &r->recs[cur];

		if (c->state == REC_INDEXED || c->state == REC_DROPPED) {
			top--;
			continue;
		}
		if (c->has_parent) {
			p = find_key(r, rec_parent(r, cur));
			if (p != UINT32_MAX && r->recs[p].state == REC_PENDING) {
				r->recs[p].state = REC_STACKED;
				c->state = REC_STACKED;
				r->stack[top++] = p;
				continue;
			}
			if (p == UINT32_MAX || r->recs[p].state != REC_INDEXED) {
				/* Missing, dropped, or a cycle (its parent is on the stack): kept
				 * as a root, linked back when its parent is saved again. */
				r->orphans++;
			} else {
				parent_slot = r->recs[p].slot;
			}
		}
		if (tt_index_insert(st->idx, rec_key(r, cur), c->slot, parent_slot, c->nr_blocks) ==
		    0) {
			c->state = REC_INDEXED;
			r->used[c->slot] = 1;
		} else {
			c->state = REC_DROPPED;
			r->dropped++;
		}
		top--;
	}
}

/* ---- driver ---- */

static void
recovery_free(struct recovery *r)
{
	tt_free(r->recs);
	tt_free(r->keys);
	tt_free(r->parents);
	tt_free(r->by_key);
	tt_free(r->by_seq);
	tt_free(r->stack);
	tt_free(r->used);
	tt_free(r->slots);
}

int
tt_store_recover(struct tutti_store *st, uint32_t **damaged, uint32_t *nr_damaged)
{
	uint32_t nr_slots = tt_pool_nr_slots(st->pool);
	struct recovery r = {.st = st};
	uint64_t t0 = tt_now_ns();
	int rc;

	*damaged = NULL;
	*nr_damaged = 0;
	r.recs = tt_calloc(nr_slots, sizeof(*r.recs));
	r.keys = tt_calloc(nr_slots, st->key_bytes);
	r.parents = tt_calloc(nr_slots, st->key_bytes);
	r.by_key = tt_calloc(nr_slots, sizeof(*r.by_key));
	r.by_seq = tt_calloc(nr_slots, sizeof(*r.by_seq));
	r.stack = tt_calloc((size_t)nr_slots + 1, sizeof(*r.stack));
	r.used = tt_calloc(nr_slots, 1);
	r.slots = tt_calloc(nr_slots, sizeof(*r.slots));
	r.damaged = tt_calloc(nr_slots, sizeof(*r.damaged));
	if (r.recs == NULL || r.keys == NULL || r.parents == NULL || r.by_key == NULL ||
	    r.by_seq == NULL || r.stack == NULL || r.used == NULL || r.slots == NULL ||
	    r.damaged == NULL) {
		tt_free(r.damaged);
		recovery_free(&r);
		return -ENOMEM;
	}
	rc = read_headers(&r);
	if (rc < 0) {
		tt_log_err(&st->log, "recovery: reading slot headers failed: %s",
		           tutti_strerror(rc));
		tt_free(r.damaged);
		recovery_free(&r);
		return rc;
	}
	for (uint32_t i = 0; i < r.nr_recs; i++) {
		r.by_key[i] = r.by_seq[i] = i;
	}
	qsort_r(r.by_key, r.nr_recs, sizeof(*r.by_key), cmp_key, &r);
	qsort_r(r.by_seq, r.nr_recs, sizeof(*r.by_seq), cmp_seq, &r);
	drop_duplicates(&r);
	/* In commit order, so that the most recently saved chains end up most recently used. */
	for (uint32_t i = 0; i < r.nr_recs; i++) {
		index_with_parents(&r, r.by_seq[i]);
	}
	tt_pool_reset_free(st->pool, r.used);
	st->next_seq = r.max_seq + 1;
	st->stats.recovered_chunks = tt_index_count(st->idx);
	st->stats.recovery_dropped = r.dropped;
	st->stats.recovery_orphans = r.orphans;
	st->stats.recovery_duplicates = r.duplicates;
	st->stats.recovery_ns = tt_now_ns() - t0;
	st->hdr_damaged = r.nr_damaged;
	st->hdr_foreign = r.foreign;
	st->hdr_unreadable = r.unreadable;
	tt_log_info(&st->log,
	            "recovery: %u chunks in %.3f s; dropped %llu headers (%u damaged, %llu of "
	            "another version, store or configuration, %llu unreadable), %llu duplicates; "
	            "kept %llu orphans",
	            tt_index_count(st->idx), (double)st->stats.recovery_ns / 1e9,
	            (unsigned long long)r.dropped, r.nr_damaged, (unsigned long long)r.foreign,
	            (unsigned long long)r.unreadable, (unsigned long long)r.duplicates,
	            (unsigned long long)r.orphans);
	*damaged = r.damaged;
	*nr_damaged = r.nr_damaged;
	recovery_free(&r);
	return 0;
}
