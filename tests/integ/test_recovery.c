/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: what a store keeps across close and reopen, for both engines and both the direct
 * and the staged I/O path: saved chains (shared prefixes, partial last chunks) come back
 * bit-exact in both durability modes; recovery drops damaged and foreign slot headers and the
 * orphans they leave, frees zeroed ones, keeps one copy of a key written twice and restores the
 * LRU order; TUTTI_OPEN_REPAIR erases what it dropped; a save killed before its headers loses no
 * committed chunk.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "t_chain.h"
#include "t_disk.h"
#include "t_kv.h"
#include "t_util.h"
#include "tutti/tutti.h"

/* ---- persistence ---- */

static void
test_durable_saved_chains_come_back_bit_exact_after_reopen(void **state)
{
	struct t_chain_fixture *f = *state;
	const enum t_layout layouts[2] = {T_CHAIN_DIRECT, T_CHAIN_STAGED};

	for (uint32_t mode = 0; mode < 2; mode++) {
		for (uint32_t li = 0; li < 2; li++) {
			struct t_how h = {.durability = mode};
			char name[32];
			struct t_store_case tc;
			struct t_chain c[5];
			struct tutti_store *st;
			struct tutti_stats s;

			snprintf(name, sizeof(name), "persist.%u.%u", mode, li);
			tc = t_chain_case_new(f, name, layouts[li], layouts[1 - li]);
			f->next_src = 0;
			t_make_chain(f, &c[0], 3, 3 * T_CHAIN_BPC, NULL, 0);
			t_make_chain(f, &c[1], 4, 3 * T_CHAIN_BPC + 2, &c[0],
			             2);                       /* partial last chunk */
			t_make_chain(f, &c[2], 1, 3, NULL, 0); /* one partial chunk */
			t_make_chain(f, &c[3], 2, 2 * T_CHAIN_BPC, &c[0], 1);
			t_make_chain(f, &c[4], 2, T_CHAIN_BPC + 1, NULL, 0);

			st = t_open_ok(f, &f->geo, tc.dir, 64, &h);
			t_save_chain(st, tc.src, &c[0], 0);
			s = t_store_stats(st);
			/* Durable mode flushes before and after the headers of each call, each
			 * data file the call wrote: its 3 chunks went to 3 files of the
			 * directory. */
			assert_int_equal(s.flushes, mode == TUTTI_DURABILITY_DURABLE ? 2 * 3 : 0);
			t_save_chain(st, tc.src, &c[1], 2);
			t_save_chain(st, tc.src, &c[2], 0);
			t_save_chain(st, tc.src, &c[3], 1);
			s = t_store_stats(st);
			assert_int_equal(s.used_slots, 7);
			assert_true(mode == TUTTI_DURABILITY_DURABLE ? s.flushes > 0
			                                             : s.flushes == 0);
			tutti_store_close(st);

			/* First reopen: everything is back; a new chain must not land on old slots.
			 */
			st = t_open_ok(f, &f->geo, tc.dir, 64, &h);
			t_assert_recovery(st, 7, 0, 0, 0);
			t_assert_chains(f, st, tc.src, tc.dst, c, 4);
			assert_int_equal(tutti_store_lookup(st, c[4].keys, 2, NULL), 0);
			t_save_chain(st, tc.src, &c[4], 0);
			t_assert_chains(f, st, tc.src, tc.dst, c, 5);
			tutti_store_close(st);

			/* Second reopen. */
			st = t_open_ok(f, &f->geo, tc.dir, 64, &h);
			t_assert_recovery(st, 9, 0, 0, 0);
			t_assert_chains(f, st, tc.src, tc.dst, c, 5);
			tutti_store_close(st);
			t_store_case_free(&tc);
		}
	}
	assert_int_equal(f->rec.nr_err, 0);
}

/* ---- recovery drops ---- */

