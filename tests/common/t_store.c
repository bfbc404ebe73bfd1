/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: store fixtures shared by the tests (see t_store.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "t_disk.h"
#include "t_store.h"

void
t_store_opts(struct tutti_store_opts *o, const struct tutti_geometry *geo, const char **dirs,
             uint32_t nr_dirs, uint64_t slots, uint32_t engine, struct t_log *log)
{
	tutti_store_opts_init(o);
	o->flags = TUTTI_OPEN_CREATE;
	o->dirs = dirs;
	o->nr_dirs = nr_dirs;
	o->engine = engine;
	if (engine == TUTTI_ENGINE_GPU_URING || engine == TUTTI_ENGINE_AUTO) {
		o->engine_opts = t_engine_opts;
	}
	o->capacity_bytes = geo != NULL ? slots * tutti_geometry_slot_bytes(geo) : 0;
	o->log_fn = log != NULL ? t_log_fn : NULL;
	o->log_arg = log;
}

struct tutti_geometry
t_geo_small(uint32_t nr_layers, uint32_t bpc)
{
	struct tutti_geometry g;

	tutti_geometry_init(&g);
	g.nr_layers = nr_layers;
	g.nr_kv_heads = 1;
	g.head_dim = 64;
	g.chunk_tokens = bpc * g.block_tokens;
	return g;
}

struct tutti_request
t_request(const uint8_t *keys, uint32_t nr_keys, uint32_t first, uint32_t skip, const uint32_t *ids,
          uint32_t nr_ids)
{
	return (struct tutti_request){
	    .size = sizeof(struct tutti_request),
	    .nr_keys = nr_keys,
	    .keys = keys,
	    .first_chunk = first,
	    .skip_blocks = skip,
	    .nr_blocks = nr_ids,
	    .block_ids = ids,
	};
}

uint8_t *
t_keys_new(struct t_rng *r, uint32_t n, uint32_t key_bytes)
{
	uint8_t *k = malloc((size_t)n * key_bytes);

	assert_non_null(k);
	t_rng_fill(r, k, (size_t)n * key_bytes);
	return k;
}

struct tutti_stats
t_store_stats(struct tutti_store *st)
{
	struct tutti_stats s = {.size = sizeof(s)};

	assert_int_equal(tutti_store_get_stats(st, &s), 0);
	return s;
}

int
t_tmp_fixture_setup(void **state, const struct tutti_geometry *geo, uint64_t seed)
{
	struct t_tmp_fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		free(f);
		return -1;
	}
	f->geo = *geo;
	t_rng_init(&f->r, seed);
	*state = f;
	return 0;
}

int
t_tmp_fixture_teardown(void **state)
{
	struct t_tmp_fixture *f = *state;

	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

struct t_store_case
t_store_case_new(const char *parent, const char *name, const struct tutti_geometry *geo,
                 uint32_t nr_blocks, enum t_layout src_layout, enum t_layout dst_layout,
                 struct t_rng *r)
{
	struct t_store_case tc;

	tc.dir = t_path_join(parent, name);
	tc.path = t_data_path(tc.dir);
	tc.src = t_kv_new(geo, src_layout, nr_blocks, r);
	tc.dst = t_kv_new(geo, dst_layout, nr_blocks, NULL);
	return tc;
}

void
t_store_case_free(struct t_store_case *tc)
{
	t_kv_free(tc->src);
	t_kv_free(tc->dst);
	free(tc->path);
	free(tc->dir);
}
