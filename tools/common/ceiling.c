/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The machine's limit: see ceiling.h. Written against the system calls directly (and the CUDA
 * runtime for the pinned copies, gpucopy.h) so that it shares no I/O code with the store.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "ceiling.h"
#include "gpucopy.h"

#define MIB (1ull << 20)
#define DEFAULT_BUDGET_S 8.0
#define DEFAULT_FILE_BYTES (128 * MIB)
/* On page-cache-backed storage (tmpfs) a read is a copy out of memory, and a region the CPU's
 * last-level cache holds is read from that cache, faster than any storage (docs/results.md,
 * C3). A drive's data is never in the
 * CPU's cache, so there every scratch file is at least this many times the largest cache
 * (this many bytes where sysfs does not say how large it is). */
#define CACHE_REGION_FACTOR 4u
#define UNKNOWN_CACHE_PROOF_BYTES (1024 * MIB)
#define DEFAULT_MAX_FILES 16u
#define DEFAULT_MEM_BYTES (1024 * MIB)
/* A point runs at least this long (timer and thread start-up noise) and at most this long. */
#define POINT_MIN_S 0.02
#define POINT_MAX_S 2.0
/* Points a direction's search is expected to take: the share of the budget each one gets. */
#define EXPECTED_POINTS 24u
/* A round of the search that gains less than this over the best so far ends it. */
#define MIN_GAIN 1.02
#define MAX_ROUNDS 3
/* Scratch files never take more than this share of a filesystem's free space. */
#define SPACE_SHARE 4u
/* Pinned copies: the buffer, and how long each direction is repeated. */
#define COPY_BYTES (256 * MIB)
#define COPY_S 0.25

static const uint32_t io_sizes[] = {256u << 10, 1u << 20, 4u << 20, 16u << 20};
#define NR_SIZES (sizeof(io_sizes) / sizeof(io_sizes[0]))
/* I/Os each thread keeps in flight. A virtual or networked disk serves more in parallel than the
 * threads of a sweep with one each: on the VM's disk one io_uring reader at depth 32 outran 32
 * synchronous threads, and so did the engines (docs/results.md, H7). Depth 1 is a synchronous
 * pread/pwrite; deeper ones are an io_uring per thread. */
static const uint32_t io_depths[] = {1, 4, 16, 32};
#define NR_DEPTHS (sizeof(io_depths) / sizeof(io_depths[0]))
#define MAX_IO (16u << 20)
#define MAX_CANDS 12
/* The memory a point's threads move through: MODE_CYCLE, all of mem_bytes in turn; MODE_STAGED,
 * each thread only the buffers its I/Os in flight need; MODE_THROUGH + i, through_per_slot[i]
 * buffers per I/O in flight, each crossing to the through phase's destination. */
enum { MODE_CYCLE, MODE_STAGED, MODE_THROUGH };
#define MAX_PER_SLOT 8u
static const uint32_t through_per_slot[] = {1, 2, 4, MAX_PER_SLOT};
#define NR_PER_SLOT (sizeof(through_per_slot) / sizeof(through_per_slot[0]))
#define NR_MODES (MODE_THROUGH + NR_PER_SLOT)
#define MAX_RING_DEPTH 32u
#define THROUGH_MAX_BUFS (MAX_RING_DEPTH * MAX_PER_SLOT)

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void
ceiling_conf_init(struct ceiling_conf *c, const char *const *dirs, uint32_t nr_dirs)
{
	memset(c, 0, sizeof(*c));
	for (uint32_t i = 0; i < nr_dirs && i < CEILING_MAX_DIRS; i++) {
		c->dirs[i] = dirs[i];
	}
	c->nr_dirs = nr_dirs < CEILING_MAX_DIRS ? nr_dirs : CEILING_MAX_DIRS;
	c->budget_s = DEFAULT_BUDGET_S;
	c->file_bytes = DEFAULT_FILE_BYTES;
	c->gpu = -1;
}

/* ---- one point: T threads, each with D I/Os in flight ---- */

struct run {
	const int *fds;
	uint32_t files;
	uint64_t blocks; /* I/Os of io_bytes per file region */
	uint64_t start;  /* first block of this run in every file */
	uint32_t io_bytes;
	uint32_t depth; /* I/Os in flight per thread (0 or 1: one synchronous I/O at a time) */
	bool write;
	uint8_t *mem;
	uint64_t
	    slice; /* bytes of mem per thread, a multiple of io_bytes, depth of them at least */
	/* Through points: where each thread's buffers cross to (a read's bytes after they land, a
	 * write's before they go), dest_share bytes per thread; NULL for the others. In GPU
	 * memory each buffer has its own place there; in host memory the copies move through the
	 * whole share in turn, as a host-KV load lands in memory as large as the KV. */
	uint8_t *dest;
	uint64_t dest_share;
	int gpu; /* dest is memory of this GPU; -1: host memory, copied by the thread itself */
	uint64_t deadline_ns;
	uint64_t limit; /* I/Os to issue in all (0: until the deadline) */
	uint64_t next;  /* next I/O number; atomic */
	int error;      /* first error; atomic */
	/* Through points: each thread sets up its stream, events and ring, then waits here until
	 * all have; the point's clock and deadline start when the gate opens. */
	pthread_mutex_t gate_mu;
	pthread_cond_t gate_cv;
	uint32_t gate_ready;
	bool gate_open;
};

struct worker {
	struct run *r;
	uint32_t id;
	uint64_t bytes, end_ns;
	pthread_t tid;
};

/* The whole of one I/O; -errno, or -EIO where the file ends early. */
static int
io_full(int fd, uint8_t *buf, uint32_t len, uint64_t off, bool write)
{
	uint32_t done = 0;

	while (done < len) {
		ssize_t n = write ? pwrite(fd, buf + done, len - done, (off_t)(off + done))
		                  : pread(fd, buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			return n < 0 ? -errno : -EIO;
		}
		done += (uint32_t)n;
	}
	return 0;
}

/* Record the first error of a point. */
static void
run_fail(struct run *r, int rc)
{
	int zero = 0;

	__atomic_compare_exchange_n(&r->error, &zero, rc, false, __ATOMIC_RELAXED,
	                            __ATOMIC_RELAXED);
}

/* The next I/O number for a worker that has issued \p issued, or UINT64_MAX when the point is
 * over. The deadline ends a worker's I/O, never prevents its first: on a loaded machine every
 * thread of a point may start after the deadline, and a point that moved nothing would be a
 * measurement of nothing. */
static uint64_t
run_next(struct run *r, uint64_t issued)
{
	uint64_t k;

	if (__atomic_load_n(&r->error, __ATOMIC_RELAXED) != 0 ||
	    (r->limit == 0 && issued > 0 && now_ns() >= r->deadline_ns)) {
		return UINT64_MAX;
	}
	k = __atomic_fetch_add(&r->next, 1, __ATOMIC_RELAXED);
	return r->limit != 0 && k >= r->limit ? UINT64_MAX : k;
}