/* \p nr new chains of one whole chunk each, saved one after another. */
static void
save_new_chunks(struct t_chain_fixture *f, struct tutti_store *st, const struct t_kv *src,
                struct t_chain *n, uint32_t nr)
{
	for (uint32_t i = 0; i < nr; i++) {
		t_make_chain(f, &n[i], 1, T_CHAIN_BPC, NULL, 0);
		t_save_chain(st, src, &n[i], 0);
	}
}

/*
 * A store of three chains, X (3 chunks), Y (1) and W (2), in 6 slots: garbage over X[1]'s
 * header and one flipped bit inside Y[0]'s. Recovery drops both, and keeps X[2], whose parent
 * is gone, as an orphan.
 */
static void
damaged_store(struct t_chain_fixture *f, const struct t_store_case *tc, struct t_chain *c)
{
	struct tutti_store *st = t_open_ok(f, &f->geo, tc->dir, 6, NULL);
	const char *path = tc->path;
	uint8_t junk[TUTTI_SLOT_HEADER_BYTES];
	uint32_t slot, len = t_slot_hdr_len(f->geo.nr_layers);

	t_make_chain(f, &c[0], 3, 3 * T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &c[1], 1, T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &c[2], 2, 2 * T_CHAIN_BPC - 1, NULL, 0);
	for (int i = 0; i < 3; i++) {
		t_save_chain(st, tc->src, &c[i], 0);
	}
	tutti_store_close(st);
	t_rng_fill(&f->r, junk, sizeof(junk));
	slot = t_key_slot(path, &f->geo, t_key_of(&c[0], 1), T_CHAIN_KB);
	assert_int_equal(t_disk_write(path, t_slot_off(&f->geo, slot), junk, sizeof(junk)), 0);
	/* Past the magic, inside what the header's checksum covers. */
	slot = t_key_slot(path, &f->geo, t_key_of(&c[1], 0), T_CHAIN_KB);
	assert_int_equal(
	    t_disk_flip_bit(path, t_slot_off(&f->geo, slot) + 8 + t_rng_below(&f->r, len - 8),
	                    t_rng_below(&f->r, 8)),
	    0);
}

static void
test_durable_damaged_header_drops_its_chunk_and_keeps_the_children(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "dropped", T_CHAIN_STAGED, T_CHAIN_DIRECT);
	struct t_chain c[4];
	struct tutti_store *st;
	int32_t status[3];

	damaged_store(f, &tc, c);
	st = t_open_ok(f, &f->geo, tc.dir, 6, NULL);
	t_assert_recovery(st, 4, 2, 1, 0);
	assert_int_equal(tutti_store_lookup(st, c[0].keys, 3, NULL), 1);
	assert_int_equal(tutti_store_lookup(st, c[1].keys, 1, NULL), 0);
	t_assert_chain(f, st, tc.src, tc.dst, &c[2]);
	/* X[0] alone still loads. */
	c[3] = c[0];
	c[3].nr_keys = 1;
	c[3].nr_blocks = T_CHAIN_BPC;
	t_assert_chain(f, st, tc.src, tc.dst, &c[3]);
	/* Saving X again, as a server recomputing it does, writes X[1] alone: X[2] was kept
	 * and joins the chain again, which is whole. */
	assert_int_equal(t_save_keys(st, tc.src, &c[0], 3, status), 1);
	assert_int_equal(status[0], 1);
	assert_int_equal(status[1], 0);
	assert_int_equal(status[2], 1);
	assert_int_equal(tutti_store_lookup(st, c[0].keys, 3, NULL), 3);
	t_assert_chain(f, st, tc.src, tc.dst, &c[0]);
	/* Y[0]'s slot is free: one more chunk fits without eviction. */
	save_new_chunks(f, st, tc.src, &c[3], 1);
	assert_int_equal(t_store_stats(st).evictions, 0);
	assert_int_equal(t_store_stats(st).used_slots, 6);
	/* Eviction takes a tail: one chunk goes, and X and W still start at their roots. */
	save_new_chunks(f, st, tc.src, &c[1], 1);
	assert_int_equal(t_store_stats(st).evictions, 1);
	t_assert_chain(f, st, tc.src, tc.dst, &c[3]);
	assert_int_equal(tutti_store_lookup(st, c[0].keys, 3, NULL) +
	                     tutti_store_lookup(st, c[2].keys, 2, NULL),
	                 4);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

