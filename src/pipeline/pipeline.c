/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The layerwise pipeline's public calls, made from the serving engine's thread: create and
 * destroy, and per step begin, wait_layer, save_layer, end and the result. The scheduling itself
 * runs in the worker (worker.c).
 */
#include <errno.h>
#include <string.h>

#include "pipeline/pipeline_impl.h"
#include "plan/plan.h"

#define DEFAULT_SAVE_STAGING (256ull << 20)
#define DEFAULT_TRACE_EVENTS 65536u
#define DEFAULT_WAIT_TIMEOUT_MS 30000u

void
tutti_pipeline_opts_init(struct tutti_pipeline_opts *opts)
{
	if (opts == NULL) {
		return;
	}
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->save_staging_bytes = DEFAULT_SAVE_STAGING;
	opts->trace_events = DEFAULT_TRACE_EVENTS;
	opts->wait_timeout_ms = DEFAULT_WAIT_TIMEOUT_MS;
}

static int
check_opts(const struct tutti_pipeline_opts *o, uint32_t nr_layers)
{
	if (o->size != sizeof(*o) || o->reserved != 0 || o->readahead_layers > nr_layers ||
	    o->trace_events > (1u << 24) || o->wait_timeout_ms == 0) {
		return -EINVAL;
	}
	return 0;
}

/* Signal words and per-step times: mapped pinned memory in GPU mode (the kernels read and write
 * it), ordinary memory otherwise. */
static int
alloc_signals(struct tutti_pipeline *p)
{
	uint64_t words = tt_round_up(2ull * p->nr_layers * sizeof(uint32_t), 64);
	uint64_t per_step = TT_PIPE_STEP_TIMES * p->nr_layers * sizeof(uint64_t);
	int rc = 0;

	p->sig_bytes = words + TT_PIPE_KEEP * per_step;
	rc = tt_pipe_mem_alloc(p, p->sig_bytes, &p->sig_mem);
	if (rc < 0) {
		return rc;
	}
	p->loaded = p->sig_mem;
	p->computed = p->loaded + p->nr_layers;
	for (uint32_t i = 0; i < TT_PIPE_KEEP; i++) {
		uint64_t *t = (uint64_t *)((uint8_t *)p->sig_mem + words + i * per_step);

		p->steps[i].wait_times = t;
		p->steps[i].save_times = t + 2ull * p->nr_layers;
		p->steps[i].load_times = t + 3ull * p->nr_layers;
		p->steps[i].issue_times = t + 4ull * p->nr_layers;
		p->steps[i].layer_stall = tt_calloc(p->nr_layers, sizeof(uint64_t));
		if (p->steps[i].layer_stall == NULL) {
			return -ENOMEM;
		}
	}
	return 0;
}

/* Save staging registered as host KV of the store's geometry: layer l of chunk slot s is at
 * staging + l * layer_span + s * chunk_layer_bytes, the canonical object layout, so the
 * store's own save path writes it. */