/* I/O k goes to file k mod F, so that every file is busy at once; each file is moved through
 * sequentially from the run's start. Its offset in that file: */
static uint64_t
run_offset(const struct run *r, uint64_t k)
{
	return (r->start + k / r->files) % r->blocks * r->io_bytes;
}

/* One I/O a time, synchronous. */
static void
worker_sync(struct worker *w, uint8_t *slice, uint64_t bufs)
{
	struct run *r = w->r;
	uint64_t k, i = 0;

	while ((k = run_next(r, i)) != UINT64_MAX) {
		int rc = io_full(r->fds[k % r->files], slice + i++ % bufs * r->io_bytes,
		                 r->io_bytes, run_offset(r, k), r->write);

		if (rc < 0) {
			run_fail(r, rc);
			break;
		}
		w->bytes += r->io_bytes;
	}
}

/* One slot of a worker's ring: its I/O, how much of it is done, and which of the worker's
 * buffers it moves (slot j takes buffers j, j + depth, j + 2 x depth, ... in turn). */
struct ring_slot {
	uint64_t k;
	uint64_t buf;
	uint32_t done;
};

/* Queue the rest of slot \p sl's I/O into its buffer of the worker's \p slice. */
static void
ring_queue(struct io_uring *ring, const struct run *r, uint8_t *slice, struct ring_slot *sl)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring); /* never NULL: one per slot */
	int fd = r->fds[sl->k % r->files];
	uint64_t off = run_offset(r, sl->k) + sl->done;
	uint8_t *buf = slice + sl->buf * r->io_bytes;

	if (r->write) {
		io_uring_prep_write(sqe, fd, buf + sl->done, r->io_bytes - sl->done, off);
	} else {
		io_uring_prep_read(sqe, fd, buf + sl->done, r->io_bytes - sl->done, off);
	}
	io_uring_sqe_set_data(sqe, sl);
}

/* ---- I/Os in flight, and through points' copies beyond them ---- */

/* Where a through point's buffers cross to: with a GPU, copies queued on a stream of the
 * thread's own, one event per buffer so that a buffer is reused only once its copy is done
 * (waited for by sleeping: a spinning wait would take a core from the copies measured beside
 * it); into host memory the thread copies each buffer itself, as the host-KV path scatters.
 * Other points have none (dest NULL): every step is a no-op. */
struct sink {
	int gpu;
	uint8_t *host, *dest;
	uint32_t io_bytes;
	uint64_t bufs;
	uint64_t dest_span, cursor; /* host: the share's whole I/Os, and where the next copy goes */
	void *stream;
	void *ev[THROUGH_MAX_BUFS];
	bool pending[THROUGH_MAX_BUFS]; /* a copy of this buffer is queued and not waited for */
};

static int
sink_open(struct sink *k, const struct run *r, uint8_t *slice, uint8_t *dest, uint64_t bufs)
{
	int rc;

	*k = (struct sink){.gpu = r->gpu,
	                   .host = slice,
	                   .dest = dest,
	                   .io_bytes = r->io_bytes,
	                   .bufs = dest != NULL ? bufs : 0,
	                   .dest_span = r->dest_share / r->io_bytes * r->io_bytes};
	if (dest == NULL || k->gpu < 0) {
		return 0;
	}
	/* The thread's copies go to this device's memory from a stream of it. */
	rc = gpucopy_set_device(k->gpu);
	if (rc == 0) {
		rc = gpucopy_stream_create(k->gpu, &k->stream);
	}
	for (uint64_t b = 0; rc == 0 && b < bufs; b++) {
		rc = gpucopy_event_create(k->gpu, &k->ev[b]);
	}
	return rc;
}

/* Queue (GPU) or make (host) buffer \p b's crossing: into it for a write, out of it for a read. */
static int
sink_copy(struct sink *k, uint64_t b, bool write)
{
	uint8_t *h = k->host + b * k->io_bytes, *d = k->dest + b * k->io_bytes;
	int rc;

	if (k->dest == NULL) {
		return 0;
	}
	if (k->gpu < 0) {
		d = k->dest + k->cursor;
		k->cursor = (k->cursor + k->io_bytes) % k->dest_span;
		memcpy(write ? h : d, write ? d : h, k->io_bytes);
		return 0;
	}
	rc = gpucopy_copy_async(write ? h : d, write ? d : h, k->io_bytes, k->stream);
	if (rc == 0) {
		rc = gpucopy_event_record(k->ev[b], k->stream);
	}
	k->pending[b] = rc == 0;
	return rc;
}

/* Wait for buffer \p b's queued copy, if any. */
static int
sink_wait(struct sink *k, uint64_t b)
{
	if (b >= k->bufs || !k->pending[b]) {
		return 0; /* no copy queued (a point without a destination has no buffers here) */
	}
	k->pending[b] = false;
	return gpucopy_event_sync(k->ev[b]);
}

/* Buffer \p b is about to be written out: its bytes must have come in. With a GPU the copy into
 * \p ahead, the slot's next buffer, is queued too, so that it crosses while \p b is written. */
static int
sink_fill(struct sink *k, uint64_t b, uint64_t ahead)
{
	int rc = 0;

	if (k->dest == NULL || k->gpu < 0) {
		return sink_copy(k, b, true);
	}
	if (!k->pending[b]) {
		rc = sink_copy(k, b, true);
	}
	rc = rc == 0 ? sink_wait(k, b) : rc;
	if (rc == 0 && ahead != b && !k->pending[ahead]) {
		rc = sink_copy(k, ahead, true);
	}
	return rc;
}

/* Wait for every copy still queued. */
static int
sink_drain(struct sink *k)
{
	int rc = 0;

	for (uint64_t b = 0; b < k->bufs; b++) {
		int one = sink_wait(k, b);

		rc = rc == 0 ? one : rc;
	}
	return rc;
}

/* Release the stream and events (every copy waited for). */
static void
sink_free(struct sink *k)
{
	for (uint64_t b = 0; b < k->bufs; b++) {
		gpucopy_event_destroy(k->ev[b]);
	}
	gpucopy_stream_destroy(k->stream);
}

/* The buffer after \p buf in its slot's turn (slot j takes j, j + depth, ... below span). */
static uint64_t
slot_next_buf(uint64_t buf, uint32_t depth, uint64_t span)
{
	return buf + depth < span ? buf + depth : buf % depth;
}

/* Get buffer \p b ready for the slot's next I/O: a read must not land before the copy out of
 * its last one is done; a write's bytes must have come in. */
static int
through_ready(struct sink *k, bool write, uint64_t b, uint32_t depth, uint64_t span)
{
	return write ? sink_fill(k, b, slot_next_buf(b, depth, span)) : sink_wait(k, b);
}

