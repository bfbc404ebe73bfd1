/* SPDX-License-Identifier: Apache-2.0 */
/*
 * I/O engines: asynchronous reads and writes of aligned extents of the store's files, behind one
 * table. An engine belongs to one thread at a time.
 *
 * Completion contract: a completion's res is the full length, or a negative errno. Engines finish
 * short transfers themselves and retry -EAGAIN/-EINTR; end of file inside an extent is -EIO.
 */
#ifndef TT_ENGINE_H
#define TT_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/common.h"

enum tt_io_op {
	TT_IO_READ = 0,
	TT_IO_WRITE = 1,
	TT_IO_FSYNC = 2, /* fdatasync of the file: no buffer, off and len 0; res 0 on success */
};

/*
 * One I/O: either one buffer (nr_iov == 0) or a vector of nr_iov <= the engine's max_iov
 * buffers (copied at submission, so the array need not outlive the call). Buffers, lengths and
 * offsets are TUTTI_ALIGN-aligned; len is the total length.
 */
struct tt_io {
	uint64_t tag; /* handed back in the completion */
	uint64_t off;
	void *buf;
	const struct iovec *iov;
	uint32_t nr_iov;
	uint32_t len;
	uint16_t file; /* index into the engine's files */
	uint8_t op;    /* enum tt_io_op */
};

struct tt_io_done {
	uint64_t tag;
	int32_t res;
};

struct tt_engine_conf {
	const int *fds; /* the files; borrowed for the engine's lifetime */
	uint32_t nr_fds;
	void *reg_buf; /* memory that most I/O targets, registered where the engine can; may be NULL
	                */
	size_t reg_bytes;
	uint32_t depth;   /* most I/Os in flight */
	uint32_t max_iov; /* longest I/O vector accepted */
	uint32_t threads; /* posix: worker threads */
	bool async_reads; /* uring: IOSQE_ASYNC on reads, for page-cache-backed files (tmpfs),
	                   * whose reads would otherwise be copied one after another inline */
	const struct tt_log *log;
};

struct tt_engine;

struct tt_engine_ops {
	const char *name;
	int (*create)(const struct tt_engine_conf *conf, struct tt_engine **out);
	void (*destroy)(struct tt_engine *e);
	/* Queue and start \p nr I/Os (nr <= depth - in flight). 0, or -errno with none queued. */
	int (*submit)(struct tt_engine *e, const struct tt_io *ios, uint32_t nr);
	/* Wait until at least \p min I/Os are complete; return how many (<= max) were stored. */
	int (*reap)(struct tt_engine *e, struct tt_io_done *out, uint32_t max, uint32_t min);
};

/* The part of every engine the generic code sees. Engines embed it first. */
struct tt_engine {
	const struct tt_engine_ops *ops;
	uint32_t depth;
	uint32_t max_iov;
	uint32_t inflight;
	uint64_t nr_ios;     /* I/Os accepted */
	uint64_t nr_submits; /* submission calls (system calls for uring, wakeups for posix) */
};

extern const struct tt_engine_ops tt_engine_uring;
extern const struct tt_engine_ops tt_engine_posix;

/* The ops for enum tutti_engine \p kind, or NULL. */
const struct tt_engine_ops *tt_engine_ops_for(uint32_t kind);

int tt_engine_create(const struct tt_engine_ops *ops, const struct tt_engine_conf *conf,
                     struct tt_engine **out);
void tt_engine_destroy(struct tt_engine *e);
/* Checked wrappers: argument and capacity checks, in-flight accounting. */
int tt_engine_submit(struct tt_engine *e, const struct tt_io *ios, uint32_t nr);
int tt_engine_reap(struct tt_engine *e, struct tt_io_done *out, uint32_t max, uint32_t min);

/*
 * An I/O in progress: its own copy of the vector (or one entry for a plain buffer), so that a
 * short transfer can continue where it stopped. Engines keep one per in-flight I/O.
 */
struct tt_io_state {
	struct tt_io io;
	struct iovec *iov; /* max(1, max_iov) entries, owned by the engine */
	uint32_t nr_iov;   /* entries not yet transferred */
	uint32_t done;     /* bytes transferred */
};

/* Start \p st on \p io. */
void tt_io_state_start(struct tt_io_state *st, const struct tt_io *io);
/* Account \p bytes transferred; returns true when the I/O is complete. */
bool tt_io_state_advance(struct tt_io_state *st, uint32_t bytes);

#endif /* TT_ENGINE_H */
