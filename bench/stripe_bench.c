/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti-stripe-bench: how retrieve bandwidth scales when the store stripes its chunk slots over
 * 1, 2, 4... directories (one data file each; chunk i of a request goes to directory
 * i mod N, see src/pool/), against the raw O_DIRECT read bandwidth of the same N files read in
 * parallel, measured in the same run.
 *
 * For each N of --dirs: N directories are made, round-robin over the --dir bases (one base: N
 * files on one device; N bases: one file per device); a store over them (capacity exactly one
 * request, so each file holds request chunks / N slots and nothing else) is filled with one
 * request of --tokens tokens, then each --engines engine loads it --repeats times into a
 * shuffled, poisoned block table, each load paired with one raw round beside it (before it in
 * even rounds, after it in odd ones): the same bytes of the N data files, one io_uring with I/Os
 * to every file in flight, at the best block size and depth of a sweep made once per N (the
 * drift of a shared disk; never a ratio's denominator). The last load is checked bit for bit
 * against the source. The limit each load is divided by is the ceiling
 * (tools/common/ceiling.h) of the bases the N directories use, measured once per base count:
 * the best O_DIRECT read of a sweep over threads x I/O size x files x depth, and for GPU KV
 * the lower of that and the pinned host-to-device copy. Engines after the first reopen the
 * filled store (recovery) instead of writing it again.
 *
 * KV is in GPU memory (--kv gpu, the default; vLLM's per-layer paged layout, K and V of a block
 * together) or in host memory (--kv host: runs without a GPU; engine gpu-uring then uses its
 * host twin driver). A tmpfs base is labelled emulated, and its raw reads carry IOSQE_ASYNC, as
 * the store's do.
 *
 * Output: a line per (N, engine) on stdout, the same as JSON lines (--json) and CSV rows (--csv),
 * appended; one line per N (every engine, ratio to raw, speed-up over the first N) appended to
 * --summary.
 *
 * Usage: tutti-stripe-bench --dir BASE [--dir BASE2 ...] [--dirs 1,2,4] [--kv gpu|host]
 *            [--engines gpu-uring,gds] [--model NAME] [--tokens N] [--repeats N]
 *            [--staging-mib N] [--sweep-mib N] [--ceiling-s X] [--json FILE] [--csv FILE]
 *            [--summary FILE]
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
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
#include "gpucopy.h"
#include "rawbw.h"
#include "tutti/tutti.h"

#define MAX_BASES 16
#define MAX_DIRS 64 /* a store's directories at most (tutti_store_opts.nr_dirs) */
#define MAX_NS 8
#define MAX_ENGINES 4
#define MAX_REPEATS 16
#define KEY_BYTES 32
#define POISON 0xa5
/* Rows of the source pattern are offset by this much per layer, so that no two (layer, block)
 * pairs hold the same bytes (as in tutti-gpu-store-bench). */
#define LAYER_SHIFT 4160u
#define RAW_MEM_BYTES (256ull << 20)

struct conf {
	const char *bases[MAX_BASES];
	uint32_t nr_bases;
	uint32_t ns[MAX_NS]; /* directory counts */
	uint32_t nr_ns;
	uint32_t engines[MAX_ENGINES]; /* enum tutti_engine */
	uint32_t nr_engines;
	bool gpu_kv;
	const char *model;
	uint64_t tokens;
	uint32_t repeats;
	uint64_t staging_bytes, sweep_bytes;
	double ceiling_s;
	const char *json, *csv, *summary;
};

struct bench {
	struct conf c;
	struct tutti_geometry geo;
	uint32_t L, n, chunks; /* layers, paged blocks and chunks of the request */
	uint64_t lbb, bytes;   /* layer block bytes; bytes of one load */
	bool emulated;
	uint8_t *src, *dst;       /* KV arenas, layer-major: L x n layer blocks each */
	uint8_t *pattern;         /* host: the source's random bytes */
	uint8_t *host_a, *host_b; /* host: one layer each, for the check of GPU KV */
	uint8_t *raw_mem;         /* where raw reads land (pinned when the KV is on the GPU) */
	uint32_t *src_ids, *dst_ids;
	uint8_t *keys;
	struct tutti_kv *src_kv, *dst_kv;
	FILE *json, *csv, *summary;
	/* The limit over the first k bases, [k]; measured on first use. */
	struct ceiling_result ceiling[MAX_BASES + 1];
	bool have_ceiling[MAX_BASES + 1];
};

/* One (N, engine) measurement. */
struct result {
	bool ran;
	double gbps[MAX_REPEATS], raw_gbps[MAX_REPEATS];
	double load_gbps, raw, fill_gbps;
	double limit; /* the ceiling of the bases the N directories use */
	struct rawbw_point best;
	uint64_t submits; /* io_submits of the last load */
	uint64_t mismatches;
};

static void
die(const char *what, int rc)
{
	fprintf(stderr, "tutti-stripe-bench: %s: %s\n", what, strerror(rc < 0 ? -rc : rc));
	exit(1);
}

static void
ok(int rc, const char *what)
{
	if (rc < 0) {
		die(what, rc);
	}
}

static const char *
engine_name(uint32_t e)
{
	const char *name = tutti_engine_name(e);

	return name != NULL ? name : "?";
}

static uint64_t
clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* ---- KV memory: device memory through the CUDA runtime (gpucopy.h), or plain host memory ---- */

static uint8_t *
kv_alloc(const struct bench *b, uint64_t bytes)
{
	void *p = NULL;

	if (b->c.gpu_kv) {
		ok(gpucopy_dev_alloc(bytes, &p), "device memory");
	} else if (posix_memalign(&p, 4096, bytes) != 0) {
		die("host KV", -ENOMEM);
	}
	return p;
}

static void
kv_free(const struct bench *b, uint8_t *p)
{
	if (b->c.gpu_kv) {
		gpucopy_dev_free(p);
	} else {
		free(p);
	}
}

static void
kv_copy(const struct bench *b, void *dst, const void *src, uint64_t bytes)
{
	if (b->c.gpu_kv) {
		ok(gpucopy_copy(dst, src, bytes), "copy");
	} else {
		memcpy(dst, src, bytes);
	}
}

static uint8_t *
block_at(const struct bench *b, uint8_t *arena, uint32_t layer, uint32_t id)
{
	return arena + ((uint64_t)layer * b->n + id) * b->lbb;
}

static struct tutti_kv *
make_kv(const struct bench *b, uint8_t *arena)
{
	struct tutti_segment *segs = calloc(b->L, sizeof(*segs));
	struct tutti_kv *kv = NULL;

	if (segs == NULL) {
		die("calloc", -ENOMEM);
	}
	for (uint32_t l = 0; l < b->L; l++) {
		segs[l] = (struct tutti_segment){(uint64_t)(uintptr_t)block_at(b, arena, l, 0),
		                                 b->lbb, b->lbb};
	}
	ok(tutti_kv_create(&b->geo, segs, 1, b->n, b->c.gpu_kv ? TUTTI_MEM_CUDA : TUTTI_MEM_HOST,
	                   &kv),
	   "tutti_kv_create");
	free(segs);
	return kv;
}

/* Blocks of the destination that differ from their source block. */
static uint64_t
check(struct bench *b)
{
	uint64_t bad = 0, layer_bytes = (uint64_t)b->n * b->lbb;

	for (uint32_t l = 0; l < b->L; l++) {
		const uint8_t *s = block_at(b, b->src, l, 0), *d = block_at(b, b->dst, l, 0);

		if (b->c.gpu_kv) {
			kv_copy(b, b->host_a, s, layer_bytes);
			kv_copy(b, b->host_b, d, layer_bytes);
			s = b->host_a;
			d = b->host_b;
		}
		for (uint32_t i = 0; i < b->n; i++) {
			bad += memcmp(s + (uint64_t)b->src_ids[i] * b->lbb,
			              d + (uint64_t)b->dst_ids[i] * b->lbb, b->lbb) != 0;
		}
	}
	return bad;
}

static void
poison(const struct bench *b)
{
	if (b->c.gpu_kv) {
		ok(gpucopy_fill(b->dst, POISON, b->bytes), "fill");
	} else {
		memset(b->dst, POISON, b->bytes);
	}
}

/* ---- one N ---- */

struct stripe {
	uint32_t nr;
	char dirs[MAX_DIRS][4096];
	const char *ptrs[MAX_DIRS];
	int fds[RAWBW_MAX_FILES]; /* the data files, for raw reads */
	uint32_t nr_fds;
	uint64_t off;  /* where their slots start */
	uint64_t span; /* bytes of request data in each file */
};

static void
stripe_make(const struct bench *b, struct stripe *s, uint32_t nr)
{
	s->nr = nr;
	for (uint32_t i = 0; i < nr; i++) {
		snprintf(s->dirs[i], sizeof(s->dirs[i]), "%s/tutti-stripe-%u.%u",
		         b->c.bases[i % b->c.nr_bases], nr, i);
		s->ptrs[i] = s->dirs[i];
	}
	s->nr_fds = 0;
	s->span = (uint64_t)b->chunks / nr * tutti_geometry_slot_bytes(&b->geo);
}

static void
stripe_remove(struct stripe *s)
{
	for (uint32_t i = 0; i < s->nr_fds; i++) {
		close(s->fds[i]);
	}
	s->nr_fds = 0;
	for (uint32_t i = 0; i < s->nr; i++) {
		rawbw_remove_store(s->dirs[i]);
	}
}

static void
log_to_stderr(void *arg, int level, const char *msg)
{
	(void)arg;
	fprintf(stderr, "tutti[%d]: %s\n", level, msg);
}

/* NULL when the engine cannot run here (gds without a usable cuFile: logged). */
static struct tutti_store *
open_store(const struct bench *b, const struct stripe *s, uint32_t engine)
{
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;
	int rc;

	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_CREATE;
	o.dirs = s->ptrs;
	o.nr_dirs = s->nr;
	o.engine = engine;
	/* Exactly one request: chunk i goes to directory i mod N, so every directory holds the
	 * same chunks / N slots over its data files, the bytes the raw rounds read. */
	o.capacity_bytes = (uint64_t)b->chunks * tutti_geometry_slot_bytes(&b->geo);
	o.staging_bytes = b->c.staging_bytes;
	o.key_bytes = KEY_BYTES;
	o.log_fn = log_to_stderr;
	rc = tutti_store_open(&b->geo, &o, &st);
	if (rc == -EOPNOTSUPP && engine == TUTTI_ENGINE_GDS) {
		return NULL;
	}
	ok(rc, "tutti_store_open");
	return st;
}

static struct tutti_request
request(const struct bench *b, const uint32_t *ids)
{
	return (struct tutti_request){
	    .size = sizeof(struct tutti_request),
	    .nr_keys = b->chunks,
	    .keys = b->keys,
	    .nr_blocks = b->n,
	    .block_ids = ids,
	};
}

/* Store the request unless the store already holds it; GB/s of the save, 0 when skipped. */
static double
fill(struct bench *b, struct tutti_store *st)
{
	struct tutti_request req = request(b, b->src_ids);
	uint64_t hit_blocks = 0, t0;
	int64_t rc;

	if (tutti_store_lookup(st, b->keys, b->chunks, &hit_blocks) == b->chunks) {
		return 0;
	}
	t0 = bu_now_ns();
	rc = tutti_store_save(st, b->src_kv, &req, 1, NULL);
	if (rc != b->chunks) {
		fprintf(stderr, "tutti-stripe-bench: saved %lld of %u chunks\n", (long long)rc,
		        b->chunks);
		die("save", rc < 0 ? (int)rc : -EIO);
	}
	return (double)b->bytes / (double)(bu_now_ns() - t0);
}

static struct rawbw_target
raw_target(const struct bench *b, const struct stripe *s)
{
	return (struct rawbw_target){
	    .fds = s->fds,
	    .nr_fds = s->nr_fds,
	    .off = s->off,
	    .span = s->span,
	    .mem = b->raw_mem,
	    .mem_bytes = RAW_MEM_BYTES,
	    .async = b->emulated,
	};
}

/* Open the data files of the N directories for raw reads (each holds its share of the
 * request's slots: span becomes the least of them) and pick the best block size and depth. */
static void
raw_setup(const struct bench *b, struct tutti_store *st, struct stripe *s, struct rawbw_point *best)
{
	struct rawbw_target t;
	int rc = rawbw_open_store_files(st, s->fds, NULL, RAWBW_MAX_FILES, &s->nr_fds, &s->off,
	                                &s->span);

	if (rc < 0) {
		die(s->dirs[0], rc);
	}
	t = raw_target(b, s);
	ok(rawbw_sweep(
	       &t, b->c.sweep_bytes / s->nr_fds < s->span ? b->c.sweep_bytes / s->nr_fds : s->span,
	       best),
	   "raw sweep");
}

/* One raw read of \p span bytes of every file at the sweep's best point (0 without one). */
static double
raw_round(const struct rawbw_target *t, const struct rawbw_point *best, uint64_t span)
{
	double gbps = best->gbps > 0 ? rawbw_run(t, 0, span, best->bs, best->qd) : 0;

	if (gbps < 0) {
		die("raw read", (int)gbps);
	}
	return gbps;
}

static void
measure(struct bench *b, struct stripe *s, uint32_t engine, struct rawbw_point *best,
        struct result *res)
{
	struct tutti_store *st = open_store(b, s, engine);
	struct tutti_request req = request(b, b->dst_ids);
	struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};
	struct rawbw_target t;

	if (st == NULL) {
		return;
	}
	res->ran = true;
	res->fill_gbps = fill(b, st);
	if (s->nr_fds == 0) {
		raw_setup(b, st, s, best);
	}
	t = raw_target(b, s);
	res->best = *best;
	for (uint32_t r = 0; r < b->c.repeats; r++) {
		uint64_t t0;
		int64_t rc;

		/* The same bytes the load reads, beside it (a shared disk drifts); the order
		 * alternates, so that a cache below the guest (a virtual disk's host) that keeps
		 * what was just read favours neither side. */
		if (r % 2 == 0) {
			res->raw_gbps[r] = raw_round(&t, best, s->span);
		}
		poison(b);
		tutti_store_get_stats(st, &s0);
		t0 = bu_now_ns();
		rc = tutti_store_load(st, b->dst_kv, &req, 1, 0, b->L, NULL);
		res->gbps[r] = (double)b->bytes / (double)(bu_now_ns() - t0);
		if (r % 2 == 1) {
			res->raw_gbps[r] = raw_round(&t, best, s->span);
		}
		if (rc != b->chunks) {
			fprintf(stderr, "tutti-stripe-bench: loaded %lld of %u chunks\n",
			        (long long)rc, b->chunks);
			die("load", rc < 0 ? (int)rc : -EIO);
		}
	}
	tutti_store_get_stats(st, &s1);
	res->submits = s1.io_submits - s0.io_submits;
	res->mismatches = check(b);
	res->load_gbps = bu_median(res->gbps, b->c.repeats);
	res->raw = bu_median(res->raw_gbps, b->c.repeats);
	tutti_store_close(st);
}

