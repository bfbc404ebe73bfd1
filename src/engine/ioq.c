/* SPDX-License-Identifier: Apache-2.0 */
/*
 * I/O queues: the checks and accounting every queue relies on, and the state of an I/O that
 * continues after a short transfer.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "engine/engine_impl.h"

int
tt_ioq_create(const struct tt_ioq_ops *ops, const struct tt_ioq_conf *conf, struct tt_ioq **out)
{
	int rc;

	if (ops == NULL || conf == NULL || out == NULL || conf->nr_fds == 0 ||
	    conf->nr_fds > UINT16_MAX || conf->depth == 0 || conf->max_iov > IOV_MAX) {
		return -EINVAL;
	}
	*out = NULL;
	rc = ops->create(conf, out);
	if (rc < 0) {
		return rc;
	}
	(*out)->ops = ops;
	(*out)->depth = conf->depth;
	(*out)->max_iov = conf->max_iov;
	return 0;
}

void
tt_ioq_destroy(struct tt_ioq *e)
{
	if (e != NULL) {
		e->ops->destroy(e);
	}
}

int
tt_ioq_submit(struct tt_ioq *e, const struct tt_io *ios, uint32_t nr)
{
	int rc;

	if (nr == 0) {
		return 0;
	}
	if (nr > e->depth - e->inflight) {
		return -EAGAIN;
	}
	for (uint32_t i = 0; i < nr; i++) {
		const struct tt_io *io = &ios[i];

		if (io->op == TT_IO_FSYNC) {
			continue;
		}
		if (io->op > TT_IO_FSYNC || io->nr_iov > e->max_iov ||
		    (io->nr_iov > 0 && io->iov == NULL) || (io->nr_iov == 0 && io->buf == NULL) ||
		    io->len == 0) {
			return -EINVAL;
		}
	}
	rc = e->ops->submit(e, ios, nr);
	if (rc < 0) {
		return rc;
	}
	e->inflight += nr;
	e->nr_ios += nr;
	e->nr_submits++;
	return 0;
}

int
tt_ioq_reap(struct tt_ioq *e, struct tt_io_done *out, uint32_t max, uint32_t min)
{
	int n;

	if (min > e->inflight) {
		min = e->inflight;
	}
	if (max == 0 || e->inflight == 0) {
		return 0;
	}
	n = e->ops->reap(e, out, max, min);
	if (n > 0) {
		e->inflight -= (uint32_t)n;
	}
	return n;
}

void
tt_io_state_start(struct tt_io_state *st, const struct tt_io *io)
{
	st->io = *io;
	st->done = 0;
	if (io->nr_iov > 0) {
		memcpy(st->iov, io->iov, io->nr_iov * sizeof(*io->iov));
		st->nr_iov = io->nr_iov;
	} else {
		st->iov[0].iov_base = io->buf;
		st->iov[0].iov_len = io->len;
		st->nr_iov = 1;
	}
}

bool
tt_io_state_advance(struct tt_io_state *st, uint32_t bytes)
{
	uint32_t k = 0;

	st->done += bytes;
	while (k < st->nr_iov && bytes >= st->iov[k].iov_len) {
		bytes -= (uint32_t)st->iov[k].iov_len;
		k++;
	}
	if (k < st->nr_iov) {
		st->iov[k].iov_base = (uint8_t *)st->iov[k].iov_base + bytes;
		st->iov[k].iov_len -= bytes;
	}
	memmove(st->iov, st->iov + k, (st->nr_iov - k) * sizeof(*st->iov));
	st->nr_iov -= k;
	return st->done >= st->io.len || st->nr_iov == 0;
}
