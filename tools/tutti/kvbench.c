/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store benchmark: see kvbench.h.
 *
 * Workload: `requests` requests of `context_tokens` tokens each share a prefix of
 * `shared_tokens` (rounded down to whole chunks). Every token block has a logical id; the
 * source paged KV holds each unique block once, at a shuffled physical block, filled with random
 * bytes. A chunk's key is derived from the logical id of its last block, so shared chunks have
 * the same key in every request, as vLLM's chained block hashes do.
 *
 * Store: the requests are saved one after another (later ones find the prefix stored).
 * Retrieve: each request is looked up, loaded into a destination block table that is another
 * shuffle, and compared byte for byte with the source. The destination is poisoned before each
 * load so that bytes the load failed to write are caught.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kvbench.h"

#define KEY_BYTES 32u
#define MAX_REPEATS KVBENCH_MAX_REPEATS
/* Bytes per file that the set-up sweep moves in each direction, shared by its points. */
#define RAW_SWEEP_BYTES (3ull << 30)

static uint32_t
min_u32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static uint32_t
max_u32(uint32_t a, uint32_t b)
{
	return a > b ? a : b;
}

static uint64_t
min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t
max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

void
kvbench_conf_init(struct kvbench_conf *conf)
{
	memset(conf, 0, sizeof(*conf));
	tutti_geometry_preset("llama-3-8b", &conf->geo);
	conf->model = "llama-3-8b";
	conf->dirs[0] = "tutti-store";
	conf->nr_dirs = 1;
	conf->engine = TUTTI_ENGINE_URING;
	conf->layout = KVBENCH_KV_FIRST;
	conf->context_tokens = 32768;
	conf->requests = 1;
	conf->shared_tokens = 0;
	conf->repeats = 3;
	conf->staging_bytes = 64ull << 20;
	conf->max_io_bytes = 4ull << 20;
	conf->queue_depth = 32;
	conf->page_threads = 16;
	conf->seed = 42;
	conf->ceiling_s = 4.0;
}

/* ---- workload ---- */

struct arena {
	uint8_t *mem;
	uint64_t bytes;
	uint32_t nr_blocks;
	struct tutti_segment *segs; /* nr_layers * segs_per_layer */
	uint32_t segs_per_layer;
	struct tutti_kv *kv;
};

struct bench {
	const struct kvbench_conf *conf;
	struct tutti_geometry geo;
	uint64_t page_bytes; /* one layer block */
	uint32_t bpc;
	uint32_t blocks_per_req, shared_blocks, uniq_per_req, chunks_per_req;
	uint32_t nr_logical;
	uint32_t *src_phys; /* logical id -> source block */
	uint32_t *dst_phys; /* position in a request -> destination block */
	uint32_t *ids;      /* scratch: block ids of one request */
	uint8_t *keys;      /* scratch: key chain of one request */
	struct arena src, dst;
	struct tutti_store *st;
	uint64_t slots_per_dir;
	uint64_t run_nonce; /* in every key: a store kept from an earlier run holds none of ours */
	uint64_t flushes;   /* device flushes of the last store round */
	/* raw measurements next to every timed round */
	bool raw;
	struct rawbw_point best_read, best_write; /* chosen by the sweep at set-up */
	int store_fds[RAWBW_MAX_FILES];           /* the store's data files, read-only */
	uint32_t store_dirs[RAWBW_MAX_FILES];     /* the directory of each */
	int scratch_fds[RAWBW_MAX_FILES]; /* temporary files for raw writes, one per data file */
	uint32_t nr_files;                /* of each */
	uint64_t file_off;                /* where the data files' slots start */
	uint64_t file_span;               /* bytes of slots each data file holds (the least) */
	/* page-granular baseline */
	bool page;
	int page_fd;
	struct page_io *pages;
	struct iovec *iovs;
	uint32_t *lids, *blks;
};

static void
progress(const struct bench *b, const char *msg)
{
	if (b->conf->progress != NULL) {
		fprintf(b->conf->progress, "tutti: %s\n", msg);
		fflush(b->conf->progress);
	}
}

