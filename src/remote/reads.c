/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The read thread: lookups and fetches, one provider call at a time, in arrival order. A caller
 * queues a job and waits for it until its deadline; a job whose caller gave up is abandoned, and
 * the read thread frees it (and gives back its ring slots) once the provider returns.
 */
#include <errno.h>

#include "remote/remote_impl.h"

void
tt_remote_job_free(struct tutti_remote *r, struct tt_remote_job *j)
{
	if (j->slots != NULL) {
		for (uint32_t i = 0; i < j->n; i++) {
			r->ring_busy[j->slots[i]] = false;
		}
	}
	tt_free(j);
}

void *
tt_remote_read_main(void *arg)
{
	struct tutti_remote *r = arg;

	pthread_mutex_lock(&r->mu);
	for (;;) {
		struct tt_remote_job *j;

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
			tt_remote_job_free(r, j);
			continue;
		}
		if (r->stop) {
			j->rc = -ESHUTDOWN;
			j->done = true;
			pthread_cond_broadcast(&r->done_cv);
			continue;
		}
		pthread_mutex_unlock(&r->mu);
		if (j->kind == TT_REMOTE_JOB_EXISTS) {
			j->rc =
			    r->ops.exists(r->ctx, (const char *const *)j->keys, j->n, j->present);
		} else {
			j->rc = r->ops.get_into(r->ctx, (const char *const *)j->keys, j->bufs,
			                        j->lens, j->n, j->got);
		}
		pthread_mutex_lock(&r->mu);
		if (j->abandoned) {
			tt_remote_job_free(r, j);
		} else {
			j->done = true;
			pthread_cond_broadcast(&r->done_cv);
		}
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

struct tt_remote_job *
tt_remote_job_new(enum tt_remote_job_kind kind, uint32_t n)
{
	size_t sz = sizeof(struct tt_remote_job) +
	            n * (sizeof(char *) + TT_REMOTE_KEY_STR_MAX + sizeof(void *) +
	                 sizeof(uint64_t) + sizeof(int64_t) + sizeof(int32_t) + sizeof(uint32_t));
	struct tt_remote_job *j = tt_calloc(1, sz);
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
	if (kind == TT_REMOTE_JOB_GET) {
		j->slots = (uint32_t *)p;
	}
	p += n * sizeof(uint32_t);
	for (uint32_t i = 0; i < n; i++) {
		j->keys[i] = (char *)p + (size_t)i * TT_REMOTE_KEY_STR_MAX;
	}
	return j;
}

int
tt_remote_run_job(struct tutti_remote *r, struct tt_remote_job *j, uint64_t timeout_ns)
{
	struct timespec until = tt_remote_deadline(timeout_ns);

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

void
tt_remote_reads_end(struct tutti_remote *r)
{
	if (--r->reads_active == 0) {
		pthread_cond_broadcast(&r->pub_cv);
	}
}