static int
alloc_staging(struct tutti_pipeline *p)
{
	const struct tt_geo *geo = p->geo;
	uint64_t chunk_bytes = geo->chunk_layer_bytes * p->nr_layers;
	uint64_t nr_slots = p->opts.save_staging_bytes / chunk_bytes;
	uint64_t nr_blocks, layer_span;
	struct tutti_segment *segs;
	int rc;

	if (nr_slots == 0) {
		return 0; /* saves are all skipped, counted */
	}
	nr_blocks = nr_slots * geo->blocks_per_chunk;
	if (nr_blocks > UINT32_MAX) {
		return -EINVAL;
	}
	layer_span = nr_blocks * geo->layer_block_bytes;
	p->staging_bytes = layer_span * p->nr_layers;
	/* GPU mode: the GPU's gather writes it across PCIe, and the store's host path reads it. */
	rc = tt_pipe_mem_alloc(p, p->staging_bytes, (void **)&p->staging);
	if (rc < 0) {
		return rc;
	}
	segs = tt_calloc(p->nr_layers, sizeof(*segs));
	p->free_slots = tt_calloc(nr_slots, sizeof(*p->free_slots));
	p->moves = tt_calloc(nr_slots, sizeof(*p->moves));
	if (segs == NULL || p->free_slots == NULL || p->moves == NULL) {
		tt_free(segs);
		return -ENOMEM;
	}
	for (uint32_t l = 0; l < p->nr_layers; l++) {
		segs[l] = (struct tutti_segment){
		    .base = (uint64_t)(uintptr_t)(p->staging + l * layer_span),
		    .block_stride = geo->layer_block_bytes,
		    .bytes = geo->layer_block_bytes,
		};
	}
	rc = tutti_kv_create(&geo->g, segs, 1, (uint32_t)nr_blocks, TUTTI_MEM_HOST, &p->staging_kv);
	tt_free(segs);
	if (rc < 0) {
		return rc;
	}
	p->nr_slots = (uint32_t)nr_slots;
	for (uint32_t s = 0; s < p->nr_slots; s++) {
		p->free_slots[s] = p->nr_slots - 1 - s;
	}
	p->nr_free = p->nr_slots;
	return 0;
}

static int
load_profile(struct tutti_pipeline *p)
{
	struct tutti_profile prof = {
	    .size = sizeof(prof),
	    .nr_layers = p->nr_layers,
	    .layer_ns_per_token = p->layer_ns_per_token,
	};
	int rc;

	if (p->opts.profile_path == NULL) {
		return 0;
	}
	rc = tutti_profile_read(p->opts.profile_path, &prof);
	if (rc < 0) {
		tt_log_err(&p->log, "profile %s: %s", p->opts.profile_path,
		           rc == -EBADMSG  ? "does not parse or is for another layer count"
		           : rc == -EINVAL ? "not a regular file (a FIFO, a device, a directory)"
		                           : "cannot be read");
		return rc;
	}
	p->read_bps = prof.read_bytes_per_s;
	p->write_bps = prof.write_bytes_per_s;
	return 0;
}

static void
release_step(struct tt_pipe_step *s)
{
	tt_free(s->loads);
	tt_free(s->load_keys);
	tt_free(s->load_ids);
	tt_free(s->status);
	s->loads = NULL;
	s->load_keys = NULL;
	s->load_ids = NULL;
	s->status = NULL;
}

void
tt_pipe_retire_staged(struct tutti_pipeline *p, struct tt_staged *s)
{
	if (s == NULL) {
		return;
	}
	for (uint32_t i = 0; i < s->nr_chunks; i++) {
		p->free_slots[p->nr_free++] = s->slots[i];
	}
	tt_free(s->keys);
	tt_free(s->ids);
	tt_free(s->src_ids);
	tt_free(s->slots);
	tt_free(s->chunk_blocks);
	tt_free(s);
}

void
tutti_pipeline_destroy(struct tutti_pipeline *p)
{
	if (p == NULL) {
		return;
	}
	if (p->worker_started) {
		pthread_mutex_lock(&p->lock);
		p->stopping = true;
		pthread_cond_broadcast(&p->wake);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->worker, NULL);
	}
	while (p->staged_head != NULL) {
		struct tt_staged *s = p->staged_head;

		p->staged_head = s->next;
		tt_pipe_retire_staged(p, s);
	}
	for (uint32_t i = 0; i < TT_PIPE_KEEP; i++) {
		release_step(&p->steps[i]);
		tt_free(p->steps[i].layer_stall);
	}
	tutti_kv_destroy(p->staging_kv);
	tt_mover_close(&p->copier);
	tt_pipe_mem_free(p, p->staging);
	tt_pipe_mem_free(p, p->sig_mem);
	tt_load_mem_destroy(p->op_mem);
	tt_free(p->free_slots);
	tt_free(p->moves);
	tt_free(p->layer_ns_per_token);
	tt_free(p->trace);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	tt_free(p);
}

