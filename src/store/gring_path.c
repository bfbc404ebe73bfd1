/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loads and saves through the GPU-drivable ring (engine gpu-uring).
 *
 * A call becomes one I/O program: every object of every chunk, layer by layer (the order in
 * which a layerwise load needs them), each read into or written from one object-sized bounce
 * slot of the staging memory; I/O i uses slot i mod S and is submitted once I/O i - S has been
 * consumed, so the bounce memory is fixed whatever the context length. The program is driven by
 * the twin (a host thread following the GPU's protocol); checksums are checked per object before
 * it is scattered, and computed per object as it is gathered.
 */
#include <errno.h>
#include <string.h>

#include "store/store_impl.h"

/* A ring that made no progress for this long is given up on. */
#define GRING_TIMEOUT_MS 30000

struct gring_job {
	struct tt_transfer *t;
	struct tt_gring_io *ios;
	uint32_t *chunk_of; /* per I/O */
	uint32_t *layer_of; /* per I/O */
	uint32_t slots;
};

static uint8_t *
slot_buf(const struct tutti_store *st, uint32_t i, uint32_t slots)
{
	return st->staging + (uint64_t)(i % slots) * st->geo.object_bytes;
}

static int
prepare(void *arg, uint32_t i)
{
	struct gring_job *j = arg;
	struct tt_transfer *t = j->t;
	struct tt_chunk_op *c = &t->chunks[j->chunk_of[i]];
	struct tt_unit u = {.chunk = j->chunk_of[i], .layer = j->layer_of[i], .nr_layers = 1};
	int rc;

	if (c->status != 0) {
		return c->status; /* the chunk already failed: nothing more to move */
	}
	if (t->kind != TT_TRANSFER_SAVE) {
		return 0;
	}
	rc = tt_unit_gather(t, &u, slot_buf(t->st, i, j->slots));
	if (rc < 0) {
		tt_fail_chunk(c, rc);
	}
	return rc;
}

static void
complete(void *arg, uint32_t i, int32_t res)
{
	struct gring_job *j = arg;
	struct tt_transfer *t = j->t;
	struct tt_chunk_op *c = &t->chunks[j->chunk_of[i]];
	struct tt_unit u = {.chunk = j->chunk_of[i], .layer = j->layer_of[i], .nr_layers = 1};
	uint8_t *buf = slot_buf(t->st, i, j->slots);

	if (res < 0) {
		if (c->status == 0) {
			tt_log_warn(&t->st->log, "gpu-uring: %s of slot %u layer %u failed: %s",
			            t->kind == TT_TRANSFER_SAVE ? "write" : "read", c->slot,
			            u.layer, tutti_strerror(res));
		}
		tt_fail_chunk(c, res);
		return;
	}
	if (t->kind == TT_TRANSFER_SAVE || c->status != 0) {
		return;
	}
	if (!tt_unit_verify(t, &u, buf)) {
		c->corrupt = true;
		tt_fail_chunk(c, -EBADMSG);
		return;
	}
	if (t->kind == TT_TRANSFER_LOAD) {
		int rc = tt_unit_scatter(t, &u, buf);

		if (rc < 0) {
			tt_fail_chunk(c, rc);
		}
	}
}

/* Layer-major: every chunk's object of layer l, then of layer l + 1. */
static uint32_t
build_program(struct gring_job *j)
{
	struct tt_transfer *t = j->t;
	struct tutti_store *st = t->st;
	uint32_t n = 0;

	for (uint32_t l = t->layer_begin; l < t->layer_end; l++) {
		for (uint32_t c = 0; c < t->nr_chunks; c++) {
			const struct tt_chunk_op *op = &t->chunks[c];
			uint32_t dir;
			uint64_t off;

			if (op->status != 0) {
				continue;
			}
			tt_pool_locate(st->pool, op->slot, &dir, &off);
			j->ios[n] = (struct tt_gring_io){
			    .off = off + tt_geo_object_off(&st->geo, l),
			    .buf = (uint64_t)(uintptr_t)slot_buf(st, n, j->slots),
			    .len = (uint32_t)st->geo.object_bytes,
			    .file = (uint16_t)dir,
			    .write = t->kind == TT_TRANSFER_SAVE,
			};
			j->chunk_of[n] = c;
			j->layer_of[n] = l;
			n++;
		}
	}
	return n;
}

/* Launch layer \p l (an index into the lists) of \p t's object lists on \p g's stream. */
static int
gpu_layer(struct tt_transfer *t, struct tt_gpu *g, const struct tt_obj_lists *lists, uint32_t l,
          uint64_t *trace)
{
	struct tutti_store *st = t->st;
	struct tt_gring_view view;
	struct tt_gring_job job = {
	    .kv = t->kv,
	    .layer = t->layer_begin + l,
	    .objs = lists->objs + (size_t)l * lists->n,
	    .nr = lists->n,
	    .ids = lists->ids,
	    .nr_ids = lists->nr_ids,
	    .bounce = st->staging,
	    .slots = st->gring_slots,
	    .slot_bytes = st->geo.object_bytes,
	    .write = t->kind == TT_TRANSFER_SAVE,
	    .workers = st->gpu_io_workers,
	    .blocks = st->gpu_io_sms,
	    .timeout_ms = GRING_TIMEOUT_MS,
	    .failed = &lists->failed[l],
	    .trace = trace,
	};

	tt_gring_view(st->gring, &view);
	tt_gring_kick(st->gring); /* at most one wake-up per layer launch */
	return tt_gpu_gring_layer(g, &view, &job);
}

/* Add the GPU time of the layer kernels since the last fold to the stats (waits for the last). */
static int
fold_elapsed(struct tutti_store *st, struct tt_gpu *g)
{
	uint64_t ns;
	uint32_t blocks;
	int rc = tt_gpu_gring_elapsed(g, &ns, &blocks);

	if (rc == 0) {
		pthread_mutex_lock(&st->lock);
		st->stats.gpu_io_kernel_ns += ns;
		st->stats.gpu_io_block_ns += ns * blocks;
		pthread_mutex_unlock(&st->lock);
	}
	return rc;
}

/* Wait for every layer kernel launched on \p g: none is in flight after this. */
static int
sync_launched(struct tutti_store *st, struct tt_gpu *g)
{
	int rc = tt_gpu_sync(g);

	st->gpu_inflight = false;
	st->op_failed = NULL;
	st->op_launched = 0;
	return rc;
}

/* Wait for the first \p launched layers of the lists and fold their results into the chunks. */
static int
gpu_finish(struct tt_transfer *t, struct tt_gpu *g, const struct tt_obj_lists *lists,
           uint32_t launched)
{
	struct tutti_store *st = t->st;
	int rc;

	rc = sync_launched(st, g);
	if (rc == 0) {
		rc = fold_elapsed(st, g);
	}
	for (uint32_t l = 0; rc == 0 && l < launched; l++) {
		if (lists->failed[l]) {
			tt_log_err(&st->log, "gpu-uring: layer %u made no progress for %u ms",
			           t->layer_begin + l, GRING_TIMEOUT_MS);
			st->gring_broken = true;
			rc = -ETIMEDOUT;
		}
	}
	if (rc == 0) {
		struct tt_obj_lists done = *lists;

		done.nr_layers = launched;
		tt_obj_lists_results(t, &done, "gpu-uring");
	}
	st->gring_ios += (uint64_t)lists->n * launched;
	return rc;
}

/*
 * GPU KV: one driver kernel per layer, every I/O of it submitted and reaped by the GPU. The host
 * builds each layer's object list, wakes the SQ thread once per launch, launches, and waits once
 * at the end of the call.
 */
static int
gpu_transfer(struct tt_transfer *t, struct tt_gpu *g)
{
	struct tutti_store *st = t->st;
	struct tt_obj_lists lists;
	uint64_t *trace = NULL;
	uint32_t L, launched = 0;
	int rc;

	rc = tt_obj_lists_make(t, &st->lists, &lists);
	if (rc < 0 || lists.n == 0) {
		return rc;
	}
	L = lists.nr_layers;
	rc = tt_gring_map_for_gpu(st->gring);
	if (rc < 0) {
		return rc;
	}
	/* At debug level, each layer kernel stamps its milestones (logged after the call). */
	if (st->log.level >= TUTTI_LOG_DEBUG &&
	    tt_gpu_host_alloc((size_t)L * TT_GRING_TRACE_POINTS * sizeof(*trace), (void **)&trace) <
	        0) {
		trace = NULL;
	}
	for (; rc == 0 && launched < L; launched++) {
		rc = gpu_layer(t, g, &lists, launched,
		               trace != NULL ? trace + (size_t)launched * TT_GRING_TRACE_POINTS
		                             : NULL);
	}
	if (rc == 0) {
		rc = gpu_finish(t, g, &lists, launched);
	} else {
		tt_gpu_sync(g); /* what was launched must stop using the lists before they go */
	}
	for (uint32_t l = 0; rc == 0 && trace != NULL && l < L; l++) {
		const uint64_t *tr = trace + (size_t)l * TT_GRING_TRACE_POINTS;

		tt_log_debug(
		    &st->log,
		    "gpu-uring %s layer %u, %u objects: start %+.3f ms; from start: first "
		    "submit %.3f, first completion %.3f, last completion %.3f, done %.3f ms",
		    t->kind == TT_TRANSFER_LOAD ? "load" : "save", t->layer_begin + l, lists.n,
		    (double)(tr[0] - trace[0]) / 1e6, (double)(tr[1] - tr[0]) / 1e6,
		    (double)(tr[2] - tr[0]) / 1e6, (double)(tr[3] - tr[0]) / 1e6,
		    (double)(tr[4] - tr[0]) / 1e6);
	}
	if (trace != NULL) {
		tt_gpu_host_free(trace);
	}
	return rc;
}

/* A load op runs async when its layers can be launched as GPU kernels. */
int
tt_gring_op_open(struct tt_load_op *op, struct tt_list_mem *mem)
{
	struct tt_transfer *t = &op->t;
	struct tutti_store *st = t->st;
	int rc;

	if (st->gring == NULL || st->gring_broken || t->kv == NULL ||
	    t->kv->mem != TUTTI_MEM_CUDA || st->geo.layer_block_bytes <= 240) {
		return 0;
	}
	rc = tt_transfer_mover(t);
	if (rc < 0 || t->mover != &tt_mover_cuda) {
		return rc;
	}
	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		t->chunks[i].direct = false;
	}
	rc = tt_obj_lists_make(t, mem, &op->lists);
	if (rc == 0) {
		rc = tt_gring_map_for_gpu(st->gring);
	}
	if (rc == 0) {
		op->gpu = t->mover_ctx;
	}
	return rc;
}

