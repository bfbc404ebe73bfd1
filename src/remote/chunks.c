/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What fetches and publishes share: the mover for the caller's paged KV, and what a chunk's
 * record must say about itself. (Their chunks are planned by src/plan, as the store's are.)
 */
#include <errno.h>

#include "remote/remote_impl.h"

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
