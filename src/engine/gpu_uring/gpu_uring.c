/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine gpu-uring: loads and saves through the GPU-drivable ring (ring.c, driven by kernel.cu).
 *
 * A batch becomes one I/O program: every object of every chunk, layer by layer (the order in
 * which a layerwise load needs them), each read into or written from one object-sized bounce
 * slot of the staging memory; I/O i uses slot i mod S and is submitted once I/O i - S has been
 * consumed, so the bounce memory is fixed whatever the context length.
 *
 * GPU KV: one driver kernel per layer, every I/O of it submitted and reaped by the GPU, which
 * checks (load) or computes (save) each object's checksum. Host KV, and layer blocks too small
 * for the GPU hash: the twin (a host thread following the GPU's protocol) drives the program;
 * checksums are checked per object before it is scattered, and computed per object as it is
 * gathered.
 *
 * The ring is ring.c, its protocol proto.h, the GPU's driver kernel.cu (kernel.h). Engine auto
 * (src/engine/auto/) is built on this engine, through gpu_uring.h.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/gpu_uring/gpu_uring.h"
#include "format/format.h"
#include "tutti/engine.h"

_Static_assert(TT_GPU_IO_GROUPS_PER_SM == TT_GPU_URING_GROUPS_PER_BLOCK,
               "the default of workers packs groups as the layer kernel does");

/* The ring: one bounce slot per object of staging, up to the CQ credit. Reads of
 * page-cache-backed files (tmpfs) get IOSQE_ASYNC, and so do writes when the store has several
 * data files: issued inline, their copies would all run on the one SQ thread, which then caps
 * the store (docs/results.md, E1). */
#define RING_MAX_SLOTS 4096u
/* On page-cache-backed files at most this much I/O is in flight, and loads by SM, which hold a
 * slot per I/O in flight, get no more of the staging as bounce slots (the rest stays allocated,
 * unused by them): each read is there a copy by an io-wq worker into its slot, and both more
 * reads in flight and more memory to land them in cost. 64 MiB is the best of the slot counts
 * measured: fewer gain nothing, more run slower and cost more CPU per GB, their io-wq workers
 * waiting for a CPU (docs/results.md, E25). Loads by the copy engine, with the same cap on I/Os
 * in flight, still slow as their slots grow (E28), since tmpfs reads slow with the memory they
 * land in (C8). */
#define RING_PAGE_CACHE_BOUNCE_BYTES (64ull << 20)
/* The SQ holds what the controller publishes in one batch, which the CQ credit bounds anyway. */
#define RING_MAX_SQ_ENTRIES 1024u
/* An idle SQ thread sleeps after this long; the host wakes it once per launch. */
#define RING_SQ_IDLE_MS 100u
/* Those punted I/Os are published a few microseconds apart, so that each wakes an io-wq
 * worker of its own (gpu_uring/proto.h): long enough apart for a woken worker to leave io-wq's
 * free list, short next to an object's own time (docs/results.md, row I1, measured on reads). */
#define RING_PACE_NS 4000u

/* A load whose layers are launched on the GPU. */
struct tt_launch {
	struct tt_batch *b;
	struct tt_gpu *gpu;
	struct tt_obj_lists lists; /* every layer's objects, in the caller's list memory */
	uint32_t launched;         /* layers launched so far */
	int rc;                    /* the first failure: nothing is folded then */
};

static struct tt_gpu_uring_engine *
to_gu(struct tt_engine *e)
{
	return (struct tt_gpu_uring_engine *)e;
}

/* ---- options ---- */

static const char *const submit_names[] = {
    [TT_GPU_URING_SUBMIT_AUTO] = "auto",
    [TT_GPU_URING_SUBMIT_SQPOLL] = "sqpoll",
    [TT_GPU_URING_SUBMIT_HOST] = "host",
    NULL,
};

static const char *const copy_names[] = {
    [TT_GPU_URING_COPY_AUTO] = "auto",
    [TT_GPU_URING_COPY_SM] = "sm",
    [TT_GPU_URING_COPY_DMA] = "dma",
    NULL,
};

/* Every SM the I/O kernels hold is one a prefill's GEMMs cannot use while the step's loads last,
 * and each costs a prefill beside it far more than its share of the GPU, while two already read
 * host memory as fast as SMs can: hold as few as keep pace with the storage (docs/results.md,
 * rows F1, F2 and L7). The kernels run on a stream of the greatest priority. */
const struct tt_engine_opt tt_gpu_uring_opts[TT_GPU_URING_NR_OPTS] = {
    [TT_GPU_URING_OPT_WORKERS] =
        {
            .name = "workers",
            .kind = TUTTI_ENGINE_OPTION_INT,
            .min = 1,
            .max = TT_GPU_IO_MAX,
            .def = TT_GPU_IO_WORKERS_DEFAULT,
            .help = "GPU KV: workers of its I/O kernel, each moving one object at a time in "
                    "or out of its bounce slot; more keep more objects in flight",
        },
    [TT_GPU_URING_OPT_SMS] =
        {
            .name = "sms",
            .kind = TUTTI_ENGINE_OPTION_INT,
            .min = 0,
            .max = TT_GPU_IO_MAX,
            .def = 0,
            .help = "GPU KV: SMs its I/O kernel holds, packed 3 groups of 256 threads or up "
                    "to 6 of 128 to an SM; at least (workers + 1) / 6 rounded up, which 0 "
                    "gives (5 for 29 workers); workers + 1 gives each worker an SM",
        },
    [TT_GPU_URING_OPT_SUBMIT] =
        {
            .name = "submit",
            .kind = TUTTI_ENGINE_OPTION_CHOICE,
            .def = TT_GPU_URING_SUBMIT_AUTO,
            .choices = submit_names,
            .help = "who issues its I/O: sqpoll (the kernel's SQ thread, spinning a core "
                    "while I/O flows), host (a host thread every 50 us), auto (host on a "
                    "block device, sqpoll on page-cache-backed files)",
        },
    [TT_GPU_URING_OPT_COPY] =
        {
            .name = "copy",
            .kind = TUTTI_ENGINE_OPTION_CHOICE,
            .def = TT_GPU_URING_COPY_AUTO,
            .choices = copy_names,
            .help = "how GPU KV loads cross into HBM: sm (the I/O kernel's loads across "
                    "PCIe), dma (the copy engine, through device staging; needs 64-bit "
                    "stream memory operations), auto (sm)",
        },
};

/* The options in conf->opt[] into \p g, checked against each other. */
static int
take_opts(struct tt_gpu_uring_engine *g, const struct tt_engine_ops *ops,
          const struct tt_engine_conf *conf)
{
	g->workers = conf->opt[TT_GPU_URING_OPT_WORKERS];
	g->sms = conf->opt[TT_GPU_URING_OPT_SMS];
	g->submit = conf->opt[TT_GPU_URING_OPT_SUBMIT];
	g->copy = conf->opt[TT_GPU_URING_OPT_COPY];
	if (g->sms != 0 && g->sms * TT_GPU_IO_GROUPS_PER_SM < g->workers + 1) {
		tt_log_err(
		    conf->log,
		    "engine %s: sms=%u cannot hold %u workers and the ring's driver (at most "
		    "%u to an SM)",
		    ops->name, g->sms, g->workers, TT_GPU_IO_GROUPS_PER_SM);
		return -EINVAL;
	}
	/* 0: the fewest SMs that hold the workers and the ring's driver. */
	if (g->sms == 0) {
		g->sms = (g->workers + TT_GPU_IO_GROUPS_PER_SM) / TT_GPU_IO_GROUPS_PER_SM;
	}
	return 0;
}

/* ---- open and close ---- */

int
tt_gpu_uring_open_as(const struct tt_engine_ops *ops, const struct tt_engine_conf *conf,
                     size_t bytes, struct tt_engine **out)
{
	struct tt_gpu_uring_engine *g = tt_calloc(1, TT_MAX(bytes, sizeof(*g)));
	int rc;

	if (g == NULL) {
		return -ENOMEM;
	}
	rc = take_opts(g, ops, conf);
	if (rc < 0) {
		tt_free(g);
		return rc;
	}
	/* The uring queue carries control I/O (recovery, headers, flushes) and fsck. */
	rc = tt_engine_init(&g->base, ops, conf, &tt_ioq_uring);
	if (rc < 0) {
		tt_engine_fini(&g->base);
		tt_free(g);
		return rc;
	}
	*out = &g->base;
	return 0;
}

static int
gpu_uring_open(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	return tt_gpu_uring_open_as(&tt_engine_gpu_uring, conf, 0, out);
}

uint32_t
tt_gpu_uring_bounce_slots(uint64_t staging_bytes, uint64_t object_bytes, bool page_cache)
{
	uint64_t bytes =
	    page_cache ? TT_MIN(staging_bytes, RING_PAGE_CACHE_BOUNCE_BYTES) : staging_bytes;
	/* One slot at least, for objects over the cap: the staging always holds one. */
	uint64_t slots = TT_MAX(bytes / object_bytes, 1);

	return (uint32_t)TT_MIN(slots, (uint64_t)RING_MAX_SLOTS);
}

/* The ring on the data files, with the staging as its bounce slots. Returns 0 or -errno, the
 * caller logging it. */
static int
ring_create(struct tt_gpu_uring_engine *g)
{
	struct tt_engine *e = &g->base;
	/* Over several files (format 5 spreads a directory's slots over up to 16), punted writes
	 * run side by side on io-wq; into one file they would only contend. */
	bool punt_writes = e->page_cache && e->nr_fds > 1;
	/* Auto: the host issues I/O to a block device, whose inline O_DIRECT submissions cost
	 * microseconds, where an SQ thread would spin a core however slow the device (its CPU per
	 * GB on a disk, docs/results.md, E4, E5); on page-cache-backed files the SQ thread keeps
	 * inline copies off the host's threads. */
	bool host_submits = g->submit == TT_GPU_URING_SUBMIT_HOST ||
	                    (g->submit == TT_GPU_URING_SUBMIT_AUTO && !e->page_cache);
	struct tt_gpu_uring_conf conf;
	uint32_t cq;

	/* The cap on page-cache-backed files holds the I/Os in flight (E25). Loads by SM hold a
	 * slot per read until a worker has read it, so their slots are those in flight; loads by
	 * the copy engine hold a group's slots until its last read is in and it is copied, so
	 * they take the whole staging as slots, that reads go on while groups wait. */
	g->in_flight = tt_gpu_uring_bounce_slots(e->nr_staging * e->unit_bytes,
	                                         e->geo->object_bytes, e->page_cache);
	g->slots = g->copy == TT_GPU_URING_COPY_DMA
	               ? tt_gpu_uring_bounce_slots(e->nr_staging * e->unit_bytes,
	                                           e->geo->object_bytes, false)
	               : g->in_flight;
	tt_log_debug(e->log, "gpu-uring: %u bounce slots of %llu bytes, %u I/Os in flight at most",
	             g->slots, (unsigned long long)e->geo->object_bytes, g->in_flight);
	cq = 1;
	while (cq < g->slots || cq < e->conf.queue_depth) {
		cq <<= 1;
	}
	conf = (struct tt_gpu_uring_conf){
	    .fds = e->fds,
	    .nr_fds = e->nr_fds,
	    .buf = e->staging,
	    .buf_bytes = e->nr_staging * e->unit_bytes,
	    .sq_entries = TT_MIN(cq, RING_MAX_SQ_ENTRIES),
	    .cq_entries = cq,
	    .sq_idle_ms = RING_SQ_IDLE_MS,
	    .host_submits = host_submits,
	    .async = e->page_cache,
	    .async_writes = punt_writes,
	    .read_pace_ns = e->page_cache ? RING_PACE_NS : 0,
	    .write_pace_ns = punt_writes ? RING_PACE_NS : 0,
	    .log = e->log,
	};
	return tt_gpu_uring_create(&conf, &g->ring);
}

static int
gpu_uring_attach(struct tt_engine *e)
{
	int rc = ring_create(to_gu(e));

	if (rc < 0) {
		tt_log_err(e->log,
		           "engine gpu-uring: no io_uring on the library's own memory (NO_MMAP, "
		           "with SQPOLL where the kernel issues the I/O): %s",
		           tutti_strerror(rc));
	}
	return rc;
}

/* Pin and map the ring's memory for the GPU, once (the staging is mapped with the context). */
static int
map_ring(struct tt_gpu_uring_engine *g)
{
	struct tt_gpu_uring_region reg[2];
	int rc;

	if (g->ring_mapped) {
		return 0;
	}
	tt_gpu_uring_regions(g->ring, reg);
	rc = tt_gpu_host_register(reg[0].base, reg[0].bytes);
	if (rc == 0) {
		rc = tt_gpu_host_register(reg[1].base, reg[1].bytes);
		if (rc < 0) {
			tt_gpu_host_unregister(reg[0].base);
		}
	}
	if (rc < 0) {
		tt_log_err(g->base.log, "gpu-uring: mapping the ring for the GPU: %s",
		           tutti_strerror(rc));
		return rc;
	}
	g->ring_mapped = true;
	return 0;
}

void
tt_gpu_uring_close(struct tt_engine *e)
{
	struct tt_gpu_uring_engine *g = to_gu(e);

	/* The ring goes first: it waits for the kernel to finish with the staging memory. */
	if (g->inflight) {
		tt_gpu_sync(e->gpu); /* a launched load's kernels (an op left open is a bug) */
	}
	if (g->ring_mapped) {
		struct tt_gpu_uring_region reg[2];

		tt_gpu_uring_regions(g->ring, reg);
		tt_gpu_host_unregister(reg[0].base);
		tt_gpu_host_unregister(reg[1].base);
	}
	tt_gpu_uring_destroy(g->ring);
	tt_gpu_uring_dev_close(g->dev); /* before the context it lives on (tt_engine_fini) */
	tt_engine_fini(e);
	tt_free(g);
}

void
tt_gpu_uring_stats(struct tt_engine *e, struct tt_engine_stats *out)
{
	struct tt_gpu_uring_engine *g = to_gu(e);

	tt_cpu_stats(e, out);
	/* System calls on the data path: for the ring the host's wake-ups of its SQ thread, or
	 * where the host issues the I/O its submission calls (one per poll with I/O queued), never
	 * one per I/O. */
	out->io_ops += g->ios;
	out->io_submits += g->ring != NULL ? tt_gpu_uring_wakeups(g->ring) +
	                                         tt_gpu_uring_host_submit_calls(g->ring)
	                                   : 0;
	out->gpu_io_kernel_ns += g->kernel_ns;
	out->gpu_io_block_ns += g->block_ns;
}

/* ---- the twin: host KV, and GPU KV of blocks too small for the GPU hash ---- */

struct twin_job {
	struct tt_xfer *x;
	struct tt_gpu_uring_io *ios;
	uint32_t *chunk_of; /* per I/O */
	uint32_t *layer_of; /* per I/O */
	uint32_t slots;
};

static uint8_t *
slot_buf(const struct tt_engine *e, uint32_t i, uint32_t slots)
{
	return e->staging + (uint64_t)(i % slots) * e->geo->object_bytes;
}

static int
prepare(void *arg, uint32_t i)
{
	struct twin_job *j = arg;
	struct tt_xfer *x = j->x;
	struct tt_chunk_op *c = &x->b->chunks[j->chunk_of[i]];
	struct tt_unit u = {.chunk = j->chunk_of[i], .layer = j->layer_of[i], .nr_layers = 1};
	int rc;

	if (c->status != 0) {
		return c->status; /* the chunk already failed: nothing more to move */
	}
	if (x->b->kind != TT_BATCH_SAVE) {
		return 0;
	}
	rc = tt_unit_gather(x, &u, slot_buf(x->e, i, j->slots));
	if (rc < 0) {
		tt_chunk_fail(c, rc);
	}
	return rc;
}

static void
complete(void *arg, uint32_t i, int32_t res)
{
	struct twin_job *j = arg;
	struct tt_xfer *x = j->x;
	struct tt_chunk_op *c = &x->b->chunks[j->chunk_of[i]];
	struct tt_unit u = {.chunk = j->chunk_of[i], .layer = j->layer_of[i], .nr_layers = 1};
	uint8_t *buf = slot_buf(x->e, i, j->slots);

	if (res < 0) {
		if (c->status == 0) {
			tt_log_warn(x->e->log, "gpu-uring: %s of slot %u layer %u failed: %s",
			            x->b->kind == TT_BATCH_SAVE ? "write" : "read", c->slot,
			            u.layer, tutti_strerror(res));
		}
		tt_chunk_fail(c, res);
		return;
	}
	if (x->b->kind == TT_BATCH_SAVE || c->status != 0) {
		return;
	}
	if (!tt_unit_verify(x, &u, buf, &x->b->bytes_verified)) {
		c->corrupt = true;
		tt_chunk_fail(c, -EBADMSG);
		return;
	}
	if (x->b->kind == TT_BATCH_LOAD) {
		int rc = tt_unit_scatter(x, &u, buf);

		if (rc < 0) {
			tt_chunk_fail(c, rc);
		}
	}
}

/* Layer-major: every chunk's object of layer l, then of layer l + 1. */
static uint32_t
build_program(struct twin_job *j)
{
	struct tt_batch *b = j->x->b;
	const struct tt_geo *geo = j->x->e->geo;
	uint32_t n = 0;

	for (uint32_t l = b->layer_begin; l < b->layer_end; l++) {
		for (uint32_t c = 0; c < b->nr_chunks; c++) {
			const struct tt_chunk_op *op = &b->chunks[c];

			if (op->status != 0) {
				continue;
			}
			j->ios[n] = (struct tt_gpu_uring_io){
			    .off = op->off + tt_geo_object_off(geo, l),
			    .buf = (uint64_t)(uintptr_t)slot_buf(j->x->e, n, j->slots),
			    .len = (uint32_t)geo->object_bytes,
			    .file = op->file,
			    .write = b->kind == TT_BATCH_SAVE,
			};
			j->chunk_of[n] = c;
			j->layer_of[n] = l;
			n++;
		}
	}
	return n;
}

static int
twin_transfer(struct tt_gpu_uring_engine *g, struct tt_xfer *x)
{
	struct tt_batch *b = x->b;
	uint64_t max = (uint64_t)b->nr_chunks * (b->layer_end - b->layer_begin);
	struct twin_job j = {.x = x, .slots = g->slots};
	struct tt_gpu_uring_program p;
	int rc;

	j.ios = tt_calloc(max ? max : 1, sizeof(*j.ios));
	j.chunk_of = tt_calloc(max ? max : 1, sizeof(*j.chunk_of));
	j.layer_of = tt_calloc(max ? max : 1, sizeof(*j.layer_of));
	if (j.ios == NULL || j.chunk_of == NULL || j.layer_of == NULL || max > UINT32_MAX) {
		rc = -ENOMEM;
		goto out;
	}
	p = (struct tt_gpu_uring_program){
	    .ios = j.ios,
	    .nr = build_program(&j),
	    .window = j.slots,
	    .in_flight = g->in_flight,
	    .prepare = prepare,
	    .complete = complete,
	    .arg = &j,
	};
	tt_gpu_uring_kick(g->ring); /* once per program, never per I/O */
	rc = tt_gpu_uring_twin_run(g->ring, &p, TT_ENGINE_STALL_MS);
	g->ios += p.nr;
	if (rc == -ETIMEDOUT) {
		g->broken = true; /* I/O may still be in flight into the bounce slots */
	} else {
		tt_gpu_uring_settle(g->ring); /* every I/O of the program completed */
	}
	if (rc < 0) {
		tt_batch_fail_all(b, rc);
	}
out:
	tt_free(j.ios);
	tt_free(j.chunk_of);
	tt_free(j.layer_of);
	return rc;
}

/* ---- GPU KV: the layer kernels ---- */

/* Whether loads into GPU memory go by the copy engine (option copy): only where
 * asked for. AUTO is SM: on emulated NVMe the copy engine's loads were the slower of the two in
 * the same run (docs/results.md, E27, E28). Returns 1, 0, or -EOPNOTSUPP where
 * DMA was asked for and the device cannot (said in the log). */
static int
loads_by_dma(struct tt_gpu_uring_engine *g)
{
	struct tt_engine *e = &g->base;
	int on;

	if (g->copy != TT_GPU_URING_COPY_DMA) {
		return 0;
	}
	on = tt_gpu_uring_dma_supported(g->dev);
	if (on < 0) {
		return on;
	}
	if (on == 0) {
		tt_log_err(e->log, "gpu-uring: copy=dma: the device cannot order copies "
		                   "after a count (no 64-bit stream memory operations)");
		return -EOPNOTSUPP;
	}
	return 1;
}

/* The driver kernel's state on \p gpu, made once (a failure leaves none, and the next call tries
 * again). */
static int
dev_ready(struct tt_gpu_uring_engine *g, struct tt_gpu *gpu)
{
	return g->dev != NULL ? 0 : tt_gpu_uring_dev_open(gpu, &g->dev);
}

/* Launch layers \p l .. \p l + \p count - 1 (indices into the lists) of \p b's object lists
 * on \p gpu's stream, as one driver kernel; whether it failed lands in lists->failed[l]. */
static int
gpu_layers(struct tt_gpu_uring_engine *g, const struct tt_batch *b, struct tt_gpu *gpu,
           const struct tt_obj_lists *lists, uint32_t l, uint32_t count, uint64_t *trace)
{
	struct tt_engine *e = &g->base;
	struct tt_gpu_uring_view view;
	struct tt_gpu_uring_job job = {
	    .kv = b->kv,
	    .layer = b->layer_begin + l,
	    .nr_layers = count,
	    .objs = lists->objs + (size_t)l * lists->n,
	    .nr = lists->n * count,
	    .ids = lists->ids,
	    .nr_ids = lists->nr_ids,
	    .bounce = e->staging,
	    .slots = g->slots,
	    .in_flight = g->in_flight,
	    .slot_bytes = e->geo->object_bytes,
	    .write = b->kind == TT_BATCH_SAVE,
	    .workers = g->workers,
	    .blocks = g->sms,
	    .timeout_ms = TT_ENGINE_STALL_MS,
	    .failed = &lists->failed[l],
	    .trace = trace,
	};

	int rc = dev_ready(g, gpu);

	if (rc < 0) {
		return rc;
	}
	if (!job.write) {
		int dma = loads_by_dma(g);

		if (dma < 0) {
			return dma;
		}
		job.dma = dma != 0;
	}
	tt_gpu_uring_view(g->ring, &view);
	tt_gpu_uring_kick(g->ring); /* at most one wake-up per launch */
	return tt_gpu_uring_layers(g->dev, &view, &job);
}

/* Add the GPU time of the layer kernels since the last fold to the stats (waits for the last). */
static int
fold_elapsed(struct tt_gpu_uring_engine *g)
{
	uint64_t ns;
	uint32_t blocks;
	int rc = tt_gpu_uring_elapsed(g->dev, &ns, &blocks);

	if (rc == 0) {
		g->kernel_ns += ns;
		g->block_ns += ns * blocks;
	}
	return rc;
}

/* Wait for every layer kernel launched on \p gpu: none is in flight after this. */
static int
sync_launched(struct tt_gpu_uring_engine *g, struct tt_gpu *gpu)
{
	int rc = tt_gpu_sync(gpu);

	if (rc == 0) {
		/* Ops on the engine run one at a time: no kernel uses the ring now. */
		tt_gpu_uring_settle(g->ring);
	}
	g->inflight = false;
	g->op_failed = NULL;
	g->op_launched = 0;
	return rc;
}

/* Wait for the first \p launched layers of the lists and fold their results into the chunks. */
static int
gpu_finish(struct tt_gpu_uring_engine *g, struct tt_batch *b, struct tt_gpu *gpu,
           const struct tt_obj_lists *lists, uint32_t launched)
{
	int rc;

	rc = sync_launched(g, gpu);
	if (rc == 0) {
		rc = fold_elapsed(g);
	}
	for (uint32_t l = 0; rc == 0 && l < launched; l++) {
		if (lists->failed[l]) {
			tt_log_err(g->base.log,
			           "gpu-uring: the I/O from layer %u on made no progress for %u ms",
			           b->layer_begin + l, TT_ENGINE_STALL_MS);
			g->broken = true;
			rc = -ETIMEDOUT;
		}
	}
	if (rc == 0) {
		struct tt_obj_lists done = *lists;

		done.nr_layers = launched;
		tt_obj_lists_results(&g->base, b, &done, "gpu-uring");
	}
	g->ios += (uint64_t)lists->n * launched;
	return rc;
}

/*
 * One driver kernel for every layer of the batch, every I/O of it submitted and reaped by the
 * GPU, so that reads of the next layer are in flight while a layer's last objects are moved. The
 * host builds the object lists, wakes the SQ thread once, launches, and waits once at the end of
 * the call.
 */
static int
gpu_transfer(struct tt_gpu_uring_engine *g, struct tt_batch *b, struct tt_gpu *gpu)
{
	struct tt_engine *e = &g->base;
	struct tt_obj_lists lists;
	uint64_t *trace = NULL;
	int rc;

	rc = tt_obj_lists_make(b, &e->lists, &lists);
	if (rc < 0 || lists.n == 0) {
		return rc;
	}
	rc = map_ring(g);
	if (rc < 0) {
		return rc;
	}
	/* At debug level the kernel stamps its milestones and phases (logged after the call). */
	if (e->log->level >= TUTTI_LOG_DEBUG &&
	    tt_gpu_host_alloc(TT_GPU_URING_TRACE_WORDS * sizeof(*trace), (void **)&trace) < 0) {
		trace = NULL;
	}
	rc = gpu_layers(g, b, gpu, &lists, 0, lists.nr_layers, trace);
	if (rc == 0) {
		rc = gpu_finish(g, b, gpu, &lists, lists.nr_layers);
	} else {
		tt_gpu_sync(gpu); /* what was launched must stop using the lists before they go */
	}
	if (rc == 0 && trace != NULL) {
		const uint64_t *ph = trace + TT_GPU_URING_TRACE_POINTS;
		double objs = (double)lists.n * lists.nr_layers;

		tt_log_debug(
		    e->log,
		    "gpu-uring %s layers %u-%u, %u objects: from start: first submit "
		    "%.3f, first completion %.3f, last completion %.3f, done %.3f ms; "
		    "per object, a worker's: wait %.1f, slot copy %.1f, hash %.1f, "
		    "%s %.1f us",
		    b->kind == TT_BATCH_LOAD ? "load" : "save", b->layer_begin,
		    b->layer_begin + lists.nr_layers - 1, lists.n * lists.nr_layers,
		    (double)(trace[1] - trace[0]) / 1e6, (double)(trace[2] - trace[0]) / 1e6,
		    (double)(trace[3] - trace[0]) / 1e6, (double)(trace[4] - trace[0]) / 1e6,
		    (double)ph[TT_GPU_URING_PHASE_WAIT] / objs / 1e3,
		    (double)ph[TT_GPU_URING_PHASE_SLOT] / objs / 1e3,
		    (double)ph[TT_GPU_URING_PHASE_HASH] / objs / 1e3,
		    b->kind == TT_BATCH_LOAD ? "scatter" : "gather",
		    (double)ph[TT_GPU_URING_PHASE_MOVE] / objs / 1e3);
	}
	if (trace != NULL) {
		tt_gpu_host_free(trace);
	}
	return rc;
}

/* Whether the layer kernels can move \p b: GPU KV whose layer blocks the GPU hash takes. */
static bool
kernels_take(const struct tt_engine *e, const struct tt_xfer *x)
{
	return x->mover == &tt_mover_cuda && e->geo->layer_block_bytes > TT_XXH3_MIDSIZE_MAX;
}

int
tt_gpu_uring_transfer(struct tt_engine *e, struct tt_batch *b)
{
	struct tt_gpu_uring_engine *g = to_gu(e);
	struct tt_xfer x;
	int rc;

	rc = tt_xfer_start(&x, e, b, g->broken);
	if (rc < 0) {
		return rc;
	}
	/* Every chunk moves through bounce slots: no direct I/O into the KV. */
	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		b->chunks[i].direct = false;
	}
	if (!kernels_take(e, &x)) {
		return twin_transfer(g, &x);
	}
	rc = gpu_transfer(g, b, x.mover_ctx);
	if (rc < 0) {
		tt_batch_fail_all(b, rc);
	}
	return rc;
}

