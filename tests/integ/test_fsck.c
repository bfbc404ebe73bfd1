/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: damaged payloads under a closed or an open store, for both engines and both the
 * direct and the staged I/O path: a load fails exactly the damaged chunks and forgets them (their
 * headers erased; their children kept, reachable again once the chunk is saved anew); fsck
 * finds them without changing anything, and with TUTTI_FSCK_REPAIR removes them for good while
 * keeping every valid chunk after them, so that saving the removed chunks again makes every
 * chain whole.
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

/* ---- checksums on load ---- */

static void
test_durable_load_fails_damaged_chunks_alone_and_forgets_them(void **state)
{
	struct t_chain_fixture *f = *state;
	const enum t_layout layouts[2] = {T_CHAIN_DIRECT, T_CHAIN_STAGED};

	for (uint32_t li = 0; li < 2; li++) {
		char name[32];
		struct t_store_case tc;
		struct t_chain c, d, e;
		struct tutti_store *st;
		struct tutti_request reqs[3];
		uint32_t dc[3 * T_CHAIN_BPC], dd[2 * T_CHAIN_BPC], de[2 * T_CHAIN_BPC];
		int32_t status[7];

		snprintf(name, sizeof(name), "csum.%u", li);
		tc = t_chain_case_new(f, name, layouts[li], layouts[li]);
		f->next_src = 0;
		t_make_chain(f, &c, 3, 3 * T_CHAIN_BPC, NULL, 0);
		t_make_chain(f, &d, 2, T_CHAIN_BPC + 2, NULL, 0);
		t_make_chain(f, &e, 2, 2 * T_CHAIN_BPC, NULL, 0);
		st = t_open_ok(f, &f->geo, tc.dir, 16, NULL);
		t_save_chain(st, tc.src, &c, 0);
		t_save_chain(st, tc.src, &d, 0);
		t_save_chain(st, tc.src, &e, 0);
		/* Beneath the open store: C's middle chunk and E's root. */
		t_damage_payload(f, tc.dir, &f->geo, t_key_of(&c, 1), 1, T_CHAIN_BPC);
		t_damage_payload(f, tc.dir, &f->geo, t_key_of(&e, 0), 0, T_CHAIN_BPC);

		t_kv_poison(tc.dst, T_POISON);
		t_random_distinct(&f->r, dc, 3 * T_CHAIN_BPC, T_CHAIN_NR_BLOCKS / 2);
		for (uint32_t i = 0; i < 2 * T_CHAIN_BPC; i++) {
			dd[i] = T_CHAIN_NR_BLOCKS / 2 + i;
			de[i] = T_CHAIN_NR_BLOCKS / 2 + 2 * T_CHAIN_BPC + i;
		}
		reqs[0] = t_chain_req(&c, 3, 0, dc);
		reqs[1] = t_chain_req(&d, 2, 0, dd);
		reqs[2] = t_chain_req(&e, 2, 0, de);
		assert_int_equal(tutti_store_load(st, tc.dst->kv, reqs, 3, 0, 2, status), 5);
		assert_int_equal(status[0], 0);
		assert_int_equal(status[1], -EBADMSG);
		assert_int_equal(status[2], 0);
		assert_int_equal(status[3], 0);
		assert_int_equal(status[4], 0);
		assert_int_equal(status[5], -EBADMSG);
		assert_int_equal(status[6], 0);
		assert_true(t_chunk_equal(tc.src, tc.dst, &c, 0, dc));
		assert_true(t_chunk_equal(tc.src, tc.dst, &c, 2, dc));
		assert_true(t_chunk_equal(tc.src, tc.dst, &d, 0, dd));
		assert_true(t_chunk_equal(tc.src, tc.dst, &d, 1, dd));
		assert_true(t_chunk_equal(tc.src, tc.dst, &e, 1, de));
		assert_int_equal(t_store_stats(st).load_corrupt, 2);
		assert_true(t_log_contains(&f->rec, "checksum"));
		/* Never served again; the children are cut off from their chains. */
		assert_int_equal(tutti_store_lookup(st, c.keys, 3, NULL), 1);
		assert_int_equal(tutti_store_lookup(st, e.keys, 2, NULL), 0);
		assert_int_equal(t_load_range(f, st, tc.dst, &c, 1, 2, dc, status), 0);
		assert_int_equal(status[0], -ENOENT);
		/* Saved again, C[1] joins its child, whose slot was never touched, back in. */
		assert_int_equal(t_save_keys(st, tc.src, &c, 2, status), 1);
		assert_int_equal(status[0], 1);
		assert_int_equal(status[1], 0);
		t_assert_chain(f, st, tc.src, tc.dst, &c);
		t_assert_chain(f, st, tc.src, tc.dst, &d);
		tutti_store_close(st);

		/* E[0]'s header was erased: gone for good, not a damaged header; E[1] is kept,
		 * an orphan. C[1] is on disk once. */
		assert_int_equal(
		    t_find_key_slots(tc.path, &f->geo, t_key_of(&e, 0), T_CHAIN_KB, dc, 1), 0);
		assert_int_equal(
		    t_find_key_slots(tc.path, &f->geo, t_key_of(&c, 1), T_CHAIN_KB, dc, 1), 1);
		st = t_open_ok(f, &f->geo, tc.dir, 16, NULL);
		t_assert_recovery(st, 6, 0, 1, 0);
		assert_int_equal(tutti_store_lookup(st, e.keys, 2, NULL), 0);
		/* E saved again: only E[0] is written, and E is whole. */
		assert_int_equal(t_save_keys(st, tc.src, &e, 2, status), 1);
		assert_int_equal(status[0], 0);
		assert_int_equal(status[1], 1);
		t_assert_chain(f, st, tc.src, tc.dst, &e);
		t_assert_chain(f, st, tc.src, tc.dst, &c);
		t_assert_chain(f, st, tc.src, tc.dst, &d);
		tutti_store_close(st);
		t_store_case_free(&tc);
	}
}