static uint64_t
splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void
shuffle(uint32_t *v, uint32_t n, uint64_t *seed)
{
	for (uint32_t i = 0; i < n; i++) {
		v[i] = i;
	}
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(splitmix(seed) % i);
		uint32_t t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

static uint32_t
logical_id(const struct bench *b, uint32_t req, uint32_t pos)
{
	if (pos < b->shared_blocks) {
		return pos;
	}
	return b->shared_blocks + req * b->uniq_per_req + (pos - b->shared_blocks);
}

/* The key chain of request \p req in round \p round (each store round uses fresh keys): each
 * key 32 bytes of a SplitMix64 sequence whose state absorbs the seed, the run, the round and
 * the chunk's last logical block, so that the same chunk has the same key in every request. */
static void
make_keys(struct bench *b, uint32_t req, uint32_t round)
{
	for (uint32_t k = 0; k < b->chunks_per_req; k++) {
		uint32_t last = min_u32((k + 1) * b->bpc, b->blocks_per_req) - 1;
		const uint64_t in[4] = {b->conf->seed, b->run_nonce, round,
		                        logical_id(b, req, last)};
		uint64_t s = 0, w[KEY_BYTES / 8];

		for (uint32_t i = 0; i < 4; i++) {
			s ^= in[i];
			s = splitmix(&s);
		}
		for (uint32_t i = 0; i < KEY_BYTES / 8; i++) {
			w[i] = splitmix(&s);
		}
		memcpy(b->keys + (uint64_t)k * KEY_BYTES, w, KEY_BYTES);
	}
}

static int
arena_init(struct bench *b, struct arena *a, uint32_t nr_blocks)
{
	uint32_t L = b->geo.nr_layers;
	uint64_t page = b->page_bytes;

	a->nr_blocks = nr_blocks;
	a->bytes = (uint64_t)L * nr_blocks * page;
	a->mem = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a->mem == MAP_FAILED) {
		a->mem = NULL;
		return -ENOMEM;
	}
	/* Huge pages: gigabytes of 4 KiB page faults would dominate the set-up time. */
	madvise(a->mem, a->bytes, MADV_HUGEPAGE);
	a->segs_per_layer = b->conf->layout == KVBENCH_KV_FIRST ? 2 : 1;
	a->segs = calloc((size_t)L * a->segs_per_layer, sizeof(*a->segs));
	if (a->segs == NULL) {
		return -ENOMEM;
	}
	for (uint32_t l = 0; l < L; l++) {
		uint64_t base = (uint64_t)(uintptr_t)a->mem;
		struct tutti_segment *s = &a->segs[(size_t)l * a->segs_per_layer];

		switch (b->conf->layout) {
		case KVBENCH_KV_FIRST: /* [layer][K|V][block] */
			base += (uint64_t)l * nr_blocks * page;
			s[0] = (struct tutti_segment){base, page / 2, page / 2};
			s[1] = (struct tutti_segment){base + nr_blocks * (page / 2), page / 2,
			                              page / 2};
			break;
		case KVBENCH_PACKED: /* [layer][block] */
			s[0] = (struct tutti_segment){base + (uint64_t)l * nr_blocks * page, page,
			                              page};
			break;
		default: /* cross-layer: [block][layer] */
			s[0] = (struct tutti_segment){base + (uint64_t)l * page, (uint64_t)L * page,
			                              page};
			break;
		}
	}
	return tutti_kv_create(&b->geo, a->segs, a->segs_per_layer, nr_blocks, TUTTI_MEM_HOST,
	                       &a->kv);
}

static void
arena_fini(struct arena *a)
{
	tutti_kv_destroy(a->kv);
	free(a->segs);
	if (a->mem != NULL) {
		munmap(a->mem, a->bytes);
	}
}

static void
fill_random(uint8_t *p, uint64_t bytes, uint64_t seed)
{
	uint64_t s = seed;

	for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
		uint64_t v = splitmix(&s);

		memcpy(p + i, &v, 8);
	}
}

static const uint8_t *
block_seg(const struct arena *a, uint32_t layer, uint32_t seg, uint32_t block)
{
	const struct tutti_segment *s = &a->segs[(size_t)layer * a->segs_per_layer + seg];

	return (const uint8_t *)(uintptr_t)(s->base + (uint64_t)block * s->block_stride);
}

/* Does the destination hold request \p req's blocks, bit for bit? */
static bool
verify_request(const struct bench *b, uint32_t req)
{
	for (uint32_t pos = 0; pos < b->blocks_per_req; pos++) {
		uint32_t src = b->src_phys[logical_id(b, req, pos)], dst = b->dst_phys[pos];

		for (uint32_t l = 0; l < b->geo.nr_layers; l++) {
			for (uint32_t s = 0; s < b->src.segs_per_layer; s++) {
				uint64_t len =
				    b->src.segs[(size_t)l * b->src.segs_per_layer + s].bytes;

				if (memcmp(block_seg(&b->src, l, s, src),
				           block_seg(&b->dst, l, s, dst), len) != 0) {
					return false;
				}
			}
		}
	}
	return true;
}

/* ---- measurement helpers ---- */