/* Depth I/Os in flight through an io_uring of the worker's own; short transfers are resumed.
 * Each new I/O moves the slot's next buffer, so the I/Os cycle through the whole slice as the
 * one-at-a-time workers do: a slot that kept one buffer would keep threads x depth x size bytes
 * in the CPU's cache, and on tmpfs such reads run far faster than I/Os whose buffers outgrow
 * that cache (C3, C8).
 * On a through point (\p dest) each buffer also crosses to dest; the thread's stream, events
 * and ring are set up before the point's clock starts (run_point's gate), so that a point of
 * many threads and buffers is not charged for them. Its reads count once their bytes are there
 * (the end waits for the last copies); writes once written. */
static void
worker_ring(struct worker *w, uint8_t *slice, uint8_t *dest, uint64_t bufs)
{
	struct run *r = w->r;
	struct ring_slot sl[MAX_RING_DEPTH];
	struct io_uring ring;
	struct sink *k = calloc(1, sizeof(*k));
	uint32_t depth = r->depth < MAX_RING_DEPTH ? r->depth : MAX_RING_DEPTH, inflight = 0;
	/* The buffers the slots take in turn; measure() runs no point with fewer than depth. */
	uint64_t issued = 0, span = bufs / depth * depth;
	int rc = k == NULL ? -ENOMEM : sink_open(k, r, slice, dest, span);
	bool ring_up = false;

	if (rc == 0) {
		rc = io_uring_queue_init(depth, &ring, 0);
		ring_up = rc == 0;
	}
	if (dest != NULL) {
		/* Set up (or failed): wait for the others and the clock. */
		pthread_mutex_lock(&r->gate_mu);
		r->gate_ready++;
		pthread_cond_broadcast(&r->gate_cv);
		while (!r->gate_open) {
			pthread_cond_wait(&r->gate_cv, &r->gate_mu);
		}
		pthread_mutex_unlock(&r->gate_mu);
	}
	for (uint32_t j = 0; rc == 0 && j < depth; j++) {
		uint64_t next = run_next(r, issued);

		if (next == UINT64_MAX) {
			break;
		}
		sl[j] = (struct ring_slot){.k = next, .buf = j};
		rc = through_ready(k, r->write, j, depth, span);
		if (rc == 0) {
			ring_queue(&ring, r, slice, &sl[j]);
			issued++;
			inflight++;
		}
	}
	/* After an error the I/Os in flight are reaped, not left to land in buffers the caller
	 * unpins. */
	while (inflight > 0) {
		struct io_uring_cqe *cqe;
		struct ring_slot *one;
		int res = io_uring_submit_and_wait(&ring, 1);

		if (res < 0 && res != -EINTR) {
			rc = rc == 0 ? res : rc;
			break; /* the ring itself failed: nothing more can be reaped */
		}
		if (io_uring_peek_cqe(&ring, &cqe) != 0) {
			continue;
		}
		one = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		if (rc != 0) {
			inflight--;
			continue;
		}
		if (res == -EINTR || res == -EAGAIN) {
			ring_queue(&ring, r, slice, one); /* again, as it was */
			continue;
		}
		if (res <= 0) {
			rc = res < 0 ? res : -EIO; /* the file ended early */
			inflight--;
			continue;
		}
		one->done += (uint32_t)res;
		if (one->done < r->io_bytes) {
			ring_queue(&ring, r, slice, one); /* the rest of a short transfer */
			continue;
		}
		if (!r->write) {
			rc = sink_copy(k, one->buf, false); /* landed: across it goes */
		}
		w->bytes += rc == 0 ? r->io_bytes : 0;
		one->k = rc == 0 ? run_next(r, issued) : UINT64_MAX;
		one->done = 0;
		if (one->k != UINT64_MAX) {
			one->buf = slot_next_buf(one->buf, depth, span);
			rc = through_ready(k, r->write, one->buf, depth, span);
		}
		if (rc != 0 || one->k == UINT64_MAX) {
			inflight--;
			continue;
		}
		ring_queue(&ring, r, slice, one);
		issued++;
	}
	if (ring_up) {
		io_uring_queue_exit(&ring);
	}
	if (k != NULL) {
		/* A read is in only once its copy is done; a write's copies queued ahead of a
		 * buffer never written again are no part of the point. */
		int drained;

		if (r->write) {
			w->end_ns = now_ns();
		}
		drained = sink_drain(k);
		rc = rc == 0 ? drained : rc;
		if (!r->write) {
			w->end_ns = now_ns();
		}
		sink_free(k);
		free(k);
	}
	if (rc != 0) {
		run_fail(r, rc);
	}
	if (w->end_ns == 0) {
		w->end_ns = now_ns();
	}
}

/* Whether this process may set up an io_uring (a container's seccomp profile or the
 * io_uring_disabled sysctl may refuse it). */
static bool
ring_works(void)
{
	struct io_uring ring;

	if (io_uring_queue_init(2, &ring, 0) < 0) {
		return false;
	}
	io_uring_queue_exit(&ring);
	return true;
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct run *r = w->r;
	uint8_t *slice = r->mem + (uint64_t)w->id * r->slice;

	if (r->dest != NULL || r->depth > 1) {
		worker_ring(w, slice,
		            r->dest != NULL ? r->dest + (uint64_t)w->id * r->dest_share : NULL,
		            r->slice / r->io_bytes);
		return NULL; /* it sets end_ns */
	}
	worker_sync(w, slice, r->slice / r->io_bytes);
	w->end_ns = now_ns();
	return NULL;
}

/* Run \p threads workers over \p r; GB/s of all of them (bytes / the slowest's end), or -errno.
 */
static double
run_point(struct run *r, uint32_t threads)
{
	struct worker w[CEILING_MAX_THREADS];
	uint64_t t0, end = 0, bytes = 0, point_ns = r->deadline_ns;
	uint32_t started = 0;
	bool gated = r->dest != NULL;

	r->next = 0;
	r->error = 0;
	r->gate_ready = 0;
	r->gate_open = false;
	pthread_mutex_init(&r->gate_mu, NULL);
	pthread_cond_init(&r->gate_cv, NULL);
	t0 = now_ns();
	if (r->limit == 0) {
		r->deadline_ns = t0 + point_ns;
	}
	for (; started < threads; started++) {
		w[started] = (struct worker){.r = r, .id = started};
		if (pthread_create(&w[started].tid, NULL, worker_main, &w[started]) != 0) {
			r->error = -EAGAIN;
			break;
		}
	}
	if (gated) {
		pthread_mutex_lock(&r->gate_mu);
		while (r->gate_ready < started) {
			pthread_cond_wait(&r->gate_cv, &r->gate_mu);
		}
		t0 = now_ns();
		if (r->limit == 0) {
			r->deadline_ns = t0 + point_ns;
		}
		r->gate_open = true;
		pthread_cond_broadcast(&r->gate_cv);
		pthread_mutex_unlock(&r->gate_mu);
	}
	for (uint32_t i = 0; i < started; i++) {
		pthread_join(w[i].tid, NULL);
		bytes += w[i].bytes;
		end = w[i].end_ns > end ? w[i].end_ns : end;
	}
	pthread_cond_destroy(&r->gate_cv);
	pthread_mutex_destroy(&r->gate_mu);
	if (r->error != 0) {
		return r->error;
	}
	return end > t0 ? (double)bytes / (double)(end - t0) : 0;
}