/* ---- launched loads ---- */

int
tt_gpu_uring_launch_open(struct tt_engine *e, struct tt_batch *b, struct tt_list_mem *mem,
                         struct tt_launch **out)
{
	struct tt_gpu_uring_engine *g = to_gu(e);
	struct tt_launch *l;
	struct tt_xfer x;
	int rc;

	if (g->broken || b->kv->mem != TUTTI_MEM_CUDA ||
	    e->geo->layer_block_bytes <= TT_XXH3_MIDSIZE_MAX) {
		return 0;
	}
	rc = tt_xfer_start(&x, e, b, false);
	if (rc < 0 || !kernels_take(e, &x)) {
		return rc;
	}
	l = tt_calloc(1, sizeof(*l));
	if (l == NULL) {
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		b->chunks[i].direct = false;
	}
	l->b = b;
	l->gpu = x.mover_ctx;
	rc = tt_obj_lists_make(b, mem, &l->lists);
	if (rc == 0) {
		rc = map_ring(g);
	}
	if (rc < 0) {
		tt_free(l);
		return rc;
	}
	*out = l;
	return 1;
}

int
tt_gpu_uring_launch_layer(struct tt_engine *e, struct tt_launch *l, uint32_t layer, uint32_t *word,
                          uint32_t value, uint64_t *done_ns)
{
	struct tt_gpu_uring_engine *g = to_gu(e);
	int rc = 0;

	/* A launched layer that timed out (its result copied back already) breaks the ring:
	 * launch nothing more on it. The kernels queued behind it see the device's own sticky
	 * word and exit at once. */
	for (uint32_t k = 0; k < l->launched && !g->broken; k++) {
		if (l->lists.failed[k]) {
			tt_log_err(e->log, "gpu-uring: load layer %u made no progress for %u ms", k,
			           TT_ENGINE_STALL_MS);
			g->broken = true;
		}
	}
	if (g->broken) {
		rc = -EIO;
	}
	if (rc == 0 && l->lists.n > 0) {
		/* The stream went idle (compute held the window back): close the timed span, so
		 * that the kernel time in the stats leaves the idle gap out. */
		if (g->inflight && tt_gpu_idle(l->gpu) == 1) {
			fold_elapsed(g);
		}
		rc = gpu_layers(g, l->b, l->gpu, &l->lists, layer, 1, NULL);
		g->inflight = true;
		g->op_failed = l->lists.failed;
		g->op_launched = layer + 1;
	}
	l->launched = layer + 1;
	/* After the layer kernel on the same stream: the KV it scattered is visible once the
	 * word is. */
	rc = rc == 0 ? tt_gpu_ctx_signal(l->gpu, word, value, done_ns) : rc;
	if (rc < 0 && l->rc == 0) {
		l->rc = rc;
	}
	return rc;
}

