/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU driver of the gpu-uring engine: one kernel per run of layers issues every object I/O
 * of those layers into a real io_uring itself, reaps the completions, and moves each object
 * between its bounce slot and the paged KV, checking (load) or computing (save) its checksum on
 * the GPU. A run of several layers keeps reads of the next layer in flight while the workers
 * finish the last objects of the one before: a kernel per layer filled and drained the I/O
 * pipeline on its own, a large share of each layer's time (docs/design.md).
 *
 * Kernel layout. The kernel runs in groups of 256 threads (128 when more than 3 share a block),
 * packed several to a block (up to 6) so that the I/O holds few SMs while a prefill runs beside
 * it: every block an I/O kernel keeps resident is an SM the prefill's GEMMs cannot use. Group 0
 * is the controller: its thread 0 writes SQEs and publishes the SQ tail once per batch
 * (system-scope release), polls the CQ tail (system-scope acquire) with back-off, and hands each
 * completed I/O to a worker through a device-memory flag (release at GPU scope; the worker's
 * acquire makes the DMA'd bounce bytes visible through the chain).
 * Groups 1..W are workers: worker w handles I/Os w-1, w-1+W, ... in order. A load worker copies
 * the object from its bounce slot (mapped host memory, read across PCIe in 16-byte vectors) into
 * its own device scratch, frees the slot at once (so the next read can start), checks the
 * checksum there and scatters into the paged blocks; in a load by the copy engine (option
 * copy=dma, proto.h) copy streams bring each group of slots into device staging instead, and the
 * worker checks and scatters from there. A save worker gathers the blocks into its
 * scratch, hashes them, copies them into the bounce slot and marks it ready to write. At most
 * S = slots I/Os are in flight (I/O i reuses the slot of I/O i - S), never more than the CQ
 * holds. Every wait has a deadline (%globaltimer): a stalled ring fails the layer with
 * -ETIMEDOUT instead of hanging the GPU.
 *
 * All blocks must be resident at once (at most W + 1 blocks, W small next to the SM count). A
 * group synchronises on a named barrier of its own, never the whole block's.
 */
#include <cuda.h> /* the driver's types for its stream memory operations, reached at run time */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/device.cuh"
#include "cuda/gpu.cuh"
#include "cuda/xxh3.cuh"

extern "C" {
#include "engine/gpu_uring/kernel.h"
#include "engine/gpu_uring/proto.h"
#include "format/format.h"
}

/* Threads of one worker (and of the controller's group). */
#define GROUP 256
/* Threads of a driver kernel's block: 768 gives it 80 registers a thread (1024 would cap it at
 * 64); at 80 it spills about 100 bytes a thread to local memory, which the measured rates
 * include (docs/results.md, E8). Its groups are of GROUP threads, or of half as many when more than
 * 3 must share a block: a block holds at most BLOCK_THREADS / (GROUP / 2) = MAX_GROUPS. */
#define BLOCK_THREADS 768
#define MAX_GROUPS TT_GPU_URING_GROUPS_PER_BLOCK
static_assert(BLOCK_THREADS / (GROUP / 2) == MAX_GROUPS, "the store packs by this count");

/* A worker's time per phase, kept when the launch is traced: where its time goes, summed over
 * the workers, says whether the ring (waiting) or the moving bounds a load. It lives in the
 * group's shared memory, not in registers, which the kernel has none to spare of. */
struct phase_clock {
	uint64_t last;
	uint64_t ns[TT_GPU_URING_TRACE_PHASES];
};

/* What one group keeps in shared memory. */
struct group_shared {
	xxh_shared xxh;
	int ok; /* wait_flag's verdict for the group */
	phase_clock clock;
};

struct tt_gpu_uring_dev {
	struct tt_gpu *g;        /* the context it lives on */
	bool secret_set;         /* the checksum secret is in this file's constant memory */
	struct tt_gpu_obj *objs; /* device copy of a launch's objects */
	uint32_t nr_objs_cap;
	uint32_t *ids;
	uint32_t nr_ids_cap;
	struct seg_param *segs; /* the segments of a launch's layers, layer-major */
	uint32_t nr_segs_cap;
	/* With a trace: the workers' summed time per phase (TT_GPU_URING_TRACE_PHASES). */
	unsigned long long *phase_ns;
	uint8_t *scratch; /* one object per worker */
	uint64_t scratch_bytes;
	/* The GPU time of the layer kernels launched since the last tt_gpu_uring_elapsed(): from
	 * before the first launch to after the last (they run back to back on the stream). */
	cudaEvent_t span_begin, span_end;
	bool span_open;
	uint32_t span_blocks;      /* CUDA blocks of the widest launch in the span */
	unsigned long long *ready; /* per slot: epoch << 32 | (i + 1) once I/O i may be consumed */
	unsigned long long *freed; /* per slot: epoch << 32 | (i + 1) once I/O i left its slot */
	uint32_t nr_slots_cap;
	unsigned long long epoch;
	/* failed[0]: set on a timeout (per launch); failed[1]: the trace's workers-left counter;
	 * failed[2]: sticky, set once any launch timed out and never cleared: I/O of that launch
	 * may still be in flight into the bounce slots, so later launches (queued behind it on the
	 * stream) must not touch the ring. */
	int *failed;
	/* Loads by the copy engine (proto.h), made on first use: the copy streams, the device
	 * staging, and the group words in device memory. The driver's stream memory operations
	 * have no runtime API: their entry points are looked up once. */
	int dma_supported; /* -1: not asked yet */
	CUresult (*wait_value)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
	CUresult (*write_value)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
	cudaStream_t dma_streams[TT_GPU_URING_DMA_STREAMS];
	uint8_t *dstage;
	uint64_t dstage_bytes;
	/* 3 x TT_GPU_URING_MAX_GROUP_WORDS: the words arrived, copied and the controller's tally */
	unsigned long long *counts;
};

struct job_param {
	struct tt_gpu_uring_view ring;
	const seg_param *segs; /* nr_segs per layer of the launch, layer-major (device memory) */
	unsigned nr_segs;
	uint32_t
	    per_layer; /* objects per layer: object i is in layer i / per_layer of the launch */
	uint64_t layer_block_bytes;
	uint8_t *bounce; /* slots, mapped host memory (host address = device address) */
	uint64_t slot_bytes;
	uint32_t slots;
	uint32_t in_flight; /* the most I/Os submitted and not yet reaped */
	uint32_t nr;
	uint32_t workers;
	uint32_t group_threads; /* GROUP or GROUP / 2 */
	uint32_t write;
	uint64_t epoch;
	uint64_t timeout_ns;
	volatile uint64_t *trace;     /* mapped host memory or NULL */
	unsigned *workers_left;       /* device counter: the last worker out stamps trace[4] */
	unsigned long long *phase_ns; /* with a trace: per phase, the workers' summed time */
	/* Loads by the copy engine (proto.h): the device staging and the group words, whose
	 * values are sequence numbers; dstage NULL otherwise (every save included). */
	uint8_t *dstage;
	unsigned long long *arrived;      /* per group word: the controller's "all read" */
	const unsigned long long *copied; /* per group word: the copy stream's "copied" */
	unsigned long long *tally;        /* per group word: the controller's reads so far */
	uint32_t group;                   /* I/Os per group */
	uint32_t group_words;             /* slots / group: groups whose bounce slots exist */
	/* The staging's slots, TT_GPU_URING_DMA_STAGING x the bounce slots: a bounce slot is
	 * free once its group is copied, a staging slot once its worker has scattered it, so
	 * reads go on while the workers check and scatter (freed[] is indexed by staging slot). */
	uint32_t dslots;
};

/* ---- device helpers ---- */

__device__ static inline uint64_t
now_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__device__ static inline unsigned long long
ld_acquire_gpu(const unsigned long long *p)
{
	unsigned long long v;

	asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline void
st_release_gpu(unsigned long long *p, unsigned long long v)
{
	asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* A store the copy stream's wait (the GPU's front end, not an SM) must see: system scope. */
__device__ static inline void
st_release_sys(unsigned long long *p, unsigned long long v)
{
	asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* An object out of its bounce slot (host memory) into device memory. */
__device__ static void
team_copy_from_host(const team &t, uint8_t *dst, const uint8_t *src, uint64_t bytes)
{
	uint64_t n = bytes / 16;

	team_copy_vectors<true>(t, reinterpret_cast<int4 *>(dst),
	                        reinterpret_cast<const int4 *>(src), n);
	for (uint64_t i = n * 16 + t.lane; i < bytes; i += t.size) {
		dst[i] = __ldcv(&src[i]);
	}
}

/* Move object \p i's blocks (of its layer) between \p obj and the paged KV. */
__device__ static void
move_blocks(const team &t, const job_param &param, uint32_t i, const uint32_t *ids, uint32_t n,
            uint8_t *obj, bool gather)
{
	move_segs(t, param.segs + (uint64_t)(i / param.per_layer) * param.nr_segs, param.nr_segs,
	          ids, n, obj, gather);
}

/* Charge the time since the last lap to phase \p k (lane 0 keeps the clock; NULL: untraced). */
__device__ static inline void
lap(phase_clock *c, const team &t, unsigned k)
{
	if (c != NULL && t.lane == 0) {
		uint64_t now = now_ns();

		c->ns[k] += now - c->last;
		c->last = now;
	}
}

/* ---- the controller ---- */

/* Read \p i of a load by the copy engine is over: the last of its group lets the group's copy
 * go (its word is waited on by one of the copy streams). Groups go out of order: a slow read
 * holds back its own group only. */
__device__ static void
dma_arrived(const job_param &param, uint32_t i)
{
	uint32_t k = i / param.group, w = k % param.group_words;
	uint32_t size = tt_gpu_uring_group_size(k, param.group, param.nr);

	if (++param.tally[w] == size) {
		param.tally[w] = 0;
		st_release_sys(&param.arrived[w], tt_gpu_uring_seq(param.epoch, k + 1));
	}
}

/* Let every copy of a failed launch through (its workers stop on the failure). */
__device__ static void
dma_release_all(const job_param &param)
{
	for (uint32_t w = 0; w < param.group_words; w++) {
		st_release_sys(&param.arrived[w], tt_gpu_uring_seq(param.epoch, UINT32_MAX));
	}
}

__device__ static void
controller(const job_param &param, struct tt_gpu_obj *objs, unsigned long long *ready,
           unsigned long long *freed, int *failed)
{
	const struct tt_gpu_uring_view *ring = &param.ring;
	uint32_t tail = *(volatile uint32_t *)ring->sq_tail,
	         head = *(volatile uint32_t *)ring->cq_head;
	uint32_t next = 0, done = 0;
	uint64_t progress = now_ns(), published_ns = 0;
	/* Punted I/O goes out one at a time, its pace apart, where the ring asks for it (proto.h).
	 */
	uint32_t pace_ns = param.write ? ring->write_pace_ns : ring->read_pace_ns;
	unsigned back_off = 32;
	bool published = false;
	/* Loads by the copy engine (dstage set for them alone): group words, counted per read. */
	bool dma = param.dstage != NULL;

	if (dma) {
		for (uint32_t k = 0; k < param.group_words; k++) {
			param.tally[k] = 0; /* a failed launch may have left counts behind */
		}
	}

	if (param.trace != NULL) {
		param.trace[0] = progress;
	}
	while (done < param.nr) {
		uint32_t queued = 0, nr_ready;

		/* Submit: slot free (its previous I/O consumed), save data gathered, SQ space. */
		while (next < param.nr && tt_gpu_uring_sq_space(ring, tail) > 0) {
			uint32_t slot = next % param.slots;
			unsigned long long want =
			    param.epoch << 32 | (unsigned long long)(next + 1);
			struct tt_gpu_uring_io io;

			if (pace_ns != 0 && (queued > 0 || now_ns() - published_ns < pace_ns)) {
				break;
			}
			if (next - done >= param.in_flight) {
				break;
			}
			if (dma) {
				/* The bounce slot once its copy is done, the staging slot once
				 * its worker is done. */
				uint32_t prior = (next - param.slots) / param.group;

				if ((next >= param.slots &&
				     (long long)(ld_acquire_gpu(
				                     &param.copied[prior % param.group_words]) -
				                 tt_gpu_uring_seq(param.epoch, prior + 1)) < 0) ||
				    (next >= param.dslots &&
				     ld_acquire_gpu(&freed[next % param.dslots]) !=
				         tt_gpu_uring_seq(param.epoch, next - param.dslots + 1))) {
					break;
				}
			} else if (next >= param.slots &&
			           ld_acquire_gpu(&freed[slot]) !=
			               (param.epoch << 32 | (next - param.slots + 1))) {
				break;
			}
			/* A save's data must be in the slot: its worker says so through ready. */
			if (param.write && ld_acquire_gpu(&ready[slot]) != want) {
				break;
			}
			if (objs[next].status != 0) {
				/* Nothing to write for a failed gather: its completion is its
				 * status. */
				if (dma) {
					dma_arrived(param, next);
				} else if (!param.write) {
					st_release_gpu(&ready[slot], want);
				}
				/* By the copy engine its worker frees it once its group is copied,
				 * as for every load: a slot is freed once. */
				if (!dma) {
					st_release_gpu(&freed[slot], want);
				}
				next++;
				done++;
				continue;
			}
			io.off = objs[next].off;
			io.buf = reinterpret_cast<uint64_t>(param.bounce +
			                                    (uint64_t)slot * param.slot_bytes);
			io.len = (uint32_t)param.slot_bytes;
			io.file = (uint16_t)objs[next].file;
			io.write = (uint8_t)param.write;
			tt_gpu_uring_put(ring, tail++, &io, next);
			next++;
			queued++;
		}
		if (queued > 0) {
			tt_gpu_uring_publish(ring, tail); /* one release per batch */
			published_ns = now_ns();
			if (param.trace != NULL && !published) {
				param.trace[1] = published_ns;
			}
			published = true;
		}
		/* Reap. */
		nr_ready = tt_gpu_uring_cq_ready(ring, head);
		for (uint32_t k = 0; k < nr_ready; k++, head++) {
			uint64_t tag;
			int32_t res;

			tt_gpu_uring_cqe(ring, head, &tag, &res);
			if (tag >= param.nr) {
				continue;
			}
			if (res >= 0 && (uint32_t)res != (uint32_t)param.slot_bytes) {
				res = -EIO; /* short: the file ends inside the object */
			}
			if (res < 0) {
				objs[tag].status = res;
			}
			if (param.write) {
				/* The write is done: the slot is free for I/O tag + S. */
				st_release_gpu(&freed[tag % param.slots],
				               param.epoch << 32 | (unsigned long long)(tag + 1));
			} else if (dma) {
				dma_arrived(param, (uint32_t)tag);
			} else {
				st_release_gpu(&ready[tag % param.slots],
				               param.epoch << 32 | (unsigned long long)(tag + 1));
			}
			done++;
		}
		if (nr_ready > 0) {
			tt_gpu_uring_cq_release(ring, head);
			if (param.trace != NULL) {
				uint64_t t = now_ns();

				if (param.trace[2] == 0) {
					param.trace[2] = t;
				}
				param.trace[3] = t;
			}
		}
		if (queued > 0 || nr_ready > 0) {
			progress = now_ns();
			back_off = 32;
		} else if (now_ns() - progress > param.timeout_ns) {
			atomicExch(failed, 1);
			if (dma) {
				dma_release_all(param); /* the launch has failed */
			}
			return;
		} else {
			__nanosleep(back_off);
			back_off = back_off < 4096 ? back_off * 2 : back_off;
		}
	}
}

/* ---- the workers ---- */

/* Wait for \p flag to reach \p want (with \p at_least, a sequence number, which only grows, to
 * reach it or pass it); false on a timeout (or when another group failed). */
__device__ static bool
wait_flag(const team &t, group_shared *group_mem, const unsigned long long *flag,
          unsigned long long want, uint64_t timeout_ns, int *failed, bool at_least = false)
{
	if (t.lane == 0) {
		uint64_t start = now_ns();

		group_mem->ok = 1;
		for (;;) {
			unsigned long long v = ld_acquire_gpu(flag);

			if (at_least ? (long long)(v - want) >= 0 : v == want) {
				break;
			}
			if (*(volatile int *)failed || now_ns() - start > timeout_ns) {
				atomicExch(failed, 1);
				group_mem->ok = 0;
				break;
			}
			__nanosleep(256);
		}
	}
	team_sync(t);
	return group_mem->ok != 0;
}

/* Load object \p i by the copy engine: once the copy stream has copied its group into device
 * staging, check and scatter it from there (HBM), then free its staging slot: a read into it is
 * submitted only after this. */
__device__ static bool
load_from_staging(const team &t, group_shared *group_mem, const job_param &param,
                  struct tt_gpu_obj *obj, uint32_t i, const uint32_t *ids,
                  unsigned long long *freed, int *failed, phase_clock *clock)
{
	uint32_t slot = i % param.dslots, k = i / param.group;
	unsigned long long mine = tt_gpu_uring_seq(param.epoch, i + 1);
	const uint8_t *staged = param.dstage + (uint64_t)slot * param.slot_bytes;
	uint64_t stored = (uint64_t)obj->stored * param.layer_block_bytes;

	/* The acquire by lane 0 (which invalidates this SM's L1) and the group's barrier after it
	 * order the copy's bytes before the group's loads of them. */
	if (!wait_flag(t, group_mem, &param.copied[k % param.group_words],
	               tt_gpu_uring_seq(param.epoch, k + 1), param.timeout_ns, failed, true)) {
		return false;
	}
	lap(clock, t, TT_GPU_URING_PHASE_WAIT);
	if (obj->status == 0) {
		bool damaged = xxh3_64_block(staged, stored, &group_mem->xxh, t) != obj->csum;

		lap(clock, t, TT_GPU_URING_PHASE_HASH);
		if (damaged) {
			if (t.lane == 0) {
				obj->status = -EBADMSG; /* never scattered */
			}
		} else {
			move_blocks(t, param, i, ids + obj->ids_off, obj->nr_moved,
			            const_cast<uint8_t *>(staged) +
			                (uint64_t)obj->skip * param.layer_block_bytes,
			            false);
		}
	}
	team_sync(t); /* every thread done with the staging before the slot goes */
	lap(clock, t, TT_GPU_URING_PHASE_MOVE);
	if (t.lane == 0) {
		st_release_gpu(&freed[slot], mine);
	}
	return true;
}

__device__ static void
worker(const team &t, group_shared *group_mem, const job_param &param, struct tt_gpu_obj *objs,
       const uint32_t *ids, uint8_t *scratch, unsigned long long *ready, unsigned long long *freed,
       int *failed, uint32_t w)
{
	phase_clock *clock = param.trace != NULL ? &group_mem->clock : NULL;

	if (clock != NULL && t.lane == 0) {
		*clock = phase_clock{now_ns(), {0}};
	}

	for (uint32_t i = w; i < param.nr; i += param.workers) {
		struct tt_gpu_obj *obj = &objs[i];
		uint32_t slot = i % param.slots;
		unsigned long long mine = param.epoch << 32 | (unsigned long long)(i + 1);
		uint8_t *bounce = param.bounce + (uint64_t)slot * param.slot_bytes;
		uint64_t stored = (uint64_t)obj->stored * param.layer_block_bytes,
		         moved = (uint64_t)obj->nr_moved * param.layer_block_bytes;

		if (param.write) {
			/* Save: the slot is ours once I/O i - S is written. */
			if (i >= param.slots &&
			    !wait_flag(t, group_mem, &freed[slot],
			               param.epoch << 32 | (i - param.slots + 1), param.timeout_ns,
			               failed)) {
				break;
			}
			lap(clock, t, TT_GPU_URING_PHASE_WAIT);
			if (obj->status == 0) {
				move_blocks(t, param, i, ids + obj->ids_off, obj->nr_moved, scratch,
				            true);
				team_sync(t);
				lap(clock, t, TT_GPU_URING_PHASE_MOVE);
				obj->csum = xxh3_64_block(scratch, moved, &group_mem->xxh, t);
				lap(clock, t, TT_GPU_URING_PHASE_HASH);
				team_copy(t, bounce, scratch, moved);
				for (uint64_t b = moved + t.lane; b < param.slot_bytes;
				     b += t.size) {
					bounce[b] = 0; /* padding is zero, never stale */
				}
			}
			__threadfence_system(); /* the bytes reach host memory before the SQE */
			team_sync(t);
			lap(clock, t, TT_GPU_URING_PHASE_SLOT);
			if (t.lane == 0) {
				st_release_gpu(&ready[slot], mine);
			}
			continue;
		}
		if (param.dstage != NULL) {
			if (!load_from_staging(t, group_mem, param, obj, i, ids, freed, failed,
			                       clock)) {
				break;
			}
			continue;
		}
		/* Load: wait for the read, take the object, give the slot back. */
		if (!wait_flag(t, group_mem, &ready[slot], mine, param.timeout_ns, failed)) {
			break;
		}
		lap(clock, t, TT_GPU_URING_PHASE_WAIT);
		if (obj->status == 0) {
			team_copy_from_host(t, scratch, bounce, stored);
		}
		team_sync(t);
		lap(clock, t, TT_GPU_URING_PHASE_SLOT);
		if (t.lane == 0) {
			st_release_gpu(&freed[slot], mine);
		}
		if (obj->status != 0) {
			continue;
		}
		bool damaged = xxh3_64_block(scratch, stored, &group_mem->xxh, t) != obj->csum;

		lap(clock, t, TT_GPU_URING_PHASE_HASH);
		if (damaged) {
			if (t.lane == 0) {
				obj->status = -EBADMSG;
			}
			continue; /* never scattered */
		}
		move_blocks(t, param, i, ids + obj->ids_off, obj->nr_moved,
		            scratch + (uint64_t)obj->skip * param.layer_block_bytes, false);
		team_sync(t);
		lap(clock, t, TT_GPU_URING_PHASE_MOVE);
	}
	if (clock != NULL && t.lane == 0) {
		for (unsigned k = 0; k < TT_GPU_URING_TRACE_PHASES; k++) {
			atomicAdd(&param.phase_ns[k], (unsigned long long)clock->ns[k]);
		}
		__threadfence(); /* the sums before this worker counts itself out */
	}
}

/* Group 0 (the first of block 0) is the controller, groups 1..W the workers; each block holds
 * blockDim.x / param.group_threads groups, each synchronising on its own named barrier. */
__global__ static void
__launch_bounds__(BLOCK_THREADS)
    gpu_uring_kernel(job_param param, struct tt_gpu_obj *objs, const uint32_t *ids,
                     uint8_t *scratch, unsigned long long *ready, unsigned long long *freed,
                     int *failed)
{
	__shared__ group_shared shared[MAX_GROUPS];
	unsigned local = threadIdx.x / param.group_threads;
	uint32_t group = blockIdx.x * (blockDim.x / param.group_threads) + local;
	team t = {threadIdx.x % param.group_threads, param.group_threads, 1 + local};
	int *broken = failed + 2;

	if (*(volatile int *)broken) {
		if (group == 0 && t.lane == 0) {
			atomicExch(failed, 1); /* reported as this layer's timeout too */
			if (param.dstage != NULL) {
				dma_release_all(param); /* nothing will be read */
			}
		}
		return;
	}
	if (group == 0) {
		if (t.lane == 0) {
			controller(param, objs, ready, freed, failed);
			if (*(volatile int *)failed) {
				atomicExch(broken, 1);
			}
		}
		return;
	}
	if (group > param.workers) {
		return; /* the last block's spare groups */
	}
	worker(t, &shared[local], param, objs, ids,
	       scratch + (uint64_t)(group - 1) * param.slot_bytes, ready, freed, failed, group - 1);
	if (t.lane == 0 && *(volatile int *)failed) {
		atomicExch(broken, 1);
	}
	if (param.trace != NULL && t.lane == 0 && atomicSub(param.workers_left, 1) == 1) {
		param.trace[4] = now_ns();
		__threadfence(); /* every other worker's sums, counted out before it */
		for (unsigned k = 0; k < TT_GPU_URING_TRACE_PHASES; k++) {
			param.trace[TT_GPU_URING_TRACE_POINTS + k] =
			    *(volatile unsigned long long *)&param.phase_ns[k];
		}
	}
}

/* ---- host side ---- */

static void
dev_free(struct tt_gpu_uring_dev *dev)
{
	cudaFree(dev->objs);
	cudaFree(dev->ids);
	cudaFree(dev->segs);
	cudaFree(dev->phase_ns);
	cudaFree(dev->scratch);
	cudaFree(dev->ready);
	cudaFree(dev->freed);
	cudaFree(dev->failed);
	for (unsigned k = 0; k < TT_GPU_URING_DMA_STREAMS; k++) {
		if (dev->dma_streams[k] != NULL) {
			cudaStreamSynchronize(dev->dma_streams[k]); /* its last word written */
			cudaStreamDestroy(dev->dma_streams[k]);
		}
	}
	cudaFree(dev->dstage);
	cudaFree(dev->counts);
	if (dev->span_begin != NULL) {
		cudaEventDestroy(dev->span_begin);
	}
	if (dev->span_end != NULL) {
		cudaEventDestroy(dev->span_end);
	}
	free(dev);
}

extern "C" void
tt_gpu_uring_dev_close(struct tt_gpu_uring_dev *dev)
{
	if (dev != NULL) {
		cudaSetDevice(dev->g->device);
		dev_free(dev);
	}
}

/* Grow a device buffer to hold \p need bytes (buffers are reused across launches). Stream-
 * ordered, because cudaFree synchronises the whole device: a compute stream held by the layerwise
 * pipeline's wait for this very load would never let it finish. */
static int
reserve(const struct tt_gpu *g, void **buf, uint64_t *cap, uint64_t need)
{
	if (*cap >= need) {
		return 0;
	}
	if (*buf != NULL) {
		cudaFreeAsync(*buf, g->stream);
	}
	*buf = NULL;
	*cap = 0;
	if (check(g, cudaMallocAsync(buf, need, g->stream), "cudaMallocAsync") < 0) {
		return -ENOMEM;
	}
	*cap = need;
	return 0;
}

/* The checksum secret into this file's constant memory, once per context, on the context's own
 * stream: a copy to a symbol without a stream goes on the legacy default stream, where a
 * compute's wait for a layer may sit ahead of it, waiting for the very load that needs the
 * secret. */
static int
secret_set(struct tt_gpu_uring_dev *dev)
{
	struct tt_gpu *g = dev->g;
	int rc = 0;

	if (!dev->secret_set) {
		rc = check(g,
		           cudaMemcpyToSymbolAsync(c_xxh_secret, tt_csum_secret,
		                                   sizeof(c_xxh_secret), 0, cudaMemcpyHostToDevice,
		                                   g->stream),
		           "cudaMemcpyToSymbolAsync");
		if (rc == 0) {
			rc = check(g, cudaStreamSynchronize(g->stream), "checksum secret copy");
		}
		dev->secret_set = rc == 0;
	}
	return rc;
}

/* What every launch on the context needs, made once: the failure words, the span events, the
 * checksum secret and the kernel's module. A failure leaves nothing behind, so a later call tries
 * again. */
extern "C" int
tt_gpu_uring_dev_open(struct tt_gpu *g, struct tt_gpu_uring_dev **out)
{
	const void *const funcs[] = {reinterpret_cast<const void *>(gpu_uring_kernel)};
	struct tt_gpu_uring_dev *dev;
	int rc;

	*out = NULL;
	if (g == NULL) {
		return -EINVAL;
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc < 0) {
		return rc;
	}
	dev = static_cast<struct tt_gpu_uring_dev *>(calloc(1, sizeof(*dev)));
	if (dev == NULL) {
		return -ENOMEM;
	}
	dev->g = g;
	dev->dma_supported = -1;
	/* failed, the workers-left counter of the trace, the sticky broken word */
	rc = check(g, cudaMalloc(&dev->failed, 3 * sizeof(int)), "cudaMalloc");
	if (rc == 0) {
		rc = check(g, cudaMemsetAsync(dev->failed, 0, 3 * sizeof(int), g->stream),
		           "cudaMemset");
	}
	if (rc == 0) {
		rc = check(
		    g,
		    cudaMalloc(&dev->phase_ns, TT_GPU_URING_TRACE_PHASES * sizeof(*dev->phase_ns)),
		    "cudaMalloc");
	}
	if (rc == 0) {
		rc = check(g, cudaEventCreate(&dev->span_begin), "cudaEventCreate");
	}
	if (rc == 0) {
		rc = check(g, cudaEventCreate(&dev->span_end), "cudaEventCreate");
	}
	if (rc == 0) {
		rc = tt_cuda_load_funcs(g, funcs, 1);
	}
	if (rc == 0) {
		rc = secret_set(dev);
	}
	if (rc < 0) {
		dev_free(dev);
		return rc;
	}
	*out = dev;
	return 0;
}

/* Look the stream memory operations up and ask the device whether it takes 64-bit ones. */
static int
dma_probe(struct tt_gpu_uring_dev *dev)
{
	struct tt_gpu *g = dev->g;
	CUresult (*get_device)(CUdevice *, int) = NULL;
	CUresult (*get_attribute)(int *, CUdevice_attribute, CUdevice) = NULL;
	const struct {
		const char *name;
		void **fn;
	} entries[] = {
	    {"cuDeviceGet", reinterpret_cast<void **>(&get_device)},
	    {"cuDeviceGetAttribute", reinterpret_cast<void **>(&get_attribute)},
	    {"cuStreamWaitValue64", reinterpret_cast<void **>(&dev->wait_value)},
	    {"cuStreamWriteValue64", reinterpret_cast<void **>(&dev->write_value)},
	};
	CUdevice device;
	int on = 0;

	for (const auto &e : entries) {
		cudaDriverEntryPointQueryResult q;

		if (check(g,
		          cudaGetDriverEntryPointByVersion(e.name, e.fn, 12000, cudaEnableDefault,
		                                           &q),
		          "cudaGetDriverEntryPointByVersion") < 0) {
			return -EIO;
		}
		if (q != cudaDriverEntryPointSuccess) {
			return 0; /* a driver without them */
		}
	}
	if (get_device(&device, g->device) != CUDA_SUCCESS ||
	    get_attribute(&on, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device) !=
	        CUDA_SUCCESS) {
		return -EIO;
	}
	return on != 0;
}

extern "C" int
tt_gpu_uring_dma_supported(struct tt_gpu_uring_dev *dev)
{
	int rc;

	if (dev == NULL) {
		return -EINVAL;
	}
	rc = check(dev->g, cudaSetDevice(dev->g->device), "cudaSetDevice");
	if (rc < 0) {
		return rc;
	}
	if (dev->dma_supported < 0) {
		rc = dma_probe(dev);
		if (rc < 0) {
			return rc;
		}
		dev->dma_supported = rc;
	}
	return dev->dma_supported;
}

/* What a load by the copy engine needs beyond the rest: the copy streams and the counts, made
 * once, and device staging as large as the slots. */
static int
dma_prepare(struct tt_gpu_uring_dev *dev, const struct tt_gpu_uring_job *job)
{
	struct tt_gpu *g = dev->g;
	int rc = tt_gpu_uring_dma_supported(dev);

	if (rc <= 0) {
		return rc < 0 ? rc : -EOPNOTSUPP;
	}
	if (dev->counts == NULL) {
		uint64_t bytes = 3ull * TT_GPU_URING_MAX_GROUP_WORDS * sizeof(*dev->counts);

		/* Zero, below every launch's numbers (epochs start at 1); set before any wait. */
		rc = check(g, cudaMalloc(&dev->counts, bytes), "cudaMalloc");
		if (rc == 0) {
			rc = check(g, cudaMemset(dev->counts, 0, bytes), "cudaMemset");
		}
		if (rc < 0) {
			cudaFree(dev->counts);
			dev->counts = NULL;
			return rc;
		}
	}
	for (unsigned k = 0; k < TT_GPU_URING_DMA_STREAMS; k++) {
		if (dev->dma_streams[k] == NULL) {
			rc = check(
			    g,
			    cudaStreamCreateWithFlags(&dev->dma_streams[k], cudaStreamNonBlocking),
			    "cudaStreamCreateWithFlags");
			if (rc < 0) {
				dev->dma_streams[k] = NULL;
				return rc;
			}
		}
	}
	return reserve(g, (void **)&dev->dstage, &dev->dstage_bytes,
	               (uint64_t)job->slots * TT_GPU_URING_DMA_STAGING * job->slot_bytes);
}

/* After the launch: for each group of its reads, one of the copy streams (in turn) waits until
 * the controller has counted every read of the group, copies their slots into the staging in
 * one copy, and marks the group copied (proto.h). Several streams, so that a group whose last
 * read is slow holds back only the groups queued behind it on its own stream. A failure here
 * leaves the workers waiting for a word that never comes: the launch then fails by its
 * timeout. */
static int
dma_enqueue(struct tt_gpu_uring_dev *dev, const struct tt_gpu_uring_job *job,
            const job_param &param)
{
	struct tt_gpu *g = dev->g;
	uint32_t group = param.group, words = param.group_words;
	uint64_t t0 = tt_now_ns();

	for (uint32_t k = 0; k * group < job->nr; k++) {
		uint32_t first = k * group, n = tt_gpu_uring_group_size(k, group, job->nr);
		cudaStream_t stream = dev->dma_streams[k % TT_GPU_URING_DMA_STREAMS];
		CUstream s = reinterpret_cast<CUstream>(stream);
		uint64_t from = (uint64_t)(first % job->slots) * job->slot_bytes,
		         to = (uint64_t)(first % param.dslots) * job->slot_bytes;
		cuuint64_t seq = tt_gpu_uring_seq(param.epoch, k + 1);

		if (dev->wait_value(s, reinterpret_cast<CUdeviceptr>(&param.arrived[k % words]),
		                    seq, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS ||
		    check(g,
		          cudaMemcpyAsync(dev->dstage + to, job->bounce + from,
		                          (uint64_t)n * job->slot_bytes, cudaMemcpyHostToDevice,
		                          stream),
		          "cudaMemcpyAsync") < 0 ||
		    dev->write_value(s, reinterpret_cast<CUdeviceptr>(&param.copied[k % words]),
		                     seq, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
			tt_log_err(g->log,
			           "gpu-uring: queuing the copy of reads %u..%u failed; the launch "
			           "will time out",
			           first, first + n - 1);
			return -EIO;
		}
	}
	/* Queuing blocks once a stream's queue is full: then it lasts as long as the copies. */
	tt_log_debug(g->log, "gpu-uring: queued the copies of %u groups of %u reads in %.3f ms",
	             (job->nr + group - 1) / group, group, (double)(tt_now_ns() - t0) / 1e6);
	return 0;
}

static int
prepare_dev(struct tt_gpu_uring_dev *dev, const struct tt_gpu_uring_job *job, uint32_t workers)
{
	struct tt_gpu *g = dev->g;
	uint64_t caps[6];
	uint32_t nr_segs = job->nr_layers * job->kv->segs_per_layer;
	/* Flags for every staging slot a load by the copy engine may use (a few bytes each). */
	uint32_t flags = job->slots * TT_GPU_URING_DMA_STAGING;

	caps[0] = (uint64_t)dev->nr_objs_cap * sizeof(*dev->objs);
	caps[1] = (uint64_t)dev->nr_ids_cap * sizeof(*dev->ids);
	caps[2] = dev->scratch_bytes;
	caps[3] = caps[4] = (uint64_t)dev->nr_slots_cap * sizeof(*dev->ready);
	caps[5] = (uint64_t)dev->nr_segs_cap * sizeof(*dev->segs);
	if (reserve(g, (void **)&dev->objs, &caps[0], (uint64_t)job->nr * sizeof(*dev->objs)) < 0 ||
	    reserve(g, (void **)&dev->ids, &caps[1], (uint64_t)job->nr_ids * sizeof(*dev->ids)) <
	        0 ||
	    reserve(g, (void **)&dev->scratch, &caps[2], (uint64_t)workers * job->slot_bytes) < 0 ||
	    reserve(g, (void **)&dev->segs, &caps[5], (uint64_t)nr_segs * sizeof(*dev->segs)) < 0) {
		return -ENOMEM;
	}
	if (caps[3] < (uint64_t)flags * sizeof(*dev->ready)) {
		/* Flags start at zero: epochs start at 1, so no old value ever matches. */
		if (reserve(g, (void **)&dev->ready, &caps[3], flags * sizeof(*dev->ready)) < 0 ||
		    reserve(g, (void **)&dev->freed, &caps[4], flags * sizeof(*dev->freed)) < 0 ||
		    cudaMemsetAsync(dev->ready, 0, caps[3], g->stream) != cudaSuccess ||
		    cudaMemsetAsync(dev->freed, 0, caps[4], g->stream) != cudaSuccess) {
			return -ENOMEM;
		}
		dev->nr_slots_cap = flags;
	}
	dev->nr_objs_cap = (uint32_t)(caps[0] / sizeof(*dev->objs));
	dev->nr_ids_cap = (uint32_t)(caps[1] / sizeof(*dev->ids));
	dev->scratch_bytes = caps[2];
	dev->nr_segs_cap = (uint32_t)(caps[5] / sizeof(*dev->segs));
	return 0;
}

/* The segments of the job's layers, layer-major, onto the stream into the device's copy. A copy
 * from pageable memory is staged before cudaMemcpyAsync returns, so \p segs may go then. */
static int
copy_segs(struct tt_gpu_uring_dev *dev, const struct tt_gpu_uring_job *job)
{
	struct tt_gpu *g = dev->g;
	const struct tutti_kv *kv = job->kv;
	uint32_t n = job->nr_layers * kv->segs_per_layer;
	seg_param *segs = static_cast<seg_param *>(malloc(n * sizeof(*segs)));
	int rc;

	if (segs == NULL) {
		return -ENOMEM;
	}
	for (uint32_t l = 0; l < job->nr_layers; l++) {
		fill_segs(segs + (uint64_t)l * kv->segs_per_layer, kv, job->layer + l);
	}
	rc = check(
	    g,
	    cudaMemcpyAsync(dev->segs, segs, n * sizeof(*segs), cudaMemcpyHostToDevice, g->stream),
	    "cudaMemcpyAsync");
	free(segs);
	return rc;
}

extern "C" int
tt_gpu_uring_layers(struct tt_gpu_uring_dev *dev, const struct tt_gpu_uring_view *ring,
                    const struct tt_gpu_uring_job *job)
{
	struct tt_gpu *g = dev != NULL ? dev->g : NULL;
	const struct tutti_kv *kv = job != NULL ? job->kv : NULL;
	uint32_t workers, groups, blocks, per_block, group_threads;
	job_param param;
	bool dma;
	int rc;

	if (g == NULL || ring == NULL || job == NULL || kv == NULL || kv->mem != TUTTI_MEM_CUDA ||
	    kv->device != g->device || job->nr_layers == 0 || job->nr % job->nr_layers != 0 ||
	    job->layer >= kv->geo.g.nr_layers ||
	    job->nr_layers > kv->geo.g.nr_layers - job->layer || job->slots == 0 ||
	    job->slots > ring->cq_entries || job->in_flight > job->slots ||
	    job->slot_bytes > UINT32_MAX || job->slot_bytes % 16 != 0 ||
	    kv->geo.layer_block_bytes <= TT_XXH3_MIDSIZE_MAX) {
		return -EINVAL;
	}
	if (job->nr == 0) {
		return 0;
	}
	/* The controller's group and the workers', packed evenly into the blocks asked for. */
	workers = job->workers ? job->workers : 16;
	groups = workers + 1;
	blocks = job->blocks != 0 && job->blocks < groups ? job->blocks : groups;
	per_block = (groups + blocks - 1) / blocks;
	if (per_block > MAX_GROUPS) {
		return -EINVAL;
	}
	blocks = (groups + per_block - 1) / per_block;
	group_threads = per_block * GROUP <= BLOCK_THREADS ? GROUP : GROUP / 2;
	dma = job->dma && !job->write;
	if (dma && job->slots > TT_GPU_URING_MAX_GROUP_WORDS) {
		return -EINVAL; /* more groups than words (a group is one slot at least) */
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc == 0) {
		rc = prepare_dev(dev, job, workers);
	}
	if (rc == 0 && dma) {
		rc = dma_prepare(dev, job);
	}
	if (rc < 0) {
		return rc;
	}
	memset(&param, 0, sizeof(param));
	param.ring = *ring;
	param.segs = dev->segs;
	param.nr_segs = kv->segs_per_layer;
	param.per_layer = job->nr / job->nr_layers;
	param.layer_block_bytes = kv->geo.layer_block_bytes;
	param.bounce = job->bounce;
	param.slot_bytes = job->slot_bytes;
	param.slots = job->slots;
	param.in_flight = job->in_flight != 0 ? job->in_flight : job->slots;
	param.dslots = job->slots * TT_GPU_URING_DMA_STAGING;
	param.nr = job->nr;
	param.workers = workers;
	param.group_threads = group_threads;
	param.write = job->write;
	param.epoch = ++dev->epoch;
	param.timeout_ns = (uint64_t)job->timeout_ms * 1000000ull;
	if (dma) {
		param.dstage = dev->dstage;
		param.group = tt_gpu_uring_dma_group(job->slots, job->slot_bytes);
		param.group_words = job->slots / param.group;
		param.arrived = dev->counts;
		param.copied = dev->counts + TT_GPU_URING_MAX_GROUP_WORDS;
		param.tally = dev->counts + 2 * TT_GPU_URING_MAX_GROUP_WORDS;
	}
	rc = copy_segs(dev, job);
	if (rc == 0) {
		rc = check(g,
		           cudaMemcpyAsync(dev->objs, job->objs, job->nr * sizeof(*job->objs),
		                           cudaMemcpyHostToDevice, g->stream),
		           "cudaMemcpyAsync");
	}
	if (rc == 0 && job->nr_ids > 0) {
		rc = check(g,
		           cudaMemcpyAsync(dev->ids, job->ids, job->nr_ids * sizeof(*job->ids),
		                           cudaMemcpyHostToDevice, g->stream),
		           "cudaMemcpyAsync");
	}
	if (rc == 0) {
		rc =
		    check(g, cudaMemsetAsync(dev->failed, 0, sizeof(int), g->stream), "cudaMemset");
	}
	if (rc == 0 && job->trace != NULL) {
		param.trace = job->trace;
		param.workers_left = reinterpret_cast<unsigned *>(dev->failed + 1);
		param.phase_ns = dev->phase_ns;
		memset(job->trace, 0, TT_GPU_URING_TRACE_WORDS * sizeof(*job->trace));
		rc = check(g,
		           cudaMemcpyAsync(param.workers_left, &workers, sizeof(workers),
		                           cudaMemcpyHostToDevice, g->stream),
		           "cudaMemcpyAsync");
		if (rc == 0) {
			rc = check(
			    g,
			    cudaMemsetAsync(dev->phase_ns, 0,
			                    TT_GPU_URING_TRACE_PHASES * sizeof(*dev->phase_ns),
			                    g->stream),
			    "cudaMemset");
		}
	}
	if (rc == 0 && !dev->span_open) {
		rc = check(g, cudaEventRecord(dev->span_begin, g->stream), "cudaEventRecord");
		dev->span_open = rc == 0;
		dev->span_blocks = 0;
	}
	if (rc < 0) {
		return rc;
	}
	gpu_uring_kernel<<<blocks, per_block * group_threads, 0, g->stream>>>(
	    param, dev->objs, dev->ids, dev->scratch, dev->ready, dev->freed, dev->failed);
	g->launches++;
	dev->span_blocks = dev->span_blocks > blocks ? dev->span_blocks : blocks;
	rc = check(g, cudaGetLastError(), "gpu-uring kernel launch");
	if (rc == 0 && dma) {
		rc = dma_enqueue(dev, job, param);
	}
	if (rc == 0) {
		rc = check(g, cudaEventRecord(dev->span_end, g->stream), "cudaEventRecord");
	}
	if (rc == 0) {
		/* Statuses and save checksums back to the caller's array, on the stream. */
		rc = check(g,
		           cudaMemcpyAsync(job->objs, dev->objs, job->nr * sizeof(*job->objs),
		                           cudaMemcpyDeviceToHost, g->stream),
		           "cudaMemcpyAsync");
	}
	if (rc == 0) {
		rc = check(g,
		           cudaMemcpyAsync(job->failed, dev->failed, sizeof(int),
		                           cudaMemcpyDeviceToHost, g->stream),
		           "cudaMemcpyAsync");
	}
	return rc;
}

extern "C" int
tt_gpu_uring_elapsed(struct tt_gpu_uring_dev *dev, uint64_t *ns, uint32_t *blocks)
{
	struct tt_gpu *g = dev != NULL ? dev->g : NULL;
	float ms = 0;
	int rc;

	*ns = 0;
	*blocks = 0;
	if (dev == NULL || !dev->span_open) {
		return 0;
	}
	dev->span_open = false;
	rc = check(g, cudaEventSynchronize(dev->span_end), "cudaEventSynchronize");
	if (rc == 0) {
		rc = check(g, cudaEventElapsedTime(&ms, dev->span_begin, dev->span_end),
		           "cudaEventElapsedTime");
	}
	if (rc < 0) {
		return rc;
	}
	*ns = (uint64_t)((double)ms * 1e6);
	*blocks = dev->span_blocks;
	return 0;
}
