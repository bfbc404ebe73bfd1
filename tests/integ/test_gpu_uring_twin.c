/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the GPU-drivable io_uring (NO_MMAP + SQPOLL, raw set-up) driven by its twin, the
 * host thread that follows the GPU's protocol on the same ring memory: data round trips through
 * O_DIRECT files, wrap-around of a small ring, a CQ larger than the SQ (the SQ fills), error
 * completions (end of file, bad address, unknown file), the SQ thread falling asleep and the
 * doorbell helper waking it, cancellation (every I/O completes exactly once), and paced reads
 * and punted, paced writes going out the pace apart with their bytes intact. The tests that do
 * not concern the SQ thread run again with the host issuing the I/O (host_submits), which must
 * leave no SQ thread and hand every I/O to the kernel in batches. Exits 77 where the kernel
 * refuses such rings or the temporary directory refuses O_DIRECT.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>

#include "engine/gpu_uring/ring.h"
#include "t_util.h"

#define IO_BYTES 4096u
#define FILE_IOS 512u

struct fixture {
	char *dir;
	int fd;
	uint8_t *buf; /* FILE_IOS x IO_BYTES, registered as the fixed buffer */
	struct t_rng rng;
};

/* Rings made by ring() and paced_ring(): I/O issued by the host rather than an SQ thread. */
static bool g_host_submits;

struct run {
	struct tt_gpu_uring_io *ios;
	uint32_t nr;
	int32_t *res;
	uint32_t *calls; /* complete() calls per I/O */
	uint32_t cancel; /* set from prepare after cancel_at I/Os */
	uint32_t cancel_at;
	/* prepare() and complete() calls so far, and the most I/Os prepared and not yet
	 * completed that prepare() saw (counting its own) */
	uint32_t prepared, completed, most_open;
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char *path;

	assert_non_null(f);
	f->dir = t_tmpdir_create();
	path = t_path_join(f->dir, "ring.data");
	f->fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
	assert_true(f->fd >= 0);
	assert_int_equal(fallocate(f->fd, 0, 0, (off_t)FILE_IOS * IO_BYTES), 0);
	free(path);
	f->buf = t_aligned_alloc((size_t)FILE_IOS * IO_BYTES);
	t_rng_init(&f->rng, t_seed(31));
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	close(f->fd);
	free(f->buf);
	t_tmpdir_remove(f->dir);
	free(f);
	return 0;
}

static struct tt_gpu_uring *
paced_ring(struct fixture *f, uint32_t sq, uint32_t cq, uint32_t idle_ms, uint32_t pace_ns)
{
	struct tt_gpu_uring_conf conf = {
	    .fds = &f->fd,
	    .nr_fds = 1,
	    .buf = f->buf,
	    .buf_bytes = (uint64_t)FILE_IOS * IO_BYTES,
	    .sq_entries = sq,
	    .cq_entries = cq,
	    .sq_idle_ms = idle_ms,
	    .host_submits = g_host_submits,
	    .read_pace_ns = pace_ns,
	};
	struct tt_gpu_uring *r = NULL;

	assert_int_equal(tt_gpu_uring_create(&conf, &r), 0);
	return r;
}

static struct tt_gpu_uring *
ring(struct fixture *f, uint32_t sq, uint32_t cq, uint32_t idle_ms)
{
	return paced_ring(f, sq, cq, idle_ms, 0);
}

static int
prepare(void *arg, uint32_t i)
{
	struct run *run = arg;

	if (run->cancel_at != 0 && i == run->cancel_at) {
		__atomic_store_n(&run->cancel, 1, __ATOMIC_RELEASE);
	}
	run->prepared++;
	if (run->prepared - run->completed > run->most_open) {
		run->most_open = run->prepared - run->completed;
	}
	return 0;
}

static void
complete(void *arg, uint32_t i, int32_t res)
{
	struct run *run = arg;

	run->res[i] = res;
	run->calls[i]++;
	run->completed++;
}

static struct run *
make_run(uint32_t nr)
{
	struct run *run = calloc(1, sizeof(*run));

	assert_non_null(run);
	run->nr = nr;
	run->ios = calloc(nr, sizeof(*run->ios));
	run->res = calloc(nr, sizeof(*run->res));
	run->calls = calloc(nr, sizeof(*run->calls));
	assert_non_null(run->ios);
	assert_non_null(run->res);
	assert_non_null(run->calls);
	return run;
}

static void
free_run(struct run *run)
{
	free(run->ios);
	free(run->res);
	free(run->calls);
	free(run);
}

/* I/O i moves slot (i % FILE_IOS) of the buffer to or from block (perm[i] % FILE_IOS). */
static void
program(struct fixture *f, struct run *run, const uint32_t *perm, bool write)
{
	for (uint32_t i = 0; i < run->nr; i++) {
		run->ios[i] = (struct tt_gpu_uring_io){
		    .off = (uint64_t)(perm[i] % FILE_IOS) * IO_BYTES,
		    .buf = (uint64_t)(uintptr_t)(f->buf + (uint64_t)(i % FILE_IOS) * IO_BYTES),
		    .len = IO_BYTES,
		    .write = write,
		};
	}
}

