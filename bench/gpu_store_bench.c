/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti-gpu-store-bench: store (paged HBM -> file) and retrieve (file -> paged HBM) of whole
 * requests, through the store's engines and through a per-block CPU-driven baseline, each beside
 * the raw O_DIRECT bandwidth of the same directory measured in the same run.
 *
 * Workload: one request of C tokens (Llama-3-8B geometry by default: 32 layers of 64 KiB paged
 * blocks of 16 tokens; 1 MiB objects), its KV in device memory in vLLM's per-layer paged layout
 * with K and V of a block together ("packed"), stored from one shuffled block table and
 * retrieved into another, poisoned before every retrieve and checked bit for bit after the last.
 *
 * Paths:
 *  - gpu-uring: the store's engine gpu-uring (one driver kernel per layer submits the I/O);
 *  - uring, posix: the store's CPU-driven engines (lanes of CPU threads do the object I/O through
 *    pinned staging; in waves, one copy per wave into device staging beside one check-and-scatter
 *    launch per layer run: src/engine/waves.c);
 *  - gds: the store's engine gds (cuFile moves objects between the file and device staging,
 *    batched; a kernel per layer run checks and scatters them), where libcufile is installed;
 *  - baseline: what CPU-centric tiers do: a pool of threads, each moving one paged block of one
 *    layer at a time with one pread (pwrite) and one cudaMemcpyAsync, double-buffered, in file
 *    order (the order most favourable to it). Its file holds layer blocks back to back.
 *
 * The limit (tools/common/ceiling.h), measured once at the start in the same directory: retrieve
 * (SSD -> HBM) rows are divided by min(the O_DIRECT read ceiling of a sweep over threads x I/O
 * size x files x depth, the pinned host-to-device copy; on tmpfs the sweep's staged phase counts,
 * since the engines stage through buffers of their own), store rows by min(the write ceiling,
 * the pinned device-to-host copy); --ceiling-s bounds the sweep's time (default 24 s: on tmpfs
 * with GPU KV each direction is searched three times, 4 s a phase; C5 found 2 s too short for
 * the staged write). A row above its limit is flagged (above_limit), not
 * given as a ratio above one. On tmpfs a row also gives its ratio to the ceiling's through phase
 * (the best it found of storage and PCIe at once: through_gbps, ratio_to_through), beside its
 * ratio to the limit; the latency mode, which does not use it, skips that phase. The old reference
 * stays as a column, never a denominator: raw, sequential O_DIRECT io_uring reads (writes) of one
 * file in the same directory into pinned host memory at the best block size and depth of a short
 * sweep made once per context, one raw round of up to --raw-gib GiB beside every round of every
 * path (a drifting disk shows there). A tmpfs directory is labelled emulated, and its raw I/O is
 * issued with IOSQE_ASYNC, as the store's is.
 *
 * Latency (--latency N): for each engine path and each size (--contexts; by default a prefix of
 * 8 chunks and a single chunk: 2048 and 256 tokens, 256 and 32 MiB, with Llama-3-8B), the
 * request is stored once and then loaded N times, each load timed from the call until the data
 * is in the KV (the load has returned and the device is synchronised), the destination
 * poisoned before and compared bit for bit with what it must hold after every load. A row
 * gives p50, p99 (nearest rank) and the largest of the N against the limit (min(read ceiling,
 * pinned host-to-device) for GPU KV): bytes / limit, the target 1.3 x bytes / limit + 1 ms,
 * and p50 and p99 over that target. The first load is counted like the others (and shown on
 * its own); nothing is dropped. The store's files are opened O_DIRECT (on tmpfs there is no
 * page cache to go around), so every load reads the storage. --pause-ms X spaces the loads X ms
 * apart, as a server's requests come, and adds the I/O threads' CPU over the loads and the
 * pauses after them (per load, and in cores). Every load also records where its time went, so
 * that a slow load can be told from the others: gpu-uring's I/O kernels' GPU time, the io_uring
 * threads' time on a CPU and runnable waiting for one (schedstat), and the engine's submission
 * calls (loads_kernel_ms, loads_io_cpu_ms, loads_io_wait_ms, loads_submits; the slowest load's
 * on a line of its own).
 *
 * KV in host memory (--kv host): the same code paths with the KV, the check and the raw I/O in
 * ordinary host memory and no CUDA call at all, so that the bench runs without a GPU (engine
 * gpu-uring then uses its host driver); rows are divided by the host read (write) ceiling.
 * The baseline moves blocks with CUDA copies and runs with GPU KV only.
 *
 * CPU time: the process's user + system seconds (getrusage: every thread, the kernel's io_uring
 * threads included) per GB moved, and the part of it spent issuing I/O: io_uring's kernel
 * threads (iou-sqp, iou-wrk) and gpu-uring's helper (tt-ring-io, which issues the I/O where the
 * host submits it; /proc/self/task/N/schedstat). For gpu-uring: system calls per layer (the
 * store's io_submits), the I/O kernels' GPU time and the SMs they held. --idle-s X: after a
 * path's rounds, with its store still open and nothing moving, the same threads' CPU over X
 * seconds, in cores (what the engine costs a server that is not loading).
 *
 * A row that is not bit-exact makes the exit status 1.
 *
 * Usage: tutti-gpu-store-bench --dir DIR [--contexts 8192,32768,131072]
 *            [--paths gpu-uring,uring,posix,gds,baseline] [--repeats N] [--threads N]
 *            [--staging-mib N] [--raw-gib N] [--ceiling-s X] [--model NAME] [--json FILE]
 *            [--kv gpu|host] [--latency N [--pause-ms X]] [--gpu-io-submit auto|sqpoll|host]
 *            [--idle-s X] [--trace] [--gpu-io-workers N] [--gpu-io-sms N]
 *            [--posix-threads N] [--queue-depth N] [--gpu-io-copy auto|sm|dma]
 */
#include <cuda_runtime.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "ceiling.h"
#include "cliarg.h"
#include "rawbw.h"
#include "tutti/tutti.h"

#define MAX_REPEATS 16
#define MAX_CONTEXTS 8
#define KEY_BYTES 32
#define POISON 0xa5
/* Rows of the host random pattern are offset by this much per layer: no two (layer, block)
 * pairs of a request hold the same bytes (4160 * k is never a multiple of 64 KiB for k < 1024). */
#define LAYER_SHIFT 4160u

enum path { P_GPU_URING, P_URING, P_POSIX, P_GDS, P_BASELINE, NR_PATHS };
static const char *const path_names[] = {"gpu-uring", "uring", "posix", "gds", "baseline"};
static const uint32_t path_engines[] = {TUTTI_ENGINE_GPU_URING, TUTTI_ENGINE_URING,
                                        TUTTI_ENGINE_POSIX, TUTTI_ENGINE_GDS};

struct conf {
	const char *dir;
	const char *model;
	uint64_t contexts[MAX_CONTEXTS];
	uint32_t nr_contexts;
	bool paths[NR_PATHS];
	uint32_t repeats, threads;
	uint64_t staging_bytes, raw_bytes;
	double ceiling_s;
	double idle_s; /* --idle-s: the engine's I/O threads measured idle this long; 0: not */
	const char *json;
	bool trace;  /* the store's debug log (per-layer kernel milestones) to stderr */
	bool gpu_kv; /* KV in device memory (--kv gpu) or in host memory (--kv host) */
	bool contexts_given, paths_given;
	uint32_t latency_loads; /* --latency N: N timed loads per size; 0: bandwidth rounds */
	double pause_ms;        /* --pause-ms: with --latency, this long between loads */
	/* The engines' options (tutti_store_opts.engine_opts) these flags set, each given to the
	 * engine that takes it: --gpu-io-submit and --gpu-io-copy, gpu-uring's submit and copy (a
	 * name of its choices); --gpu-io-workers and --gpu-io-sms, its workers and sms (0: its
	 * defaults); --posix-threads, posix's threads (0: its default). */
	const char *gpu_io_submit, *gpu_io_copy;
	uint32_t gpu_io_workers, gpu_io_sms;
	uint32_t posix_threads;
	/* --queue-depth: the store's I/Os in flight (0: its default); with --staging-mib it sets
	 * how much staging is allocated, and so gpu-uring's bounce slots */
	uint32_t queue_depth;
};

struct phase {
	double gbps[MAX_REPEATS], cpu_s[MAX_REPEATS], io_thread_s[MAX_REPEATS];
	double raw_gbps[MAX_REPEATS];
	uint64_t submits, kernel_ns, block_ns; /* one round (the last) */
	double wall_s;                         /* of that round */
	/* The staging the store allocated: --staging-mib, cut to the queue depth's worth of I/O
	 * units (0: no store) */
	uint64_t staging_bytes;
	/* Over all rounds: wall time, and what the caller of a uring or posix transfer of GPU KV
	 * waited for (the storage, the GPU: tutti_stats' wave_*_wait_ns). */
	double wall_sum_s;
	uint64_t io_wait_ns, copy_wait_ns;
	double idle_io_cores; /* --idle-s: I/O threads' CPU idle, on the retrieve row; < 0: none */
	/* Where the CPU went, per round, in cores (CPU seconds per second of the round): the whole
	 * machine's busy CPUs, this process, its io-wq workers (and how long they waited for a
	 * CPU while runnable, and how many ran), its SQ thread. Says whether a path that the
	 * CPU's copies bind had CPUs to spare. The machine's figure counts in scheduler ticks
	 * (10 ms per CPU): over a round of less than about 100 ms it is off by up to a few cores.
	 */
	double cores_machine[MAX_REPEATS], cores_process[MAX_REPEATS];
	double cores_iowq[MAX_REPEATS], cores_iowq_runnable[MAX_REPEATS], cores_sq[MAX_REPEATS];
	double iowq_ran[MAX_REPEATS];
};

struct bench {
	struct conf c;
	struct tutti_geometry geo;
	uint64_t lbb;
	uint32_t L, bpc, max_blocks, sms;
	bool emulated;
	uint8_t *src, *dst;       /* device arenas: L x max_blocks layer blocks each */
	uint8_t *pattern;         /* pinned: random bytes for the source */
	uint8_t *host_a, *host_b; /* pinned: one layer of a request each, for the check */
	uint8_t *raw_mem;         /* pinned: raw I/O memory */
	uint64_t raw_mem_bytes;
	int raw_fd; /* the baseline's (and raw I/O's) file */
	char raw_path[4096];
	uint64_t raw_file_bytes;
	struct rawbw_point raw_read, raw_write;
	struct ceiling_result ceiling; /* the limit */
	struct base_thread *base;      /* c.threads */
	FILE *json;
	uint64_t nonce;
	bool failed;          /* a row was not bit-exact */
	uint32_t queue_depth; /* the stores' I/Os in flight, as opened (--queue-depth or default) */
};

static void
die(const char *what, int rc)
{
	fprintf(stderr, "tutti-gpu-store-bench: %s: %s\n", what, strerror(rc < 0 ? -rc : rc));
	exit(1);
}

static void
cuda_ok(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "tutti-gpu-store-bench: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

/* ---- memory: the KV on the device (--kv gpu) or in host memory (--kv host: no CUDA call) ---- */

static void *
kv_mem_alloc(const struct bench *b, uint64_t bytes)
{
	void *p = NULL;

	if (b->c.gpu_kv) {
		cuda_ok(cudaMalloc(&p, bytes), "cudaMalloc");
	} else if (posix_memalign(&p, 4096, bytes) != 0) {
		die("posix_memalign", -ENOMEM);
	}
	return p;
}

static void
kv_mem_free(const struct bench *b, void *p)
{
	if (b->c.gpu_kv) {
		cudaFree(p);
	} else {
		free(p);
	}
}

/* Host memory that copies to and from the KV and O_DIRECT I/O use: pinned with GPU KV, plain
 * page-aligned memory with host KV. */
static void *
host_mem_alloc(const struct bench *b, uint64_t bytes)
{
	void *p = NULL;

	if (b->c.gpu_kv) {
		cuda_ok(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc");
	} else if (posix_memalign(&p, 4096, bytes) != 0) {
		die("posix_memalign", -ENOMEM);
	}
	return p;
}

static void
host_mem_free(const struct bench *b, void *p)
{
	if (b->c.gpu_kv) {
		cudaFreeHost(p);
	} else {
		free(p);
	}
}

/* A copy between the KV and host memory, either way (unified addressing tells them apart). */
static void
mem_copy(const struct bench *b, void *dst, const void *src, uint64_t bytes)
{
	if (b->c.gpu_kv) {
		cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
	} else {
		memcpy(dst, src, bytes);
	}
}

/* Everything the device was asked to do is done: a load's data is in HBM. */
static void
kv_sync(const struct bench *b)
{
	if (b->c.gpu_kv) {
		cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	}
}

/* CPU time of io_uring's kernel threads of this process (the SQ thread, io-wq workers), per
 * thread: such threads come and go (io-wq workers exit when idle), so a round's figure is the
 * growth of each thread alive at its end; a thread that exits within the round is missed. */
#define MAX_IO_THREADS 1024

/* Which of io_uring's threads: an io-wq worker (a punted I/O's copy runs on one), the SQ thread,
 * or another (the ring helper). */
enum io_thread_kind { IOT_WORKER, IOT_SQ, IOT_OTHER };

struct io_threads {
	uint32_t n;
	int tid[MAX_IO_THREADS];
	uint8_t kind[MAX_IO_THREADS];               /* enum io_thread_kind */
	unsigned long long ns[MAX_IO_THREADS];      /* on a CPU */
	unsigned long long wait_ns[MAX_IO_THREADS]; /* runnable, waiting for a CPU */
};

static void
io_threads_snap(struct io_threads *t)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	t->n = 0;
	while (d != NULL && (e = readdir(d)) != NULL && t->n < MAX_IO_THREADS) {
		char path[300], comm[64] = "";
		unsigned long long ns = 0, wait_ns = 0;
		FILE *f;

		if (e->d_name[0] == '.') {
			continue;
		}
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f == NULL) {
			continue;
		}
		if (fgets(comm, sizeof(comm), f) == NULL) {
			comm[0] = 0;
		}
		fclose(f);
		/* io_uring's kernel threads, and the gpu-uring ring's helper, which issues the
		 * I/O where the host submits it (gpu-uring's option submit). */
		if (strncmp(comm, "iou-", 4) != 0 && strncmp(comm, "tt-ring-io", 10) != 0) {
			continue;
		}
		/* schedstat: time on a CPU, time runnable on a run queue, time slices. */
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
		f = fopen(path, "r");
		if (f != NULL && fscanf(f, "%llu %llu", &ns, &wait_ns) == 2) {
			int tid = (int)strtol(e->d_name, NULL, 10);
			/* schedstat's time on a CPU is brought up to date only when the thread
			 * leaves it, so a thread that keeps running (the SQ thread) moves in
			 * scheduler ticks; the thread's CPU-time clock is current. Its id is the
			 * kernel's encoding of a per-thread scheduler clock (pthread_getcpuclockid
			 * needs a pthread_t, which io_uring's kernel threads have not); where it is
			 * refused, schedstat's figure stands. */
			clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6u);
			struct timespec ts;

			if (clock_gettime(clock, &ts) == 0) {
				ns = (unsigned long long)ts.tv_sec * 1000000000ull +
				     (unsigned long long)ts.tv_nsec;
			}
			t->tid[t->n] = tid;
			t->kind[t->n] = strncmp(comm, "iou-wrk-", 8) == 0   ? IOT_WORKER
			                : strncmp(comm, "iou-sqp-", 8) == 0 ? IOT_SQ
			                                                    : IOT_OTHER;
			t->wait_ns[t->n] = wait_ns;
			t->ns[t->n++] = ns;
		}
		if (f != NULL) {
			fclose(f);
		}
	}
	if (d != NULL) {
		closedir(d);
	}
}

