/* SPDX-License-Identifier: Apache-2.0 */
/*
 * posix engine: a pool of threads issuing pread/pwrite, one I/O per call. It is the portable
 * reference for the uring engine and the shape of the CPU-driven tiers Tutti is compared with.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "engine/engine.h"

struct posix_engine {
	struct tt_engine base;
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
	pthread_t *threads;
};

static struct posix_engine *
to_posix(struct tt_engine *e)
{
	return (struct posix_engine *)e;
}

static int32_t
do_io(const struct posix_engine *p, const struct tt_io *io)
{
	uint32_t done = 0;
	int fd = p->fds[io->file];

	while (done < io->len) {
		uint8_t *buf = (uint8_t *)io->buf + done;
		off_t off = (off_t)(io->off + done);
		ssize_t n = io->op == TT_IO_READ ? pread(fd, buf, io->len - done, off)
		                                 : pwrite(fd, buf, io->len - done, off);

		if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
			continue;
		}
		if (n < 0) {
			return -errno;
		}
		if (n == 0) {
			return -EIO; /* end of file inside an extent */
		}
		done += (uint32_t)n;
	}
	return (int32_t)io->len;
}

static void *
worker(void *arg)
{
	struct posix_engine *p = arg;

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
		pthread_mutex_unlock(&p->lock);

		d.tag = io.tag;
		d.res = do_io(p, &io);

		pthread_mutex_lock(&p->lock);
		p->done[(p->done_head + p->nr_done) % p->cap] = d;
		p->nr_done++;
		pthread_cond_signal(&p->finished);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void
posix_destroy(struct tt_engine *e)
{
	struct posix_engine *p = to_posix(e);

	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	/* Workers drain the queue before leaving, so no buffer is touched after this returns. */
	for (uint32_t i = 0; i < p->nr_threads; i++) {
		pthread_join(p->threads[i], NULL);
	}
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->finished);
	pthread_mutex_destroy(&p->lock);
	tt_free(p->threads);
	tt_free(p->todo);
	tt_free(p->done);
	tt_free(p);
}

static int
posix_create(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	struct posix_engine *p = tt_calloc(1, sizeof(*p));
	uint32_t nr_threads = conf->threads ? conf->threads : conf->depth;
	int rc;

	if (p == NULL) {
		return -ENOMEM;
	}
	p->fds = conf->fds;
	p->cap = conf->depth;
	p->todo = tt_calloc(conf->depth, sizeof(*p->todo));
	p->done = tt_calloc(conf->depth, sizeof(*p->done));
	p->threads = tt_calloc(nr_threads, sizeof(*p->threads));
	if (p->todo == NULL || p->done == NULL || p->threads == NULL) {
		tt_free(p->todo);
		tt_free(p->done);
		tt_free(p->threads);
		tt_free(p);
		return -ENOMEM;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->finished, NULL);
	for (uint32_t i = 0; i < nr_threads; i++) {
		rc = -pthread_create(&p->threads[i], NULL, worker, p);
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
posix_submit(struct tt_engine *e, const struct tt_io *ios, uint32_t nr)
{
	struct posix_engine *p = to_posix(e);

	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < nr; i++) {
		p->todo[(p->todo_head + p->nr_todo) % p->cap] = ios[i];
		p->nr_todo++;
	}
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

static int
posix_reap(struct tt_engine *e, struct tt_io_done *out, uint32_t max, uint32_t min)
{
	struct posix_engine *p = to_posix(e);
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

const struct tt_engine_ops tt_engine_posix = {
    .name = "posix",
    .create = posix_create,
    .destroy = posix_destroy,
    .submit = posix_submit,
    .reap = posix_reap,
};
