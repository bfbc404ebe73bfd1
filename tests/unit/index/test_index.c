/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/index/index.c: insert/find/remove and their errors, chain-aware LRU eviction
 * (victims are leaves, chains go tail first, LRU among chains, pins respected), hash deletion
 * with backward shift under colliding buckets, and a randomized test against a reference model.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <xxhash.h>

#include "index/index.h"
#include "t_util.h"

#define KB 16u /* key bytes */

struct fixture {
	struct tt_index *idx;
	uint32_t nr_slots;
};

/* A key made from a number, so tests can name keys. */
static const uint8_t *
key(uint32_t n)
{
	static uint8_t k[8][KB];
	static int next;
	uint8_t *p = k[next++ % 8];

	memset(p, 0, KB);
	memcpy(p, &n, sizeof(n));
	p[KB - 1] = 0x5a;
	return p;
}

static int
setup16(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || tt_index_create(16, KB, &f->idx) != 0) {
		free(f);
		return -1;
	}
	f->nr_slots = 16;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	tt_index_destroy(f->idx);
	free(f);
	return 0;
}

/* Insert a chain of keys base..base+n-1 into slots s0..s0+n-1; returns the last slot. */
static uint32_t
insert_chain(struct tt_index *idx, uint32_t base, uint32_t s0, uint32_t n, uint32_t parent)
{
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(tt_index_insert(idx, key(base + i), s0 + i, parent, 4), 0);
		parent = s0 + i;
	}
	return parent;
}

/* Evict: take the victim, remove it, return it. */
static uint32_t
evict(struct tt_index *idx)
{
	uint32_t v = tt_index_victim(idx);

	assert_int_not_equal(v, TT_NO_SLOT);
	assert_int_equal(tt_index_remove(idx, v), 0);
	return v;
}

/* ---- create ---- */

static void
test_index_create_rejects_invalid_sizes(void **state)
{
	struct tt_index *idx = (struct tt_index *)(uintptr_t)1;

	assert_int_equal(tt_index_create(0, KB, &idx), -EINVAL);
	assert_int_equal(tt_index_create(TT_NO_SLOT, KB, &idx), -EINVAL);
	assert_int_equal(tt_index_create(4, 0, &idx), -EINVAL);
	assert_int_equal(tt_index_create(4, KB, NULL), -EINVAL);
	assert_int_equal(tt_index_create(1, 64, &idx), 0);
	assert_int_equal(tt_index_count(idx), 0);
	assert_int_equal(tt_index_victim(idx), TT_NO_SLOT);
	tt_index_destroy(idx);
	tt_index_destroy(NULL);
}

/* ---- insert, find, remove ---- */

static void
test_index_insert_then_find_returns_slot(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(tt_index_find(f->idx, key(1)), TT_NO_SLOT);
	assert_int_equal(tt_index_insert(f->idx, key(1), 5, TT_NO_SLOT, 4), 0);
	assert_int_equal(tt_index_insert(f->idx, key(2), 9, 5, 3), 0);
	assert_int_equal(tt_index_find(f->idx, key(1)), 5);
	assert_int_equal(tt_index_find(f->idx, key(2)), 9);
	assert_int_equal(tt_index_find(f->idx, key(3)), TT_NO_SLOT);
	assert_int_equal(tt_index_count(f->idx), 2);
	assert_int_equal(tt_index_parent(f->idx, 5), TT_NO_SLOT);
	assert_int_equal(tt_index_parent(f->idx, 9), 5);
	assert_int_equal(tt_index_nr_blocks(f->idx, 5), 4);
	assert_int_equal(tt_index_nr_blocks(f->idx, 9), 3);
	assert_int_equal(tt_index_nr_blocks(f->idx, 0), 0);
	assert_memory_equal(tt_index_key(f->idx, 9), key(2), KB);
	assert_null(tt_index_key(f->idx, 0));
}

