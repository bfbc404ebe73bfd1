/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/mover/objmover_twin.c, the CPU twin of the CUDA object mover: each buffer's
 * steps run in order, copies after the buffer's earlier objs and objs after its earlier copy,
 * and only once a wait or sync needs them; a load's objects are checked against their checksums (a
 * mismatch is -EBADMSG and is never scattered), skip leading blocks and land in their blocks; a
 * save's are gathered, zero-padded and hashed to tt_csum's value; one call takes a run of
 * objects across layers (per_layer objects a layer, starting skip objects into the first), each
 * object moved in its own layer, and refuses a run that leaves the KV's layers.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "format/format.h"
#include "mover/mover.h"
#include "t_kv.h"
#include "t_store.h"

#define NR_BLOCKS 16u
#define BPC 4u

static void
test_twin_steps_run_as_late_as_their_order_allows(void **state)
{
	struct tt_objmover_twin *t;
	struct tutti_geometry geo = t_geo_small(1, BPC);
	struct t_rng r;
	struct t_kv *src;
	uint64_t ob = tutti_geometry_object_bytes(&geo);
	uint8_t *host = t_aligned_alloc(2 * ob), *dev = t_aligned_alloc(2 * ob);
	struct tt_gpu_obj o = {.nr_moved = BPC};
	uint32_t ids[BPC] = {0, 1, 2, 3};
	uint8_t a[64], b[64], c[64];

	t_rng_init(&r, t_seed(7));
	src = t_kv_new(&geo, T_LAYOUT_BLOCKS_FIRST, BPC, &r);
	memset(a, 1, sizeof(a));
	memset(b, 0, sizeof(b));
	memset(c, 2, sizeof(c));
	assert_int_equal(tt_objmover_twin_open(&t), 0);
	assert_int_equal(tt_objmover_twin.copy(t, 0, b, a, sizeof(a)), 0);
	assert_int_equal(tt_objmover_twin.copy(t, 1, a, c, sizeof(c)), 0);
	/* Nothing has run: the source may still change, as on a stream not yet reached. */
	assert_int_equal(b[0], 0);
	a[5] = 9;
	assert_int_equal(tt_objmover_twin.wait(t, 0), 0);
	assert_int_equal(b[5], 9);
	assert_int_equal(a[0], 1); /* buffer 1's copy is not needed yet */
	assert_int_equal(tt_objmover_twin.wait(t, 1), 0);
	assert_int_equal(a[0], 2);
	/* A save's order on one buffer: gather and hash, then copy out; waiting for the copy runs
	 * the gather first. The next gather into the buffer waits for that copy, and the copy
	 * after it for the gather. */
	assert_int_equal(tt_objmover_twin.objs(t, 0, src->kv, 0, 1, 0, &o, 1, ids, dev, ob, true),
	                 0);
	assert_int_equal(tt_objmover_twin.copy(t, 0, host, dev, ob), 0);
	assert_int_equal(o.csum, 0);
	assert_int_equal(tt_objmover_twin.wait(t, 0), 0);
	assert_int_equal(o.csum, tt_csum(host, BPC * tutti_geometry_layer_block_bytes(&geo)));
	assert_memory_equal(host, dev, ob);
	memset(host, 0, ob);
	assert_int_equal(tt_objmover_twin.objs(t, 0, src->kv, 0, 1, 0, &o, 1, ids, dev, ob, true),
	                 0);
	assert_int_equal(tt_objmover_twin.copy(t, 0, host + ob, dev, ob), 0);
	assert_int_equal(tt_objmover_twin.wait(t, 0), 0);
	assert_memory_equal(host + ob, dev, ob);
	assert_int_equal(tt_objmover_twin.copy(t, TT_OBJMOVER_BUFS, b, a, 1), -EINVAL);
	assert_int_equal(tt_objmover_twin.wait(t, TT_OBJMOVER_BUFS), -EINVAL);
	assert_int_equal(tt_objmover_twin.copy(t, 0, NULL, a, 1), -EINVAL);
	/* Many steps queued at once: the queues grow. */
	for (int i = 0; i < 1000; i++) {
		c[0] = (uint8_t)i;
		assert_int_equal(tt_objmover_twin.copy(t, 2, b, c, 1), 0);
	}
	assert_int_equal(b[0], 1);
	assert_int_equal(tt_objmover_twin.sync(t), 0);
	assert_int_equal(b[0], (uint8_t)999);
	tt_objmover_twin_close(t);
	t_kv_free(src);
	free(host);
	free(dev);
}