/* Seconds the threads of \p kind (IOT_ANY: all) alive in \p end ran (\p waited: waited for a
 * CPU) since \p start (or since they began); \p ran, if not NULL, receives how many of them ran
 * at all. */
#define IOT_ANY 0xffu

static double
io_threads_sum(const struct io_threads *start, const struct io_threads *end, bool waited,
               unsigned kind, uint32_t *ran)
{
	double s = 0;
	uint32_t n = 0;

	for (uint32_t i = 0; i < end->n; i++) {
		unsigned long long before = 0, now = waited ? end->wait_ns[i] : end->ns[i];

		if (kind != IOT_ANY && end->kind[i] != kind) {
			continue;
		}
		for (uint32_t j = 0; j < start->n; j++) {
			if (start->tid[j] == end->tid[i]) {
				before = waited ? start->wait_ns[j] : start->ns[j];
				break;
			}
		}
		/* A reused thread id, or a clock that fell back to schedstat in one snapshot, can
		 * read lower than before: no time, rather than an unsigned wrap. */
		if (now > before) {
			n++;
			s += (double)(now - before) / 1e9;
		}
	}
	if (ran != NULL) {
		*ran = n;
	}
	return s;
}

/* Seconds all of them ran (\p waited: waited for a CPU) since \p start. */
static double
io_threads_time(const struct io_threads *start, const struct io_threads *end, bool waited)
{
	return io_threads_sum(start, end, waited, IOT_ANY, NULL);
}

/* ---- one context ---- */

struct ctx {
	struct bench *b;
	uint64_t tokens, bytes;
	uint32_t n, chunks; /* paged blocks and chunks of the request */
	uint32_t *src_ids, *dst_ids;
	uint8_t *keys;
	struct tutti_kv *src_kv, *dst_kv;
};

static struct tutti_kv *
make_kv(const struct bench *b, uint8_t *arena, uint32_t n)
{
	struct tutti_segment *segs = calloc(b->L, sizeof(*segs));
	struct tutti_kv *kv = NULL;
	int rc;

	if (segs == NULL) {
		die("calloc", -ENOMEM);
	}
	for (uint32_t l = 0; l < b->L; l++) {
		segs[l] = (struct tutti_segment){
		    (uint64_t)(uintptr_t)arena + (uint64_t)l * n * b->lbb, b->lbb, b->lbb};
	}
	rc = tutti_kv_create(&b->geo, segs, 1, n, b->c.gpu_kv ? TUTTI_MEM_CUDA : TUTTI_MEM_HOST,
	                     &kv);
	free(segs);
	if (rc < 0) {
		die("tutti_kv_create", rc);
	}
	return kv;
}

static uint8_t *
block_at(const struct ctx *x, uint8_t *arena, uint32_t layer, uint32_t id)
{
	return arena + ((uint64_t)layer * x->n + id) * x->b->lbb;
}

static void
make_keys(struct ctx *x, uint32_t round)
{
	for (uint32_t k = 0; k < x->chunks; k++) {
		uint64_t s = x->b->nonce ^ ((uint64_t)round << 40) ^ (x->tokens << 8) ^ k;

		for (uint32_t w = 0; w < KEY_BYTES / 8; w++) {
			uint64_t v = bu_splitmix(&s);

			memcpy(x->keys + (uint64_t)k * KEY_BYTES + w * 8, &v, 8);
		}
	}
}

/* Every moved block of the destination equals its source block; returns the mismatches. */
static uint64_t
check(struct ctx *x)
{
	struct bench *b = x->b;
	uint64_t bad = 0, layer_bytes = (uint64_t)x->n * b->lbb;

	for (uint32_t l = 0; l < b->L; l++) {
		mem_copy(b, b->host_a, block_at(x, b->src, l, 0), layer_bytes);
		mem_copy(b, b->host_b, block_at(x, b->dst, l, 0), layer_bytes);
		for (uint32_t i = 0; i < x->n; i++) {
			bad += memcmp(b->host_a + (uint64_t)x->src_ids[i] * b->lbb,
			              b->host_b + (uint64_t)x->dst_ids[i] * b->lbb, b->lbb) != 0;
		}
	}
	return bad;
}

