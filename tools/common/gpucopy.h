/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU calls the tools make themselves, through the CUDA runtime, behind a C interface that
 * names no CUDA type: pinned host memory, device memory, copies, fills, streams and events,
 * enough to measure what PCIe gives beside the storage (the ceiling's pinned copies and its
 * through phase) and for a benchmark to hold KV in GPU memory. The library's GPU layer is
 * internal (src/gpu/gpu.h), and a copy limit is no store operation, so the tools do not ask
 * libtutti for it (docs/design.md, "Tools and benchmarks"). Built from gpucopy_cuda.c where
 * CUDA is, gpucopy_none.c (every call -EOPNOTSUPP) elsewhere.
 *
 * Every call returns 0 or a negative errno: -ENODEV where there is no GPU or no driver (or no
 * device of that number), -ENOMEM, -EINVAL, -EIO for any other CUDA error, -EOPNOTSUPP in a
 * build without CUDA.
 */
#ifndef TUTTI_TOOLS_GPUCOPY_H
#define TUTTI_TOOLS_GPUCOPY_H

#include <stddef.h>

int gpucopy_set_device(int device);
int gpucopy_dev_alloc(size_t bytes, void **p);
void gpucopy_dev_free(void *p);
/* Pinned host memory, allocated, or \p p (page-aligned) pinned where it lies. */
int gpucopy_host_alloc(size_t bytes, void **p);
void gpucopy_host_free(void *p);
int gpucopy_host_register(void *p, size_t bytes);
void gpucopy_host_unregister(void *p);
/* Copy \p bytes between host and device memory (either way), done when it returns. */
int gpucopy_copy(void *dst, const void *src, size_t bytes);
/* Set \p bytes of device memory at \p dst to \p byte, done when it returns. */
int gpucopy_fill(void *dst, int byte, size_t bytes);
/* A non-blocking stream of GPU \p device, copies queued on it, and events that say when what
 * was queued before them is done (waited for by sleeping, not spinning). */
int gpucopy_stream_create(int device, void **stream);
void gpucopy_stream_destroy(void *stream);
int gpucopy_copy_async(void *dst, const void *src, size_t bytes, void *stream);
int gpucopy_event_create(int device, void **event);
void gpucopy_event_destroy(void *event);
int gpucopy_event_record(void *event, void *stream);
int gpucopy_event_sync(void *event);

#endif /* TUTTI_TOOLS_GPUCOPY_H */
