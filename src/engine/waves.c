/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Waves: how the CPU-driven engines move KV that lives in a GPU's memory. A batch's objects, layer
 * by layer (src/engine/obj_lists.c), go through the staging in waves: the staging is cut into
 * nr_bufs buffers of per_wave object slots, wave k in buffer k mod nr_bufs, and the object mover's
 * staging likewise (four buffers as large as the staging allows; a small transfer goes in eight
 * waves at least, tt_waves_cut). Lanes (cpu_path.c) read each object into its slot, claiming them
 * in order as far as free buffers allow; once a wave is in, the calling thread queues on the mover
 * one copy of the whole wave across PCIe into its buffer and one check-and-scatter launch per
 * layer run of the wave and then, one wave behind (so that the next copy is queued while it
 * waits), waits for the previous wave's copy alone (not the launches) to free that host buffer
 * for the wave nr_bufs after it. The mover orders each buffer's steps and runs different buffers'
 * side by side, so the storage's I/O, one wave's copy and an earlier wave's kernels all overlap,
 * the host never waits per object or per layer, and every object is checked on the GPU after it
 * crossed PCIe. A save runs the other way: the mover gathers and hashes a wave into its buffer and
 * copies it back, and lanes write the wave out once that copy is done.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "format/format.h"
#include "tutti/engine.h"

/* Staging buffers in flight: lanes read up to nr_bufs - 1 waves ahead of the one being copied. */
#define WAVE_BUFS 4u
_Static_assert(WAVE_BUFS <= TT_OBJMOVER_BUFS, "the mover orders this many buffers");
/* A transfer smaller than this many full waves goes in this many waves at least (or one wave an
 * object). */
#define MIN_WAVES 8u

void
tt_waves_cut(uint32_t slots, uint32_t total, uint32_t *per_wave, uint32_t *nr_bufs)
{
	uint32_t bufs = TT_MIN(WAVE_BUFS, slots), per = slots / bufs;
	uint32_t small = TT_MAX(1u, total / MIN_WAVES);

	/* What the pipeline cannot overlap is the first wave's I/O before the first copy (a save:
	 * the first wave's gather and copy before the first write) and the last wave's copy after
	 * the last I/O: for a transfer of a few full waves or less (a small load) they are most of
	 * its time, and they shrink with the wave. More, smaller buffers keep the read-ahead. */
	if (small < per) {
		per = small;
		bufs = TT_MIN(TT_OBJMOVER_BUFS, slots / per);
	}
	*per_wave = per;
	*nr_bufs = bufs;
}

struct waves {
	struct tt_engine *e;
	struct tt_batch *b;
	const struct tt_objmover_ops *om;
	void *ctx;
	struct tt_obj_lists lists;
	uint8_t *stage;    /* the mover's staging: the same slots as the host staging */
	uint32_t per_wave; /* objects of a wave (slots of a buffer) */
	uint32_t nr_bufs;  /* buffers */
	uint32_t total;    /* objects of the batch */
	uint32_t nr_waves;
	bool write;
	/* Under the lanes' lock: */
	pthread_cond_t more;     /* lanes: limit moved or abort */
	pthread_cond_t progress; /* the caller: a wave is in (out) or abort */
	uint32_t next;           /* next object to claim */
	uint32_t limit;          /* objects below it may be claimed */
	uint32_t *done;          /* per wave: objects whose I/O completed */
	bool abort;
	int rc; /* the queue that broke down */
};

static uint32_t
wave_size(const struct waves *w, uint32_t k)
{
	return TT_MIN(w->per_wave, w->total - k * w->per_wave);
}

/* Offset of object \p i's slot in either staging. */
static uint64_t
slot_off(const struct waves *w, uint32_t i)
{
	uint32_t buf = i / w->per_wave % w->nr_bufs;

	return ((uint64_t)buf * w->per_wave + i % w->per_wave) * w->e->geo->object_bytes;
}

/* ---- the lanes' part: the I/O of objects, claimed in order ---- */