struct sample {
	uint64_t t0;
	double cpu0;
};

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU seconds of the whole process, every thread and io_uring worker included. */
static double
cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static void
sample_start(struct sample *s)
{
	s->cpu0 = cpu_seconds();
	s->t0 = now_ns();
}

/* Accumulate elapsed nanoseconds and CPU seconds since sample_start. */
static void
sample_stop(const struct sample *s, uint64_t *ns, double *cpu)
{
	*ns += now_ns() - s->t0;
	*cpu += cpu_seconds() - s->cpu0;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double
median(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Fill a phase's median figures from per-repeat elapsed time and CPU time. */
static void
phase_result(struct kvbench_phase *p, uint64_t bytes, const uint64_t *ns, const double *cpu,
             uint32_t n)
{
	double gbps[MAX_REPEATS], cpg[MAX_REPEATS];

	for (uint32_t i = 0; i < n; i++) {
		gbps[i] = ns[i] ? (double)bytes / (double)ns[i] : 0;
		cpg[i] = bytes ? cpu[i] / ((double)bytes / 1e9) : 0;
		p->round_gbps[i] = gbps[i];
	}
	p->nr_rounds = n;
	p->bytes = bytes;
	p->gbps = median(gbps, n);
	p->cpu_s_per_gb = median(cpg, n);
}

/* ---- phases ---- */

static void
fill_ids_src(struct bench *b, uint32_t req)
{
	for (uint32_t pos = 0; pos < b->blocks_per_req; pos++) {
		b->ids[pos] = b->src_phys[logical_id(b, req, pos)];
	}
}

static struct tutti_request
make_request(const struct bench *b)
{
	return (struct tutti_request){
	    .size = sizeof(struct tutti_request),
	    .nr_keys = b->chunks_per_req,
	    .keys = b->keys,
	    .nr_blocks = b->blocks_per_req,
	    .block_ids = b->ids,
	};
}

static struct rawbw_target
raw_target(struct bench *b, bool write, bool scratch)
{
	/* The same memory the store moves: writes from the source KV, reads into the destination.
	 */
	return (struct rawbw_target){
	    .fds = scratch ? b->scratch_fds : b->store_fds,
	    .nr_fds = b->nr_files,
	    .off = scratch ? 0 : b->file_off,
	    .span = b->file_span,
	    .mem = write ? b->src.mem : b->dst.mem,
	    .mem_bytes = write ? b->src.bytes : b->dst.bytes,
	    .write = write,
	};
}

/*
 * Raw O_DIRECT transfer at the sweep's best point, of as many bytes as the round of the store
 * it stands beside: writes to the scratch files, reads of the store's own data files (the bytes
 * the retrieve reads; shared chunks are read again, as there).
 */
static int
raw_round(struct bench *b, bool write, uint64_t bytes, double *gbps)
{
	struct rawbw_target t = raw_target(b, write, write);
	const struct rawbw_point *p = write ? &b->best_write : &b->best_read;
	double g = rawbw_run(&t, 0, bytes / t.nr_fds, p->bs, p->qd);

	if (g < 0) {
		fprintf(stderr, "tutti: raw %s: %s\n", write ? "write" : "read",
		        tutti_strerror((int)g));
		return (int)g;
	}
	*gbps = g;
	return 0;
}

/* Save request \p r in calls of save_chunks chunks (all at once when 0), as a serving engine
 * saves what each step computed. */
static int
save_request(struct bench *b, uint32_t r, uint64_t *ns, double *cpu)
{
	uint32_t step = b->conf->save_chunks ? b->conf->save_chunks : b->chunks_per_req;

	for (uint32_t first = 0; first < b->chunks_per_req; first += step) {
		uint32_t end = min_u32(first + step, b->chunks_per_req);
		uint32_t first_block = first * b->bpc;
		struct tutti_request req = make_request(b);
		struct sample smp;
		int64_t n;

		req.nr_keys = end;
		req.first_chunk = first;
		req.block_ids = b->ids + first_block;
		req.nr_blocks = min_u32(end * b->bpc, b->blocks_per_req) - first_block;
		sample_start(&smp);
		n = tutti_store_save(b->st, b->src.kv, &req, 1, NULL);
		sample_stop(&smp, ns, cpu);
		if (n < 0) {
			fprintf(stderr, "tutti: save failed: %s\n", tutti_strerror((int)n));
			return (int)n;
		}
	}
	return 0;
}

static int
store_round(struct bench *b, uint32_t round, uint64_t *ns, double *cpu, uint64_t *bytes,
            uint64_t *nr_chunks)
{
	struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};

	tutti_store_get_stats(b->st, &s0);
	for (uint32_t r = 0; r < b->conf->requests; r++) {
		int rc;

		make_keys(b, r, round);
		fill_ids_src(b, r);
		rc = save_request(b, r, ns, cpu);
		if (rc < 0) {
			return rc;
		}
	}
	tutti_store_get_stats(b->st, &s1);
	*bytes = s1.save_bytes - s0.save_bytes;
	*nr_chunks = s1.save_chunks - s0.save_chunks;
	b->flushes = s1.flushes - s0.flushes;
	return 0;
}

static int
load_request(struct bench *b, uint32_t r, uint64_t *ns, double *cpu, uint64_t *calls)
{
	uint32_t L = b->geo.nr_layers, step = b->conf->layerwise ? 1 : L;
	struct tutti_request req;
	uint64_t blocks = 0;
	struct sample smp;
	int64_t hit;

	for (uint32_t pos = 0; pos < b->blocks_per_req; pos++) {
		b->ids[pos] = b->dst_phys[pos];
	}
	req = make_request(b);
	sample_start(&smp);
	hit = tutti_store_lookup(b->st, b->keys, b->chunks_per_req, &blocks);
	if (hit != b->chunks_per_req || blocks != b->blocks_per_req) {
		fprintf(stderr, "tutti: lookup found %lld of %u chunks\n", (long long)hit,
		        b->chunks_per_req);
		return -ENOENT;
	}
	for (uint32_t l = 0; l < L; l += step) {
		int64_t n = tutti_store_load(b->st, b->dst.kv, &req, 1, l, l + step, NULL);

		(*calls)++;
		if (n != b->chunks_per_req) {
			fprintf(stderr, "tutti: load returned %lld of %u chunks\n", (long long)n,
			        b->chunks_per_req);
			return n < 0 ? (int)n : -EIO;
		}
	}
	sample_stop(&smp, ns, cpu);
	return 0;
}

static int
retrieve_round(struct bench *b, uint32_t round, uint64_t *ns, double *cpu,
               struct kvbench_result *res)
{
	struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};

	res->layer_calls = 0;
	tutti_store_get_stats(b->st, &s0);
	for (uint32_t r = 0; r < b->conf->requests; r++) {
		int rc;

		make_keys(b, r, round);
		memset(b->dst.mem, 0xa5, b->dst.bytes);
		rc = load_request(b, r, ns, cpu, &res->layer_calls);
		if (rc < 0) {
			return rc;
		}
		if (!verify_request(b, r)) {
			fprintf(stderr, "tutti: request %u: retrieved KV differs\n", r);
			res->verified = false;
		}
	}
	tutti_store_get_stats(b->st, &s1);
	res->retrieve.bytes = s1.load_bytes - s0.load_bytes;
	res->retrieve_ios = s1.io_ops - s0.io_ops;
	res->retrieve_submits = s1.io_submits - s0.io_submits;
	return 0;
}

