/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/plan, the request checks and chunk plans that the store and the remote tier
 * share: each thing a request or a call can get wrong is -EINVAL with a logged reason, on loads
 * and saves, alone and after a good request; and the plan of whole chunks, a partial last chunk,
 * skip_blocks, a chain entered at first_chunk, several requests, no request, one-block chunks,
 * and a call of more chunks than a uint32_t counts.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "plan/plan.h"
#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"

#define BPC 4u
#define NR_BLOCKS 16u
#define KB 32u

struct fixture {
	struct tt_geo geo;  /* 4 blocks per chunk */
	struct tt_geo geo1; /* 1 block per chunk */
	struct t_kv *kv, *kv1;
	struct t_log rec;
	struct tt_log log;
	uint8_t keys[8 * KB];
	uint32_t ids[NR_BLOCKS];
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct tutti_geometry g = t_geo_small(2, BPC), g1 = t_geo_small(2, 1);

	assert_non_null(f);
	assert_int_equal(tt_geo_derive(&g, &f->geo), 0);
	assert_int_equal(tt_geo_derive(&g1, &f->geo1), 0);
	assert_int_equal(f->geo.blocks_per_chunk, BPC);
	assert_int_equal(f->geo1.blocks_per_chunk, 1);
	assert_int_equal(t_kv_alloc(&g, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->kv), 0);
	assert_int_equal(t_kv_alloc(&g1, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->kv1), 0);
	f->log = (struct tt_log){.fn = t_log_fn, .arg = &f->rec, .level = TUTTI_LOG_ERR};
	/* Block ids in reverse, so that an offset into them is never mistaken for a block id. */
	for (uint32_t i = 0; i < NR_BLOCKS; i++) {
		f->ids[i] = NR_BLOCKS - 1 - i;
	}
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	t_kv_free(f->kv);
	t_kv_free(f->kv1);
	free(f);
	return 0;
}

/* A request for chunks [first, nr_keys) of the fixture's chain, nr_blocks of f->ids. */
static struct tutti_request
req(struct fixture *f, uint32_t nr_keys, uint32_t first, uint32_t skip, uint32_t nr_blocks)
{
	return t_request(f->keys, nr_keys, first, skip, f->ids, nr_blocks);
}

static void
assert_chunk(const struct tt_chunk_plan *c, const struct tutti_request *r, uint32_t key,
             uint32_t id_off, uint32_t nr_moved, uint32_t obj_skip, uint32_t nr_blocks)
{
	assert_ptr_equal(c->req, r);
	assert_int_equal(c->key, key);
	assert_int_equal(c->id_off, id_off);
	assert_int_equal(c->nr_moved, nr_moved);
	assert_int_equal(c->obj_skip, obj_skip);
	assert_int_equal(c->nr_blocks, nr_blocks);
}

/* Plan \p reqs (a load when \p load) and check that tt_plan_call and a walk agree. */
static uint32_t
plan(struct fixture *f, const struct tutti_request *reqs, uint32_t nr, bool load,
     struct tt_chunk_plan *out, uint32_t max)
{
	struct tt_chunk_plan *chunks = NULL, c;
	struct tt_plan_iter it;
	uint32_t n = 0, i = 0;

	t_log_reset(&f->rec);
	assert_int_equal(tt_plan_call(&f->geo, f->kv->kv, reqs, nr, load, &f->log, &chunks, &n), 0);
	assert_non_null(chunks);
	assert_true(n <= max);
	assert_int_equal(tt_plan_check(&f->geo, f->kv->kv, reqs, nr, load, &f->log), n);
	tt_plan_begin(&it, &f->geo, reqs, nr);
	while (tt_plan_next(&it, &c)) {
		assert_true(i < n);
		assert_chunk(&c, chunks[i].req, chunks[i].key, chunks[i].id_off, chunks[i].nr_moved,
		             chunks[i].obj_skip, chunks[i].nr_blocks);
		i++;
	}
	assert_int_equal(i, n);
	assert_false(tt_plan_next(&it, &c)); /* a finished walk stays finished */
	memcpy(out, chunks, n * sizeof(*chunks));
	tt_free(chunks);
	assert_int_equal(f->rec.nr, 0); /* a good call logs nothing */
	return n;
}

