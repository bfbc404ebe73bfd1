/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti_store_save and its commit protocol.
 *
 * 1. Plan (store lock): find what is already stored, evict to make room, allocate slots.
 * 2. Write every object of every new chunk (I/O lock), noting each object's checksum.
 * 3. Durable mode: flush the device, so that no header can reach the medium before its objects.
 * 4. Write each chunk's slot header (key, parent key, block count, object checksums, sequence):
 *    the commit record on disk. A header is only written once all its objects completed.
 * 5. Durable mode: flush again, so that the commit itself survives a power loss.
 * 6. Commit (store lock): make the chunks visible, in chain order.
 *
 * A crash anywhere leaves either no header (the slot is free at recovery) or a header whose
 * objects are all on disk, or, when a slot was being reused, an older header over newer objects,
 * which the checksums catch at load. Nothing unverified is ever served.
 */
#include <errno.h>
#include <string.h>

#include <xxhash.h>

#include "format/format.h"
#include "store/store_impl.h"

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

/*
 * The keys a call writes, so that a chunk named twice in one call (requests sharing a prefix
 * that is not stored yet) is written once. Two committed copies of one key would leave a valid
 * header in the slot that loses at commit, and that slot, reused and torn by a crash, could win
 * over the live copy at recovery.
 */
struct keyset {
	uint32_t *buckets; /* chunk index + 1, or 0 */
	uint32_t mask;
};

static int
keyset_init(struct keyset *ks, uint32_t nr)
{
	uint64_t n = 16;

	while (n < 2ull * nr) {
		n <<= 1;
	}
	ks->mask = (uint32_t)(n - 1);
	ks->buckets = tt_calloc(n, sizeof(*ks->buckets));
	return ks->buckets == NULL ? -ENOMEM : 0;
}

/* Add chunk \p i's key; false when the call already writes that key. */
static bool
keyset_add(struct keyset *ks, const struct tutti_store *st, const struct tt_batch *t, uint32_t i)
{
	const uint8_t *key = tt_req_key(st, t->chunks[i].req, t->chunks[i].key);
	uint32_t b = (uint32_t)XXH3_64bits(key, st->key_bytes) & ks->mask;

	for (; ks->buckets[b] != 0; b = (b + 1) & ks->mask) {
		const struct tt_chunk_op *o = &t->chunks[ks->buckets[b] - 1];

		if (memcmp(tt_req_key(st, o->req, o->key), key, st->key_bytes) == 0) {
			return false;
		}
	}
	ks->buckets[b] = i + 1;
	return true;
}

/* Decide per chunk: already stored (status 1, pinned as a parent), to write (status 0, slot
 * allocated), or skipped. Runs under the store lock. */
static void
plan_save(struct tutti_store *st, struct tt_batch *t, uint32_t *parent_pins, struct keyset *ks)
{
	uint32_t nr_dirs = tt_pool_nr_dirs(st->pool), needed = 0;
	int chain_rc = 0;

	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		struct tt_chunk_op *c = &t->chunks[i];
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
		c->slot = tt_index_find(st->idx, tt_req_key(st, r, c->key));
		if (c->slot != TT_NO_SLOT) {
			tt_index_pin(st->idx, c->slot);
			c->pinned = true;
			c->status = 1;
			continue;
		}
		/* Written by an earlier request of this call: present once that commits. */
		c->status = keyset_add(ks, st, t, i) ? 0 : 1;
		needed += c->status == 0;
	}
	make_room(st, needed);
	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		struct tt_chunk_op *c = &t->chunks[i];

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

static void
fill_header(struct tutti_store *st, const struct tt_chunk_op *c, uint8_t *buf)
{
	struct tt_slot_header h;
	uint32_t L = st->geo.g.nr_layers;

	memset(&h, 0, sizeof(h));
	h.store_uid = tt_pool_slot_uid(st->pool, c->slot);
	h.seq = st->next_seq++;
	h.nr_blocks = c->nr_blocks;
	h.key_bytes = st->key_bytes;
	h.nr_objects = L;
	h.has_parent = c->key > 0;
	memcpy(h.key, tt_req_key(st, c->req, c->key), st->key_bytes);
	if (h.has_parent) {
		memcpy(h.parent, tt_req_key(st, c->req, c->key - 1), st->key_bytes);
	}
	memcpy(h.csum, c->csums, L * sizeof(h.csum[0]));
	tt_slot_encode(&h, buf);
}

