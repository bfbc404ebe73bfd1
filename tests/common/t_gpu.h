/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: paged KV in GPU memory for tests, mirroring a host t_kv byte for byte (same
 * offsets), registered with TUTTI_MEM_CUDA.
 */
#ifndef T_GPU_H
#define T_GPU_H

#include "t_kv.h"

struct d_kv {
	struct t_kv *host;
	uint8_t *mem;
	struct tutti_segment *segs;
	struct tutti_kv *kv;
};

/* Allocate device memory shaped like \p host and register it. Returns tutti_kv_create()'s
 * result or the allocation error. */
int d_kv_alloc(struct t_kv *host, struct d_kv *d);
void d_kv_free(struct d_kv *d);
/* Copy the host image to the device, or back. Return 0 or -errno. */
int d_kv_upload(struct d_kv *d);
int d_kv_download(struct d_kv *d);

#endif /* T_GPU_H */
