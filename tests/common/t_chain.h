/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the fixture of the tests of what a store keeps across close and reopen
 * (test_recovery, test_fsck, test_partial_loads, test_identity): stores of their own under a
 * temporary directory, on the small geometry (2 layers, 4 blocks per chunk, see t_geo_small),
 * and key chains saved from random source blocks, then found and loaded bit-exact.
 */
#ifndef T_CHAIN_H
#define T_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define T_CHAIN_KB 32u         /* key bytes */
#define T_CHAIN_BPC 4u         /* blocks per chunk */
#define T_CHAIN_NR_BLOCKS 256u /* blocks of every KV */
#define T_CHAIN_MAX_KEYS 4u    /* chunks of a chain */
#define T_CHAIN_NS "test-model/bf16/tp0"
/* Layouts of the small geometry's KV that take the direct and the staged path. */
#define T_CHAIN_DIRECT T_LAYOUT_BLOCKS_FIRST
#define T_CHAIN_STAGED T_LAYOUT_KV_FIRST

struct t_chain_fixture {
	char *tmp;
	uint32_t engine; /* enum tutti_engine of every store opened */
	struct tutti_geometry geo;
	struct t_log rec;
	struct t_rng r;
	uint32_t src_ids[T_CHAIN_NR_BLOCKS]; /* source blocks, in the order chains take them */
	uint32_t next_src;
};

/* A key chain and the source blocks its chunks were saved from. */
struct t_chain {
	uint32_t nr_keys;
	uint32_t nr_blocks;
	uint8_t keys[T_CHAIN_MAX_KEYS * T_CHAIN_KB];
	uint32_t ids[T_CHAIN_MAX_KEYS * T_CHAIN_BPC];
};

/* How to open a store; zero fields take the defaults below. */
struct t_how {
	uint32_t flags; /* TUTTI_OPEN_* beyond CREATE */
	uint32_t durability;
	const char *ns; /* NULL: T_CHAIN_NS */
	uint32_t key_bytes;
	bool no_create;
};

/*
 * A test program's main: run \p tests (cmocka_unit_test()s, \p nr of them) as t_run_per_engine()
 * does, once per CPU-driven engine, each with a t_chain_fixture of its own as *state whose stores
 * run on that engine. Returns what t_run_per_engine() returns.
 */
struct CMUnitTest;
int t_chain_run(const char *suite, const struct CMUnitTest *tests, size_t nr);

/* "<tmp>/\p name", malloc'd. */
char *t_chain_dir(const struct t_chain_fixture *f, const char *name);

/* Open the store in \p dir with \p slots slots of \p g (NULL with TUTTI_OPEN_EXISTING) as \p h
 * says (NULL: the defaults), logging into f->rec (reset first). Returns tutti_store_open()'s
 * result; t_open_ok asserts success. */
int t_open_rc(struct t_chain_fixture *f, const struct tutti_geometry *g, const char *dir,
              uint64_t slots, const struct t_how *h, struct tutti_store **st);
struct tutti_store *t_open_ok(struct t_chain_fixture *f, const struct tutti_geometry *g,
                              const char *dir, uint64_t slots, const struct t_how *h);

/* What recovery counted at open, and that the store holds exactly the recovered chunks. */
void t_assert_recovery(struct tutti_store *st, uint64_t recovered, uint64_t dropped,
                       uint64_t orphans, uint64_t duplicates);

/* A KV of T_CHAIN_NR_BLOCKS blocks of \p g: random (\p random) or poisoned. */
struct t_kv *t_chain_kv(struct t_chain_fixture *f, const struct tutti_geometry *g,
                        enum t_layout layout, bool random);

/* The case of directory "<tmp>/\p name" (t_store_case_new()), KV of T_CHAIN_NR_BLOCKS blocks of
 * the fixture's geometry: its source in \p src_layout, its destination in \p dst_layout. */
struct t_store_case t_chain_case_new(struct t_chain_fixture *f, const char *name,
                                     enum t_layout src_layout, enum t_layout dst_layout);

/*
 * A chain of \p nr_keys keys and \p nr_blocks blocks whose first \p shared chunks are those of
 * \p prefix (same keys, same source blocks); the other chunks get new keys and new blocks.
 */
void t_make_chain(struct t_chain_fixture *f, struct t_chain *c, uint32_t nr_keys,
                  uint32_t nr_blocks, const struct t_chain *prefix, uint32_t shared);
/* Key of chunk \p i, and the blocks chunk \p i holds. */
const uint8_t *t_key_of(const struct t_chain *c, uint32_t i);
uint32_t t_chunk_blocks(const struct t_chain *c, uint32_t i);
/* The request for chunks [first, nr_keys) of \p c, blocks taken from \p ids (indexed like
 * c->ids). */
struct tutti_request t_chain_req(const struct t_chain *c, uint32_t nr_keys, uint32_t first,
                                 const uint32_t *ids);

/* Save chunks [0, nr_keys) of \p c; returns the call's result and the statuses. */
int64_t t_save_keys(struct tutti_store *st, const struct t_kv *src, const struct t_chain *c,
                    uint32_t nr_keys, int32_t *status);
/* Save the whole chain; every status must be 1 (already stored) for the first \p nr_present
 * chunks and 0 for the others. */
void t_save_chain(struct tutti_store *st, const struct t_kv *src, const struct t_chain *c,
                  uint32_t nr_present);
/*
 * Load chunks [first, nr_keys) of \p c into random blocks of a poisoned \p dst; statuses into
 * \p status; returns the call's result. \p dids receives the destination blocks.
 */
int64_t t_load_range(struct t_chain_fixture *f, struct tutti_store *st, struct t_kv *dst,
                     const struct t_chain *c, uint32_t first, uint32_t nr_keys, uint32_t *dids,
                     int32_t *status);
/* Chunk \p i of \p c, loaded into dst at dids (indexed like c->ids), equals the source. */
bool t_chunk_equal(const struct t_kv *src, const struct t_kv *dst, const struct t_chain *c,
                   uint32_t i, const uint32_t *dids);
/* The whole chain is found and loads bit-exact. */
void t_assert_chain(struct t_chain_fixture *f, struct tutti_store *st, const struct t_kv *src,
                    struct t_kv *dst, const struct t_chain *c);
/* t_assert_chain() of each of the \p nr chains \p c. */
void t_assert_chains(struct t_chain_fixture *f, struct tutti_store *st, const struct t_kv *src,
                     struct t_kv *dst, const struct t_chain *c, uint32_t nr);

/* Flip one bit of a random byte of the payload (\p nr_blocks blocks) of layer \p layer of the
 * chunk keyed \p key in the store in \p dir. */
void t_damage_payload(struct t_chain_fixture *f, const char *dir, const struct tutti_geometry *g,
                      const uint8_t *key, uint32_t layer, uint32_t nr_blocks);

#endif /* T_CHAIN_H */
