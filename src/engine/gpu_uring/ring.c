/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU-drivable io_uring: set-up with raw system calls, the doorbell helper, and the twin driver.
 */
#include <errno.h>
#include <linux/futex.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "engine/gpu_uring/ring.h"

/* Not in Debian 12's kernel headers (6.1). */
#define TT_IORING_SETUP_NO_MMAP (1u << 14)
#define TT_IORING_SETUP_NO_SQARRAY (1u << 16)
#ifndef IORING_SETUP_SUBMIT_ALL
#define IORING_SETUP_SUBMIT_ALL (1u << 7)
#endif

/* The doorbell helper's poll period: short enough that a sleeping SQ thread costs little, long
 * enough to take a negligible share of a core. */
#define DOORBELL_NS 50000
/* With host_submits the helper's polls are the submission latency: its sleeps are held to the
 * period rather than stretched by the default 50 us timer slack. */
#define HOST_SUBMIT_SLACK_NS 1000
/* A helper that has seen no I/O move (SQ tail, CQ tail) and no kick for IDLE_AFTER_NS polls
 * every IDLE_POLL_NS instead, until a kick or moving I/O brings it back: 20,000 wake-ups a
 * second on an idle server cost a share of a core for nothing. A launch kicks the ring, so its
 * I/O meets a fast-polling helper unless the kernel starts more than IDLE_AFTER_NS after it
 * (queued behind that much work), when its first SQEs wait up to IDLE_POLL_NS. */
#define IDLE_AFTER_NS 100000000ull
#define IDLE_POLL_NS 1000000
/* Quiet for DEEP_IDLE_AFTER_NS, it polls every DEEP_IDLE_POLL_NS: a store open on a server
 * that saves or loads now and then spends most of its life so. A kick still wakes it at once;
 * only a kernel that starts more than DEEP_IDLE_AFTER_NS after its launch waits for a poll,
 * up to DEEP_IDLE_POLL_NS, 1% of its wait in the queue. */
#define DEEP_IDLE_AFTER_NS 2000000000ull
#define DEEP_IDLE_POLL_NS 20000000
/* A pace above this is a mistake, not a tuning: it would hold a layer's reads for milliseconds. */
#define MAX_PACE_NS 1000000u

struct tt_gpu_uring {
	int fd;
	struct tt_gpu_uring_view view;
	uint8_t *sq_region; /* the SQEs */
	size_t sq_bytes;
	uint8_t
	    *ring_region; /* struct io_rings and the CQEs (and the SQ array without NO_SQARRAY) */
	size_t ring_bytes;
	pthread_t helper;
	bool helper_started;
	bool host_submits;         /* the helper issues the SQEs (no SQ thread) */
	uint32_t stop;             /* atomic */
	uint64_t wakeups;          /* atomic */
	uint64_t overflow_flushes; /* atomic */
	uint64_t submit_calls;     /* atomic: host_submits' io_uring_enter calls */
	uint64_t submitted;        /* atomic: the SQEs they handed to the kernel */
	uint64_t polls;            /* atomic: the helper's polls */
	uint64_t idle_polls;       /* atomic: of those, made at the idle period */
	uint32_t kicks;            /* atomic futex word: bumped by every kick */
	uint32_t settled;          /* atomic: a settle waits for the helper to see it */
	uint32_t settled_kicks;    /* atomic: r->kicks when it was settled */
	uint32_t helper_idle;      /* atomic: the helper polls at the idle period */
	const struct tt_log *log;
};

static int
sys_setup(uint32_t entries, struct io_uring_params *p)
{
	int fd = (int)syscall(__NR_io_uring_setup, entries, p);

	return fd < 0 ? -errno : fd;
}

static int
sys_enter(int fd, uint32_t to_submit, uint32_t flags)
{
	int rc = (int)syscall(__NR_io_uring_enter, fd, to_submit, 0, flags, NULL, 0);

	return rc < 0 ? -errno : rc;
}