/* ---- page-granular baseline ---- */

static bool
arena_dio_aligned(const struct arena *a, uint32_t L)
{
	for (uint32_t i = 0; i < L * a->segs_per_layer; i++) {
		if (a->segs[i].base % 4096 || a->segs[i].block_stride % 4096 ||
		    a->segs[i].bytes % 4096) {
			return false;
		}
	}
	return true;
}

/* Pages of n blocks (logical id lids[i] at block blks[i] of arena a), laid out in the baseline
 * file as [logical block][layer]. */
static void
page_plan(struct bench *b, const struct arena *a, uint32_t n)
{
	uint32_t L = b->geo.nr_layers, spl = a->segs_per_layer;

	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t l = 0; l < L; l++) {
			struct page_io *p = &b->pages[(uint64_t)i * L + l];

			p->off = ((uint64_t)b->lids[i] * L + l) * b->page_bytes;
			p->nr_iov = spl;
			p->first_iov = (uint32_t)(((uint64_t)i * L + l) * spl);
			for (uint32_t s = 0; s < spl; s++) {
				b->iovs[p->first_iov + s].iov_base =
				    (void *)block_seg(a, l, s, b->blks[i]);
				b->iovs[p->first_iov + s].iov_len =
				    a->segs[(size_t)l * spl + s].bytes;
			}
		}
	}
}

