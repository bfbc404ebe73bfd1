/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine gpu-uring's GPU driver, behind a C interface that names no CUDA type: one kernel per
 * run of layers that submits and reaps the ring's I/O itself and moves the objects
 * (kernel.cu; kernel_none.c stands in for it in builds without CUDA, every call -EOPNOTSUPP).
 * It runs on a context of the GPU layer (src/gpu/gpu.h).
 */
#ifndef TT_ENGINE_GPU_URING_KERNEL_H
#define TT_ENGINE_GPU_URING_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu/gpu.h"

/* Groups (the controller's and the workers') that one block of a layer kernel holds at most;
 * the engine sizes its sms option by it. */
#define TT_GPU_URING_GROUPS_PER_BLOCK 6u

/* A run of layers: every object read into (load) or written from (save) bounce slots. */
struct tt_gpu_uring_job {
	const struct tutti_kv *kv; /* TUTTI_MEM_CUDA */
	uint32_t layer;            /* the first layer of the run */
	uint32_t nr_layers;        /* layers of the run, at least 1 */
	/* nr entries, layer-major, nr / nr_layers a layer (nr a multiple of nr_layers); statuses
	 * and checksums come back at sync */
	struct tt_gpu_obj *objs;
	uint32_t nr;
	const uint32_t *ids; /* block ids of every object */
	uint32_t nr_ids;
	uint8_t *bounce; /* slots of slot_bytes, mapped for the GPU, registered in the ring */
	uint32_t slots;  /* I/O i reuses the slot of I/O i - slots; <= the ring's CQ entries */
	/* The most I/Os in flight at once, <= slots (0: slots). Fewer than the slots where each
	 * I/O is a copy by an io-wq worker: the slots then only let a load by the copy engine
	 * read on while groups wait for their copies. */
	uint32_t in_flight;
	uint64_t slot_bytes; /* one object, a multiple of 16 */
	bool write;
	/* A load by the copy engine (proto.h; tt_gpu_uring_dma_supported must say 1): a copy
	 * stream moves each group of slots into device staging, from which the workers check and
	 * scatter; unused for a save. */
	bool dma;
	uint32_t workers;    /* groups of threads moving objects (0: 16) */
	uint32_t blocks;     /* CUDA blocks (SMs) the workers and the controller are packed into:
	                      * 3 groups of 256 threads each, or up to 6 of 128; 0: one each */
	uint32_t timeout_ms; /* a ring without progress for this long fails the run */
	int *failed;         /* out at sync: 1 when it did */
	/* NULL, or TT_GPU_URING_TRACE_WORDS words in mapped host memory, valid at sync: first
	 * TT_GPU_URING_TRACE_POINTS GPU timestamps (ns, %globaltimer): the kernel's start, the
	 * first submission published, the first and the last completion reaped, and the last worker
	 * done; then the workers' time in each phase (enum tt_gpu_uring_phase), summed over them.
	 */
	uint64_t *trace;
};

#define TT_GPU_URING_TRACE_POINTS 5

/* Where a worker's time goes, per object. */
enum tt_gpu_uring_phase {
	TT_GPU_URING_PHASE_WAIT, /* for its read (load) or for its slot to be written (save) */
	TT_GPU_URING_PHASE_SLOT, /* the copy out of the bounce slot, or into it, across PCIe */
	TT_GPU_URING_PHASE_HASH, /* the checksum */
	TT_GPU_URING_PHASE_MOVE, /* the scatter into the paged KV, or the gather out of it */
	TT_GPU_URING_TRACE_PHASES
};

#define TT_GPU_URING_TRACE_WORDS (TT_GPU_URING_TRACE_POINTS + TT_GPU_URING_TRACE_PHASES)

/*
 * The kernel's state on one GPU context, made once: its failure words, its span events, the
 * checksum secret in its constant memory, and its module loaded (under CUDA's lazy loading a
 * first launch would load it, which may wait for a compute stream that waits for that very
 * launch). Buffers grow with the launches. Owned by the engine; close it before the context.
 * Returns 0, -EINVAL, -ENOMEM, -EOPNOTSUPP (no CUDA) or -EIO, and leaves nothing behind then.
 */
struct tt_gpu_uring_dev;
int tt_gpu_uring_dev_open(struct tt_gpu *g, struct tt_gpu_uring_dev **out);
/* Waits for the copies a load by the copy engine queued. NULL is allowed. */
void tt_gpu_uring_dev_close(struct tt_gpu_uring_dev *dev);

/*
 * Launch the driver kernel for a run of layers on the context's stream: the GPU submits every
 * I/O of the job into the ring, reaps the completions and moves the objects, checking (load) or
 * computing (save) their checksums; asynchronous, results valid after tt_gpu_sync. Reads of a
 * later layer of the run are in flight while the objects of an earlier one are moved. Layer
 * blocks must exceed TT_XXH3_MIDSIZE_MAX bytes (format/format.h: the GPU hashes with XXH3's long
 * path only). Returns 0, -EINVAL, -ENOMEM, -EOPNOTSUPP (a DMA load on a device that cannot
 * order copies after a count, see below) or -EIO.
 */
struct tt_gpu_uring_view;
int tt_gpu_uring_layers(struct tt_gpu_uring_dev *dev, const struct tt_gpu_uring_view *ring,
                        const struct tt_gpu_uring_job *job);

/* Whether the context's device can run loads by the copy engine: a stream that waits for a 64-bit
 * count in device memory (CUDA's stream memory operations). 1 or 0, or -EIO where the driver
 * cannot be asked. */
int tt_gpu_uring_dma_supported(struct tt_gpu_uring_dev *dev);

/* The GPU time of the driver kernels launched since the previous call (from the start of the
 * first to the end of the last; they run back to back), and the CUDA blocks they held (each
 * block a resident share of one SM for that time); zeros when none ran. Waits for the last
 * launch. Returns 0 or -EIO. */
int tt_gpu_uring_elapsed(struct tt_gpu_uring_dev *dev, uint64_t *ns, uint32_t *blocks);

#endif /* TT_ENGINE_GPU_URING_KERNEL_H */