int
tutti_pipeline_create(struct tutti_store *st, const struct tutti_kv *kv,
                      const struct tutti_pipeline_opts *opts, struct tutti_pipeline **out)
{
	struct tutti_pipeline_opts defaults;
	struct tutti_pipeline *p;
	int rc;

	if (out != NULL) {
		*out = NULL;
	}
	if (opts == NULL) {
		tutti_pipeline_opts_init(&defaults);
		opts = &defaults;
	}
	if (st == NULL || kv == NULL || out == NULL || !tt_geo_equal(&kv->geo, tt_store_geo(st)) ||
	    check_opts(opts, tt_store_geo(st)->g.nr_layers) < 0) {
		return -EINVAL;
	}
	p = tt_calloc(1, sizeof(*p));
	if (p == NULL) {
		return -ENOMEM;
	}
	p->st = st;
	p->geo = tt_store_geo(st);
	p->key_bytes = tt_store_key_bytes(st);
	p->kv = kv;
	p->log = *tt_store_log(st);
	p->nr_layers = p->geo->g.nr_layers;
	p->gpu = kv->mem == TUTTI_MEM_CUDA;
	p->device = kv->device;
	p->opts = *opts;
	p->opts.profile_path = NULL; /* not retained */
	p->next_id = 1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);

	p->layer_ns_per_token = tt_calloc(p->nr_layers, sizeof(double));
	rc = p->layer_ns_per_token == NULL ? -ENOMEM : 0;
	if (rc == 0) {
		p->opts.profile_path = opts->profile_path;
		rc = load_profile(p);
		p->opts.profile_path = NULL;
	}
	if (rc == 0 && opts->trace_events > 0) {
		p->trace = tt_calloc(opts->trace_events, sizeof(*p->trace));
		rc = p->trace == NULL ? -ENOMEM : 0;
	}
	if (rc == 0 && p->gpu) {
		/* Nothing of a step may allocate or copy on the GPU: the compute stream's waits
		 * could hold such a call up, and it the load they wait for. */
		rc = tt_store_prepare(st, kv);
	}
	if (rc == 0) {
		rc = tt_load_mem_create(kv, &p->op_mem); /* the load ops' lists, likewise */
	}
	if (rc == 0) {
		rc = alloc_signals(p);
	}
	if (rc == 0) {
		rc = alloc_staging(p);
	}
	if (rc == 0) {
		rc = tt_mover_open(kv, &p->log, &p->copier);
		p->timer_offset = tt_pipe_clock_offset(p);
	}
	if (rc == 0) {
		rc = -pthread_create(&p->worker, NULL, tt_pipe_worker, p);
		p->worker_started = rc == 0;
	}
	if (rc < 0) {
		tutti_pipeline_destroy(p);
		return rc;
	}
	p->readahead = opts->readahead_layers > 0 ? opts->readahead_layers : p->nr_layers;
	p->stats.readahead = p->readahead;
	*out = p;
	return 0;
}

/* ---- steps ---- */

/* Copy the caller's load requests (keys and block ids) into the step. */
static int
copy_loads(struct tutti_pipeline *p, struct tt_pipe_step *s, const struct tutti_request *reqs,
           uint32_t nr)
{
	uint64_t keys = 0, ids = 0, kb = p->key_bytes;

	for (uint32_t i = 0; i < nr; i++) {
		keys += reqs[i].nr_keys;
		ids += reqs[i].nr_blocks;
	}
	s->loads = tt_calloc(nr ? nr : 1, sizeof(*s->loads));
	s->load_keys = tt_malloc(keys * kb + 1);
	s->load_ids = tt_malloc(ids * sizeof(uint32_t) + 1);
	s->status = tt_calloc(s->nr_chunks + 1, sizeof(int32_t));
	if (s->loads == NULL || s->load_keys == NULL || s->load_ids == NULL || s->status == NULL) {
		return -ENOMEM;
	}
	keys = ids = 0;
	for (uint32_t i = 0; i < nr; i++) {
		s->loads[i] = reqs[i];
		memcpy(s->load_keys + keys * kb, reqs[i].keys, reqs[i].nr_keys * kb);
		memcpy(s->load_ids + ids, reqs[i].block_ids, reqs[i].nr_blocks * sizeof(uint32_t));
		s->loads[i].keys = s->load_keys + keys * kb;
		s->loads[i].block_ids = s->load_ids + ids;
		keys += reqs[i].nr_keys;
		ids += reqs[i].nr_blocks;
	}
	s->nr_loads = nr;
	return 0;
}