/* ---- the search ---- */

struct search {
	const struct ceiling_conf *c;
	const int *fds;
	uint64_t file_bytes;
	uint8_t *mem;
	uint64_t mem_bytes;
	double point_s;
	uint64_t stop_ns; /* the direction's share of the budget ends here */
	uint64_t cursor;  /* where the next point starts in every file, in bytes */
	uint32_t thr[MAX_CANDS], nr_thr;
	uint32_t fil[MAX_CANDS], nr_fil;
	uint32_t nr_depths;    /* 1 where io_uring is refused: synchronous I/O only */
	uint32_t phase_points; /* points measured in the phase under way */
	/* The through phase's destination (mem_bytes of GPU or host memory), and its GPU (-1: the
	 * host); NULL: no through phase. */
	uint8_t *dest;
	int dest_gpu;
	/* GB/s per point [threads][files][size][depth][memory mode]; 0: not yet measured */
	double memo[MAX_CANDS][MAX_CANDS][NR_SIZES][NR_DEPTHS][NR_MODES];
};

/* Add \p v to the sorted set \p set. */
static void
add_cand(uint32_t *set, uint32_t *n, uint32_t v)
{
	uint32_t i = 0;

	while (i < *n && set[i] < v) {
		i++;
	}
	if ((i < *n && set[i] == v) || *n == MAX_CANDS) {
		return;
	}
	memmove(set + i + 1, set + i, (*n - i) * sizeof(*set));
	set[i] = v;
	(*n)++;
}

/* Measure point (files fi, threads ti, size si, depth di, memory mode mi) unless known; its
 * GB/s, or -errno. A through point's best goes to \p sw's best (the caller passes the through
 * sweep), a staged one's to its staged. */
static double
measure(struct search *s, struct ceiling_sweep *sw, bool write, const uint32_t *p)
{
	uint32_t fi = p[0], ti = p[1], si = p[2], di = p[3], mi = p[4];
	uint32_t bs = io_sizes[si], threads = s->thr[ti], depth = io_depths[di];
	struct ceiling_point *best = mi == MODE_STAGED ? &sw->staged : &sw->best;
	uint64_t per_thread = mi == MODE_CYCLE ? s->mem_bytes / threads / bs * bs
	                      : mi == MODE_STAGED
	                          ? (uint64_t)bs * depth
	                          : (uint64_t)bs * depth * through_per_slot[mi - MODE_THROUGH];
	struct run r = {
	    .fds = s->fds,
	    .files = s->fil[fi],
	    .blocks = s->file_bytes / bs,
	    .start = s->cursor / bs,
	    .io_bytes = bs,
	    .depth = depth,
	    .write = write,
	    .mem = s->mem,
	    .slice = per_thread,
	    .deadline_ns = (uint64_t)(s->point_s * 1e9),
	    .dest = mi >= MODE_THROUGH ? s->dest : NULL,
	    .dest_share = s->dest_gpu >= 0 ? per_thread : s->mem_bytes / threads,
	    .gpu = s->dest_gpu,
	};
	double *memo = &s->memo[ti][fi][si][di][mi];
	struct ceiling_point pt;
	double gbps;

	if (*memo != 0) {
		return *memo;
	}
	if (r.slice < (uint64_t)bs * depth || r.slice * threads > s->mem_bytes ||
	    (r.dest != NULL && r.slice / bs > THROUGH_MAX_BUFS)) {
		*memo = 1e-9; /* no memory for that many I/Os of that size in flight: not a point */
		return *memo;
	}
	gbps = run_point(&r, threads);
	if (gbps < 0) {
		return gbps;
	}
	/* The next point moves on to bytes this one did not touch. */
	s->cursor = (s->cursor + (uint64_t)(r.next / r.files + 1) * bs) % s->file_bytes;
	*memo = gbps > 0 ? gbps : 1e-9;
	s->phase_points++;
	pt = (struct ceiling_point){gbps, threads, r.files, bs, depth, r.slice * threads};
	if (sw->nr_points < CEILING_MAX_POINTS) {
		sw->points[sw->nr_points++] = pt;
	}
	if (gbps > best->gbps) {
		*best = pt;
	}
	return gbps;
}

/* One dimension (0 files, 1 threads, 2 size, 3 depth, 4 the through phase's buffers per I/O in
 * flight) swept with the others at the current point (at[4] is the memory mode); moves the
 * point to the best. Returns 0, 1 when the budget ran out, or -errno. */
static int
sweep_dim(struct search *s, struct ceiling_sweep *sw, bool write, int dim, uint32_t *at)
{
	uint32_t n = dim == 0   ? s->nr_fil
	             : dim == 1 ? s->nr_thr
	             : dim == 2 ? (uint32_t)NR_SIZES
	             : dim == 3 ? s->nr_depths
	                        : (uint32_t)NR_PER_SLOT;
	uint32_t first = dim == 4 ? MODE_THROUGH : 0; /* dim 4's values are the through modes */
	double best = 0;
	uint32_t best_i = at[dim];

	for (uint32_t i = first; i < first + n; i++) {
		uint32_t p[5] = {at[0], at[1], at[2], at[3], at[4]};
		double g;

		p[dim] = i;
		/* The budget cuts a phase of the search, never its first point: a direction asked
		 * for is always measured. */
		if (s->memo[p[1]][p[0]][p[2]][p[3]][p[4]] == 0 && s->phase_points > 0 &&
		    now_ns() >= s->stop_ns) {
			return 1;
		}
		g = measure(s, sw, write, p);
		if (g < 0) {
			return (int)g;
		}
		if (g > best) {
			best = g;
			best_i = i;
		}
	}
	at[dim] = best_i;
	return 0;
}

/* Rounds of the coordinate search from \p at until a round gains little over \p best (the
 * phase's best point); the memory mode at[4] is held, except in a through phase (at[4] a
 * through mode), which sweeps its buffers per I/O in flight first. Returns 0, 1 when the
 * budget ran out, or -errno. */