/* ---- plans ---- */

static void
test_plan_whole_chunks_move_in_chain_order(void **state)
{
	struct fixture *f = *state;
	struct tutti_request r = req(f, 3, 0, 0, 3 * BPC);
	struct tt_chunk_plan c[8];

	for (int load = 0; load < 2; load++) {
		assert_int_equal(plan(f, &r, 1, load, c, 8), 3);
		for (uint32_t k = 0; k < 3; k++) {
			assert_chunk(&c[k], &r, k, k * BPC, BPC, 0, BPC);
		}
	}
}

static void
test_plan_partial_last_chunk_holds_the_rest(void **state)
{
	struct fixture *f = *state;
	struct tt_chunk_plan c[8];

	for (uint32_t last = 1; last < BPC; last++) {
		struct tutti_request r = req(f, 3, 0, 0, 2 * BPC + last);

		for (int load = 0; load < 2; load++) {
			assert_int_equal(plan(f, &r, 1, load, c, 8), 3);
			assert_chunk(&c[0], &r, 0, 0, BPC, 0, BPC);
			assert_chunk(&c[1], &r, 1, BPC, BPC, 0, BPC);
			assert_chunk(&c[2], &r, 2, 2 * BPC, last, 0, last);
		}
	}
}

static void
test_plan_skip_blocks_start_inside_the_first_chunk(void **state)
{
	struct fixture *f = *state;
	struct tt_chunk_plan c[8];
	struct tutti_request r;

	/* Skip 3 of chunk 0: it moves its last block; chunk 1 is whole. */
	r = req(f, 2, 0, 3, 1 + BPC);
	assert_int_equal(plan(f, &r, 1, true, c, 8), 2);
	assert_chunk(&c[0], &r, 0, 0, 1, 3, BPC);
	assert_chunk(&c[1], &r, 1, 1, BPC, 0, BPC);
	/* The most a load may skip, with a partial last chunk after it. */
	r = req(f, 2, 0, BPC - 1, 1 + 2);
	assert_int_equal(plan(f, &r, 1, true, c, 8), 2);
	assert_chunk(&c[0], &r, 0, 0, 1, BPC - 1, BPC);
	assert_chunk(&c[1], &r, 1, 1, 2, 0, 2);
	/* One chunk, skipped into and partial: blocks 1 and 2 of it. The chunk holds 3 blocks from
	 * its start to the last one moved. */
	r = req(f, 1, 0, 1, 2);
	assert_int_equal(plan(f, &r, 1, true, c, 8), 1);
	assert_chunk(&c[0], &r, 0, 0, 2, 1, 3);
}

static void
test_plan_first_chunk_counts_keys_from_the_root(void **state)
{
	struct fixture *f = *state;
	struct tt_chunk_plan c[8];
	struct tutti_request r = req(f, 4, 2, 0, BPC + 2);

	/* block_ids hold the moved chunks' blocks only: chunk 2 starts at id 0. */
	for (int load = 0; load < 2; load++) {
		assert_int_equal(plan(f, &r, 1, load, c, 8), 2);
		assert_chunk(&c[0], &r, 2, 0, BPC, 0, BPC);
		assert_chunk(&c[1], &r, 3, BPC, 2, 0, 2);
	}
	r = req(f, 4, 3, 2, 1); /* the last chunk alone, its third block */
	assert_int_equal(plan(f, &r, 1, true, c, 8), 1);
	assert_chunk(&c[0], &r, 3, 0, 1, 2, 3);
}

static void
test_plan_requests_keep_their_order(void **state)
{
	struct fixture *f = *state;
	struct tt_chunk_plan c[8];
	struct tutti_request r[3] = {req(f, 2, 0, 0, BPC + 1), req(f, 1, 0, 2, 1),
	                             req(f, 5, 3, 0, 2 * BPC)};

	assert_int_equal(plan(f, r, 3, true, c, 8), 5);
	assert_chunk(&c[0], &r[0], 0, 0, BPC, 0, BPC);
	assert_chunk(&c[1], &r[0], 1, BPC, 1, 0, 1);
	assert_chunk(&c[2], &r[1], 0, 0, 1, 2, 3);
	assert_chunk(&c[3], &r[2], 3, 0, BPC, 0, BPC);
	assert_chunk(&c[4], &r[2], 4, BPC, BPC, 0, BPC);
}