static int
run_program(struct tt_gpu_uring *r, struct run *run, uint32_t window)
{
	struct tt_gpu_uring_program p = {
	    .ios = run->ios,
	    .nr = run->nr,
	    .window = window,
	    .prepare = prepare,
	    .complete = complete,
	    .arg = run,
	    .cancel = &run->cancel,
	};

	return tt_gpu_uring_twin_run(r, &p, 5000);
}

static void
assert_each_completed_once(const struct run *run)
{
	for (uint32_t i = 0; i < run->nr; i++) {
		assert_int_equal(run->calls[i], 1);
	}
}

/* Run \p run's program, every I/O completing once with its full length; returns the ns it
 * took. */
static uint64_t
timed_run(struct tt_gpu_uring *r, struct run *run)
{
	uint64_t t0 = tt_now_ns(), elapsed;

	assert_int_equal(run_program(r, run, 64), 0);
	elapsed = tt_now_ns() - t0;
	assert_each_completed_once(run);
	for (uint32_t i = 0; i < run->nr; i++) {
		assert_int_equal(run->res[i], IO_BYTES);
	}
	return elapsed;
}

/* Read back what \p run's program wrote (its I/Os in \p perm's order) into a poisoned buffer,
 * each I/O completing once, and compare with \p expect. */
static void
read_back(struct fixture *f, struct tt_gpu_uring *r, struct run *run, const uint32_t *perm,
          const uint8_t *expect)
{
	memset(f->buf, 0xa5, (size_t)run->nr * IO_BYTES);
	memset(run->calls, 0, run->nr * sizeof(*run->calls));
	program(f, run, perm, false);
	assert_int_equal(run_program(r, run, 64), 0);
	assert_each_completed_once(run);
	assert_memory_equal(f->buf, expect, (size_t)run->nr * IO_BYTES);
}

/* Write the first \p n I/Os of \p run (fresh random bytes) in file order, then read them back
 * and compare; returns the ns the writes took. */
static uint64_t
write_in_order_then_read_back(struct fixture *f, struct tt_gpu_uring *r, struct run *run,
                              uint32_t n)
{
	uint32_t *perm = malloc(n * sizeof(*perm));
	uint8_t *expect = malloc((size_t)n * IO_BYTES);
	uint64_t elapsed;

	assert_non_null(perm);
	assert_non_null(expect);
	for (uint32_t i = 0; i < n; i++) {
		perm[i] = i;
	}
	t_rng_fill(&f->rng, f->buf, (size_t)n * IO_BYTES);
	memcpy(expect, f->buf, (size_t)n * IO_BYTES);
	memset(run->calls, 0, run->nr * sizeof(*run->calls));
	program(f, run, perm, true);
	elapsed = timed_run(r, run);
	read_back(f, r, run, perm, expect);
	free(expect);
	free(perm);
	return elapsed;
}

static void
test_ring_writes_then_reads_back_the_same_bytes(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 64, 128, 100);
	struct run *run = make_run(FILE_IOS);
	uint32_t perm[FILE_IOS];
	uint8_t *expect = malloc((size_t)FILE_IOS * IO_BYTES);

	assert_non_null(expect);
	for (uint32_t i = 0; i < FILE_IOS; i++) {
		perm[i] = i;
	}
	t_shuffle(&f->rng, perm, FILE_IOS);
	t_rng_fill(&f->rng, f->buf, (size_t)FILE_IOS * IO_BYTES);
	memcpy(expect, f->buf, (size_t)FILE_IOS * IO_BYTES);
	program(f, run, perm, true);
	assert_int_equal(run_program(r, run, 64), 0);
	assert_each_completed_once(run);
	for (uint32_t i = 0; i < FILE_IOS; i++) {
		assert_int_equal(run->res[i], IO_BYTES);
	}
	read_back(f, r, run, perm, expect);
	free(expect);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