/* The limit of loads over \p nr directories: the ceiling of the bases they are spread over,
 * measured once per base count, its scratch files sized to the request. */
static double
limit_for(struct bench *b, uint32_t nr)
{
	uint32_t k = nr < b->c.nr_bases ? nr : b->c.nr_bases;
	struct ceiling_conf cc;

	if (!b->have_ceiling[k]) {
		ceiling_conf_init(&cc, b->c.bases, k);
		cc.budget_s = b->c.ceiling_s;
		cc.file_bytes = clamp_u64(b->bytes / 16, 16ull << 20, 128ull << 20);
		cc.gpu = b->c.gpu_kv ? 0 : -1;
		/* Loads only: the whole budget goes to the reads (on tmpfs with GPU KV they are
		 * searched twice, through 1 GiB and staged). */
		cc.skip_writes = true;
		ok(ceiling_measure(&cc, &b->ceiling[k]), "ceiling");
		b->have_ceiling[k] = true;
		printf("# ceiling of %u base%s:\n", k, k > 1 ? "s" : "");
		ceiling_print(stdout, "#   ", &b->ceiling[k]);
		if (b->json != NULL) {
			fprintf(b->json,
			        "{\"bench\":\"stripe\",\"storage\":\"%s\",\"bases\":%u,"
			        "\"op\":\"ceiling\",\"ceiling\":",
			        b->emulated ? "emulated-tmpfs" : "disk", k);
			ceiling_json(b->json, &b->ceiling[k]);
			fprintf(b->json, "}\n");
		}
	}
	return ceiling_read_limit(&b->ceiling[k], b->c.gpu_kv);
}