static int
sys_register(int fd, unsigned op, const void *arg, unsigned nr)
{
	int rc = (int)syscall(__NR_io_uring_register, fd, op, arg, nr);

	return rc < 0 ? -errno : rc;
}

static uint32_t
pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v) {
		p <<= 1;
	}
	return p;
}

/* Zeroed, page-aligned, populated: the kernel pins exactly what the offsets say, so the regions
 * are sized here with slack (the kernel does not know their length). */
static uint8_t *
region_alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* ---- the doorbell helper ---- */

static void
doorbell(struct tt_gpu_uring *r)
{
	uint32_t flags = tt_ld_acquire(r->view.sq_flags);

	/* Queued submissions and a sleeping SQ thread: only the host can wake it. */
	if ((flags & TT_SQ_NEED_WAKEUP) &&
	    tt_ld_acquire(r->view.sq_tail) != tt_ld_acquire(r->view.sq_head)) {
		sys_enter(r->fd, 0, IORING_ENTER_SQ_WAKEUP);
		__atomic_add_fetch(&r->wakeups, 1, __ATOMIC_RELAXED);
	}
	/* An overflowed CQ is flushed back only by GETEVENTS, which the SQ thread never does. */
	if (flags & TT_SQ_CQ_OVERFLOW) {
		sys_enter(r->fd, 0, IORING_ENTER_GETEVENTS);
		__atomic_add_fetch(&r->overflow_flushes, 1, __ATOMIC_RELAXED);
	}
}

/* host_submits: hand what the driver published since the last poll to the kernel, which issues
 * it inline on this thread. A refused call (-EAGAIN, -EBUSY: no memory for requests, or
 * completions backed up) is tried again at the next poll; an SQE the kernel rejects completes
 * with its error, like any other I/O (IORING_SETUP_SUBMIT_ALL). */
static void
host_submit(struct tt_gpu_uring *r)
{
	uint32_t tail = tt_ld_acquire(r->view.sq_tail);
	uint32_t head = tt_ld_acquire(r->view.sq_head);
	int rc;

	if (tail == head) {
		return;
	}
	do {
		rc = sys_enter(r->fd, tail - head, 0);
	} while (rc == -EINTR);
	__atomic_add_fetch(&r->submit_calls, 1, __ATOMIC_RELAXED);
	if (rc > 0) {
		__atomic_add_fetch(&r->submitted, (uint64_t)rc, __ATOMIC_RELAXED);
	} else if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) {
		/* Nothing else is expected of a ring that was set up; the driver's deadline turns
		 * the I/O that never completes into -ETIMEDOUT. */
		tt_log_err(r->log, "gpu-uring: io_uring_enter submitting %u SQEs failed: %s",
		           tail - head, tutti_strerror(rc));
	}
}

/* Sleep \p ns, or less if a kick bumps r->kicks from \p seen. A futex rather than a condition
 * variable: the kick on the launch path stays one atomic add and, only while the helper idles,
 * one wake system call. */
static void
idle_wait(struct tt_gpu_uring *r, uint32_t seen, long ns)
{
	struct timespec t = {0, ns};

	(void)syscall(SYS_futex, &r->kicks, FUTEX_WAIT_PRIVATE, seen, &t, NULL, 0);
}