static void
test_ring_small_ring_wraps_around_many_times(void **state)
{
	struct fixture *f = *state;
	/* 4 SQEs, 8 CQEs, 5000 I/Os: every index wraps hundreds of times. */
	struct tt_gpu_uring *r = ring(f, 4, 8, 100);
	struct run *run = make_run(5000);
	uint32_t *perm = malloc(5000 * sizeof(*perm));

	assert_non_null(perm);
	for (uint32_t i = 0; i < 5000; i++) {
		perm[i] = t_rng_below(&f->rng, FILE_IOS);
	}
	program(f, run, perm, false);
	assert_int_equal(run_program(r, run, 8), 0);
	assert_each_completed_once(run);
	for (uint32_t i = 0; i < run->nr; i++) {
		assert_int_equal(run->res[i], IO_BYTES);
	}
	free(perm);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

static void
test_ring_window_larger_than_the_sq_fills_the_sq(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 2, 64, 100);
	struct run *run = make_run(FILE_IOS);
	uint32_t perm[FILE_IOS];

	for (uint32_t i = 0; i < FILE_IOS; i++) {
		perm[i] = i;
	}
	program(f, run, perm, false);
	/* The window exceeds the SQ: submission waits for SQ space, never overwrites. */
	assert_int_equal(run_program(r, run, 64), 0);
	assert_each_completed_once(run);
	for (uint32_t i = 0; i < run->nr; i++) {
		assert_int_equal(run->res[i], IO_BYTES);
	}
	/* More than the CQ holds is refused: the CQ is the credit. */
	assert_int_equal(run_program(r, run, 65), -EINVAL);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

static void
test_ring_error_completions_reach_their_io(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 8, 16, 100);
	struct run *run = make_run(4);
	/* Kept mapped but inaccessible for the whole run: an unmapped range could be reused by
	 * another mapping (the sanitizers' allocators do) before the I/O reaches it. */
	void *no_access = mmap(NULL, IO_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t perm[4] = {0, 1, 2, 3};

	assert_true(no_access != MAP_FAILED);
	program(f, run, perm, false);
	run->ios[1].off = (uint64_t)FILE_IOS * IO_BYTES;  /* past the end */
	run->ios[2].buf = (uint64_t)(uintptr_t)no_access; /* memory the kernel cannot write */
	run->ios[3].file = 3;                             /* no such registered file */
	assert_int_equal(run_program(r, run, 4), 0);
	assert_each_completed_once(run);
	assert_int_equal(run->res[0], IO_BYTES);
	assert_true(run->res[1] < 0);
	assert_int_equal(run->res[2], -EFAULT);
	assert_int_equal(run->res[3], -EBADF);
	munmap(no_access, IO_BYTES);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

static void
test_ring_sleeping_sq_thread_is_woken_by_the_doorbell(void **state)
{
	struct fixture *f = *state;
	/* The SQ thread sleeps 1 ms after its last work; the twin never enters the kernel. */
	struct tt_gpu_uring *r = ring(f, 16, 32, 1);
	struct run *run = make_run(64);
	uint32_t perm[64];
	struct timespec nap = {0, 30 * 1000 * 1000};

	for (uint32_t i = 0; i < 64; i++) {
		perm[i] = i;
	}
	program(f, run, perm, false);
	for (int round = 0; round < 3; round++) {
		memset(run->calls, 0, 64 * sizeof(*run->calls));
		nanosleep(&nap, NULL); /* long enough for the SQ thread to fall asleep */
		assert_int_equal(run_program(r, run, 16), 0);
		assert_each_completed_once(run);
	}
	assert_true(tt_gpu_uring_wakeups(r) >= 1);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

static void
test_ring_cancel_completes_every_io_once(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 16, 32, 100);
	struct run *run = make_run(400);
	uint32_t *perm = malloc(400 * sizeof(*perm));
	uint32_t ok = 0, cancelled = 0;

	assert_non_null(perm);
	for (uint32_t i = 0; i < 400; i++) {
		perm[i] = i;
	}
	program(f, run, perm, false);
	run->cancel_at = 100;
	assert_int_equal(run_program(r, run, 16), 0);
	assert_each_completed_once(run);
	for (uint32_t i = 0; i < run->nr; i++) {
		ok += run->res[i] == IO_BYTES;
		cancelled += run->res[i] == -ECANCELED;
	}
	assert_int_equal(ok + cancelled, run->nr);
	assert_true(ok >= 100);
	assert_true(cancelled > 0);
	free(perm);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

/* Paced reads leave one at a time, the pace apart, even when the window would take them all at
 * once; the bytes are the same as unpaced. */
static void
test_ring_paced_reads_are_submitted_the_pace_apart(void **state)
{
	enum { NR = 24, PACE_NS = 200000 };
	struct fixture *f = *state;
	struct tt_gpu_uring *r = paced_ring(f, 64, 64, 100, PACE_NS);
	struct run *run = make_run(NR);
	uint32_t perm[NR];
	uint8_t *expect = malloc((size_t)NR * IO_BYTES);
	uint64_t elapsed;

	assert_non_null(expect);
	for (uint32_t i = 0; i < NR; i++) {
		perm[i] = NR - 1 - i;
	}
	t_rng_fill(&f->rng, f->buf, (size_t)NR * IO_BYTES);
	memcpy(expect, f->buf, (size_t)NR * IO_BYTES);
	program(f, run, perm, true); /* writes are not paced unless asked */
	assert_int_equal(run_program(r, run, 64), 0);
	memset(f->buf, 0xa5, (size_t)NR * IO_BYTES);
	memset(run->calls, 0, NR * sizeof(*run->calls));
	program(f, run, perm, false);
	elapsed = timed_run(r, run);
	assert_memory_equal(f->buf, expect, (size_t)NR * IO_BYTES);
	/* NR submissions with the pace between each two: no sooner than (NR - 1) paces. */
	assert_true(elapsed >= (uint64_t)(NR - 1) * PACE_NS);
	free(expect);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

/* Writes punted to io-wq (IOSQE_ASYNC, as for a store of several page-cache-backed files) and
 * paced land intact, the pace apart; reads of the same ring stay unpaced. */
static void
test_ring_punted_writes_are_submitted_the_pace_apart(void **state)
{
	enum { NR = 24, PACE_NS = 200000 };
	struct fixture *f = *state;
	struct tt_gpu_uring_conf conf = {
	    .fds = &f->fd,
	    .nr_fds = 1,
	    .buf = f->buf,
	    .buf_bytes = (uint64_t)FILE_IOS * IO_BYTES,
	    .sq_entries = 64,
	    .cq_entries = 64,
	    .sq_idle_ms = 100,
	    .async = true,
	    .async_writes = true,
	    .write_pace_ns = PACE_NS,
	};
	struct tt_gpu_uring *r = NULL;
	struct run *run = make_run(NR);

	assert_int_equal(tt_gpu_uring_create(&conf, &r), 0);
	/* NR submissions with the pace between each two: no sooner than (NR - 1) paces. */
	assert_true(write_in_order_then_read_back(f, r, run, NR) >= (uint64_t)(NR - 1) * PACE_NS);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

#define MAX_SQ_THREADS 64

/* The io_uring SQ threads of this process (named iou-sqp-PID): their thread ids into \p tids,
 * returns how many. */
static uint32_t
sq_threads(long *tids)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	uint32_t n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL && n < MAX_SQ_THREADS) {
		char path[320], comm[32] = "";
		FILE *fp;

		if (e->d_name[0] == '.') {
			continue;
		}
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		fp = fopen(path, "r");
		if (fp == NULL) {
			continue; /* the thread ended meanwhile */
		}
		if (fgets(comm, sizeof(comm), fp) != NULL && strncmp(comm, "iou-sqp", 7) == 0) {
			tids[n++] = strtol(e->d_name, NULL, 10);
		}
		fclose(fp);
	}
	closedir(d);
	return n;
}

/* SQ threads now that were not in \p before (\p nr_before of them): an earlier ring's may end
 * meanwhile, some time after it was closed, so threads are told apart by id, not counted. */
static uint32_t
new_sq_threads(const long *before, uint32_t nr_before)
{
	long now[MAX_SQ_THREADS];
	uint32_t nr = sq_threads(now), fresh = 0;

	for (uint32_t i = 0; i < nr; i++) {
		bool seen = false;

		for (uint32_t j = 0; j < nr_before; j++) {
			seen = seen || now[i] == before[j];
		}
		fresh += !seen;
	}
	return fresh;
}

/* With host_submits no SQ thread exists, every I/O reaches the kernel through the helper's
 * calls, several to a call when they were queued together, and the helper's CPU time is
 * measured; an SQPOLL ring has its SQ thread. */
static void
test_ring_host_submits_issue_every_io_without_an_sq_thread(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r;
	struct run *run = make_run(FILE_IOS);
	uint32_t perm[FILE_IOS];
	uint8_t *expect = malloc((size_t)FILE_IOS * IO_BYTES);
	long before[MAX_SQ_THREADS];
	uint32_t nr_before = sq_threads(before);

	assert_non_null(expect);
	g_host_submits = true;
	r = ring(f, 64, 128, 100);
	g_host_submits = false;
	assert_int_equal(new_sq_threads(before, nr_before), 0);
	for (uint32_t i = 0; i < FILE_IOS; i++) {
		perm[i] = FILE_IOS - 1 - i;
	}
	t_rng_fill(&f->rng, f->buf, (size_t)FILE_IOS * IO_BYTES);
	memcpy(expect, f->buf, (size_t)FILE_IOS * IO_BYTES);
	program(f, run, perm, true);
	(void)timed_run(r, run);
	read_back(f, r, run, perm, expect);
	assert_int_equal(new_sq_threads(before, nr_before), 0);
	assert_int_equal(tt_gpu_uring_host_submitted(r), 2 * FILE_IOS);
	assert_true(tt_gpu_uring_host_submit_calls(r) >= 1);
	assert_true(tt_gpu_uring_host_submit_calls(r) < 2 * FILE_IOS);
	assert_true(tt_gpu_uring_helper_cpu_ns(r) > 0);
	assert_int_equal(tt_gpu_uring_wakeups(r), 0);
	tt_gpu_uring_destroy(r);
	r = ring(f, 64, 128, 100);
	/* An SQ thread takes its name once it first runs. */
	for (int i = 0; i < 1000 && new_sq_threads(before, nr_before) == 0; i++) {
		struct timespec ms = {0, 1000000};

		nanosleep(&ms, NULL);
	}
	assert_int_equal(new_sq_threads(before, nr_before), 1);
	free(expect);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

static void
sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000};

	while (nanosleep(&t, &t) != 0) {
	}
}

/* How many times the helper polled while this thread slept \p ms; of those, at an idle period
 * into \p idle. */
static uint64_t
polls_during(struct tt_gpu_uring *r, long ms, uint64_t *idle)
{
	uint64_t idle0, idle1;
	uint64_t polls0 = tt_gpu_uring_helper_polls(r, &idle0);

	sleep_ms(ms);
	polls0 = tt_gpu_uring_helper_polls(r, &idle1) - polls0;
	*idle = idle1 - idle0;
	return polls0;
}

/* With nothing moving for 100 ms the helper polls once a millisecond (20 times fewer than at
 * work), I/O queued then still completes, and a kick brings the short period back at once. */
static void
test_ring_idle_helper_polls_slowly_until_kicked(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 64, 128, 100);
	struct run *run = make_run(FILE_IOS);
	uint64_t polls, idle;

	sleep_ms(300);
	polls = polls_during(r, 200, &idle);
	/* At the short period 200 ms would be about 4,000 polls. */
	assert_true(polls <= 300);
	assert_int_equal(idle, polls);
	/* Queued to an idle helper, without a kick: found at its next poll. */
	(void)write_in_order_then_read_back(f, r, run, FILE_IOS);
	/* Idle again, then kicked: no poll at the idle period within the next 50 ms. */
	sleep_ms(200);
	assert_true(polls_during(r, 100, &idle) > 0);
	assert_true(idle > 0);
	tt_gpu_uring_kick(r);
	sleep_ms(10); /* past a poll under way at the kick, which may still count as idle */
	assert_true(polls_during(r, 50, &idle) > 0);
	assert_int_equal(idle, 0);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

/* Settled after a program, the helper idles at once instead of polling at the short period
 * for 100 ms more; a kick after the settle undoes it, and the next program runs as before. */
static void
test_ring_settled_helper_idles_at_once(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 64, 128, 100);
	struct run *run = make_run(FILE_IOS);
	uint64_t polls, idle;

	/* Not settled: the short period goes on after the program. */
	(void)write_in_order_then_read_back(f, r, run, FILE_IOS);
	polls = polls_during(r, 40, &idle);
	assert_true(polls > 100 && idle == 0);
	/* Settled: idle from the next poll. */
	(void)write_in_order_then_read_back(f, r, run, FILE_IOS);
	tt_gpu_uring_settle(r);
	sleep_ms(5);
	polls = polls_during(r, 40, &idle);
	assert_true(polls <= 60);
	assert_int_equal(idle, polls);
	/* A kick right after a settle: the settle is void, the short period is back. */
	tt_gpu_uring_settle(r);
	tt_gpu_uring_kick(r);
	sleep_ms(10);
	polls = polls_during(r, 40, &idle);
	assert_true(polls > 100 && idle == 0);
	(void)write_in_order_then_read_back(f, r, run, FILE_IOS);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

/* Quiet for 2 s the helper polls every 20 ms; I/O queued then, without a kick, still completes
 * at its next poll. */
static void
test_ring_quiet_helper_polls_rarely(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 64, 128, 100);
	struct run *run = make_run(FILE_IOS);
	uint64_t polls, idle;

	sleep_ms(2100);
	polls = polls_during(r, 400, &idle);
	/* Every 20 ms: about 20 polls, where the 1 ms idle period would make about 400. */
	assert_true(polls <= 40);
	assert_true(polls >= 5);
	assert_int_equal(idle, polls);
	/* Found within one deep poll (and the writes' own time), not at the next kick. */
	assert_true(write_in_order_then_read_back(f, r, run, FILE_IOS) < 1000000000ull);
	free_run(run);
	tt_gpu_uring_destroy(r);
}

/* in_flight bounds the I/Os submitted and not yet over, below the window: reads of 4096
 * blocks through 64 slots, at most 5 in flight, reach 5 (the first batch takes them) and never
 * more; more in flight than the window is refused before any I/O. */
static void
test_ring_in_flight_bounds_the_ios_submitted_and_not_over(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 64, 64, 100);
	uint32_t nr = 4096, *perm = malloc(nr * sizeof(*perm));
	struct run *run = make_run(nr);
	struct tt_gpu_uring_program p = {.ios = run->ios,
	                                 .nr = nr,
	                                 .window = 64,
	                                 .in_flight = 5,
	                                 .prepare = prepare,
	                                 .complete = complete,
	                                 .arg = run};

	assert_non_null(perm);
	for (uint32_t i = 0; i < nr; i++) {
		perm[i] = t_rng_below(&f->rng, FILE_IOS);
	}
	program(f, run, perm, false);
	assert_int_equal(tt_gpu_uring_twin_run(r, &p, 5000), 0);
	assert_each_completed_once(run);
	for (uint32_t i = 0; i < nr; i++) {
		assert_int_equal(run->res[i], IO_BYTES);
	}
	assert_int_equal(run->most_open, 5);

	memset(run->calls, 0, nr * sizeof(*run->calls));
	run->prepared = run->completed = 0;
	p.in_flight = 65;
	assert_int_equal(tt_gpu_uring_twin_run(r, &p, 1000), -EINVAL);
	assert_int_equal(run->prepared, 0);
	free_run(run);
	free(perm);
	tt_gpu_uring_destroy(r);
}