int
tt_gpu_uring_launch_idle(struct tt_engine *e, struct tt_launch *l)
{
	return tt_gpu_idle(l->gpu);
}

int
tt_gpu_uring_launch_finish(struct tt_engine *e, struct tt_launch *l)
{
	struct tt_gpu_uring_engine *g = to_gu(e);
	int rc;

	if (l->rc != 0 || l->lists.n == 0) {
		/* Nothing to fold (every chunk already failed, or none was read): wait for what
		 * was launched, which still uses the lists and the staging. */
		rc = sync_launched(g, l->gpu);
	} else {
		rc = gpu_finish(g, l->b, l->gpu, &l->lists, l->launched);
	}
	tt_free(l);
	return rc;
}

void
tt_gpu_uring_quiesce(struct tt_engine *e)
{
	struct tt_gpu_uring_engine *g = to_gu(e);
	int rc;

	if (!g->inflight) {
		return;
	}
	rc = tt_gpu_sync(e->gpu);
	if (rc < 0) {
		tt_log_err(e->log, "waiting for a load's layer kernels: %s", tutti_strerror(rc));
	} else {
		tt_gpu_uring_settle(g->ring);
	}
	g->inflight = false;
	for (uint32_t l = 0; g->op_failed != NULL && l < g->op_launched; l++) {
		if (g->op_failed[l] && !g->broken) {
			tt_log_err(e->log,
			           "gpu-uring: a load's layer made no progress: the ring is "
			           "given up on");
			g->broken = true;
		}
	}
}