static void
test_index_insert_duplicate_key_returns_eexist(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(tt_index_insert(f->idx, key(1), 0, TT_NO_SLOT, 4), 0);
	assert_int_equal(tt_index_insert(f->idx, key(1), 1, TT_NO_SLOT, 4), -EEXIST);
	assert_int_equal(tt_index_insert(f->idx, key(1), 2, 0, 4), -EEXIST);
	/* Nothing changed: the failed slots are still free, the key still maps to slot 0. */
	assert_int_equal(tt_index_count(f->idx), 1);
	assert_int_equal(tt_index_nr_blocks(f->idx, 1), 0);
	assert_int_equal(tt_index_find(f->idx, key(1)), 0);
	assert_int_equal(tt_index_remove(f->idx, 0), 0); /* no phantom child of slot 0 */
}

static void
test_index_insert_into_used_slot_returns_ebusy(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(tt_index_insert(f->idx, key(1), 3, TT_NO_SLOT, 4), 0);
	assert_int_equal(tt_index_insert(f->idx, key(2), 3, TT_NO_SLOT, 4), -EBUSY);
	assert_int_equal(tt_index_find(f->idx, key(2)), TT_NO_SLOT);
	assert_int_equal(tt_index_find(f->idx, key(1)), 3);
	assert_int_equal(tt_index_count(f->idx), 1);
}

static void
test_index_insert_with_missing_parent_returns_enoent(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(tt_index_insert(f->idx, key(2), 3, 7, 4), -ENOENT);
	assert_int_equal(tt_index_insert(f->idx, key(2), 3, 1000, 4), -ENOENT);
	assert_int_equal(tt_index_find(f->idx, key(2)), TT_NO_SLOT);
	assert_int_equal(tt_index_count(f->idx), 0);
	/* A removed parent is missing too. */
	assert_int_equal(tt_index_insert(f->idx, key(1), 7, TT_NO_SLOT, 4), 0);
	assert_int_equal(tt_index_remove(f->idx, 7), 0);
	assert_int_equal(tt_index_insert(f->idx, key(2), 3, 7, 4), -ENOENT);
}

static void
test_index_insert_invalid_arguments_return_einval(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(tt_index_insert(f->idx, NULL, 0, TT_NO_SLOT, 4), -EINVAL);
	assert_int_equal(tt_index_insert(f->idx, key(1), 16, TT_NO_SLOT, 4), -EINVAL);
	assert_int_equal(tt_index_insert(f->idx, key(1), TT_NO_SLOT, TT_NO_SLOT, 4), -EINVAL);
	assert_int_equal(tt_index_insert(f->idx, key(1), 0, TT_NO_SLOT, 0), -EINVAL);
	assert_int_equal(tt_index_count(f->idx), 0);
}

static void
test_index_remove_errors_and_success(void **state)
{
	struct fixture *f = *state;

	insert_chain(f->idx, 100, 0, 3, TT_NO_SLOT);
	assert_int_equal(tt_index_remove(f->idx, 5), -ENOENT);
	assert_int_equal(tt_index_remove(f->idx, 16), -ENOENT);
	assert_int_equal(tt_index_remove(f->idx, TT_NO_SLOT), -ENOENT);
	assert_int_equal(tt_index_remove(f->idx, 0), -ENOTEMPTY);
	assert_int_equal(tt_index_remove(f->idx, 1), -ENOTEMPTY);
	tt_index_pin(f->idx, 2);
	tt_index_pin(f->idx, 2);
	assert_int_equal(tt_index_remove(f->idx, 2), -EBUSY);
	tt_index_unpin(f->idx, 2);
	assert_int_equal(tt_index_remove(f->idx, 2), -EBUSY); /* pins count */
	tt_index_unpin(f->idx, 2);
	assert_int_equal(tt_index_remove(f->idx, 2), 0);
	assert_int_equal(tt_index_find(f->idx, key(102)), TT_NO_SLOT);
	assert_int_equal(tt_index_remove(f->idx, 2), -ENOENT);
	/* The parent lost its only child and can go now. */
	assert_int_equal(tt_index_remove(f->idx, 1), 0);
	assert_int_equal(tt_index_remove(f->idx, 0), 0);
	assert_int_equal(tt_index_count(f->idx), 0);
	assert_int_equal(tt_index_victim(f->idx), TT_NO_SLOT);
	/* Slots and keys are reusable, in other combinations. */
	assert_int_equal(tt_index_insert(f->idx, key(102), 0, TT_NO_SLOT, 1), 0);
	assert_int_equal(tt_index_find(f->idx, key(102)), 0);
}

