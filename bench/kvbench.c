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
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvbench.h"

#define KEY_BYTES 32u
#define MAX_REPEATS 64u

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
	conf->requests = 2;
	conf->shared_tokens = 24576;
	conf->repeats = 3;
	conf->staging_bytes = 64ull << 20;
	conf->max_io_bytes = 4ull << 20;
	conf->queue_depth = 32;
	conf->page_threads = 16;
	conf->raw_bytes = 1ull << 30;
	conf->seed = 42;
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

/* The key chain of request \p req in round \p round (each store round uses fresh keys). */
static void
make_keys(struct bench *b, uint32_t req, uint32_t round)
{
	for (uint32_t k = 0; k < b->chunks_per_req; k++) {
		uint32_t last = min_u32((k + 1) * b->bpc, b->blocks_per_req) - 1;
		uint64_t in[3] = {b->conf->seed, round, logical_id(b, req, last)};
		XXH128_hash_t h = XXH3_128bits(in, sizeof(in));

		memcpy(b->keys + (uint64_t)k * KEY_BYTES, &h, 16);
		h = XXH3_128bits_withSeed(in, sizeof(in), 1);
		memcpy(b->keys + (uint64_t)k * KEY_BYTES + 16, &h, 16);
	}
}

static int
arena_init(struct bench *b, struct arena *a, uint32_t nr_blocks)
{
	uint32_t L = b->geo.nr_layers;
	uint64_t page = b->page_bytes;

	a->nr_blocks = nr_blocks;
	a->bytes = (uint64_t)L * nr_blocks * page;
	if (posix_memalign((void **)&a->mem, 4096, a->bytes) != 0) {
		a->mem = NULL;
		return -ENOMEM;
	}
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
	free(a->mem);
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
				uint64_t len = b->src.segs[(size_t)l * b->src.segs_per_layer + s].bytes;

				if (memcmp(block_seg(&b->src, l, s, src), block_seg(&b->dst, l, s, dst),
					   len) != 0) {
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
	}
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

static int
store_phase(struct bench *b, struct kvbench_result *res)
{
	uint64_t ns[MAX_REPEATS] = {0}, bytes = 0;
	double cpu[MAX_REPEATS] = {0};

	for (uint32_t rep = 0; rep < b->conf->repeats; rep++) {
		struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};

		tutti_store_get_stats(b->st, &s0);
		for (uint32_t r = 0; r < b->conf->requests; r++) {
			struct tutti_request req;
			struct sample smp;
			int64_t n;

			make_keys(b, r, rep);
			fill_ids_src(b, r);
			req = make_request(b);
			sample_start(&smp);
			n = tutti_store_save(b->st, b->src.kv, &req, 1, NULL);
			sample_stop(&smp, &ns[rep], &cpu[rep]);
			if (n < 0) {
				fprintf(stderr, "tutti: save failed: %s\n", tutti_strerror((int)n));
				return (int)n;
			}
		}
		tutti_store_get_stats(b->st, &s1);
		if (s1.save_errors != s0.save_errors || s1.save_no_space != s0.save_no_space ||
		    s1.save_chunks - s0.save_chunks != res->unique_chunks) {
			fprintf(stderr, "tutti: save stored %llu of %llu chunks\n",
				(unsigned long long)(s1.save_chunks - s0.save_chunks),
				(unsigned long long)res->unique_chunks);
			return -EIO;
		}
		bytes = s1.save_bytes - s0.save_bytes;
	}
	phase_result(&res->store, bytes, ns, cpu, b->conf->repeats);
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
retrieve_phase(struct bench *b, struct kvbench_result *res)
{
	uint64_t ns[MAX_REPEATS] = {0}, bytes = 0;
	double cpu[MAX_REPEATS] = {0};
	uint32_t last = b->conf->repeats - 1;

	for (uint32_t rep = 0; rep < b->conf->repeats; rep++) {
		struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};

		res->layer_calls = 0;
		tutti_store_get_stats(b->st, &s0);
		for (uint32_t r = 0; r < b->conf->requests; r++) {
			int rc;

			make_keys(b, r, last);
			memset(b->dst.mem, 0xa5, b->dst.bytes);
			rc = load_request(b, r, &ns[rep], &cpu[rep], &res->layer_calls);
			if (rc < 0) {
				return rc;
			}
			if (!verify_request(b, r)) {
				fprintf(stderr, "tutti: request %u: retrieved KV differs\n", r);
				res->verified = false;
			}
		}
		tutti_store_get_stats(b->st, &s1);
		bytes = s1.load_bytes - s0.load_bytes;
		res->retrieve_ios = s1.io_ops - s0.io_ops;
		res->retrieve_submits = s1.io_submits - s0.io_submits;
	}
	phase_result(&res->retrieve, bytes, ns, cpu, b->conf->repeats);
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

/* Pages of blocks (logical id lid(i) at block blk(i)) laid out in the baseline file as
 * [logical block][layer]. */
static void
page_plan(const struct bench *b, const struct arena *a, uint32_t n, const uint32_t *lids,
	  const uint32_t *blks, struct page_io *pages, struct iovec *iovs)
{
	uint32_t L = b->geo.nr_layers, spl = a->segs_per_layer;

	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t l = 0; l < L; l++) {
			struct page_io *p = &pages[(uint64_t)i * L + l];

			p->off = ((uint64_t)lids[i] * L + l) * b->page_bytes;
			p->nr_iov = spl;
			p->first_iov = (uint32_t)(((uint64_t)i * L + l) * spl);
			for (uint32_t s = 0; s < spl; s++) {
				iovs[p->first_iov + s].iov_base = (void *)block_seg(a, l, s, blks[i]);
				iovs[p->first_iov + s].iov_len = a->segs[(size_t)l * spl + s].bytes;
			}
		}
	}
}