static void *
helper_main(void *arg)
{
	struct tt_gpu_uring *r = arg;
	struct timespec pause = {0, DOORBELL_NS};
	uint32_t sq_seen = tt_ld_acquire(r->view.sq_tail);
	uint32_t cq_seen = tt_ld_acquire(r->view.cq_tail);
	uint32_t kicks_seen = __atomic_load_n(&r->kicks, __ATOMIC_ACQUIRE);
	uint64_t last_active = tt_now_ns();

	/* Named, so that tools can tell its CPU time from the rest (benches count it with
	 * io_uring's own threads). */
	(void)pthread_setname_np(pthread_self(), "tt-ring-io");
	if (r->host_submits) {
		(void)prctl(PR_SET_TIMERSLACK, HOST_SUBMIT_SLACK_NS, 0, 0, 0);
	}
	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		uint32_t sq = tt_ld_acquire(r->view.sq_tail);
		uint32_t cq = tt_ld_acquire(r->view.cq_tail);
		uint32_t kicks = __atomic_load_n(&r->kicks, __ATOMIC_ACQUIRE);
		uint64_t now = tt_now_ns();
		uint64_t quiet;
		bool idle;

		if (r->host_submits) {
			host_submit(r);
		}
		doorbell(r);
		if (sq != sq_seen || cq != cq_seen || kicks != kicks_seen ||
		    sq != tt_ld_acquire(r->view.sq_head)) {
			sq_seen = sq, cq_seen = cq, kicks_seen = kicks;
			last_active = now;
		}
		if (__atomic_exchange_n(&r->settled, 0u, __ATOMIC_ACQ_REL) &&
		    __atomic_load_n(&r->settled_kicks, __ATOMIC_ACQUIRE) == kicks &&
		    sq == tt_ld_acquire(r->view.sq_head)) {
			/* Settled, with no kick since and nothing queued: idle from now. A kick
			 * between the load of kicks above and the futex wait makes that wait
			 * return at once. */
			last_active = now - IDLE_AFTER_NS;
		}
		quiet = now - last_active;
		idle = quiet >= IDLE_AFTER_NS;
		__atomic_store_n(&r->helper_idle, idle ? 1u : 0u, __ATOMIC_SEQ_CST);
		__atomic_add_fetch(&r->polls, 1, __ATOMIC_RELAXED);
		if (idle) {
			__atomic_add_fetch(&r->idle_polls, 1, __ATOMIC_RELAXED);
			idle_wait(r, kicks,
			          quiet >= DEEP_IDLE_AFTER_NS ? DEEP_IDLE_POLL_NS : IDLE_POLL_NS);
		} else {
			nanosleep(&pause, NULL);
		}
	}
	return NULL;
}

void
tt_gpu_uring_kick(struct tt_gpu_uring *r)
{
	/* The helper polls fast again from its next poll; wake it if it idles. */
	__atomic_add_fetch(&r->kicks, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&r->helper_idle, __ATOMIC_SEQ_CST)) {
		(void)syscall(SYS_futex, &r->kicks, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	}
	if (r->host_submits) {
		return; /* no SQ thread: the helper's next poll submits */
	}
	if (tt_ld_acquire(r->view.sq_flags) & TT_SQ_NEED_WAKEUP) {
		sys_enter(r->fd, 0, IORING_ENTER_SQ_WAKEUP);
		__atomic_add_fetch(&r->wakeups, 1, __ATOMIC_RELAXED);
	}
}

void
tt_gpu_uring_settle(struct tt_gpu_uring *r)
{
	__atomic_store_n(&r->settled_kicks, __atomic_load_n(&r->kicks, __ATOMIC_ACQUIRE),
	                 __ATOMIC_RELEASE);
	__atomic_store_n(&r->settled, 1u, __ATOMIC_RELEASE);
}

uint64_t
tt_gpu_uring_wakeups(const struct tt_gpu_uring *r)
{
	return __atomic_load_n(&r->wakeups, __ATOMIC_RELAXED);
}

uint64_t
tt_gpu_uring_overflow_flushes(const struct tt_gpu_uring *r)
{
	return __atomic_load_n(&r->overflow_flushes, __ATOMIC_RELAXED);
}

uint64_t
tt_gpu_uring_helper_polls(const struct tt_gpu_uring *r, uint64_t *idle)
{
	if (idle != NULL) {
		*idle = __atomic_load_n(&r->idle_polls, __ATOMIC_RELAXED);
	}
	return __atomic_load_n(&r->polls, __ATOMIC_RELAXED);
}

uint64_t
tt_gpu_uring_host_submit_calls(const struct tt_gpu_uring *r)
{
	return __atomic_load_n(&r->submit_calls, __ATOMIC_RELAXED);
}