static void
test_index_unpinned_slot_stays_removable_after_extra_unpin(void **state)
{
	struct fixture *f = *state;

	insert_chain(f->idx, 1, 4, 1, TT_NO_SLOT);
	tt_index_unpin(f->idx, 4); /* unbalanced: must not underflow into a pin */
	tt_index_pin(f->idx, 9);   /* not indexed: ignored */
	assert_int_equal(tt_index_victim(f->idx), 4);
	assert_int_equal(tt_index_remove(f->idx, 4), 0);
	assert_int_equal(tt_index_insert(f->idx, key(2), 9, TT_NO_SLOT, 1), 0);
	assert_int_equal(tt_index_remove(f->idx, 9), 0); /* the stray pin did not stick */
}

/* ---- eviction ---- */

static void
test_index_victim_is_a_leaf_and_chains_go_tail_first(void **state)
{
	struct fixture *f = *state;

	insert_chain(f->idx, 10, 0, 4, TT_NO_SLOT);
	assert_int_equal(evict(f->idx), 3);
	assert_int_equal(evict(f->idx), 2);
	assert_int_equal(evict(f->idx), 1);
	assert_int_equal(evict(f->idx), 0);
	assert_int_equal(tt_index_victim(f->idx), TT_NO_SLOT);
}

static void
test_index_shared_prefix_evicts_branches_before_the_root(void **state)
{
	struct fixture *f = *state;
	uint32_t first, second;

	/* root 0 with branches 0-1-2 and 0-3-4 */
	insert_chain(f->idx, 10, 0, 3, TT_NO_SLOT);
	insert_chain(f->idx, 20, 3, 2, 0);
	first = evict(f->idx);
	second = evict(f->idx);
	assert_true((first == 2 && second == 1) || (first == 4 && second == 3));
	assert_int_equal(tt_index_remove(f->idx, 0), -ENOTEMPTY);
	first = evict(f->idx);
	second = evict(f->idx);
	assert_true((first == 2 && second == 1) || (first == 4 && second == 3));
	assert_int_equal(evict(f->idx), 0);
}

static void
test_index_least_recent_chain_is_evicted_first(void **state)
{
	struct fixture *f = *state;

	insert_chain(f->idx, 10, 0, 3, TT_NO_SLOT); /* A: slots 0-1-2, older */
	insert_chain(f->idx, 20, 3, 3, TT_NO_SLOT); /* B: slots 3-4-5, newer */
	assert_int_equal(tt_index_victim(f->idx), 2);
	/* Touching A's tail makes all of A more recent than B. */
	tt_index_touch_chain(f->idx, 2);
	assert_int_equal(evict(f->idx), 5);
	assert_int_equal(evict(f->idx), 4);
	assert_int_equal(evict(f->idx), 3);
	assert_int_equal(evict(f->idx), 2);
}

static void
test_index_touch_chain_refreshes_ancestors_only(void **state)
{
	struct fixture *f = *state;

	insert_chain(f->idx, 10, 0, 4, TT_NO_SLOT); /* A: 0-1-2-3 */
	insert_chain(f->idx, 20, 4, 2, TT_NO_SLOT); /* B: 4-5 */
	/* A hit on A's first two chunks: 0 and 1 are recent, 2 and 3 were last used before B. */
	tt_index_touch_chain(f->idx, 1);
	assert_int_equal(evict(f->idx), 3);
	assert_int_equal(evict(f->idx), 2);
	assert_int_equal(evict(f->idx), 5);
	assert_int_equal(evict(f->idx), 4);
	assert_int_equal(evict(f->idx), 1);
	assert_int_equal(evict(f->idx), 0);
}

static void
test_index_touch_of_unindexed_slot_changes_nothing(void **state)
{
	struct fixture *f = *state;

	insert_chain(f->idx, 10, 0, 2, TT_NO_SLOT);
	insert_chain(f->idx, 20, 2, 2, TT_NO_SLOT);
	tt_index_touch_chain(f->idx, 9);
	tt_index_touch_chain(f->idx, TT_NO_SLOT);
	assert_int_equal(evict(f->idx), 1);
	assert_int_equal(tt_index_count(f->idx), 3);
}

