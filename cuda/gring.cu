/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU driver of the gpu-uring engine: one kernel per layer issues every object I/O of that
 * layer into a real io_uring itself, reaps the completions, and moves each object between its
 * bounce slot and the paged KV, checking (load) or computing (save) its checksum on the GPU.
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
 * checksum there and scatters into the paged blocks. A save worker gathers the blocks into its
 * scratch, hashes them, copies them into the bounce slot and marks it ready to write. At most
 * S = slots I/Os are in flight (I/O i reuses the slot of I/O i - S), never more than the CQ
 * holds. Every wait has a deadline (%globaltimer): a stalled ring fails the layer with
 * -ETIMEDOUT instead of hanging the GPU.
 *
 * All blocks must be resident at once (at most W + 1 blocks, W small next to the SM count). A
 * group synchronises on a named barrier of its own, never the whole block's.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_impl.cuh"
#include "xxh3.cuh"

extern "C" {
#include "format/format.h"
#include "gring/proto.h"
}

/* Threads of one worker (and of the controller's group), and of the other kernels' blocks. */
#define GROUP 256
/* Threads of a layer kernel's block: 768 keeps it at 80 registers a thread without spills
 * (1024 would cap it at 64). Its groups are of GROUP threads, or of half as many when more than
 * 3 must share a block: a block holds at most BLOCK_THREADS / (GROUP / 2) = MAX_GROUPS. */
#define BLOCK_THREADS 768
#define MAX_GROUPS TT_GRING_GROUPS_PER_BLOCK
static_assert(BLOCK_THREADS / (GROUP / 2) == MAX_GROUPS, "the store packs by this count");

/* What one group keeps in shared memory. */
struct group_shared {
	xxh_shared xxh;
	int ok; /* wait_flag's verdict for the group */
};

