/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/remote/record.c, the chunk records of the remote tier: a record encoded from
 * paged KV checks and holds the blocks' bytes in the canonical layout; every kind of damage or
 * forgery (an object byte, a header byte, another namespace's or rank's tag, another key or
 * parent, a short record) is -EBADMSG; a record of fewer blocks than asked is -ERANGE. Also the
 * argument checks of tutti_remote_open, which fail before any provider call.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "remote/record.h"
#include "t_kv.h"
#include "tutti/remote.h"

struct fixture {
	struct tutti_geometry g;
	struct tt_geo geo;
	struct t_kv *kv;
	uint8_t *rec;
	uint8_t key[32], parent[32];
	struct tt_record_id id;
};

static int
setup(void **state)
{
	static struct fixture f;
	struct t_rng r;

	memset(&f, 0, sizeof(f));
	assert_int_equal(tutti_geometry_preset("tiny", &f.g), 0);
	assert_int_equal(tt_geo_derive(&f.g, &f.geo), 0);
	assert_int_equal(t_kv_alloc(&f.g, T_LAYOUT_KV_FIRST, 4 * f.geo.blocks_per_chunk, &f.kv), 0);
	t_rng_init(&r, t_seed(9));
	t_kv_fill_random(f.kv, &r);
	t_rng_fill(&r, f.key, sizeof(f.key));
	t_rng_fill(&r, f.parent, sizeof(f.parent));
	f.rec = t_aligned_alloc(f.geo.slot_bytes);
	f.id = (struct tt_record_id){
	    .tag = tt_record_tag("ns", 2, 0, 1), .key = f.key, .parent = f.parent, .key_bytes = 32};
	*state = &f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	t_kv_free(f->kv);
	free(f->rec);
	return 0;
}

/* Blocks 5, 2, 7, 0 (scattered) as one chunk. */
static const uint32_t ids[] = {5, 2, 7, 0};

static void
encode(struct fixture *f, uint32_t nr_blocks)
{
	assert_true(nr_blocks <= f->geo.blocks_per_chunk && nr_blocks <= 4);
	assert_int_equal(tt_record_encode(&f->geo, f->kv->kv, &tt_mover_cpu, NULL, &f->id, ids,
	                                  nr_blocks, f->rec),
	                 0);
}

static void
test_round_trip(void **state)
{
	struct fixture *f = *state;
	uint32_t bpc = f->geo.blocks_per_chunk;
	uint8_t *block = t_aligned_alloc(f->geo.layer_block_bytes);

	encode(f, bpc);
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &f->id, bpc), 0);
	/* The objects hold the blocks in order, in the canonical layout, zero padded. */
	for (uint32_t l = 0; l < f->g.nr_layers; l++) {
		const uint8_t *obj = f->rec + tt_geo_object_off(&f->geo, l);

		for (uint32_t b = 0; b < bpc; b++) {
			t_kv_read_block(f->kv, l, ids[b], block);
			assert_memory_equal(obj + (uint64_t)b * f->geo.layer_block_bytes, block,
			                    f->geo.layer_block_bytes);
		}
		for (uint64_t i = f->geo.chunk_layer_bytes; i < f->geo.object_bytes; i++) {
			assert_int_equal(obj[i], 0);
		}
	}
	free(block);
}

static void
test_damage_and_forgery(void **state)
{
	struct fixture *f = *state;
	uint32_t bpc = f->geo.blocks_per_chunk;
	struct tt_record_id id;
	uint8_t other[32];
	uint64_t offs[] = {16, 48, 180, tt_geo_object_off(&f->geo, 0) + 1,
	                   tt_geo_object_off(&f->geo, f->g.nr_layers - 1) +
	                       f->geo.chunk_layer_bytes - 1};

	encode(f, bpc);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		f->rec[offs[i]] ^= 0x40;
		assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &f->id, bpc),
		                 -EBADMSG);
		f->rec[offs[i]] ^= 0x40;
	}
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes - 1, &f->id, bpc),
	                 -EBADMSG);
	assert_int_equal(tt_record_check(&f->geo, f->rec, 4096, &f->id, bpc), -EBADMSG);
	memset(other, 0x5a, sizeof(other));
	id = f->id;
	id.tag = tt_record_tag("nt", 2, 0, 1); /* another namespace */
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &id, bpc), -EBADMSG);
	id.tag = tt_record_tag("ns", 2, 1, 2); /* another rank */
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &id, bpc), -EBADMSG);
	id = f->id;
	id.key = other;
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &id, bpc), -EBADMSG);
	id = f->id;
	id.parent = other;
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &id, bpc), -EBADMSG);
	id.parent = NULL; /* asked as a root */
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &id, bpc), -EBADMSG);
	/* intact again */
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &f->id, bpc), 0);
}

static void
test_partial_chunk(void **state)
{
	struct fixture *f = *state;
	uint32_t bpc = f->geo.blocks_per_chunk;

	if (bpc < 2) {
		skip();
	}
	encode(f, bpc - 1);
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &f->id, bpc - 1), 0);
	assert_int_equal(tt_record_check(&f->geo, f->rec, f->geo.slot_bytes, &f->id, bpc), -ERANGE);
}

static int
no_exists(void *ctx, const char *const *keys, uint32_t n, int32_t *present)
{
	return -EIO;
}

static void
test_open_checks_arguments(void **state)
{
	struct fixture *f = *state;
	struct tutti_remote_ops ops = {.size = sizeof(ops), .exists = no_exists};
	struct tutti_remote_opts o;
	struct tutti_remote *r = (void *)1;

	tutti_remote_opts_init(&o);
	o.key_prefix = "tutti/1/x/1.1/";
	/* incomplete ops: refused before any call */
	assert_int_equal(tutti_remote_open(&f->g, &ops, NULL, &o, &r), -EINVAL);
	assert_null(r);
	assert_int_equal(tutti_remote_open(&f->g, NULL, NULL, &o, &r), -EINVAL);
	assert_int_equal(tutti_remote_open(&f->g, &ops, NULL, NULL, &r), -EINVAL);
	assert_int_equal(tutti_remote_open(&f->g, &ops, NULL, &o, NULL), -EINVAL);
	assert_int_equal(tutti_remote_lookup(NULL, NULL, 0, 0), -EINVAL);
	assert_int_equal(tutti_remote_fetch(NULL, NULL, NULL, 0, NULL), -EINVAL);
	assert_int_equal(tutti_remote_publish(NULL, NULL, NULL, 0, NULL), -EINVAL);
	assert_int_equal(tutti_remote_flush(NULL, 0), -EINVAL);
	assert_int_equal(tutti_remote_record_bytes(NULL), 0);
	tutti_remote_close(NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_damage_and_forgery),
	    cmocka_unit_test(test_partial_chunk),
	    cmocka_unit_test(test_open_checks_arguments),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
