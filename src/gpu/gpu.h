/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU side of the data path behind a C interface that names no CUDA type: CUDA kernels that
 * move one layer of a whole batch of chunks between paged KV and objects in one launch, and the
 * memory they need (pinned, mapped host memory for staging; device memory for tests and
 * benchmarks). Implemented in cuda/ when the library is built with CUDA; otherwise every call
 * fails with -EOPNOTSUPP (gpu_none.c). Engines build kernels of their own on this layer (engine
 * gpu-uring's: src/engine/gpu_uring/kernel.h) through its CUDA-side interface, cuda/gpu.cuh.
 *
 * Addresses are plain pointers: with unified addressing, mapped pinned host memory has the same
 * address on the host and the device, so an object may live in device memory or in mapped host
 * memory (read or written across PCIe without a copy).
 */
#ifndef TT_GPU_H
#define TT_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/common.h"
#include "layout/layout.h"
#include "tutti/kv.h"

struct tt_gpu;

struct tt_gpu_conf {
	int device;
	uint32_t max_blocks; /* paged blocks one launch may move; larger calls are split */
	const struct tt_log *log;
	/* Launch on a stream of the device's greatest priority: the block scheduler then gives
	 * this context's kernels (all of them: a store's loads and saves alike) SMs before those of
	 * normal streams (a serving engine's compute) as blocks retire, so loads keep pace while
	 * compute fills the GPU. */
	bool high_priority;
};

/* Number of CUDA devices, -ENODEV without a usable driver, -EOPNOTSUPP without CUDA support. */
int tt_gpu_device_count(void);

/* A context on \p conf->device with its own stream and launch descriptors. Returns 0,
 * -EOPNOTSUPP, -ENODEV, -EINVAL, -ENOMEM. */
int tt_gpu_open(const struct tt_gpu_conf *conf, struct tt_gpu **out);
void tt_gpu_close(struct tt_gpu *g);
int tt_gpu_device(const struct tt_gpu *g);
/* The streaming multiprocessors of the context's device. */
int tt_gpu_sms(const struct tt_gpu *g);

/*
 * Gather: copy, for every move, its blocks of layer \p layer of \p kv (device memory) into
 * move->obj, packed in the canonical layout. Scatter: the reverse. One kernel launch per call
 * (more only when a call holds more than max_blocks blocks); asynchronous on the context's
 * stream: the objects and the KV must not be touched until tt_gpu_sync returns. Returns 0,
 * -EINVAL (a kv not in device memory of this context's device, bad arguments) or -EIO.
 */
int tt_gpu_gather(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer,
                  const struct tt_move *moves, uint32_t nr_moves);
int tt_gpu_scatter(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer,
                   const struct tt_move *moves, uint32_t nr_moves);
/* Wait for everything launched on the context. Returns 0 or -EIO (the kernel failed). */
int tt_gpu_sync(struct tt_gpu *g);
/* Make now what the context's loads and saves would otherwise make at their first call (device
 * words, events, the checksum secret in constant memory, every kernel's module of this layer
 * under CUDA's lazy loading), so that none of them allocates, copies or loads while a compute
 * stream waits for a layer. An engine with kernels of its own prepares those itself (gpu-uring:
 * tt_gpu_uring_dev_open). Returns 0, -EINVAL, -ENOMEM or -EIO. */
int tt_gpu_prepare(struct tt_gpu *g);
/* Kernel launches made by the context so far. */
uint64_t tt_gpu_launches(const struct tt_gpu *g);

/* One object of a run of objects moved by a kernel between paged KV and their slots: the objects
 * API below, and engine gpu-uring's layer kernel (src/engine/gpu_uring/kernel.h). */
struct tt_gpu_obj {
	uint64_t off;     /* file offset of the object */
	uint64_t csum;    /* load: the expected checksum; save: out, the checksum written */
	uint32_t file;    /* gpu-uring: index of the file in the ring */
	uint32_t ids_off; /* index of its first moved block id in the job's ids */
	uint32_t nr_moved;
	uint32_t skip;   /* load: blocks of the object before the first one moved */
	uint32_t stored; /* load: blocks the object holds (the checksummed payload) */
	int32_t status;  /* in: 0; out: 0, -EBADMSG or the I/O error */
};

/*
 * Objects in device memory (engine gds, and the CPU-driven engines' waves): \p nr objects of a
 * run in layer-major order, \p per_layer objects a layer; objs[0] is object \p skip (below
 * per_layer) of layer \p layer, and objs[k] belongs to layer layer + (skip + k) / per_layer.
 * Object k lies in the slot of \p slot_bytes at mem + k * slot_bytes. Load (write false): check
 * each object with status 0 against its csum (-EBADMSG on a mismatch, never scattered) and
 * scatter it into the KV; save: gather each object with status 0, hash it into csum and zero its
 * padding. \p objs and \p ids must be readable by the device (mapped host memory, say); results
 * land in \p objs. Layer blocks must exceed TT_XXH3_MIDSIZE_MAX bytes. One launch per 16
 * layers of the run, their objects side by side, asynchronous on the context's stream.
 * Returns 0, -EINVAL (tt_kv_run_fits fails, bad arguments) or -EIO.
 */
int tt_gpu_objs(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer, uint32_t per_layer,
                uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr, const uint32_t *ids,
                uint8_t *mem, uint64_t slot_bytes, bool write);
/* Two markers on the context's stream: tt_gpu_mark records marker \p i (0 or 1) after what is
 * launched so far; tt_gpu_wait_mark sleeps until it is passed. Returns 0, -EINVAL or -EIO. */
int tt_gpu_mark(struct tt_gpu *g, unsigned i);
int tt_gpu_wait_mark(struct tt_gpu *g, unsigned i);

/*
 * Waves of whole objects through device staging buffers (the CPU-driven engines' GPU path):
 * copies between pinned host memory and device memory run on a stream of their own beside the
 * context's kernel stream, so that one wave's copy across PCIe overlaps the kernels of the one
 * before. Each of TT_GPU_BUFS buffers orders its own steps: a copy into or out of buffer \p buf
 * starts once the kernels queued on it before are done, and tt_gpu_buf_objs (tt_gpu_objs on
 * objects in the buffer) once the copy queued on it before is. tt_gpu_buf_wait sleeps until the
 * buffer's latest copy is done; tt_gpu_sync waits for both streams. Asynchronous; return 0,
 * -EINVAL, -ENOMEM or -EIO.
 */
#define TT_GPU_BUFS 8u
int tt_gpu_buf_copy(struct tt_gpu *g, unsigned buf, void *dst, const void *src, size_t bytes);
int tt_gpu_buf_objs(struct tt_gpu *g, unsigned buf, const struct tutti_kv *kv, uint32_t layer,
                    uint32_t per_layer, uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr,
                    const uint32_t *ids, uint8_t *mem, uint64_t slot_bytes, bool write);
int tt_gpu_buf_wait(struct tt_gpu *g, unsigned buf);
/* Device memory for the buffers, allocated and freed in stream order (cudaMallocAsync), so that
 * neither synchronises the device while a compute stream waits on a load; usable by both the
 * copies and the kernels. Returns 0, -ENOMEM or -EIO. */
int tt_gpu_buf_alloc(struct tt_gpu *g, size_t bytes, void **out);
void tt_gpu_buf_free(struct tt_gpu *g, void *p);

/* The object checksum (tt_csum) of \p len (> TT_XXH3_MIDSIZE_MAX) bytes of device memory at \p p,
 * computed on the GPU; synchronous. For tests of the GPU hash against the CPU's. */
int tt_gpu_csum(struct tt_gpu *g, const void *p, uint64_t len, uint64_t *out);

/* ---- pipeline signals (cuda/signal.cu) ----
 * One-thread kernels on a caller's stream (a CUDA stream handle; NULL: the legacy default stream)
 * of \p device, for the layerwise pipeline. \p word and \p times are mapped pinned host memory. The
 * calling thread's current device is left as it was. */

/* The stream waits until the sequence number at \p word reaches \p value (compared with
 * wrap-around), or \p timeout_ns passes. times[0] receives the GPU time (%globaltimer, ns) the
 * wait began, times[1] the time it ended, written last, with bit 63 set on a timeout.
 * Returns 0, -EINVAL, -ENODEV or -EIO. */
int tt_gpu_stream_wait(int device, void *stream, const uint32_t *word, uint32_t value,
                       uint64_t timeout_ns, uint64_t *times);
/* Store \p value at \p word (release) once everything before it on \p stream is done; \p time,
 * if not NULL, receives the GPU time it ran. Returns 0, -EINVAL, -ENODEV or -EIO. */
int tt_gpu_stream_signal(int device, void *stream, uint32_t *word, uint32_t value, uint64_t *time);
/* The same signal on the context's own stream (the one its loads run on): \p word receives
 * \p value once everything launched on the context before it is done. */
int tt_gpu_ctx_signal(struct tt_gpu *g, uint32_t *word, uint32_t value, uint64_t *time);
/* Whether everything launched on the context's stream is done, without waiting: 1 (done),
 * 0 (not yet), or -EINVAL / -EIO. */
int tt_gpu_idle(struct tt_gpu *g);
/* A non-blocking stream of \p device (for tests and benchmarks that play a compute stream),
 * its synchronisation and release. Return 0 or a negative errno. */
int tt_gpu_stream_create(int device, void **out);
int tt_gpu_stream_sync(void *stream);
void tt_gpu_stream_destroy(void *stream);
/* A copy of \p bytes between any two addresses queued on \p stream (asynchronous where the host
 * side is pinned), and events that mark a point of a stream and are waited for by sleeping, not
 * spinning: a benchmark whose threads wait on copies leaves their cores to the I/O it measures
 * beside them. \p device is the event's. Return 0 or a negative errno. */
int tt_gpu_copy_async(void *dst, const void *src, size_t bytes, void *stream);
int tt_gpu_event_create(int device, void **out);
int tt_gpu_event_record(void *event, void *stream);
int tt_gpu_event_sync(void *event);
void tt_gpu_event_destroy(void *event);
/* GPU time minus CLOCK_MONOTONIC on \p device, in ns (to put both on one timeline). */
int tt_gpu_timer_offset(int device, int64_t *offset_ns);

/* ---- memory ---- */

/* Pin and map existing host memory (page aligned) for the device. Returns 0 or -errno. */
int tt_gpu_host_register(void *p, size_t bytes);
void tt_gpu_host_unregister(void *p);
/* Pinned, mapped host memory. */
int tt_gpu_host_alloc(size_t bytes, void **p);
void tt_gpu_host_free(void *p);
/* Device memory on the current device of the calling thread (see tt_gpu_set_device). */
int tt_gpu_set_device(int device);
int tt_gpu_dev_alloc(size_t bytes, void **p);
void tt_gpu_dev_free(void *p);
/* Synchronous copy or fill between any two addresses (host, device, mapped). */
int tt_gpu_copy(void *dst, const void *src, size_t bytes);
int tt_gpu_fill(void *dst, int byte, size_t bytes);
/* Whether \p p is device memory, and on which device. Returns 0 or -EINVAL (host memory or an
 * unknown pointer), -EOPNOTSUPP. */
int tt_gpu_device_of(const void *p, int *device);

#endif /* TT_GPU_H */
