/* SPDX-License-Identifier: Apache-2.0 */
/*
 * posix engine: a pool of threads issuing pread/pwrite, one I/O per call. It is the portable
 * reference for the uring engine and the shape of the CPU-driven tiers Tutti is compared with.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <stdbool.h>
#include <unistd.h>

#include "engine/engine_impl.h"

struct posix_worker;

struct posix_queue {
	struct tt_ioq base;
	const int *fds;
	uint32_t cap;       /* ring capacity: depth */
	struct tt_io *todo; /* ring of queued I/Os */
	uint32_t todo_head, nr_todo;
	struct tt_io_done *done; /* ring of completions */
	uint32_t done_head, nr_done;
	pthread_mutex_t lock;
	pthread_cond_t work;     /* todo became non-empty, or stopping */
	pthread_cond_t finished; /* done became non-empty */
	bool stopping;
	uint32_t nr_threads;
	struct posix_worker *workers;
	struct iovec *iovs;      /* nr_threads * max(1, max_iov) */
	struct iovec *todo_iovs; /* cap * max(1, max_iov): queued vectors, copied at submit */
	uint32_t per_io;         /* max(1, max_iov) */
};

static struct posix_queue *
to_posix(struct tt_ioq *e)
{
	return (struct posix_queue *)e;
}

static void
posix_free(struct posix_queue *p)
{
	tt_free(p->workers);
	tt_free(p->iovs);
	tt_free(p->todo_iovs);
	tt_free(p->todo);
	tt_free(p->done);
	tt_free(p);
}

static int32_t
do_io(const struct posix_queue *p, struct tt_io_state *st)
{
	int fd = p->fds[st->io.file];

	if (st->io.op == TT_IO_FSYNC) {
		return fdatasync(fd) == 0 ? 0 : -errno;
	}
	for (;;) {
		off_t off = (off_t)(st->io.off + st->done);
		ssize_t n = st->io.op == TT_IO_READ ? preadv(fd, st->iov, (int)st->nr_iov, off)
		                                    : pwritev(fd, st->iov, (int)st->nr_iov, off);

		if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
			continue;
		}
		if (n < 0) {
			return -errno;
		}
		if (n == 0) {
			return -EIO; /* end of file inside an extent */
		}
		if (tt_io_state_advance(st, (uint32_t)n)) {
			return (int32_t)st->io.len;
		}
	}
}

struct posix_worker {
	struct posix_queue *p;
	pthread_t tid;
	struct tt_io_state st; /* its iov array is this worker's own */
};

static void *
worker(void *arg)
{
	struct posix_worker *w = arg;
	struct posix_queue *p = w->p;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct tt_io io;
		struct tt_io_done d;

		while (p->nr_todo == 0 && !p->stopping) {
			pthread_cond_wait(&p->work, &p->lock);
		}
		if (p->nr_todo == 0) {
			break; /* stopping, and nothing left to do */
		}
		io = p->todo[p->todo_head];
		p->todo_head = (p->todo_head + 1) % p->cap;
		p->nr_todo--;
		/* Copied under the lock: the queued vector belongs to the submitter's array. */
		tt_io_state_start(&w->st, &io);
		pthread_mutex_unlock(&p->lock);

		d.tag = io.tag;
		d.res = do_io(p, &w->st);

		pthread_mutex_lock(&p->lock);
		p->done[(p->done_head + p->nr_done) % p->cap] = d;
		p->nr_done++;
		pthread_cond_signal(&p->finished);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void
posix_destroy(struct tt_ioq *e)
{
	struct posix_queue *p = to_posix(e);

	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	/* Workers drain the queue before leaving, so no buffer is touched after this returns. */
	for (uint32_t i = 0; i < p->nr_threads; i++) {
		pthread_join(p->workers[i].tid, NULL);
	}
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->finished);
	pthread_mutex_destroy(&p->lock);
	posix_free(p);
}

static int
posix_create(const struct tt_ioq_conf *conf, struct tt_ioq **out)
{
	struct posix_queue *p = tt_calloc(1, sizeof(*p));
	uint32_t nr_threads = conf->threads ? conf->threads : conf->depth;
	int rc;

	if (p == NULL) {
		return -ENOMEM;
	}
	p->fds = conf->fds;
	p->cap = conf->depth;
	p->per_io = conf->max_iov ? conf->max_iov : 1;
	p->todo = tt_calloc(conf->depth, sizeof(*p->todo));
	p->done = tt_calloc(conf->depth, sizeof(*p->done));
	p->workers = tt_calloc(nr_threads, sizeof(*p->workers));
	p->iovs = tt_calloc((size_t)nr_threads * p->per_io, sizeof(*p->iovs));
	p->todo_iovs = tt_calloc((size_t)conf->depth * p->per_io, sizeof(*p->todo_iovs));
	if (p->todo == NULL || p->done == NULL || p->workers == NULL || p->iovs == NULL ||
	    p->todo_iovs == NULL) {
		posix_free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->finished, NULL);
	for (uint32_t i = 0; i < nr_threads; i++) {
		struct posix_worker *w = &p->workers[i];

		w->p = p;
		w->st.iov = p->iovs + (size_t)i * p->per_io;
		rc = -pthread_create(&w->tid, NULL, worker, w);
		if (rc < 0) {
			tt_log_err(conf->log, "posix engine: cannot start thread: %s",
			           tutti_strerror(rc));
			posix_destroy(&p->base); /* joins the threads started so far */
			return rc;
		}
		p->nr_threads++;
	}
	*out = &p->base;
	return 0;
}

static int
posix_submit(struct tt_ioq *e, const struct tt_io *ios, uint32_t nr)
{
	struct posix_queue *p = to_posix(e);

	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < nr; i++) {
		uint32_t at = (p->todo_head + p->nr_todo) % p->cap;

		p->todo[at] = ios[i];
		if (ios[i].nr_iov > 0) {
			/* The caller's array need not outlive this call; queue a copy. */
			p->todo[at].iov = p->todo_iovs + (size_t)at * p->per_io;
			memcpy(p->todo_iovs + (size_t)at * p->per_io, ios[i].iov,
			       ios[i].nr_iov * sizeof(*ios[i].iov));
		}
		p->nr_todo++;
	}
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

static int
posix_reap(struct tt_ioq *e, struct tt_io_done *out, uint32_t max, uint32_t min)
{
	struct posix_queue *p = to_posix(e);
	uint32_t n = 0;

	pthread_mutex_lock(&p->lock);
	while (p->nr_done < min) {
		pthread_cond_wait(&p->finished, &p->lock);
	}
	while (n < max && p->nr_done > 0) {
		out[n++] = p->done[p->done_head];
		p->done_head = (p->done_head + 1) % p->cap;
		p->nr_done--;
	}
	pthread_mutex_unlock(&p->lock);
	return (int)n;
}

const struct tt_ioq_ops tt_ioq_posix = {
    .name = "posix",
    .create = posix_create,
    .destroy = posix_destroy,
    .submit = posix_submit,
    .reap = posix_reap,
};