/* ---- reports ---- */

static const char *
storage(const struct bench *b)
{
	return b->emulated ? "emulated-tmpfs" : "disk";
}

static double
ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static void
report(struct bench *b, uint32_t nr, uint32_t engine, const struct result *r, double speedup)
{
	uint32_t R = b->c.repeats;

	printf("%-14s dirs %2u  %-9s %s KV  load %7.2f GB/s  x%.2f of limit %.2f  one-ring raw "
	       "%7.2f GB/s (%u KiB x %u)  x%.2f over the first  fill %.2f GB/s  %s\n",
	       storage(b), nr, engine_name(engine), b->c.gpu_kv ? "GPU" : "host", r->load_gbps,
	       ratio(r->load_gbps, r->limit), r->limit, r->raw, r->best.bs >> 10, r->best.qd,
	       speedup, r->fill_gbps, r->mismatches == 0 ? "bit-exact" : "MISMATCH");
	fflush(stdout);
	if (b->json != NULL) {
		fprintf(b->json,
		        "{\"bench\":\"stripe\",\"storage\":\"%s\",\"dirs\":%u,\"bases\":%u,"
		        "\"engine\":\"%s\",\"kv\":\"%s\",\"model\":\"%s\",\"tokens\":%llu,"
		        "\"bytes\":%llu,\"repeats\":%u,\"load_gbps\":%.3f,\"limit_gbps\":%.3f,"
		        "\"ratio_to_limit\":%.3f,\"raw_gbps\":%.3f,"
		        "\"ratio_to_raw\":%.3f,\"speedup_over_first\":%.3f,\"raw_bs\":%u,"
		        "\"raw_qd\":%u,\"fill_gbps\":%.3f,\"submits_per_layer\":%.2f,"
		        "\"bit_exact\":%s,\"rounds_gbps\":[",
		        storage(b), nr, b->c.nr_bases, engine_name(engine),
		        b->c.gpu_kv ? "gpu" : "host", b->c.model, (unsigned long long)b->c.tokens,
		        (unsigned long long)b->bytes, R, r->load_gbps, r->limit,
		        ratio(r->load_gbps, r->limit), r->raw, ratio(r->load_gbps, r->raw), speedup,
		        r->best.bs, r->best.qd, r->fill_gbps, (double)r->submits / b->L,
		        r->mismatches == 0 ? "true" : "false");
		for (uint32_t i = 0; i < R; i++) {
			fprintf(b->json, "%s%.3f", i ? "," : "", r->gbps[i]);
		}
		fprintf(b->json, "],\"raw_rounds_gbps\":[");
		for (uint32_t i = 0; i < R; i++) {
			fprintf(b->json, "%s%.3f", i ? "," : "", r->raw_gbps[i]);
		}
		fprintf(b->json, "]}\n");
		fflush(b->json);
	}
	if (b->csv != NULL) {
		fprintf(b->csv,
		        "%s,%u,%s,%s,%s,%llu,%llu,%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%u,%u,%.3f,%d\n",
		        storage(b), nr, engine_name(engine), b->c.gpu_kv ? "gpu" : "host",
		        b->c.model, (unsigned long long)b->c.tokens, (unsigned long long)b->bytes,
		        R, r->load_gbps, r->limit, ratio(r->load_gbps, r->limit), r->raw,
		        ratio(r->load_gbps, r->raw), speedup, r->best.bs, r->best.qd, r->fill_gbps,
		        r->mismatches == 0);
		fflush(b->csv);
	}
}