int
tt_gring_op_layer(struct tt_load_op *op, uint32_t *word, uint32_t value, uint64_t *done_ns)
{
	struct tutti_store *st = op->t.st;
	int rc = 0;

	/* A launched layer that timed out (its result copied back already) breaks the ring:
	 * launch nothing more on it. The kernels queued behind it see the device's own sticky
	 * word and exit at once. */
	for (uint32_t l = 0; l + 1 < op->next && !st->gring_broken; l++) {
		if (op->lists.failed[l]) {
			tt_log_err(&st->log, "gpu-uring: load layer %u made no progress for %u ms",
			           l, GRING_TIMEOUT_MS);
			st->gring_broken = true;
		}
	}
	if (st->gring_broken) {
		return -EIO;
	}
	if (op->lists.n > 0) {
		/* The stream went idle (compute held the window back): close the timed span, so
		 * that the kernel time in the stats leaves the idle gap out. */
		if (st->gpu_inflight && tt_gpu_idle(op->gpu) == 1) {
			fold_elapsed(st, op->gpu);
		}
		rc = gpu_layer(&op->t, op->gpu, &op->lists, op->next - 1, NULL);
		st->gpu_inflight = true;
		st->op_failed = op->lists.failed;
		st->op_launched = op->next;
	}
	/* After the layer kernel on the same stream: the KV it scattered is visible once the
	 * word is. */
	return rc == 0 ? tt_gpu_ctx_signal(op->gpu, word, value, done_ns) : rc;
}