static void
test_plan_no_request_is_an_empty_plan(void **state)
{
	struct fixture *f = *state;
	struct tt_chunk_plan c[1];
	struct tutti_request r = req(f, 1, 0, 0, 1);

	assert_int_equal(plan(f, NULL, 0, true, c, 1), 0);
	assert_int_equal(plan(f, &r, 0, false, c, 1), 0);
}

static void
test_plan_one_block_chunks(void **state)
{
	struct fixture *f = *state;
	struct tutti_request r = req(f, 5, 1, 0, 4);
	struct tt_chunk_plan *c = NULL;
	uint32_t n = 0;

	assert_int_equal(tt_plan_call(&f->geo1, f->kv1->kv, &r, 1, true, &f->log, &c, &n), 0);
	assert_int_equal(n, 4);
	for (uint32_t i = 0; i < n; i++) {
		assert_chunk(&c[i], &r, 1 + i, i, 1, 0, 1);
	}
	tt_free(c);
	/* A chunk of one block cannot be skipped into. */
	r.skip_blocks = 1;
	r.nr_blocks = 3;
	assert_int_equal(tt_plan_check(&f->geo1, f->kv1->kv, &r, 1, true, &f->log), -EINVAL);
}

/* ---- what is refused ---- */

/* \p bad fails the call with -EINVAL and a logged reason: alone and after a good request, as a
 * load and (unless \p load_only) as a save; tt_plan_call then allocates nothing. */
static void
assert_refused(struct fixture *f, const struct tutti_request *bad, bool load_only)
{
	struct tutti_request two[2] = {req(f, 2, 0, 0, 2 * BPC), *bad};

	for (int load = 1; load >= (load_only ? 1 : 0); load--) {
		for (uint32_t first = 0; first < 2; first++) {
			struct tt_chunk_plan *c = (struct tt_chunk_plan *)(uintptr_t)1;
			uint32_t n = 7;

			t_log_reset(&f->rec);
			assert_int_equal(tt_plan_check(&f->geo, f->kv->kv, two + 1 - first,
			                               1 + first, load, &f->log),
			                 -EINVAL);
			assert_int_equal(f->rec.nr_err, 1);
			assert_int_equal(tt_plan_call(&f->geo, f->kv->kv, two + 1 - first,
			                              1 + first, load, NULL, &c, &n),
			                 -EINVAL);
			assert_ptr_equal(c, (struct tt_chunk_plan *)(uintptr_t)1);
			assert_int_equal(n, 7);
		}
	}
}

