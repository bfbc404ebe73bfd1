/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier handle: options, open and close, statistics, and the object keys and
 * deadlines every call uses. The calls live in lookup.c, fetch.c and publish.c, the handle's
 * threads in reads.c and publish.c, the breaker in breaker.c (remote_impl.h says how they fit).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "remote/remote_impl.h"

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

void
tt_remote_key_string(const struct tutti_remote *r, uint32_t rank, const uint8_t *key, char *out)
{
	static const char hex[] = "0123456789abcdef";
	int n = snprintf(out, TT_REMOTE_KEY_STR_MAX, "%s%" PRIu32 "/", r->prefix, rank);

	for (uint32_t i = 0; i < r->key_bytes; i++) {
		out[n + 2 * i] = hex[key[i] >> 4];
		out[n + 2 * i + 1] = hex[key[i] & 15];
	}
	out[n + 2 * r->key_bytes] = '\0';
}

struct timespec
tt_remote_deadline(uint64_t ns_from_now)
{
	struct timespec ts;
	uint64_t t;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	t = (uint64_t)ts.tv_sec * TT_NS_PER_S + (uint64_t)ts.tv_nsec + ns_from_now;
	ts.tv_sec = (time_t)(t / TT_NS_PER_S);
	ts.tv_nsec = (long)(t % TT_NS_PER_S);
	return ts;
}

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

	if (n == 0 || n > TT_REMOTE_PREFIX_MAX) {
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
	r->nr_ring = (uint32_t)TT_MIN(opts->ring_bytes / r->record_bytes, TT_REMOTE_MAX_SLOTS);
	r->nr_pub = (uint32_t)TT_MIN(opts->publish_bytes / r->record_bytes, TT_REMOTE_MAX_SLOTS);
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
	r->timeout_ns = (uint64_t)opts->timeout_ms * TT_NS_PER_MS;
	r->lookup_timeout_ns = (uint64_t)opts->lookup_timeout_ms * TT_NS_PER_MS;
	r->publish_rate = opts->publish_rate;
	r->breaker_faults = opts->breaker_faults;
	r->first_open_ns = r->open_ns = (uint64_t)opts->breaker_open_ms * TT_NS_PER_MS;
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
	r->seen = tt_calloc(TT_REMOTE_SEEN_SLOTS, sizeof(*r->seen));
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
	rc = -pthread_create(&r->read_thread, NULL, tt_remote_read_main, r);
	if (rc < 0) {
		goto fail;
	}
	r->read_started = true;
	if (r->nr_pub > 0) {
		rc = -pthread_create(&r->pub_thread, NULL, tt_remote_publish_main, r);
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
