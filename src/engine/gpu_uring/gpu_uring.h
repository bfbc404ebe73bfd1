/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine gpu-uring as the engines built on it see it (auto: src/engine/auto/), and its tests:
 * the engine's struct, its opening for another table entry, its set-up for GPU KV, and the
 * operations of its table. The ring is ring.h, the GPU's driver kernel.h.
 */
#ifndef TT_ENGINE_GPU_URING_GPU_URING_H
#define TT_ENGINE_GPU_URING_GPU_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine_impl.h"
#include "engine/gpu_uring/kernel.h"
#include "engine/gpu_uring/ring.h"

/* Its options (engine_opts), in the order of its table (tt_gpu_uring_opts), which auto takes
 * first in its own. */
enum tt_gpu_uring_opt {
	TT_GPU_URING_OPT_WORKERS, /* workers of a layer kernel, 1..TT_GPU_IO_MAX */
	TT_GPU_URING_OPT_SMS,     /* the SMs they are packed into, 0 for the fewest */
	TT_GPU_URING_OPT_SUBMIT,  /* enum tt_gpu_uring_submit */
	TT_GPU_URING_OPT_COPY,    /* enum tt_gpu_uring_copy */
	TT_GPU_URING_NR_OPTS
};
extern const struct tt_engine_opt tt_gpu_uring_opts[TT_GPU_URING_NR_OPTS];

/* The layer kernels' footprint. The default of workers is the most that share
 * TT_GPU_IO_SMS_DEFAULT SMs with the ring's driver, TT_GPU_IO_GROUPS_PER_SM groups to an SM (the
 * kernel's count, kernel.h; gpu_uring.c asserts that they agree). */
#define TT_GPU_IO_SMS_DEFAULT 5u
#define TT_GPU_IO_GROUPS_PER_SM 6u
#define TT_GPU_IO_WORKERS_DEFAULT (TT_GPU_IO_SMS_DEFAULT * TT_GPU_IO_GROUPS_PER_SM - 1u)
#define TT_GPU_IO_MAX 64u /* most workers, and most SMs, of a layer kernel */

/* Who issues the I/O that the driver (the GPU's layer kernels, or the twin standing in for
 * them) writes into the ring: the driver only writes submissions. */
enum tt_gpu_uring_submit {
	/* HOST where the store's files are reached by O_DIRECT on a block device, SQPOLL where
	 * they are page-cache backed (tmpfs). */
	TT_GPU_URING_SUBMIT_AUTO,
	/* The kernel's SQPOLL thread: it picks submissions up as they are written, and spins a
	 * core for as long as I/O flows, whatever the storage's speed. On page-cache-backed files
	 * it keeps the copies of inline I/O off the host's threads. */
	TT_GPU_URING_SUBMIT_SQPOLL,
	/* A host thread hands the queued submissions to the kernel every 50 us and sleeps between
	 * (every millisecond once no I/O has moved for 100 ms, until the next launch): no SQ
	 * thread, and no SQPOLL privilege needed. Costs a few percent of a core and up to a poll
	 * period of latency per submission batch. */
	TT_GPU_URING_SUBMIT_HOST,
};

/* How a load of GPU KV brings each object across PCIe into HBM. */
enum tt_gpu_uring_copy {
	/* SM: on emulated NVMe the copy engine's loads were the slower (docs/results.md, rows
	 * E27, E28). */
	TT_GPU_URING_COPY_AUTO,
	/* The I/O kernel's workers read each object out of its bounce slot with loads across
	 * PCIe. SMs read host memory below what the copy engine moves (docs/results.md, row F3),
	 * so this caps a load below the link. */
	TT_GPU_URING_COPY_SM,
	/* The copy engine: the I/O kernel marks each group of consecutive reads (up to 16 MiB)
	 * once all of them are in, one of four copy streams waiting on that mark copies the
	 * group's slots into device staging (twice the bounce slots' size in HBM), and the
	 * workers check and scatter from there. The whole staging becomes bounce slots, on
	 * page-cache-backed files too, with no more reads in flight there than SM loads have.
	 * Needs 64-bit stream memory operations (the load fails with -EOPNOTSUPP without them),
	 * and the I/O kernel and the copy streams running at once: where the GPU's work is
	 * serialised (CUDA_LAUNCH_BLOCKING, compute-sanitizer) a load stalls until its timeout.
	 * Measured slower than SM on emulated NVMe, the more so the more staging it has there
	 * (rows E27, E28). */
	TT_GPU_URING_COPY_DMA,
};