static void
test_ring_bad_configurations_are_einval(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring_conf conf = {
	    .fds = &f->fd, .nr_fds = 1, .sq_entries = 8, .cq_entries = 4};
	struct tt_gpu_uring *r = (struct tt_gpu_uring *)(uintptr_t)1;

	assert_int_equal(tt_gpu_uring_create(&conf, &r), -EINVAL); /* CQ smaller than the SQ */
	conf.cq_entries = 16;
	conf.nr_fds = 0;
	assert_int_equal(tt_gpu_uring_create(&conf, &r), -EINVAL);
	conf.nr_fds = TT_GPU_URING_MAX_FILES + 1;
	assert_int_equal(tt_gpu_uring_create(&conf, &r), -EINVAL);
	conf.nr_fds = 1;
	conf.read_pace_ns = 1000001; /* more than a millisecond between reads */
	assert_int_equal(tt_gpu_uring_create(&conf, &r), -EINVAL);
	conf.read_pace_ns = 0;
	conf.write_pace_ns = 1000001; /* or between writes */
	assert_int_equal(tt_gpu_uring_create(&conf, &r), -EINVAL);
	assert_int_equal(tt_gpu_uring_create(NULL, &r), -EINVAL);
	tt_gpu_uring_destroy(NULL);
}