static int
page_phase(struct bench *b, struct kvbench_result *res)
{
	uint32_t L = b->geo.nr_layers, n = max_u32(b->nr_logical, b->blocks_per_req);
	uint64_t ns_w[MAX_REPEATS] = {0}, ns_r[MAX_REPEATS] = {0};
	double cpu_w[MAX_REPEATS] = {0}, cpu_r[MAX_REPEATS] = {0};
	struct page_io *pages = calloc((size_t)n * L, sizeof(*pages));
	struct iovec *iovs = calloc((size_t)n * L * b->src.segs_per_layer, sizeof(*iovs));
	uint32_t *lids = calloc(n, sizeof(*lids)), *blks = calloc(n, sizeof(*blks));
	int fd = -1, rc = 0;

	if (pages == NULL || iovs == NULL || lids == NULL || blks == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	fd = open(b->conf->dirs[0], O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0 || fallocate(fd, 0, 0, (off_t)((uint64_t)b->nr_logical * L * b->page_bytes))) {
		rc = -errno;
		fprintf(stderr, "tutti: baseline file in %s: %s\n", b->conf->dirs[0],
			tutti_strerror(rc));
		goto out;
	}
	for (uint32_t rep = 0; rep < b->conf->repeats; rep++) {
		struct sample smp;
		int64_t t;

		for (uint32_t g = 0; g < b->nr_logical; g++) {
			lids[g] = g;
			blks[g] = b->src_phys[g];
		}
		page_plan(b, &b->src, b->nr_logical, lids, blks, pages, iovs);
		sample_start(&smp);
		t = pagebase_run(fd, pages, (uint64_t)b->nr_logical * L, iovs, true,
				 b->conf->page_threads);
		sample_stop(&smp, &ns_w[rep], &cpu_w[rep]);
		if (t < 0) {
			rc = (int)t;
			goto out;
		}
		for (uint32_t r = 0; r < b->conf->requests; r++) {
			for (uint32_t pos = 0; pos < b->blocks_per_req; pos++) {
				lids[pos] = logical_id(b, r, pos);
				blks[pos] = b->dst_phys[pos];
			}
			page_plan(b, &b->dst, b->blocks_per_req, lids, blks, pages, iovs);
			memset(b->dst.mem, 0xa5, b->dst.bytes);
			sample_start(&smp);
			t = pagebase_run(fd, pages, (uint64_t)b->blocks_per_req * L, iovs, false,
					 b->conf->page_threads);
			sample_stop(&smp, &ns_r[rep], &cpu_r[rep]);
			if (t < 0) {
				rc = (int)t;
				goto out;
			}
			if (!verify_request(b, r)) {
				fprintf(stderr, "tutti: baseline request %u: retrieved KV differs\n", r);
				res->verified = false;
			}
		}
	}
	phase_result(&res->page_store, (uint64_t)b->nr_logical * L * b->page_bytes, ns_w, cpu_w,
		     b->conf->repeats);
	phase_result(&res->page_retrieve,
		     (uint64_t)b->conf->requests * b->blocks_per_req * L * b->page_bytes, ns_r,
		     cpu_r, b->conf->repeats);
out:
	if (fd >= 0) {
		close(fd);
	}
	free(pages);
	free(iovs);
	free(lids);
	free(blks);
	return rc;
}

/* ---- driver ---- */

static int
plan_workload(struct bench *b, const struct kvbench_conf *conf)
{
	uint32_t bs = conf->geo.block_tokens;

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
		fprintf(stderr, "tutti: context must be %u..%u tokens and the shared prefix "
				"no longer than it\n",
			bs, bs << 24);
		return -EINVAL;
	}
	b->blocks_per_req = (uint32_t)(conf->context_tokens / bs);
	b->shared_blocks = (uint32_t)(conf->shared_tokens / conf->geo.chunk_tokens) * b->bpc;
	b->uniq_per_req = b->blocks_per_req - b->shared_blocks;
	b->chunks_per_req = (b->blocks_per_req + b->bpc - 1) / b->bpc;
	b->nr_logical = b->shared_blocks + conf->requests * b->uniq_per_req;
	return 0;
}

