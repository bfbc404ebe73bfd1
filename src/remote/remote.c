/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier handle: a provider's operations run on two threads of the handle, so that a
 * caller waits a bounded time whatever the provider does.
 *
 * - The read thread runs lookups (exists) and fetches (get_into) in arrival order. A caller
 *   queues a call and waits for it until its deadline; a call whose caller gave up is
 *   "abandoned": the read thread frees it, and the fetch memory it writes into, when the provider
 *   returns. Fetch memory is a ring of record-sized slots; a call owns its slots until then.
 * - The publish thread takes queued records, oldest first, while no read is in progress, asks
 *   which the pool lacks and puts those, pacing itself to publish_rate.
 * - A breaker counts consecutive faults; at breaker_faults the tier is down until a probe
 *   succeeds.
 *
 * Verification and scattering run on the caller's thread, after its call completed: the handle's
 * threads only ever touch the handle's memory, never paged KV.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "common/common.h"
#include "format/format.h"
#include "gpu/gpu.h"
#include "layout/layout.h"
#include "mover/mover.h"
#include "remote/record.h"
#include "tutti/remote.h"

#define PREFIX_MAX 192u
#define KEY_STR_MAX (PREFIX_MAX + 12u + 2u * TT_MAX_KEY_BYTES + 1u)
#define BREAKER_MAX_OPEN_NS (30ull * 1000000000ull)
#define PUBLISH_BATCH 8u
#define SEEN_SLOTS 8192u /* remembered published keys (a lossy set) */
#define GPU_MAX_BLOCKS 4096u

enum job_kind { JOB_EXISTS, JOB_GET };

/* One provider call of the read thread. Owned by the caller until it abandons it, then by the
 * read thread. */
struct job {
	struct job *next;
	enum job_kind kind;
	uint32_t n;
	char **keys;
	void **bufs;
	uint64_t *lens;
	int64_t *got;
	int32_t *present;
	uint32_t *slots; /* ring slots written by a JOB_GET */
	int rc;
	bool done;
	bool abandoned;
};

enum pub_state { PUB_FREE, PUB_QUEUED, PUB_BUSY };

struct pub_slot {
	enum pub_state state;
	uint64_t hash; /* of the key string */
	char key[KEY_STR_MAX];
};

struct tutti_remote {
	struct tt_geo geo;
	struct tutti_remote_ops ops;
	void *ctx;
	struct tt_log log;
	char prefix[PREFIX_MAX + 1];
	uint32_t key_bytes, rank, nr_ranks;
	uint64_t tag; /* of this rank's records */
	uint64_t timeout_ns, lookup_timeout_ns, publish_rate;
	uint64_t record_bytes;

	pthread_mutex_t mu;
	pthread_cond_t read_cv;  /* read thread: a job was queued, or stop */
	pthread_cond_t done_cv;  /* callers: a job is done */
	pthread_cond_t pub_cv;   /* publish thread: work queued, reads finished, or stop */
	pthread_cond_t flush_cv; /* flushers: a publish finished */
	bool stop;
	struct job *head, *tail; /* queued read jobs */
	uint32_t reads_active;   /* lookups and fetches in progress (publishing yields) */

	/* breaker */
	uint32_t breaker_faults, consecutive;
	bool down, probing;
	uint64_t open_ns, retry_at;
	uint64_t first_open_ns;

	/* fetch ring */
	uint8_t *ring;
	uint64_t ring_bytes;
	bool ring_pinned, ring_registered;
	uint32_t nr_ring;
	bool *ring_busy;

	/* publish queue: fifo of queued slots, oldest first */
	uint8_t *pub;
	uint64_t pub_bytes;
	bool pub_pinned, pub_registered;
	uint32_t nr_pub;
	struct pub_slot *pubs;
	uint32_t *fifo;
	uint32_t fifo_head, fifo_len, pub_busy;
	uint64_t next_put_ns; /* pacing */
	uint64_t *seen;       /* SEEN_SLOTS hashes of keys queued or published */

	/* one mover user at a time (the GPU context is not shared between threads) */
	pthread_mutex_t mover_mu;
	struct tt_gpu *gpu;

	pthread_t read_thread, pub_thread;
	bool read_started, pub_started;

	struct tutti_remote_stats stats; /* under mu */
};

void
tutti_remote_opts_init(struct tutti_remote_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->key_bytes = 32;
	opts->nr_ranks = 1;
	opts->timeout_ms = 1000;
	opts->lookup_timeout_ms = 50;
	opts->ring_bytes = 64ull << 20;
	opts->publish_bytes = 64ull << 20;
	opts->breaker_faults = 3;
	opts->breaker_open_ms = 1000;
	opts->log_level = TUTTI_LOG_WARN;
}

/* ---- keys ---- */

static void
key_string(const struct tutti_remote *r, uint32_t rank, const uint8_t *key, char *out)
{
	static const char hex[] = "0123456789abcdef";
	int n = snprintf(out, KEY_STR_MAX, "%s%" PRIu32 "/", r->prefix, rank);

	for (uint32_t i = 0; i < r->key_bytes; i++) {
		out[n + 2 * i] = hex[key[i] >> 4];
		out[n + 2 * i + 1] = hex[key[i] & 15];
	}
	out[n + 2 * r->key_bytes] = '\0';
}

