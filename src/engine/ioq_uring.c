/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The io_uring I/O queue (liburing), which engines uring, gpu-uring, gds and auto keep: every
 * batch of I/Os goes to the kernel in one io_uring_enter; files and the staging memory are
 * registered once, so the kernel neither looks up the file nor pins pages per I/O.
 */
#include <errno.h>
#include <liburing.h>
#include <stdbool.h>
#include <string.h>

#include "engine/engine_impl.h"

struct uring_req {
	struct tt_io_state st;
	uint32_t next_free;
};

struct uring_queue {
	struct tt_ioq base;
	struct io_uring ring;
	bool files_registered;
	bool async_reads;
	bool buf_registered;
	const int *fds;
	uint32_t nr_fds;
	uint8_t *reg_buf;
	size_t reg_bytes;
	struct uring_req *reqs; /* depth entries; user_data is the index */
	struct iovec *iovs;     /* depth * max(1, max_iov), the requests' vectors */
	uint32_t free_head;
	uint32_t pending; /* SQEs prepared but not yet handed to the kernel */
	const struct tt_log *log;
};

#define NO_REQ UINT32_MAX

static struct uring_queue *
to_uring(struct tt_ioq *e)
{
	return (struct uring_queue *)e;
}

static void
uring_free(struct uring_queue *u)
{
	tt_free(u->reqs);
	tt_free(u->iovs);
	tt_free(u);
}

static int
uring_create(const struct tt_ioq_conf *conf, struct tt_ioq **out)
{
	struct uring_queue *u = tt_calloc(1, sizeof(*u));
	uint32_t per_req = conf->max_iov ? conf->max_iov : 1;
	int rc;

	if (u == NULL) {
		return -ENOMEM;
	}
	u->reqs = tt_calloc(conf->depth, sizeof(*u->reqs));
	u->iovs = tt_calloc((size_t)conf->depth * per_req, sizeof(*u->iovs));
	if (u->reqs == NULL || u->iovs == NULL) {
		uring_free(u);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < conf->depth; i++) {
		u->reqs[i].next_free = i + 1 < conf->depth ? i + 1 : NO_REQ;
		u->reqs[i].st.iov = u->iovs + (size_t)i * per_req;
	}
	u->free_head = 0;
	u->fds = conf->fds;
	u->nr_fds = conf->nr_fds;
	u->log = conf->log;
	rc = io_uring_queue_init(conf->depth, &u->ring, 0);
	if (rc < 0) {
		/* Not logged here: the caller knows whether it falls back (tt_engine_attach). */
		uring_free(u);
		return rc;
	}
	/* Registration is an optimisation: run without it where the kernel or limits refuse. */
	rc = io_uring_register_files(&u->ring, conf->fds, conf->nr_fds);
	u->files_registered = rc == 0;
	u->async_reads = conf->async_reads;
	if (rc < 0) {
		tt_log_info(conf->log, "io_uring: files not registered: %s", tutti_strerror(rc));
	}
	if (conf->reg_buf != NULL && conf->reg_bytes > 0) {
		struct iovec iov = {.iov_base = conf->reg_buf, .iov_len = conf->reg_bytes};

		rc = io_uring_register_buffers(&u->ring, &iov, 1);
		u->buf_registered = rc == 0;
		if (rc == 0) {
			u->reg_buf = conf->reg_buf;
			u->reg_bytes = conf->reg_bytes;
		} else {
			/* Typically RLIMIT_MEMLOCK for an unprivileged user. */
			tt_log_info(conf->log, "io_uring: staging not registered: %s",
			            tutti_strerror(rc));
		}
	}
	*out = &u->base;
	return 0;
}

static void
uring_destroy(struct tt_ioq *e)
{
	struct uring_queue *u = to_uring(e);

	/* The ring drops registered files asynchronously after exit, which would keep the data
	 * files (and their locks) alive for a moment after the store is closed; unregistering
	 * first releases them now. */
	if (u->files_registered) {
		io_uring_unregister_files(&u->ring);
	}
	if (u->buf_registered) {
		io_uring_unregister_buffers(&u->ring);
	}
	io_uring_queue_exit(&u->ring);
	uring_free(u);
}