int
tt_gpu_uring_prepare(struct tt_engine *e, const struct tutti_kv *kv, struct tt_gpu *gpu)
{
	/* The layer kernels take GPU KV whose layer blocks the GPU hash takes (kernels_take). */
	if (e->geo->layer_block_bytes <= TT_XXH3_MIDSIZE_MAX) {
		return 0;
	}
	return dev_ready(to_gu(e), gpu);
}

/* ---- set-up for an engine built on this one (auto) ---- */

int
tt_gpu_uring_setup(struct tt_gpu_uring_engine *g, int device, char *why, size_t len)
{
	struct tt_engine *e = &g->base;
	struct tt_gpu *gpu;
	int rc, n = tt_gpu_device_count();

	if (e->geo->layer_block_bytes <= TT_XXH3_MIDSIZE_MAX) {
		snprintf(why, len,
		         "layer blocks of %llu bytes: the GPU hash needs more than %u (XXH3's long "
		         "path)",
		         (unsigned long long)e->geo->layer_block_bytes, TT_XXH3_MIDSIZE_MAX);
		return -EINVAL;
	}
	if (n <= 0) {
		snprintf(why, len, "no CUDA device (%s)", n < 0 ? tutti_strerror(n) : "none");
		return n < 0 ? n : -ENODEV;
	}
	rc = tt_engine_gpu(e, device, &gpu);
	if (rc < 0) {
		snprintf(why, len, "GPU %d: %s", device, tutti_strerror(rc));
		return rc;
	}
	/* A layer kernel's blocks wait on each other, so all must be resident at once; and the
	 * compute beside the loads needs an SM at least. */
	n = tt_gpu_sms(gpu);
	if (n >= 0 && (uint32_t)n <= g->sms) {
		snprintf(why, len,
		         "GPU %d has %d SMs: the layer kernel holds %u at once, and compute needs "
		         "more",
		         device, n, g->sms);
		return -ENODEV;
	}
	rc = ring_create(g);
	if (rc < 0) {
		snprintf(why, len,
		         "no io_uring on the library's own memory (NO_MMAP, with SQPOLL where "
		         "the kernel issues the I/O): %s",
		         tutti_strerror(rc));
		return rc;
	}
	rc = map_ring(g);
	if (rc < 0) {
		snprintf(why, len, "the ring's memory cannot be mapped for the GPU: %s",
		         tutti_strerror(rc));
		tt_gpu_uring_destroy(g->ring);
		g->ring = NULL;
	}
	return rc;
}