static int
search_rounds(struct search *s, struct ceiling_sweep *sw, bool write, uint32_t *at,
              const struct ceiling_point *best)
{
	bool through = at[4] >= MODE_THROUGH;
	double before = 0;

	s->phase_points = 0;
	for (int round = 0; round < MAX_ROUNDS; round++) {
		/* Files, threads, depth, then size: the depth before the size, so that depths are
		 * tried where the memory holds them (threads x depth x size at most mem_bytes). */
		static const int order[5] = {4, 0, 1, 3, 2};

		for (int d = through ? 0 : 1; d < 5; d++) {
			int rc = sweep_dim(s, sw, write, order[d], at);

			if (rc != 0) {
				return rc;
			}
		}
		if (best->gbps < before * MIN_GAIN) {
			break;
		}
		before = best->gbps;
	}
	return 0;
}

/* Where \p v is in \p set of \p n, into \p at; false (and \p at unchanged) where it is not. */
static bool
cand_index(const uint32_t *set, uint32_t n, uint32_t v, uint32_t *at)
{
	for (uint32_t i = 0; i < n; i++) {
		if (set[i] == v) {
			*at = i;
			return true;
		}
	}
	return false;
}

/* Where point \p p is in the search's candidates (files, threads, size, depth) into \p at;
 * false where it is not one of them (no point measured). */
static bool
point_index(const struct search *s, const struct ceiling_point *p, uint32_t *at)
{
	return cand_index(s->fil, s->nr_fil, p->files, &at[0]) &&
	       cand_index(s->thr, s->nr_thr, p->threads, &at[1]) &&
	       cand_index(io_sizes, NR_SIZES, p->io_bytes, &at[2]) &&
	       cand_index(io_depths, s->nr_depths, p->depth, &at[3]);
}

/* One direction: the search through mem_bytes, then, with \p staged, the staged one, then, with
 * \p through (the through sweep), the through phase, both from the best point through mem_bytes;
 * each phase gets an equal part of the share (a later one what an earlier left). An error of the
 * through phase is left in \p through_rc (it is reported beside the limit, which stands
 * without it); any other is returned. */
static int
search_dir(struct search *s, struct ceiling_sweep *sw, bool write, double share_s, bool staged,
           struct ceiling_sweep *through, int *through_rc)
{
	/* Start: one thread per online CPU (the nearest candidate), one file, 4 MiB, one I/O in
	 * flight per thread, through mem_bytes. */
	uint32_t cpus = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN), at[5] = {0, 0, 2, 0, MODE_CYCLE};
	uint32_t phases = 1 + staged + (through != NULL), phase = 1, best[5];
	uint64_t start = now_ns(), share_ns = (uint64_t)(share_s * 1e9);
	int rc;

	for (uint32_t i = 0; i < s->nr_thr; i++) {
		if (s->thr[i] <= cpus) {
			at[1] = i;
		}
	}
	memset(s->memo, 0, sizeof(s->memo));
	s->stop_ns = start + share_ns * phase++ / phases;
	rc = search_rounds(s, sw, write, at, &sw->best);
	sw->cut = rc == 1;
	if (rc < 0) {
		return rc;
	}
	/* The best point, which is not where the search stopped when the budget cut a sweep. */
	memcpy(best, at, sizeof(best));
	point_index(s, &sw->best, best);
	if (staged) {
		s->stop_ns = start + share_ns * phase++ / phases;
		memcpy(at, best, sizeof(best));
		at[4] = MODE_STAGED;
		rc = search_rounds(s, sw, write, at, &sw->staged);
		sw->cut = sw->cut || rc == 1;
		if (rc < 0) {
			return rc;
		}
	}
	if (through != NULL) {
		/* Not from the staged best: its buffers, small enough for the CPU's cache, were
		 * the slowest start measured once the DMA reads them too, far below the best
		 * through 1 GiB (C7). The buffers per I/O in flight are swept first, from one. */
		memcpy(at, best, sizeof(best));
		s->stop_ns = start + share_ns;
		at[4] = MODE_THROUGH;
		rc = search_rounds(s, through, write, at, &through->best);
		through->cut = rc == 1;
		if (rc < 0) {
			fprintf(stderr, "ceiling: the through phase failed: %s\n", strerror(-rc));
			*through_rc = rc;
		}
	}
	return 0;
}

/* ---- files, memory, copies ---- */

/* A scratch file of \p bytes in \p dir, without a name where the filesystem allows it. */
static int
open_scratch(const char *dir, uint64_t bytes)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);

	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		char path[4096];

		snprintf(path, sizeof(path), "%s/ceiling.XXXXXX", dir);
		fd = mkostemp(path, O_CLOEXEC);
		if (fd >= 0) {
			unlink(path);
			if (fcntl(fd, F_SETFL, O_DIRECT) != 0) {
				close(fd);
				fd = -1;
			}
		}
	}
	if (fd < 0) {
		return -errno;
	}
	if (fallocate(fd, 0, 0, (off_t)bytes) != 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}

/* The largest CPU cache sysfs reports for CPU 0, in bytes; 0 where it reports none. */
static uint64_t
largest_cpu_cache(void)
{
	uint64_t best = 0;

	for (int i = 0; i < 16; i++) {
		char path[96], unit = 0;
		unsigned long long size = 0;
		FILE *f;
		int n;

		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
		f = fopen(path, "r");
		if (f == NULL) {
			break;
		}
		n = fscanf(f, "%llu%c", &size, &unit);
		fclose(f);
		if (n >= 1) {
			uint64_t bytes = unit == 'K'   ? size << 10
			                 : unit == 'M' ? size << 20
			                 : unit == 'G' ? size << 30
			                               : size;
			best = bytes > best ? bytes : best;
		}
	}
	return best;
}

/* The region each scratch file needs so that no point reads from the CPU's cache: on
 * page-cache-backed storage CACHE_REGION_FACTOR x the largest cache, in whole largest I/Os;
 * 0 elsewhere. */
static uint64_t
cache_proof_bytes(bool page_cache)
{
	uint64_t cache = largest_cpu_cache();
	uint64_t bytes = cache != 0 ? CACHE_REGION_FACTOR * cache : UNKNOWN_CACHE_PROOF_BYTES;

	return page_cache ? (bytes + MAX_IO - 1) / MAX_IO * MAX_IO : 0;
}

/* Size the scratch files to the free space of the fullest directory. Where even the largest I/O
 * does not fit in every file, fewer files are swept (halving the most): a small disk still has a
 * ceiling, measured over the files it has room for, and the result says how many that was. */