static void
test_durable_open_with_repair_erases_the_headers_it_drops(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "repair", T_CHAIN_STAGED, T_CHAIN_STAGED);
	const struct t_how repair = {.flags = TUTTI_OPEN_REPAIR};
	struct t_chain c[3];
	struct tutti_store *st;
	uint32_t nr, live = 0;
	uint8_t *hdrs;

	damaged_store(f, &tc, c);
	/* Without repair nothing is erased: the next open meets the same headers. */
	for (int i = 0; i < 2; i++) {
		st = t_open_ok(f, &f->geo, tc.dir, 6, NULL);
		t_assert_recovery(st, 4, 2, 1, 0);
		tutti_store_close(st);
	}
	st = t_open_ok(f, &f->geo, tc.dir, 6, &repair);
	t_assert_recovery(st, 4, 2, 1, 0);
	tutti_store_close(st);
	/* The two damaged headers are gone; X[2], valid, is still there, waiting for X[1]. */
	st = t_open_ok(f, &f->geo, tc.dir, 6, NULL);
	t_assert_recovery(st, 4, 0, 1, 0);
	t_assert_chain(f, st, tc.src, tc.dst, &c[2]);
	assert_int_equal(tutti_store_lookup(st, c[0].keys, 3, NULL), 1);
	tutti_store_close(st);
	/* On disk: exactly the four live chunks still carry a header; the rest are zero. */
	hdrs = t_read_headers(tc.path, &f->geo, &nr);
	assert_non_null(hdrs);
	assert_int_equal(nr, 6);
	for (uint32_t s = 0; s < nr; s++) {
		const uint8_t *h = hdrs + (size_t)s * TUTTI_SLOT_HEADER_BYTES;
		bool zero = true;

		for (uint32_t i = 0; i < TUTTI_SLOT_HEADER_BYTES && zero; i++) {
			zero = h[i] == 0;
		}
		live += t_hdr_committed(h);
		assert_true(zero || t_hdr_committed(h));
	}
	assert_int_equal(live, 4);
	free(hdrs);
	t_store_case_free(&tc);
}

static void
test_durable_zeroed_header_frees_its_slot_without_counting_a_drop(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "zeroed", T_CHAIN_DIRECT, T_CHAIN_STAGED);
	struct t_chain p, q, n[2];
	struct tutti_store *st = t_open_ok(f, &f->geo, tc.dir, 4, NULL);

	t_make_chain(f, &p, 2, 2 * T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &q, 2, 2 * T_CHAIN_BPC, NULL, 0);
	t_save_chain(st, tc.src, &p, 0);
	t_save_chain(st, tc.src, &q, 0);
	tutti_store_close(st);
	/* P's tail and Q's root: Q[1] is left without its parent. */
	assert_int_equal(t_disk_zero(tc.path,
	                             t_slot_off(&f->geo, t_key_slot(tc.path, &f->geo,
	                                                            t_key_of(&p, 1), T_CHAIN_KB)),
	                             TUTTI_SLOT_HEADER_BYTES),
	                 0);
	assert_int_equal(t_disk_zero(tc.path,
	                             t_slot_off(&f->geo, t_key_slot(tc.path, &f->geo,
	                                                            t_key_of(&q, 0), T_CHAIN_KB)),
	                             TUTTI_SLOT_HEADER_BYTES),
	                 0);
	st = t_open_ok(f, &f->geo, tc.dir, 4, NULL);
	/* Q[1] has lost its parent and is kept: a zeroed header is no damage, counts no drop. */
	t_assert_recovery(st, 2, 0, 1, 0);
	assert_int_equal(tutti_store_lookup(st, p.keys, 2, NULL), 1);
	assert_int_equal(tutti_store_lookup(st, q.keys, 2, NULL), 0);
	/* Two slots are free: two new chunks need no eviction. */
	save_new_chunks(f, st, tc.src, n, 2);
	assert_int_equal(t_store_stats(st).evictions, 0);
	t_assert_chains(f, st, tc.src, tc.dst, n, 2);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

