/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request checks and chunk plans (see plan.h).
 */
#include <errno.h>

#include "plan/plan.h"

/* The shape of one request: everything but its block ids. Counts the chunks it moves. */
static int
check_shape(const struct tt_geo *geo, const struct tutti_request *r, bool load,
            const struct tt_log *log, uint32_t *nr_chunks)
{
	uint64_t bpc = geo->blocks_per_chunk, moved, total;

	if (r->size != sizeof(*r) || r->reserved != 0) {
		tt_log_err(log,
		           "request of size %u with reserved %u: the size must be %zu, reserved 0",
		           r->size, r->reserved, sizeof(*r));
		return -EINVAL;
	}
	if (r->keys == NULL || r->nr_keys == 0 || r->first_chunk >= r->nr_keys) {
		tt_log_err(log, "request moves chunks from %u of a chain of %u keys%s",
		           r->first_chunk, r->nr_keys, r->keys == NULL ? " (keys NULL)" : "");
		return -EINVAL;
	}
	if (r->nr_blocks == 0 || r->block_ids == NULL) {
		tt_log_err(log, "request has %u block ids%s", r->nr_blocks,
		           r->block_ids == NULL ? " (block_ids NULL)" : "");
		return -EINVAL;
	}
	if (r->skip_blocks >= bpc || (!load && r->skip_blocks != 0)) {
		tt_log_err(log, "invalid request: skip_blocks %u (%s, %u blocks per chunk)",
		           r->skip_blocks, load ? "load" : "save", (unsigned)bpc);
		return -EINVAL;
	}
	moved = r->nr_keys - r->first_chunk;
	total = (uint64_t)r->skip_blocks + r->nr_blocks;
	/* Every chunk but the last is whole; the last holds at least one block. */
	if (total <= (moved - 1) * bpc || total > moved * bpc) {
		tt_log_err(log,
		           "request of %u chunks from chunk %u has %u blocks (skip %u); "
		           "%u blocks per chunk",
		           r->nr_keys, r->first_chunk, r->nr_blocks, r->skip_blocks, (unsigned)bpc);
		return -EINVAL;
	}
	*nr_chunks = (uint32_t)moved;
	return 0;
}

static int
check_ids(const struct tutti_kv *kv, const struct tutti_request *r, const struct tt_log *log)
{
	for (uint32_t i = 0; i < r->nr_blocks; i++) {
		if (r->block_ids[i] >= kv->nr_blocks) {
			tt_log_err(log, "block id %u is beyond the %u registered blocks",
			           r->block_ids[i], kv->nr_blocks);
			return -EINVAL;
		}
	}
	return 0;
}

int64_t
tt_plan_check(const struct tt_geo *geo, const struct tutti_kv *kv, const struct tutti_request *reqs,
              uint32_t nr_reqs, bool load, const struct tt_log *log)
{
	uint64_t nr = 0;

	if (kv == NULL || (reqs == NULL && nr_reqs > 0)) {
		tt_log_err(log, "%s NULL", kv == NULL ? "kv" : "reqs");
		return -EINVAL;
	}
	if (!tt_geo_equal(&kv->geo, geo)) {
		tt_log_err(log, "the KV was registered for another geometry");
		return -EINVAL;
	}
	/* Shapes and the count first: a call too large is refused before its ids are read. */
	for (uint32_t i = 0; i < nr_reqs; i++) {
		uint32_t n;
		int rc = check_shape(geo, &reqs[i], load, log, &n);

		if (rc < 0) {
			return rc;
		}
		nr += n;
	}
	if (nr > UINT32_MAX) {
		tt_log_err(log, "a call of %llu chunks; at most %u", (unsigned long long)nr,
		           UINT32_MAX);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		int rc = check_ids(kv, &reqs[i], log);

		if (rc < 0) {
			return rc;
		}
	}
	return (int64_t)nr;
}

void
tt_plan_begin(struct tt_plan_iter *it, const struct tt_geo *geo, const struct tutti_request *reqs,
              uint32_t nr_reqs)
{
	*it = (struct tt_plan_iter){.reqs = reqs,
	                            .nr_reqs = nr_reqs,
	                            .blocks_per_chunk = geo->blocks_per_chunk,
	                            .key = nr_reqs > 0 ? reqs[0].first_chunk : 0};
}

bool
tt_plan_next(struct tt_plan_iter *it, struct tt_chunk_plan *out)
{
	const struct tutti_request *r;
	uint64_t bpc = it->blocks_per_chunk, start, end, from;

	while (it->req < it->nr_reqs && it->key >= it->reqs[it->req].nr_keys) {
		it->req++;
		it->key = it->req < it->nr_reqs ? it->reqs[it->req].first_chunk : 0;
	}
	if (it->req == it->nr_reqs) {
		return false;
	}
	r = &it->reqs[it->req];
	/* Chunk k's blocks are [start, end) of the request's blocks counted from the start of
	 * chunk first_chunk; those before skip_blocks are not moved. */
	start = (uint64_t)(it->key - r->first_chunk) * bpc;
	end = TT_MIN(start + bpc, (uint64_t)r->skip_blocks + r->nr_blocks);
	from = TT_MAX(start, (uint64_t)r->skip_blocks);
	*out = (struct tt_chunk_plan){
	    .req = r,
	    .key = it->key,
	    .id_off = (uint32_t)(from - r->skip_blocks),
	    .nr_moved = (uint32_t)(end - from),
	    .obj_skip = (uint32_t)(from - start),
	    .nr_blocks = (uint32_t)(end - start),
	};
	it->key++;
	return true;
}

int
tt_plan_call(const struct tt_geo *geo, const struct tutti_kv *kv, const struct tutti_request *reqs,
             uint32_t nr_reqs, bool load, const struct tt_log *log, struct tt_chunk_plan **out,
             uint32_t *nr_out)
{
	int64_t nr = tt_plan_check(geo, kv, reqs, nr_reqs, load, log);
	struct tt_plan_iter it;
	struct tt_chunk_plan *chunks;
	uint32_t c = 0;

	if (nr < 0) {
		return (int)nr;
	}
	chunks = tt_calloc((size_t)nr, sizeof(*chunks));
	if (chunks == NULL) {
		return -ENOMEM;
	}
	tt_plan_begin(&it, geo, reqs, nr_reqs);
	while (tt_plan_next(&it, &chunks[c])) {
		c++;
	}
	*out = chunks;
	*nr_out = c;
	return 0;
}