static void
poison(struct ctx *x)
{
	if (x->b->c.gpu_kv) {
		cuda_ok(cudaMemset(x->b->dst, POISON, x->bytes), "cudaMemset");
	} else {
		memset(x->b->dst, POISON, x->bytes);
	}
	kv_sync(x->b);
}

/* One raw round paired with a path's round. */
static double
raw_round(struct bench *b, uint64_t bytes, bool write, uint32_t round)
{
	struct rawbw_target t = {
	    .fds = &b->raw_fd,
	    .nr_fds = 1,
	    .off = 0,
	    .span = b->raw_file_bytes,
	    .mem = b->raw_mem,
	    .mem_bytes = b->raw_mem_bytes,
	    .write = write,
	    .async = b->emulated,
	};
	const struct rawbw_point *p = write ? &b->raw_write : &b->raw_read;
	uint64_t n = bytes < b->c.raw_bytes ? bytes : b->c.raw_bytes;
	double gbps = rawbw_run(&t, (uint64_t)round * n, n, p->bs, p->qd);

	if (gbps < 0) {
		die("raw I/O", (int)gbps);
	}
	return gbps;
}

/* ---- the baseline ---- */

struct base_pool {
	struct ctx *x;
	bool write;
	uint64_t next; /* next (layer, block) unit; atomic */
	int error;     /* first error; atomic */
};

static int
base_unit(struct base_pool *p, uint8_t *buf, cudaStream_t s, uint64_t u)
{
	struct ctx *x = p->x;
	struct bench *b = x->b;
	uint32_t l = (uint32_t)(u / x->n), i = (uint32_t)(u % x->n);
	off_t off = (off_t)(u * b->lbb);
	ssize_t r;

	if (p->write) {
		if (cudaMemcpyAsync(buf, block_at(x, b->src, l, x->src_ids[i]), b->lbb,
		                    cudaMemcpyDeviceToHost, s) != cudaSuccess ||
		    cudaStreamSynchronize(s) != cudaSuccess) {
			return -EIO;
		}
		r = pwrite(b->raw_fd, buf, b->lbb, off);
	} else {
		r = pread(b->raw_fd, buf, b->lbb, off);
		if (r == (ssize_t)b->lbb &&
		    cudaMemcpyAsync(block_at(x, b->dst, l, x->dst_ids[i]), buf, b->lbb,
		                    cudaMemcpyHostToDevice, s) != cudaSuccess) {
			return -EIO;
		}
	}
	return r == (ssize_t)b->lbb ? 0 : r < 0 ? -errno : -EIO;
}

/* What a baseline thread reuses from round to round (made once, outside the timing). */
struct base_thread {
	struct base_pool *pool;
	cudaStream_t stream;
	cudaEvent_t ev[2];
	uint8_t *buf[2]; /* pinned */
};

static void
base_threads_make(struct bench *b)
{
	b->base = calloc(b->c.threads, sizeof(*b->base));
	if (b->base == NULL) {
		die("calloc", -ENOMEM);
	}
	for (uint32_t i = 0; i < b->c.threads; i++) {
		struct base_thread *t = &b->base[i];

		cuda_ok(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking), "stream");
		for (int k = 0; k < 2; k++) {
			cuda_ok(cudaEventCreateWithFlags(&t->ev[k], cudaEventDisableTiming),
			        "event");
			cuda_ok(cudaHostAlloc((void **)&t->buf[k], b->lbb, cudaHostAllocDefault),
			        "cudaHostAlloc");
		}
	}
}

static void
base_threads_free(struct bench *b)
{
	for (uint32_t i = 0; b->base != NULL && i < b->c.threads; i++) {
		struct base_thread *t = &b->base[i];

		cudaStreamDestroy(t->stream);
		for (int k = 0; k < 2; k++) {
			cudaEventDestroy(t->ev[k]);
			cudaFreeHost(t->buf[k]);
		}
	}
	free(b->base);
}

static void *
base_worker(void *arg)
{
	struct base_thread *t = arg;
	struct base_pool *p = t->pool;
	uint64_t units = (uint64_t)p->x->b->L * p->x->n;
	bool used[2] = {false, false};
	int rc = 0;

	for (uint32_t k = 0; rc == 0; k ^= 1) {
		uint64_t u = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);

		if (u >= units || __atomic_load_n(&p->error, __ATOMIC_RELAXED) != 0) {
			break;
		}
		/* Double buffering: a buffer is reused once its previous copy is done. */
		if (used[k] && cudaEventSynchronize(t->ev[k]) != cudaSuccess) {
			rc = -EIO;
			break;
		}
		rc = base_unit(p, t->buf[k], t->stream, u);
		if (rc == 0 && cudaEventRecord(t->ev[k], t->stream) != cudaSuccess) {
			rc = -EIO;
		}
		used[k] = true;
	}
	if (cudaStreamSynchronize(t->stream) != cudaSuccess && rc == 0) {
		rc = -EIO;
	}
	if (rc < 0) {
		int zero = 0;

		__atomic_compare_exchange_n(&p->error, &zero, rc, false, __ATOMIC_RELAXED,
		                            __ATOMIC_RELAXED);
	}
	return NULL;
}

static int
base_run(struct ctx *x, bool write)
{
	struct base_pool p = {.x = x, .write = write};
	pthread_t tids[256];
	uint32_t started = 0, n = x->b->c.threads;

	for (; started < n; started++) {
		x->b->base[started].pool = &p;
		if (pthread_create(&tids[started], NULL, base_worker, &x->b->base[started]) != 0) {
			p.error = -EAGAIN;
			break;
		}
	}
	for (uint32_t i = 0; i < started; i++) {
		pthread_join(tids[i], NULL);
	}
	return p.error;
}

/* ---- the store's engines ---- */

static void
log_to_stderr(void *arg, int level, const char *msg)
{
	(void)arg;
	fprintf(stderr, "tutti[%d]: %s\n", level, msg);
}

static struct tutti_store *
open_store(struct ctx *x, enum path path, char *dir, size_t dir_len)
{
	struct bench *b = x->b;
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;
	const char *dirs[1] = {dir};
	char opts[128] = "";
	int rc;

	snprintf(dir, dir_len, "%s/%s", b->c.dir, path_names[path]);
	rawbw_remove_store(dir); /* a fresh store: nothing of an earlier context */
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		die(dir, -errno);
	}
	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_CREATE;
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.engine = path_engines[path];
	if (path == P_GPU_URING) {
		int n = snprintf(opts, sizeof(opts), "submit=%s,copy=%s", b->c.gpu_io_submit,
		                 b->c.gpu_io_copy);

		if (b->c.gpu_io_workers != 0) {
			n += snprintf(opts + n, sizeof(opts) - (size_t)n, ",workers=%u",
			              b->c.gpu_io_workers);
		}
		if (b->c.gpu_io_sms != 0) {
			snprintf(opts + n, sizeof(opts) - (size_t)n, ",sms=%u", b->c.gpu_io_sms);
		}
	} else if (path == P_POSIX && b->c.posix_threads != 0) {
		snprintf(opts, sizeof(opts), "threads=%u", b->c.posix_threads);
	}
	o.engine_opts = opts;
	/* One request and a few spare slots: each store round evicts the previous round. */
	o.capacity_bytes = (uint64_t)(x->chunks + 4) * tutti_geometry_slot_bytes(&b->geo);
	o.staging_bytes = b->c.staging_bytes;
	if (b->c.queue_depth != 0) {
		o.queue_depth = b->c.queue_depth;
	}
	b->queue_depth = o.queue_depth;
	o.key_bytes = KEY_BYTES;
	o.log_fn = log_to_stderr; /* errors always, with their reason */
	if (b->c.trace) {
		o.log_level = TUTTI_LOG_DEBUG;
	}
	rc = tutti_store_open(&b->geo, &o, &st);
	if (rc == -EOPNOTSUPP && path == P_GDS) {
		return NULL; /* cuFile is not installed or refuses this platform (logged) */
	}
	if (rc < 0) {
		die("tutti_store_open", rc);
	}
	return st;
}

static void
close_store(struct tutti_store *st, const char *dir)
{
	tutti_store_close(st);
	rawbw_remove_store(dir);
}

static struct tutti_request
request(const struct ctx *x, const uint32_t *ids)
{
	return (struct tutti_request){
	    .size = sizeof(struct tutti_request),
	    .nr_keys = x->chunks,
	    .keys = x->keys,
	    .nr_blocks = x->n,
	    .block_ids = ids,
	};
}

/* ---- rounds ---- */

struct round_meter {
	uint64_t t0;
	double cpu0, machine0;
	struct io_threads io0;
	struct tutti_stats s0;
};

static void
meter_start(struct round_meter *m, struct tutti_store *st)
{
	m->s0 = (struct tutti_stats){.size = sizeof(m->s0)};
	if (st != NULL) {
		tutti_store_get_stats(st, &m->s0);
	}
	io_threads_snap(&m->io0);
	m->machine0 = bu_machine_busy_s();
	m->cpu0 = bu_process_cpu_s();
	m->t0 = bu_now_ns();
}