static int
page_setup(struct bench *b)
{
	uint32_t L = b->geo.nr_layers, n = max_u32(b->nr_logical, b->blocks_per_req);

	if (!arena_dio_aligned(&b->src, L) || !arena_dio_aligned(&b->dst, L)) {
		progress(b, "page-granular baseline skipped: blocks are not 4 KiB aligned");
		return 0;
	}
	b->pages = calloc((size_t)n * L, sizeof(*b->pages));
	b->iovs = calloc((size_t)n * L * b->src.segs_per_layer, sizeof(*b->iovs));
	b->lids = calloc(n, sizeof(*b->lids));
	b->blks = calloc(n, sizeof(*b->blks));
	if (b->pages == NULL || b->iovs == NULL || b->lids == NULL || b->blks == NULL) {
		return -ENOMEM;
	}
	b->page_fd = open(b->conf->dirs[0], O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
	if (b->page_fd < 0 ||
	    fallocate(b->page_fd, 0, 0, (off_t)((uint64_t)b->nr_logical * L * b->page_bytes))) {
		int rc = -errno;

		fprintf(stderr, "tutti: baseline file in %s: %s\n", b->conf->dirs[0],
		        tutti_strerror(rc));
		return rc;
	}
	b->page = true;
	return 0;
}

/* Write every unique block of every layer, one I/O per page. */
static int
page_store_round(struct bench *b, uint64_t *ns, double *cpu)
{
	struct sample smp;
	int64_t t;

	for (uint32_t g = 0; g < b->nr_logical; g++) {
		b->lids[g] = g;
		b->blks[g] = b->src_phys[g];
	}
	page_plan(b, &b->src, b->nr_logical);
	sample_start(&smp);
	t = pagebase_run(b->page_fd, b->pages, (uint64_t)b->nr_logical * b->geo.nr_layers, b->iovs,
	                 true, b->conf->page_threads);
	sample_stop(&smp, ns, cpu);
	return t < 0 ? (int)t : 0;
}

static int
page_retrieve_round(struct bench *b, uint64_t *ns, double *cpu, struct kvbench_result *res)
{
	for (uint32_t r = 0; r < b->conf->requests; r++) {
		struct sample smp;
		int64_t t;

		for (uint32_t pos = 0; pos < b->blocks_per_req; pos++) {
			b->lids[pos] = logical_id(b, r, pos);
			b->blks[pos] = b->dst_phys[pos];
		}
		page_plan(b, &b->dst, b->blocks_per_req);
		memset(b->dst.mem, 0xa5, b->dst.bytes);
		sample_start(&smp);
		t = pagebase_run(b->page_fd, b->pages,
		                 (uint64_t)b->blocks_per_req * b->geo.nr_layers, b->iovs, false,
		                 b->conf->page_threads);
		sample_stop(&smp, ns, cpu);
		if (t < 0) {
			return (int)t;
		}
		if (!verify_request(b, r)) {
			fprintf(stderr, "tutti: baseline request %u: retrieved KV differs\n", r);
			res->verified = false;
		}
	}
	return 0;
}

/* ---- the two phases, each interleaving raw, tutti and baseline per repeat ---- */

struct series {
	uint64_t ns[MAX_REPEATS];
	double cpu[MAX_REPEATS];
	double raw[MAX_REPEATS];
};

static int
store_phase(struct bench *b, struct kvbench_result *res)
{
	uint32_t n = b->conf->repeats;
	uint64_t bytes = 0, chunks = 0;
	uint64_t expect = res->unique_chunks * tutti_geometry_slot_bytes(&b->geo);
	struct series t = {0}, p = {0};
	int rc = 0;

	for (uint32_t rep = 0; rep < n && rc == 0; rep++) {
		if (b->raw) {
			rc = raw_round(b, true, expect, &t.raw[rep]);
		}
		if (rc == 0) {
			rc = store_round(b, rep, &t.ns[rep], &t.cpu[rep], &bytes, &chunks);
		}
		if (rc == 0 && chunks != res->unique_chunks) {
			fprintf(stderr, "tutti: save stored %llu of %llu chunks\n",
			        (unsigned long long)chunks, (unsigned long long)res->unique_chunks);
			rc = -EIO;
		}
		if (rc == 0 && b->page) {
			rc = page_store_round(b, &p.ns[rep], &p.cpu[rep]);
		}
	}
	if (rc < 0) {
		return rc;
	}
	phase_result(&res->store, bytes, t.ns, t.cpu, n);
	res->store_flushes = b->flushes;
	if (b->raw) {
		memcpy(res->raw_write_rounds, t.raw, n * sizeof(*t.raw));
		res->raw_write_gbps = median(t.raw, n);
	}
	if (b->page) {
		phase_result(&res->page_store,
		             (uint64_t)b->nr_logical * b->geo.nr_layers * b->page_bytes, p.ns,
		             p.cpu, n);
	}
	return 0;
}

static int
retrieve_phase(struct bench *b, struct kvbench_result *res)
{
	uint32_t n = b->conf->repeats;
	uint64_t expect = (uint64_t)b->conf->requests * b->chunks_per_req * b->geo.nr_layers *
	                  tutti_geometry_object_bytes(&b->geo);
	struct series t = {0}, p = {0};
	int rc = 0;

	for (uint32_t rep = 0; rep < n && rc == 0; rep++) {
		if (b->raw) {
			rc = raw_round(b, false, expect, &t.raw[rep]);
		}
		if (rc == 0) {
			rc = retrieve_round(b, n - 1, &t.ns[rep], &t.cpu[rep], res);
		}
		if (rc == 0 && b->page) {
			rc = page_retrieve_round(b, &p.ns[rep], &p.cpu[rep], res);
		}
	}
	if (rc < 0) {
		return rc;
	}
	phase_result(&res->retrieve, res->retrieve.bytes, t.ns, t.cpu, n);
	if (b->raw) {
		memcpy(res->raw_read_rounds, t.raw, n * sizeof(*t.raw));
		res->raw_read_gbps = median(t.raw, n);
	}
	if (b->page) {
		phase_result(&res->page_retrieve,
		             (uint64_t)b->conf->requests * b->blocks_per_req * b->geo.nr_layers *
		                 b->page_bytes,
		             p.ns, p.cpu, n);
	}
	return 0;
}

/* ---- driver ---- */

static int
plan_workload(struct bench *b, const struct kvbench_conf *conf)
{
	uint32_t bs = conf->geo.block_tokens;
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGE_SIZE);
	uint64_t logical;
	double kv_bytes;

	b->geo = conf->geo;
	if (tutti_geometry_check(&b->geo) != 0 || conf->requests == 0 || conf->repeats == 0 ||
	    conf->repeats > MAX_REPEATS || conf->nr_dirs == 0 || conf->page_threads == 0) {
		fprintf(stderr, "tutti: invalid geometry or benchmark settings\n");
		return -EINVAL;
	}
	b->page_bytes = tutti_geometry_layer_block_bytes(&b->geo);
	b->bpc = tutti_geometry_blocks_per_chunk(&b->geo);
	if (conf->context_tokens < bs || conf->context_tokens / bs > (1u << 24) ||
	    conf->shared_tokens > conf->context_tokens) {
		fprintf(stderr,
		        "tutti: context must be %u..%u tokens and the shared prefix "
		        "no longer than it\n",
		        bs, bs << 24);
		return -EINVAL;
	}
	b->blocks_per_req = (uint32_t)(conf->context_tokens / bs);
	b->shared_blocks = (uint32_t)(conf->shared_tokens / conf->geo.chunk_tokens) * b->bpc;
	b->uniq_per_req = b->blocks_per_req - b->shared_blocks;
	b->chunks_per_req = (b->blocks_per_req + b->bpc - 1) / b->bpc;
	logical = b->shared_blocks + (uint64_t)conf->requests * b->uniq_per_req;
	/* The source KV of every request and the destination of one are allocated up front:
	 * refuse what the machine cannot hold rather than fault it in until the OOM killer
	 * comes. */
	kv_bytes = ((double)logical + b->blocks_per_req) * b->geo.nr_layers * (double)b->page_bytes;
	if (logical > UINT32_MAX || kv_bytes > (double)ram) {
		fprintf(stderr,
		        "tutti: the workload needs %.1f GiB of host KV memory (%llu blocks of %u "
		        "layers); this machine has %.1f GiB\n",
		        kv_bytes / (1 << 30), (unsigned long long)logical, b->geo.nr_layers,
		        (double)ram / (1 << 30));
		return -ENOMEM;
	}
	b->nr_logical = (uint32_t)logical;
	return 0;
}