static void
test_twin_objects_check_scatter_gather_and_hash(void **state)
{
	struct tutti_geometry geo = t_geo_small(2, BPC);
	struct t_rng r;
	struct t_kv *src, *dst;
	struct tt_objmover_twin *t;
	uint64_t lbb = tutti_geometry_layer_block_bytes(&geo),
	         ob = tutti_geometry_object_bytes(&geo);
	uint32_t ids[3 * BPC], back[3 * BPC];
	struct tt_gpu_obj objs[3];
	uint8_t *stage = t_aligned_alloc(3 * ob), *expect = t_aligned_alloc(ob);

	t_rng_init(&r, t_seed(131));
	src = t_kv_new(&geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &r);
	dst = t_kv_new(&geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);
	t_random_distinct(&r, ids, 3 * BPC, NR_BLOCKS);
	t_random_distinct(&r, back, 3 * BPC, NR_BLOCKS);
	assert_int_equal(tt_objmover_twin_open(&t), 0);
	/* Save: three objects of layer 1, the last of two blocks (padding zeroed). */
	memset(stage, 0x5a, 3 * ob);
	memset(objs, 0, sizeof(objs));
	for (uint32_t k = 0; k < 3; k++) {
		objs[k] = (struct tt_gpu_obj){.ids_off = k * BPC, .nr_moved = k < 2 ? BPC : 2};
	}
	assert_int_equal(
	    tt_objmover_twin.objs(t, 0, src->kv, 1, 3, 0, objs, 3, ids, stage, ob, true), 0);
	assert_int_equal(objs[0].csum, 0); /* queued, not run */
	assert_int_equal(tt_objmover_twin.sync(t), 0);
	for (uint32_t k = 0; k < 3; k++) {
		uint64_t moved = objs[k].nr_moved * lbb;
		struct tt_move m = {
		    .obj = expect, .block_ids = ids + k * BPC, .nr_blocks = objs[k].nr_moved};

		assert_int_equal(tt_mover_cpu.gather(NULL, src->kv, 1, &m, 1), 0);
		assert_memory_equal(stage + k * ob, expect, moved);
		for (uint64_t i = moved; i < ob; i++) {
			assert_int_equal(stage[k * ob + i], 0);
		}
		assert_int_equal(objs[k].csum, tt_csum(stage + k * ob, moved));
		assert_int_equal(objs[k].status, 0);
	}
	/* Load them back elsewhere: object 1 damaged (-EBADMSG, untouched blocks), object 2
	 * skips its first block, object 0 whole. */
	stage[ob + 100] ^= 4;
	for (uint32_t k = 0; k < 3; k++) {
		objs[k].stored = objs[k].nr_moved;
		objs[k].status = 0;
	}
	objs[2].skip = 1;
	objs[2].nr_moved = 1;
	assert_int_equal(
	    tt_objmover_twin.objs(t, 0, dst->kv, 1, 3, 0, objs, 3, back, stage, ob, false), 0);
	assert_int_equal(tt_objmover_twin.sync(t), 0);
	assert_int_equal(objs[0].status, 0);
	assert_int_equal(objs[1].status, -EBADMSG);
	assert_int_equal(objs[2].status, 0);
	for (uint32_t i = 0; i < BPC; i++) {
		assert_true(t_kv_block_equal(src, ids[i], dst, back[i], 1));
		assert_true(t_kv_block_is(dst, 1, back[BPC + i], T_POISON));
	}
	/* Object 2's second block (after the skipped first) landed in the first block given. */
	assert_true(t_kv_block_equal(src, ids[2 * BPC + 1], dst, back[2 * BPC], 1));
	assert_true(t_kv_block_is(dst, 1, back[2 * BPC + 1], T_POISON));
	assert_true(t_kv_block_is(dst, 0, back[0], T_POISON)); /* other layers untouched */
	tt_objmover_twin_close(t);
	t_kv_free(src);
	t_kv_free(dst);
	free(stage);
	free(expect);
}