static void
test_index_victim_skips_pinned_chunks(void **state)
{
	struct fixture *f = *state;

	insert_chain(f->idx, 10, 0, 3, TT_NO_SLOT); /* A: 0-1-2, least recent */
	insert_chain(f->idx, 20, 3, 2, TT_NO_SLOT); /* B: 3-4 */
	tt_index_pin(f->idx, 2);
	/* A's tail is pinned and its other chunks are parents: B goes first. */
	assert_int_equal(evict(f->idx), 4);
	assert_int_equal(evict(f->idx), 3);
	assert_int_equal(tt_index_victim(f->idx), TT_NO_SLOT);
	tt_index_unpin(f->idx, 2);
	assert_int_equal(evict(f->idx), 2);
	/* A pinned parent is kept while its children go. */
	tt_index_pin(f->idx, 0);
	assert_int_equal(evict(f->idx), 1);
	assert_int_equal(tt_index_victim(f->idx), TT_NO_SLOT);
}

/* ---- hash table under collisions ---- */

/* A key whose home bucket in a 16-bucket table (an index of up to 8 slots) is \p bucket. */
static void
key_in_bucket(struct t_rng *r, uint32_t bucket, uint8_t *out)
{
	do {
		t_rng_fill(r, out, KB);
	} while ((XXH3_64bits(out, KB) & 15) != bucket);
}

static void
test_index_backward_shift_keeps_colliding_keys_findable(void **state)
{
	const uint32_t homes[8] = {15, 15, 15, 0, 15, 1, 14, 0}; /* runs that wrap the table */
	uint8_t keys[8][KB];
	struct t_rng r;

	t_rng_init(&r, t_seed(21));
	for (int i = 0; i < 8; i++) {
		key_in_bucket(&r, homes[i], keys[i]);
	}
	for (int trial = 0; trial < 400; trial++) {
		struct tt_index *idx;
		uint32_t order[8], slot_of[8];
		bool present[8];

		assert_int_equal(tt_index_create(8, KB, &idx), 0);
		for (uint32_t i = 0; i < 8; i++) {
			order[i] = i;
		}
		t_shuffle(&r, order, 8);
		for (uint32_t i = 0; i < 8; i++) {
			slot_of[order[i]] = i;
			present[order[i]] = true;
			assert_int_equal(tt_index_insert(idx, keys[order[i]], i, TT_NO_SLOT, 1), 0);
		}
		/* Remove in another random order, re-inserting some, checking every key each time.
		 */
		t_shuffle(&r, order, 8);
		for (uint32_t i = 0; i < 8; i++) {
			uint32_t k = order[i];

			assert_int_equal(tt_index_remove(idx, slot_of[k]), 0);
			present[k] = false;
			if (t_rng_below(&r, 3) == 0) {
				assert_int_equal(
				    tt_index_insert(idx, keys[k], slot_of[k], TT_NO_SLOT, 1), 0);
				present[k] = true;
			}
			for (uint32_t j = 0; j < 8; j++) {
				assert_int_equal(tt_index_find(idx, keys[j]),
				                 present[j] ? slot_of[j] : TT_NO_SLOT);
			}
		}
		tt_index_destroy(idx);
	}
}

/* ---- randomized test against a reference model ---- */

struct ref {
	bool used;
	uint8_t key[KB];
	uint32_t parent, children, pins, nr_blocks;
};

struct model {
	struct tt_index *idx;
	uint32_t nr_slots, count;
	struct ref *ents;
	uint8_t gone[32][KB]; /* recently removed keys */
	uint32_t nr_gone;
	struct t_rng r;
};

static uint32_t
random_used(struct model *m)
{
	uint32_t start = t_rng_below(&m->r, m->nr_slots);

	for (uint32_t i = 0; i < m->nr_slots; i++) {
		uint32_t s = (start + i) % m->nr_slots;

		if (m->ents[s].used) {
			return s;
		}
	}
	return TT_NO_SLOT;
}