static void
log_line(void *arg, int level, const char *msg)
{
	fprintf(stderr, "tutti: %s%s\n", level == TUTTI_LOG_ERR ? "error: " : "", msg);
}

static int
open_store(struct bench *b, uint64_t unique_chunks)
{
	const struct kvbench_conf *c = b->conf;
	struct tutti_store_opts o;
	uint64_t slot = tutti_geometry_slot_bytes(&b->geo);
	struct tutti_stats s = {.size = sizeof(s)};
	int rc;

	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_CREATE;
	o.dirs = c->dirs;
	o.nr_dirs = c->nr_dirs;
	o.engine = c->engine;
	o.engine_opts = c->engine_opts;
	/* Room for one round of the workload plus striping slack in every directory. */
	o.capacity_bytes = (unique_chunks + 2ull * c->nr_dirs) * slot;
	o.key_bytes = KEY_BYTES;
	o.ns = "tutti-bench";
	o.ns_bytes = 11;
	o.staging_bytes = c->staging_bytes;
	o.max_io_bytes = c->max_io_bytes;
	o.queue_depth = c->queue_depth;
	o.durability = c->durability;
	o.log_fn = log_line;
	rc = tutti_store_open(&b->geo, &o, &b->st);
	if (rc < 0) {
		fprintf(stderr, "tutti: cannot open the store in %s: %s\n", c->dirs[0],
		        tutti_strerror(rc));
		return rc;
	}
	tutti_store_get_stats(b->st, &s);
	b->slots_per_dir = s.capacity_slots / c->nr_dirs;
	return 0;
}