static void
meter_stop(const struct round_meter *m, struct ctx *x, struct tutti_store *st, struct phase *ph,
           uint32_t r)
{
	uint64_t ns = bu_now_ns() - m->t0;
	double gb = (double)x->bytes / 1e9, wall = (double)ns / 1e9;
	double cpu = bu_process_cpu_s() - m->cpu0, machine = bu_machine_busy_s();
	struct tutti_stats s1 = {.size = sizeof(s1)};
	struct io_threads io1;
	uint32_t ran = 0;

	ph->cpu_s[r] = cpu / gb;
	io_threads_snap(&io1);
	ph->io_thread_s[r] = io_threads_time(&m->io0, &io1, false) / gb;
	ph->cores_process[r] = cpu / wall;
	ph->cores_machine[r] =
	    machine >= 0 && m->machine0 >= 0 ? (machine - m->machine0) / wall : -1;
	ph->cores_iowq[r] = io_threads_sum(&m->io0, &io1, false, IOT_WORKER, &ran) / wall;
	ph->iowq_ran[r] = ran;
	ph->cores_iowq_runnable[r] = io_threads_sum(&m->io0, &io1, true, IOT_WORKER, NULL) / wall;
	ph->cores_sq[r] = io_threads_sum(&m->io0, &io1, false, IOT_SQ, NULL) / wall;
	ph->gbps[r] = (double)x->bytes / (double)ns;
	ph->wall_s = wall;
	ph->wall_sum_s += wall;
	if (st != NULL) {
		tutti_store_get_stats(st, &s1);
		ph->io_wait_ns += s1.wave_io_wait_ns - m->s0.wave_io_wait_ns;
		ph->copy_wait_ns += s1.wave_copy_wait_ns - m->s0.wave_copy_wait_ns;
		ph->submits = s1.io_submits - m->s0.io_submits;
		ph->kernel_ns = s1.gpu_io_kernel_ns - m->s0.gpu_io_kernel_ns;
		ph->block_ns = s1.gpu_io_block_ns - m->s0.gpu_io_block_ns;
		ph->staging_bytes = s1.staging_bytes;
	}
}

/* Returns false when the path cannot run here (engine gds without a usable cuFile). */
static bool
run_path(struct ctx *x, enum path path, struct phase *store, struct phase *retrieve,
         uint64_t *mismatches)
{
	struct bench *b = x->b;
	struct tutti_store *st = NULL;
	struct tutti_request req;
	char dir[4100];
	int32_t *status = calloc(x->chunks, sizeof(*status));
	uint32_t R = b->c.repeats;
	int64_t rc;

	if (status == NULL) {
		die("calloc", -ENOMEM);
	}
	if (path != P_BASELINE) {
		st = open_store(x, path, dir, sizeof(dir));
		if (st == NULL) {
			printf("%-9s %7llu tok %s: not available here (see the log)\n",
			       b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens,
			       path_names[path]);
			free(status);
			return false;
		}
	}
	for (uint32_t r = 0; r < R; r++) {
		struct round_meter m;

		store->raw_gbps[r] = raw_round(b, x->bytes, true, r);
		make_keys(x, r);
		req = request(x, x->src_ids);
		meter_start(&m, st);
		rc = st != NULL ? tutti_store_save(st, x->src_kv, &req, 1, status)
		                : base_run(x, true);
		meter_stop(&m, x, st, store, r);
		if (rc < 0 || (st != NULL && rc != x->chunks)) {
			fprintf(stderr, "%s store: %lld of %u chunks (first status %d)\n",
			        path_names[path], (long long)rc, x->chunks, status[0]);
			die("store", rc < 0 ? (int)rc : -EIO);
		}
	}
	for (uint32_t r = 0; r < R; r++) {
		struct round_meter m;

		retrieve->raw_gbps[r] = raw_round(b, x->bytes, false, r);
		poison(x);
		req = request(x, x->dst_ids);
		meter_start(&m, st);
		rc = st != NULL ? tutti_store_load(st, x->dst_kv, &req, 1, 0, b->L, status)
		                : base_run(x, false);
		meter_stop(&m, x, st, retrieve, r);
		if (rc < 0 || (st != NULL && rc != x->chunks)) {
			fprintf(stderr, "%s retrieve: %lld of %u chunks (first status %d)\n",
			        path_names[path], (long long)rc, x->chunks, status[0]);
			die("retrieve", rc < 0 ? (int)rc : -EIO);
		}
	}
	retrieve->idle_io_cores = store->idle_io_cores = -1;
	if (st != NULL && b->c.idle_s > 0) {
		struct io_threads t0, t1;
		struct timespec left = {(time_t)b->c.idle_s,
		                        (long)((b->c.idle_s - (double)(time_t)b->c.idle_s) * 1e9)};

		io_threads_snap(&t0);
		while (nanosleep(&left, &left) != 0 && errno == EINTR) {
		}
		io_threads_snap(&t1);
		retrieve->idle_io_cores = io_threads_time(&t0, &t1, false) / b->c.idle_s;
	}
	*mismatches = check(x);
	if (st != NULL) {
		close_store(st, dir);
	}
	free(status);
	return true;
}

/* Whether \p path moves this bench's KV in waves, whose caller's waits the store counts: engines
 * uring and posix with GPU KV. */
static bool
in_waves(const struct bench *b, enum path path)
{
	return b->c.gpu_kv && (path == P_URING || path == P_POSIX);
}

static void
report(struct ctx *x, enum path path, const char *op, const struct phase *ph, uint64_t mismatches)
{
	struct bench *b = x->b;
	uint32_t R = b->c.repeats;
	double gbps = bu_median(ph->gbps, R), raw = bu_median(ph->raw_gbps, R);
	double cpu = bu_median(ph->cpu_s, R), iot = bu_median(ph->io_thread_s, R);
	double sm_share =
	    ph->wall_s > 0 && b->sms > 0 ? (double)ph->block_ns / 1e9 / ph->wall_s / b->sms : 0;
	bool store = strcmp(op, "store") == 0;
	double limit = store ? ceiling_write_limit(&b->ceiling, b->c.gpu_kv)
	                     : ceiling_read_limit(&b->ceiling, b->c.gpu_kv);
	/* The best the ceiling's through phase found of storage and PCIe at once (tmpfs, GPU KV):
	 * beside the limit, never instead of it. */
	double through =
	    store ? ceiling_write_through(&b->ceiling) : ceiling_read_through(&b->ceiling);
	/* A row faster than its limit shows a sweep that missed the storage's best (cut by its
	 * budget), not an engine beyond the machine: said on the row, never left as a ratio. */
	bool above = limit > 0 && gbps > limit;
	/* Engines uring and posix move GPU KV in waves: the share of the rounds' time their
	 * caller waited for the storage and for the GPU says which one held them back. */
	bool wait_known = in_waves(b, path) && ph->wall_sum_s > 0;
	double io_share = wait_known ? (double)ph->io_wait_ns / 1e9 / ph->wall_sum_s : 0;
	double gpu_share = wait_known ? (double)ph->copy_wait_ns / 1e9 / ph->wall_sum_s : 0;
	/* Where the CPU went, for the text line and the JSON alike. */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	double machine = bu_median(ph->cores_machine, R), process = bu_median(ph->cores_process, R);
	double iowq = bu_median(ph->cores_iowq, R), iowq_ran = bu_median(ph->iowq_ran, R);
	double runnable = bu_median(ph->cores_iowq_runnable, R), sq = bu_median(ph->cores_sq, R);

	printf("%-9s %7llu tok %-8s %-9s %6.2f GB/s  x%.2f of limit %.2f  (one-ring raw %.2f)  "
	       "cpu %.3f s/GB (io threads %.3f)  syscalls/layer %.1f  kernel %.1f ms  SM share "
	       "%.3f  %s\n",
	       b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens, op,
	       path_names[path], gbps, limit > 0 ? gbps / limit : 0, limit, raw, cpu, iot,
	       (double)ph->submits / b->L, (double)ph->kernel_ns / 1e6, sm_share,
	       mismatches == 0 ? "bit-exact" : "MISMATCH");
	if (through > 0) {
		printf("%-9s %7llu tok %-8s %-9s x%.2f of the ceiling's through phase %.2f GB/s "
		       "(the best found of storage and PCIe at once)\n",
		       b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens, op,
		       path_names[path], gbps / through, through);
	}
	if (wait_known) {
		printf("%-9s %7llu tok %-8s %-9s the caller waited %.0f%% of the time for the "
		       "storage, %.0f%% for the GPU\n",
		       b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens, op,
		       path_names[path], 100 * io_share, 100 * gpu_share);
	}
	printf("%-9s %7llu tok %-8s %-9s cores busy: machine %.1f of %ld, process %.1f, io-wq %.1f "
	       "(%.0f workers ran, runnable unrun %.1f), SQ thread %.2f\n",
	       b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens, op,
	       path_names[path], machine, cpus, process, iowq, iowq_ran, runnable, sq);
	if (ph->idle_io_cores >= 0) {
		printf("%-9s %7llu tok %-8s %-9s idle %.1f s after the rounds: io threads %.4f "
		       "cores\n",
		       b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens, op,
		       path_names[path], b->c.idle_s, ph->idle_io_cores);
	}
	if (above) {
		printf(
		    "%-9s %7llu tok %-8s %-9s above its limit: the ceiling sweep did not find this "
		    "storage's best (raise --ceiling-s); the ratio is no measure\n",
		    b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens, op,
		    path_names[path]);
	}
	fflush(stdout);
	b->failed |= mismatches != 0;
	if (b->json == NULL) {
		return;
	}
	fprintf(b->json,
	        "{\"storage\":\"%s\",\"model\":\"%s\",\"kv\":\"%s\",\"context_tokens\":%llu,"
	        "\"op\":\"%s\",\"path\":\"%s\",\"gpu_io_submit\":\"%s\",\"gpu_io_copy\":\"%s\","
	        "\"bytes\":%llu,\"repeats\":%u,\"gbps\":%.3f,"
	        "\"limit_gbps\":%.3f,\"ratio_to_limit\":%.3f,\"raw_gbps\":%.3f,"
	        "\"ratio_to_raw\":%.3f,\"raw_bs\":%u,\"raw_qd\":%u,\"cpu_s_per_gb\":%.4f,"
	        "\"io_thread_cpu_s_per_gb\":%.4f,\"syscalls_per_layer\":%.2f,"
	        "\"io_kernel_ms\":%.3f,\"io_kernel_sm_share\":%.4f,\"gpu_io_workers\":%u,"
	        "\"gpu_io_sms\":%u,\"staging_mib\":%llu,\"store_staging_mib\":%llu,"
	        "\"above_limit\":%s,\"wall_s\":%.4f,"
	        "\"bit_exact\":%s,\"rounds_gbps\":[",
	        b->emulated ? "emulated-tmpfs" : "disk", b->c.model, b->c.gpu_kv ? "gpu" : "host",
	        (unsigned long long)x->tokens, op, path_names[path], b->c.gpu_io_submit,
	        b->c.gpu_io_copy, (unsigned long long)x->bytes, R, gbps, limit,
	        limit > 0 ? gbps / limit : 0, raw, gbps / raw,
	        store ? b->raw_write.bs : b->raw_read.bs, store ? b->raw_write.qd : b->raw_read.qd,
	        cpu, iot, (double)ph->submits / b->L, (double)ph->kernel_ns / 1e6, sm_share,
	        b->c.gpu_io_workers, b->c.gpu_io_sms,
	        (unsigned long long)(b->c.staging_bytes >> 20),
	        (unsigned long long)(ph->staging_bytes >> 20), above ? "true" : "false", ph->wall_s,
	        mismatches == 0 ? "true" : "false");
	for (uint32_t r = 0; r < R; r++) {
		fprintf(b->json, "%s%.3f", r ? "," : "", ph->gbps[r]);
	}
	fprintf(b->json, "]");
	if (through > 0) {
		fprintf(b->json, ",\"through_gbps\":%.3f,\"ratio_to_through\":%.3f", through,
		        gbps / through);
	}
	if (ph->idle_io_cores >= 0) {
		fprintf(b->json, ",\"idle_s\":%.1f,\"idle_io_thread_cores\":%.5f", b->c.idle_s,
		        ph->idle_io_cores);
	}
	if (path == P_POSIX) {
		fprintf(b->json, ",\"posix_threads\":%u", b->c.posix_threads);
	}
	if (path != P_BASELINE) {
		fprintf(b->json, ",\"queue_depth\":%u", b->queue_depth);
	}
	fprintf(b->json,
	        ",\"online_cpus\":%ld,\"cores_machine\":%.2f,\"cores_process\":%.2f,"
	        "\"cores_iowq\":%.2f,\"iowq_workers_ran\":%.0f,\"cores_iowq_runnable\":%.2f,"
	        "\"cores_sq\":%.2f",
	        cpus, machine, process, iowq, iowq_ran, runnable, sq);
	if (wait_known) {
		fprintf(b->json, ",\"io_wait_share\":%.3f,\"gpu_wait_share\":%.3f", io_share,
		        gpu_share);
	}
	fprintf(b->json, "}\n");
	fflush(b->json);
}

