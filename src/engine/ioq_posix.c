/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The posix I/O queue, which engine posix keeps (and auto where io_uring is refused): a pool of
 * threads issuing pread/pwrite, one I/O per call. It is the portable reference for the io_uring
 * queue and the shape of the CPU-driven tiers Tutti is compared with. Its lanes (cpu_path.c)
 * are those threads doing their units' I/O themselves: the sync queue below, whose submit does
 * each I/O on the calling thread.
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
do_io(const int *fds, struct tt_io_state *st)
{
	int fd = fds[st->io.file];

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
		d.res = do_io(p->fds, &w->st);

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

/* ---- the sync queue: each I/O done by the submitting thread ---- */

struct sync_queue {
	struct tt_ioq base;
	const int *fds;
	struct tt_io_state st;   /* its iov array: max(1, max_iov) entries */
	struct iovec *piece;     /* max(1, max_iov) entries: the piece in hand */
	struct tt_io_done *done; /* depth: completions not yet reaped, in order */
	uint32_t nr_done, head;
	uint32_t piece_bytes;
	void (*hook)(void *arg, uint64_t tag, const struct iovec *iov, uint32_t nr);
	void *hook_arg;
};

/* The first \p max bytes (0: all) of the state's remaining vector, as q->piece; its entries. */
static uint32_t
take_piece(struct sync_queue *q, uint32_t max, uint32_t *len)
{
	uint32_t n = 0;

	*len = 0;
	for (; n < q->st.nr_iov && (max == 0 || *len < max); n++) {
		uint32_t take = (uint32_t)q->st.iov[n].iov_len;

		if (max != 0 && take > max - *len) {
			take = max - *len;
		}
		q->piece[n] = (struct iovec){q->st.iov[n].iov_base, take};
		*len += take;
	}
	return n;
}

/* Hand bytes [skip, skip + len) of the piece to the hook. */
static void
feed(struct sync_queue *q, uint32_t nr, uint32_t skip, uint32_t len)
{
	uint32_t i = 0;

	if (q->hook == NULL || len == 0) {
		return;
	}
	while (i < nr && skip >= q->piece[i].iov_len) {
		skip -= (uint32_t)q->piece[i++].iov_len;
	}
	for (uint32_t k = i; k < nr && len > 0; k++) {
		struct iovec v = q->piece[k];

		if (k == i) {
			v.iov_base = (uint8_t *)v.iov_base + skip;
			v.iov_len -= skip;
		}
		if (v.iov_len > len) {
			v.iov_len = len;
		}
		len -= (uint32_t)v.iov_len;
		q->hook(q->hook_arg, q->st.io.tag, &v, 1);
	}
}

static int32_t
sync_io(struct sync_queue *q)
{
	struct tt_io_state *st = &q->st;
	int fd = q->fds[st->io.file];
	bool write = st->io.op == TT_IO_WRITE;
	uint32_t fed = 0; /* bytes of the I/O handed to the hook */

	if (st->io.op == TT_IO_FSYNC) {
		return fdatasync(fd) == 0 ? 0 : -errno;
	}
	for (;;) {
		uint32_t len, nr = take_piece(q, q->piece_bytes, &len);
		off_t off = (off_t)(st->io.off + st->done);
		ssize_t n;

		/* A write's bytes are hashed before they go out, a read's once they are in; a short
		 * transfer continues where it stopped, and no byte is fed twice. */
		if (write && st->done + len > fed) {
			feed(q, nr, fed - st->done, st->done + len - fed);
			fed = st->done + len;
		}
		n = write ? pwritev(fd, q->piece, (int)nr, off)
		          : preadv(fd, q->piece, (int)nr, off);
		if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
			continue;
		}
		if (n < 0) {
			return -errno;
		}
		if (n == 0) {
			return -EIO; /* end of file inside an extent */
		}
		if (!write) {
			feed(q, nr, 0, (uint32_t)n);
		}
		if (tt_io_state_advance(st, (uint32_t)n)) {
			return (int32_t)st->io.len;
		}
	}
}

static void
sync_destroy(struct tt_ioq *e)
{
	struct sync_queue *q = (struct sync_queue *)e;

	tt_free(q->st.iov);
	tt_free(q->piece);
	tt_free(q->done);
	tt_free(q);
}

static int
sync_create(const struct tt_ioq_conf *conf, struct tt_ioq **out)
{
	struct sync_queue *q = tt_calloc(1, sizeof(*q));
	uint32_t per_io = conf->max_iov ? conf->max_iov : 1;

	if (q == NULL) {
		return -ENOMEM;
	}
	q->fds = conf->fds;
	q->piece_bytes = conf->piece_bytes;
	q->hook = conf->piece;
	q->hook_arg = conf->piece_arg;
	q->st.iov = tt_calloc(per_io, sizeof(*q->st.iov));
	q->piece = tt_calloc(per_io, sizeof(*q->piece));
	q->done = tt_calloc(conf->depth, sizeof(*q->done));
	if (q->st.iov == NULL || q->piece == NULL || q->done == NULL) {
		sync_destroy(&q->base);
		return -ENOMEM;
	}
	*out = &q->base;
	return 0;
}

static int
sync_submit(struct tt_ioq *e, const struct tt_io *ios, uint32_t nr)
{
	struct sync_queue *q = (struct sync_queue *)e;

	/* The wrapper never lets more than depth be unreaped. */
	for (uint32_t i = 0; i < nr; i++) {
		struct tt_io_done *d = &q->done[(q->head + q->nr_done++) % e->depth];

		tt_io_state_start(&q->st, &ios[i]);
		d->tag = ios[i].tag;
		d->res = sync_io(q);
	}
	return 0;
}

static int
sync_reap(struct tt_ioq *e, struct tt_io_done *out, uint32_t max, uint32_t min)
{
	struct sync_queue *q = (struct sync_queue *)e;
	uint32_t n = 0;

	/* Everything submitted is complete: min (at most what is in flight) is always met. */
	while (n < max && q->nr_done > 0) {
		out[n++] = q->done[q->head];
		q->head = (q->head + 1) % e->depth;
		q->nr_done--;
	}
	return (int)n;
}

const struct tt_ioq_ops tt_ioq_sync = {
    .name = "sync",
    .create = sync_create,
    .destroy = sync_destroy,
    .submit = sync_submit,
    .reap = sync_reap,
};