/* Copy slot \p from of file \p a (header and objects) over slot \p to of file \p b. */
static void
copy_slot(const struct tutti_geometry *g, const char *a, uint32_t from, const char *b, uint32_t to)
{
	uint64_t bytes = tutti_geometry_slot_bytes(g);
	uint8_t *buf = malloc(bytes);

	assert_non_null(buf);
	assert_int_equal(t_disk_read(a, t_slot_off(g, from), buf, bytes), 0);
	assert_int_equal(t_disk_write(b, t_slot_off(g, to), buf, bytes), 0);
	free(buf);
}

static void
test_durable_slot_of_another_store_is_dropped(void **state)
{
	struct t_chain_fixture *f = *state;
	char *d1 = t_chain_dir(f, "one"), *d2 = t_chain_dir(f, "two");
	char *p1 = t_data_path(d1), *p2 = t_data_path(d2);
	struct t_kv *src = t_chain_kv(f, &f->geo, T_CHAIN_DIRECT, true);
	struct t_kv *dst = t_chain_kv(f, &f->geo, T_CHAIN_DIRECT, false);
	struct tutti_store *s1 = t_open_ok(f, &f->geo, d1, 8, NULL);
	struct tutti_store *s2 = t_open_ok(f, &f->geo, d2, 8, NULL);
	struct t_chain a, b;
	uint32_t from;

	/* Same geometry, namespace and key size; only the store ids differ. */
	t_make_chain(f, &a, 2, 2 * T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &b, 1, T_CHAIN_BPC, NULL, 0);
	t_save_chain(s1, src, &a, 0);
	t_save_chain(s2, src, &b, 0);
	tutti_store_close(s1);
	tutti_store_close(s2);
	from = t_key_slot(p2, &f->geo, t_key_of(&b, 0), T_CHAIN_KB);
	copy_slot(&f->geo, p2, from, p1, t_free_slot(p1, &f->geo));
	/* The control: the same copy inside its own store is a valid second copy. */
	copy_slot(&f->geo, p2, from, p2, t_free_slot(p2, &f->geo));

	s1 = t_open_ok(f, &f->geo, d1, 8, NULL);
	t_assert_recovery(s1, 2, 1, 0, 0);
	assert_int_equal(tutti_store_lookup(s1, b.keys, 1, NULL), 0);
	t_assert_chain(f, s1, src, dst, &a);
	tutti_store_close(s1);
	s2 = t_open_ok(f, &f->geo, d2, 8, NULL);
	t_assert_recovery(s2, 1, 0, 0, 1);
	t_assert_chain(f, s2, src, dst, &b);
	tutti_store_close(s2);
	t_kv_free(src);
	t_kv_free(dst);
	free(p1);
	free(p2);
	free(d1);
	free(d2);
}

/* Save [a b] and [a b c] in one call, as a serving engine batches two requests sharing a new
 * prefix: a and b are stored once. */