/* ---- breaker (under mu) ---- */

/* 0 when a call may go to the provider, -EHOSTDOWN while the tier is down. */
static int
breaker_gate(struct tutti_remote *r)
{
	if (!r->down) {
		return 0;
	}
	if (r->probing || tt_now_ns() < r->retry_at) {
		return -EHOSTDOWN;
	}
	r->probing = true;
	return 0;
}

static void
breaker_report(struct tutti_remote *r, bool fault)
{
	if (!fault) {
		r->consecutive = 0;
		if (r->down) {
			r->down = false;
			r->open_ns = r->first_open_ns;
		}
		r->probing = false;
		return;
	}
	r->stats.faults++;
	r->consecutive++;
	if (r->down) {
		r->open_ns = TT_MIN(2 * r->open_ns, BREAKER_MAX_OPEN_NS);
		r->retry_at = tt_now_ns() + r->open_ns;
		r->probing = false;
	} else if (r->consecutive >= r->breaker_faults) {
		r->down = true;
		r->probing = false;
		r->retry_at = tt_now_ns() + r->open_ns;
		r->stats.breaker_trips++;
		pthread_cond_broadcast(&r->pub_cv);
	}
}

/* ---- the read thread ---- */

static void
free_job(struct tutti_remote *r, struct job *j)
{
	if (j->slots != NULL) {
		for (uint32_t i = 0; i < j->n; i++) {
			r->ring_busy[j->slots[i]] = false;
		}
	}
	tt_free(j);
}