/* Steps 3 to 5: flush, write the headers of the chunks whose objects are all written, flush.
 * A chunk whose header or flush fails gets the error as its status. Under io_lock. */
static uint32_t
write_commit_records(struct tutti_store *st, struct tt_batch *t)
{
	uint32_t batch = tt_engine_queue_depth(st->engine), flushes = 0;
	uint8_t *bufs = tt_aligned_alloc((size_t)batch * TUTTI_SLOT_HEADER_BYTES);
	uint32_t *slots = tt_malloc(batch * sizeof(*slots));
	uint32_t *which = tt_malloc(batch * sizeof(*which));
	int32_t *res = tt_malloc(batch * sizeof(*res));
	bool durable = st->durability == TUTTI_DURABILITY_DURABLE;
	uint32_t pending = 0;
	uint64_t files = 0; /* the data files written: a chunk's header lies in its objects' file */
	int rc = 0;

	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		pending += t->chunks[i].status == 0;
		if (t->chunks[i].status == 0) {
			files |= 1ull << t->chunks[i].file;
		}
	}
	if (pending == 0) {
		goto out; /* nothing written: nothing to commit or flush */
	}
	if (bufs == NULL || slots == NULL || which == NULL || res == NULL) {
		rc = -ENOMEM;
	}
	if (rc == 0 && durable) {
		rc = tt_engine_flush(st->engine, files);
		flushes += (uint32_t)__builtin_popcountll(files);
	}
	for (uint32_t i = 0; rc == 0 && i < t->nr_chunks;) {
		uint32_t n = 0;

		for (; i < t->nr_chunks && n < batch; i++) {
			if (t->chunks[i].status == 0) {
				fill_header(st, &t->chunks[i],
				            bufs + (uint64_t)n * TUTTI_SLOT_HEADER_BYTES);
				slots[n] = t->chunks[i].slot;
				which[n++] = i;
			}
		}
		rc = tt_write_headers(st, slots, n, bufs, res);
		for (uint32_t k = 0; rc == 0 && k < n; k++) {
			if (res[k] < 0) {
				tt_chunk_fail(&t->chunks[which[k]], res[k]);
			}
		}
	}
	if (rc == 0 && durable) {
		rc = tt_engine_flush(st->engine, files);
		flushes += (uint32_t)__builtin_popcountll(files);
	}
	if (rc < 0) {
		tt_log_err(&st->log, "committing saved chunks failed: %s", tutti_strerror(rc));
		tt_batch_fail_all(t, rc);
	}
out:
	tt_aligned_free(bufs);
	tt_free(slots);
	tt_free(which);
	tt_free(res);
	return flushes;
}

/*
 * A chunk already stored whose parent was removed (found damaged, or missing at recovery) was
 * kept as a root: its key still names valid content. Now that its parent is stored again, it
 * joins the chain, so that lookups and eviction see the chain whole.
 */
static void
relink(struct tutti_store *st, const struct tt_chunk_op *c, uint32_t slot)
{
	uint32_t parent;

	if (c->status != 1 || c->key == 0 || slot == TT_NO_SLOT ||
	    tt_index_parent(st->idx, slot) != TT_NO_SLOT) {
		return;
	}
	parent = tt_index_find(st->idx, tt_req_key(st, c->req, c->key - 1));
	if (parent != TT_NO_SLOT) {
		tt_index_adopt(st->idx, slot, parent); /* -ELOOP: caller keys that form a cycle */
	}
}

