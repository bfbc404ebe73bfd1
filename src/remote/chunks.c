/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What fetches and publishes share: the plan of a call's chunks, the mover for the caller's
 * paged KV, and what a chunk's record must say about itself.
 */
#include <errno.h>

#include "remote/remote_impl.h"

static int
check_request(const struct tutti_remote *r, const struct tutti_kv *kv,
              const struct tutti_request *q, bool load)
{
	uint64_t bpc = r->geo.blocks_per_chunk, moved, total;

	if (q->size != sizeof(*q) || q->reserved != 0 || q->keys == NULL || q->nr_keys == 0 ||
	    q->first_chunk >= q->nr_keys || q->nr_blocks == 0 || q->block_ids == NULL ||
	    q->skip_blocks >= bpc || (!load && q->skip_blocks != 0)) {
		return -EINVAL;
	}
	moved = q->nr_keys - q->first_chunk;
	total = (uint64_t)q->skip_blocks + q->nr_blocks;
	if (total <= (moved - 1) * bpc || total > moved * bpc) {
		return -EINVAL;
	}
	for (uint32_t i = 0; i < q->nr_blocks; i++) {
		if (q->block_ids[i] >= kv->nr_blocks) {
			return -EINVAL;
		}
	}
	return 0;
}

int64_t
tt_remote_plan(const struct tutti_remote *r, const struct tutti_kv *kv,
               const struct tutti_request *reqs, uint32_t nr_reqs, bool load,
               struct tt_remote_chunk **out)
{
	uint64_t nr = 0, bpc = r->geo.blocks_per_chunk, c = 0;
	struct tt_remote_chunk *chunks;

	if (kv == NULL || (reqs == NULL && nr_reqs > 0) || !tt_geo_equal(&kv->geo, &r->geo)) {
		return -EINVAL;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		int rc = check_request(r, kv, &reqs[i], load);

		if (rc < 0) {
			return rc;
		}
		nr += reqs[i].nr_keys - reqs[i].first_chunk;
	}
	if (nr > UINT32_MAX / 2) {
		return -EINVAL;
	}
	chunks = tt_calloc(nr, sizeof(*chunks));
	if (chunks == NULL) {
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		const struct tutti_request *q = &reqs[i];
		uint64_t total = (uint64_t)q->skip_blocks + q->nr_blocks;

		for (uint32_t k = q->first_chunk; k < q->nr_keys; k++, c++) {
			uint64_t start = (uint64_t)(k - q->first_chunk) * bpc;
			uint64_t end = TT_MIN(start + bpc, total);
			uint64_t from = TT_MAX(start, (uint64_t)q->skip_blocks);

			chunks[c] =
			    (struct tt_remote_chunk){.req = q,
			                             .key = k,
			                             .id_off = (uint32_t)(from - q->skip_blocks),
			                             .nr_moved = (uint32_t)(end - from),
			                             .obj_skip = (uint32_t)(from - start)};
		}
	}
	*out = chunks;
	return (int64_t)nr;
}

int
tt_remote_mover(struct tutti_remote *r, const struct tutti_kv *kv, const struct tt_mover_ops **ops,
                void **ctx)
{
	*ops = &tt_mover_cpu;
	*ctx = NULL;
	if (kv->mem != TUTTI_MEM_CUDA) {
		return 0;
	}
	if (!r->ring_pinned || (r->pub != NULL && !r->pub_pinned)) {
		return -EOPNOTSUPP; /* the GPU reads and writes our memory in place */
	}
	if (r->gpu != NULL && tt_gpu_device(r->gpu) != kv->device) {
		return -EINVAL; /* one GPU per handle, as per process rank */
	}
	if (r->gpu == NULL) {
		struct tt_gpu_conf conf = {
		    .device = kv->device, .max_blocks = TT_REMOTE_GPU_MAX_BLOCKS, .log = &r->log};
		int rc = tt_gpu_open(&conf, &r->gpu);

		if (rc < 0) {
			return rc;
		}
	}
	*ops = &tt_mover_cuda;
	*ctx = r->gpu;
	return 0;
}

void
tt_remote_record_id(const struct tutti_remote *r, const struct tutti_request *q, uint32_t k,
                    struct tt_record_id *id)
{
	id->tag = r->tag;
	id->key_bytes = r->key_bytes;
	id->key = q->keys + (size_t)k * r->key_bytes;
	id->parent = k > 0 ? q->keys + (size_t)(k - 1) * r->key_bytes : NULL;
}