static void
object_io(const struct waves *w, uint32_t i, struct tt_io *io)
{
	const struct tt_gpu_obj *o = &w->lists.objs[i];

	*io = (struct tt_io){
	    .tag = TT_TAG_OBJECT | i,
	    .off = o->off,
	    .buf = w->e->staging + slot_off(w, i),
	    .len = (uint32_t)w->e->geo->object_bytes,
	    .file = (uint16_t)o->file,
	    .op = w->write ? TT_IO_WRITE : TT_IO_READ,
	};
}

static int
lane_objects(struct tt_lane *ln, void *arg)
{
	struct waves *w = arg;
	struct tt_engine *e = w->e;
	pthread_mutex_t *lock = &e->lanes->lock;
	int rc = 0;

	pthread_mutex_lock(lock);
	for (;;) {
		uint32_t n = 0;
		int got;

		while (!w->abort && w->next < w->limit && n + ln->ioq->inflight < ln->nr_slots) {
			object_io(w, w->next++, &ln->ios[n++]);
		}
		if (n == 0 && ln->ioq->inflight == 0) {
			if (w->abort || w->next >= w->total) {
				break;
			}
			pthread_cond_wait(&w->more, lock);
			continue;
		}
		pthread_mutex_unlock(lock);
		rc = tt_ioq_submit(ln->ioq, ln->ios, n);
		if (rc < 0) {
			/* None of them went out: they are done, failed. */
			tt_log_err(e->log, "submitting %u I/Os failed: %s", n, tutti_strerror(rc));
			for (uint32_t k = 0; k < n; k++) {
				ln->dones[k] =
				    (struct tt_io_done){.tag = ln->ios[k].tag, .res = rc};
			}
			got = (int)n;
			rc = 0;
		} else {
			got = tt_ioq_reap(ln->ioq, ln->dones, ln->nr_slots, 1);
		}
		pthread_mutex_lock(lock);
		if (got < 0) {
			/* In-flight I/O may still target the staging: it cannot be reused. */
			tt_log_err(e->log, "I/O engine failed: %s; the store refuses further I/O",
			           tutti_strerror(got));
			e->ioq_broken = true;
			w->abort = true;
			w->rc = got;
			pthread_cond_broadcast(&w->more);
			pthread_cond_broadcast(&w->progress);
			rc = got;
			break;
		}
		for (int k = 0; k < got; k++) {
			uint32_t i = (uint32_t)(ln->dones[k].tag & ~TT_TAG_OBJECT);
			uint32_t wave = i / w->per_wave;

			if (ln->dones[k].res < 0) {
				tt_log_warn(e->log, "%s of an object at %llu failed: %s",
				            w->write ? "write" : "read",
				            (unsigned long long)w->lists.objs[i].off,
				            tutti_strerror(ln->dones[k].res));
				w->lists.objs[i].status = ln->dones[k].res;
			}
			if (++w->done[wave] == wave_size(w, wave)) {
				pthread_cond_broadcast(&w->progress);
			}
		}
	}
	pthread_mutex_unlock(lock);
	return rc;
}

/* ---- the caller's part: the mover's steps per wave ---- */

/* Let lanes claim objects below \p limit (and wake them), or stop them (\p abort). */
static void
publish(struct waves *w, uint32_t limit, bool abort)
{
	pthread_mutex_lock(&w->e->lanes->lock);
	w->limit = TT_MAX(w->limit, TT_MIN(limit, w->total));
	w->abort = w->abort || abort;
	pthread_cond_broadcast(&w->more);
	pthread_mutex_unlock(&w->e->lanes->lock);
}

/* Wait until wave \p k's I/O is done (the time counted as waiting for the storage); false
 * when the batch was aborted. */
static bool
wait_wave(struct waves *w, uint32_t k)
{
	uint64_t t0 = tt_now_ns();
	bool ok;

	pthread_mutex_lock(&w->e->lanes->lock);
	while (!w->abort && w->done[k] < wave_size(w, k)) {
		pthread_cond_wait(&w->progress, &w->e->lanes->lock);
	}
	ok = !w->abort;
	pthread_mutex_unlock(&w->e->lanes->lock);
	w->e->wave_io_wait_ns += tt_now_ns() - t0;
	return ok;
}

/* Wait for buffer \p buf's copy (the time counted as waiting for the mover, as is the last
 * sync on its checks and scatters). */
