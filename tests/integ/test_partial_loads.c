/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: loads of part of a stored chunk (skip_blocks, a partial last chunk), for both
 * engines: the whole stored payload is verified, so damage to blocks the load does not move still
 * fails it, while damage to an object's padding (no data) does not.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <cmocka.h>

#include "t_chain.h"
#include "t_disk.h"
#include "t_kv.h"
#include "t_util.h"
#include "tutti/tutti.h"

static void
test_durable_partial_loads_verify_the_whole_stored_payload(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "partial", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	uint64_t lbb = tutti_geometry_layer_block_bytes(&f->geo);
	struct t_chain a, p;
	struct tutti_store *st = t_open_ok(f, &f->geo, tc.dir, 8, NULL);
	struct tutti_request r;
	uint32_t dids[T_CHAIN_BPC];
	int32_t status[1];
	uint32_t slot;

	t_make_chain(f, &a, 1, T_CHAIN_BPC, NULL, 0);
	t_make_chain(f, &p, 1, 2, NULL, 0); /* two of four blocks */
	t_save_chain(st, tc.src, &a, 0);
	t_save_chain(st, tc.src, &p, 0);
	/* Block 0 of A damaged; a load of blocks 2..3 only still fails. */
	slot = t_key_slot(tc.path, &f->geo, a.keys, T_CHAIN_KB);
	assert_int_equal(t_disk_flip_bit(tc.path, t_object_off(&f->geo, slot, 0) + 100, 3), 0);
	t_random_distinct(&f->r, dids, T_CHAIN_BPC, T_CHAIN_NR_BLOCKS);
	r = (struct tutti_request){.size = sizeof(r),
	                           .nr_keys = 1,
	                           .keys = a.keys,
	                           .skip_blocks = 2,
	                           .nr_blocks = 2,
	                           .block_ids = dids};
	assert_int_equal(tutti_store_load(st, tc.dst->kv, &r, 1, 0, 2, status), 0);
	assert_int_equal(status[0], -EBADMSG);
	assert_int_equal(tutti_store_lookup(st, a.keys, 1, NULL), 0);
	/* P's padding (past its two blocks) is no data: damage there is harmless, damage inside
	 * its blocks is not. */
	slot = t_key_slot(tc.path, &f->geo, p.keys, T_CHAIN_KB);
	assert_int_equal(t_disk_flip_bit(tc.path, t_object_off(&f->geo, slot, 1) + 2 * lbb + 5, 0),
	                 0);
	t_assert_chain(f, st, tc.src, tc.dst, &p);
	assert_int_equal(t_disk_flip_bit(tc.path, t_object_off(&f->geo, slot, 1) + 2 * lbb - 1, 7),
	                 0);
	assert_int_equal(t_load_range(f, st, tc.dst, &p, 0, 1, dids, status), 0);
	assert_int_equal(status[0], -EBADMSG);
	assert_int_equal(t_store_stats(st).load_corrupt, 2);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_durable_partial_loads_verify_the_whole_stored_payload),
	};

	return t_chain_run("partial-loads", tests, sizeof(tests) / sizeof(tests[0]));
}