/* Step 6: make written chunks visible, in chain order; free the slots of everything else. */
static uint64_t
commit_save(struct tutti_store *st, struct tt_batch *t)
{
	uint32_t L = st->geo.g.nr_layers, last = TT_NO_SLOT;
	uint64_t written = 0;

	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		struct tt_chunk_op *c = &t->chunks[i];
		const uint8_t *key = tt_req_key(st, c->req, c->key);
		uint32_t parent = TT_NO_SLOT;

		if (c->status == 0) {
			if (c->key > 0) {
				parent = tt_index_find(st->idx, tt_req_key(st, c->req, c->key - 1));
			}
			if (c->key > 0 && parent == TT_NO_SLOT) {
				c->status = -ENOENT; /* an earlier chunk of the chain failed */
			} else {
				int rc;

				/* The checksums are in place before anyone can find the chunk. */
				memcpy(tt_slot_csums(st, c->slot), c->csums, L * sizeof(*c->csums));
				rc = tt_index_insert(st->idx, key, c->slot, parent, c->nr_blocks);
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
		if (c->owned && !c->erase) {
			tt_pool_free(st->pool, c->slot);
			c->owned = false;
		}
		switch (c->status) {
		case 0:
		case 1:
			last = tt_index_find(st->idx, key);
			relink(st, c, last);
			break;
		case -ENOENT:
			st->stats.save_orphans++;
			break;
		case -ENOSPC:
			/* No slot could be freed (the chunk got none), or the device is full (its
			 * write failed): the latter is a write error. */
			if (c->slot == TT_NO_SLOT) {
				st->stats.save_no_space++;
			} else {
				st->stats.save_errors++;
			}
			break;
		default:
			st->stats.save_errors++;
			break;
		}
		st->stats.save_present += c->status == 1;
		if (last != TT_NO_SLOT &&
		    (i + 1 == t->nr_chunks || t->chunks[i + 1].req != c->req)) {
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
	struct tt_batch t = {.kv = kv, .kind = TT_BATCH_SAVE};
	uint64_t *csums;
	uint64_t t0 = tt_now_ns(), written;
	uint32_t *parent_pins, flushes, nr_erase = 0;
	struct keyset ks = {0};
	int rc;

	if (st == NULL) {
		return -EINVAL;
	}
	if (st->read_only) {
		tt_log_err(&st->log, "save: the store was opened read-only");
		return -EROFS;
	}
	rc = tt_plan_chunks(st, kv, reqs, nr_reqs, false, &t.chunks, &t.nr_chunks);
	if (rc < 0) {
		return rc;
	}
	parent_pins = tt_malloc((size_t)t.nr_chunks * sizeof(*parent_pins));
	csums = tt_calloc((size_t)t.nr_chunks * st->geo.g.nr_layers, sizeof(*csums));
	if (parent_pins == NULL || csums == NULL || keyset_init(&ks, t.nr_chunks) < 0) {
		tt_free(parent_pins);
		tt_free(csums);
		tt_free(ks.buckets);
		tt_free(t.chunks);
		return -ENOMEM;
	}
	t.layer_begin = 0;
	t.layer_end = st->geo.g.nr_layers;

	pthread_mutex_lock(&st->lock);
	plan_save(st, &t, parent_pins, &ks);
	pthread_mutex_unlock(&st->lock);
	tt_batch_locate(st, &t, csums);

	tt_io_lock(st);
	tt_engine_transfer(st->engine, &t);
	flushes = write_commit_records(st, &t);
	tt_store_note_io(st);
	pthread_mutex_unlock(&st->io_lock);

	pthread_mutex_lock(&st->lock);
	written = commit_save(st, &t);
	tt_unpin_all(st, t.chunks, t.nr_chunks);
	for (uint32_t i = 0; i < t.nr_chunks; i++) {
		if (t.chunks[i].key == t.chunks[i].req->first_chunk &&
		    parent_pins[i] != TT_NO_SLOT && tt_index_unpin(st->idx, parent_pins[i])) {
			tt_pool_free(st->pool, parent_pins[i]);
		}
	}
	st->stats.flushes += flushes;
	st->stats.save_chunks += written;
	st->stats.save_bytes += written * st->geo.g.nr_layers * st->geo.object_bytes;
	pthread_mutex_unlock(&st->lock);

	for (uint32_t i = 0; i < t.nr_chunks; i++) {
		if (t.chunks[i].erase) {
			parent_pins[nr_erase++] = t.chunks[i].slot; /* reused as scratch */
		}
	}
	if (nr_erase > 0) {
		/* The slots are still ours: nobody can reuse them under the erase. */
		tt_io_lock(st);
		tt_erase_headers(st, parent_pins, nr_erase);
		pthread_mutex_unlock(&st->io_lock);
		pthread_mutex_lock(&st->lock);
		for (uint32_t i = 0; i < nr_erase; i++) {
			tt_pool_free(st->pool, parent_pins[i]);
		}
		pthread_mutex_unlock(&st->lock);
	}
	pthread_mutex_lock(&st->lock);
	st->stats.save_ns += tt_now_ns() - t0;
	pthread_mutex_unlock(&st->lock);

	if (status != NULL) {
		for (uint32_t i = 0; i < t.nr_chunks; i++) {
			status[i] = t.chunks[i].status;
		}
	}
	tt_free(parent_pins);
	tt_free(ks.buckets);
	tt_free(csums);
	tt_free(t.chunks);
	return (int64_t)written;
}