static int
wait_copy(struct waves *w, uint32_t buf)
{
	uint64_t t0 = tt_now_ns();
	int rc = w->om->wait(w->ctx, buf);

	w->e->wave_copy_wait_ns += tt_now_ns() - t0;
	return rc;
}

/* How many waves the host waits behind the last one queued: one, so that the next copy is
 * queued while the host waits; none with a single buffer, which the lanes need back before they
 * can read (write) the next wave. */
static uint32_t
wave_lag(const struct waves *w)
{
	return w->nr_bufs > 1 ? 1 : 0;
}

/* Step \p k's second half: once the copy of wave k - wave_lag is done, hand its host buffer back
 * to the lanes (a load: to read the wave nr_bufs after it into; a save: to write it out). */
static int
hand_back(struct waves *w, uint32_t k)
{
	uint32_t j;
	int rc;

	if (k < wave_lag(w)) {
		return 0;
	}
	j = k - wave_lag(w);
	rc = wait_copy(w, j % w->nr_bufs);
	if (rc == 0) {
		publish(w, (j + 1 + (w->write ? 0 : w->nr_bufs)) * w->per_wave, false);
	}
	return rc;
}

/* Wave \p k's objects in one call, whatever layers they span: its slots are consecutive, and
 * the layers' objects are checked side by side (one object a block), not layer after layer. */
static int
wave_objs(struct waves *w, uint32_t k)
{
	uint32_t first = k * w->per_wave, n = w->lists.n;

	return w->om->objs(w->ctx, k % w->nr_bufs, w->b->kv, w->b->layer_begin + first / n, n,
	                   first % n, w->lists.objs + first, wave_size(w, k), w->lists.ids,
	                   w->stage + slot_off(w, first), w->e->geo->object_bytes, w->write);
}

/*
 * Each wave's copy is queued before the host waits for the previous wave's: the copy engine then
 * goes from one wave to the next without a round trip through the host between them (a load
 * whose storage keeps up is bound by these copies). The host buffer a copy frees is handed to
 * the lanes once that copy is done, one wave behind: wave_lag.
 */
static int
run_load(struct waves *w)
{
	uint64_t ob = w->e->geo->object_bytes;
	int rc = 0;

	publish(w, w->nr_bufs * w->per_wave, false);
	for (uint32_t k = 0; rc == 0 && k < w->nr_waves + wave_lag(w); k++) {
		if (k < w->nr_waves) {
			uint32_t first = k * w->per_wave;

			if (!wait_wave(w, k)) {
				return 0; /* a queue broke down: the lanes said so */
			}
			rc = w->om->copy(w->ctx, k % w->nr_bufs, w->stage + slot_off(w, first),
			                 w->e->staging + slot_off(w, first), wave_size(w, k) * ob);
			if (rc == 0) {
				rc = wave_objs(w, k);
			}
		}
		if (rc == 0) {
			rc = hand_back(w, k);
		}
	}
	return rc;
}

/* A save the other way, one wave behind likewise: wave k's gather and copy are queued before
 * the host waits for wave k - 1's copy, whose buffer the lanes then write out. */
static int
run_save(struct waves *w)
{
	uint64_t ob = w->e->geo->object_bytes;
	int rc = 0;

	for (uint32_t k = 0; rc == 0 && k < w->nr_waves + wave_lag(w); k++) {
		if (k < w->nr_waves) {
			uint32_t first = k * w->per_wave;

			/* The host buffer is free once the wave nr_bufs earlier is written. */
			if (k >= w->nr_bufs && !wait_wave(w, k - w->nr_bufs)) {
				return 0;
			}
			rc = wave_objs(w, k);
			if (rc == 0) {
				rc = w->om->copy(
				    w->ctx, k % w->nr_bufs, w->e->staging + slot_off(w, first),
				    w->stage + slot_off(w, first), wave_size(w, k) * ob);
			}
		}
		if (rc == 0) {
			rc = hand_back(w, k);
		}
	}
	return rc;
}

/* The mover's staging (as large as the host staging) and, for the twin, its context and list
 * memory: made on first use, kept until the engine closes. */