/* One line for N: every engine's load bandwidth, its ratio to the limit and its speed-up. */
static void
summarize(struct bench *b, uint32_t nr, const struct result *res, const double *speedup)
{
	char line[1024];
	int len = snprintf(
	    line, sizeof(line), "stripe %s %s KV, %llu tokens, %u dir%s:", storage(b),
	    b->c.gpu_kv ? "GPU" : "host", (unsigned long long)b->c.tokens, nr, nr == 1 ? "" : "s");

	for (uint32_t e = 0; e < b->c.nr_engines && len > 0 && (size_t)len < sizeof(line); e++) {
		const struct result *r = &res[e];

		if (!r->ran) {
			len += snprintf(line + len, sizeof(line) - (size_t)len, " %s n/a;",
			                engine_name(b->c.engines[e]));
			continue;
		}
		len += snprintf(line + len, sizeof(line) - (size_t)len,
		                " %s %.2f GB/s = %.2f x limit %.2f, x%.2f over the first%s;",
		                engine_name(b->c.engines[e]), r->load_gbps,
		                ratio(r->load_gbps, r->limit), r->limit, speedup[e],
		                r->mismatches == 0 ? "" : " MISMATCH");
	}
	printf("%s\n", line);
	if (b->summary != NULL) {
		fprintf(b->summary, "%s\n", line);
		fflush(b->summary);
	}
}

