/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Publish: a caller copies its chunks into records in the publish memory and queues them; the
 * publish thread puts them into the pool, oldest first, at the lowest priority (it yields while
 * lookups or fetches run), skipping what the pool holds already, paced to publish_rate. When the
 * memory is full the oldest queued record is dropped: the pool is a cache.
 */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "remote/remote_impl.h"

/* How long the publish thread waits for reads in progress before it looks again. */
#define PUBLISH_YIELD_NS (10 * TT_NS_PER_MS)

static bool
seen_has(const struct tutti_remote *r, uint64_t h)
{
	return r->seen[h % TT_REMOTE_SEEN_SLOTS] == h;
}

void
tt_remote_seen_set(struct tutti_remote *r, uint64_t h, bool on)
{
	if (on) {
		r->seen[h % TT_REMOTE_SEEN_SLOTS] = h;
	} else if (r->seen[h % TT_REMOTE_SEEN_SLOTS] == h) {
		r->seen[h % TT_REMOTE_SEEN_SLOTS] = 0;
	}
}

/* Drop the oldest queued record, making its slot free. Under mu. */
static void
drop_oldest(struct tutti_remote *r)
{
	uint32_t s = r->fifo[r->fifo_head];

	r->fifo_head = (r->fifo_head + 1) % r->nr_pub;
	r->fifo_len--;
	r->pubs[s].state = TT_PUB_FREE;
	tt_remote_seen_set(r, r->pubs[s].hash, false);
	r->stats.publish_dropped++;
	pthread_cond_broadcast(&r->flush_cv);
}

/* A free publish slot, dropping the oldest queued record if need be; -ENOBUFS when every slot
 * is being put. Under mu. */
static int64_t
pub_slot_get(struct tutti_remote *r)
{
	for (uint32_t s = 0; s < r->nr_pub; s++) {
		if (r->pubs[s].state == TT_PUB_FREE) {
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
	struct tt_chunk_plan *cs = NULL;
	const struct tt_mover_ops *mover;
	int64_t queued = 0;
	uint32_t nr;
	void *mctx;
	int rc;

	if (r == NULL || r->nr_pub == 0) {
		return -EINVAL;
	}
	rc = tt_plan_call(&r->geo, kv, reqs, nr_reqs, false, &r->log, &cs, &nr);
	if (rc < 0) {
		return rc;
	}
	pthread_mutex_lock(&r->mover_mu);
	rc = tt_remote_mover(r, kv, &mover, &mctx);
	for (uint32_t i = 0; i < nr; i++) {
		const struct tt_chunk_plan *c = &cs[i];
		char key[TT_REMOTE_KEY_STR_MAX];
		struct tt_record_id id;
		int64_t s = -1;
		uint64_t h;
		int32_t res;

		tt_remote_key_string(r, r->rank, c->req->keys + (size_t)c->key * r->key_bytes, key);
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
				r->pubs[s].state = TT_PUB_BUSY;
				r->pub_busy++;
				r->pubs[s].hash = h;
				memcpy(r->pubs[s].key, key, sizeof(key));
				tt_remote_seen_set(r, h, true);
			}
		}
		pthread_mutex_unlock(&r->mu);
		if (res == 0) {
			tt_remote_record_id(r, c->req, c->key, &id);
			res = tt_record_encode(&r->geo, kv, mover, mctx, &id,
			                       c->req->block_ids + c->id_off, c->nr_moved,
			                       r->pub + (uint64_t)s * r->record_bytes);
			pthread_mutex_lock(&r->mu);
			r->pub_busy--;
			if (res < 0) {
				r->pubs[s].state = TT_PUB_FREE;
				tt_remote_seen_set(r, h, false);
			} else {
				r->pubs[s].state = TT_PUB_QUEUED;
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

void *
tt_remote_publish_main(void *arg)
{
	struct tutti_remote *r = arg;
	uint32_t batch[TT_REMOTE_PUBLISH_BATCH];
	const char *keys[TT_REMOTE_PUBLISH_BATCH];
	void *bufs[TT_REMOTE_PUBLISH_BATCH];
	uint64_t lens[TT_REMOTE_PUBLISH_BATCH];
	int32_t present[TT_REMOTE_PUBLISH_BATCH], res[TT_REMOTE_PUBLISH_BATCH];

	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		uint32_t n = 0, m = 0;
		uint64_t now = tt_now_ns(), t0;
		int rc;

		if (r->fifo_len == 0) {
			pthread_cond_wait(&r->pub_cv, &r->mu);
			continue;
		}
		if (r->down && tt_breaker_gate(r) < 0) {
			while (r->fifo_len > 0) {
				drop_oldest(r);
			}
			continue;
		}
		if (r->reads_active > 0 || now < r->next_put_ns) {
			struct timespec until = tt_remote_deadline(
			    r->reads_active > 0 ? PUBLISH_YIELD_NS : r->next_put_ns - now);

			if (r->down) {
				r->probing = false; /* the probe was not used */
			}
			pthread_cond_timedwait(&r->pub_cv, &r->mu, &until);
			continue;
		}
		while (n < TT_REMOTE_PUBLISH_BATCH && r->fifo_len > 0) {
			uint32_t s = r->fifo[r->fifo_head];

			r->fifo_head = (r->fifo_head + 1) % r->nr_pub;
			r->fifo_len--;
			r->pubs[s].state = TT_PUB_BUSY;
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
		tt_breaker_report(r, rc < 0);
		for (uint32_t i = 0, k = 0; i < n; i++) {
			struct tt_pub_slot *p = &r->pubs[batch[i]];

			if (rc == 0 && present[i] == 1) {
				r->stats.publish_present++;
			} else if (rc == 0 && res[k++] == 0) {
				r->stats.publish_chunks++;
				r->stats.publish_bytes += r->record_bytes;
			} else {
				r->stats.publish_dropped++;
				tt_remote_seen_set(r, p->hash, false);
			}
			p->state = TT_PUB_FREE;
			r->pub_busy--;
		}
		if (r->publish_rate > 0) {
			r->next_put_ns = tt_now_ns() + (uint64_t)m * r->record_bytes * TT_NS_PER_S /
			                                   r->publish_rate;
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
	until = tt_remote_deadline((uint64_t)timeout_ms * TT_NS_PER_MS);
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