static uint32_t
random_free(struct model *m)
{
	uint32_t start = t_rng_below(&m->r, m->nr_slots);

	for (uint32_t i = 0; i < m->nr_slots; i++) {
		uint32_t s = (start + i) % m->nr_slots;

		if (!m->ents[s].used) {
			return s;
		}
	}
	return TT_NO_SLOT;
}

static void
model_removed(struct model *m, uint32_t s)
{
	struct ref *e = &m->ents[s];

	if (e->parent != TT_NO_SLOT) {
		m->ents[e->parent].children--;
	}
	memcpy(m->gone[m->nr_gone++ % 32], e->key, KB);
	memset(e, 0, sizeof(*e));
	m->count--;
}

static void
model_check(struct model *m)
{
	uint32_t v = tt_index_victim(m->idx);
	bool any_evictable = false;

	assert_int_equal(tt_index_count(m->idx), m->count);
	for (uint32_t s = 0; s < m->nr_slots; s++) {
		const struct ref *e = &m->ents[s];

		if (!e->used) {
			assert_int_equal(tt_index_nr_blocks(m->idx, s), 0);
			assert_null(tt_index_key(m->idx, s));
			continue;
		}
		assert_int_equal(tt_index_find(m->idx, e->key), s);
		assert_memory_equal(tt_index_key(m->idx, s), e->key, KB);
		assert_int_equal(tt_index_nr_blocks(m->idx, s), e->nr_blocks);
		assert_int_equal(tt_index_parent(m->idx, s), e->parent);
		/* Every indexed chunk's parent is indexed. */
		if (e->parent != TT_NO_SLOT) {
			assert_true(m->ents[e->parent].used);
		}
		any_evictable |= e->children == 0 && e->pins == 0;
	}
	for (uint32_t i = 0; i < m->nr_gone && i < 32; i++) {
		assert_int_equal(tt_index_find(m->idx, m->gone[i]), TT_NO_SLOT);
	}
	/* The victim is an unpinned leaf, and there is one whenever one exists. */
	if (v == TT_NO_SLOT) {
		assert_false(any_evictable);
	} else {
		assert_true(v < m->nr_slots);
		assert_true(m->ents[v].used);
		assert_int_equal(m->ents[v].children, 0);
		assert_int_equal(m->ents[v].pins, 0);
	}
}

static void
step_insert(struct model *m)
{
	uint32_t slot = random_free(m), parent = TT_NO_SLOT;
	struct ref *e;

	if (slot == TT_NO_SLOT) {
		uint32_t v = tt_index_victim(m->idx);

		if (v == TT_NO_SLOT) {
			return;
		}
		assert_int_equal(tt_index_remove(m->idx, v), 0);
		model_removed(m, v);
		slot = v;
	}
	/* Mostly extend an existing chain (building shared prefixes), sometimes start one. */
	if (t_rng_below(&m->r, 4) != 0) {
		parent = random_used(m);
	}
	e = &m->ents[slot];
	t_rng_fill(&m->r, e->key, KB);
	e->parent = parent;
	e->nr_blocks = 1 + t_rng_below(&m->r, 16);
	assert_int_equal(tt_index_insert(m->idx, e->key, slot, parent, e->nr_blocks), 0);
	e->used = true;
	if (parent != TT_NO_SLOT) {
		m->ents[parent].children++;
	}
	m->count++;
}

static void
step_bad_insert(struct model *m)
{
	uint32_t used = random_used(m), free_slot = random_free(m);

	if (used == TT_NO_SLOT || free_slot == TT_NO_SLOT) {
		return;
	}
	assert_int_equal(tt_index_insert(m->idx, m->ents[used].key, free_slot, TT_NO_SLOT, 1),
	                 -EEXIST);
	assert_int_equal(tt_index_insert(m->idx, m->gone[0], used, TT_NO_SLOT, 1), -EBUSY);
	assert_int_equal(tt_index_insert(m->idx, m->gone[0], free_slot, free_slot, 1), -ENOENT);
}