static int
plan_files(const struct ceiling_conf *c, uint64_t asked_bytes, uint32_t *files,
           uint64_t *file_bytes)
{
	uint32_t asked = *files;
	/* Every directory keeps a file while it can: a ceiling over fewer would leave one out. */
	uint32_t fewest = asked < c->nr_dirs ? asked : c->nr_dirs;

	for (uint32_t n = asked; n >= fewest && n >= 1; n /= 2) {
		uint64_t bytes = asked_bytes;

		for (uint32_t d = 0; d < c->nr_dirs; d++) {
			struct statvfs v;
			uint32_t here = n / c->nr_dirs + (d < n % c->nr_dirs);
			uint64_t room;

			if (statvfs(c->dirs[d], &v) != 0) {
				int rc = -errno;

				fprintf(stderr, "ceiling: %s: %s\n", c->dirs[d], strerror(-rc));
				return rc;
			}
			room = (uint64_t)v.f_bavail * v.f_frsize / SPACE_SHARE;
			if (c->space_bytes != 0 && c->space_bytes < room) {
				room = c->space_bytes;
			}
			room /= here ? here : 1;
			if (room < bytes) {
				bytes = room;
			}
		}
		bytes = bytes / MAX_IO * MAX_IO;
		if (bytes >= MAX_IO) {
			if (n < asked) {
				fprintf(
				    stderr,
				    "ceiling: room for %u scratch files of %llu MiB in %s, not %u: "
				    "sweeping up to %u files\n",
				    n, (unsigned long long)(bytes >> 20), c->dirs[0], asked, n);
			}
			*files = n;
			*file_bytes = bytes;
			return 0;
		}
	}
	fprintf(stderr,
	        "ceiling: no room for %u scratch files of %u MiB in %s (a quarter of the free "
	        "space is used at most)\n",
	        fewest, MAX_IO >> 20, c->dirs[0]);
	return -ENOSPC;
}

/* The through phase's destination: mem_bytes of host memory (through_host) or of GPU c->gpu's
 * memory, with s->mem pinned for the copies. Returns 0 or the -errno that rules the phase out. */
static int
through_open(const struct ceiling_conf *c, struct search *s)
{
	void *dev = NULL;
	int rc;

	if (s->nr_depths == 1) {
		return -EOPNOTSUPP; /* its threads each drive an io_uring */
	}
	if (c->through_host) {
		s->dest = mmap(NULL, s->mem_bytes, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (s->dest == MAP_FAILED) {
			s->dest = NULL;
			return -ENOMEM;
		}
		memset(s->dest, 0x5a, s->mem_bytes); /* faulted in now, as s->mem */
		s->dest_gpu = -1;
		return 0;
	}
	rc = gpucopy_set_device(c->gpu);
	if (rc == 0) {
		rc = gpucopy_dev_alloc(s->mem_bytes, &dev);
	}
	if (rc == 0) {
		rc = gpucopy_host_register(s->mem, s->mem_bytes);
		if (rc != 0) {
			gpucopy_dev_free(dev);
		}
	}
	s->dest = rc == 0 ? dev : NULL;
	s->dest_gpu = c->gpu;
	return rc;
}

static void
through_close(struct search *s)
{
	if (s->dest == NULL) {
		return;
	}
	if (s->dest_gpu < 0) {
		munmap(s->dest, s->mem_bytes);
	} else {
		gpucopy_host_unregister(s->mem);
		gpucopy_dev_free(s->dest);
	}
	s->dest = NULL;
}

static void
measure_copies(const struct ceiling_conf *c, struct ceiling_result *r)
{
	void *host = NULL, *dev = NULL;
	int rc = gpucopy_set_device(c->gpu);

	if (rc == 0) {
		rc = gpucopy_host_alloc(COPY_BYTES, &host);
	}
	if (rc == 0) {
		rc = gpucopy_dev_alloc(COPY_BYTES, &dev);
	}
	for (int d = 0; rc == 0 && d < 2; d++) {
		void *dst = d == 0 ? dev : host, *src = d == 0 ? host : dev;
		uint64_t t0, n = 0;

		memset(host, 0x5a, COPY_BYTES);
		rc = gpucopy_copy(dst, src, COPY_BYTES); /* warm: mappings, clocks */
		t0 = now_ns();
		while (rc == 0 && (n == 0 || now_ns() - t0 < (uint64_t)(COPY_S * 1e9))) {
			rc = gpucopy_copy(dst, src, COPY_BYTES);
			n++;
		}
		if (rc == 0) {
			double gbps = (double)(n * COPY_BYTES) / (double)(now_ns() - t0);

			*(d == 0 ? &r->h2d_gbps : &r->d2h_gbps) = gbps;
		}
	}
	gpucopy_dev_free(dev);
	gpucopy_host_free(host);
	r->copy_rc = rc;
}

int
ceiling_measure(const struct ceiling_conf *c, struct ceiling_result *r)
{
	uint32_t cpus = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGE_SIZE);
	struct search *s = calloc(1, sizeof(*s));
	int fds[CEILING_MAX_FILES];
	uint32_t nr_fds = 0, max_files;
	uint64_t t0 = now_ns(), proof;
	struct statfs sfs;
	bool both, staged;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	r->copy_rc = 1;
	r->through_rc = 1;
	if (s == NULL) {
		return -ENOMEM;
	}
	if (c->nr_dirs == 0 || c->budget_s <= 0 || c->max_files > CEILING_MAX_FILES ||
	    c->max_threads > CEILING_MAX_THREADS) {
		free(s);
		return -EINVAL;
	}
	s->c = c;
	r->nr_dirs = c->nr_dirs;
	r->emulated = statfs(c->dirs[0], &sfs) == 0 && sfs.f_type == TMPFS_MAGIC;
	r->max_threads = c->max_threads ? c->max_threads : 2 * cpus;
	if (r->max_threads > CEILING_MAX_THREADS) {
		r->max_threads = CEILING_MAX_THREADS;
	}
	max_files = c->max_files ? c->max_files : DEFAULT_MAX_FILES;
	proof = c->exact_file_bytes ? 0 : cache_proof_bytes(r->emulated);
	rc = plan_files(c, c->file_bytes > proof ? c->file_bytes : proof, &max_files,
	                &s->file_bytes);
	if (rc < 0) {
		free(s);
		return rc;
	}
	if (s->file_bytes < proof) {
		fprintf(
		    stderr,
		    "ceiling: scratch files of %llu MiB, the room there: reads of a region that "
		    "small may come from the CPU's cache\n",
		    (unsigned long long)(s->file_bytes >> 20));
	}
	r->max_files = max_files;
	/* Candidates: powers of two up to the most, the online CPUs and the most themselves. */
	for (uint32_t t = 1; t <= r->max_threads; t *= 2) {
		add_cand(s->thr, &s->nr_thr, t);
	}
	add_cand(s->thr, &s->nr_thr, cpus < r->max_threads ? cpus : r->max_threads);
	add_cand(s->thr, &s->nr_thr, r->max_threads);
	for (uint32_t f = 1; f <= max_files; f *= 2) {
		add_cand(s->fil, &s->nr_fil, f);
	}
	add_cand(s->fil, &s->nr_fil, max_files);
	s->nr_depths = ring_works() ? (uint32_t)NR_DEPTHS : 1;
	if (s->nr_depths == 1) {
		fprintf(stderr, "ceiling: io_uring refused here: one synchronous I/O per thread\n");
	}
	s->mem_bytes = c->mem_bytes ? c->mem_bytes : DEFAULT_MEM_BYTES;
	if (s->mem_bytes > ram / 8) {
		s->mem_bytes = ram / 8;
	}
	/* At least one I/O of the largest size, in whole ones. */
	s->mem_bytes = s->mem_bytes < MAX_IO ? MAX_IO : s->mem_bytes / MAX_IO * MAX_IO;
	r->file_bytes = s->file_bytes;
	s->mem =
	    mmap(NULL, s->mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->mem == MAP_FAILED) {
		free(s);
		return -ENOMEM;
	}
	/* Faulted in now: the first point would otherwise pay for it. */
	memset(s->mem, 0x5a, s->mem_bytes);
	for (; nr_fds < max_files; nr_fds++) {
		const char *dir = c->dirs[nr_fds % c->nr_dirs];

		fds[nr_fds] = open_scratch(dir, s->file_bytes);
		if (fds[nr_fds] < 0) {
			rc = fds[nr_fds];
			fprintf(stderr, "ceiling: scratch file in %s: %s\n", dir, strerror(-rc));
			break;
		}
	}
	s->fds = fds;
	if (rc == 0 && !c->skip_reads) {
		/* Every byte written once: reads of unwritten extents would not reach the device.
		 */
		uint64_t per_4mib = s->mem_bytes / (4 * MIB);
		uint32_t threads = (uint32_t)(max_files < per_4mib ? max_files : per_4mib);
		struct run fill = {
		    .fds = fds,
		    .files = max_files,
		    .blocks = s->file_bytes / (4 * MIB),
		    .io_bytes = 4 * MIB,
		    .write = true,
		    .mem = s->mem,
		    .slice = s->mem_bytes / threads / (4 * MIB) * (4 * MIB),
		    .limit = (uint64_t)max_files * (s->file_bytes / (4 * MIB)),
		};
		uint64_t f0 = now_ns();
		double g = run_point(&fill, threads);

		if (g < 0) {
			rc = (int)g;
			fprintf(stderr, "ceiling: writing the scratch files: %s\n", strerror(-rc));
		}
		r->prefill_s = (double)(now_ns() - f0) / 1e9;
	}
	both = !c->skip_reads && !c->skip_writes;
	/* Staged points matter only where a copy lands in memory: on tmpfs (on a device the
	 * data arrives by DMA whatever the buffer), and only for KV in GPU memory; so does the
	 * through phase into the GPU, which the host's copy and PCIe's DMA share there. */
	staged = r->emulated && c->gpu >= 0;
	if (rc == 0 && ((staged && !c->skip_through) || c->through_host)) {
		r->through_rc = through_open(c, s);
		r->through_host = c->through_host;
	}
	s->point_s =
	    c->budget_s / (both ? 2 : 1) / (1 + staged + (s->dest != NULL)) / EXPECTED_POINTS;
	s->point_s = s->point_s < POINT_MIN_S ? POINT_MIN_S : s->point_s;
	s->point_s = s->point_s > POINT_MAX_S ? POINT_MAX_S : s->point_s;
	if (rc == 0 && !c->skip_writes) {
		rc = search_dir(s, &r->write, true, c->budget_s / (both ? 2 : 1), staged,
		                s->dest != NULL ? &r->write_through : NULL, &r->through_rc);
	}
	if (rc == 0 && !c->skip_reads) {
		rc = search_dir(s, &r->read, false, c->budget_s / (both ? 2 : 1), staged,
		                s->dest != NULL && r->through_rc == 0 ? &r->read_through : NULL,
		                &r->through_rc);
	}
	through_close(s);
	if (rc < 0) {
		fprintf(stderr, "ceiling: O_DIRECT I/O in %s: %s\n", c->dirs[0], strerror(-rc));
	} else if ((!c->skip_writes && r->write.best.gbps <= 0) ||
	           (!c->skip_reads && r->read.best.gbps <= 0)) {
		/* Every ratio is taken to this limit: a direction asked for and not measured is
		 * an error, never a figure of 0. */
		fprintf(stderr, "ceiling: a sweep in %s measured nothing\n", c->dirs[0]);
		rc = -EIO;
	}
	for (uint32_t i = 0; i < nr_fds; i++) {
		close(fds[i]);
	}
	munmap(s->mem, s->mem_bytes);
	free(s);
	if (rc == 0 && c->gpu >= 0) {
		measure_copies(c, r);
	}
	r->seconds = (double)(now_ns() - t0) / 1e9;
	return rc;
}