/* Give the chunks of one save request staging slots, in order, while slots remain; the rest
 * (and every chunk after the first that did not fit) is skipped. Caller holds the lock. */
static int
stage_request(struct tutti_pipeline *p, struct tt_pipe_step *step, const struct tutti_request *r,
              const struct tt_chunk_plan *chunks, uint32_t nr_chunks)
{
	uint32_t per_chunk = p->geo->blocks_per_chunk, kb = p->key_bytes, n, blocks = 0;
	struct tt_staged *s;

	n = TT_MIN(nr_chunks, p->nr_free);
	step->nr_saves_skipped += nr_chunks - n;
	if (n == 0) {
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		blocks += chunks[i].nr_moved;
	}
	s = tt_calloc(1, sizeof(*s));
	if (s == NULL) {
		return -ENOMEM;
	}
	s->keys = tt_malloc((uint64_t)(r->first_chunk + n) * kb);
	s->ids = tt_malloc((uint64_t)blocks * sizeof(uint32_t) + 1);
	s->src_ids = tt_malloc((uint64_t)blocks * sizeof(uint32_t) + 1);
	s->slots = tt_malloc(n * sizeof(uint32_t));
	s->chunk_blocks = tt_malloc(n * sizeof(uint32_t));
	if (s->keys == NULL || s->ids == NULL || s->src_ids == NULL || s->slots == NULL ||
	    s->chunk_blocks == NULL) {
		tt_pipe_retire_staged(p, s);
		return -ENOMEM;
	}
	memcpy(s->keys, r->keys, (uint64_t)(r->first_chunk + n) * kb);
	blocks = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t slot = p->free_slots[--p->nr_free];

		s->slots[i] = slot;
		s->chunk_blocks[i] = chunks[i].nr_moved;
		for (uint32_t b = 0; b < chunks[i].nr_moved; b++, blocks++) {
			s->ids[blocks] = slot * per_chunk + b;
			s->src_ids[blocks] = r->block_ids[chunks[i].id_off + b];
		}
	}
	s->step = step->id;
	s->nr_chunks = n;
	s->req = (struct tutti_request){
	    .size = sizeof(s->req),
	    .nr_keys = r->first_chunk + n,
	    .keys = s->keys,
	    .first_chunk = r->first_chunk,
	    .nr_blocks = blocks,
	    .block_ids = s->ids,
	};
	if (p->staged_tail != NULL) {
		p->staged_tail->next = s;
	} else {
		p->staged_head = s;
	}
	p->staged_tail = s;
	step->nr_saves_staged += n;
	return 0;
}

static int
stage_saves(struct tutti_pipeline *p, struct tt_pipe_step *step, const struct tutti_request *reqs,
            uint32_t nr)
{
	struct tt_chunk_plan *chunks = NULL;
	uint32_t nr_chunks = 0, c = 0;
	int rc;

	rc = tt_plan_call(p->geo, p->kv, reqs, nr, false, &p->log, &chunks, &nr_chunks);
	if (rc < 0) {
		return rc;
	}
	for (uint32_t i = 0; i < nr && rc == 0; i++) {
		uint32_t n = reqs[i].nr_keys - reqs[i].first_chunk;

		if (p->staging_kv == NULL) {
			step->nr_saves_skipped += n;
		} else {
			rc = stage_request(p, step, &reqs[i], chunks + c, n);
		}
		c += n;
	}
	tt_free(chunks);
	return rc;
}