/* ---- the copy engine's protocol (proto.h): groups of reads handed on in order ---- */

/* A load through W bounce slots (of f->buf) copied group by group into a device staging twin,
 * checked as the GPU's workers would: each group whole and once, its I/Os in order after its
 * copy, every byte that of the block its read named. */
struct copy_run {
	struct run run;
	struct fixture *f;
	uint32_t window, group;
	uint32_t in_flight; /* the program's (0: the window) */
	const uint32_t *perm;
	const uint8_t *file; /* the file's blocks as written */
	uint8_t *staging;    /* window x IO_BYTES: the device staging's twin */
	uint8_t *copied;     /* per I/O: its group was copied */
	uint32_t next;       /* the I/O the group being handed on completes next */
	uint32_t copies, partial, bad;
};

static void
copy_group(void *arg, uint32_t first, uint32_t count)
{
	struct copy_run *c = arg;
	uint32_t slot = first % c->window;

	/* A whole group (or a partial last one), once, never across the end of the slots. */
	c->bad += first % c->group != 0 || count == 0 || count > c->group ||
	          slot + count > c->window || c->copied[first];
	c->partial += count != c->group;
	c->copies++;
	c->next = first;
	for (uint32_t i = first; i < first + count; i++) {
		c->copied[i] = 1;
	}
	memcpy(c->staging + (uint64_t)slot * IO_BYTES, c->f->buf + (uint64_t)slot * IO_BYTES,
	       (size_t)count * IO_BYTES);
}

