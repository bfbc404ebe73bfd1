/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The index maps chunk keys to slots and decides what to evict.
 *
 * Every indexed chunk lives in one slot, so entries are addressed by slot id. Each entry knows
 * its parent (the previous chunk of its key chain) and how many indexed children it has. Not
 * thread-safe: the store serialises calls.
 */
#ifndef TT_INDEX_H
#define TT_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#define TT_NO_SLOT UINT32_MAX

struct tt_index;

/* An index for slots [0, nr_slots) and keys of key_bytes bytes. Returns 0, -EINVAL or -ENOMEM. */
int tt_index_create(uint32_t nr_slots, uint32_t key_bytes, struct tt_index **out);
void tt_index_destroy(struct tt_index *idx);

/* The slot holding \p key, or TT_NO_SLOT. */
uint32_t tt_index_find(const struct tt_index *idx, const uint8_t *key);

/*
 * Index \p key in \p slot with \p nr_blocks paged blocks (>= 1), as a child of \p parent (an
 * indexed slot, or TT_NO_SLOT for a chain's root). Returns 0, -EEXIST (key already indexed),
 * -EBUSY (slot already in use), -ENOENT (parent not indexed) or -EINVAL.
 */
int tt_index_insert(struct tt_index *idx, const uint8_t *key, uint32_t slot, uint32_t parent,
                    uint32_t nr_blocks);

/* Remove the leaf chunk in \p slot. Returns 0, -ENOENT (not indexed), -ENOTEMPTY (it has
 * children) or -EBUSY (pinned). */
int tt_index_remove(struct tt_index *idx, uint32_t slot);

/*
 * Make the root chunk in \p slot a child of the chunk in \p parent: a chunk whose parent was
 * removed (damaged, or missing at recovery) is detached as a root, and joins its chain again
 * once the parent is stored anew. Both become most recently used. Returns 0, -ENOENT (either
 * not indexed), -EBUSY (\p slot has a parent) or -ELOOP (\p parent descends from \p slot).
 */
int tt_index_adopt(struct tt_index *idx, uint32_t slot, uint32_t parent);

/* Mark \p slot and all its ancestors most recently used. */
void tt_index_touch_chain(struct tt_index *idx, uint32_t slot);

/* The least recently used chunk that may be evicted (a leaf that is not pinned), or TT_NO_SLOT. */
uint32_t tt_index_victim(const struct tt_index *idx);

/* Pins keep a chunk from eviction while its slot is read or its child is being written. */
void tt_index_pin(struct tt_index *idx, uint32_t slot);
/* Drop a pin. Returns true when that released a killed chunk: its slot is free to reuse now. */
bool tt_index_unpin(struct tt_index *idx, uint32_t slot);

/*
 * Remove the chunk in \p slot at once, whatever its pins and children (a damaged chunk). Its
 * children are detached and become roots: their keys still name valid content, reachable again
 * once the chunk is stored anew. Returns true when the slot is free to reuse now; false when
 * pins remain, in which case the last tt_index_unpin returns true. -ENOENT if not indexed.
 */
int tt_index_kill(struct tt_index *idx, uint32_t slot);

uint32_t tt_index_nr_blocks(const struct tt_index *idx, uint32_t slot);
uint32_t tt_index_parent(const struct tt_index *idx, uint32_t slot);
uint32_t tt_index_count(const struct tt_index *idx);

/* The key stored for an indexed slot (key_bytes bytes, owned by the index). */
const uint8_t *tt_index_key(const struct tt_index *idx, uint32_t slot);

#endif /* TT_INDEX_H */