/* ---- limits and reports ---- */

static double
min_pos(double a, double b)
{
	return b > 0 && b < a ? b : a;
}

/* A direction's limit for host KV (the best through mem_bytes) or for GPU KV (the better of
 * that and the staged best, capped by the pinned copy \p copy_gbps where it was measured). */
static double
dir_limit(const struct ceiling_result *r, const struct ceiling_sweep *s, bool gpu, double copy_gbps)
{
	double storage = s->best.gbps;

	if (!gpu) {
		return storage;
	}
	storage = s->staged.gbps > storage ? s->staged.gbps : storage;
	return r->copy_rc == 0 ? min_pos(storage, copy_gbps) : storage;
}

double
ceiling_read_limit(const struct ceiling_result *r, bool gpu)
{
	return dir_limit(r, &r->read, gpu, r->h2d_gbps);
}

double
ceiling_write_limit(const struct ceiling_result *r, bool gpu)
{
	return dir_limit(r, &r->write, gpu, r->d2h_gbps);
}

double
ceiling_read_through(const struct ceiling_result *r)
{
	return r->through_rc == 0 ? r->read_through.best.gbps : 0;
}

double
ceiling_write_through(const struct ceiling_result *r)
{
	return r->through_rc == 0 ? r->write_through.best.gbps : 0;
}

const char *
ceiling_through_note(const struct ceiling_result *r)
{
	switch (r->through_rc) {
	case 0:
		return r->through_host ? "host" : "gpu";
	case 1:
		return "skipped: asked for only with the GPU limit on tmpfs, or into the host";
	case -EOPNOTSUPP:
		return "skipped: built without CUDA, or io_uring refused";
	case -ENODEV:
		return "skipped: no GPU";
	case -ENOMEM:
		return "skipped: no memory for its destination";
	default:
		return "failed: the log says why";
	}
}

const char *
ceiling_copy_note(const struct ceiling_result *r)
{
	switch (r->copy_rc) {
	case 0:
		return "measured";
	case 1:
		return "skipped: not asked for (host KV)";
	case -EOPNOTSUPP:
		return "skipped: built without CUDA";
	case -ENODEV:
		return "skipped: no GPU";
	default:
		return "skipped: the copy failed";
	}
}