/* A run across layers: 2 objects a layer, starting at the second object of layer 1, 4 objects
 * in all (layer 1 object 1, layer 2 objects 0 and 1, layer 3 object 0), as a wave of the
 * CPU-driven engines cuts them; each is gathered from and scattered into its own layer. */
static void
test_twin_objects_of_a_run_across_layers(void **state)
{
	struct tutti_geometry geo = t_geo_small(4, BPC);
	struct t_rng r;
	struct t_kv *src, *dst;
	struct tt_objmover_twin *t;
	uint64_t ob = tutti_geometry_object_bytes(&geo);
	const uint32_t layer_of[4] = {1, 2, 2, 3}, obj_of[4] = {1, 0, 1, 0};
	uint32_t ids[2 * BPC], back[2 * BPC];
	struct tt_gpu_obj objs[4];
	uint8_t *stage = t_aligned_alloc(4 * ob);

	t_rng_init(&r, t_seed(177));
	src = t_kv_new(&geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &r);
	dst = t_kv_new(&geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, NULL);
	t_random_distinct(&r, ids, 2 * BPC, NR_BLOCKS);
	t_random_distinct(&r, back, 2 * BPC, NR_BLOCKS);
	assert_int_equal(tt_objmover_twin_open(&t), 0);
	memset(objs, 0, sizeof(objs));
	for (uint32_t k = 0; k < 4; k++) {
		objs[k] = (struct tt_gpu_obj){.ids_off = obj_of[k] * BPC, .nr_moved = BPC};
	}
	/* A run past the last layer, a skip of a whole layer or more, no objects a layer. */
	assert_int_equal(
	    tt_objmover_twin.objs(t, 0, src->kv, 2, 2, 1, objs, 4, ids, stage, ob, true), -EINVAL);
	assert_int_equal(
	    tt_objmover_twin.objs(t, 0, src->kv, 1, 2, 2, objs, 4, ids, stage, ob, true), -EINVAL);
	assert_int_equal(
	    tt_objmover_twin.objs(t, 0, src->kv, 1, 0, 0, objs, 4, ids, stage, ob, true), -EINVAL);
	assert_int_equal(
	    tt_objmover_twin.objs(t, 0, src->kv, 1, 2, 1, objs, 4, ids, stage, ob, true), 0);
	assert_int_equal(tt_objmover_twin.sync(t), 0);
	for (uint32_t k = 0; k < 4; k++) {
		assert_int_equal(objs[k].status, 0);
		objs[k].stored = BPC;
	}
	assert_int_equal(
	    tt_objmover_twin.objs(t, 0, dst->kv, 1, 2, 1, objs, 4, back, stage, ob, false), 0);
	assert_int_equal(tt_objmover_twin.sync(t), 0);
	for (uint32_t k = 0; k < 4; k++) {
		assert_int_equal(objs[k].status, 0);
		for (uint32_t i = 0; i < BPC; i++) {
			uint32_t at = obj_of[k] * BPC + i;

			assert_true(t_kv_block_equal(src, ids[at], dst, back[at], layer_of[k]));
		}
	}
	/* Layer 1's object 0 and layer 3's object 1 were not in the run; layer 0 was not either. */
	for (uint32_t i = 0; i < BPC; i++) {
		assert_true(t_kv_block_is(dst, 1, back[i], T_POISON));
		assert_true(t_kv_block_is(dst, 3, back[BPC + i], T_POISON));
		assert_true(t_kv_block_is(dst, 0, back[i], T_POISON));
	}
	tt_objmover_twin_close(t);
	t_kv_free(src);
	t_kv_free(dst);
	free(stage);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_twin_steps_run_as_late_as_their_order_allows),
	    cmocka_unit_test(test_twin_objects_check_scatter_gather_and_hash),
	    cmocka_unit_test(test_twin_objects_of_a_run_across_layers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