/* A step record still in use: its result is not final, or its new KV is still being copied. */
static bool
step_busy(const struct tutti_pipeline *p, const struct tt_pipe_step *s)
{
	return s->id != 0 && (!s->final || (s->nr_saves_staged > 0 && s->gathered < p->nr_layers));
}

int64_t
tutti_pipeline_begin_step(struct tutti_pipeline *p, const struct tutti_step *step)
{
	struct tt_staged *tail;
	struct tt_pipe_step *s;
	uint64_t layer_bytes;
	uint32_t outstanding = 0, nr_chunks;
	int64_t nr;
	int rc;

	if (p == NULL || step == NULL || step->size != sizeof(*step) || step->reserved != 0 ||
	    (step->loads == NULL && step->nr_loads > 0) ||
	    (step->saves == NULL && step->nr_saves > 0) || p->cur != NULL) {
		return -EINVAL;
	}
	/* Check the loads as the store will, now rather than in the worker. */
	nr = tt_plan_check(p->geo, p->kv, step->loads, step->nr_loads, true, &p->log);
	if (nr < 0) {
		return nr;
	}
	nr_chunks = (uint32_t)nr;

	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < TT_PIPE_KEEP; i++) {
		outstanding += step_busy(p, &p->steps[i]);
	}
	s = &p->steps[p->next_id % TT_PIPE_KEEP];
	if (outstanding >= TT_PIPE_OUTSTANDING || step_busy(p, s)) {
		pthread_mutex_unlock(&p->lock);
		return -EBUSY;
	}
	release_step(s);
	memset(s->wait_times, 0, TT_PIPE_STEP_TIMES * p->nr_layers * sizeof(uint64_t));
	memset(s->layer_stall, 0, p->nr_layers * sizeof(uint64_t));
	s->nr_chunks = nr_chunks;
	rc = copy_loads(p, s, step->loads, step->nr_loads);
	s->nr_saves_staged = s->nr_saves_skipped = 0;
	s->id = p->next_id;
	tail = p->staged_tail;
	if (rc == 0) {
		rc = stage_saves(p, s, step->saves, step->nr_saves);
	}
	if (rc < 0) {
		/* Give back what was staged for this step: everything after the old tail. */
		struct tt_staged *it = tail != NULL ? tail->next : p->staged_head;

		if (tail != NULL) {
			tail->next = NULL;
		} else {
			p->staged_head = NULL;
		}
		p->staged_tail = tail;
		while (it != NULL) {
			struct tt_staged *next = it->next;

			tt_pipe_retire_staged(p, it);
			it = next;
		}
		release_step(s);
		s->id = 0;
		pthread_mutex_unlock(&p->lock);
		return rc;
	}
	p->next_id++;
	s->seq = (uint32_t)s->id;
	s->stream = step->stream;
	s->compute_tokens = step->compute_tokens;
	s->next_load = s->nr_chunks > 0 ? 0 : p->nr_layers;
	s->timed_out = 0;
	s->host_wait_ns = 0;
	s->waited = s->saved = s->gathered = 0;
	s->ended = s->final = false;
	s->t_begin = tt_now_ns();
	s->t_loaded = s->nr_chunks > 0 ? 0 : s->t_begin;
	s->t_wait_call = s->t_begin;
	s->load_bytes = 0;
	memset(&s->result, 0, sizeof(s->result));
	layer_bytes = (uint64_t)s->nr_chunks * p->geo->object_bytes;
	p->readahead = p->opts.readahead_layers > 0
	                   ? p->opts.readahead_layers
	                   : tt_pipe_readahead(p, s->compute_tokens, layer_bytes);
	s->readahead = p->readahead; /* a step keeps its own window while it loads */
	s->result.readahead = p->readahead;
	p->stats.readahead = p->readahead;
	p->stats.saves_skipped += s->nr_saves_skipped;
	p->stats.request_loads += step->nr_loads;
	p->cur = s;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	return s->id;
}

