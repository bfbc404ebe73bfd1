/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: store fixtures shared by the tests: the options of a store on test directories,
 * a small geometry, requests, random keys and statistics, the fixture of a test in a temporary
 * directory, and a test case's store directory and KV. The helpers that return a value assert
 * with cmocka, so they are for test bodies and setups run by cmocka.
 */
#ifndef T_STORE_H
#define T_STORE_H

#include <stdint.h>

#include "t_kv.h"
#include "t_util.h"
#include "tutti/tutti.h"

/*
 * Options of a store on \p nr_dirs directories \p dirs, created if missing (TUTTI_OPEN_CREATE),
 * with room for \p slots slots of \p geo (NULL: capacity 0, as TUTTI_OPEN_EXISTING takes it), on
 * \p engine, logging into \p log (NULL: no log). Everything else is tutti_store_opts_init()'s.
 */
void t_store_opts(struct tutti_store_opts *o, const struct tutti_geometry *geo, const char **dirs,
                  uint32_t nr_dirs, uint64_t slots, uint32_t engine, struct t_log *log);

/*
 * \p nr_layers layers of 1 KV head of dimension 64 with 2-byte elements in 16-token blocks, \p bpc
 * blocks per chunk: 4 KiB layer blocks, so blocks-first memory (one 4 KiB segment per block)
 * takes the direct path and KV-first memory (two 2 KiB segments) is staged.
 */
struct tutti_geometry t_geo_small(uint32_t nr_layers, uint32_t bpc);

/* A request for chunks [first, nr_keys) of the chain \p keys, from block \p skip of chunk
 * \p first on, into or out of the \p nr_ids blocks \p ids. */
struct tutti_request t_request(const uint8_t *keys, uint32_t nr_keys, uint32_t first, uint32_t skip,
                               const uint32_t *ids, uint32_t nr_ids);

/* \p n random keys of \p key_bytes bytes from \p r, malloc'd; never NULL. */
uint8_t *t_keys_new(struct t_rng *r, uint32_t n, uint32_t key_bytes);

/* The statistics of \p st (the call must succeed). */
struct tutti_stats t_store_stats(struct tutti_store *st);

/* The fixture of a test in a temporary directory of its own: the directory, a geometry, a log
 * recorder and a seeded random source. */
struct t_tmp_fixture {
	char *tmp;
	struct tutti_geometry geo;
	struct t_log rec;
	struct t_rng r;
};

/* A cmocka setup's work: *state becomes a new fixture of \p geo whose random source starts from
 * \p seed. Returns 0, or -1 when the fixture or its directory cannot be made. */
int t_tmp_fixture_setup(void **state, const struct tutti_geometry *geo, uint64_t seed);
/* A cmocka teardown: the directory removed, the fixture freed. */
int t_tmp_fixture_teardown(void **state);

/* What one test case works with beside its store: the store's directory, its data file, and KV
 * to save from (random) and to load into (poisoned). */
struct t_store_case {
	char *dir;
	char *path; /* dir's data file */
	struct t_kv *src;
	struct t_kv *dst;
};

/*
 * The case of directory "\p parent/\p name" (not created) and KV of \p nr_blocks blocks of \p geo:
 * the source in \p src_layout, filled from \p r, the destination in \p dst_layout. Never fails
 * (a cmocka assertion); t_store_case_free() frees what it holds.
 */
struct t_store_case t_store_case_new(const char *parent, const char *name,
                                     const struct tutti_geometry *geo, uint32_t nr_blocks,
                                     enum t_layout src_layout, enum t_layout dst_layout,
                                     struct t_rng *r);
void t_store_case_free(struct t_store_case *tc);

#endif /* T_STORE_H */
