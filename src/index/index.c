/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Key -> slot index with chain-aware LRU eviction.
 *
 * Lookup is an open-addressing hash table (linear probing, backward-shift deletion, so no
 * tombstones accumulate) over slot ids, sized to at least twice the slot count.
 *
 * Eviction must drop a chain from its tail: a chunk whose parent is gone can never be hit, so
 * keeping it would waste its slot. We keep one LRU list of all chunks under the invariant that
 * every parent is more recent than each of its children. Then the least recent chunk is always a
 * leaf, and eviction takes the tail in O(1) (skipping only pinned chunks). The invariant is kept
 * by (a) inserting a child directly behind its parent rather than at the head, and (b) touching
 * a chunk together with all its ancestors, deepest first, so the root ends up most recent.
 */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "common/common.h"
#include "index/index.h"

struct entry {
	uint32_t hash;        /* low 32 bits of the key hash, to move entries without rehashing */
	uint32_t parent;      /* TT_NO_SLOT for a root */
	uint32_t nr_children; /* indexed children */
	uint32_t prev;        /* towards the most recent end */
	uint32_t next;        /* towards the least recent end */
	uint32_t pins;
	uint32_t nr_blocks; /* 0: slot not indexed */
	bool killed;        /* removed while pinned: the slot stays taken until the last unpin */
};

struct tt_index {
	uint32_t nr_slots;
	uint32_t key_bytes;
	uint32_t count;
	uint32_t head; /* most recently used */
	uint32_t tail; /* least recently used */
	uint32_t table_mask;
	uint32_t *table; /* slot + 1, or 0 for an empty bucket */
	struct entry *ents;
	uint8_t *keys; /* nr_slots * key_bytes */
};

int
tt_index_create(uint32_t nr_slots, uint32_t key_bytes, struct tt_index **out)
{
	struct tt_index *idx;
	uint64_t buckets = 16;

	if (out == NULL || nr_slots == 0 || nr_slots == TT_NO_SLOT || key_bytes == 0) {
		return -EINVAL;
	}
	*out = NULL;
	while (buckets < 2ull * nr_slots) {
		buckets <<= 1;
	}
	idx = tt_calloc(1, sizeof(*idx));
	if (idx == NULL) {
		return -ENOMEM;
	}
	idx->nr_slots = nr_slots;
	idx->key_bytes = key_bytes;
	idx->head = idx->tail = TT_NO_SLOT;
	idx->table_mask = (uint32_t)(buckets - 1);
	idx->table = tt_calloc(buckets, sizeof(*idx->table));
	idx->ents = tt_calloc(nr_slots, sizeof(*idx->ents));
	idx->keys = tt_calloc(nr_slots, key_bytes);
	if (idx->table == NULL || idx->ents == NULL || idx->keys == NULL) {
		tt_index_destroy(idx);
		return -ENOMEM;
	}
	*out = idx;
	return 0;
}

void
tt_index_destroy(struct tt_index *idx)
{
	if (idx == NULL) {
		return;
	}
	tt_free(idx->table);
	tt_free(idx->ents);
	tt_free(idx->keys);
	tt_free(idx);
}

static uint32_t
key_hash(const struct tt_index *idx, const uint8_t *key)
{
	return (uint32_t)XXH3_64bits(key, idx->key_bytes);
}

static int
in_use(const struct tt_index *idx, uint32_t slot)
{
	return slot < idx->nr_slots && idx->ents[slot].nr_blocks != 0 && !idx->ents[slot].killed;
}

/* The bucket holding \p key, or the empty bucket where it would go. */
static uint32_t
probe(const struct tt_index *idx, const uint8_t *key, uint32_t hash)
{
	uint32_t b = hash & idx->table_mask;

	for (;;) {
		uint32_t v = idx->table[b];

		if (v == 0) {
			return b;
		}
		if (idx->ents[v - 1].hash == hash &&
		    memcmp(idx->keys + (uint64_t)(v - 1) * idx->key_bytes, key, idx->key_bytes) ==
		        0) {
			return b;
		}
		b = (b + 1) & idx->table_mask;
	}
}