/* Prepare the SQE for the untransferred rest of request \p idx. */
static void
prep(struct uring_queue *u, uint32_t idx)
{
	struct tt_io_state *st = &u->reqs[idx].st;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	uint8_t *buf = st->iov[0].iov_base;
	uint32_t len = (uint32_t)st->iov[0].iov_len;
	uint64_t off = st->io.off + st->done;
	int fd = u->files_registered ? st->io.file : u->fds[st->io.file];
	bool fixed = st->nr_iov == 1 && u->buf_registered && buf >= u->reg_buf &&
	             buf + len <= u->reg_buf + u->reg_bytes;
	bool rd = st->io.op == TT_IO_READ;

	/* The SQ has depth entries and at most depth requests exist, so an SQE is always free. */
	if (st->io.op == TT_IO_FSYNC) {
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
	} else if (fixed && rd) {
		io_uring_prep_read_fixed(sqe, fd, buf, len, off, 0);
	} else if (fixed) {
		io_uring_prep_write_fixed(sqe, fd, buf, len, off, 0);
	} else if (rd) {
		io_uring_prep_readv(sqe, fd, st->iov, st->nr_iov, off);
	} else {
		io_uring_prep_writev(sqe, fd, st->iov, st->nr_iov, off);
	}
	if (u->files_registered) {
		sqe->flags |= IOSQE_FIXED_FILE;
	}
	if (u->async_reads && rd) {
		sqe->flags |= IOSQE_ASYNC;
	}
	io_uring_sqe_set_data64(sqe, idx);
	u->pending++;
}

/* Hand prepared SQEs to the kernel. Interrupted or busy submissions stay queued for the next
 * call; anything else is a broken ring. */
static int
flush(struct uring_queue *u, uint32_t wait_nr)
{
	for (;;) {
		int rc = wait_nr ? io_uring_submit_and_wait(&u->ring, wait_nr)
		                 : io_uring_submit(&u->ring);

		if (rc >= 0) {
			u->pending -= TT_MIN(u->pending, (uint32_t)rc);
			return 0;
		}
		if (rc == -EINTR) {
			continue;
		}
		if (rc == -EAGAIN || rc == -EBUSY) {
			return 0;
		}
		tt_log_err(u->log, "io_uring_enter failed: %s", tutti_strerror(rc));
		return rc;
	}
}

static int
uring_submit(struct tt_ioq *e, const struct tt_io *ios, uint32_t nr)
{
	struct uring_queue *u = to_uring(e);

	for (uint32_t i = 0; i < nr; i++) {
		uint32_t idx = u->free_head;

		u->free_head = u->reqs[idx].next_free;
		tt_io_state_start(&u->reqs[idx].st, &ios[i]);
		prep(u, idx);
	}
	return flush(u, 0);
}

/* Account one CQE. Returns 1 when its request is finished (filling *done), 0 when resubmitted. */
static int
complete(struct uring_queue *u, const struct io_uring_cqe *cqe, struct tt_io_done *done)
{
	uint32_t idx = (uint32_t)io_uring_cqe_get_data64(cqe);
	struct tt_io_state *st = &u->reqs[idx].st;
	int res = cqe->res;

	if (res == -EAGAIN || res == -EINTR) {
		prep(u, idx);
		return 0;
	}
	if (st->io.op == TT_IO_FSYNC) {
		/* res is 0 or -errno: nothing to continue */
	} else if (res == 0) {
		res = -EIO; /* end of file inside an extent: the file is shorter than the store */
	}
	if (res > 0) {
		if (!tt_io_state_advance(st, (uint32_t)res)) {
			prep(u, idx); /* short transfer: continue where it stopped */
			return 0;
		}
		res = (int)st->io.len;
	}
	done->tag = st->io.tag;
	done->res = res;
	u->reqs[idx].next_free = u->free_head;
	u->free_head = idx;
	return 1;
}

static int
uring_reap(struct tt_ioq *e, struct tt_io_done *out, uint32_t max, uint32_t min)
{
	struct uring_queue *u = to_uring(e);
	uint32_t n = 0;
	int rc;

	for (;;) {
		struct io_uring_cqe *cqe;

		while (n < max && io_uring_peek_cqe(&u->ring, &cqe) == 0) {
			n += (uint32_t)complete(u, cqe, &out[n]);
			io_uring_cqe_seen(&u->ring, cqe);
		}
		if (n >= min || n == max) {
			break;
		}
		rc = flush(u, 1);
		if (rc < 0) {
			return n > 0 ? (int)n : rc;
		}
	}
	if (u->pending > 0) {
		rc = flush(u, 0);
		if (rc < 0 && n == 0) {
			return rc;
		}
	}
	return (int)n;
}

const struct tt_ioq_ops tt_ioq_uring = {
    .name = "uring",
    .create = uring_create,
    .destroy = uring_destroy,
    .submit = uring_submit,
    .reap = uring_reap,
};