/*
 * Block until the worker has issued layer \p layer of \p s (on engine gpu-uring its kernels are
 * on the store's stream; on the CPU-driven engines it is loaded), or until the wait timeout.
 *
 * Why the host waits for this before any wait goes on a compute stream: loading a kernel's
 * module (CUDA loads them lazily, at first launch, by default) can synchronise the whole
 * context. A wait kernel for a layer not yet issued would then hold that synchronisation, and
 * with it every CUDA call of the thread that is to issue the layer: a deadlock that only the
 * wait timeout breaks. Once the layer is issued, its wait depends on work already on the GPU
 * alone. The host runs at most the read-ahead window ahead of the GPU, which it does anyway.
 * CPU mode waits for the same, then for the layer's load. Returns false on the timeout.
 */
static bool
wait_issued(struct tutti_pipeline *p, struct tt_pipe_step *s, uint32_t layer, uint64_t deadline)
{
	bool issued;

	pthread_mutex_lock(&p->lock);
	while (!(issued = s->next_load > layer) && tt_now_ns() < deadline) {
		tt_pipe_cond_wait_ns(&p->done, &p->lock, TT_NS_PER_MS);
	}
	pthread_mutex_unlock(&p->lock);
	return issued;
}

int
tutti_pipeline_wait_layer(struct tutti_pipeline *p, uint32_t layer)
{
	struct tt_pipe_step *s;
	uint64_t t0, deadline;
	bool issued;
	int rc = 0;

	if (p == NULL || p->cur == NULL || layer >= p->nr_layers || layer != p->cur->waited) {
		return -EINVAL;
	}
	s = p->cur;
	if (s->nr_chunks == 0) {
		/* Nothing to wait for: no kernel, no stall. */
		__atomic_add_fetch(&s->waited, 1, __ATOMIC_RELEASE);
		return 0;
	}
	t0 = tt_now_ns();
	deadline = t0 + (uint64_t)p->opts.wait_timeout_ms * TT_NS_PER_MS;
	issued = wait_issued(p, s, layer, deadline);
	if (p->gpu) {
		s->host_wait_ns += tt_now_ns() - t0;
		if (issued) {
			rc = tt_pipe_stream_wait(p, s, layer);
		} else {
			/* Released without a wait on the GPU: the times in its clock, as the
			 * kernel's. */
			s->wait_times[2 * layer] = (uint64_t)((int64_t)t0 + p->timer_offset);
			__atomic_store_n(&s->wait_times[2 * layer + 1],
			                 (uint64_t)((int64_t)tt_now_ns() + p->timer_offset) |
			                     TT_PIPE_WAIT_TIMED_OUT,
			                 __ATOMIC_RELEASE);
		}
	} else {
		pthread_mutex_lock(&p->lock);
		while ((int32_t)(tt_word_load_acquire(&p->loaded[layer]) - s->seq) < 0) {
			if (tt_now_ns() >= deadline) {
				s->wait_times[2 * layer + 1] |= TT_PIPE_WAIT_TIMED_OUT;
				break;
			}
			tt_pipe_cond_wait_ns(&p->done, &p->lock, TT_NS_PER_MS);
		}
		s->wait_times[2 * layer] = t0;
		s->wait_times[2 * layer + 1] |= tt_now_ns();
		s->host_wait_ns += (s->wait_times[2 * layer + 1] & ~TT_PIPE_WAIT_TIMED_OUT) - t0;
		pthread_cond_broadcast(&p->wake); /* compute progressed: the window moves */
		pthread_mutex_unlock(&p->lock);
	}
	if (rc == 0) {
		__atomic_add_fetch(&s->waited, 1, __ATOMIC_RELEASE);
	}
	return rc;
}