static void
copy_complete(void *arg, uint32_t i, int32_t res)
{
	struct copy_run *c = arg;
	const uint8_t *want = c->file + (uint64_t)(c->perm[i] % FILE_IOS) * IO_BYTES;

	/* After its group's copy, in order within it, unless it was never submitted. */
	if (res != -ECANCELED) {
		c->bad += !c->copied[i] || i != c->next;
		c->next = i + 1;
	}
	if (res == IO_BYTES &&
	    memcmp(c->staging + (uint64_t)(i % c->window) * IO_BYTES, want, IO_BYTES) != 0) {
		c->bad++;
	}
	complete(&c->run, i, res);
}

/* Write every block of the file with fresh bytes (kept in *file), then make \p c a read of
 * \p nr blocks in \p perm's order through \p window slots in groups of \p group. */
static void
copy_run_init(struct copy_run *c, struct fixture *f, struct tt_gpu_uring *r, uint32_t nr,
              const uint32_t *perm, uint32_t window, uint32_t group, uint8_t **file)
{
	struct run *w = make_run(FILE_IOS);
	uint32_t order[FILE_IOS];

	for (uint32_t i = 0; i < FILE_IOS; i++) {
		order[i] = i;
	}
	*file = malloc((size_t)FILE_IOS * IO_BYTES);
	assert_non_null(*file);
	t_rng_fill(&f->rng, f->buf, (size_t)FILE_IOS * IO_BYTES);
	memcpy(*file, f->buf, (size_t)FILE_IOS * IO_BYTES);
	program(f, w, order, true);
	timed_run(r, w);
	free_run(w);

	*c = (struct copy_run){
	    .f = f, .window = window, .group = group, .perm = perm, .file = *file};
	w = make_run(nr);
	c->run = *w; /* the arrays move into c; the shell goes */
	free(w);
	c->staging = malloc((size_t)window * IO_BYTES);
	c->copied = calloc(nr, 1);
	assert_non_null(c->staging);
	assert_non_null(c->copied);
	memset(f->buf, 0xa5, (size_t)FILE_IOS * IO_BYTES);
	for (uint32_t i = 0; i < nr; i++) {
		c->run.ios[i] = (struct tt_gpu_uring_io){
		    .off = (uint64_t)(perm[i] % FILE_IOS) * IO_BYTES,
		    .buf = (uint64_t)(uintptr_t)(f->buf + (uint64_t)(i % window) * IO_BYTES),
		    .len = IO_BYTES,
		};
	}
}