static void
test_plan_refuses_each_bad_request(void **state)
{
	struct fixture *f = *state;
	struct tutti_request good = req(f, 2, 0, 0, 2 * BPC), r;
	uint32_t ids[2 * BPC];

	assert_int_equal(tt_plan_check(&f->geo, f->kv->kv, &good, 1, false, &f->log), 2);
	r = good, r.size = 0;
	assert_refused(f, &r, false);
	r = good, r.size = sizeof(r) - 4;
	assert_refused(f, &r, false);
	r = good, r.size = sizeof(r) + 4;
	assert_refused(f, &r, false);
	r = good, r.reserved = 1;
	assert_refused(f, &r, false);
	r = good, r.keys = NULL;
	assert_refused(f, &r, false);
	r = good, r.nr_keys = 0;
	assert_refused(f, &r, false);
	r = good, r.first_chunk = 2; /* == nr_keys */
	assert_refused(f, &r, false);
	r = good, r.first_chunk = 3;
	assert_refused(f, &r, false);
	r = good, r.nr_blocks = 0;
	assert_refused(f, &r, false);
	r = good, r.block_ids = NULL;
	assert_refused(f, &r, false);
	/* Two chunks need more than one chunk's blocks, and no more than two chunks'. */
	r = good, r.nr_blocks = BPC;
	assert_refused(f, &r, false);
	r = good, r.nr_blocks = 2 * BPC + 1;
	assert_refused(f, &r, false);
	/* Skipped blocks count: skip 3 and 1 block leave the second chunk empty, skip 1 and 2 x
	 * BPC blocks overflow it. */
	r = good, r.skip_blocks = 3, r.nr_blocks = 1;
	assert_refused(f, &r, true);
	r = good, r.skip_blocks = 1, r.nr_blocks = 2 * BPC;
	assert_refused(f, &r, true);
	/* A whole chunk or more may not be skipped; a save skips nothing. */
	r = good, r.skip_blocks = BPC, r.nr_blocks = BPC;
	assert_refused(f, &r, true);
	r = good, r.skip_blocks = UINT32_MAX, r.nr_blocks = 1;
	assert_refused(f, &r, true);
	r = good, r.skip_blocks = 1, r.nr_blocks = 2 * BPC - 1;
	assert_int_equal(tt_plan_check(&f->geo, f->kv->kv, &r, 1, true, &f->log), 2);
	t_log_reset(&f->rec);
	assert_int_equal(tt_plan_check(&f->geo, f->kv->kv, &r, 1, false, &f->log), -EINVAL);
	assert_int_equal(f->rec.nr_err, 1);
	/* A block id outside the KV, first, in the middle or last. */
	for (uint32_t i = 0; i < 3; i++) {
		uint32_t at = (uint32_t[]){0, BPC, 2 * BPC - 1}[i];

		memcpy(ids, f->ids, sizeof(ids));
		ids[at] = NR_BLOCKS;
		r = good, r.block_ids = ids;
		assert_refused(f, &r, false);
		ids[at] = UINT32_MAX;
		assert_refused(f, &r, false);
	}
}

static void
test_plan_refuses_bad_calls(void **state)
{
	struct fixture *f = *state;
	struct tutti_request good = req(f, 1, 0, 0, 1);

	t_log_reset(&f->rec);
	assert_int_equal(tt_plan_check(&f->geo, NULL, &good, 1, true, &f->log), -EINVAL);
	assert_int_equal(tt_plan_check(&f->geo, f->kv->kv, NULL, 1, true, &f->log), -EINVAL);
	/* A KV of another geometry (here another chunk size: the same block bytes). */
	assert_int_equal(tt_plan_check(&f->geo, f->kv1->kv, &good, 1, true, &f->log), -EINVAL);
	assert_int_equal(tt_plan_check(&f->geo1, f->kv->kv, &good, 1, true, &f->log), -EINVAL);
	assert_int_equal(f->rec.nr_err, 4);
}

/*
 * A call of more than UINT32_MAX chunks: 4097 requests of 2^20 one-block chunks. The count is
 * checked before any block id is read, so the requests share a block_ids array of one entry
 * (reading past it would be caught under AddressSanitizer).
 */
static void
test_plan_refuses_more_chunks_than_a_uint32_counts(void **state)
{
	struct fixture *f = *state;
	const uint32_t per_req = 1u << 20, nr = 4097;
	struct tutti_request *r = calloc(nr, sizeof(*r));
	uint32_t one_id = 0;

	assert_non_null(r);
	for (uint32_t i = 0; i < nr; i++) {
		r[i] = t_request(f->keys, per_req, 0, 0, &one_id, per_req);
	}
	t_log_reset(&f->rec);
	assert_int_equal(tt_plan_check(&f->geo1, f->kv1->kv, r, nr, true, &f->log), -EINVAL);
	assert_int_equal(f->rec.nr_err, 1);
	assert_true(t_log_contains(&f->rec, "chunks"));
	free(r);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_plan_whole_chunks_move_in_chain_order),
	    T(test_plan_partial_last_chunk_holds_the_rest),
	    T(test_plan_skip_blocks_start_inside_the_first_chunk),
	    T(test_plan_first_chunk_counts_keys_from_the_root),
	    T(test_plan_requests_keep_their_order),
	    T(test_plan_no_request_is_an_empty_plan),
	    T(test_plan_one_block_chunks),
	    T(test_plan_refuses_each_bad_request),
	    T(test_plan_refuses_bad_calls),
	    T(test_plan_refuses_more_chunks_than_a_uint32_counts),
	};

	return cmocka_run_group_tests_name("plan", tests, NULL, NULL);
}