/* The request of \p tokens tokens: block tables, keys, the KV over the arenas, the source filled
 * from the host pattern. */
static void
ctx_open(struct bench *b, uint64_t tokens, struct ctx *x)
{
	*x = (struct ctx){.b = b, .tokens = tokens};
	x->n = (uint32_t)(tokens / b->geo.block_tokens);
	x->chunks = (uint32_t)(tokens / b->geo.chunk_tokens);
	x->bytes = (uint64_t)x->n * b->L * b->lbb;
	x->src_ids = malloc(x->n * sizeof(*x->src_ids));
	x->dst_ids = malloc(x->n * sizeof(*x->dst_ids));
	x->keys = malloc((size_t)x->chunks * KEY_BYTES);
	if (x->src_ids == NULL || x->dst_ids == NULL || x->keys == NULL) {
		die("malloc", -ENOMEM);
	}
	bu_shuffle(x->src_ids, x->n, b->nonce + tokens);
	bu_shuffle(x->dst_ids, x->n, b->nonce + tokens + 1);
	x->src_kv = make_kv(b, b->src, x->n);
	x->dst_kv = make_kv(b, b->dst, x->n);
	for (uint32_t l = 0; l < b->L; l++) {
		mem_copy(b, block_at(x, b->src, l, 0), b->pattern + (uint64_t)l * LAYER_SHIFT,
		         (uint64_t)x->n * b->lbb);
	}
}

static void
ctx_close(struct ctx *x)
{
	tutti_kv_destroy(x->src_kv);
	tutti_kv_destroy(x->dst_kv);
	free(x->src_ids);
	free(x->dst_ids);
	free(x->keys);
}

static void
run_context(struct bench *b, uint64_t tokens)
{
	struct ctx x;

	ctx_open(b, tokens, &x);
	/* The raw reference: the best point of a sweep over up to --raw-gib of the file. */
	{
		struct rawbw_target t = {.fds = &b->raw_fd,
		                         .nr_fds = 1,
		                         .span = b->raw_file_bytes,
		                         .mem = b->raw_mem,
		                         .mem_bytes = b->raw_mem_bytes,
		                         .async = b->emulated};
		uint64_t n = x.bytes < b->c.raw_bytes ? x.bytes : b->c.raw_bytes;
		int rc;

		t.write = true;
		rc = rawbw_sweep(&t, n, &b->raw_write);
		t.write = false;
		if (rc == 0) {
			rc = rawbw_sweep(&t, n, &b->raw_read);
		}
		if (rc < 0) {
			die("raw sweep", rc);
		}
	}
	for (int p = 0; p < NR_PATHS; p++) {
		struct phase store = {0}, retrieve = {0};
		uint64_t mismatches = 0;

		if (!b->c.paths[p]) {
			continue;
		}
		if (!run_path(&x, (enum path)p, &store, &retrieve, &mismatches)) {
			continue;
		}
		report(&x, (enum path)p, "store", &store, mismatches);
		report(&x, (enum path)p, "retrieve", &retrieve, mismatches);
	}
	ctx_close(&x);
}

/* ---- latency: one stored request loaded again and again ---- */

/* What the destination holds after a correct load, made from the host pattern the source was
 * filled from (not from the source itself): block dst_ids[i] of each layer holds source block
 * src_ids[i] of that layer. */
static void
expected_image(const struct ctx *x, uint8_t *img)
{
	const struct bench *b = x->b;

	for (uint32_t l = 0; l < b->L; l++) {
		for (uint32_t i = 0; i < x->n; i++) {
			memcpy(img + ((uint64_t)l * x->n + x->dst_ids[i]) * b->lbb,
			       b->pattern + (uint64_t)l * LAYER_SHIFT +
			           (uint64_t)x->src_ids[i] * b->lbb,
			       b->lbb);
		}
	}
}

/* Layer blocks of the destination that differ from \p img; GPU KV is read back into
 * \p readback (x->bytes of host memory) first, host KV is compared where it is. */
static uint64_t
check_image(const struct ctx *x, const uint8_t *img, uint8_t *readback)
{
	const struct bench *b = x->b;
	const uint8_t *got = b->dst;
	uint64_t bad = 0, units = (uint64_t)b->L * x->n;

	if (b->c.gpu_kv) {
		mem_copy(b, readback, b->dst, x->bytes);
		got = readback;
	}
	for (uint64_t u = 0; u < units; u++) {
		bad += memcmp(got + u * b->lbb, img + u * b->lbb, b->lbb) != 0;
	}
	return bad;
}

struct latency {
	double io_thread_s; /* the I/O threads' CPU over the loads and the pauses after them */
	double loop_s;      /* wall time of the loads and the pauses */
	double *ms;         /* every load, in order */
	double *sorted;     /* the same, ascending */
	/* Where each load's time went, to tell a slow load's cause: the GPU time of gpu-uring's
	 * I/O kernels, the io_uring threads' (and ring helper's) time on a CPU and time runnable
	 * but waiting for one, and the engine's submission calls (for gpu-uring, wakeups of the
	 * SQ thread). Threads that exit within a load are missed. Of the CPU time, the SQ thread's
	 * alone, and how many io-wq workers ran: a load whose copies fell to few workers shows
	 * here. */
	double *kernel_ms, *io_cpu_ms, *io_wait_ms, *sq_cpu_ms;
	/* Time inside tutti_store_load, and of it what a uring or posix load of GPU KV waited for:
	 * the storage, the GPU (tutti_stats' wave_*_wait_ns). */
	double *call_ms, *storage_wait_ms, *gpu_wait_ms;
	uint64_t *submits;
	uint32_t *workers;
	uint32_t loads;      /* timed and checked */
	uint32_t bad_loads;  /* loads with a block that differs from what was stored */
	uint64_t bad_blocks; /* layer blocks that differed, over every load */
};

/* "name":[v,...] with \p n values. */
static void
json_array(FILE *f, const char *name, const double *v, uint32_t n)
{
	fprintf(f, "\"%s\":[", name);
	for (uint32_t i = 0; i < n; i++) {
		fprintf(f, "%s%.4f", i ? "," : "", v[i]);
	}
	fprintf(f, "]");
}

/* The p50 of \p n per-load values by nearest rank, as the loads' own p50 (bu_median averages
 * the middle two and takes at most BU_MAX_VALUES). */
static double
loads_median(const double *v, uint32_t n)
{
	double *s = malloc(n * sizeof(*s)), m;

	if (s == NULL) {
		die("malloc", -ENOMEM);
	}
	memcpy(s, v, n * sizeof(*s));
	bu_sort(s, n);
	m = bu_percentile(s, n, 50);
	free(s);
	return m;
}