static int
copy_run_go(struct tt_gpu_uring *r, struct copy_run *c)
{
	struct tt_gpu_uring_program p = {
	    .ios = c->run.ios,
	    .nr = c->run.nr,
	    .window = c->window,
	    .in_flight = c->in_flight,
	    .prepare = prepare,
	    .complete = copy_complete,
	    .arg = c,
	    .cancel = &c->run.cancel,
	    .copy_group = c->group,
	    .copy = copy_group,
	};

	return tt_gpu_uring_twin_run(r, &p, 5000);
}

static void
copy_run_free(struct copy_run *c, uint8_t *file)
{
	free(c->run.ios);
	free(c->run.res);
	free(c->run.calls);
	free(c->staging);
	free(c->copied);
	free(file);
}

/* \p nr reads of random blocks through \p window slots in groups of \p group, at most
 * \p in_flight of them at once (0: the window): every read completes once and whole, and each
 * group is copied whole and once and handed on in order with every byte right (copy_complete).
 * Returns the copies; *partial, those of fewer than \p group reads. */
static uint32_t
random_reads_in_groups(struct fixture *f, uint32_t nr, uint32_t window, uint32_t group,
                       uint32_t in_flight, uint32_t *partial)
{
	struct tt_gpu_uring *r = ring(f, 16, 64, 100);
	uint32_t *perm = malloc(nr * sizeof(*perm)), copies;
	struct copy_run c;
	uint8_t *file;

	assert_non_null(perm);
	for (uint32_t i = 0; i < nr; i++) {
		perm[i] = t_rng_below(&f->rng, FILE_IOS);
	}
	copy_run_init(&c, f, r, nr, perm, window, group, &file);
	c.in_flight = in_flight;
	assert_int_equal(copy_run_go(r, &c), 0);
	assert_each_completed_once(&c.run);
	for (uint32_t i = 0; i < nr; i++) {
		assert_int_equal(c.run.res[i], IO_BYTES);
	}
	assert_int_equal(c.bad, 0);
	copies = c.copies;
	*partial = c.partial;
	copy_run_free(&c, file);
	free(perm);
	tt_gpu_uring_destroy(r);
	return copies;
}

/* 1998 reads through 16 slots in groups of 4: the slots wrap 124 times, and the last group
 * holds 2 reads. */
static void
test_ring_copy_groups_hand_reads_on_in_order(void **state)
{
	uint32_t partial;

	assert_int_equal(random_reads_in_groups(*state, 1998, 16, 4, 0, &partial), (1998 + 3) / 4);
	assert_int_equal(partial, 1); /* the last: 2 reads */
}

/* Fewer I/Os in flight than slots, as loads by the copy engine run on page-cache-backed files:
 * groups still complete, whole and in order, and every byte is right. 6 in flight is no
 * multiple of the group, so that groups are often part submitted. */
static void
test_ring_copy_groups_with_fewer_ios_in_flight_than_slots(void **state)
{
	uint32_t partial;

	assert_int_equal(random_reads_in_groups(*state, 1000, 32, 8, 6, &partial), 1000 / 8);
	assert_int_equal(partial, 0);
}

static void
test_ring_copy_groups_carry_errors_and_cancel_once(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 16, 64, 100);
	uint32_t nr = 400, *perm = malloc(nr * sizeof(*perm));
	uint32_t ok = 0, cancelled = 0;
	struct copy_run c;
	uint8_t *file;

	assert_non_null(perm);
	for (uint32_t i = 0; i < nr; i++) {
		perm[i] = i;
	}
	copy_run_init(&c, f, r, nr, perm, 8, 8, &file);
	c.run.ios[5].off = (uint64_t)FILE_IOS * IO_BYTES; /* past the end: its group goes on */
	c.run.cancel_at = 101; /* cancelled inside a group: it ends where submissions did */
	assert_int_equal(copy_run_go(r, &c), 0);
	assert_each_completed_once(&c.run);
	assert_true(c.run.res[5] < 0);
	for (uint32_t i = 0; i < nr; i++) {
		ok += c.run.res[i] == IO_BYTES;
		cancelled += c.run.res[i] == -ECANCELED;
	}
	assert_int_equal(ok + cancelled + 1, nr);
	assert_true(ok >= 100);
	assert_true(cancelled > 0);
	assert_int_equal(c.bad, 0);
	copy_run_free(&c, file);
	free(perm);
	tt_gpu_uring_destroy(r);
}

