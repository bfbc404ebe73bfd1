/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: a batch of many chunks moved in one call (see t_batch.h).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "t_batch.h"
#include "t_disk.h"
#include "t_store.h"

void
t_batch_init(struct t_batch *b, struct t_rng *r, uint32_t nr_layers, uint32_t bpc,
             uint32_t nr_chunks, uint32_t key_bytes)
{
	b->geo = t_geo_small(nr_layers, bpc);
	b->nr_chunks = nr_chunks;
	b->key_bytes = key_bytes;
	b->keys = t_keys_new(r, nr_chunks, key_bytes);
	b->src_ids = malloc((size_t)t_batch_blocks(b) * sizeof(*b->src_ids));
	b->dst_ids = malloc((size_t)t_batch_blocks(b) * sizeof(*b->dst_ids));
	if (b->src_ids == NULL || b->dst_ids == NULL) {
		abort();
	}
	t_random_distinct(r, b->src_ids, t_batch_blocks(b), t_batch_blocks(b));
	t_random_distinct(r, b->dst_ids, t_batch_blocks(b), t_batch_blocks(b));
}

void
t_batch_free(struct t_batch *b)
{
	free(b->keys);
	free(b->src_ids);
	free(b->dst_ids);
}

/* Blocks per chunk. */
static uint32_t
batch_bpc(const struct t_batch *b)
{
	return b->geo.chunk_tokens / b->geo.block_tokens;
}

uint32_t
t_batch_blocks(const struct t_batch *b)
{
	return b->nr_chunks * batch_bpc(b);
}

const uint8_t *
t_batch_key(const struct t_batch *b, uint32_t k)
{
	return b->keys + (size_t)k * b->key_bytes;
}

void
t_batch_store_opts(const struct t_batch *b, struct tutti_store_opts *o, const char **dirs,
                   uint32_t engine, struct t_log *log)
{
	t_store_opts(o, &b->geo, dirs, 1, b->nr_chunks + 4, engine, log);
	o->key_bytes = b->key_bytes;
}

/* The request of every chunk, into or out of \p ids. */
static struct tutti_request
batch_request(const struct t_batch *b, const uint32_t *ids)
{
	return t_request(b->keys, b->nr_chunks, 0, 0, ids, t_batch_blocks(b));
}

void
t_batch_save(const struct t_batch *b, struct tutti_store *st, const struct t_kv *src)
{
	struct tutti_request r = batch_request(b, b->src_ids);
	int32_t *status = calloc(b->nr_chunks, sizeof(*status));

	assert_non_null(status);
	assert_int_equal(tutti_store_save(st, src->kv, &r, 1, status), b->nr_chunks);
	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		assert_int_equal(status[i], 0);
	}
	free(status);
}

int64_t
t_batch_load(const struct t_batch *b, struct tutti_store *st, struct t_kv *dst, uint32_t lb,
             uint32_t le, int32_t *status)
{
	struct tutti_request r = batch_request(b, b->dst_ids);

	t_kv_poison(dst, T_POISON);
	return tutti_store_load(st, dst->kv, &r, 1, lb, le, status);
}

bool
t_batch_chunk_equal(const struct t_batch *b, const struct t_kv *src, const struct t_kv *dst,
                    uint32_t k, uint32_t lb, uint32_t le)
{
	uint32_t bpc = batch_bpc(b);

	for (uint32_t blk = k * bpc; blk < (k + 1) * bpc; blk++) {
		for (uint32_t l = 0; l < b->geo.nr_layers; l++) {
			bool in = l >= lb && l < le;

			if (in &&
			    !t_kv_block_equal(src, b->src_ids[blk], dst, b->dst_ids[blk], l)) {
				return false;
			}
			if (!in && !t_kv_block_is(dst, l, b->dst_ids[blk], T_POISON)) {
				return false;
			}
		}
	}
	return true;
}

void
t_batch_assert_load(const struct t_batch *b, struct tutti_store *st, const struct t_kv *src,
                    struct t_kv *dst, uint32_t lb, uint32_t le, uint32_t bad)
{
	int32_t *status = calloc(b->nr_chunks, sizeof(*status));

	assert_non_null(status);
	assert_int_equal(t_batch_load(b, st, dst, lb, le, status),
	                 b->nr_chunks - (bad != T_BATCH_NONE));
	for (uint32_t k = 0; k < b->nr_chunks; k++) {
		if (k == bad) {
			assert_int_equal(status[k], -EBADMSG);
		} else {
			assert_int_equal(status[k], 0);
			assert_true(t_batch_chunk_equal(b, src, dst, k, lb, le));
		}
	}
	free(status);
}

void
t_batch_flip_bit(const struct t_batch *b, const char *path, uint32_t k, uint32_t layer,
                 uint64_t off, unsigned bit)
{
	uint32_t slot = t_key_slot(path, &b->geo, t_batch_key(b, k), b->key_bytes);

	assert_int_equal(t_disk_flip_bit(path, t_object_off(&b->geo, slot, layer) + off, bit), 0);
}
