/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/engine/obj_lists.c's list memory: tt_list_mem_reserve grows it for the
 * largest batch of a KV (its every block moved, in chunks, plus a partial chunk for each of 256
 * requests), caps that at 64 MiB, and a reserve or get within what it holds keeps the same
 * memory (so that a layerwise step allocates none).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/engine_impl.h"

static struct tutti_kv
kv_of(uint32_t nr_blocks, uint32_t bpc, uint32_t nr_layers)
{
	struct tutti_kv kv;

	memset(&kv, 0, sizeof(kv));
	kv.nr_blocks = nr_blocks;
	kv.geo.blocks_per_chunk = bpc;
	kv.geo.g.nr_layers = nr_layers;
	return kv;
}

static void
test_reserve_holds_the_largest_batch_and_keeps_its_memory(void **state)
{
	struct tt_list_mem m = {.plain = true};
	struct tutti_kv kv = kv_of(4096, 16, 32);
	size_t need = (size_t)(4096 / 16 + 256) * 32 * sizeof(struct tt_gpu_obj) +
	              4096 * sizeof(uint32_t) + 32 * sizeof(int);
	void *cur, *p;

	(void)state;
	assert_int_equal(tt_list_mem_reserve(&m, &kv), 0);
	assert_true(m.bytes >= need);
	cur = m.cur;
	assert_non_null(cur);
	/* Within what it holds: the same memory, nothing kept aside. */
	assert_int_equal(tt_list_mem_reserve(&m, &kv), 0);
	assert_int_equal(tt_list_mem_get(&m, need, &p), 0);
	assert_ptr_equal(p, cur);
	assert_int_equal(m.nr_old, 0);
	/* A larger batch still grows it; the outgrown memory is kept until the end. */
	assert_int_equal(tt_list_mem_get(&m, m.bytes + 1, &p), 0);
	assert_ptr_not_equal(p, cur);
	assert_int_equal(m.nr_old, 1);
	tt_list_mem_free(&m);
	assert_true(m.plain);
	assert_null(m.cur);
}

static void
test_reserve_is_capped_at_64_mib(void **state)
{
	struct tt_list_mem m = {.plain = true};
	struct tutti_kv kv = kv_of(1u << 24, 1, 128);

	(void)state;
	assert_int_equal(tt_list_mem_reserve(&m, &kv), 0);
	assert_int_equal(m.bytes, (size_t)64 << 20);
	tt_list_mem_free(&m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reserve_holds_the_largest_batch_and_keeps_its_memory),
	    cmocka_unit_test(test_reserve_is_capped_at_64_mib),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