uint32_t
tt_index_find(const struct tt_index *idx, const uint8_t *key)
{
	uint32_t v = idx->table[probe(idx, key, key_hash(idx, key))];

	return v == 0 ? TT_NO_SLOT : v - 1;
}

/* ---- LRU list ---- */

static void
lru_unlink(struct tt_index *idx, uint32_t s)
{
	struct entry *e = &idx->ents[s];

	if (e->prev != TT_NO_SLOT) {
		idx->ents[e->prev].next = e->next;
	} else {
		idx->head = e->next;
	}
	if (e->next != TT_NO_SLOT) {
		idx->ents[e->next].prev = e->prev;
	} else {
		idx->tail = e->prev;
	}
	e->prev = e->next = TT_NO_SLOT;
}

/* Link \p s just behind \p after (less recent than it), or at the head if after is TT_NO_SLOT. */
static void
lru_link_after(struct tt_index *idx, uint32_t s, uint32_t after)
{
	struct entry *e = &idx->ents[s];
	uint32_t next = after == TT_NO_SLOT ? idx->head : idx->ents[after].next;

	e->prev = after;
	e->next = next;
	if (after == TT_NO_SLOT) {
		idx->head = s;
	} else {
		idx->ents[after].next = s;
	}
	if (next == TT_NO_SLOT) {
		idx->tail = s;
	} else {
		idx->ents[next].prev = s;
	}
}

/* ---- insert, remove ---- */

int
tt_index_insert(struct tt_index *idx, const uint8_t *key, uint32_t slot, uint32_t parent,
                uint32_t nr_blocks)
{
	uint32_t hash, b;
	struct entry *e;

	if (key == NULL || slot >= idx->nr_slots || nr_blocks == 0) {
		return -EINVAL;
	}
	if (in_use(idx, slot) || idx->ents[slot].killed) {
		return -EBUSY;
	}
	if (parent != TT_NO_SLOT && !in_use(idx, parent)) {
		return -ENOENT;
	}
	hash = key_hash(idx, key);
	b = probe(idx, key, hash);
	if (idx->table[b] != 0) {
		return -EEXIST;
	}
	e = &idx->ents[slot];
	memset(e, 0, sizeof(*e));
	e->hash = hash;
	e->parent = parent;
	e->nr_blocks = nr_blocks;
	memcpy(idx->keys + (uint64_t)slot * idx->key_bytes, key, idx->key_bytes);
	idx->table[b] = slot + 1;
	if (parent != TT_NO_SLOT) {
		idx->ents[parent].nr_children++;
	}
	/* Behind the parent keeps "parent more recent than child" without walking the chain. */
	lru_link_after(idx, slot, parent);
	idx->count++;
	return 0;
}

/* Backward-shift deletion: pull later entries of the probe run into the hole at \p b. */
static void
table_delete(struct tt_index *idx, uint32_t b)
{
	uint32_t hole = b, j = b;

	for (;;) {
		uint32_t v, home;

		idx->table[hole] = 0;
		for (;;) {
			j = (j + 1) & idx->table_mask;
			v = idx->table[j];
			if (v == 0) {
				return;
			}
			home = idx->ents[v - 1].hash & idx->table_mask;
			/* Entry j may move into the hole only if its home is not in (hole, j]. */
			if (hole <= j ? (home <= hole || home > j) : (home <= hole && home > j)) {
				break;
			}
		}
		idx->table[hole] = v;
		hole = j;
	}
}

int
tt_index_remove(struct tt_index *idx, uint32_t slot)
{
	struct entry *e;
	const uint8_t *key;

	if (!in_use(idx, slot)) {
		return -ENOENT;
	}
	e = &idx->ents[slot];
	if (e->nr_children != 0) {
		return -ENOTEMPTY;
	}
	if (e->pins != 0) {
		return -EBUSY;
	}
	key = idx->keys + (uint64_t)slot * idx->key_bytes;
	table_delete(idx, probe(idx, key, e->hash));
	lru_unlink(idx, slot);
	if (e->parent != TT_NO_SLOT) {
		idx->ents[e->parent].nr_children--;
	}
	memset(e, 0, sizeof(*e));
	idx->count--;
	return 0;
}

