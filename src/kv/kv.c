/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Registration of paged KV memory as segments: tutti_kv_create checks every segment against the
 * geometry (and, for GPU memory, asks the GPU layer which device holds it) and copies them.
 */
#include <errno.h>
#include <string.h>

#include "common/common.h"
#include "gpu/gpu.h"
#include "kv/kv.h"

static int
check_segment(const struct tutti_segment *seg, uint32_t nr_blocks)
{
	uint64_t last;

	if (seg->base == 0 || seg->bytes == 0) {
		return -EINVAL;
	}
	/* The last byte of the last block must be addressable without wrapping. */
	if (seg->block_stride != 0 && (uint64_t)(nr_blocks - 1) > UINT64_MAX / seg->block_stride) {
		return -EINVAL;
	}
	last = (uint64_t)(nr_blocks - 1) * seg->block_stride;
	if (last > UINT64_MAX - seg->base || seg->bytes > UINT64_MAX - seg->base - last) {
		return -EINVAL;
	}
	/* Blocks of one segment must not overlap, or a scatter would clobber its own output. */
	if (nr_blocks > 1 && seg->block_stride < seg->bytes) {
		return -EINVAL;
	}
	return 0;
}

/* Every segment of CUDA KV must be device memory of one GPU. */
static int
check_device_memory(const struct tutti_segment *segs, uint64_t nr, int *device)
{
	for (uint64_t i = 0; i < nr; i++) {
		int dev, rc = tt_gpu_device_of((const void *)(uintptr_t)segs[i].base, &dev);

		if (rc < 0) {
			return rc;
		}
		if (i > 0 && dev != *device) {
			return -EINVAL;
		}
		*device = dev;
	}
	return 0;
}

int
tutti_kv_create(const struct tutti_geometry *geo, const struct tutti_segment *segs,
                uint32_t segs_per_layer, uint32_t nr_blocks, uint32_t mem, struct tutti_kv **out)
{
	struct tutti_kv *kv;
	struct tt_geo g;
	uint64_t nr_segs;
	int rc, device = -1;

	if (out == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	rc = tt_geo_derive(geo, &g);
	if (rc < 0) {
		return rc;
	}
	if (segs == NULL || segs_per_layer == 0 || segs_per_layer > TT_MAX_SEGS_PER_LAYER ||
	    nr_blocks == 0) {
		return -EINVAL;
	}
	if (mem != TUTTI_MEM_HOST && mem != TUTTI_MEM_CUDA) {
		return -EOPNOTSUPP;
	}
	for (uint32_t l = 0; l < g.g.nr_layers; l++) {
		uint64_t sum = 0;

		for (uint32_t s = 0; s < segs_per_layer; s++) {
			const struct tutti_segment *seg = &segs[(uint64_t)l * segs_per_layer + s];

			rc = check_segment(seg, nr_blocks);
			if (rc < 0) {
				return rc;
			}
			if (seg->bytes > g.layer_block_bytes - sum) {
				return -EINVAL; /* checked before adding, so the sum cannot wrap */
			}
			sum += seg->bytes;
		}
		if (sum != g.layer_block_bytes) {
			return -EINVAL;
		}
	}
	if (mem == TUTTI_MEM_CUDA) {
		rc = check_device_memory(segs, (uint64_t)g.g.nr_layers * segs_per_layer, &device);
		if (rc < 0) {
			return rc;
		}
	}
	kv = tt_calloc(1, sizeof(*kv));
	if (kv == NULL) {
		return -ENOMEM;
	}
	nr_segs = (uint64_t)g.g.nr_layers * segs_per_layer;
	kv->segs = tt_malloc(nr_segs * sizeof(*segs));
	if (kv->segs == NULL) {
		tt_free(kv);
		return -ENOMEM;
	}
	memcpy(kv->segs, segs, nr_segs * sizeof(*segs));
	kv->geo = g;
	kv->segs_per_layer = segs_per_layer;
	kv->nr_blocks = nr_blocks;
	kv->mem = mem;
	kv->device = device;
	*out = kv;
	return 0;
}

void
tutti_kv_destroy(struct tutti_kv *kv)
{
	if (kv == NULL) {
		return;
	}
	tt_free(kv->segs);
	tt_free(kv);
}