/* ---- fsck ---- */

static void
test_durable_fsck_finds_damaged_chunks_and_repair_removes_them(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "fsck", T_CHAIN_STAGED, T_CHAIN_DIRECT);
	uint64_t lbb = tutti_geometry_layer_block_bytes(&f->geo);
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	struct t_chain c[10];
	uint32_t owner[30], idx[30], bad[3], nr = 0, orphans = 0;
	uint64_t all_bytes = 0, bad_bytes = 0;
	bool dead[30] = {false};
	struct tutti_store *st = t_open_ok(f, &f->geo, tc.dir, 32, NULL);

	for (uint32_t i = 0; i < 10; i++) {
		uint32_t keys = 1 + t_rng_below(&f->r, 3);
		uint32_t blocks = (keys - 1) * T_CHAIN_BPC + 1 + t_rng_below(&f->r, T_CHAIN_BPC);

		t_make_chain(f, &c[i], keys, blocks, NULL, 0);
		t_save_chain(st, tc.src, &c[i], 0);
		for (uint32_t k = 0; k < keys; k++, nr++) {
			owner[nr] = i;
			idx[nr] = k;
			all_bytes += t_chunk_blocks(&c[i], k) * lbb * f->geo.nr_layers;
		}
	}
	tutti_store_close(st);
	t_random_distinct(&f->r, bad, 3, nr);
	for (int i = 0; i < 3; i++) {
		const struct t_chain *ch = &c[owner[bad[i]]];
		uint32_t k = idx[bad[i]];

		t_damage_payload(f, tc.dir, &f->geo, t_key_of(ch, k), t_rng_below(&f->r, 2),
		                 t_chunk_blocks(ch, k));
		dead[bad[i]] = true;
		bad_bytes += t_chunk_blocks(ch, k) * lbb * f->geo.nr_layers;
	}

	st = t_open_ok(f, &f->geo, tc.dir, 32, NULL);
	/* Checking changes nothing, so a second check finds the same. */
	for (int pass = 0; pass < 2; pass++) {
		assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
		assert_int_equal(rep.chunks_checked, nr);
		assert_int_equal(rep.corrupt_chunks, 3);
		assert_int_equal(rep.removed_chunks, 0);
		assert_true(rep.bytes_checked > 0 && rep.bytes_checked <= all_bytes);
		assert_int_equal(t_store_stats(st).used_slots, nr);
		for (uint32_t i = 0; i < 10; i++) {
			assert_int_equal(tutti_store_lookup(st, c[i].keys, c[i].nr_keys, NULL),
			                 c[i].nr_keys);
		}
	}
	assert_int_equal(tutti_store_fsck(st, TUTTI_FSCK_REPAIR, &rep), 0);
	assert_int_equal(rep.chunks_checked, nr);
	assert_int_equal(rep.corrupt_chunks, 3);
	assert_int_equal(rep.removed_chunks, 3);
	assert_int_equal(t_store_stats(st).used_slots, nr - 3);
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	assert_int_equal(rep.chunks_checked, nr - 3);
	assert_int_equal(rep.corrupt_chunks, 0);
	assert_int_equal(rep.bytes_checked, all_bytes - bad_bytes);
	tutti_store_close(st);

	/* After reopen the removed chunks stay removed; every valid chunk is kept, those whose
	 * parent was removed as orphans, and lookups stop where a chain has a hole. */
	st = t_open_ok(f, &f->geo, tc.dir, 32, NULL);
	for (uint32_t n = 0; n < nr; n++) {
		orphans += idx[n] > 0 && dead[n - 1] && !dead[n];
	}
	t_assert_recovery(st, nr - 3, 0, orphans, 0);
	for (uint32_t n = 0, prefix = 0; n < nr; n++) {
		const struct t_chain *ch = &c[owner[n]];

		prefix = idx[n] == 0 ? 0 : prefix;
		prefix += prefix == idx[n] && !dead[n];
		if (idx[n] + 1 == ch->nr_keys) {
			assert_int_equal(tutti_store_lookup(st, ch->keys, ch->nr_keys, NULL),
			                 prefix);
			if (prefix == ch->nr_keys) {
				t_assert_chain(f, st, tc.src, tc.dst, ch);
			}
		}
	}
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	assert_int_equal(rep.corrupt_chunks, 0);
	assert_int_equal(rep.chunks_checked, nr - 3);
	/* Every chain saved again, as a server recomputing the misses does: only the three
	 * removed chunks are written, and every chain is whole. */
	for (uint32_t i = 0, n = 0; i < 10; i++) {
		int32_t status[T_CHAIN_MAX_KEYS];
		int64_t written = t_save_keys(st, tc.src, &c[i], c[i].nr_keys, status);
		int64_t want = 0;

		for (uint32_t k = 0; k < c[i].nr_keys; k++, n++) {
			assert_int_equal(status[k], dead[n] ? 0 : 1);
			want += dead[n];
		}
		assert_int_equal(written, want);
	}
	t_assert_chains(f, st, tc.src, tc.dst, c, 10);
	assert_int_equal(t_store_stats(st).used_slots, nr);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_durable_load_fails_damaged_chunks_alone_and_forgets_them),
	    cmocka_unit_test(test_durable_fsck_finds_damaged_chunks_and_repair_removes_them),
	};

	return t_chain_run("fsck", tests, sizeof(tests) / sizeof(tests[0]));
}