/* ---- set-up ---- */

static void
usage(void)
{
	fprintf(stderr,
	        "usage: tutti-stripe-bench --dir BASE [--dir BASE2 ...] [--dirs 1,2,4] "
	        "[--kv gpu|host]\n"
	        "       [--engines gpu-uring,gds] [--model NAME] [--tokens N] [--repeats N]\n"
	        "       [--staging-mib N] [--sweep-mib N] [--ceiling-s X] [--json FILE] "
	        "[--csv FILE] [--summary FILE]\n");
	exit(2);
}

static uint64_t
number(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	return bu_number("tutti-stripe-bench", opt, s, min, max);
}

/* A comma-separated list of directory counts (ns) or engine names. */
static void
parse_list(const char *s, struct conf *c, bool engines)
{
	char *copy = strdup(s), *save = NULL;

	if (copy == NULL) {
		die("strdup", -ENOMEM);
	}
	if (engines) {
		c->nr_engines = 0;
	} else {
		c->nr_ns = 0;
	}
	for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		if (engines) {
			int e = tutti_engine_parse(t);

			if (e < 0 || c->nr_engines == MAX_ENGINES) {
				fprintf(stderr, "tutti-stripe-bench: bad engine '%s'\n", t);
				usage();
			}
			c->engines[c->nr_engines++] = (uint32_t)e;
		} else {
			uint64_t v = number("--dirs", t, 1, MAX_DIRS);

			if (v == 0 || v > MAX_DIRS || c->nr_ns == MAX_NS) {
				fprintf(stderr, "tutti-stripe-bench: bad directory count '%s'\n",
				        t);
				usage();
			}
			c->ns[c->nr_ns++] = (uint32_t)v;
		}
	}
	free(copy);
}