int
tt_gring_op_finish(struct tt_load_op *op)
{
	if (op->rc != 0 || op->lists.n == 0) {
		/* Nothing to fold (every chunk already failed, or none was read): wait for what
		 * was launched, which still uses the lists and the staging. */
		return sync_launched(op->t.st, op->gpu);
	}
	return gpu_finish(&op->t, op->gpu, &op->lists, op->next);
}

int
tt_gring_transfer(struct tt_transfer *t)
{
	struct tutti_store *st = t->st;
	uint64_t max = (uint64_t)t->nr_chunks * (t->layer_end - t->layer_begin);
	struct gring_job j = {.t = t, .slots = st->gring_slots};
	struct tt_gring_program p;
	int rc;

	rc = tt_transfer_prepare(t, st->gring_broken);
	if (rc < 0) {
		return rc;
	}
	/* Every chunk moves through bounce slots: no direct I/O into the KV. */
	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		t->chunks[i].direct = false;
	}
	if (t->mover == &tt_mover_cuda && t->st->geo.layer_block_bytes > 240) {
		rc = gpu_transfer(t, t->mover_ctx);
		if (rc < 0) {
			tt_transfer_fail_all(t, rc);
		}
		return rc;
	}
	j.ios = tt_calloc(max ? max : 1, sizeof(*j.ios));
	j.chunk_of = tt_calloc(max ? max : 1, sizeof(*j.chunk_of));
	j.layer_of = tt_calloc(max ? max : 1, sizeof(*j.layer_of));
	if (j.ios == NULL || j.chunk_of == NULL || j.layer_of == NULL || max > UINT32_MAX) {
		rc = -ENOMEM;
		goto out;
	}
	p = (struct tt_gring_program){
	    .ios = j.ios,
	    .nr = build_program(&j),
	    .window = j.slots,
	    .prepare = prepare,
	    .complete = complete,
	    .arg = &j,
	};
	tt_gring_kick(st->gring); /* once per program, never per I/O */
	rc = tt_gring_twin_run(st->gring, &p, GRING_TIMEOUT_MS);
	st->gring_ios += p.nr;
	if (rc == -ETIMEDOUT) {
		st->gring_broken = true; /* I/O may still be in flight into the bounce slots */
	}
	if (rc < 0) {
		tt_transfer_fail_all(t, rc);
	}
out:
	tt_free(j.ios);
	tt_free(j.chunk_of);
	tt_free(j.layer_of);
	return rc;
}
