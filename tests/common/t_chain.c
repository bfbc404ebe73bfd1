/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the fixture of the close-and-reopen tests (see t_chain.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "t_chain.h"
#include "t_disk.h"

/* cmocka setup: *state, the engine's number on entry (the prestate t_chain_run() gives every
 * test), becomes the test's fixture. */
static int
chain_setup(void **state)
{
	const int *engine = *state;
	struct t_chain_fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		free(f);
		return -1;
	}
	f->engine = (uint32_t)*engine;
	f->geo = t_geo_small(2, T_CHAIN_BPC);
	t_rng_init(&f->r, t_seed(83));
	t_random_distinct(&f->r, f->src_ids, T_CHAIN_NR_BLOCKS, T_CHAIN_NR_BLOCKS);
	*state = f;
	return 0;
}

static int
chain_teardown(void **state)
{
	struct t_chain_fixture *f = *state;

	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

int
t_chain_run(const char *suite, const struct CMUnitTest *tests, size_t nr)
{
	struct CMUnitTest *with_fixture = calloc(nr ? nr : 1, sizeof(*with_fixture));
	int engine = 0, failed;

	if (with_fixture == NULL) {
		return 1;
	}
	for (size_t i = 0; i < nr; i++) {
		with_fixture[i] = tests[i];
		with_fixture[i].setup_func = chain_setup;
		with_fixture[i].teardown_func = chain_teardown;
		/* Read by the setup, when t_run_per_engine() has set the engine of the round. */
		with_fixture[i].initial_state = &engine;
	}
	failed = t_run_per_engine(suite, with_fixture, nr, false, &engine);
	free(with_fixture);
	return failed;
}

char *
t_chain_dir(const struct t_chain_fixture *f, const char *name)
{
	return t_path_join(f->tmp, name);
}

int
t_open_rc(struct t_chain_fixture *f, const struct tutti_geometry *g, const char *dir,
          uint64_t slots, const struct t_how *h, struct tutti_store **st)
{
	static const struct t_how dflt;
	struct tutti_store_opts o;
	const char *dirs[1] = {dir};

	if (h == NULL) {
		h = &dflt;
	}
	t_store_opts(&o, g, dirs, 1, slots, f->engine, &f->rec);
	o.flags = (h->no_create ? 0 : TUTTI_OPEN_CREATE) | h->flags;
	o.ns = h->ns != NULL ? h->ns : T_CHAIN_NS;
	o.ns_bytes = (uint32_t)strlen(o.ns);
	o.key_bytes = h->key_bytes ? h->key_bytes : T_CHAIN_KB;
	o.durability = h->durability;
	t_log_reset(&f->rec);
	return tutti_store_open(g, &o, st);
}

struct tutti_store *
t_open_ok(struct t_chain_fixture *f, const struct tutti_geometry *g, const char *dir,
          uint64_t slots, const struct t_how *h)
{
	struct tutti_store *st = NULL;

	assert_int_equal(t_open_rc(f, g, dir, slots, h, &st), 0);
	assert_non_null(st);
	return st;
}

void
t_assert_recovery(struct tutti_store *st, uint64_t recovered, uint64_t dropped, uint64_t orphans,
                  uint64_t duplicates)
{
	struct tutti_stats s = t_store_stats(st);

	assert_int_equal(s.recovered_chunks, recovered);
	assert_int_equal(s.recovery_dropped, dropped);
	assert_int_equal(s.recovery_orphans, orphans);
	assert_int_equal(s.recovery_duplicates, duplicates);
	assert_int_equal(s.used_slots, recovered);
}

struct t_kv *
t_chain_kv(struct t_chain_fixture *f, const struct tutti_geometry *g, enum t_layout layout,
           bool random)
{
	return t_kv_new(g, layout, T_CHAIN_NR_BLOCKS, random ? &f->r : NULL);
}

struct t_store_case
t_chain_case_new(struct t_chain_fixture *f, const char *name, enum t_layout src_layout,
                 enum t_layout dst_layout)
{
	return t_store_case_new(f->tmp, name, &f->geo, T_CHAIN_NR_BLOCKS, src_layout, dst_layout,
	                        &f->r);
}

void
t_make_chain(struct t_chain_fixture *f, struct t_chain *c, uint32_t nr_keys, uint32_t nr_blocks,
             const struct t_chain *prefix, uint32_t shared)
{
	assert_true(nr_keys <= T_CHAIN_MAX_KEYS && nr_blocks > (nr_keys - 1) * T_CHAIN_BPC &&
	            nr_blocks <= nr_keys * T_CHAIN_BPC && shared <= nr_keys);
	memset(c, 0, sizeof(*c));
	c->nr_keys = nr_keys;
	c->nr_blocks = nr_blocks;
	t_rng_fill(&f->r, c->keys, (size_t)nr_keys * T_CHAIN_KB);
	for (uint32_t b = 0; b < nr_blocks; b++) {
		assert_true(f->next_src < T_CHAIN_NR_BLOCKS);
		c->ids[b] = f->src_ids[f->next_src++];
	}
	if (prefix != NULL && shared > 0) {
		assert_true(shared <= prefix->nr_keys && shared * T_CHAIN_BPC <= prefix->nr_blocks);
		memcpy(c->keys, prefix->keys, (size_t)shared * T_CHAIN_KB);
		memcpy(c->ids, prefix->ids, (size_t)shared * T_CHAIN_BPC * sizeof(c->ids[0]));
	}
}

const uint8_t *
t_key_of(const struct t_chain *c, uint32_t i)
{
	return c->keys + (size_t)i * T_CHAIN_KB;
}

uint32_t
t_chunk_blocks(const struct t_chain *c, uint32_t i)
{
	return i + 1 < c->nr_keys ? T_CHAIN_BPC : c->nr_blocks - i * T_CHAIN_BPC;
}

struct tutti_request
t_chain_req(const struct t_chain *c, uint32_t nr_keys, uint32_t first, const uint32_t *ids)
{
	uint32_t end = nr_keys == c->nr_keys ? c->nr_blocks : nr_keys * T_CHAIN_BPC;

	return t_request(c->keys, nr_keys, first, 0, ids + first * T_CHAIN_BPC,
	                 end - first * T_CHAIN_BPC);
}

int64_t
t_save_keys(struct tutti_store *st, const struct t_kv *src, const struct t_chain *c,
            uint32_t nr_keys, int32_t *status)
{
	struct tutti_request r = t_chain_req(c, nr_keys, 0, c->ids);

	return tutti_store_save(st, src->kv, &r, 1, status);
}

void
t_save_chain(struct tutti_store *st, const struct t_kv *src, const struct t_chain *c,
             uint32_t nr_present)
{
	int32_t status[T_CHAIN_MAX_KEYS];

	assert_int_equal(t_save_keys(st, src, c, c->nr_keys, status), c->nr_keys - nr_present);
	for (uint32_t i = 0; i < c->nr_keys; i++) {
		assert_int_equal(status[i], i < nr_present ? 1 : 0);
	}
}

int64_t
t_load_range(struct t_chain_fixture *f, struct tutti_store *st, struct t_kv *dst,
             const struct t_chain *c, uint32_t first, uint32_t nr_keys, uint32_t *dids,
             int32_t *status)
{
	struct tutti_request r;

	t_kv_poison(dst, T_POISON);
	t_random_distinct(&f->r, dids, nr_keys * T_CHAIN_BPC, T_CHAIN_NR_BLOCKS);
	r = t_chain_req(c, nr_keys, first, dids);
	return tutti_store_load(st, dst->kv, &r, 1, 0, dst->geo.nr_layers, status);
}

bool
t_chunk_equal(const struct t_kv *src, const struct t_kv *dst, const struct t_chain *c, uint32_t i,
              const uint32_t *dids)
{
	for (uint32_t b = i * T_CHAIN_BPC; b < i * T_CHAIN_BPC + t_chunk_blocks(c, i); b++) {
		for (uint32_t l = 0; l < src->geo.nr_layers; l++) {
			if (!t_kv_block_equal(src, c->ids[b], dst, dids[b], l)) {
				return false;
			}
		}
	}
	return true;
}

void
t_assert_chain(struct t_chain_fixture *f, struct tutti_store *st, const struct t_kv *src,
               struct t_kv *dst, const struct t_chain *c)
{
	uint32_t dids[T_CHAIN_MAX_KEYS * T_CHAIN_BPC];
	int32_t status[T_CHAIN_MAX_KEYS];
	uint64_t blocks = 0;

	assert_int_equal(tutti_store_lookup(st, c->keys, c->nr_keys, &blocks), c->nr_keys);
	assert_int_equal(blocks, c->nr_blocks);
	assert_int_equal(t_load_range(f, st, dst, c, 0, c->nr_keys, dids, status), c->nr_keys);
	for (uint32_t i = 0; i < c->nr_keys; i++) {
		assert_int_equal(status[i], 0);
		assert_true(t_chunk_equal(src, dst, c, i, dids));
	}
}

void
t_assert_chains(struct t_chain_fixture *f, struct tutti_store *st, const struct t_kv *src,
                struct t_kv *dst, const struct t_chain *c, uint32_t nr)
{
	for (uint32_t i = 0; i < nr; i++) {
		t_assert_chain(f, st, src, dst, &c[i]);
	}
}

void
t_damage_payload(struct t_chain_fixture *f, const char *dir, const struct tutti_geometry *g,
                 const uint8_t *key, uint32_t layer, uint32_t nr_blocks)
{
	char *path = t_data_path(dir);
	uint32_t slot = t_key_slot(path, g, key, T_CHAIN_KB);
	uint64_t payload = nr_blocks * tutti_geometry_layer_block_bytes(g);
	uint64_t off = t_object_off(g, slot, layer) + t_rng_below(&f->r, (uint32_t)payload);

	assert_int_equal(t_disk_flip_bit(path, off, t_rng_below(&f->r, 8)), 0);
	free(path);
}