/* A point's fields, without braces: "gbps":..,"threads":..,... */
static void
point_json(FILE *f, const struct ceiling_point *p)
{
	fprintf(f,
	        "\"gbps\":%.3f,\"threads\":%u,\"files\":%u,\"io_kib\":%u,\"depth\":%u,"
	        "\"mem_kib\":%llu",
	        p->gbps, p->threads, p->files, p->io_bytes >> 10, p->depth,
	        (unsigned long long)(p->mem_bytes >> 10));
}

/* A sweep as "name":{...}; with \p null_if_empty, "name":null where it measured nothing (a
 * phase not run). */
static void
sweep_json(FILE *f, const char *name, const struct ceiling_sweep *s, bool null_if_empty)
{
	if (null_if_empty && s->nr_points == 0) {
		fprintf(f, "\"%s\":null", name);
		return;
	}
	fprintf(f, "\"%s\":{", name);
	point_json(f, &s->best);
	fprintf(f, ",\"staged\":");
	if (s->staged.gbps > 0) {
		fprintf(f, "{");
		point_json(f, &s->staged);
		fprintf(f, "}");
	} else {
		fprintf(f, "null");
	}
	fprintf(f, ",\"points\":%u,\"cut_by_budget\":%s,\"sweep\":[", s->nr_points,
	        s->cut ? "true" : "false");
	for (uint32_t i = 0; i < s->nr_points; i++) {
		const struct ceiling_point *p = &s->points[i];

		fprintf(f, "%s[%u,%u,%u,%u,%llu,%.3f]", i ? "," : "", p->threads, p->files,
		        p->io_bytes >> 10, p->depth, (unsigned long long)(p->mem_bytes >> 10),
		        p->gbps);
	}
	fprintf(f, "]}");
}

static void
gbps_or_null(FILE *f, const char *name, double v, bool known)
{
	if (known) {
		fprintf(f, "\"%s\":%.3f", name, v);
	} else {
		fprintf(f, "\"%s\":null", name);
	}
}

void
ceiling_json(FILE *f, const struct ceiling_result *r)
{
	bool copies = r->copy_rc == 0;

	fprintf(f,
	        "{\"storage\":\"%s\",\"dirs\":%u,\"seconds\":%.2f,\"prefill_s\":%.2f,"
	        "\"file_mib\":%llu,\"max_threads\":%u,\"max_files\":%u,\"sweep_point\":"
	        "\"[threads,files,io_kib,depth,mem_kib,gbps]\",",
	        r->emulated ? "emulated-tmpfs" : "disk", r->nr_dirs, r->seconds, r->prefill_s,
	        (unsigned long long)(r->file_bytes >> 20), r->max_threads, r->max_files);
	sweep_json(f, "read", &r->read, false);
	fprintf(f, ",");
	sweep_json(f, "write", &r->write, false);
	fprintf(f, ",\"through\":\"%s\",", ceiling_through_note(r));
	sweep_json(f, "read_through", &r->read_through, true);
	fprintf(f, ",");
	sweep_json(f, "write_through", &r->write_through, true);
	fprintf(f, ",\"copies\":\"%s\",", ceiling_copy_note(r));
	gbps_or_null(f, "h2d_gbps", r->h2d_gbps, copies);
	fprintf(f, ",");
	gbps_or_null(f, "d2h_gbps", r->d2h_gbps, copies);
	fprintf(f, ",\"host_read_limit_gbps\":%.3f,\"host_write_limit_gbps\":%.3f,",
	        ceiling_read_limit(r, false), ceiling_write_limit(r, false));
	gbps_or_null(f, "gpu_read_limit_gbps", ceiling_read_limit(r, true), copies);
	fprintf(f, ",");
	gbps_or_null(f, "gpu_write_limit_gbps", ceiling_write_limit(r, true), copies);
	fprintf(f, "}");
}

static void
print_best(FILE *f, const char *prefix, const char *what, const struct ceiling_sweep *s)
{
	const struct ceiling_point *b = &s->best, *st = &s->staged;

	if (b->gbps <= 0) {
		fprintf(f, "%s%s ceiling: not measured\n", prefix, what);
		return;
	}
	fprintf(f,
	        "%s%s ceiling %.2f GB/s: %u threads x %u KiB x %u file%s, %u in flight each, "
	        "through %llu MiB (best of %u points%s)\n",
	        prefix, what, b->gbps, b->threads, b->io_bytes >> 10, b->files,
	        b->files > 1 ? "s" : "", b->depth, (unsigned long long)(b->mem_bytes >> 20),
	        s->nr_points, s->cut ? ", cut by the time budget" : "");
	if (st->gbps > 0) {
		fprintf(f,
		        "%s%s staged  %.2f GB/s: %u threads x %u KiB x %u file%s, %u in flight "
		        "each, reusing %llu KiB (the limit for GPU KV)\n",
		        prefix, what, st->gbps, st->threads, st->io_bytes >> 10, st->files,
		        st->files > 1 ? "s" : "", st->depth,
		        (unsigned long long)(st->mem_bytes >> 10));
	}
}

/* The through phase's best of one direction, where it ran. */
static void
print_through(FILE *f, const char *prefix, const char *what, const struct ceiling_result *r,
              const struct ceiling_sweep *s)
{
	const struct ceiling_point *b = &s->best;

	if (r->through_rc != 0 || b->gbps <= 0) {
		return;
	}
	fprintf(
	    f,
	    "%s%s through %.2f GB/s: %u threads x %u KiB x %u file%s, %u in flight each, "
	    "%llu buffer%s each (%llu KiB in all), every byte %s %s (best of %u point%s%s)\n",
	    prefix, what, b->gbps, b->threads, b->io_bytes >> 10, b->files, b->files > 1 ? "s" : "",
	    b->depth, (unsigned long long)(b->mem_bytes / b->threads / b->io_bytes),
	    b->mem_bytes / b->threads / b->io_bytes > 1 ? "s" : "",
	    (unsigned long long)(b->mem_bytes >> 10), s == &r->read_through ? "copied to" : "from",
	    r->through_host ? "host memory" : "the GPU", s->nr_points, s->nr_points > 1 ? "s" : "",
	    s->cut ? ", cut by the time budget" : "");
}

void
ceiling_print(FILE *f, const char *prefix, const struct ceiling_result *r)
{
	print_best(f, prefix, "O_DIRECT read ", &r->read);
	print_best(f, prefix, "O_DIRECT write", &r->write);
	print_through(f, prefix, "O_DIRECT read ", r, &r->read_through);
	print_through(f, prefix, "O_DIRECT write", r, &r->write_through);
	if (r->copy_rc == 0) {
		fprintf(f, "%spinned copies  host->device %.2f GB/s, device->host %.2f GB/s\n",
		        prefix, r->h2d_gbps, r->d2h_gbps);
	} else {
		fprintf(f, "%spinned copies  %s\n", prefix, ceiling_copy_note(r));
	}
}
