/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: GPU-memory paged KV for tests (see t_gpu.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "t_gpu.h"

int
d_kv_alloc(struct t_kv *host, struct d_kv *d)
{
	uint64_t nr = (uint64_t)host->geo.nr_layers * host->segs_per_layer;
	int rc;

	memset(d, 0, sizeof(*d));
	d->host = host;
	rc = tt_gpu_dev_alloc(host->mem_bytes, (void **)&d->mem);
	if (rc < 0) {
		return rc;
	}
	d->segs = calloc(nr, sizeof(*d->segs));
	if (d->segs == NULL) {
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < nr; i++) {
		d->segs[i] = host->segs[i];
		d->segs[i].base = host->segs[i].base - (uintptr_t)host->mem + (uintptr_t)d->mem;
	}
	return tutti_kv_create(&host->geo, d->segs, host->segs_per_layer, host->nr_blocks,
	                       TUTTI_MEM_CUDA, &d->kv);
}

void
d_kv_free(struct d_kv *d)
{
	tutti_kv_destroy(d->kv);
	free(d->segs);
	tt_gpu_dev_free(d->mem);
	memset(d, 0, sizeof(*d));
}

int
d_kv_upload(struct d_kv *d)
{
	return tt_gpu_copy(d->mem, d->host->mem, d->host->mem_bytes);
}

int
d_kv_download(struct d_kv *d)
{
	return tt_gpu_copy(d->host->mem, d->mem, d->host->mem_bytes);
}
