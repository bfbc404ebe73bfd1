/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A GPU-drivable io_uring: a real Linux io_uring created with IORING_SETUP_NO_MMAP on memory
 * this module allocates, so that a CUDA kernel (or, in tests and on machines without a GPU, a
 * host thread: the twin) can write submissions and read completions itself. Either the kernel's
 * SQPOLL thread issues the I/O it publishes, or (host_submits) the doorbell helper does, in
 * batches, once per poll period. The host's part is set-up, that helper (which also wakes a
 * sleeping SQ thread with work queued and flushes an overflowed CQ), and one wake-up per launch:
 * never anything per I/O.
 *
 * Debian's liburing 2.3 cannot create such a ring (no io_uring_queue_init_mem, no NO_MMAP or
 * NO_SQARRAY in its headers), so set-up uses the raw system calls.
 */
#ifndef TT_ENGINE_GPU_URING_RING_H
#define TT_ENGINE_GPU_URING_RING_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "engine/gpu_uring/proto.h"

struct tt_gpu_uring;

struct tt_gpu_uring_conf {
	const int *fds;  /* the files I/O may name, by index; registered when possible */
	uint32_t nr_fds; /* 1..TT_GPU_URING_MAX_FILES */
	void *buf;       /* memory most I/O targets, registered as fixed buffer 0; may be NULL */
	uint64_t buf_bytes;
	uint32_t sq_entries; /* rounded up to a power of two */
	uint32_t cq_entries; /* >= the most I/Os a driver keeps in flight */
	uint32_t sq_idle_ms; /* how long the SQ thread spins before it sleeps */
	/* Who issues what the driver publishes. false: the kernel's SQPOLL thread, which spins on
	 * the SQ while I/O flows, a core whatever the rate. true: no SQ thread; the doorbell helper
	 * hands the queued SQEs to the kernel (io_uring_enter) every poll period and sleeps between
	 * polls. For files reached by O_DIRECT on a block device, whose reads and writes the kernel
	 * issues inline in a few microseconds, that costs a small share of a core; for
	 * page-cache-backed files every inline I/O is a copy, which SQPOLL keeps off the host's
	 * threads (sq_idle_ms is then unused). */
	bool host_submits;
	bool async;        /* IOSQE_ASYNC on reads: for page-cache-backed files (tmpfs) */
	bool async_writes; /* and on writes: for such files when I/O spreads over several */
	/* Publish reads (punted writes) one at a time, this many ns apart (proto.h says why); at
	 * most 1 ms each. */
	uint32_t read_pace_ns;
	uint32_t write_pace_ns;
	const struct tt_log *log;
};

/*
 * Create the ring and start its doorbell helper. Returns 0, -EINVAL (bad sizes), -ENOSYS or
 * -EPERM (io_uring unavailable or refused), -EOPNOTSUPP (the kernel lacks NO_MMAP or SQPOLL),
 * -ENOMEM, or the errno of a failing system call; the caller logs it.
 */
int tt_gpu_uring_create(const struct tt_gpu_uring_conf *conf, struct tt_gpu_uring **out);

/* Stop the helper and tear the ring down. No driver may be running. NULL is allowed. */
void tt_gpu_uring_destroy(struct tt_gpu_uring *r);

/* The view drivers use (pointers into the ring memory, valid until destroy). */
void tt_gpu_uring_view(const struct tt_gpu_uring *r, struct tt_gpu_uring_view *v);

/* The memory a driver reads and writes: the SQEs, and the ring headers with the CQEs. A driver
 * that must map memory before it can use it (the GPU) maps these; valid until destroy. */
struct tt_gpu_uring_region {
	void *base;
	size_t bytes;
};
void tt_gpu_uring_regions(const struct tt_gpu_uring *r, struct tt_gpu_uring_region out[2]);

/* Call once before a launch that will queue I/O: the doorbell helper polls at its short period
 * again if it had gone idle (no I/O for 100 ms: it then polls every millisecond), and the SQ
 * thread is woken if it sleeps (there is none with host_submits). */
void tt_gpu_uring_kick(struct tt_gpu_uring *r);

/* Call when every launch that used the ring has finished (its kernel synchronised, its twin
 * run returned) and nothing else will queue I/O before the next kick: the helper goes idle at
 * its next poll instead of polling at the short period for 100 ms more. A kick after it (or
 * queued SQEs the helper sees) undoes it. */
void tt_gpu_uring_settle(struct tt_gpu_uring *r);

/* Doorbell helper activity, for tests and stats: SQ thread wake-ups, and (host_submits) the
 * io_uring_enter calls that handed SQEs to the kernel and the SQEs they handed. */
uint64_t tt_gpu_uring_wakeups(const struct tt_gpu_uring *r);
uint64_t tt_gpu_uring_host_submit_calls(const struct tt_gpu_uring *r);
uint64_t tt_gpu_uring_host_submitted(const struct tt_gpu_uring *r);
/* CPU time of the doorbell helper thread so far (ns): with host_submits, what issuing costs. */
uint64_t tt_gpu_uring_helper_cpu_ns(const struct tt_gpu_uring *r);
uint64_t tt_gpu_uring_overflow_flushes(const struct tt_gpu_uring *r);
/* The helper's polls so far, and in *idle (may be NULL) those made at the idle period. */
uint64_t tt_gpu_uring_helper_polls(const struct tt_gpu_uring *r, uint64_t *idle);

/* ---- the twin: a host thread that drives the ring as the GPU kernel does ---- */

struct tt_gpu_uring_program {
	const struct tt_gpu_uring_io *ios;
	uint32_t nr;
	uint32_t window; /* bounce slots: I/O i reuses the slot of I/O i - window; <= cq_entries */
	uint32_t in_flight; /* most I/Os submitted and not yet over, <= window (0: window) */
	/* Called before I/O i is submitted (a save fills its slot); a negative return fails it. */
	int (*prepare)(void *arg, uint32_t i);
	/* Called once per I/O, in completion order, with its result (length or -errno). */
	void (*complete)(void *arg, uint32_t i, int32_t res);
	void *arg;
	const uint32_t *cancel; /* if not NULL and set, submit no more: -ECANCELED for the rest */
	/* The copy engine's protocol (proto.h, "loads by the copy engine"); 0: off. Results are
	 * handed on in groups of this many consecutive I/Os (from I/O 0; a divisor of the
	 * window), each once all of its I/Os are over, in whatever order the groups complete:
	 * copy() for the group, then complete() for each of its I/Os in order, and only then are
	 * their slots free. */
	uint32_t copy_group;
	void (*copy)(void *arg, uint32_t first, uint32_t count);
};

/*
 * Run a program: I/O i is submitted once I/O i - window has completed (its slot is free) and
 * fewer than in_flight I/Os are submitted and not yet over, reads no sooner than read_pace_ns
 * after the previous submission, and every I/O gets exactly one
 * complete() call. Returns 0, or -ETIMEDOUT when the ring made no progress for \p timeout_ms
 * (every unfinished I/O is then completed with -ETIMEDOUT and the ring must be destroyed).
 */
int tt_gpu_uring_twin_run(struct tt_gpu_uring *r, const struct tt_gpu_uring_program *p,
                          uint32_t timeout_ms);

#endif /* TT_ENGINE_GPU_URING_RING_H */