struct tt_gpu_uring_engine {
	struct tt_engine base;
	/* Its options: workers and SMs of a layer kernel (sms never 0 here: the fewest that hold
	 * the workers and the ring's driver), enum tt_gpu_uring_submit, enum tt_gpu_uring_copy. */
	uint32_t workers, sms, submit, copy;
	struct tt_gpu_uring *ring;
	bool ring_mapped;   /* the ring's memory is pinned and mapped for the GPU */
	uint32_t slots;     /* object-sized bounce slots of the staging: the in-flight window */
	uint32_t in_flight; /* the most I/Os in flight, <= slots */
	bool broken;        /* a ring-level failure: refuse further batches */
	uint64_t ios;       /* I/Os driven through the ring */
	uint64_t kernel_ns, block_ns;
	struct tt_gpu_uring_dev *dev; /* the driver kernel's state on the engine's GPU context */
	/* Layer kernels of a launched load may still be running on the GPU context's stream,
	 * using the staging's bounce slots: quiesce waits for them, then reads their per-layer
	 * timeout words (op_failed[0..op_launched)) so that a ring with I/O still in flight is
	 * marked broken before anyone else drives it. */
	bool inflight;
	const int *op_failed;
	uint32_t op_launched;
};

/* Open the engine for table entry \p ops (gpu-uring's, or that of an engine built on it, whose
 * options start with gpu-uring's, TT_GPU_URING_NR_OPTS of them in conf->opt[]): \p bytes (at
 * least the struct's; 0 for the struct alone) are allocated and zeroed, so that the caller's own
 * struct may embed it first. Returns 0, -EINVAL (sms cannot hold the workers: the log says so;
 * staging below one object) or -ENOMEM. */
int tt_gpu_uring_open_as(const struct tt_engine_ops *ops, const struct tt_engine_conf *conf,
                         size_t bytes, struct tt_engine **out);
/* Set the ring up for GPU KV on \p device after open (the attach of an engine that does not
 * start with it), or say in \p why why it cannot be: layer blocks too small for the GPU hash,
 * no CUDA device, a GPU with too few SMs, no such io_uring, memory that cannot be mapped.
 * Returns 0 or a negative errno. */
int tt_gpu_uring_setup(struct tt_gpu_uring_engine *g, int device, char *why, size_t len);

/* The operations of gpu-uring's table entry. */
void tt_gpu_uring_close(struct tt_engine *e);
int tt_gpu_uring_transfer(struct tt_engine *e, struct tt_batch *b);
void tt_gpu_uring_stats(struct tt_engine *e, struct tt_engine_stats *out);
int tt_gpu_uring_prepare(struct tt_engine *e, const struct tutti_kv *kv, struct tt_gpu *gpu);
int tt_gpu_uring_launch_open(struct tt_engine *e, struct tt_batch *b, struct tt_list_mem *mem,
                             struct tt_launch **out);
int tt_gpu_uring_launch_layer(struct tt_engine *e, struct tt_launch *l, uint32_t layer,
                              uint32_t *word, uint32_t value, uint64_t *done_ns);
int tt_gpu_uring_launch_idle(struct tt_engine *e, struct tt_launch *l);
int tt_gpu_uring_launch_finish(struct tt_engine *e, struct tt_launch *l);
void tt_gpu_uring_quiesce(struct tt_engine *e);

/* Object-sized I/Os engine gpu-uring keeps in \p staging_bytes of staging for objects of
 * \p object_bytes (at most staging_bytes / object_bytes, which the store makes at least 1): all of
 * it, but on page-cache-backed files (\p page_cache) no more than 64 MiB of it, and never more
 * than the ring's 4096. With page_cache it is also the most I/Os in flight on such files. */
uint32_t tt_gpu_uring_bounce_slots(uint64_t staging_bytes, uint64_t object_bytes, bool page_cache);

#endif /* TT_ENGINE_GPU_URING_GPU_URING_H */
