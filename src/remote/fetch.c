/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fetch: a call's chunks are read into the fetch ring in batches (one get_into call on the read
 * thread each, as many chunks as free ring slots allow), then each record is checked and
 * scattered into paged KV on the caller's thread. A failure ends its request.
 */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "remote/remote_impl.h"

/* Verify and scatter chunk \p c from the record at \p rec. Under mover_mu. */
static int
land_chunk(struct tutti_remote *r, const struct tutti_kv *kv, const struct tt_chunk_plan *c,
           const uint8_t *rec, int64_t got, const struct tt_mover_ops *mover, void *mctx)
{
	struct tt_record_id id;
	int rc;

	if (got < 0) {
		return (int)got;
	}
	tt_remote_record_id(r, c->req, c->key, &id);
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
fetch_batch(struct tutti_remote *r, const struct tutti_kv *kv, const struct tt_chunk_plan *cs,
            uint32_t n, int32_t *st, const struct tt_mover_ops *mover, void *mctx, bool *failed)
{
	uint32_t nr_slots = 0, loaded = 0;
	struct tt_remote_job *j = tt_remote_job_new(TT_REMOTE_JOB_GET, n);
	bool fault = false;
	int rc;

	*failed = true;
	if (j == NULL) {
		st[0] = -ENOMEM;
		return 0;
	}
	pthread_mutex_lock(&r->mu);
	rc = tt_breaker_gate(r);
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
		tt_remote_key_string(r, r->rank, cs[i].req->keys + (size_t)cs[i].key * r->key_bytes,
		                     j->keys[i]);
		j->bufs[i] = r->ring + (uint64_t)j->slots[i] * r->record_bytes;
		j->lens[i] = r->record_bytes;
		j->got[i] = -EIO;
	}
	r->reads_active++;
	rc = tt_remote_run_job(r, j, r->timeout_ns);
	if (rc == -ETIMEDOUT) {
		tt_breaker_report(r, true);
		tt_remote_reads_end(r);
		pthread_mutex_unlock(&r->mu);
		st[0] = rc;
		return 0; /* j belongs to the read thread now */
	}
	if (rc == 0) {
		rc = j->rc;
		for (uint32_t i = 0; rc == 0 && i < nr_slots; i++) {
			fault = fault || (j->got[i] < 0 && j->got[i] != -ENOENT);
		}
		tt_breaker_report(r, rc < 0 || fault);
	}
	tt_remote_reads_end(r);
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
		tt_remote_seen_set(r, XXH3_64bits(j->keys[i], strlen(j->keys[i])), true);
	}
	tt_remote_job_free(r, j);
	pthread_mutex_unlock(&r->mu);
	return loaded;
}

int64_t
tutti_remote_fetch(struct tutti_remote *r, const struct tutti_kv *kv,
                   const struct tutti_request *reqs, uint32_t nr_reqs, int32_t *status)
{
	uint64_t t0 = tt_now_ns(), loaded = 0, bytes = 0, errors = 0;
	struct tt_chunk_plan *cs = NULL;
	const struct tt_mover_ops *mover;
	uint32_t nr_chunks;
	int32_t *st;
	void *mctx;
	int64_t nr;
	int rc;

	if (r == NULL) {
		return -EINVAL;
	}
	rc = tt_plan_call(&r->geo, kv, reqs, nr_reqs, true, &r->log, &cs, &nr_chunks);
	if (rc < 0) {
		return rc;
	}
	nr = nr_chunks;
	st = tt_malloc((size_t)nr * sizeof(*st));
	if (st == NULL) {
		tt_free(cs);
		return -ENOMEM;
	}
	for (int64_t i = 0; i < nr; i++) {
		st[i] = 1; /* not tried */
	}
	pthread_mutex_lock(&r->mover_mu);
	rc = tt_remote_mover(r, kv, &mover, &mctx);
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