/* Open what the raw measurements use (the store's data files and a scratch file beside each,
 * so that raw writes meet in a file no more than the store's do), then pick the best block size and
 * depth with a sweep: writes to the scratch files, then reads of what was written (unwritten
 * extents would read as zeros without touching the device). */
static int
raw_setup(struct bench *b, struct kvbench_result *res)
{
	const struct kvbench_conf *c = b->conf;
	uint64_t per_file;
	struct rawbw_target t;
	int rc;

	b->file_span = b->slots_per_dir * tutti_geometry_slot_bytes(&b->geo);
	rc = rawbw_open_store_files(b->st, b->store_fds, b->store_dirs, RAWBW_MAX_FILES,
	                            &b->nr_files, &b->file_off, &b->file_span);
	if (rc < 0) {
		fprintf(stderr, "tutti: the store's data files in %s: %s\n", c->dirs[0],
		        tutti_strerror(rc));
		return rc;
	}
	for (uint32_t i = 0; i < b->nr_files; i++) {
		const char *dir = c->dirs[b->store_dirs[i]];

		b->scratch_fds[i] = open(dir, O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
		rc = b->scratch_fds[i] < 0 ? -errno : 0;
		if (rc == 0 && fallocate(b->scratch_fds[i], 0, 0, (off_t)b->file_span) != 0) {
			rc = -errno;
		}
		if (rc < 0) {
			fprintf(stderr, "tutti: raw files in %s: %s\n", dir, tutti_strerror(rc));
			return rc;
		}
	}
	per_file = b->file_span;
	progress(b, "sweeping raw O_DIRECT block sizes and queue depths");
	t = raw_target(b, true, true);
	rc = rawbw_sweep(&t, min_u64(per_file, RAW_SWEEP_BYTES), &b->best_write);
	if (rc == 0) {
		t = raw_target(b, false, true);
		rc = rawbw_sweep(&t, min_u64(per_file, RAW_SWEEP_BYTES), &b->best_read);
	}
	if (rc < 0) {
		fprintf(stderr, "tutti: raw sweep in %s: %s\n", c->dirs[0], tutti_strerror(rc));
		return rc;
	}
	res->raw_write_bs = b->best_write.bs;
	res->raw_write_qd = b->best_write.qd;
	res->raw_read_bs = b->best_read.bs;
	res->raw_read_qd = b->best_read.qd;
	/* A workload too small for any sweep point is measured without a raw limit. */
	b->raw = b->best_write.gbps > 0 && b->best_read.gbps > 0;
	return 0;
}

/* The limit: the ceiling sweep in the store's directories, its scratch files sized to the
 * workload (a quarter of the stored bytes per directory, 16..128 MiB each), so that a small
 * run stays small. */
static int
ceiling_setup(struct bench *b, struct kvbench_result *res)
{
	const struct kvbench_conf *c = b->conf;
	uint64_t stored = res->unique_chunks * tutti_geometry_slot_bytes(&b->geo);
	struct ceiling_conf cc;
	int rc;

	ceiling_conf_init(&cc, c->dirs, c->nr_dirs);
	cc.budget_s = c->ceiling_s;
	cc.file_bytes = min_u64(128ull << 20, max_u64(16ull << 20, stored / c->nr_dirs / 4));
	progress(b, "sweeping O_DIRECT threads x I/O size x files x depth for the ceiling");
	rc = ceiling_measure(&cc, &res->ceiling);
	if (rc < 0) {
		fprintf(stderr, "tutti: ceiling in %s: %s\n", c->dirs[0], tutti_strerror(rc));
	}
	return rc;
}

static void
bench_fini(struct bench *b)
{
	for (uint32_t d = 0; d < RAWBW_MAX_FILES; d++) {
		if (b->store_fds[d] >= 0) {
			close(b->store_fds[d]);
		}
		if (b->scratch_fds[d] >= 0) {
			close(b->scratch_fds[d]);
		}
	}
	if (b->page_fd >= 0) {
		close(b->page_fd);
	}
	free(b->pages);
	free(b->iovs);
	free(b->lids);
	free(b->blks);
	tutti_store_close(b->st);
	arena_fini(&b->src);
	arena_fini(&b->dst);
	free(b->src_phys);
	free(b->dst_phys);
	free(b->ids);
	free(b->keys);
}

static int
setup(struct bench *b, struct kvbench_result *res)
{
	uint64_t seed = b->conf->seed;
	char msg[256];
	int rc;

	b->src_phys = calloc(b->nr_logical, sizeof(uint32_t));
	b->dst_phys = calloc(b->blocks_per_req, sizeof(uint32_t));
	b->ids = calloc(b->blocks_per_req, sizeof(uint32_t));
	b->keys = calloc(b->chunks_per_req, KEY_BYTES);
	if (b->src_phys == NULL || b->dst_phys == NULL || b->ids == NULL || b->keys == NULL) {
		return -ENOMEM;
	}
	shuffle(b->src_phys, b->nr_logical, &seed);
	shuffle(b->dst_phys, b->blocks_per_req, &seed);
	rc = arena_init(b, &b->src, b->nr_logical);
	if (rc == 0) {
		rc = arena_init(b, &b->dst, b->blocks_per_req);
	}
	if (rc < 0) {
		fprintf(stderr, "tutti: cannot set up %.1f GiB of paged KV: %s\n",
		        (double)(b->src.bytes + b->dst.bytes) / (1 << 30), tutti_strerror(rc));
		return rc;
	}
	res->kv_bytes = b->src.bytes + b->dst.bytes;
	snprintf(msg, sizeof(msg), "filling %.2f GiB of source KV (%u unique blocks)",
	         (double)b->src.bytes / (1 << 30), b->nr_logical);
	progress(b, msg);
	fill_random(b->src.mem, b->src.bytes, b->conf->seed ^ 0x5eed);
	/* Fault the destination in now: the first transfer into untouched memory, raw or not,
	 * would otherwise pay for allocating it. */
	memset(b->dst.mem, 0xa5, b->dst.bytes);
	rc = open_store(b, res->unique_chunks);
	if (rc < 0) {
		return rc;
	}
	{
		struct tutti_stats s = {.size = sizeof(s)};

		tutti_store_get_stats(b->st, &s);
		res->staging_bytes = s.staging_bytes;
	}
	if (!b->conf->skip_raw) {
		rc = raw_setup(b, res);
		if (rc < 0) {
			return rc;
		}
	}
	if (b->conf->ceiling_s > 0) {
		rc = ceiling_setup(b, res);
		if (rc < 0) {
			return rc;
		}
	}
	return b->conf->skip_page ? 0 : page_setup(b);
}

/* Let the device finish the writes of the store phase before reads are timed: a virtual disk
 * keeps flushing its host cache long after the guest's O_DIRECT writes completed, and whichever
 * read ran first would pay for it. */
static void
drain_writes(struct bench *b)
{
	for (uint32_t i = 0; i < RAWBW_MAX_FILES; i++) {
		if (b->scratch_fds[i] >= 0) {
			fdatasync(b->scratch_fds[i]);
		}
	}
	if (b->page_fd >= 0) {
		fdatasync(b->page_fd);
	}
	/* The store's data files, as the store lists them (its own, each a regular file it holds
	 * open; O_NONBLOCK all the same, so that nothing put in one's place could block). */
	for (uint32_t i = 0;; i++) {
		struct tutti_store_file f = {.size = sizeof(f)};
		char path[4200];
		int fd;

		if (tutti_store_file(b->st, i, &f, path, sizeof(path)) < 0) {
			break;
		}
		fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0) {
			fdatasync(fd);
			close(fd);
		}
	}
}

int
kvbench_run(const struct kvbench_conf *conf, struct kvbench_result *res)
{
	struct bench b = {.conf = conf, .page_fd = -1};
	int rc;

	memset(res, 0, sizeof(*res));
	res->verified = true;
	if (getrandom(&b.run_nonce, sizeof(b.run_nonce), 0) != sizeof(b.run_nonce)) {
		return -EIO;
	}
	for (uint32_t i = 0; i < RAWBW_MAX_FILES; i++) {
		b.store_fds[i] = b.scratch_fds[i] = -1;
	}
	rc = plan_workload(&b, conf);
	if (rc < 0) {
		return rc;
	}
	res->unique_chunks = b.chunks_per_req + (uint64_t)(conf->requests - 1) *
	                                            (b.chunks_per_req - b.shared_blocks / b.bpc);
	rc = setup(&b, res);
	if (rc == 0) {
		progress(&b, "storing (raw write, tutti, baseline per repeat)");
		rc = store_phase(&b, res);
	}
	if (rc == 0) {
		drain_writes(&b);
		progress(&b, "retrieving and verifying (raw read, tutti, baseline per repeat)");
		rc = retrieve_phase(&b, res);
	}
	bench_fini(&b);
	return rc;
}