static void
step_remove(struct model *m)
{
	uint32_t s = random_used(m);
	int want;

	if (s == TT_NO_SLOT) {
		return;
	}
	want = m->ents[s].children ? -ENOTEMPTY : m->ents[s].pins ? -EBUSY : 0;
	assert_int_equal(tt_index_remove(m->idx, s), want);
	if (want == 0) {
		model_removed(m, s);
	}
}

static void
step_evict(struct model *m)
{
	uint32_t v = tt_index_victim(m->idx);

	if (v != TT_NO_SLOT) {
		assert_int_equal(tt_index_remove(m->idx, v), 0);
		model_removed(m, v);
	}
}

static void
step_pin(struct model *m, bool pin)
{
	uint32_t s = random_used(m);

	if (s == TT_NO_SLOT || (!pin && m->ents[s].pins == 0)) {
		return;
	}
	if (pin) {
		tt_index_pin(m->idx, s);
		m->ents[s].pins++;
	} else {
		tt_index_unpin(m->idx, s);
		m->ents[s].pins--;
	}
}

static void
run_model(uint32_t nr_slots, uint32_t steps, uint64_t seed)
{
	struct model m = {.nr_slots = nr_slots};

	t_rng_init(&m.r, seed);
	m.ents = calloc(nr_slots, sizeof(*m.ents));
	assert_non_null(m.ents);
	assert_int_equal(tt_index_create(nr_slots, KB, &m.idx), 0);
	for (uint32_t i = 0; i < 32; i++) {
		t_rng_fill(&m.r, m.gone[i], KB); /* never inserted: must never be found */
	}
	for (uint32_t i = 0; i < steps; i++) {
		uint32_t op = t_rng_below(&m.r, 100);

		if (op < 40) {
			step_insert(&m);
		} else if (op < 55) {
			uint32_t s = random_used(&m);

			if (s != TT_NO_SLOT) {
				tt_index_touch_chain(m.idx, s);
			}
		} else if (op < 70) {
			step_evict(&m);
		} else if (op < 78) {
			step_remove(&m);
		} else if (op < 86) {
			step_pin(&m, true);
		} else if (op < 96) {
			step_pin(&m, false);
		} else {
			step_bad_insert(&m);
		}
		model_check(&m);
	}
	tt_index_destroy(m.idx);
	free(m.ents);
}

static void
test_index_random_operations_keep_invariants_small_index(void **state)
{
	run_model(8, 6000, t_seed(31));
}

static void
test_index_random_operations_keep_invariants_large_index(void **state)
{
	run_model(200, 4000, t_seed(32));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_index_create_rejects_invalid_sizes),
	    cmocka_unit_test_setup_teardown(test_index_insert_then_find_returns_slot, setup16,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_index_insert_duplicate_key_returns_eexist, setup16,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_index_insert_into_used_slot_returns_ebusy, setup16,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_index_insert_with_missing_parent_returns_enoent,
	                                    setup16, teardown),
	    cmocka_unit_test_setup_teardown(test_index_insert_invalid_arguments_return_einval,
	                                    setup16, teardown),
	    cmocka_unit_test_setup_teardown(test_index_remove_errors_and_success, setup16,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(
	        test_index_unpinned_slot_stays_removable_after_extra_unpin, setup16, teardown),
	    cmocka_unit_test_setup_teardown(test_index_victim_is_a_leaf_and_chains_go_tail_first,
	                                    setup16, teardown),
	    cmocka_unit_test_setup_teardown(
	        test_index_shared_prefix_evicts_branches_before_the_root, setup16, teardown),
	    cmocka_unit_test_setup_teardown(test_index_least_recent_chain_is_evicted_first, setup16,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_index_touch_chain_refreshes_ancestors_only,
	                                    setup16, teardown),
	    cmocka_unit_test_setup_teardown(test_index_touch_of_unindexed_slot_changes_nothing,
	                                    setup16, teardown),
	    cmocka_unit_test_setup_teardown(test_index_victim_skips_pinned_chunks, setup16,
	                                    teardown),
	    cmocka_unit_test(test_index_backward_shift_keeps_colliding_keys_findable),
	    cmocka_unit_test(test_index_random_operations_keep_invariants_small_index),
	    cmocka_unit_test(test_index_random_operations_keep_invariants_large_index),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