/* ---- recency, eviction, pins ---- */

void
tt_index_touch_chain(struct tt_index *idx, uint32_t slot)
{
	/* Deepest first: each ancestor moved to the head lands in front of its descendants. */
	for (uint32_t s = slot; s != TT_NO_SLOT && in_use(idx, s); s = idx->ents[s].parent) {
		lru_unlink(idx, s);
		lru_link_after(idx, s, TT_NO_SLOT);
	}
}

int
tt_index_adopt(struct tt_index *idx, uint32_t slot, uint32_t parent)
{
	if (!in_use(idx, slot) || !in_use(idx, parent)) {
		return -ENOENT;
	}
	if (idx->ents[slot].parent != TT_NO_SLOT) {
		return -EBUSY;
	}
	/* Keys come from callers: refuse what would close a cycle (a chain is a tree). */
	for (uint32_t s = parent; s != TT_NO_SLOT; s = idx->ents[s].parent) {
		if (s == slot) {
			return -ELOOP;
		}
	}
	idx->ents[slot].parent = parent;
	idx->ents[parent].nr_children++;
	/* The parent must be more recent than its child: touched together, as a use. */
	tt_index_touch_chain(idx, slot);
	return 0;
}

uint32_t
tt_index_victim(const struct tt_index *idx)
{
	for (uint32_t s = idx->tail; s != TT_NO_SLOT; s = idx->ents[s].prev) {
		const struct entry *e = &idx->ents[s];

		if (e->pins == 0 && e->nr_children == 0) {
			return s;
		}
	}
	return TT_NO_SLOT;
}

void
tt_index_pin(struct tt_index *idx, uint32_t slot)
{
	if (in_use(idx, slot)) {
		idx->ents[slot].pins++;
	}
}

bool
tt_index_unpin(struct tt_index *idx, uint32_t slot)
{
	struct entry *e;

	if (slot >= idx->nr_slots || idx->ents[slot].pins == 0) {
		return false;
	}
	e = &idx->ents[slot];
	e->pins--;
	if (e->killed && e->pins == 0) {
		memset(e, 0, sizeof(*e));
		return true;
	}
	return false;
}

int
tt_index_kill(struct tt_index *idx, uint32_t slot)
{
	struct entry *e;
	const uint8_t *key;

	if (!in_use(idx, slot)) {
		return -ENOENT;
	}
	e = &idx->ents[slot];
	/* Children are found by scanning: corruption is rare, and entries keep no child lists. */
	for (uint32_t s = 0; e->nr_children > 0 && s < idx->nr_slots; s++) {
		if (in_use(idx, s) && idx->ents[s].parent == slot) {
			idx->ents[s].parent = TT_NO_SLOT;
			e->nr_children--;
		}
	}
	key = idx->keys + (uint64_t)slot * idx->key_bytes;
	table_delete(idx, probe(idx, key, e->hash));
	lru_unlink(idx, slot);
	if (e->parent != TT_NO_SLOT) {
		idx->ents[e->parent].nr_children--;
	}
	idx->count--;
	if (e->pins > 0) {
		e->killed = true;
		e->parent = TT_NO_SLOT;
		return false;
	}
	memset(e, 0, sizeof(*e));
	return true;
}

uint32_t
tt_index_nr_blocks(const struct tt_index *idx, uint32_t slot)
{
	return in_use(idx, slot) ? idx->ents[slot].nr_blocks : 0;
}

uint32_t
tt_index_parent(const struct tt_index *idx, uint32_t slot)
{
	return in_use(idx, slot) ? idx->ents[slot].parent : TT_NO_SLOT;
}

uint32_t
tt_index_count(const struct tt_index *idx)
{
	return idx->count;
}

const uint8_t *
tt_index_key(const struct tt_index *idx, uint32_t slot)
{
	return in_use(idx, slot) ? idx->keys + (uint64_t)slot * idx->key_bytes : NULL;
}