static void
parse(int argc, char **argv, struct conf *c)
{
	*c = (struct conf){
	    .ns = {1, 2, 4},
	    .nr_ns = 3,
	    .engines = {TUTTI_ENGINE_GPU_URING},
	    .nr_engines = 1,
	    .gpu_kv = true,
	    .model = "llama-3-8b",
	    .tokens = 131072,
	    .repeats = 3,
	    .staging_bytes = 256ull << 20,
	    .sweep_bytes = 1ull << 30,
	    .ceiling_s = 6,
	};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (v == NULL) {
			usage();
		}
		i++;
		if (strcmp(a, "--dir") == 0) {
			if (c->nr_bases == MAX_BASES) {
				usage();
			}
			c->bases[c->nr_bases++] = v;
		} else if (strcmp(a, "--dirs") == 0) {
			parse_list(v, c, false);
		} else if (strcmp(a, "--engines") == 0) {
			parse_list(v, c, true);
		} else if (strcmp(a, "--kv") == 0) {
			if (strcmp(v, "gpu") != 0 && strcmp(v, "host") != 0) {
				usage();
			}
			c->gpu_kv = strcmp(v, "gpu") == 0;
		} else if (strcmp(a, "--model") == 0) {
			c->model = v;
		} else if (strcmp(a, "--tokens") == 0) {
			c->tokens = number(a, v, 1, 1ull << 28);
		} else if (strcmp(a, "--repeats") == 0) {
			c->repeats = (uint32_t)number(a, v, 1, MAX_REPEATS);
		} else if (strcmp(a, "--staging-mib") == 0) {
			c->staging_bytes = number(a, v, 1, 1u << 20) << 20;
		} else if (strcmp(a, "--sweep-mib") == 0) {
			c->sweep_bytes = number(a, v, 1, 1u << 24) << 20;
		} else if (strcmp(a, "--ceiling-s") == 0) {
			if (cliarg_double("tutti-stripe-bench", a, v, 0.1, 3600, &c->ceiling_s) <
			    0) {
				usage();
			}
		} else if (strcmp(a, "--json") == 0) {
			c->json = v;
		} else if (strcmp(a, "--csv") == 0) {
			c->csv = v;
		} else if (strcmp(a, "--summary") == 0) {
			c->summary = v;
		} else {
			usage();
		}
	}
	if (c->nr_bases == 0 || c->repeats == 0 || c->repeats > MAX_REPEATS ||
	    c->sweep_bytes == 0) {
		usage();
	}
}