static void *
read_main(void *arg)
{
	struct tutti_remote *r = arg;

	pthread_mutex_lock(&r->mu);
	for (;;) {
		struct job *j;

		while (!r->stop && r->head == NULL) {
			pthread_cond_wait(&r->read_cv, &r->mu);
		}
		if (r->head == NULL) {
			break; /* stop, nothing queued */
		}
		j = r->head;
		r->head = j->next;
		if (r->head == NULL) {
			r->tail = NULL;
		}
		if (j->abandoned) {
			free_job(r, j);
			continue;
		}
		if (r->stop) {
			j->rc = -ESHUTDOWN;
			j->done = true;
			pthread_cond_broadcast(&r->done_cv);
			continue;
		}
		pthread_mutex_unlock(&r->mu);
		if (j->kind == JOB_EXISTS) {
			j->rc =
			    r->ops.exists(r->ctx, (const char *const *)j->keys, j->n, j->present);
		} else {
			j->rc = r->ops.get_into(r->ctx, (const char *const *)j->keys, j->bufs,
			                        j->lens, j->n, j->got);
		}
		pthread_mutex_lock(&r->mu);
		if (j->abandoned) {
			free_job(r, j);
		} else {
			j->done = true;
			pthread_cond_broadcast(&r->done_cv);
		}
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* A job of \p n keys (with ring slots for a get), in one allocation. */
static struct job *
job_new(enum job_kind kind, uint32_t n)
{
	size_t sz = sizeof(struct job) +
	            n * (sizeof(char *) + KEY_STR_MAX + sizeof(void *) + sizeof(uint64_t) +
	                 sizeof(int64_t) + sizeof(int32_t) + sizeof(uint32_t));
	struct job *j = tt_calloc(1, sz);
	uint8_t *p;

	if (j == NULL) {
		return NULL;
	}
	j->kind = kind;
	j->n = n;
	p = (uint8_t *)(j + 1);
	j->keys = (char **)p;
	p += n * sizeof(char *);
	j->bufs = (void **)p;
	p += n * sizeof(void *);
	j->lens = (uint64_t *)p;
	p += n * sizeof(uint64_t);
	j->got = (int64_t *)p;
	p += n * sizeof(int64_t);
	j->present = (int32_t *)p;
	p += n * sizeof(int32_t);
	if (kind == JOB_GET) {
		j->slots = (uint32_t *)p;
	}
	p += n * sizeof(uint32_t);
	for (uint32_t i = 0; i < n; i++) {
		j->keys[i] = (char *)p + (size_t)i * KEY_STR_MAX;
	}
	return j;
}

static struct timespec
deadline_ts(uint64_t ns_from_now)
{
	struct timespec ts;
	uint64_t t;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + ns_from_now;
	ts.tv_sec = (time_t)(t / 1000000000ull);
	ts.tv_nsec = (long)(t % 1000000000ull);
	return ts;
}

/*
 * Run \p j on the read thread and wait for it until the deadline. Under mu. Returns 0 when the
 * job is done (the caller owns it again), -ETIMEDOUT when it was abandoned (the read thread owns
 * it now), -ESHUTDOWN when the handle is closing.
 */
static int
run_job(struct tutti_remote *r, struct job *j, uint64_t timeout_ns)
{
	struct timespec until = deadline_ts(timeout_ns);

	if (r->stop) {
		return -ESHUTDOWN;
	}
	j->next = NULL;
	if (r->tail != NULL) {
		r->tail->next = j;
	} else {
		r->head = j;
	}
	r->tail = j;
	pthread_cond_signal(&r->read_cv);
	while (!j->done) {
		if (pthread_cond_timedwait(&r->done_cv, &r->mu, &until) == ETIMEDOUT && !j->done) {
			j->abandoned = true;
			r->stats.timeouts++;
			return -ETIMEDOUT;
		}
	}
	return 0;
}

static void
reads_end(struct tutti_remote *r)
{
	if (--r->reads_active == 0) {
		pthread_cond_broadcast(&r->pub_cv);
	}
}

/* ---- lookup ---- */

int64_t
tutti_remote_lookup(struct tutti_remote *r, const uint8_t *keys, uint32_t nr_keys, uint32_t first)
{
	uint64_t t0 = tt_now_ns(), n;
	struct job *j;
	int64_t hit = 0;
	int rc;

	if (r == NULL || (keys == NULL && nr_keys > 0) || first > nr_keys) {
		return -EINVAL;
	}
	n = (uint64_t)(nr_keys - first) * r->nr_ranks;
	if (n == 0) {
		return 0;
	}
	if (n > UINT32_MAX / 2) {
		return -EINVAL;
	}
	j = job_new(JOB_EXISTS, (uint32_t)n);
	if (j == NULL) {
		return -ENOMEM;
	}
	for (uint32_t c = first, i = 0; c < nr_keys; c++) {
		for (uint32_t rk = 0; rk < r->nr_ranks; rk++, i++) {
			key_string(r, rk, keys + (size_t)c * r->key_bytes, j->keys[i]);
		}
	}
	pthread_mutex_lock(&r->mu);
	rc = breaker_gate(r);
	if (rc < 0) {
		pthread_mutex_unlock(&r->mu);
		tt_free(j);
		return rc;
	}
	r->reads_active++;
	rc = run_job(r, j, r->lookup_timeout_ns);
	if (rc == -ETIMEDOUT) {
		breaker_report(r, true);
		reads_end(r);
		pthread_mutex_unlock(&r->mu);
		tt_log_warn(&r->log, "remote lookup of %" PRIu64 " keys timed out", n);
		return rc;
	}
	if (rc == 0) {
		rc = j->rc;
		breaker_report(r, rc < 0);
	}
	reads_end(r);
	if (rc == 0) {
		for (uint32_t c = first, i = 0; c < nr_keys; c++, hit++) {
			bool all = true;

			for (uint32_t rk = 0; rk < r->nr_ranks; rk++, i++) {
				all = all && j->present[i] == 1;
			}
			if (!all) {
				break;
			}
		}
		r->stats.lookups++;
		r->stats.lookup_hits += (uint64_t)hit;
		r->stats.lookup_ns += tt_now_ns() - t0;
	}
	pthread_mutex_unlock(&r->mu);
	tt_free(j);
	if (rc < 0) {
		tt_log_warn(&r->log, "remote lookup failed: %s", tutti_strerror(rc));
		return rc;
	}
	return hit;
}

static void seen_set(struct tutti_remote *r, uint64_t h, bool on);

/* ---- fetch ---- */

/* One chunk of a fetch: which blocks of its record go where. */
struct fetch_chunk {
	const struct tutti_request *req;
	uint32_t key;      /* index in req->keys */
	uint32_t id_off;   /* first entry of req->block_ids */
	uint32_t nr_moved; /* blocks scattered */
	uint32_t obj_skip; /* leading blocks of the record not scattered */
};

static int
check_request(const struct tutti_remote *r, const struct tutti_kv *kv,
              const struct tutti_request *q, bool load)
{
	uint64_t bpc = r->geo.blocks_per_chunk, moved, total;

	if (q->size != sizeof(*q) || q->reserved != 0 || q->keys == NULL || q->nr_keys == 0 ||
	    q->first_chunk >= q->nr_keys || q->nr_blocks == 0 || q->block_ids == NULL ||
	    q->skip_blocks >= bpc || (!load && q->skip_blocks != 0)) {
		return -EINVAL;
	}
	moved = q->nr_keys - q->first_chunk;
	total = (uint64_t)q->skip_blocks + q->nr_blocks;
	if (total <= (moved - 1) * bpc || total > moved * bpc) {
		return -EINVAL;
	}
	for (uint32_t i = 0; i < q->nr_blocks; i++) {
		if (q->block_ids[i] >= kv->nr_blocks) {
			return -EINVAL;
		}
	}
	return 0;
}

/* Every chunk of \p reqs, in order, or a negative errno. */
static int64_t
plan(const struct tutti_remote *r, const struct tutti_kv *kv, const struct tutti_request *reqs,
     uint32_t nr_reqs, bool load, struct fetch_chunk **out)
{
	uint64_t nr = 0, bpc = r->geo.blocks_per_chunk, c = 0;
	struct fetch_chunk *chunks;

	if (kv == NULL || (reqs == NULL && nr_reqs > 0) || !tt_geo_equal(&kv->geo, &r->geo)) {
		return -EINVAL;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		int rc = check_request(r, kv, &reqs[i], load);

		if (rc < 0) {
			return rc;
		}
		nr += reqs[i].nr_keys - reqs[i].first_chunk;
	}
	if (nr > UINT32_MAX / 2) {
		return -EINVAL;
	}
	chunks = tt_calloc(nr, sizeof(*chunks));
	if (chunks == NULL) {
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		const struct tutti_request *q = &reqs[i];
		uint64_t total = (uint64_t)q->skip_blocks + q->nr_blocks;

		for (uint32_t k = q->first_chunk; k < q->nr_keys; k++, c++) {
			uint64_t start = (uint64_t)(k - q->first_chunk) * bpc;
			uint64_t end = TT_MIN(start + bpc, total);
			uint64_t from = TT_MAX(start, (uint64_t)q->skip_blocks);

			chunks[c] =
			    (struct fetch_chunk){.req = q,
			                         .key = k,
			                         .id_off = (uint32_t)(from - q->skip_blocks),
			                         .nr_moved = (uint32_t)(end - from),
			                         .obj_skip = (uint32_t)(from - start)};
		}
	}
	*out = chunks;
	return (int64_t)nr;
}

/* The mover for \p kv: the CPU's for host memory, the handle's GPU context for device memory.
 * Under mover_mu. */
static int
mover_for(struct tutti_remote *r, const struct tutti_kv *kv, const struct tt_mover_ops **ops,
          void **ctx)
{
	*ops = &tt_mover_cpu;
	*ctx = NULL;
	if (kv->mem != TUTTI_MEM_CUDA) {
		return 0;
	}
	if (!r->ring_pinned || (r->pub != NULL && !r->pub_pinned)) {
		return -EOPNOTSUPP; /* the GPU reads and writes our memory in place */
	}
	if (r->gpu != NULL && tt_gpu_device(r->gpu) != kv->device) {
		return -EINVAL; /* one GPU per handle, as per process rank */
	}
	if (r->gpu == NULL) {
		struct tt_gpu_conf conf = {
		    .device = kv->device, .max_blocks = GPU_MAX_BLOCKS, .log = &r->log};
		int rc = tt_gpu_open(&conf, &r->gpu);

		if (rc < 0) {
			return rc;
		}
	}
	*ops = &tt_mover_cuda;
	*ctx = r->gpu;
	return 0;
}

static void
record_id(const struct tutti_remote *r, const struct tutti_request *q, uint32_t k,
          struct tt_record_id *id)
{
	id->tag = r->tag;
	id->key_bytes = r->key_bytes;
	id->key = q->keys + (size_t)k * r->key_bytes;
	id->parent = k > 0 ? q->keys + (size_t)(k - 1) * r->key_bytes : NULL;
}

/* Verify and scatter chunk \p c from the record at \p rec. Under mover_mu. */
static int
land_chunk(struct tutti_remote *r, const struct tutti_kv *kv, const struct fetch_chunk *c,
           const uint8_t *rec, int64_t got, const struct tt_mover_ops *mover, void *mctx)
{
	struct tt_record_id id;
	int rc;

	if (got < 0) {
		return (int)got;
	}
	record_id(r, c->req, c->key, &id);
	rc = tt_record_check(&r->geo, rec, (uint64_t)got, &id, c->obj_skip + c->nr_moved);
	if (rc < 0) {
		return rc;
	}
	for (uint32_t l = 0; l < r->geo.g.nr_layers; l++) {
		struct tt_move m = {.obj =
		                        (void *)(rec + tt_geo_object_off(&r->geo, l) +
		                                 (uint64_t)c->obj_skip * r->geo.layer_block_bytes),
		                    .block_ids = c->req->block_ids + c->id_off,
		                    .nr_blocks = c->nr_moved};

		rc = mover->scatter(mctx, kv, l, &m, 1);
		if (rc < 0) {
			return rc;
		}
	}
	return mover->sync(mctx);
}

/*
 * Fetch up to \p n chunks of one request, as many as free ring slots allow, with one get call.
 * Fills st[] and returns how many were loaded; sets *failed and stops at the first failure
 * (st[] of the rest stays 1: not tried).
 */
static uint32_t
fetch_batch(struct tutti_remote *r, const struct tutti_kv *kv, const struct fetch_chunk *cs,
            uint32_t n, int32_t *st, const struct tt_mover_ops *mover, void *mctx, bool *failed)
{
	uint32_t nr_slots = 0, loaded = 0;
	struct job *j = job_new(JOB_GET, n);
	bool fault = false;
	int rc;

	*failed = true;
	if (j == NULL) {
		st[0] = -ENOMEM;
		return 0;
	}
	pthread_mutex_lock(&r->mu);
	rc = breaker_gate(r);
	for (uint32_t s = 0; rc == 0 && s < r->nr_ring && nr_slots < n; s++) {
		if (!r->ring_busy[s]) {
			r->ring_busy[s] = true;
			j->slots[nr_slots++] = s;
		}
	}
	if (rc == 0 && nr_slots == 0) {
		rc = -EBUSY; /* every slot is held by a call that timed out */
		if (r->probing) {
			r->probing = false;
		}
	}
	if (rc < 0) {
		pthread_mutex_unlock(&r->mu);
		tt_free(j);
		st[0] = rc;
		return 0;
	}
	j->n = nr_slots; /* fewer chunks when fewer slots were free */
	for (uint32_t i = 0; i < nr_slots; i++) {
		key_string(r, r->rank, cs[i].req->keys + (size_t)cs[i].key * r->key_bytes,
		           j->keys[i]);
		j->bufs[i] = r->ring + (uint64_t)j->slots[i] * r->record_bytes;
		j->lens[i] = r->record_bytes;
		j->got[i] = -EIO;
	}
	r->reads_active++;
	rc = run_job(r, j, r->timeout_ns);
	if (rc == -ETIMEDOUT) {
		breaker_report(r, true);
		reads_end(r);
		pthread_mutex_unlock(&r->mu);
		st[0] = rc;
		return 0; /* j belongs to the read thread now */
	}
	if (rc == 0) {
		rc = j->rc;
		for (uint32_t i = 0; rc == 0 && i < nr_slots; i++) {
			fault = fault || (j->got[i] < 0 && j->got[i] != -ENOENT);
		}
		breaker_report(r, rc < 0 || fault);
	}
	reads_end(r);
	pthread_mutex_unlock(&r->mu);
	pthread_mutex_lock(&r->mover_mu);
	for (uint32_t i = 0; i < nr_slots; i++) {
		int crc =
		    rc < 0 ? rc : land_chunk(r, kv, &cs[i], j->bufs[i], j->got[i], mover, mctx);

		st[i] = crc;
		if (crc < 0) {
			if (crc == -EBADMSG || crc == -ERANGE) {
				pthread_mutex_lock(&r->mu);
				r->stats.verify_failures += crc == -EBADMSG;
				pthread_mutex_unlock(&r->mu);
				tt_log_warn(&r->log, "remote record %s rejected: %s", j->keys[i],
				            tutti_strerror(crc));
			}
			break;
		}
		loaded++;
	}
	pthread_mutex_unlock(&r->mover_mu);
	*failed = loaded < nr_slots;
	pthread_mutex_lock(&r->mu);
	/* What came from the pool need not be published back to it. */
	for (uint32_t i = 0; i < loaded; i++) {
		seen_set(r, XXH3_64bits(j->keys[i], strlen(j->keys[i])), true);
	}
	free_job(r, j);
	pthread_mutex_unlock(&r->mu);
	return loaded;
}

int64_t
tutti_remote_fetch(struct tutti_remote *r, const struct tutti_kv *kv,
                   const struct tutti_request *reqs, uint32_t nr_reqs, int32_t *status)
{
	uint64_t t0 = tt_now_ns(), loaded = 0, bytes = 0, errors = 0;
	struct fetch_chunk *cs = NULL;
	const struct tt_mover_ops *mover;
	int32_t *st;
	void *mctx;
	int64_t nr;
	int rc;

	if (r == NULL) {
		return -EINVAL;
	}
	nr = plan(r, kv, reqs, nr_reqs, true, &cs);
	if (nr < 0) {
		return nr;
	}
	st = tt_malloc((size_t)nr * sizeof(*st));
	if (st == NULL) {
		tt_free(cs);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < nr; i++) {
		st[i] = 1; /* not tried */
	}
	pthread_mutex_lock(&r->mover_mu);
	rc = mover_for(r, kv, &mover, &mctx);
	pthread_mutex_unlock(&r->mover_mu);
	for (int64_t i = 0; rc == 0 && i < nr;) {
		int64_t end = i;
		bool failed;
		uint32_t got;

		while (end < nr && cs[end].req == cs[i].req && end - i < r->nr_ring) {
			end++;
		}
		got = fetch_batch(r, kv, cs + i, (uint32_t)(end - i), st + i, mover, mctx, &failed);
		loaded += got;
		bytes += (uint64_t)got * r->record_bytes;
		if (failed) {
			/* A failure ends its request (its later chunks are -ECANCELED). */
			const struct tutti_request *q = cs[i].req;

			while (i < nr && cs[i].req == q) {
				i++;
			}
		} else {
			i += got;
		}
	}
	for (int64_t i = 0; i < nr; i++) {
		if (rc < 0 && st[i] == 1) {
			st[i] = rc;
		} else if (st[i] == 1) {
			st[i] = -ECANCELED;
		}
		errors += st[i] != 0;
		if (status != NULL) {
			status[i] = st[i];
		}
	}
	pthread_mutex_lock(&r->mu);
	r->stats.fetch_chunks += loaded;
	r->stats.fetch_bytes += bytes;
	r->stats.fetch_errors += errors;
	r->stats.fetch_ns += tt_now_ns() - t0;
	pthread_mutex_unlock(&r->mu);
	tt_free(st);
	tt_free(cs);
	if (rc < 0) {
		tt_log_warn(&r->log, "remote fetch failed: %s", tutti_strerror(rc));
	}
	return (int64_t)loaded;
}

/* ---- publish ---- */

static bool
seen_has(const struct tutti_remote *r, uint64_t h)
{
	return r->seen[h % SEEN_SLOTS] == h;
}

static void
seen_set(struct tutti_remote *r, uint64_t h, bool on)
{
	if (on) {
		r->seen[h % SEEN_SLOTS] = h;
	} else if (r->seen[h % SEEN_SLOTS] == h) {
		r->seen[h % SEEN_SLOTS] = 0;
	}
}

/* Drop the oldest queued record, making its slot free. Under mu. */
static void
drop_oldest(struct tutti_remote *r)
{
	uint32_t s = r->fifo[r->fifo_head];

	r->fifo_head = (r->fifo_head + 1) % r->nr_pub;
	r->fifo_len--;
	r->pubs[s].state = PUB_FREE;
	seen_set(r, r->pubs[s].hash, false);
	r->stats.publish_dropped++;
	pthread_cond_broadcast(&r->flush_cv);
}

/* A free publish slot, dropping the oldest queued record if need be; -ENOBUFS when every slot
 * is being put. Under mu. */
static int64_t
pub_slot_get(struct tutti_remote *r)
{
	for (uint32_t s = 0; s < r->nr_pub; s++) {
		if (r->pubs[s].state == PUB_FREE) {
			return s;
		}
	}
	if (r->fifo_len == 0) {
		return -ENOBUFS;
	}
	drop_oldest(r);
	return pub_slot_get(r);
}

int64_t
tutti_remote_publish(struct tutti_remote *r, const struct tutti_kv *kv,
                     const struct tutti_request *reqs, uint32_t nr_reqs, int32_t *status)
{
	struct fetch_chunk *cs = NULL;
	const struct tt_mover_ops *mover;
	int64_t nr, queued = 0;
	void *mctx;
	int rc;

	if (r == NULL || r->nr_pub == 0) {
		return -EINVAL;
	}
	nr = plan(r, kv, reqs, nr_reqs, false, &cs);
	if (nr < 0) {
		return nr;
	}
	pthread_mutex_lock(&r->mover_mu);
	rc = mover_for(r, kv, &mover, &mctx);
	for (int64_t i = 0; i < nr; i++) {
		const struct fetch_chunk *c = &cs[i];
		char key[KEY_STR_MAX];
		struct tt_record_id id;
		int64_t s = -1;
		uint64_t h;
		int32_t res;

		key_string(r, r->rank, c->req->keys + (size_t)c->key * r->key_bytes, key);
		h = XXH3_64bits(key, strlen(key));
		pthread_mutex_lock(&r->mu);
		if (rc < 0) {
			res = rc;
		} else if (r->down) {
			res = -EHOSTDOWN;
			r->stats.publish_dropped++;
		} else if (seen_has(r, h)) {
			res = 1;
			r->stats.publish_present++;
		} else {
			s = pub_slot_get(r);
			res = s < 0 ? (int32_t)s : 0;
			if (s < 0) {
				r->stats.publish_dropped++;
			} else {
				/* Busy while we fill it: neither queued nor free. */
				r->pubs[s].state = PUB_BUSY;
				r->pub_busy++;
				r->pubs[s].hash = h;
				memcpy(r->pubs[s].key, key, sizeof(key));
				seen_set(r, h, true);
			}
		}
		pthread_mutex_unlock(&r->mu);
		if (res == 0) {
			record_id(r, c->req, c->key, &id);
			res = tt_record_encode(&r->geo, kv, mover, mctx, &id,
			                       c->req->block_ids + c->id_off, c->nr_moved,
			                       r->pub + (uint64_t)s * r->record_bytes);
			pthread_mutex_lock(&r->mu);
			r->pub_busy--;
			if (res < 0) {
				r->pubs[s].state = PUB_FREE;
				seen_set(r, h, false);
			} else {
				r->pubs[s].state = PUB_QUEUED;
				r->fifo[(r->fifo_head + r->fifo_len) % r->nr_pub] = (uint32_t)s;
				r->fifo_len++;
				r->stats.publish_queued++;
				queued++;
				pthread_cond_signal(&r->pub_cv);
			}
			pthread_mutex_unlock(&r->mu);
		}
		if (status != NULL) {
			status[i] = res;
		}
	}
	pthread_mutex_unlock(&r->mover_mu);
	tt_free(cs);
	return queued;
}

static void *
pub_main(void *arg)
{
	struct tutti_remote *r = arg;
	uint32_t batch[PUBLISH_BATCH];
	const char *keys[PUBLISH_BATCH];
	void *bufs[PUBLISH_BATCH];
	uint64_t lens[PUBLISH_BATCH];
	int32_t present[PUBLISH_BATCH], res[PUBLISH_BATCH];

	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		uint32_t n = 0, m = 0;
		uint64_t now = tt_now_ns(), t0;
		int rc;

		if (r->fifo_len == 0) {
			pthread_cond_wait(&r->pub_cv, &r->mu);
			continue;
		}
		if (r->down && breaker_gate(r) < 0) {
			while (r->fifo_len > 0) {
				drop_oldest(r);
			}
			continue;
		}
		if (r->reads_active > 0 || now < r->next_put_ns) {
			struct timespec until =
			    deadline_ts(r->reads_active > 0 ? 10000000ull : r->next_put_ns - now);

			if (r->down) {
				r->probing = false; /* the probe was not used */
			}
			pthread_cond_timedwait(&r->pub_cv, &r->mu, &until);
			continue;
		}
		while (n < PUBLISH_BATCH && r->fifo_len > 0) {
			uint32_t s = r->fifo[r->fifo_head];

			r->fifo_head = (r->fifo_head + 1) % r->nr_pub;
			r->fifo_len--;
			r->pubs[s].state = PUB_BUSY;
			r->pub_busy++;
			batch[n] = s;
			keys[n] = r->pubs[s].key;
			n++;
		}
		pthread_mutex_unlock(&r->mu);
		t0 = tt_now_ns();
		/* The pool may hold them already (another node, or this one before a restart). */
		rc = r->ops.exists(r->ctx, keys, n, present);
		if (rc == 0) {
			for (uint32_t i = 0; i < n; i++) {
				if (present[i] != 1) {
					keys[m] = r->pubs[batch[i]].key;
					bufs[m] = r->pub + (uint64_t)batch[i] * r->record_bytes;
					lens[m] = r->record_bytes;
					res[m] = -EIO;
					m++;
				}
			}
			if (m > 0) {
				rc = r->ops.put_from(r->ctx, keys, bufs, lens, m, res);
			}
		}
		pthread_mutex_lock(&r->mu);
		r->stats.publish_ns += tt_now_ns() - t0;
		breaker_report(r, rc < 0);
		for (uint32_t i = 0, k = 0; i < n; i++) {
			struct pub_slot *p = &r->pubs[batch[i]];

			if (rc == 0 && present[i] == 1) {
				r->stats.publish_present++;
			} else if (rc == 0 && res[k++] == 0) {
				r->stats.publish_chunks++;
				r->stats.publish_bytes += r->record_bytes;
			} else {
				r->stats.publish_dropped++;
				seen_set(r, p->hash, false);
			}
			p->state = PUB_FREE;
			r->pub_busy--;
		}
		if (r->publish_rate > 0) {
			r->next_put_ns = tt_now_ns() + (uint64_t)m * r->record_bytes *
			                                   1000000000ull / r->publish_rate;
		}
		pthread_cond_broadcast(&r->flush_cv);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int
tutti_remote_flush(struct tutti_remote *r, uint32_t timeout_ms)
{
	struct timespec until;
	int rc = 0;

	if (r == NULL) {
		return -EINVAL;
	}
	until = deadline_ts((uint64_t)timeout_ms * 1000000ull);
	pthread_mutex_lock(&r->mu);
	while (r->fifo_len > 0 || r->pub_busy > 0) {
		if (pthread_cond_timedwait(&r->flush_cv, &r->mu, &until) == ETIMEDOUT) {
			rc = r->fifo_len > 0 || r->pub_busy > 0 ? -ETIMEDOUT : 0;
			break;
		}
	}
	pthread_mutex_unlock(&r->mu);
	return rc;
}

/* ---- open, close, stats ---- */

uint64_t
tutti_remote_record_bytes(const struct tutti_remote *r)
{
	return r != NULL ? r->record_bytes : 0;
}

int
tutti_remote_get_stats(struct tutti_remote *r, struct tutti_remote_stats *out)
{
	if (r == NULL || out == NULL || out->size != sizeof(*out)) {
		return -EINVAL;
	}
	pthread_mutex_lock(&r->mu);
	*out = r->stats;
	out->size = sizeof(*out);
	out->up = !r->down;
	pthread_mutex_unlock(&r->mu);
	return 0;
}

static bool
prefix_ok(const char *p)
{
	size_t n = p != NULL ? strlen(p) : 0;

	if (n == 0 || n > PREFIX_MAX) {
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		if (p[i] <= ' ' || p[i] > '~') {
			return false;
		}
	}
	return true;
}

/* Memory for \p bytes of records, pinned and mapped for the GPU where CUDA runs. */
static uint8_t *
mem_alloc(uint64_t bytes, bool *pinned)
{
	uint8_t *p = tt_aligned_alloc(bytes);

	*pinned = p != NULL && tt_gpu_host_register(p, bytes) == 0;
	return p;
}

static void
mem_free(uint8_t *p, bool pinned)
{
	if (p != NULL && pinned) {
		tt_gpu_host_unregister(p);
	}
	tt_aligned_free(p);
}

static int
cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	int rc = pthread_condattr_init(&a);

	if (rc == 0) {
		rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
		rc = rc == 0 ? pthread_cond_init(cv, &a) : rc;
		pthread_condattr_destroy(&a);
	}
	return -rc;
}

void
tutti_remote_close(struct tutti_remote *r)
{
	if (r == NULL) {
		return;
	}
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_broadcast(&r->read_cv);
	pthread_cond_broadcast(&r->pub_cv);
	pthread_mutex_unlock(&r->mu);
	if (r->read_started) {
		pthread_join(r->read_thread, NULL);
	}
	if (r->pub_started) {
		pthread_join(r->pub_thread, NULL);
	}
	if (r->ring_registered) {
		r->ops.unregister_mem(r->ctx, r->ring, r->ring_bytes);
	}
	if (r->pub_registered) {
		r->ops.unregister_mem(r->ctx, r->pub, r->pub_bytes);
	}
	if (r->gpu != NULL) {
		tt_gpu_close(r->gpu);
	}
	mem_free(r->ring, r->ring_pinned);
	mem_free(r->pub, r->pub_pinned);
	tt_free(r->ring_busy);
	tt_free(r->pubs);
	tt_free(r->fifo);
	tt_free(r->seen);
	pthread_cond_destroy(&r->read_cv);
	pthread_cond_destroy(&r->done_cv);
	pthread_cond_destroy(&r->pub_cv);
	pthread_cond_destroy(&r->flush_cv);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->mover_mu);
	tt_free(r);
}

static int
check_opts(const struct tutti_remote_ops *ops, const struct tutti_remote_opts *o)
{
	if (ops == NULL || o == NULL || ops->size != sizeof(*ops) || o->size != sizeof(*o) ||
	    ops->exists == NULL || ops->get_into == NULL || ops->put_from == NULL ||
	    ops->register_mem == NULL || ops->unregister_mem == NULL) {
		return -EINVAL;
	}
	if (o->key_bytes < 16 || o->key_bytes > TT_MAX_KEY_BYTES || !prefix_ok(o->key_prefix) ||
	    o->nr_ranks == 0 || o->rank >= o->nr_ranks || (o->ns == NULL && o->ns_bytes > 0) ||
	    o->timeout_ms == 0 || o->lookup_timeout_ms == 0 || o->breaker_faults == 0 ||
	    o->breaker_open_ms == 0) {
		return -EINVAL;
	}
	return 0;
}

int
tutti_remote_open(const struct tutti_geometry *geo, const struct tutti_remote_ops *ops, void *ctx,
                  const struct tutti_remote_opts *opts, struct tutti_remote **out)
{
	struct tutti_remote *r;
	int rc;

	if (out == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	rc = check_opts(ops, opts);
	if (rc < 0) {
		return rc;
	}
	r = tt_calloc(1, sizeof(*r));
	if (r == NULL) {
		return -ENOMEM;
	}
	rc = tt_geo_derive(geo, &r->geo);
	if (rc < 0 || r->geo.g.nr_layers > TT_SLOT_MAX_LAYERS) {
		tt_free(r);
		return -EINVAL;
	}
	r->record_bytes = r->geo.slot_bytes;
	r->nr_ring = (uint32_t)TT_MIN(opts->ring_bytes / r->record_bytes, 1u << 16);
	r->nr_pub = (uint32_t)TT_MIN(opts->publish_bytes / r->record_bytes, 1u << 16);
	if (r->nr_ring == 0 || (opts->publish_bytes > 0 && r->nr_pub == 0)) {
		tt_free(r);
		return -EINVAL;
	}
	r->ops = *ops;
	r->ctx = ctx;
	r->log =
	    (struct tt_log){.fn = opts->log_fn, .arg = opts->log_arg, .level = opts->log_level};
	memcpy(r->prefix, opts->key_prefix, strlen(opts->key_prefix) + 1);
	r->key_bytes = opts->key_bytes;
	r->rank = opts->rank;
	r->nr_ranks = opts->nr_ranks;
	r->tag = tt_record_tag(opts->ns, opts->ns_bytes, opts->rank, opts->nr_ranks);
	r->timeout_ns = (uint64_t)opts->timeout_ms * 1000000ull;
	r->lookup_timeout_ns = (uint64_t)opts->lookup_timeout_ms * 1000000ull;
	r->publish_rate = opts->publish_rate;
	r->breaker_faults = opts->breaker_faults;
	r->first_open_ns = r->open_ns = (uint64_t)opts->breaker_open_ms * 1000000ull;
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->mover_mu, NULL);
	if (cond_init_monotonic(&r->read_cv) < 0 || cond_init_monotonic(&r->done_cv) < 0 ||
	    cond_init_monotonic(&r->pub_cv) < 0 || cond_init_monotonic(&r->flush_cv) < 0) {
		/* condattr calls fail only for bad arguments; treat as out of memory */
		tt_free(r);
		return -ENOMEM;
	}
	r->ring_bytes = (uint64_t)r->nr_ring * r->record_bytes;
	r->ring = mem_alloc(r->ring_bytes, &r->ring_pinned);
	r->ring_busy = tt_calloc(r->nr_ring, sizeof(*r->ring_busy));
	r->seen = tt_calloc(SEEN_SLOTS, sizeof(*r->seen));
	if (r->nr_pub > 0) {
		r->pub_bytes = (uint64_t)r->nr_pub * r->record_bytes;
		r->pub = mem_alloc(r->pub_bytes, &r->pub_pinned);
		r->pubs = tt_calloc(r->nr_pub, sizeof(*r->pubs));
		r->fifo = tt_calloc(r->nr_pub, sizeof(*r->fifo));
	}
	if (r->ring == NULL || r->ring_busy == NULL || r->seen == NULL ||
	    (r->nr_pub > 0 && (r->pub == NULL || r->pubs == NULL || r->fifo == NULL))) {
		tutti_remote_close(r);
		return -ENOMEM;
	}
	rc = r->ops.register_mem(r->ctx, r->ring, r->ring_bytes);
	if (rc < 0) {
		goto fail;
	}
	r->ring_registered = true;
	if (r->pub != NULL) {
		rc = r->ops.register_mem(r->ctx, r->pub, r->pub_bytes);
		if (rc < 0) {
			goto fail;
		}
		r->pub_registered = true;
	}
	rc = -pthread_create(&r->read_thread, NULL, read_main, r);
	if (rc < 0) {
		goto fail;
	}
	r->read_started = true;
	if (r->nr_pub > 0) {
		rc = -pthread_create(&r->pub_thread, NULL, pub_main, r);
		if (rc < 0) {
			goto fail;
		}
		r->pub_started = true;
	}
	*out = r;
	return 0;
fail:
	tt_log_err(&r->log, "remote tier: open failed: %s", tutti_strerror(rc));
	tutti_remote_close(r);
	return rc;
}