static void
test_ring_copy_groups_that_do_not_divide_the_window_are_einval(void **state)
{
	struct fixture *f = *state;
	struct tt_gpu_uring *r = ring(f, 16, 32, 100);
	struct run *run = make_run(8);
	struct tt_gpu_uring_program p = {.ios = run->ios,
	                                 .nr = 8,
	                                 .window = 16,
	                                 .complete = complete,
	                                 .arg = run,
	                                 .copy_group = 3,
	                                 .copy = copy_group};

	assert_int_equal(tt_gpu_uring_twin_run(r, &p, 1000), -EINVAL);
	p.copy_group = 4;
	p.copy = NULL;
	assert_int_equal(tt_gpu_uring_twin_run(r, &p, 1000), -EINVAL);
	for (uint32_t i = 0; i < 8; i++) {
		assert_int_equal(run->calls[i], 0); /* refused before any I/O */
	}
	free_run(run);
	tt_gpu_uring_destroy(r);
}

static int
host_group_setup(void **state)
{
	(void)state;
	g_host_submits = true;
	return 0;
}

static int
host_group_teardown(void **state)
{
	(void)state;
	g_host_submits = false;
	return 0;
}

int
main(void)
{
/* Both issuers: what does not concern the SQ thread. */
#define EITHER_ISSUER_TESTS                                                                        \
	cmocka_unit_test_setup_teardown(test_ring_writes_then_reads_back_the_same_bytes, setup,    \
	                                teardown),                                                 \
	    cmocka_unit_test_setup_teardown(test_ring_small_ring_wraps_around_many_times, setup,   \
	                                    teardown),                                             \
	    cmocka_unit_test_setup_teardown(test_ring_window_larger_than_the_sq_fills_the_sq,      \
	                                    setup, teardown),                                      \
	    cmocka_unit_test_setup_teardown(test_ring_error_completions_reach_their_io, setup,     \
	                                    teardown),                                             \
	    cmocka_unit_test_setup_teardown(test_ring_cancel_completes_every_io_once, setup,       \
	                                    teardown),                                             \
	    cmocka_unit_test_setup_teardown(test_ring_paced_reads_are_submitted_the_pace_apart,    \
	                                    setup, teardown),                                      \
	    cmocka_unit_test_setup_teardown(test_ring_idle_helper_polls_slowly_until_kicked,       \
	                                    setup, teardown),                                      \
	    cmocka_unit_test_setup_teardown(test_ring_quiet_helper_polls_rarely, setup, teardown), \
	    cmocka_unit_test_setup_teardown(test_ring_settled_helper_idles_at_once, setup,         \
	                                    teardown),                                             \
	    cmocka_unit_test_setup_teardown(test_ring_copy_groups_hand_reads_on_in_order, setup,   \
	                                    teardown),                                             \
	    cmocka_unit_test_setup_teardown(test_ring_copy_groups_carry_errors_and_cancel_once,    \
	                                    setup, teardown),                                      \
	    cmocka_unit_test_setup_teardown(                                                       \
	        test_ring_copy_groups_with_fewer_ios_in_flight_than_slots, setup, teardown),       \
	    cmocka_unit_test_setup_teardown(                                                       \
	        test_ring_in_flight_bounds_the_ios_submitted_and_not_over, setup, teardown)
	const struct CMUnitTest host_tests[] = {EITHER_ISSUER_TESTS};
	const struct CMUnitTest tests[] = {
	    EITHER_ISSUER_TESTS,
	    cmocka_unit_test_setup_teardown(
	        test_ring_host_submits_issue_every_io_without_an_sq_thread, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ring_sleeping_sq_thread_is_woken_by_the_doorbell,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ring_punted_writes_are_submitted_the_pace_apart,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ring_bad_configurations_are_einval, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(
	        test_ring_copy_groups_that_do_not_divide_the_window_are_einval, setup, teardown),
	};
	struct tt_gpu_uring_conf probe_conf;
	struct tt_gpu_uring *probe = NULL;
	int fd, rc;

	if (!t_tmpdir_supports_odirect()) {
		return 77;
	}
	/* Kernels without NO_MMAP/SQPOLL, or where io_uring is refused: skip, not fail. */
	fd = open("/dev/null", O_RDONLY);
	probe_conf = (struct tt_gpu_uring_conf){
	    .fds = &fd, .nr_fds = 1, .sq_entries = 2, .cq_entries = 4, .sq_idle_ms = 10};
	rc = tt_gpu_uring_create(&probe_conf, &probe);
	tt_gpu_uring_destroy(probe);
	close(fd);
	if (rc == -EOPNOTSUPP || rc == -ENOSYS || rc == -EPERM) {
		return 77;
	}
	rc = cmocka_run_group_tests_name("sqpoll", tests, NULL, NULL);
	return rc + cmocka_run_group_tests_name("host", host_tests, host_group_setup,
	                                        host_group_teardown);
}