static FILE *
open_append(const char *path, bool *fresh)
{
	FILE *f;
	struct stat sb;
	int fd;

	if (path == NULL) {
		return NULL;
	}
	*fresh = stat(path, &sb) != 0 || sb.st_size == 0;
	/* Only a regular file: a FIFO would block the open until a reader came. */
	fd = cliarg_open("tutti-stripe-bench", NULL, path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd == -EINVAL) {
		exit(2); /* said why */
	}
	f = fd >= 0 ? fdopen(fd, "a") : NULL;
	if (f == NULL) {
		die(path, fd < 0 ? fd : -errno);
	}
	return f;
}

static void
setup(struct bench *b)
{
	const struct conf *c = &b->c;
	uint64_t layer_bytes, pattern_bytes, seed = 0x7475747469ull;
	struct statfs sfs;
	bool fresh = false;

	ok(tutti_geometry_preset(c->model, &b->geo), c->model);
	b->L = b->geo.nr_layers;
	b->lbb = tutti_geometry_layer_block_bytes(&b->geo);
	b->n = (uint32_t)(c->tokens / b->geo.block_tokens);
	b->chunks = (uint32_t)(c->tokens / b->geo.chunk_tokens);
	b->bytes = (uint64_t)b->L * b->n * b->lbb;
	for (uint32_t i = 0; i < c->nr_ns; i++) {
		/* Every file then holds the same number of chunks. */
		if (b->chunks == 0 || c->tokens % b->geo.chunk_tokens != 0 ||
		    b->chunks % c->ns[i] != 0) {
			fprintf(stderr,
			        "tutti-stripe-bench: --tokens must be whole chunks of %u tokens, "
			        "as many chunks as a multiple of every directory count\n",
			        b->geo.chunk_tokens);
			exit(2);
		}
	}
	if (statfs(c->bases[0], &sfs) != 0) {
		die(c->bases[0], -errno);
	}
	b->emulated = sfs.f_type == TMPFS_MAGIC;
	if (c->gpu_kv) {
		int rc = gpucopy_set_device(0);

		if (rc < 0) {
			fprintf(stderr,
			        "tutti-stripe-bench: no usable GPU (%s); --kv host runs "
			        "without one\n",
			        strerror(-rc));
			exit(1);
		}
	}
	layer_bytes = (uint64_t)b->n * b->lbb;
	pattern_bytes = layer_bytes + (uint64_t)b->L * LAYER_SHIFT;
	b->src = kv_alloc(b, b->bytes);
	b->dst = kv_alloc(b, b->bytes);
	b->pattern = malloc(pattern_bytes);
	b->host_a = malloc(layer_bytes);
	b->host_b = malloc(layer_bytes);
	b->src_ids = malloc(b->n * sizeof(*b->src_ids));
	b->dst_ids = malloc(b->n * sizeof(*b->dst_ids));
	b->keys = malloc((size_t)b->chunks * KEY_BYTES);
	if (b->pattern == NULL || b->host_a == NULL || b->host_b == NULL || b->src_ids == NULL ||
	    b->dst_ids == NULL || b->keys == NULL) {
		die("malloc", -ENOMEM);
	}
	/* Raw reads land in pinned memory when the KV is on the GPU, as the store's staging
	 * does. */
	if (c->gpu_kv) {
		ok(gpucopy_host_alloc(RAW_MEM_BYTES, (void **)&b->raw_mem), "pinned memory");
	} else if (posix_memalign((void **)&b->raw_mem, 4096, RAW_MEM_BYTES) != 0) {
		die("raw memory", -ENOMEM);
	}
	memset(b->raw_mem, 0x5a, RAW_MEM_BYTES);
	bu_fill_random(b->pattern, pattern_bytes / 8 * 8, seed);
	for (uint32_t l = 0; l < b->L; l++) {
		kv_copy(b, block_at(b, b->src, l, 0), b->pattern + (uint64_t)l * LAYER_SHIFT,
		        layer_bytes);
	}
	bu_shuffle(b->src_ids, b->n, seed + 1);
	bu_shuffle(b->dst_ids, b->n, seed + 2);
	/* Fresh keys per run: a store left behind by an interrupted run is never a hit. */
	bu_fill_random(b->keys, (uint64_t)b->chunks * KEY_BYTES,
	               (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
	b->src_kv = make_kv(b, b->src);
	b->dst_kv = make_kv(b, b->dst);
	b->json = open_append(c->json, &fresh);
	b->csv = open_append(c->csv, &fresh);
	if (b->csv != NULL && fresh) {
		fprintf(b->csv,
		        "storage,dirs,engine,kv,model,tokens,bytes,repeats,load_gbps,"
		        "limit_gbps,ratio_to_limit,raw_gbps,ratio_to_raw,speedup_over_first,"
		        "raw_bs,raw_qd,fill_gbps,bit_exact\n");
	}
	b->summary = open_append(c->summary, &fresh);
}

static void
teardown(struct bench *b)
{
	tutti_kv_destroy(b->src_kv);
	tutti_kv_destroy(b->dst_kv);
	kv_free(b, b->src);
	kv_free(b, b->dst);
	if (b->c.gpu_kv) {
		gpucopy_host_free(b->raw_mem);
	} else {
		free(b->raw_mem);
	}
	free(b->pattern);
	free(b->host_a);
	free(b->host_b);
	free(b->src_ids);
	free(b->dst_ids);
	free(b->keys);
	if (b->json != NULL) {
		fclose(b->json);
	}
	if (b->csv != NULL) {
		fclose(b->csv);
	}
	if (b->summary != NULL) {
		fclose(b->summary);
	}
}

int
main(int argc, char **argv)
{
	static struct bench b;
	double first[MAX_ENGINES] = {0};

	parse(argc, argv, &b.c);
	setup(&b);
	printf("# %s, %s KV, %llu tokens (%.2f GB per load), %u rounds; %s: %s%s\n", b.c.model,
	       b.c.gpu_kv ? "GPU" : "host", (unsigned long long)b.c.tokens, (double)b.bytes / 1e9,
	       b.c.repeats, b.emulated ? "EMULATED fast NVMe (tmpfs)" : "disk", b.c.bases[0],
	       b.c.nr_bases > 1 ? " and more" : "");
	for (uint32_t i = 0; i < b.c.nr_ns; i++) {
		struct result res[MAX_ENGINES] = {0};
		double speedup[MAX_ENGINES] = {0};
		struct rawbw_point best = {0};
		struct stripe s;

		double limit = limit_for(&b, b.c.ns[i]);

		stripe_make(&b, &s, b.c.ns[i]);
		for (uint32_t e = 0; e < b.c.nr_engines; e++) {
			res[e].limit = limit;
			measure(&b, &s, b.c.engines[e], &best, &res[e]);
			if (!res[e].ran) {
				printf("%-14s dirs %2u  %-9s not available here (see the log)\n",
				       storage(&b), s.nr, engine_name(b.c.engines[e]));
				continue;
			}
			if (first[e] == 0) {
				first[e] = res[e].load_gbps;
			}
			speedup[e] = ratio(res[e].load_gbps, first[e]);
			report(&b, s.nr, b.c.engines[e], &res[e], speedup[e]);
		}
		summarize(&b, s.nr, res, speedup);
		stripe_remove(&s);
	}
	teardown(&b);
	return 0;
}