static int
open_store(struct bench *b, uint64_t unique_chunks)
{
	const struct kvbench_conf *c = b->conf;
	struct tutti_store_opts o;
	uint64_t slot = tutti_geometry_slot_bytes(&b->geo);

	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_CREATE;
	o.dirs = c->dirs;
	o.nr_dirs = c->nr_dirs;
	o.engine = c->engine;
	/* Room for one round of the workload plus striping slack in every directory. */
	o.capacity_bytes = (unique_chunks + 2ull * c->nr_dirs) * slot;
	o.key_bytes = KEY_BYTES;
	o.ns = "tutti-bench";
	o.ns_bytes = 11;
	o.staging_bytes = c->staging_bytes;
	o.max_io_bytes = c->max_io_bytes;
	o.queue_depth = c->queue_depth;
	return tutti_store_open(&b->geo, &o, &b->st);
}

static void
bench_fini(struct bench *b)
{
	tutti_store_close(b->st);
	arena_fini(&b->src);
	arena_fini(&b->dst);
	free(b->src_phys);
	free(b->dst_phys);
	free(b->ids);
	free(b->keys);
}

int
kvbench_run(const struct kvbench_conf *conf, struct kvbench_result *res)
{
	struct bench b = {.conf = conf};
	struct rawbw_result raw;
	uint64_t seed = conf->seed;
	char msg[256];
	int rc;

	memset(res, 0, sizeof(*res));
	res->verified = true;
	rc = plan_workload(&b, conf);
	if (rc < 0) {
		return rc;
	}
	res->unique_chunks = b.chunks_per_req + (uint64_t)(conf->requests - 1) *
							(b.chunks_per_req - b.shared_blocks / b.bpc);
	b.src_phys = calloc(b.nr_logical, sizeof(uint32_t));
	b.dst_phys = calloc(b.blocks_per_req, sizeof(uint32_t));
	b.ids = calloc(b.blocks_per_req, sizeof(uint32_t));
	b.keys = calloc(b.chunks_per_req, KEY_BYTES);
	if (b.src_phys == NULL || b.dst_phys == NULL || b.ids == NULL || b.keys == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	shuffle(b.src_phys, b.nr_logical, &seed);
	shuffle(b.dst_phys, b.blocks_per_req, &seed);
	rc = arena_init(&b, &b.src, b.nr_logical);
	if (rc == 0) {
		rc = arena_init(&b, &b.dst, b.blocks_per_req);
	}
	if (rc < 0) {
		fprintf(stderr, "tutti: cannot set up %.1f GiB of paged KV: %s\n",
			(double)(b.src.bytes + b.dst.bytes) / (1 << 30), tutti_strerror(rc));
		goto out;
	}
	res->kv_bytes = b.src.bytes + b.dst.bytes;
	snprintf(msg, sizeof(msg), "filling %.2f GiB of source KV (%u unique blocks)",
		 (double)b.src.bytes / (1 << 30), b.nr_logical);
	progress(&b, msg);
	fill_random(b.src.mem, b.src.bytes, conf->seed ^ 0x5eed);

	if (!conf->skip_raw) {
		progress(&b, "measuring raw O_DIRECT bandwidth of the store directory");
		rc = rawbw_measure(conf->dirs[0], conf->raw_bytes, &raw);
		if (rc < 0) {
			fprintf(stderr, "tutti: raw bandwidth of %s: %s\n", conf->dirs[0],
				tutti_strerror(rc));
			goto out;
		}
		res->raw_read_gbps = raw.read_gbps;
		res->raw_write_gbps = raw.write_gbps;
		res->raw_read_bs = raw.read_bs;
		res->raw_read_qd = raw.read_qd;
		res->raw_write_bs = raw.write_bs;
		res->raw_write_qd = raw.write_qd;
	}
	rc = open_store(&b, res->unique_chunks);
	if (rc < 0) {
		fprintf(stderr, "tutti: cannot open the store in %s: %s\n", conf->dirs[0],
			tutti_strerror(rc));
		goto out;
	}
	{
		struct tutti_stats s = {.size = sizeof(s)};

		tutti_store_get_stats(b.st, &s);
		res->staging_bytes = s.staging_bytes;
	}
	progress(&b, "storing");
	rc = store_phase(&b, res);
	if (rc < 0) {
		goto out;
	}
	progress(&b, "retrieving and verifying");
	rc = retrieve_phase(&b, res);
	if (rc < 0) {
		goto out;
	}
	if (!conf->skip_page) {
		if (arena_dio_aligned(&b.src, b.geo.nr_layers) &&
		    arena_dio_aligned(&b.dst, b.geo.nr_layers)) {
			progress(&b, "page-granular baseline");
			rc = page_phase(&b, res);
		} else {
			progress(&b, "page-granular baseline skipped: blocks are not 4 KiB aligned");
		}
	}
out:
	bench_fini(&b);
	return rc;
}
