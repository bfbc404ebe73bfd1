/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pipeline's thread: the slack-aware scheduler. In order of priority it
 *  1. reads the next layer of the oldest step with loads left, if compute is within the
 *     read-ahead window of it (reads gate time to first token);
 *  2. copies a computed layer of new KV into save staging (it must leave the paged blocks before
 *     the engine reuses them; the copy runs on its own stream, off the compute stream);
 *  3. writes a batch of fully staged chunks, only while no step has reads outstanding (slack);
 *  4. finalises steps whose waits have all passed on the GPU: stall per layer, compute per
 *     layer (which refines the profile), the timeline.
 * Between jobs it sleeps on a condition variable, or polls every 50 us while it waits for the GPU
 * (a wait passing, a layer's compute signalled), which has no way to wake a host thread cheaply.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "pipeline/pipeline_impl.h"

#define POLL_NS 50000ull
#define EMA_NEW 0.25             /* weight of a new measurement in the online profile */
#define WRITE_BATCH_NS 4000000.0 /* a write batch holds up a new step's reads at most this long */

static inline uint64_t
ld_time(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static double
ema(double old, double v)
{
	return old > 0 ? (1 - EMA_NEW) * old + EMA_NEW * v : v;
}

uint32_t
tt_pipe_readahead(const struct tutti_pipeline *p, uint32_t tokens, uint64_t layer_bytes)
{
	double comp = 0, io_ns, w;

	for (uint32_t l = 0; l < p->nr_layers; l++) {
		comp += p->layer_ns_per_token[l];
	}
	comp = comp / p->nr_layers * tokens;
	if (p->read_bps <= 0 || comp <= 0 || layer_bytes == 0) {
		return p->nr_layers; /* nothing to plan with: read as far ahead as the loads go */
	}
	io_ns = (double)layer_bytes / p->read_bps * 1e9;
	/* Enough layers of compute to cover one layer's read, plus two of margin for the
	 * estimate's error. */
	w = ceil(io_ns / comp) + 2;
	return w >= p->nr_layers ? p->nr_layers : (uint32_t)w;
}

/* Layers of step \p s whose wait has passed, from layer 0. */
static uint32_t
compute_progress(const struct tutti_pipeline *p, const struct tt_pipe_step *s)
{
	uint32_t l = 0;

	while (l < __atomic_load_n(&s->waited, __ATOMIC_ACQUIRE) && l < p->nr_layers &&
	       ld_time(&s->wait_times[2 * l + 1]) != 0) {
		l++;
	}
	return l;
}

static struct tt_pipe_step *
oldest(struct tutti_pipeline *p,
       bool (*want)(const struct tutti_pipeline *, const struct tt_pipe_step *))
{
	struct tt_pipe_step *best = NULL;

	for (uint32_t i = 0; i < TT_PIPE_KEEP; i++) {
		struct tt_pipe_step *s = &p->steps[i];

		if (s->id != 0 && want(p, s) && (best == NULL || s->id < best->id)) {
			best = s;
		}
	}
	return best;
}

static bool
has_loads_left(const struct tutti_pipeline *p, const struct tt_pipe_step *s)
{
	return !s->final && (s->next_load < p->nr_layers || s->op != NULL);
}

static bool
has_copies_left(const struct tutti_pipeline *p, const struct tt_pipe_step *s)
{
	/* Not bounded by the step's result: copies may outlive it. */
	return s->nr_saves_staged > 0 && s->gathered < p->nr_layers;
}

/* ---- 1. reads ----
 * A step's load is one store load op: layer l is issued when compute is within the window of
 * it. With GPU KV on engine gpu-uring an issued layer is a kernel launched on the store's
 * stream followed by a signal kernel that publishes loaded[l], so the layers run back to back
 * on the GPU and this thread never waits for one; otherwise the layer runs in the call and
 * loaded[l] is published from here. The statuses are harvested once every layer is done. */

/* Every layer of \p s released without a load (the op could not open). */
static void
release_all(struct tutti_pipeline *p, struct tt_pipe_step *s, int rc)
{
	for (uint32_t i = 0; i < s->nr_chunks; i++) {
		s->status[i] = rc;
	}
	for (uint32_t l = s->next_load; l < p->nr_layers; l++) {
		tt_word_store_release(&p->loaded[l], s->seq);
	}
	s->next_load = p->nr_layers;
	s->t_loaded = tt_now_ns();
}

static void
issue_layer(struct tutti_pipeline *p, struct tt_pipe_step *s)
{
	uint32_t l = s->next_load;
	int rc = 0;

	/* s->op and the layer's times are the worker's own: valid without the lock. */
	pthread_mutex_unlock(&p->lock);
	s->issue_times[l] = tt_now_ns();
	if (l == 0) {
		rc = tt_load_op_open(p->st, p->kv, s->loads, s->nr_loads, p->op_mem, &s->op);
	}
	if (rc == 0) {
		tt_load_op_layer(s->op, &p->loaded[l], s->seq, &s->load_times[l]);
	}
	pthread_mutex_lock(&p->lock);
	if (rc < 0) {
		tt_log_err(&p->log, "pipeline: step %lld: load failed (%s)", (long long)s->id,
		           tutti_strerror(rc));
		release_all(p, s, rc); /* the result says to recompute every chunk */
	} else {
		s->op_gpu_clock = tt_load_op_launched(s->op);
		s->next_load++;
		p->stats.layers_loaded++;
	}
	pthread_cond_broadcast(&p->done);
}

/* Every layer of \p s issued and done: fold the statuses, time the reads, close the op. */
static void
harvest_loads(struct tutti_pipeline *p, struct tt_pipe_step *s)
{
	int64_t off = s->op_gpu_clock ? p->timer_offset : 0, loaded;
	uint64_t busy = 0, prev = 0, bytes;

	pthread_mutex_unlock(&p->lock);
	loaded = tt_load_op_close(s->op, s->status);
	/* Every layer's signal has run, unless the GPU failed: then publish them from here, so
	 * that no compute stream waits for its timeout. No newer step has loaded anything yet
	 * (steps load oldest first), so this never moves a word back. */
	for (uint32_t l = 0; l < p->nr_layers; l++) {
		tt_word_store_release(&p->loaded[l], s->seq);
	}
	pthread_mutex_lock(&p->lock);
	s->op = NULL;
	bytes = loaded > 0 ? (uint64_t)loaded * p->nr_layers * p->geo->object_bytes : 0;
	/* Layer l read from when it was issued or layer l - 1 was done, whichever is later. */
	for (uint32_t l = 0; l < p->nr_layers; l++) {
		uint64_t t0 = TT_MAX(s->issue_times[l] + off, prev), t1 = s->load_times[l];

		if (t1 != 0 && t1 > t0) { /* 0: a layer that failed before it ran */
			busy += t1 - t0;
			tt_pipe_trace(p, TT_TRACK_READS, "read", s->id, l, t0 - off, t1 - off);
		}
		prev = TT_MAX(prev, t1);
	}
	s->load_bytes = bytes;
	/* GPU times without a known offset to the host clock cannot place the end: take now. */
	s->t_loaded = prev > (uint64_t)off && (!s->op_gpu_clock || p->timer_offset != 0)
	                  ? prev - off
	                  : tt_now_ns();
	if (bytes > 0 && busy > 0) {
		p->read_bps = ema(p->read_bps, (double)bytes * 1e9 / (double)busy);
	}
}

/* ---- 2. copies into save staging ---- */

/* The moves of layer \p layer for every staged chunk of step \p step; returns how many. */
static uint32_t
staged_moves(struct tutti_pipeline *p, int64_t step, uint32_t layer, struct tt_move *moves,
             uint32_t max)
{
	const struct tt_geo *geo = p->geo;
	uint64_t layer_span = (uint64_t)p->staging_kv->nr_blocks * geo->layer_block_bytes;
	uint32_t n = 0;

	for (struct tt_staged *s = p->staged_head; s != NULL; s = s->next) {
		uint32_t off = 0;

		if (s->step != step || s->failed) {
			continue;
		}
		for (uint32_t i = 0; i < s->nr_chunks && n < max; i++) {
			moves[n++] = (struct tt_move){
			    .obj = p->staging + layer * layer_span +
			           (uint64_t)s->slots[i] * geo->chunk_layer_bytes,
			    .block_ids = s->src_ids + off,
			    .nr_blocks = s->chunk_blocks[i],
			};
			off += s->chunk_blocks[i];
		}
	}
	return n;
}

static void
copy_layer(struct tutti_pipeline *p, struct tt_pipe_step *s)
{
	uint32_t l = s->gathered, n;
	uint64_t t0, t1;
	int rc;

	/* p->moves is the worker's own: it stays valid without the lock. */
	n = staged_moves(p, s->id, l, p->moves, p->nr_slots);
	pthread_mutex_unlock(&p->lock);
	t0 = tt_now_ns();
	rc = p->copier.ops->gather(p->copier.ctx, p->kv, l, p->moves, n);
	rc = rc == 0 ? p->copier.ops->sync(p->copier.ctx) : rc;
	t1 = tt_now_ns();
	pthread_mutex_lock(&p->lock);
	tt_pipe_trace(p, TT_TRACK_COPIES, "copy to staging", s->id, l, t0, t1);
	for (struct tt_staged *it = p->staged_head; it != NULL; it = it->next) {
		if (it->step == s->id) {
			it->gathered++;
			if (rc < 0 && !it->failed) {
				tt_log_err(&p->log,
				           "pipeline: copying new KV of step %lld failed (%d)",
				           (long long)s->id, rc);
				it->failed = true;
				p->stats.save_errors += it->nr_chunks - it->written;
			}
		}
	}
	s->gathered++;
}

/* A step that ended without signalling every layer's new KV cannot complete its saves. */
static void
abandon_unsignalled(struct tutti_pipeline *p)
{
	for (uint32_t i = 0; i < TT_PIPE_KEEP; i++) {
		struct tt_pipe_step *s = &p->steps[i];

		if (s->id != 0 && s->ended && s->nr_saves_staged > 0 &&
		    s->gathered < p->nr_layers &&
		    s->gathered >= __atomic_load_n(&s->saved, __ATOMIC_ACQUIRE)) {
			for (struct tt_staged *it = p->staged_head; it != NULL; it = it->next) {
				if (it->step == s->id && !it->failed) {
					it->failed = true;
					p->stats.saves_skipped += it->nr_chunks;
				}
			}
			s->gathered = p->nr_layers;
		}
	}
}

/* ---- 3. writes in slack ---- */

static uint32_t
write_batch_chunks(const struct tutti_pipeline *p)
{
	double chunk = (double)p->geo->object_bytes * p->nr_layers, n;

	if (p->opts.write_batch_chunks > 0) {
		return p->opts.write_batch_chunks;
	}
	if (p->write_bps <= 0) {
		return 1;
	}
	n = floor(p->write_bps * WRITE_BATCH_NS / 1e9 / chunk);
	return n < 1 ? 1 : (uint32_t)n;
}

static void
write_batch(struct tutti_pipeline *p, struct tt_staged *s)
{
	uint32_t n = TT_MIN(write_batch_chunks(p), s->nr_chunks - s->written), off = 0, blocks = 0;
	int32_t status[64];
	struct tutti_request r;
	uint64_t t0, t1, bytes = 0;
	int64_t rc;

	n = TT_MIN(n, (uint32_t)TT_ARRAY_SIZE(status));
	for (uint32_t i = 0; i < s->written; i++) {
		off += s->chunk_blocks[i];
	}
	for (uint32_t i = 0; i < n; i++) {
		blocks += s->chunk_blocks[s->written + i];
	}
	r = s->req;
	r.first_chunk = s->req.first_chunk + s->written;
	r.nr_keys = r.first_chunk + n;
	r.block_ids = s->ids + off;
	r.nr_blocks = blocks;

	pthread_mutex_unlock(&p->lock);
	t0 = tt_now_ns();
	rc = tutti_store_save(p->st, p->staging_kv, &r, 1, status);
	t1 = tt_now_ns();
	pthread_mutex_lock(&p->lock);

	for (uint32_t i = 0; i < n; i++) {
		int32_t st = rc < 0 ? (int32_t)rc : status[i];

		if (st == 0) {
			p->stats.saves_written++;
			bytes += p->geo->object_bytes * p->nr_layers;
		} else if (st == 1) {
			p->stats.saves_present++;
		} else {
			p->stats.save_errors++;
		}
	}
	p->stats.save_bytes += bytes;
	p->stats.writes_in_slack++;
	if (bytes > 0 && t1 > t0) {
		p->write_bps = ema(p->write_bps, (double)bytes * 1e9 / (double)(t1 - t0));
	}
	tt_pipe_trace(p, TT_TRACK_WRITES, "write", s->step, n /* chunks */, t0, t1);
	s->written += n;
}

/* The oldest staged request, dropping finished or failed ones from the head. */
static struct tt_staged *
next_writable(struct tutti_pipeline *p)
{
	while (p->staged_head != NULL) {
		struct tt_staged *s = p->staged_head;

		if (!s->failed && s->written < s->nr_chunks) {
			return s->gathered == p->nr_layers ? s : NULL;
		}
		/* A failed request's copies may still be running for its step's later layers;
		 * they are not: copies run in this thread. */
		p->staged_head = s->next;
		if (p->staged_head == NULL) {
			p->staged_tail = NULL;
		}
		tt_pipe_retire_staged(p, s);
		pthread_cond_broadcast(&p->done);
	}
	return NULL;
}

/* ---- 4. step results ---- */

static bool
waits_passed(const struct tutti_pipeline *p, const struct tt_pipe_step *s)
{
	if (s->nr_chunks == 0) {
		return true;
	}
	uint32_t waited = __atomic_load_n(&s->waited, __ATOMIC_ACQUIRE);

	for (uint32_t l = 0; l < waited; l++) {
		if (ld_time(&s->wait_times[2 * l + 1]) == 0) {
			return false;
		}
	}
	return true;
}

static void
finalise(struct tutti_pipeline *p, struct tt_pipe_step *s)
{
	struct tutti_step_result *r = &s->result;
	int64_t off = p->gpu ? p->timer_offset : 0;
	uint64_t stall = 0;

	r->size = sizeof(*r);
	r->nr_loads = s->nr_chunks;
	/* Compute went past a layer that had not landed: every chunk it read may hold stale KV,
	 * whatever the load reported later. */
	for (uint32_t l = 0; l < p->nr_layers && s->nr_chunks > 0; l++) {
		if (s->wait_times[2 * l + 1] & TT_PIPE_WAIT_TIMED_OUT) {
			for (uint32_t i = 0; i < s->nr_chunks; i++) {
				s->status[i] = s->status[i] != 0 ? s->status[i] : -ETIMEDOUT;
			}
			break;
		}
	}
	for (uint32_t i = 0; i < s->nr_chunks; i++) {
		if (s->status[i] == 0) {
			r->load_chunks++;
		} else {
			r->load_errors++;
		}
	}
	r->load_bytes = s->load_bytes;
	r->load_ns = s->t_loaded - s->t_begin;
	for (uint32_t l = 0; l < p->nr_layers && s->nr_chunks > 0; l++) {
		uint64_t a = s->wait_times[2 * l], b = s->wait_times[2 * l + 1];

		if (b & TT_PIPE_WAIT_TIMED_OUT) {
			r->timed_out++;
			b &= ~TT_PIPE_WAIT_TIMED_OUT;
		}
		s->layer_stall[l] = b > a ? b - a : 0;
		stall += s->layer_stall[l];
		tt_pipe_trace(p, TT_TRACK_WAITS, "stall", s->id, l, a - off, b - off);
		if (l + 1 < p->nr_layers) {
			uint64_t next = s->wait_times[2 * l + 2];

			if (next > b) {
				tt_pipe_trace(p, TT_TRACK_COMPUTE, "compute", s->id, l, b - off,
				              next - off);
				if (s->compute_tokens > 0) {
					p->layer_ns_per_token[l] =
					    ema(p->layer_ns_per_token[l],
					        (double)(next - b) / s->compute_tokens);
				}
			}
		}
	}
	r->stall_ns = stall;
	r->host_wait_ns = s->host_wait_ns;
	p->stats.host_wait_ns += s->host_wait_ns;
	r->saves_staged = s->nr_saves_staged;
	r->saves_skipped = s->nr_saves_skipped;
	if (r->load_errors > 0 && r->timed_out > 0) {
		tt_log_warn(&p->log, "pipeline: step %lld: %u layers released by the wait timeout",
		            (long long)s->id, r->timed_out);
	}
	p->stats.stall_ns += stall;
	p->stats.steps_stalled += stall > 0;
	p->stats.stall_max_ns = TT_MAX(p->stats.stall_max_ns, stall);
	p->stats.request_stall_ns += stall * s->nr_loads;
	p->stats.load_chunks += r->load_chunks;
	p->stats.load_errors += r->load_errors;
	p->stats.load_bytes += r->load_bytes;
	p->stats.saves_staged += s->nr_saves_staged;
	s->final = true;
	pthread_cond_broadcast(&p->done);
}

static bool
finalise_ready(struct tutti_pipeline *p)
{
	bool waiting = false;

	for (uint32_t i = 0; i < TT_PIPE_KEEP; i++) {
		struct tt_pipe_step *s = &p->steps[i];

		if (s->id == 0 || s->final || !s->ended || has_loads_left(p, s)) {
			continue;
		}
		if (waits_passed(p, s)) {
			finalise(p, s);
		} else {
			waiting = true;
		}
	}
	return waiting;
}

/* Waits enqueued on a compute stream that have not passed yet: their words and times must stay
 * allocated until they do (a step destroyed before it ended). */
static bool
gpu_waits_pending(const struct tutti_pipeline *p)
{
	for (uint32_t i = 0; i < TT_PIPE_KEEP; i++) {
		const struct tt_pipe_step *s = &p->steps[i];

		if (s->id != 0 && !s->final && !waits_passed(p, s)) {
			return true;
		}
	}
	return false;
}

/* ---- the loop ---- */

void
tt_pipe_cond_wait_ns(pthread_cond_t *cond, pthread_mutex_t *lock, uint64_t ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts); /* the condition variables' default clock */
	ts.tv_sec += (time_t)(ns / TT_NS_PER_S);
	ts.tv_nsec += (long)(ns % TT_NS_PER_S);
	if (ts.tv_nsec >= (long)TT_NS_PER_S) {
		ts.tv_sec++;
		ts.tv_nsec -= (long)TT_NS_PER_S;
	}
	pthread_cond_timedwait(cond, lock, &ts);
}

void *
tt_pipe_worker(void *arg)
{
	struct tutti_pipeline *p = arg;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct tt_pipe_step *ls = oldest(p, has_loads_left);
		struct tt_pipe_step *cs = oldest(p, has_copies_left);
		bool poll = finalise_ready(p) || (p->stopping && gpu_waits_pending(p)),
		     busy = false;
		struct tt_staged *ws;

		if (ls != NULL && ls->next_load < p->nr_layers) {
			if (p->stopping ||
			    ls->next_load < compute_progress(p, ls) + ls->readahead) {
				issue_layer(p, ls);
				continue;
			}
			poll = true; /* the window moves when a wait passes on the GPU */
		} else if (ls != NULL) {
			if (tt_load_op_done(ls->op) != 0) { /* done, or failed: close says which */
				harvest_loads(p, ls);
				continue;
			}
			poll = true; /* the layer kernels run on */
		}
		if (cs != NULL) {
			uint32_t saved = __atomic_load_n(&cs->saved, __ATOMIC_ACQUIRE);

			if (cs->gathered < saved &&
			    (int32_t)(tt_word_load_acquire(&p->computed[cs->gathered]) - cs->seq) >=
			        0) {
				copy_layer(p, cs);
				continue;
			}
			abandon_unsignalled(p);
			poll = poll || cs->gathered < saved;
		}
		ws = next_writable(p);
		if (ws != NULL && ls == NULL) {
			write_batch(p, ws);
			continue;
		}
		busy = ls != NULL || cs != NULL || ws != NULL || poll;
		if (p->stopping && !busy) {
			break;
		}
		if (p->stopping && cs != NULL && !poll && ls == NULL && ws == NULL) {
			break; /* copies that will never be signalled */
		}
		if (poll) {
			tt_pipe_cond_wait_ns(&p->wake, &p->lock, POLL_NS);
		} else {
			pthread_cond_wait(&p->wake, &p->lock);
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}