uint64_t
tt_gpu_uring_host_submitted(const struct tt_gpu_uring *r)
{
	return __atomic_load_n(&r->submitted, __ATOMIC_RELAXED);
}

uint64_t
tt_gpu_uring_helper_cpu_ns(const struct tt_gpu_uring *r)
{
	clockid_t clock;
	struct timespec ts;

	if (!r->helper_started || pthread_getcpuclockid(r->helper, &clock) != 0 ||
	    clock_gettime(clock, &ts) != 0) {
		return 0;
	}
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- set-up ---- */

_Static_assert(sizeof(struct io_sqring_offsets) == 40 && sizeof(struct io_cqring_offsets) == 40,
               "user_addr is the u64 at byte 32 of the ring offsets");

static void
set_user_addr(void *offsets, const void *region)
{
	uint64_t addr = (uint64_t)(uintptr_t)region;

	memcpy((uint8_t *)offsets + 32, &addr, sizeof(addr));
}

static int
setup_ring(struct tt_gpu_uring *r, const struct tt_gpu_uring_conf *conf, struct io_uring_params *p)
{
	uint32_t flags = TT_IORING_SETUP_NO_MMAP | IORING_SETUP_CQSIZE |
	                 TT_IORING_SETUP_NO_SQARRAY |
	                 (conf->host_submits ? IORING_SETUP_SUBMIT_ALL : IORING_SETUP_SQPOLL);

	for (int attempt = 0; attempt < 2; attempt++) {
		memset(p, 0, sizeof(*p));
		p->flags = flags;
		p->sq_thread_idle = conf->host_submits ? 0 : conf->sq_idle_ms;
		p->cq_entries = conf->cq_entries;
		/* user_addr: SQEs in one region, rings in the other. The field is named resv2 in
		 * headers before 6.5 and user_addr after; it is the u64 at byte 32 in both. */
		set_user_addr(&p->sq_off, r->sq_region);
		set_user_addr(&p->cq_off, r->ring_region);
		r->fd = sys_setup(conf->sq_entries, p);
		if (r->fd >= 0 || r->fd != -EINVAL) {
			break;
		}
		flags &= ~TT_IORING_SETUP_NO_SQARRAY; /* kernels before 6.6 */
	}
	if (r->fd < 0) {
		/* -EINVAL: a kernel without NO_MMAP (6.5), or without SQPOLL for this caller. */
		int rc = r->fd == -EINVAL ? -EOPNOTSUPP : r->fd;

		r->fd = -1;
		return rc;
	}
	if (!(p->flags & TT_IORING_SETUP_NO_SQARRAY)) {
		/* The identity map, once: the driver then never writes the array. */
		uint32_t *array = (uint32_t *)(r->ring_region + p->sq_off.array);

		for (uint32_t i = 0; i < p->sq_entries; i++) {
			array[i] = i;
		}
	}
	return 0;
}

static void
fill_view(struct tt_gpu_uring *r, const struct tt_gpu_uring_conf *conf,
          const struct io_uring_params *p)
{
	struct tt_gpu_uring_view *v = &r->view;
	uint8_t *rr = r->ring_region;

	v->sq_head = (uint32_t *)(rr + p->sq_off.head);
	v->sq_tail = (uint32_t *)(rr + p->sq_off.tail);
	v->sq_flags = (uint32_t *)(rr + p->sq_off.flags);
	v->cq_head = (uint32_t *)(rr + p->cq_off.head);
	v->cq_tail = (uint32_t *)(rr + p->cq_off.tail);
	v->cqes = (uint64_t *)(rr + p->cq_off.cqes);
	v->sqes = (uint64_t *)r->sq_region;
	v->sq_entries = p->sq_entries;
	v->sq_mask = p->sq_entries - 1;
	v->cq_entries = p->cq_entries;
	v->cq_mask = p->cq_entries - 1;
	v->sqe_flags = conf->async ? TT_SQE_ASYNC : 0;
	v->write_sqe_flags = conf->async_writes ? TT_SQE_ASYNC : 0;
	v->read_pace_ns = conf->read_pace_ns;
	v->write_pace_ns = conf->write_pace_ns;
	for (uint32_t i = 0; i < conf->nr_fds; i++) {
		v->fds[i] = conf->fds[i];
	}
}

static void
register_resources(struct tt_gpu_uring *r, const struct tt_gpu_uring_conf *conf)
{
	int rc = sys_register(r->fd, IORING_REGISTER_FILES, conf->fds, conf->nr_fds);

	/* Both are optimisations: without them SQEs carry fds and plain addresses. */
	r->view.fixed_files = rc == 0;
	if (rc < 0) {
		tt_log_info(conf->log, "gpu-uring: files not registered: %s", tutti_strerror(rc));
	}
	if (conf->buf != NULL && conf->buf_bytes > 0) {
		struct iovec iov = {.iov_base = conf->buf, .iov_len = conf->buf_bytes};

		rc = sys_register(r->fd, IORING_REGISTER_BUFFERS, &iov, 1);
		r->view.fixed_buf = rc == 0;
		r->view.buf_base = (uint64_t)(uintptr_t)conf->buf;
		r->view.buf_bytes = conf->buf_bytes;
		if (rc < 0) {
			tt_log_info(conf->log, "gpu-uring: buffer not registered: %s",
			            tutti_strerror(rc));
		}
	}
}

int
tt_gpu_uring_create(const struct tt_gpu_uring_conf *conf, struct tt_gpu_uring **out)
{
	struct io_uring_params p;
	struct tt_gpu_uring *r;
	uint32_t sq, cq;
	int rc;

	if (conf == NULL || out == NULL || conf->fds == NULL || conf->nr_fds == 0 ||
	    conf->nr_fds > TT_GPU_URING_MAX_FILES || conf->sq_entries == 0 ||
	    conf->sq_entries > 32768 || conf->cq_entries < conf->sq_entries ||
	    conf->cq_entries > 65536 || conf->read_pace_ns > MAX_PACE_NS ||
	    conf->write_pace_ns > MAX_PACE_NS) {
		return -EINVAL;
	}
	*out = NULL;
	r = tt_calloc(1, sizeof(*r));
	if (r == NULL) {
		return -ENOMEM;
	}
	r->fd = -1;
	r->log = conf->log;
	r->host_submits = conf->host_submits;
	sq = pow2_at_least(conf->sq_entries);
	cq = pow2_at_least(conf->cq_entries);
	/* SQEs: 64 bytes each. Rings: a header, 16-byte CQEs, a 4-byte SQ array; slack for the
	 * header and alignment the kernel chooses. */
	r->sq_bytes = tt_round_up((uint64_t)sq * 64, 4096) + 4096;
	r->ring_bytes = tt_round_up(4096 + (uint64_t)cq * 16 + (uint64_t)sq * 4, 4096) + 65536;
	r->sq_region = region_alloc(r->sq_bytes);
	r->ring_region = region_alloc(r->ring_bytes);
	if (r->sq_region == NULL || r->ring_region == NULL) {
		rc = -ENOMEM;
		goto err;
	}
	rc = setup_ring(r, conf, &p);
	if (rc < 0) {
		goto err;
	}
	fill_view(r, conf, &p);
	register_resources(r, conf);
	rc = -pthread_create(&r->helper, NULL, helper_main, r);
	if (rc < 0) {
		goto err;
	}
	r->helper_started = true;
	*out = r;
	return 0;

err:
	tt_gpu_uring_destroy(r);
	return rc;
}

void
tt_gpu_uring_destroy(struct tt_gpu_uring *r)
{
	if (r == NULL) {
		return;
	}
	if (r->helper_started) {
		__atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
		pthread_join(r->helper, NULL);
	}
	/* Closing the ring lets the kernel unpin the regions (asynchronously); they are ours to
	 * unmap once the fd is gone. */
	if (r->fd >= 0) {
		close(r->fd);
	}
	if (r->sq_region != NULL) {
		munmap(r->sq_region, r->sq_bytes);
	}
	if (r->ring_region != NULL) {
		munmap(r->ring_region, r->ring_bytes);
	}
	tt_free(r);
}

void
tt_gpu_uring_regions(const struct tt_gpu_uring *r, struct tt_gpu_uring_region out[2])
{
	out[0] = (struct tt_gpu_uring_region){.base = r->sq_region, .bytes = r->sq_bytes};
	out[1] = (struct tt_gpu_uring_region){.base = r->ring_region, .bytes = r->ring_bytes};
}

void
tt_gpu_uring_view(const struct tt_gpu_uring *r, struct tt_gpu_uring_view *v)
{
	*v = r->view;
}

/* ---- the twin ---- */

static uint64_t
now_ms(void)
{
	return tt_now_ns() / 1000000;
}

/* Normalise a read or write result: the whole length, or a negative errno. */
static int32_t
io_result(const struct tt_gpu_uring_io *io, int32_t res)
{
	if (res < 0) {
		return res;
	}
	return (uint32_t)res == io->len ? res : -EIO; /* short: the file ends inside the extent */
}

/* The twin's state of one program. */
struct twin_state {
	const struct tt_gpu_uring_program *p;
	uint8_t *completed; /* per I/O: complete() called, its slot free */
	/* Copy groups (p->copy_group): per group word (window / copy_group of them, group k's
	 * is k % words), the reads of the group over so far; per I/O its result until its group
	 * is handed on. */
	uint32_t *tally;
	uint32_t words;
	int32_t *res;
	uint32_t over; /* I/Os over, handed on or not: those no longer in flight */
	uint32_t done; /* complete() calls */
};

/* I/O \p i's one complete() call: its slot is free after it. */
static void
twin_complete(struct twin_state *t, uint32_t i, int32_t res)
{
	t->p->complete(t->p->arg, i, res);
	t->completed[i] = 1;
	t->done++;
}

/* Group \p k's first \p n I/Os are over: copied, then completed in order, as the copy stream and
 * then the workers do on the GPU. */
static void
twin_hand_on(struct twin_state *t, uint32_t k, uint32_t n)
{
	const struct tt_gpu_uring_program *p = t->p;
	uint32_t first = k * p->copy_group;

	p->copy(p->arg, first, n);
	for (uint32_t i = first; i < first + n; i++) {
		twin_complete(t, i, t->res[i]);
	}
}

/* I/O \p i is over with result \p res: completed at once, or counted in its group, which is
 * handed on when it is whole. Groups go in any order, as on the GPU. */
static void
twin_arrived(struct twin_state *t, uint32_t i, int32_t res)
{
	const struct tt_gpu_uring_program *p = t->p;
	uint32_t k, w, size;

	t->over++;
	if (p->copy_group == 0) {
		twin_complete(t, i, res);
		return;
	}
	k = i / p->copy_group;
	w = k % t->words;
	size = tt_gpu_uring_group_size(k, p->copy_group, p->nr);
	t->res[i] = res;
	if (++t->tally[w] == size) {
		t->tally[w] = 0;
		twin_hand_on(t, k, size);
	}
}

/* Cancelled with nothing in flight: the last group submitted may be partial; hand on what of it
 * was submitted. */
static void
twin_flush(struct twin_state *t, uint32_t submitted)
{
	const struct tt_gpu_uring_program *p = t->p;
	uint32_t k;

	if (p->copy_group == 0 || submitted == 0 || t->over != submitted) {
		return;
	}
	k = (submitted - 1) / p->copy_group;
	if (t->tally[k % t->words] != 0) {
		t->tally[k % t->words] = 0;
		twin_hand_on(t, k, submitted - k * p->copy_group);
	}
}

int
tt_gpu_uring_twin_run(struct tt_gpu_uring *r, const struct tt_gpu_uring_program *p,
                      uint32_t timeout_ms)
{
	const struct tt_gpu_uring_view *v = &r->view;
	uint32_t tail = tt_ld_acquire(v->sq_tail), head = tt_ld_acquire(v->cq_head);
	uint32_t next = 0, window = p->window, in_flight = p->in_flight ? p->in_flight : window;
	uint64_t progress = now_ms(), published_ns = 0;
	struct twin_state t = {.p = p};
	bool cancelled = false;
	int rc = 0;

	if (window == 0 || window > v->cq_entries || in_flight > window || p->complete == NULL ||
	    (p->copy_group != 0 && (p->copy == NULL || window % p->copy_group != 0))) {
		return -EINVAL;
	}
	t.completed = tt_calloc(p->nr ? p->nr : 1, 1);
	if (p->copy_group != 0) {
		t.words = window / p->copy_group;
		t.tally = tt_calloc(t.words, sizeof(*t.tally));
		t.res = tt_calloc(p->nr ? p->nr : 1, sizeof(*t.res));
	}
	if (t.completed == NULL || (p->copy_group != 0 && (t.tally == NULL || t.res == NULL))) {
		rc = -ENOMEM;
		goto out;
	}
	while (t.done < p->nr) {
		uint32_t queued = 0, ready;
		uint32_t before = t.done;

		cancelled = cancelled || (p->cancel != NULL &&
		                          __atomic_load_n(p->cancel, __ATOMIC_ACQUIRE) != 0);
		/* Submit what the window (I/O i reuses the slot of I/O i - window, free once
		 * I/O i - window is completed), the I/Os in flight, the SQ and the program
		 * allow. */
		while (!cancelled && next < p->nr && tt_gpu_uring_sq_space(v, tail) > 0 &&
		       (next < window || t.completed[next - window]) && next - t.over < in_flight) {
			uint32_t pace = p->ios[next].write ? v->write_pace_ns : v->read_pace_ns;
			int prc;

			/* A paced I/O waits for its turn (proto.h says why). */

			if (pace != 0 && (queued > 0 || tt_now_ns() - published_ns < pace)) {
				break;
			}
			prc = p->prepare != NULL ? p->prepare(p->arg, next) : 0;

			if (prc < 0) {
				twin_arrived(&t, next++, prc);
				continue;
			}
			tt_gpu_uring_put(v, tail++, &p->ios[next], next);
			next++;
			queued++;
		}
		if (queued > 0) {
			tt_gpu_uring_publish(v, tail); /* once per batch */
			published_ns = tt_now_ns();
		}
		/* Reap what completed. */
		ready = tt_gpu_uring_cq_ready(v, head);
		for (uint32_t k = 0; k < ready; k++, head++) {
			uint64_t tag;
			int32_t res;

			tt_gpu_uring_cqe(v, head, &tag, &res);
			if (tag >= p->nr || tag >= next || t.completed[tag] ||
			    (t.res != NULL && t.res[tag] != 0)) {
				continue; /* not ours: a ring is used by one program at a time */
			}
			twin_arrived(&t, (uint32_t)tag, io_result(&p->ios[tag], res));
		}
		if (ready > 0) {
			tt_gpu_uring_cq_release(v, head);
		}
		if (cancelled) {
			twin_flush(&t, next); /* the groups end where the submissions did */
		}
		if (cancelled && next == t.done) {
			/* Nothing in flight any more: what was never submitted is cancelled. */
			for (; next < p->nr; next++) {
				twin_complete(&t, next, -ECANCELED);
			}
			break;
		}
		if (queued > 0 || ready > 0 || t.done != before) {
			progress = now_ms();
		} else if (now_ms() - progress > timeout_ms) {
			tt_log_err(r->log, "gpu-uring: no completion for %u ms; giving up",
			           timeout_ms);
			rc = -ETIMEDOUT;
			break;
		} else {
			sched_yield(); /* where a GPU would __nanosleep */
		}
	}
	for (uint32_t i = 0; rc == -ETIMEDOUT && i < p->nr; i++) {
		if (!t.completed[i]) {
			p->complete(p->arg, i, rc);
		}
	}
out:
	tt_free(t.completed);
	tt_free(t.tally);
	tt_free(t.res);
	return rc;
}