static void
save_shared_prefix_in_one_call(struct tutti_store *st, const struct t_kv *src,
                               const struct t_chain *abc)
{
	struct tutti_request reqs[2] = {t_chain_req(abc, 2, 0, abc->ids),
	                                t_chain_req(abc, 3, 0, abc->ids)};
	int32_t status[5];
	uint64_t used = t_store_stats(st).used_slots;

	assert_int_equal(tutti_store_save(st, src->kv, reqs, 2, status), 3);
	assert_int_equal(status[0], 0);
	assert_int_equal(status[1], 0);
	assert_true(status[2] == 0 || status[2] == 1);
	assert_true(status[3] == 0 || status[3] == 1);
	assert_int_equal(status[4], 0);
	assert_int_equal(t_store_stats(st).used_slots, used + 3);
}

static void
test_durable_two_copies_of_a_key_on_disk_recover_as_one(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "dups", T_CHAIN_STAGED, T_CHAIN_DIRECT);
	struct t_chain abc, n[6];
	struct tutti_store *st = t_open_ok(f, &f->geo, tc.dir, 8, NULL);
	uint32_t slots[4];
	int copies;
	uint64_t dups;

	t_make_chain(f, &abc, 3, 3 * T_CHAIN_BPC, NULL, 0);
	save_shared_prefix_in_one_call(st, tc.src, &abc);
	tutti_store_close(st);
	/* However many copies the call wrote, recovery indexes one per key. */
	copies = t_find_key_slots(tc.path, &f->geo, t_key_of(&abc, 0), T_CHAIN_KB, slots, 4) +
	         t_find_key_slots(tc.path, &f->geo, t_key_of(&abc, 1), T_CHAIN_KB, slots, 4);
	assert_true(copies >= 2);
	dups = (uint64_t)copies - 2;
	/* A second copy of c, as a chunk evicted and saved again into another slot leaves. */
	copy_slot(&f->geo, tc.path, t_key_slot(tc.path, &f->geo, t_key_of(&abc, 2), T_CHAIN_KB),
	          tc.path, t_free_slot(tc.path, &f->geo));
	st = t_open_ok(f, &f->geo, tc.dir, 8, NULL);
	t_assert_recovery(st, 3, 0, 0, dups + 1);
	t_assert_chain(f, st, tc.src, tc.dst, &abc);
	/* The LRU works: five more chunks fill the store without eviction (the extra copies'
	 * slots are free), the sixth evicts the least recently used chain's tail, c. */
	save_new_chunks(f, st, tc.src, n, 5);
	assert_int_equal(t_store_stats(st).evictions, 0);
	save_new_chunks(f, st, tc.src, &n[5], 1);
	assert_int_equal(t_store_stats(st).evictions, 1);
	assert_int_equal(tutti_store_lookup(st, abc.keys, 3, NULL), 2);
	t_assert_chains(f, st, tc.src, tc.dst, n, 6);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