struct tt_gring_dev {
	struct tt_gring_obj *objs; /* device copy of a layer's objects */
	uint32_t nr_objs_cap;
	uint32_t *ids;
	uint32_t nr_ids_cap;
	uint8_t *scratch; /* one object per worker */
	uint64_t scratch_bytes;
	/* The GPU time of the layer kernels launched since the last tt_gpu_gring_elapsed(): from
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
};

struct seg_param {
	unsigned long long base, stride, bytes;
};

struct job_param {
	struct tt_gring_view ring;
	seg_param seg[TT_MAX_SEGS_PER_LAYER];
	unsigned nr_segs;
	uint64_t lbb;    /* layer block bytes */
	uint8_t *bounce; /* slots, mapped host memory (host address = device address) */
	uint64_t slot_bytes;
	uint32_t slots;
	uint32_t nr;
	uint32_t workers;
	uint32_t group_threads; /* GROUP or GROUP / 2 */
	uint32_t write;
	uint64_t epoch;
	uint64_t timeout_ns;
	volatile uint64_t *trace; /* mapped host memory or NULL */
	unsigned *workers_left;   /* device counter: the last worker out stamps trace[4] */
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

/* Loads each thread keeps in flight while copying: a load from host memory takes a microsecond
 * or more and one from HBM most of one, so one at a time leaves a group latency-bound (about
 * 256 x 16 B per round trip: a 1 MiB object's scatter took ~0.2 ms that way, and few workers
 * could not keep up with the storage), and slower still when a prefill shares the SM. */
#define LOADS_IN_FLIGHT 8

/* Copy \p n 16-byte vectors with every thread of team \p t, LOADS_IN_FLIGHT loads at a time;
 * from a bounce slot (\p from_host) with cache-volatile loads (ld.global.cv), because the slot
 * was rewritten by DMA since this SM may last have cached it. */
template <bool from_host>
__device__ static void
team_copy_vectors(const team &t, int4 *d, const int4 *s, uint64_t n)
{
	for (uint64_t i = t.lane; i < n; i += (uint64_t)t.size * LOADS_IN_FLIGHT) {
		int4 v[LOADS_IN_FLIGHT];

#pragma unroll
		for (unsigned k = 0; k < LOADS_IN_FLIGHT; k++) {
			uint64_t j = i + (uint64_t)k * t.size;

			if (j < n) {
				v[k] = from_host ? __ldcv(&s[j]) : s[j];
			}
		}
#pragma unroll
		for (unsigned k = 0; k < LOADS_IN_FLIGHT; k++) {
			uint64_t j = i + (uint64_t)k * t.size;

			if (j < n) {
				d[j] = v[k];
			}
		}
	}
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

__device__ static void
team_copy(const team &t, uint8_t *dst, const uint8_t *src, uint64_t bytes)
{
	if ((((uintptr_t)dst | (uintptr_t)src | bytes) & 15) == 0) {
		team_copy_vectors<false>(t, reinterpret_cast<int4 *>(dst),
		                         reinterpret_cast<const int4 *>(src), bytes / 16);
		return;
	}
	for (uint64_t i = t.lane; i < bytes; i += t.size) {
		dst[i] = src[i];
	}
}

/* Move an object's blocks between \p obj (canonical layout) and the paged KV. */
__device__ static void
move_blocks(const team &t, const job_param &p, const uint32_t *ids, uint32_t n, uint8_t *obj,
            bool gather)
{
	for (uint32_t b = 0; b < n; b++) {
		for (unsigned s = 0; s < p.nr_segs; s++) {
			uint8_t *kv =
			    reinterpret_cast<uint8_t *>(p.seg[s].base + ids[b] * p.seg[s].stride);

			if (gather) {
				team_copy(t, obj, kv, p.seg[s].bytes);
			} else {
				team_copy(t, kv, obj, p.seg[s].bytes);
			}
			obj += p.seg[s].bytes;
		}
	}
}

/* ---- the controller ---- */

__device__ static void
controller(const job_param &p, struct tt_gring_obj *objs, unsigned long long *ready,
           unsigned long long *freed, int *failed)
{
	const struct tt_gring_view *v = &p.ring;
	uint32_t tail = *(volatile uint32_t *)v->sq_tail, head = *(volatile uint32_t *)v->cq_head;
	uint32_t next = 0, done = 0;
	uint64_t progress = now_ns(), published_ns = 0;
	/* Reads go out one at a time, read_pace_ns apart, where the ring asks for it (proto.h). */
	uint32_t pace_ns = p.write ? 0 : v->read_pace_ns;
	unsigned back_off = 32;
	bool published = false;

	if (p.trace != NULL) {
		p.trace[0] = progress;
	}
	while (done < p.nr) {
		uint32_t queued = 0, ready_n;

		/* Submit: slot free (its previous I/O consumed), save data gathered, SQ space. */
		while (next < p.nr && tt_gring_sq_space(v, tail) > 0) {
			uint32_t slot = next % p.slots;
			unsigned long long want = p.epoch << 32 | (unsigned long long)(next + 1);
			struct tt_gring_io io;

			if (pace_ns != 0 && (queued > 0 || now_ns() - published_ns < pace_ns)) {
				break;
			}
			if (next >= p.slots && ld_acquire_gpu(&freed[slot]) !=
			                           (p.epoch << 32 | (next - p.slots + 1))) {
				break;
			}
			/* A save's data must be in the slot: its worker says so through ready. */
			if (p.write && ld_acquire_gpu(&ready[slot]) != want) {
				break;
			}
			if (objs[next].status != 0) {
				/* Nothing to write for a failed gather: its completion is its
				 * status. */
				if (!p.write) {
					st_release_gpu(&ready[slot], want);
				}
				st_release_gpu(&freed[slot], want);
				next++;
				done++;
				continue;
			}
			io.off = objs[next].off;
			io.buf =
			    reinterpret_cast<uint64_t>(p.bounce + (uint64_t)slot * p.slot_bytes);
			io.len = (uint32_t)p.slot_bytes;
			io.file = (uint16_t)objs[next].file;
			io.write = (uint8_t)p.write;
			tt_gring_put(v, tail++, &io, next);
			next++;
			queued++;
		}
		if (queued > 0) {
			tt_gring_publish(v, tail); /* one release per batch */
			published_ns = now_ns();
			if (p.trace != NULL && !published) {
				p.trace[1] = published_ns;
			}
			published = true;
		}
		/* Reap. */
		ready_n = tt_gring_cq_ready(v, head);
		for (uint32_t k = 0; k < ready_n; k++, head++) {
			uint64_t tag;
			int32_t res;

			tt_gring_cqe(v, head, &tag, &res);
			if (tag >= p.nr) {
				continue;
			}
			if (res >= 0 && (uint32_t)res != (uint32_t)p.slot_bytes) {
				res = -EIO; /* short: the file ends inside the object */
			}
			if (res < 0) {
				objs[tag].status = res;
			}
			if (p.write) {
				/* The write is done: the slot is free for I/O tag + S. */
				st_release_gpu(&freed[tag % p.slots],
				               p.epoch << 32 | (unsigned long long)(tag + 1));
			} else {
				st_release_gpu(&ready[tag % p.slots],
				               p.epoch << 32 | (unsigned long long)(tag + 1));
			}
			done++;
		}
		if (ready_n > 0) {
			tt_gring_cq_release(v, head);
			if (p.trace != NULL) {
				uint64_t t = now_ns();

				if (p.trace[2] == 0) {
					p.trace[2] = t;
				}
				p.trace[3] = t;
			}
		}
		if (queued > 0 || ready_n > 0) {
			progress = now_ns();
			back_off = 32;
		} else if (now_ns() - progress > p.timeout_ns) {
			atomicExch(failed, 1);
			return;
		} else {
			__nanosleep(back_off);
			back_off = back_off < 4096 ? back_off * 2 : back_off;
		}
	}
}

/* ---- the workers ---- */

/* Wait for \p flag to reach \p want; false on a timeout (or when another group failed). */
__device__ static bool
wait_flag(const team &t, group_shared *sh, const unsigned long long *flag, unsigned long long want,
          uint64_t timeout_ns, int *failed)
{
	if (t.lane == 0) {
		uint64_t start = now_ns();

		sh->ok = 1;
		while (ld_acquire_gpu(flag) != want) {
			if (*(volatile int *)failed || now_ns() - start > timeout_ns) {
				atomicExch(failed, 1);
				sh->ok = 0;
				break;
			}
			__nanosleep(256);
		}
	}
	team_sync(t);
	return sh->ok != 0;
}

__device__ static void
worker(const team &t, group_shared *sh, const job_param &p, struct tt_gring_obj *objs,
       const uint32_t *ids, uint8_t *scratch, unsigned long long *ready, unsigned long long *freed,
       int *failed, uint32_t w)
{
	for (uint32_t i = w; i < p.nr; i += p.workers) {
		struct tt_gring_obj *o = &objs[i];
		uint32_t slot = i % p.slots;
		unsigned long long mine = p.epoch << 32 | (unsigned long long)(i + 1);
		uint8_t *bounce = p.bounce + (uint64_t)slot * p.slot_bytes;
		uint64_t stored = (uint64_t)o->stored * p.lbb,
		         moved = (uint64_t)o->nr_moved * p.lbb;

		if (p.write) {
			/* Save: the slot is ours once I/O i - S is written. */
			if (i >= p.slots &&
			    !wait_flag(t, sh, &freed[slot], p.epoch << 32 | (i - p.slots + 1),
			               p.timeout_ns, failed)) {
				return;
			}
			if (o->status == 0) {
				move_blocks(t, p, ids + o->ids_off, o->nr_moved, scratch, true);
				team_sync(t);
				o->csum = xxh3_64_block(scratch, moved, &sh->xxh, t);
				team_copy(t, bounce, scratch, moved);
				for (uint64_t b = moved + t.lane; b < p.slot_bytes; b += t.size) {
					bounce[b] = 0; /* padding is zero, never stale */
				}
			}
			__threadfence_system(); /* the bytes reach host memory before the SQE */
			team_sync(t);
			if (t.lane == 0) {
				st_release_gpu(&ready[slot], mine);
			}
			continue;
		}
		/* Load: wait for the read, take the object, give the slot back. */
		if (!wait_flag(t, sh, &ready[slot], mine, p.timeout_ns, failed)) {
			return;
		}
		if (o->status == 0) {
			team_copy_from_host(t, scratch, bounce, stored);
		}
		team_sync(t);
		if (t.lane == 0) {
			st_release_gpu(&freed[slot], mine);
		}
		if (o->status != 0) {
			continue;
		}
		if (xxh3_64_block(scratch, stored, &sh->xxh, t) != o->csum) {
			if (t.lane == 0) {
				o->status = -EBADMSG;
			}
			continue; /* never scattered */
		}
		move_blocks(t, p, ids + o->ids_off, o->nr_moved,
		            scratch + (uint64_t)o->skip * p.lbb, false);
		team_sync(t);
	}
}

/* Group 0 (the first of block 0) is the controller, groups 1..W the workers; each block holds
 * blockDim.x / p.group_threads groups, each synchronising on its own named barrier. */
__global__ static void
__launch_bounds__(BLOCK_THREADS)
    gring_kernel(job_param p, struct tt_gring_obj *objs, const uint32_t *ids, uint8_t *scratch,
                 unsigned long long *ready, unsigned long long *freed, int *failed)
{
	__shared__ group_shared shared[MAX_GROUPS];
	unsigned local = threadIdx.x / p.group_threads;
	uint32_t group = blockIdx.x * (blockDim.x / p.group_threads) + local;
	team t = {threadIdx.x % p.group_threads, p.group_threads, 1 + local};
	int *broken = failed + 2;

	if (*(volatile int *)broken) {
		if (group == 0 && t.lane == 0) {
			atomicExch(failed, 1); /* reported as this layer's timeout too */
		}
		return;
	}
	if (group == 0) {
		if (t.lane == 0) {
			controller(p, objs, ready, freed, failed);
			if (*(volatile int *)failed) {
				atomicExch(broken, 1);
			}
		}
		return;
	}
	if (group > p.workers) {
		return; /* the last block's spare groups */
	}
	worker(t, &shared[local], p, objs, ids, scratch + (uint64_t)(group - 1) * p.slot_bytes,
	       ready, freed, failed, group - 1);
	if (t.lane == 0 && *(volatile int *)failed) {
		atomicExch(broken, 1);
	}
	if (p.trace != NULL && t.lane == 0 && atomicSub(p.workers_left, 1) == 1) {
		p.trace[4] = now_ns();
	}
}

/* ---- host side ---- */

void
tt_gpu_gring_free(struct tt_gpu *g)
{
	struct tt_gring_dev *d = g->gring;

	if (d == NULL) {
		return;
	}
	cudaFree(d->objs);
	cudaFree(d->ids);
	cudaFree(d->scratch);
	cudaFree(d->ready);
	cudaFree(d->freed);
	cudaFree(d->failed);
	if (d->span_begin != NULL) {
		cudaEventDestroy(d->span_begin);
	}
	if (d->span_end != NULL) {
		cudaEventDestroy(d->span_end);
	}
	free(d);
	g->gring = NULL;
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

/* The checksum secret into constant memory, once per context. */
static int
secret_set(struct tt_gpu *g)
{
	int rc = 0;

	if (!g->csum_secret_set) {
		rc =
		    check(g, cudaMemcpyToSymbol(c_xxh_secret, tt_csum_secret, sizeof(c_xxh_secret)),
		          "cudaMemcpyToSymbol");
		g->csum_secret_set = rc == 0;
	}
	return rc;
}

/* The segments of \p layer of \p kv into \p p. */
static void
layer_segs(job_param *p, const struct tutti_kv *kv, uint32_t layer)
{
	const struct tutti_segment *segs = tt_kv_layer_segs(kv, layer);

	p->nr_segs = kv->segs_per_layer;
	for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
		p->seg[s].base = segs[s].base;
		p->seg[s].stride = segs[s].block_stride;
		p->seg[s].bytes = segs[s].bytes;
	}
	p->lbb = kv->geo.layer_block_bytes;
}

static int
prepare_dev(struct tt_gpu *g, const struct tt_gring_job *job, uint32_t workers)
{
	struct tt_gring_dev *d = g->gring;
	uint64_t caps[5];
	int rc;

	if (d == NULL) {
		d = static_cast<struct tt_gring_dev *>(calloc(1, sizeof(*d)));
		if (d == NULL) {
			return -ENOMEM;
		}
		g->gring = d;
		/* failed, the workers-left counter of the trace, the sticky broken word */
		rc = check(g, cudaMalloc(&d->failed, 3 * sizeof(int)), "cudaMalloc");
		if (rc == 0) {
			rc = check(g, cudaMemsetAsync(d->failed, 0, 3 * sizeof(int), g->stream),
			           "cudaMemset");
		}
		if (rc == 0) {
			rc = check(g, cudaEventCreate(&d->span_begin), "cudaEventCreate");
		}
		if (rc == 0) {
			rc = check(g, cudaEventCreate(&d->span_end), "cudaEventCreate");
		}
		if (rc < 0) {
			return rc;
		}
	}
	rc = secret_set(g);
	if (rc < 0) {
		return rc;
	}
	caps[0] = (uint64_t)d->nr_objs_cap * sizeof(*d->objs);
	caps[1] = (uint64_t)d->nr_ids_cap * sizeof(*d->ids);
	caps[2] = d->scratch_bytes;
	caps[3] = caps[4] = (uint64_t)d->nr_slots_cap * sizeof(*d->ready);
	if (reserve(g, (void **)&d->objs, &caps[0], (uint64_t)job->nr * sizeof(*d->objs)) < 0 ||
	    reserve(g, (void **)&d->ids, &caps[1], (uint64_t)job->nr_ids * sizeof(*d->ids)) < 0 ||
	    reserve(g, (void **)&d->scratch, &caps[2], (uint64_t)workers * job->slot_bytes) < 0) {
		return -ENOMEM;
	}
	if (caps[3] < (uint64_t)job->slots * sizeof(*d->ready)) {
		/* Flags start at zero: epochs start at 1, so no old value ever matches. */
		if (reserve(g, (void **)&d->ready, &caps[3], job->slots * sizeof(*d->ready)) < 0 ||
		    reserve(g, (void **)&d->freed, &caps[4], job->slots * sizeof(*d->freed)) < 0 ||
		    cudaMemsetAsync(d->ready, 0, caps[3], g->stream) != cudaSuccess ||
		    cudaMemsetAsync(d->freed, 0, caps[4], g->stream) != cudaSuccess) {
			return -ENOMEM;
		}
		d->nr_slots_cap = job->slots;
	}
	d->nr_objs_cap = (uint32_t)(caps[0] / sizeof(*d->objs));
	d->nr_ids_cap = (uint32_t)(caps[1] / sizeof(*d->ids));
	d->scratch_bytes = caps[2];
	return 0;
}

extern "C" int
tt_gpu_gring_layer(struct tt_gpu *g, const struct tt_gring_view *ring,
                   const struct tt_gring_job *job)
{
	const struct tutti_kv *kv = job->kv;
	struct tt_gring_dev *d;
	uint32_t workers, groups, blocks, per_block, group_threads;
	job_param p;
	int rc;

	if (g == NULL || ring == NULL || job == NULL || kv == NULL || kv->mem != TUTTI_MEM_CUDA ||
	    kv->device != g->device || job->layer >= kv->geo.g.nr_layers || job->slots == 0 ||
	    job->slots > ring->cq_entries || job->slot_bytes > UINT32_MAX ||
	    job->slot_bytes % 16 != 0 || kv->geo.layer_block_bytes <= TT_XXH3_MIDSIZE_MAX) {
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
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc == 0) {
		rc = prepare_dev(g, job, workers);
	}
	if (rc < 0) {
		return rc;
	}
	d = g->gring;
	memset(&p, 0, sizeof(p));
	p.ring = *ring;
	layer_segs(&p, kv, job->layer);
	p.bounce = job->bounce;
	p.slot_bytes = job->slot_bytes;
	p.slots = job->slots;
	p.nr = job->nr;
	p.workers = workers;
	p.group_threads = group_threads;
	p.write = job->write;
	p.epoch = ++d->epoch;
	p.timeout_ns = (uint64_t)job->timeout_ms * 1000000ull;
	rc = check(g,
	           cudaMemcpyAsync(d->objs, job->objs, job->nr * sizeof(*job->objs),
	                           cudaMemcpyHostToDevice, g->stream),
	           "cudaMemcpyAsync");
	if (rc == 0 && job->nr_ids > 0) {
		rc = check(g,
		           cudaMemcpyAsync(d->ids, job->ids, job->nr_ids * sizeof(*job->ids),
		                           cudaMemcpyHostToDevice, g->stream),
		           "cudaMemcpyAsync");
	}
	if (rc == 0) {
		rc = check(g, cudaMemsetAsync(d->failed, 0, sizeof(int), g->stream), "cudaMemset");
	}
	if (rc == 0 && job->trace != NULL) {
		p.trace = job->trace;
		p.workers_left = reinterpret_cast<unsigned *>(d->failed + 1);
		memset(job->trace, 0, TT_GRING_TRACE_POINTS * sizeof(*job->trace));
		rc = check(g,
		           cudaMemcpyAsync(p.workers_left, &workers, sizeof(workers),
		                           cudaMemcpyHostToDevice, g->stream),
		           "cudaMemcpyAsync");
	}
	if (rc == 0 && !d->span_open) {
		rc = check(g, cudaEventRecord(d->span_begin, g->stream), "cudaEventRecord");
		d->span_open = rc == 0;
		d->span_blocks = 0;
	}
	if (rc < 0) {
		return rc;
	}
	gring_kernel<<<blocks, per_block * group_threads, 0, g->stream>>>(
	    p, d->objs, d->ids, d->scratch, d->ready, d->freed, d->failed);
	g->launches++;
	d->span_blocks = d->span_blocks > blocks ? d->span_blocks : blocks;
	rc = check(g, cudaGetLastError(), "gpu-uring kernel launch");
	if (rc == 0) {
		rc = check(g, cudaEventRecord(d->span_end, g->stream), "cudaEventRecord");
	}
	if (rc == 0) {
		/* Statuses and save checksums back to the caller's array, on the stream. */
		rc = check(g,
		           cudaMemcpyAsync(job->objs, d->objs, job->nr * sizeof(*job->objs),
		                           cudaMemcpyDeviceToHost, g->stream),
		           "cudaMemcpyAsync");
	}
	if (rc == 0) {
		rc = check(g,
		           cudaMemcpyAsync(job->failed, d->failed, sizeof(int),
		                           cudaMemcpyDeviceToHost, g->stream),
		           "cudaMemcpyAsync");
	}
	return rc;
}

extern "C" int
tt_gpu_gring_elapsed(struct tt_gpu *g, uint64_t *ns, uint32_t *blocks)
{
	struct tt_gring_dev *d = g != NULL ? g->gring : NULL;
	float ms = 0;
	int rc;

	*ns = 0;
	*blocks = 0;
	if (d == NULL || !d->span_open) {
		return 0;
	}
	d->span_open = false;
	rc = check(g, cudaEventSynchronize(d->span_end), "cudaEventSynchronize");
	if (rc == 0) {
		rc = check(g, cudaEventElapsedTime(&ms, d->span_begin, d->span_end),
		           "cudaEventElapsedTime");
	}
	if (rc < 0) {
		return rc;
	}
	*ns = (uint64_t)((double)ms * 1e6);
	*blocks = d->span_blocks;
	return 0;
}

/* ---- objects in device memory (engine gds) ---- */

/* Block b owns object b, in slot b of \p mem: load checks and scatters it, save gathers and
 * hashes it (zeroing the slot's padding). */
__global__ static void
__launch_bounds__(GROUP)
    objs_kernel(job_param p, struct tt_gring_obj *objs, const uint32_t *ids, uint8_t *mem)
{
	__shared__ xxh_shared sh;
	__shared__ struct tt_gring_obj
	    o; /* the descriptor lives in mapped host memory: read once */
	uint8_t *slot = mem + (uint64_t)blockIdx.x * p.slot_bytes;
	const team t = {threadIdx.x, GROUP, 0};

	if (threadIdx.x == 0) {
		o = objs[blockIdx.x];
	}
	__syncthreads();
	if (o.status != 0) {
		return;
	}
	if (p.write) {
		uint64_t moved = (uint64_t)o.nr_moved * p.lbb, h;

		move_blocks(t, p, ids + o.ids_off, o.nr_moved, slot, true);
		__syncthreads();
		h = xxh3_64_block(slot, moved, &sh, t);
		for (uint64_t b = moved + threadIdx.x; b < p.slot_bytes; b += GROUP) {
			slot[b] = 0; /* padding is zero, never stale */
		}
		if (threadIdx.x == 0) {
			objs[blockIdx.x].csum = h;
		}
		return;
	}
	if (xxh3_64_block(slot, (uint64_t)o.stored * p.lbb, &sh, t) != o.csum) {
		if (threadIdx.x == 0) {
			objs[blockIdx.x].status = -EBADMSG;
		}
		return; /* never scattered */
	}
	move_blocks(t, p, ids + o.ids_off, o.nr_moved, slot + (uint64_t)o.skip * p.lbb, false);
}

extern "C" int
tt_gpu_objs(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer, struct tt_gring_obj *objs,
            uint32_t nr, const uint32_t *ids, uint8_t *mem, uint64_t slot_bytes, bool write)
{
	job_param p;
	int rc;

	if (g == NULL || kv == NULL || kv->mem != TUTTI_MEM_CUDA || kv->device != g->device ||
	    layer >= kv->geo.g.nr_layers || slot_bytes % 16 != 0 ||
	    kv->geo.layer_block_bytes <= TT_XXH3_MIDSIZE_MAX ||
	    (nr > 0 && (objs == NULL || mem == NULL))) {
		return -EINVAL;
	}
	if (nr == 0) {
		return 0;
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc == 0) {
		rc = secret_set(g);
	}
	if (rc < 0) {
		return rc;
	}
	memset(&p, 0, sizeof(p));
	layer_segs(&p, kv, layer);
	p.slot_bytes = slot_bytes;
	p.write = write;
	objs_kernel<<<nr, GROUP, 0, g->stream>>>(p, objs, ids, mem);
	g->launches++;
	return check(g, cudaGetLastError(), "objects kernel launch");
}

/* ---- the checksum alone, for tests ---- */

__global__ static void
__launch_bounds__(GROUP) csum_kernel(const uint8_t *p, uint64_t len, uint64_t *out)
{
	__shared__ xxh_shared sh;
	const team t = {threadIdx.x, GROUP, 0};
	uint64_t h = xxh3_64_block(p, len, &sh, t);

	if (threadIdx.x == 0) {
		*out = h;
	}
}

extern "C" int
tt_gpu_csum(struct tt_gpu *g, const void *p, uint64_t len, uint64_t *out)
{
	uint64_t *d_out = NULL;
	int rc;

	if (g == NULL || p == NULL || out == NULL || len <= TT_XXH3_MIDSIZE_MAX) {
		return -EINVAL;
	}
	rc = check(g, cudaSetDevice(g->device), "cudaSetDevice");
	if (rc == 0) {
		rc = secret_set(g);
	}
	if (rc == 0) {
		rc = check(g, cudaMalloc(&d_out, sizeof(*d_out)), "cudaMalloc");
	}
	if (rc == 0) {
		csum_kernel<<<1, GROUP, 0, g->stream>>>(static_cast<const uint8_t *>(p), len,
		                                        d_out);
		rc = check(g, cudaGetLastError(), "csum kernel");
	}
	if (rc == 0) {
		rc = check(
		    g, cudaMemcpyAsync(out, d_out, sizeof(*out), cudaMemcpyDeviceToHost, g->stream),
		    "cudaMemcpyAsync");
	}
	if (rc == 0) {
		rc = check(g, cudaStreamSynchronize(g->stream), "csum kernel");
	}
	cudaFree(d_out);
	return rc;
}