int
tutti_pipeline_save_layer(struct tutti_pipeline *p, uint32_t layer)
{
	struct tt_pipe_step *s;
	int rc = 0;

	if (p == NULL || p->cur == NULL || layer >= p->nr_layers || layer != p->cur->saved) {
		return -EINVAL;
	}
	s = p->cur;
	if (s->nr_saves_staged > 0) {
		if (p->gpu) {
			rc = tt_pipe_stream_signal(p, s, layer);
		} else {
			pthread_mutex_lock(&p->lock);
			s->save_times[layer] = tt_now_ns();
			tt_word_store_release(&p->computed[layer], s->seq);
			pthread_cond_broadcast(&p->wake);
			pthread_mutex_unlock(&p->lock);
		}
	}
	if (rc == 0) {
		__atomic_add_fetch(&s->saved, 1, __ATOMIC_RELEASE);
	}
	return rc;
}

int
tutti_pipeline_end_step(struct tutti_pipeline *p)
{
	struct tt_pipe_step *s;

	if (p == NULL || p->cur == NULL || p->cur->waited != p->nr_layers) {
		return -EINVAL;
	}
	s = p->cur;
	pthread_mutex_lock(&p->lock);
	s->ended = true;
	p->cur = NULL;
	p->stats.steps++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int
tutti_pipeline_step_result(struct tutti_pipeline *p, int64_t step, struct tutti_step_result *out,
                           int32_t *load_status, uint64_t *layer_stall_ns)
{
	struct tt_pipe_step *s;
	int rc = 0;

	if (p == NULL || out == NULL || out->size != sizeof(*out) || step <= 0) {
		return -EINVAL;
	}
	pthread_mutex_lock(&p->lock);
	s = &p->steps[step % TT_PIPE_KEEP];
	if (s->id != step) {
		rc = -ENOENT;
	} else if (!s->final) {
		rc = -EAGAIN;
	} else {
		*out = s->result;
		if (load_status != NULL && s->nr_chunks > 0) {
			memcpy(load_status, s->status, s->nr_chunks * sizeof(int32_t));
		}
		if (layer_stall_ns != NULL) {
			memcpy(layer_stall_ns, s->layer_stall, p->nr_layers * sizeof(uint64_t));
		}
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int
tutti_pipeline_flush(struct tutti_pipeline *p)
{
	if (p == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&p->lock);
	for (;;) {
		bool pending = false;

		for (struct tt_staged *s = p->staged_head; s != NULL; s = s->next) {
			pending = pending || !s->failed;
		}
		if (!pending) {
			break;
		}
		pthread_cond_broadcast(&p->wake);
		pthread_cond_wait(&p->done, &p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int
tutti_pipeline_get_stats(struct tutti_pipeline *p, struct tutti_pipeline_stats *out)
{
	struct tutti_stats st = {.size = sizeof(st)};
	double sum = 0;

	if (p == NULL || out == NULL || out->size != sizeof(*out)) {
		return -EINVAL;
	}
	tutti_store_get_stats(p->st, &st);
	pthread_mutex_lock(&p->lock);
	*out = p->stats;
	out->size = sizeof(*out);
	out->staging_bytes = p->staging_bytes + p->sig_bytes;
	out->store_staging_bytes = st.staging_bytes;
	out->read_bytes_per_s = p->read_bps;
	out->write_bytes_per_s = p->write_bps;
	for (uint32_t l = 0; l < p->nr_layers; l++) {
		sum += p->layer_ns_per_token[l];
	}
	out->compute_ns_per_token = sum / p->nr_layers;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

int
tutti_pipeline_get_profile(struct tutti_pipeline *p, struct tutti_profile *out)
{
	if (p == NULL || out == NULL || out->size != sizeof(*out) ||
	    out->nr_layers != p->nr_layers || out->layer_ns_per_token == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&p->lock);
	out->read_bytes_per_s = p->read_bps;
	out->write_bytes_per_s = p->write_bps;
	memcpy(out->layer_ns_per_token, p->layer_ns_per_token, p->nr_layers * sizeof(double));
	pthread_mutex_unlock(&p->lock);
	return 0;
}