static void
report_latency(struct ctx *x, enum path path, struct latency *lat)
{
	struct bench *b = x->b;
	uint32_t n = lat->loads;
	double p50, p99, max, mean = 0, limit = ceiling_read_limit(&b->ceiling, b->c.gpu_kv);
	/* bytes / limit: the time the request takes at the machine's limit, and the target
	 * 1.3 x that + 1 ms (a fixed millisecond for a call's set-up and completion). */
	double ideal_ms = limit > 0 ? (double)x->bytes / (limit * 1e9) * 1e3 : 0;
	double target_ms = limit > 0 ? 1.3 * ideal_ms + 1 : 0;
	bool exact = lat->bad_loads == 0;

	memcpy(lat->sorted, lat->ms, n * sizeof(*lat->ms));
	bu_sort(lat->sorted, n);
	p50 = bu_percentile(lat->sorted, n, 50);
	p99 = bu_percentile(lat->sorted, n, 99);
	max = lat->sorted[n - 1];
	for (uint32_t i = 0; i < n; i++) {
		mean += lat->ms[i] / n;
	}
	printf("%-9s %7llu tok %-8s %-9s %6.1f MiB  p50 %.2f ms  p99 %.2f ms  max %.2f ms  "
	       "(first %.2f)  bytes/limit %.2f ms at %.2f GB/s  target %.2f ms: p50 x%.2f, p99 "
	       "x%.2f  %u loads %s",
	       b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens, "latency",
	       path_names[path], (double)x->bytes / (1 << 20), p50, p99, max, lat->ms[0], ideal_ms,
	       limit, target_ms, target_ms > 0 ? p50 / target_ms : 0,
	       target_ms > 0 ? p99 / target_ms : 0, n, exact ? "bit-exact" : "MISMATCH");
	if (b->c.pause_ms > 0) {
		printf("  %.0f ms apart: io threads %.3f ms a load, %.4f cores", b->c.pause_ms,
		       lat->io_thread_s * 1e3 / n, lat->io_thread_s / lat->loop_s);
	}
	printf("\n");
	{
		uint32_t w = 0; /* the slowest load, and where its time went */

		for (uint32_t i = 1; i < n; i++) {
			w = lat->ms[i] > lat->ms[w] ? i : w;
		}
		printf(
		    "%-9s %7llu tok %-8s %-9s slowest load %u: %.2f ms, io kernels %.2f ms, io "
		    "threads on a CPU %.2f ms (SQ thread %.2f, %u io-wq workers ran) and waiting "
		    "for one %.2f ms, %llu submissions\n",
		    b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens, "latency",
		    path_names[path], w, lat->ms[w], lat->kernel_ms[w], lat->io_cpu_ms[w],
		    lat->sq_cpu_ms[w], lat->workers[w], lat->io_wait_ms[w],
		    (unsigned long long)lat->submits[w]);
		if (in_waves(b, path)) {
			printf(
			    "%-9s %7llu tok %-8s %-9s loads' medians: %.2f ms inside the call, of "
			    "it %.2f ms waiting for the storage, %.2f ms for the GPU\n",
			    b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens,
			    "latency", path_names[path], loads_median(lat->call_ms, n),
			    loads_median(lat->storage_wait_ms, n),
			    loads_median(lat->gpu_wait_ms, n));
		}
	}
	fflush(stdout);
	b->failed |= !exact;
	if (b->json == NULL) {
		return;
	}
	fprintf(b->json,
	        "{\"storage\":\"%s\",\"model\":\"%s\",\"kv\":\"%s\",\"context_tokens\":%llu,"
	        "\"chunks\":%u,\"op\":\"load-latency\",\"path\":\"%s\",\"gpu_io_submit\":\"%s\","
	        "\"bytes\":%llu,"
	        "\"loads\":%u,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"max_ms\":%.4f,"
	        "\"min_ms\":%.4f,\"mean_ms\":%.4f,\"first_ms\":%.4f,\"p50_gbps\":%.3f,"
	        "\"limit_gbps\":%.3f,\"bytes_over_limit_ms\":%.4f,\"target_ms\":%.4f,"
	        "\"p50_over_target\":%.4f,\"p99_over_target\":%.4f,\"p50_within_target\":%s,"
	        "\"p99_within_target\":%s,\"verified_loads\":%u,\"mismatched_loads\":%u,"
	        "\"mismatched_blocks\":%llu,\"bit_exact\":%s,",
	        b->emulated ? "emulated-tmpfs" : "disk", b->c.model, b->c.gpu_kv ? "gpu" : "host",
	        (unsigned long long)x->tokens, x->chunks, path_names[path], b->c.gpu_io_submit,
	        (unsigned long long)x->bytes, n, p50, p99, max, lat->sorted[0], mean, lat->ms[0],
	        p50 > 0 ? (double)x->bytes / (p50 * 1e6) : 0, limit, ideal_ms, target_ms,
	        target_ms > 0 ? p50 / target_ms : 0, target_ms > 0 ? p99 / target_ms : 0,
	        target_ms > 0 && p50 <= target_ms ? "true" : "false",
	        target_ms > 0 && p99 <= target_ms ? "true" : "false", n, lat->bad_loads,
	        (unsigned long long)lat->bad_blocks, exact ? "true" : "false");
	if (b->c.pause_ms > 0) {
		fprintf(
		    b->json,
		    "\"pause_ms\":%.1f,\"io_thread_ms_per_load\":%.4f,\"io_thread_cores\":%.5f,",
		    b->c.pause_ms, lat->io_thread_s * 1e3 / n, lat->io_thread_s / lat->loop_s);
	}
	{
		const struct {
			const char *name;
			const double *v;
		} per_load[] = {
		    {"loads_ms", lat->ms},
		    {"loads_kernel_ms", lat->kernel_ms},
		    {"loads_io_cpu_ms", lat->io_cpu_ms},
		    {"loads_io_wait_ms", lat->io_wait_ms},
		    {"loads_sq_cpu_ms", lat->sq_cpu_ms},
		    {"loads_call_ms", lat->call_ms},
		    {"loads_storage_wait_ms", lat->storage_wait_ms},
		    {"loads_gpu_wait_ms", lat->gpu_wait_ms},
		};

		for (size_t k = 0; k < sizeof(per_load) / sizeof(per_load[0]); k++) {
			fprintf(b->json, "%s", k ? "," : "");
			json_array(b->json, per_load[k].name, per_load[k].v, n);
		}
	}
	fprintf(b->json, ",\"loads_submits\":[");
	for (uint32_t i = 0; i < n; i++) {
		fprintf(b->json, "%s%llu", i ? "," : "", (unsigned long long)lat->submits[i]);
	}
	fprintf(b->json, "],\"loads_io_workers\":[");
	for (uint32_t i = 0; i < n; i++) {
		fprintf(b->json, "%s%u", i ? "," : "", lat->workers[i]);
	}
	fprintf(b->json, "]}\n");
	fflush(b->json);
}

/* Store the request once through \p path, then load it --latency times, each load timed from
 * the call until its data is in the KV and checked against \p img. */
static void
run_latency_path(struct ctx *x, enum path path, const uint8_t *img, uint8_t *readback)
{
	struct bench *b = x->b;
	struct latency lat = {.loads = b->c.latency_loads};
	int32_t *status = calloc(x->chunks, sizeof(*status));
	struct io_threads io0, io1, *load0 = calloc(2, sizeof(*load0)), *load1 = load0 + 1;
	uint64_t loop0;
	struct tutti_store *st;
	struct tutti_request req;
	char dir[4100];
	int64_t rc;

	lat.ms = calloc(lat.loads, sizeof(*lat.ms));
	lat.sorted = calloc(lat.loads, sizeof(*lat.sorted));
	lat.kernel_ms = calloc(lat.loads, sizeof(*lat.kernel_ms));
	lat.io_cpu_ms = calloc(lat.loads, sizeof(*lat.io_cpu_ms));
	lat.io_wait_ms = calloc(lat.loads, sizeof(*lat.io_wait_ms));
	lat.submits = calloc(lat.loads, sizeof(*lat.submits));
	lat.sq_cpu_ms = calloc(lat.loads, sizeof(*lat.sq_cpu_ms));
	lat.workers = calloc(lat.loads, sizeof(*lat.workers));
	lat.call_ms = calloc(lat.loads, sizeof(*lat.call_ms));
	lat.storage_wait_ms = calloc(lat.loads, sizeof(*lat.storage_wait_ms));
	lat.gpu_wait_ms = calloc(lat.loads, sizeof(*lat.gpu_wait_ms));
	if (status == NULL || lat.ms == NULL || lat.sorted == NULL || lat.kernel_ms == NULL ||
	    lat.io_cpu_ms == NULL || lat.io_wait_ms == NULL || lat.submits == NULL ||
	    lat.sq_cpu_ms == NULL || lat.workers == NULL || lat.call_ms == NULL ||
	    lat.storage_wait_ms == NULL || lat.gpu_wait_ms == NULL || load0 == NULL) {
		die("calloc", -ENOMEM);
	}
	st = open_store(x, path, dir, sizeof(dir));
	if (st == NULL) {
		printf("%-9s %7llu tok %s: not available here (see the log)\n",
		       b->emulated ? "emulated" : "disk", (unsigned long long)x->tokens,
		       path_names[path]);
		goto out;
	}
	make_keys(x, 0);
	req = request(x, x->src_ids);
	rc = tutti_store_save(st, x->src_kv, &req, 1, status);
	if (rc != x->chunks) {
		fprintf(stderr, "%s store: %lld of %u chunks (first status %d)\n", path_names[path],
		        (long long)rc, x->chunks, status[0]);
		die("store", rc < 0 ? (int)rc : -EIO);
	}
	req = request(x, x->dst_ids);
	io_threads_snap(&io0);
	loop0 = bu_now_ns();
	for (uint32_t i = 0; i < lat.loads; i++) {
		struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};
		uint64_t t0, bad;

		poison(x);
		/* The counters are read outside the timed span. */
		tutti_store_get_stats(st, &s0);
		io_threads_snap(load0);
		t0 = bu_now_ns();
		rc = tutti_store_load(st, x->dst_kv, &req, 1, 0, b->L, status);
		kv_sync(b);
		lat.ms[i] = (double)(bu_now_ns() - t0) / 1e6;
		io_threads_snap(load1);
		tutti_store_get_stats(st, &s1);
		lat.kernel_ms[i] = (double)(s1.gpu_io_kernel_ns - s0.gpu_io_kernel_ns) / 1e6;
		lat.submits[i] = s1.io_submits - s0.io_submits;
		lat.call_ms[i] = (double)(s1.load_ns - s0.load_ns) / 1e6;
		lat.storage_wait_ms[i] = (double)(s1.wave_io_wait_ns - s0.wave_io_wait_ns) / 1e6;
		lat.gpu_wait_ms[i] = (double)(s1.wave_copy_wait_ns - s0.wave_copy_wait_ns) / 1e6;
		lat.io_cpu_ms[i] = io_threads_time(load0, load1, false) * 1e3;
		lat.io_wait_ms[i] = io_threads_time(load0, load1, true) * 1e3;
		lat.sq_cpu_ms[i] = io_threads_sum(load0, load1, false, IOT_SQ, NULL) * 1e3;
		io_threads_sum(load0, load1, false, IOT_WORKER, &lat.workers[i]);
		if (rc != x->chunks) {
			fprintf(stderr, "%s load %u: %lld of %u chunks (first status %d)\n",
			        path_names[path], i, (long long)rc, x->chunks, status[0]);
			die("load", rc < 0 ? (int)rc : -EIO);
		}
		bad = check_image(x, img, readback);
		lat.bad_loads += bad != 0;
		lat.bad_blocks += bad;
		if (b->c.pause_ms > 0) {
			struct timespec left = {(time_t)(b->c.pause_ms / 1e3),
			                        (long)(fmod(b->c.pause_ms, 1e3) * 1e6)};

			while (nanosleep(&left, &left) != 0 && errno == EINTR) {
			}
		}
	}
	io_threads_snap(&io1);
	lat.loop_s = (double)(bu_now_ns() - loop0) / 1e9;
	lat.io_thread_s = io_threads_time(&io0, &io1, false);
	close_store(st, dir);
	report_latency(x, path, &lat);