static void
test_durable_recovery_restores_the_lru_order_of_the_saves(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "lru", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	struct t_chain x, y, z, n[3];
	struct tutti_store *st = t_open_ok(f, &f->geo, tc.dir, 5, NULL);

	t_make_chain(f, &x, 2, 2 * T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &y, 1, T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &z, 1, T_CHAIN_BPC, NULL, 0);
	t_save_chain(st, tc.src, &x, 0);
	t_save_chain(st, tc.src, &y, 0);
	t_save_chain(st, tc.src, &z, 0);
	tutti_store_close(st);
	st = t_open_ok(f, &f->geo, tc.dir, 5, NULL);
	t_assert_recovery(st, 4, 0, 0, 0);
	for (uint32_t i = 0; i < 3; i++) {
		save_new_chunks(f, st, tc.src, &n[i], 1);
		assert_int_equal(t_store_stats(st).evictions, (uint64_t)i);
	}
	/* X was saved first: its tail went first, then its root. */
	assert_int_equal(tutti_store_lookup(st, x.keys, 2, NULL), 0);
	t_assert_chain(f, st, tc.src, tc.dst, &y);
	t_assert_chain(f, st, tc.src, tc.dst, &z);
	t_assert_chains(f, st, tc.src, tc.dst, n, 3);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

/*
 * A process killed inside a save, after the new chunks' objects reached the disk and before
 * their headers did, leaves every reused slot with the header it had before the save over the
 * new objects. Recovery must still find every chunk committed before that save intact.
 */
static void
test_durable_save_killed_before_its_headers_loses_no_committed_chunk(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "killed", T_CHAIN_DIRECT, T_CHAIN_STAGED);
	struct t_chain abc, xy, other;
	struct tutti_store *st = t_open_ok(f, &f->geo, tc.dir, 8, NULL);
	uint8_t *before, *after;
	uint32_t nr, nr2, restored = 0, dids[3 * T_CHAIN_BPC];
	int32_t status[3];
	int64_t loaded;

	t_make_chain(f, &abc, 3, 3 * T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &other, 1, T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &xy, 2, 2 * T_CHAIN_BPC, NULL, 0);
	t_save_chain(st, tc.src, &other, 0);
	save_shared_prefix_in_one_call(st, tc.src, &abc);
	/* The headers on disk before the next save, read beneath the open (idle) store. */
	before = t_read_headers(tc.path, &f->geo, &nr);
	assert_non_null(before);
	t_save_chain(st, tc.src, &xy, 0);
	tutti_store_close(st);
	/* Undo the header writes of that save: its objects stay. */
	after = t_read_headers(tc.path, &f->geo, &nr2);
	assert_non_null(after);
	assert_int_equal(nr, nr2);
	for (uint32_t s = 0; s < nr; s++) {
		const uint8_t *old = before + (size_t)s * TUTTI_SLOT_HEADER_BYTES;

		if (memcmp(old, after + (size_t)s * TUTTI_SLOT_HEADER_BYTES,
		           TUTTI_SLOT_HEADER_BYTES) != 0) {
			assert_int_equal(t_disk_write(tc.path, t_slot_off(&f->geo, s), old,
			                              TUTTI_SLOT_HEADER_BYTES),
			                 0);
			restored++;
		}
	}
	assert_int_equal(restored, 2);

	st = t_open_ok(f, &f->geo, tc.dir, 8, NULL);
	assert_int_equal(tutti_store_lookup(st, xy.keys, 2, NULL), 0);
	assert_int_equal(tutti_store_lookup(st, abc.keys, 3, NULL), 3);
	loaded = t_load_range(f, st, tc.dst, &abc, 0, 3, dids, status);
	for (uint32_t i = 0; i < 3; i++) {
		if (status[i] != 0) {
			print_message("chunk %u of [a b c], committed before the killed save, is "
			              "lost: load status %d\n",
			              i, status[i]);
		}
	}
	assert_int_equal(loaded, 3);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(status[i], 0);
		assert_true(t_chunk_equal(tc.src, tc.dst, &abc, i, dids));
	}
	t_assert_chain(f, st, tc.src, tc.dst, &other);
	assert_int_equal(t_store_stats(st).load_corrupt, 0);
	tutti_store_close(st);
	free(before);
	free(after);
	t_store_case_free(&tc);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_durable_saved_chains_come_back_bit_exact_after_reopen),
	    cmocka_unit_test(test_durable_damaged_header_drops_its_chunk_and_keeps_the_children),
	    cmocka_unit_test(test_durable_open_with_repair_erases_the_headers_it_drops),
	    cmocka_unit_test(test_durable_zeroed_header_frees_its_slot_without_counting_a_drop),
	    cmocka_unit_test(test_durable_slot_of_another_store_is_dropped),
	    cmocka_unit_test(test_durable_two_copies_of_a_key_on_disk_recover_as_one),
	    cmocka_unit_test(test_durable_recovery_restores_the_lru_order_of_the_saves),
	    cmocka_unit_test(test_durable_save_killed_before_its_headers_loses_no_committed_chunk),
	};

	return t_chain_run("recovery", tests, sizeof(tests) / sizeof(tests[0]));
}