static const struct tt_engine_opt *const opts[] = {
    &tt_gpu_uring_opts[TT_GPU_URING_OPT_WORKERS],
    &tt_gpu_uring_opts[TT_GPU_URING_OPT_SMS],
    &tt_gpu_uring_opts[TT_GPU_URING_OPT_SUBMIT],
    &tt_gpu_uring_opts[TT_GPU_URING_OPT_COPY],
};

const struct tt_engine_ops tt_engine_gpu_uring = {
    .name = "gpu-uring",
    .kind = TUTTI_ENGINE_GPU_URING,
    .description = "an io_uring whose I/O a CUDA kernel submits and reaps itself, with no "
                   "system call per I/O (a host thread stands in for it with host KV)",
    .opts = opts,
    .nr_opts = TT_ARRAY_SIZE(opts),
    /* Host KV too: the twin drives the same ring. */
    .kv_mems = TT_KV_MEM(TUTTI_MEM_HOST) | TT_KV_MEM(TUTTI_MEM_CUDA),
    .open = gpu_uring_open,
    .attach = gpu_uring_attach,
    .close = tt_gpu_uring_close,
    .transfer = tt_gpu_uring_transfer,
    .flush = tt_cpu_flush,
    .stats = tt_gpu_uring_stats,
    .prepare = tt_gpu_uring_prepare,
    .launch_open = tt_gpu_uring_launch_open,
    .launch_layer = tt_gpu_uring_launch_layer,
    .launch_idle = tt_gpu_uring_launch_idle,
    .launch_finish = tt_gpu_uring_launch_finish,
    .quiesce = tt_gpu_uring_quiesce,
};