static int
prepare(struct tt_engine *e, const struct tt_objmover_ops *om, void **ctx)
{
	uint64_t bytes = (uint64_t)e->nr_staging * e->unit_bytes;
	int rc;

	if (om == &tt_objmover_twin && e->twin == NULL) {
		rc = tt_objmover_twin_open(&e->twin);
		if (rc < 0) {
			return rc;
		}
		e->twin_lists.plain = true;
	}
	if (om == &tt_objmover_twin) {
		*ctx = e->twin;
	}
	if (e->stage != NULL && e->stage_ops == om && e->stage_ctx == *ctx) {
		return 0;
	}
	if (e->stage != NULL) {
		e->stage_ops->stage_free(e->stage_ctx, e->stage);
		e->stage = NULL;
	}
	rc = om->stage_alloc(*ctx, bytes, &e->stage);
	if (rc < 0) {
		tt_log_err(e->log, "no %s staging of %llu bytes: %s", om->name,
		           (unsigned long long)bytes, tutti_strerror(rc));
		e->stage = NULL;
		return rc;
	}
	e->stage_ops = om;
	e->stage_ctx = *ctx;
	return 0;
}

int
tt_waves_prepare(struct tt_engine *e, const struct tt_objmover_ops *om, void *ctx)
{
	return prepare(e, om, &ctx);
}

int
tt_waves_transfer(struct tt_engine *e, struct tt_xfer *x, const struct tt_objmover_ops *om,
                  void *ctx)
{
	struct tt_batch *b = x->b;
	uint32_t slots = (uint32_t)((uint64_t)e->nr_staging * e->unit_bytes / e->geo->object_bytes);
	struct waves w = {.e = e, .b = b, .om = om, .write = b->kind == TT_BATCH_SAVE};
	uint64_t t_sync;
	int rc, rc_lanes;

	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		b->chunks[i].direct = false;
	}
	rc = prepare(e, om, &ctx);
	if (rc == 0) {
		rc = tt_obj_lists_make(b, om == &tt_objmover_twin ? &e->twin_lists : &e->lists,
		                       &w.lists);
	}
	if (rc < 0 || w.lists.n == 0) {
		tt_batch_fail_all(b, rc);
		return 0;
	}
	w.ctx = ctx;
	w.stage = e->stage;
	w.total = w.lists.n * w.lists.nr_layers;
	tt_waves_cut(slots, w.total, &w.per_wave, &w.nr_bufs);
	w.nr_waves = (w.total + w.per_wave - 1) / w.per_wave;
	w.done = tt_calloc(w.nr_waves, sizeof(*w.done));
	if (w.done == NULL) {
		tt_batch_fail_all(b, -ENOMEM);
		return 0;
	}
	pthread_cond_init(&w.more, NULL);
	pthread_cond_init(&w.progress, NULL);
	tt_lanes_start(e, lane_objects, &w);
	rc = w.write ? run_save(&w) : run_load(&w);
	if (rc < 0) {
		tt_log_err(e->log, "%s object mover failed: %s", om->name, tutti_strerror(rc));
	}
	if (rc < 0) {
		publish(&w, 0, true); /* the lanes stop claiming; done ones return */
	}
	rc_lanes = tt_lanes_join(e);
	/* Nothing may still run on either staging when the call returns. */
	t_sync = tt_now_ns();
	if (om->sync(ctx) < 0 && rc == 0) {
		rc = -EIO;
	}
	e->wave_copy_wait_ns += tt_now_ns() - t_sync;
	pthread_cond_destroy(&w.more);
	pthread_cond_destroy(&w.progress);
	tt_free(w.done);
	if (rc_lanes < 0) {
		tt_batch_fail_all(b, rc_lanes);
		return rc_lanes;
	}
	if (rc < 0) {
		tt_batch_fail_all(b, rc);
		return 0;
	}
	for (uint32_t i = 0; !w.write && i < w.total; i++) {
		b->bytes_verified +=
		    w.lists.objs[i].status == 0
		        ? (uint64_t)w.lists.objs[i].stored * e->geo->layer_block_bytes
		        : 0;
	}
	tt_obj_lists_results(e, b, &w.lists, om == &tt_objmover_twin ? "twin" : "gpu");
	return 0;
}