out:
	free(lat.ms);
	free(lat.sorted);
	free(lat.kernel_ms);
	free(lat.io_cpu_ms);
	free(lat.io_wait_ms);
	free(lat.submits);
	free(lat.sq_cpu_ms);
	free(lat.call_ms);
	free(lat.storage_wait_ms);
	free(lat.gpu_wait_ms);
	free(lat.workers);
	free(load0);
	free(status);
}

static void
run_latency(struct bench *b, uint64_t tokens)
{
	struct ctx x;
	uint8_t *img, *readback = NULL;

	ctx_open(b, tokens, &x);
	img = host_mem_alloc(b, x.bytes);
	expected_image(&x, img);
	if (b->c.gpu_kv) {
		readback = host_mem_alloc(b, x.bytes);
	}
	for (int p = 0; p < NR_PATHS; p++) {
		if (b->c.paths[p] && p != P_BASELINE) {
			run_latency_path(&x, (enum path)p, img, readback);
		}
	}
	host_mem_free(b, img);
	if (readback != NULL) {
		host_mem_free(b, readback);
	}
	ctx_close(&x);
}

/* ---- set-up ---- */

static void
usage(void)
{
	fprintf(
	    stderr,
	    "usage: tutti-gpu-store-bench --dir DIR [--contexts T1,T2,...] "
	    "[--paths gpu-uring,uring,posix,gds,baseline]\n"
	    "       [--repeats N] [--threads N] [--staging-mib N] [--raw-gib N] "
	    "[--ceiling-s X] [--model NAME] [--json FILE]\n"
	    "       [--kv gpu|host] [--latency N [--pause-ms X]] [--gpu-io-submit "
	    "auto|sqpoll|host] [--gpu-io-copy auto|sm|dma] [--idle-s X]"
	    " [--trace]\n"
	    "       [--gpu-io-workers N] [--gpu-io-sms N] [--posix-threads N]\n"
	    "       [--queue-depth N]\n"
	    "  --queue-depth N     the store's I/Os in flight (default the store's, 32); the "
	    "staging\n"
	    "                allocated is at most N x its 4 MiB I/Os; gpu-uring cuts it into "
	    "bounce slots\n"
	    "                of one object\n"
	    "  --posix-threads N   engine posix's threads (default the store's: one per I/O in "
	    "flight, on tmpfs\n"
	    "                at most the online CPUs)\n"
	    "  --gpu-io-workers N, --gpu-io-sms N   engine gpu-uring's kernel workers and SMs "
	    "(its options\n"
	    "                workers and sms; default and 0: its own; 0 in the JSON)\n"
	    "  --idle-s X    after each path's rounds, the I/O threads' CPU over X idle seconds\n"
	    "  --gpu-io-submit   who issues engine gpu-uring's I/O (its option submit; "
	    "default auto)\n"
	    "  --gpu-io-copy     how engine gpu-uring's loads cross into HBM (its option copy; "
	    "default auto)\n"
	    "  --kv host     KV in host memory, no CUDA call (runs without a GPU); not with "
	    "the baseline\n"
	    "  --latency N   instead of bandwidth rounds: per engine path and size, store once, "
	    "then N loads,\n"
	    "                each timed from the call until the data is in the KV and checked "
	    "bit for bit;\n"
	    "                p50, p99 (nearest rank), max against the target 1.3 x bytes / "
	    "limit + 1 ms.\n"
	    "                Sizes: --contexts (default 8 chunks and 1 chunk: 2048 and 256 "
	    "tokens)\n"
	    "  --pause-ms X  with --latency: X ms between loads (a server's cadence), and the I/O "
	    "threads' CPU\n"
	    "                over the loads and the pauses\n"
	    "  A row that is not bit-exact makes the exit status 1.\n");
	exit(2);
}

static uint64_t
number(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	return bu_number("tutti-gpu-store-bench", opt, s, min, max);
}

static void
parse_list(const char *s, struct conf *c, bool contexts)
{
	char *copy = strdup(s), *save = NULL;

	if (copy == NULL) {
		die("strdup", -ENOMEM);
	}
	if (contexts) {
		c->nr_contexts = 0;
		c->contexts_given = true;
	} else {
		memset(c->paths, 0, sizeof(c->paths));
		c->paths_given = true;
	}
	for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		bool ok = false;

		if (contexts && c->nr_contexts < MAX_CONTEXTS) {
			c->contexts[c->nr_contexts++] = number("--contexts", t, 1, 1ull << 28);
			ok = true;
		}
		for (int p = 0; !contexts && p < NR_PATHS; p++) {
			if (strcmp(t, path_names[p]) == 0) {
				c->paths[p] = ok = true;
			}
		}
		if (!ok) {
			fprintf(stderr, "tutti-gpu-store-bench: bad list entry '%s'\n", t);
			usage();
		}
	}
	free(copy);
}

/* \p v, when it is one of the choices of gpu-uring's option \p key (the library lists them);
 * otherwise the usage. */
static const char *
gpu_uring_choice(const char *flag, const char *key, const char *v)
{
	struct tutti_engine_info info = {.size = sizeof(info)};

	if (tutti_engine_info(TUTTI_ENGINE_GPU_URING, &info) == 0) {
		for (uint32_t i = 0; i < info.nr_options; i++) {
			struct tutti_engine_option o = {.size = sizeof(o)};

			if (tutti_engine_option(TUTTI_ENGINE_GPU_URING, i, &o) < 0 ||
			    strcmp(o.name, key) != 0) {
				continue;
			}
			for (uint32_t k = 0; k < o.nr_choices; k++) {
				if (strcmp(o.choices[k], v) == 0) {
					return o.choices[k];
				}
			}
			fprintf(stderr, "tutti-gpu-store-bench: %s is one of", flag);
			for (uint32_t k = 0; k < o.nr_choices; k++) {
				fprintf(stderr, " %s", o.choices[k]);
			}
			fprintf(stderr, "\n");
		}
	}
	usage();
	return NULL;
}

static void
parse(int argc, char **argv, struct conf *c)
{
	*c = (struct conf){
	    .model = "llama-3-8b",
	    .contexts = {8192, 32768, 131072},
	    .nr_contexts = 3,
	    .paths = {true, true, false, false, true},
	    .repeats = 5,
	    .threads = 16,
	    .staging_bytes = 256ull << 20,
	    .raw_bytes = 4ull << 30,
	    .ceiling_s = 24,
	    .gpu_kv = true,
	    .gpu_io_submit = "auto",
	    .gpu_io_copy = "auto",
	};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--trace") == 0) {
			c->trace = true;
			continue;
		}
		if (v == NULL) {
			usage();
		}
		i++;
		if (strcmp(a, "--dir") == 0) {
			c->dir = v;
		} else if (strcmp(a, "--contexts") == 0) {
			parse_list(v, c, true);
		} else if (strcmp(a, "--paths") == 0) {
			parse_list(v, c, false);
		} else if (strcmp(a, "--repeats") == 0) {
			c->repeats = (uint32_t)number(a, v, 1, MAX_REPEATS);
		} else if (strcmp(a, "--threads") == 0) {
			c->threads = (uint32_t)number(a, v, 1, 256);
		} else if (strcmp(a, "--staging-mib") == 0) {
			c->staging_bytes = number(a, v, 1, 1u << 20) << 20;
		} else if (strcmp(a, "--raw-gib") == 0) {
			c->raw_bytes = number(a, v, 1, 1u << 14) << 30;
		} else if (strcmp(a, "--ceiling-s") == 0) {
			if (cliarg_double("tutti-gpu-store-bench", a, v, 0.1, 3600, &c->ceiling_s) <
			    0) {
				usage();
			}
		} else if (strcmp(a, "--idle-s") == 0) {
			if (cliarg_double("tutti-gpu-store-bench", a, v, 0.1, 600, &c->idle_s) <
			    0) {
				usage();
			}
		} else if (strcmp(a, "--model") == 0) {
			c->model = v;
		} else if (strcmp(a, "--json") == 0) {
			c->json = v;
		} else if (strcmp(a, "--kv") == 0) {
			if (strcmp(v, "gpu") != 0 && strcmp(v, "host") != 0) {
				fprintf(stderr, "tutti-gpu-store-bench: --kv is gpu or host\n");
				usage();
			}
			c->gpu_kv = strcmp(v, "gpu") == 0;
		} else if (strcmp(a, "--gpu-io-workers") == 0) {
			c->gpu_io_workers = (uint32_t)number(a, v, 1, 64);
		} else if (strcmp(a, "--gpu-io-sms") == 0) {
			c->gpu_io_sms = (uint32_t)number(a, v, 1, 64);
		} else if (strcmp(a, "--queue-depth") == 0) {
			c->queue_depth = (uint32_t)number(a, v, 1, 4096);
		} else if (strcmp(a, "--posix-threads") == 0) {
			c->posix_threads = (uint32_t)number(a, v, 1, 1024);
		} else if (strcmp(a, "--latency") == 0) {
			c->latency_loads = (uint32_t)number(a, v, 1, 100000);
		} else if (strcmp(a, "--pause-ms") == 0) {
			if (cliarg_double("tutti-gpu-store-bench", a, v, 0, 60000, &c->pause_ms) <
			    0) {
				usage();
			}
		} else if (strcmp(a, "--gpu-io-submit") == 0) {
			c->gpu_io_submit = gpu_uring_choice(a, "submit", v);
		} else if (strcmp(a, "--gpu-io-copy") == 0) {
			c->gpu_io_copy = gpu_uring_choice(a, "copy", v);
		} else {
			usage();
		}
	}
	if (c->dir == NULL || c->repeats == 0 || c->repeats > MAX_REPEATS || c->threads == 0 ||
	    c->threads > 256 || c->raw_bytes == 0) {
		usage();
	}
	if (c->pause_ms > 0 && c->latency_loads == 0) {
		fprintf(stderr,
		        "tutti-gpu-store-bench: --pause-ms spaces the loads of --latency\n");
		exit(2);
	}
	/* The baseline is left out of the default paths where it cannot run, and refused when
	 * asked for there. */
	if (c->paths[P_BASELINE] && (!c->gpu_kv || c->latency_loads > 0)) {
		if (c->paths_given) {
			fprintf(stderr, "tutti-gpu-store-bench: the baseline %s\n",
			        !c->gpu_kv
			            ? "moves blocks with CUDA copies: GPU KV only"
			            : "has no latency mode (--latency times the store's engines)");
			exit(2);
		}
		c->paths[P_BASELINE] = false;
	}
}

