/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: a batch for the tests of an engine's paths that move many chunks in one call
 * (test_lanes, test_waves): one request of whole chunks of the small geometry (t_geo_small),
 * saved from random source blocks and loaded into random destination blocks, and the checks of
 * what a load wrote. The helpers assert with cmocka, so they are for test bodies.
 */
#ifndef T_BATCH_H
#define T_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "t_kv.h"
#include "t_util.h"
#include "tutti/tutti.h"

/* No chunk: t_batch_assert_load()'s \p bad when every chunk must load. */
#define T_BATCH_NONE UINT32_MAX

struct t_batch {
	struct tutti_geometry geo;
	uint32_t nr_chunks;
	uint32_t key_bytes;
	uint8_t *keys;     /* nr_chunks keys, one chain */
	uint32_t *src_ids; /* t_batch_blocks() distinct blocks each, in the chunks' order */
	uint32_t *dst_ids;
};

/* A batch of \p nr_chunks chunks of \p bpc blocks of t_geo_small(\p nr_layers, \p bpc), keys of
 * \p key_bytes: its keys, then its source and then its destination blocks drawn from \p r.
 * Never fails (aborts); t_batch_free() frees it. */
void t_batch_init(struct t_batch *b, struct t_rng *r, uint32_t nr_layers, uint32_t bpc,
                  uint32_t nr_chunks, uint32_t key_bytes);
void t_batch_free(struct t_batch *b);

/* Blocks of the batch: those of each KV that the tests save from and load into. */
uint32_t t_batch_blocks(const struct t_batch *b);
/* Key of chunk \p k. */
const uint8_t *t_batch_key(const struct t_batch *b, uint32_t k);

/* Options of a store in \p dirs (one directory) with room for the batch and 4 slots to spare,
 * with the batch's key size, on \p engine, logging into \p log (t_store_opts()). */
void t_batch_store_opts(const struct t_batch *b, struct tutti_store_opts *o, const char **dirs,
                        uint32_t engine, struct t_log *log);

/* Save every chunk from \p src; each must be new. */
void t_batch_save(const struct t_batch *b, struct tutti_store *st, const struct t_kv *src);
/* Load layers [lb, le) of every chunk into \p dst, poisoned first; statuses into \p status
 * (nr_chunks of them). Returns the call's result. */
int64_t t_batch_load(const struct t_batch *b, struct tutti_store *st, struct t_kv *dst, uint32_t lb,
                     uint32_t le, int32_t *status);
/* Chunk \p k's layers [lb, le) loaded bit-exact, and its other layers untouched (poisoned). */
bool t_batch_chunk_equal(const struct t_batch *b, const struct t_kv *src, const struct t_kv *dst,
                         uint32_t k, uint32_t lb, uint32_t le);
/* t_batch_load() of layers [lb, le): chunk \p bad (T_BATCH_NONE: none) fails with -EBADMSG,
 * every other chunk loads and is t_batch_chunk_equal(). */
void t_batch_assert_load(const struct t_batch *b, struct tutti_store *st, const struct t_kv *src,
                         struct t_kv *dst, uint32_t lb, uint32_t le, uint32_t bad);

/* Flip bit \p bit of byte \p off of the object of layer \p layer of chunk \p k in the closed or
 * idle store's data file \p path. */
void t_batch_flip_bit(const struct t_batch *b, const char *path, uint32_t k, uint32_t layer,
                      uint64_t off, unsigned bit);

#endif /* T_BATCH_H */