int
main(int argc, char **argv)
{
	struct bench b = {.raw_fd = -1};
	uint64_t max_tokens = 0, pattern_bytes, seed = 0x7475747469ull, arena;
	char device[300] = "host KV (no GPU used)";
	struct statfs sfs;
	int rc;

	parse(argc, argv, &b.c);
	rc = tutti_geometry_preset(b.c.model, &b.geo);
	if (rc < 0) {
		die(b.c.model, rc);
	}
	b.L = b.geo.nr_layers;
	b.lbb = tutti_geometry_layer_block_bytes(&b.geo);
	b.bpc = tutti_geometry_blocks_per_chunk(&b.geo);
	if (b.c.latency_loads > 0 && !b.c.contexts_given) {
		/* A prefix of 8 chunks (2048 tokens, 256 MiB with Llama-3-8B) and a single chunk.
		 */
		b.c.contexts[0] = 8ull * b.geo.chunk_tokens;
		b.c.contexts[1] = b.geo.chunk_tokens;
		b.c.nr_contexts = 2;
	}
	for (uint32_t i = 0; i < b.c.nr_contexts; i++) {
		if (b.c.contexts[i] == 0 || b.c.contexts[i] % b.geo.chunk_tokens != 0) {
			fprintf(stderr,
			        "tutti-gpu-store-bench: contexts are whole chunks of %u tokens\n",
			        b.geo.chunk_tokens);
			return 2;
		}
		max_tokens = b.c.contexts[i] > max_tokens ? b.c.contexts[i] : max_tokens;
	}
	b.max_blocks = (uint32_t)(max_tokens / b.geo.block_tokens);
	b.nonce = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	if (statfs(b.c.dir, &sfs) != 0) {
		die(b.c.dir, -errno);
	}
	b.emulated = sfs.f_type == TMPFS_MAGIC;
	if (b.c.gpu_kv) {
		struct cudaDeviceProp prop;

		cuda_ok(cudaSetDevice(0), "cudaSetDevice");
		cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
		b.sms = (uint32_t)prop.multiProcessorCount;
		snprintf(device, sizeof(device), "%s (%u SMs)", prop.name, b.sms);
	}
	if (b.c.json != NULL) {
		/* Only a regular file: a FIFO would block the open until a reader came. */
		int fd = cliarg_open("tutti-gpu-store-bench", "--json", b.c.json,
		                     O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd == -EINVAL) {
			return 2; /* said why */
		}
		b.json = fd >= 0 ? fdopen(fd, "a") : NULL;
		if (b.json == NULL) {
			die(b.c.json, fd < 0 ? fd : -errno);
		}
	}
	if (b.c.latency_loads > 0) {
		printf("# %s on %s; %s: %s; %u-token chunks, %llu-byte layer blocks; latency of %u "
		       "loads per size\n",
		       b.c.model, device, b.emulated ? "EMULATED fast NVMe (tmpfs)" : "disk",
		       b.c.dir, b.geo.chunk_tokens, (unsigned long long)b.lbb, b.c.latency_loads);
	} else {
		printf("# %s on %s; %s: %s; %u-token chunks, %llu-byte layer blocks; median of %u "
		       "rounds\n",
		       b.c.model, device, b.emulated ? "EMULATED fast NVMe (tmpfs)" : "disk",
		       b.c.dir, b.geo.chunk_tokens, (unsigned long long)b.lbb, b.c.repeats);
	}

	arena = (uint64_t)b.L * b.max_blocks * b.lbb;
	pattern_bytes = (uint64_t)b.max_blocks * b.lbb + (uint64_t)b.L * LAYER_SHIFT;
	b.src = kv_mem_alloc(&b, arena);
	b.dst = kv_mem_alloc(&b, arena);
	b.pattern = host_mem_alloc(&b, pattern_bytes);
	b.host_a = host_mem_alloc(&b, (uint64_t)b.max_blocks * b.lbb);
	b.host_b = host_mem_alloc(&b, (uint64_t)b.max_blocks * b.lbb);
	bu_fill_random(b.pattern, pattern_bytes / 8 * 8, seed);
	if (b.c.latency_loads == 0) {
		b.raw_mem_bytes = 256ull << 20;
		b.raw_mem = host_mem_alloc(&b, b.raw_mem_bytes);
		memset(b.raw_mem, 0x5a, b.raw_mem_bytes);
		/* The baseline's file, also the raw I/O's: one request's layer blocks. */
		b.raw_file_bytes = arena;
		snprintf(b.raw_path, sizeof(b.raw_path), "%s/baseline.data", b.c.dir);
		b.raw_fd =
		    open(b.raw_path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (b.raw_fd < 0) {
			die(b.raw_path, -errno);
		}
		if (fallocate(b.raw_fd, 0, 0, (off_t)arena) != 0) {
			die("fallocate", -errno);
		}
		/* Written once through where raw reads will go (reads of unwritten extents would
		 * not reach the device). */
		{
			struct rawbw_target t = {.fds = &b.raw_fd,
			                         .nr_fds = 1,
			                         .span = arena,
			                         .mem = b.raw_mem,
			                         .mem_bytes = b.raw_mem_bytes,
			                         .write = true,
			                         .async = b.emulated};
			uint64_t n = (uint64_t)b.c.repeats * b.c.raw_bytes;
			double gbps = rawbw_run(
			    &t, 0, (n < arena ? n : arena) / (4u << 20) * (4u << 20), 4u << 20, 16);

			if (gbps < 0) {
				die("pre-write", (int)gbps);
			}
		}
	}
	{
		struct ceiling_conf cc;

		ceiling_conf_init(&cc, &b.c.dir, 1);
		cc.budget_s = b.c.ceiling_s;
		cc.gpu = b.c.gpu_kv ? 0 : -1;
		/* Loads only read: the write sweep would spend half the budget on nothing, and the
		 * latency rows have no column for the through phase. */
		cc.skip_writes = b.c.latency_loads > 0;
		cc.skip_through = b.c.latency_loads > 0;
		rc = ceiling_measure(&cc, &b.ceiling);
		if (rc < 0) {
			die("ceiling", rc);
		}
		ceiling_print(stdout, "# ", &b.ceiling);
		printf("# limits%s: retrieve%s %.2f GB/s", b.c.gpu_kv ? "" : " (host KV)",
		       b.c.gpu_kv ? " (SSD -> HBM)" : "",
		       ceiling_read_limit(&b.ceiling, b.c.gpu_kv));
		if (b.c.latency_loads == 0) {
			printf(", store%s %.2f GB/s", b.c.gpu_kv ? " (HBM -> SSD)" : "",
			       ceiling_write_limit(&b.ceiling, b.c.gpu_kv));
		}
		printf("\n");
		if (b.json != NULL) {
			fprintf(
			    b.json,
			    "{\"storage\":\"%s\",\"model\":\"%s\",\"kv\":\"%s\",\"op\":\"ceiling\","
			    "\"ceiling\":",
			    b.emulated ? "emulated-tmpfs" : "disk", b.c.model,
			    b.c.gpu_kv ? "gpu" : "host");
			ceiling_json(b.json, &b.ceiling);
			fprintf(b.json, "}\n");
			fflush(b.json);
		}
	}
	if (b.c.paths[P_BASELINE]) {
		base_threads_make(&b);
	}
	for (uint32_t i = 0; i < b.c.nr_contexts; i++) {
		if (b.c.latency_loads > 0) {
			run_latency(&b, b.c.contexts[i]);
		} else {
			run_context(&b, b.c.contexts[i]);
		}
	}
	base_threads_free(&b);
	if (b.raw_fd >= 0) {
		close(b.raw_fd);
		unlink(b.raw_path);
	}
	kv_mem_free(&b, b.src);
	kv_mem_free(&b, b.dst);
	host_mem_free(&b, b.pattern);
	host_mem_free(&b, b.host_a);
	host_mem_free(&b, b.host_b);
	if (b.raw_mem != NULL) {
		host_mem_free(&b, b.raw_mem);
	}
	if (b.json != NULL) {
		fclose(b.json);
	}
	return b.failed ? 1 : 0;
}
