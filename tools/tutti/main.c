/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tutti command line: `tutti demo`, `tutti bench`, `tutti version`.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "cliarg.h"
#include "kvbench.h"

/* Print \p text from column 0 of a line that has \p col columns already, wrapped at word
 * boundaries to WIDTH columns, continued lines indented by \p indent. */
#define WIDTH 96
static void
print_wrapped(FILE *f, const char *text, int col, int indent)
{
	while (*text != '\0') {
		int n = (int)strcspn(text, " ");

		if (col > indent && col + 1 + n > WIDTH) {
			fprintf(f, "\n%*s", indent, "");
			col = indent;
		} else if (col > indent) {
			fputc(' ', f);
			col++;
		}
		fprintf(f, "%.*s", n, text);
		col += n;
		text += n;
		text += strspn(text, " ");
	}
	fputc('\n', f);
}

/* The engines and the options each takes, as the library lists them: a new engine or option
 * shows here without a change to this program. */
static void
print_engines(FILE *f)
{
	fprintf(f, "\nengines (--engine NAME) and their options (--engine-opts KEY=VALUE,...):\n");
	for (uint32_t e = 0; e < tutti_engine_count(); e++) {
		struct tutti_engine_info info = {.size = sizeof(info)};

		if (tutti_engine_info(e, &info) < 0) {
			continue;
		}
		fprintf(f, "  %-10s", info.name);
		print_wrapped(f, info.description, 12, 12);
		for (uint32_t i = 0; i < info.nr_options; i++) {
			struct tutti_engine_option o = {.size = sizeof(o)};
			char head[128];
			int n;

			if (tutti_engine_option(e, i, &o) < 0) {
				continue;
			}
			if (o.kind == TUTTI_ENGINE_OPTION_CHOICE) {
				n = snprintf(head, sizeof(head), "    %s=", o.name);
				for (uint32_t k = 0; k < o.nr_choices && n < (int)sizeof(head);
				     k++) {
					n += snprintf(head + n, sizeof(head) - (size_t)n, "%s%s",
					              k > 0 ? "|" : "", o.choices[k]);
				}
				fprintf(f, "%s (default %s):", head, o.choices[o.def]);
			} else {
				fprintf(f, "    %s=%llu..%llu (default %llu):", o.name,
				        (unsigned long long)o.min, (unsigned long long)o.max,
				        (unsigned long long)o.def);
			}
			print_wrapped(f, o.help, WIDTH, 8);
		}
	}
}

static void
usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tutti <command> [options]\n"
	    "\n"
	    "commands:\n"
	    "  demo      store a shared-prefix workload in ./tutti-store, retrieve it into a\n"
	    "            shuffled block table, verify it, and compare with the raw disk and a\n"
	    "            page-granular baseline\n"
	    "  bench     the same, with options (below)\n"
	    "  inspect   DIR... [--json]: geometry, capacity, chunks, usage and what recovery\n"
	    "            found in an existing store\n"
	    "  fsck      DIR... [--repair]: read every stored object back against its checksum;\n"
	    "            exit 0 clean, 1 repaired, 4 damage left, 8 failed. --repair removes\n"
	    "            only what failed its checksum and keeps the chunks after it\n"
	    "            inspect and fsck take every directory of the store (in any order) and\n"
	    "            name the ones missing; they open it read-only and change nothing (they\n"
	    "            work on a read-only mount); only fsck --repair writes\n"
	    "  profile   [--dir DIR]... [--out FILE]: measure the storage and write the profile\n"
	    "            the layerwise pipeline plans with (tutti profile --help)\n"
	    "  ceiling   --dir DIR [--gpu N] [--json]: the best O_DIRECT read and write\n"
	    "            bandwidth under DIR from a sweep of threads x I/O size x files x\n"
	    "            depth, and the pinned copies of GPU N: the limit benchmarks divide\n"
	    "            by (tutti ceiling --help)\n"
	    "  version   the version (also --version), the on-disk format it reads and writes,\n"
	    "            and whether it has CUDA\n"
	    "\n"
	    "bench options:\n"
	    "  --model NAME         geometry preset: llama-3-8b (default), llama-3-70b, "
	    "glm-4-9b, tiny\n"
	    "  --layers N --kv-heads N --head-dim N --elem-bytes N\n"
	    "  --block-tokens N --chunk-tokens N   override the preset\n"
	    "  --context N          tokens per request (default 32768)\n"
	    "  --requests N         requests sharing the prefix (default 1)\n"
	    "  --shared N           shared prefix tokens (default 0)\n"
	    "  --engine NAME        one of the engines below (default uring)\n"
	    "  --engine-opts S      the engine's options: KEY=VALUE pairs separated by commas,\n"
	    "                       the keys below (default: every default)\n"
	    "  --dir DIR            store directory; repeat for several disks (default "
	    "tutti-store)\n"
	    "  --layout NAME        kv-first (default), packed or cross-layer\n"
	    "  --layerwise          retrieve one layer per call\n"
	    "  --durability MODE    fast (default) or durable: flush around slot headers\n"
	    "  --save-chunks N      chunks per save call (default: a whole request)\n"
	    "  --repeats N          timed repetitions, median reported (default 3)\n"
	    "  --staging-mib N      staging memory (default 64)\n"
	    "  --io-kib N           largest I/O (default 4096)\n"
	    "  --queue-depth N      I/Os in flight (default 32)\n"
	    "  --page-threads N     threads of the page-granular baseline (default 16)\n"
	    "  --no-raw --no-baseline   skip those measurements\n"
	    "  --ceiling-s X        time budget of the ceiling sweep, the limit every ratio is\n"
	    "                       taken to (default 4; 0 skips it)\n"
	    "  --seed N             workload seed (default 42)\n"
	    "  --json               print one JSON object instead of the table\n"
	    "\n"
	    "Numbers are plain decimals, checked against each option's range (--requests\n"
	    "1..65536, --staging-mib 1..1048576, --io-kib 4..1048576, --queue-depth 1..4096,\n"
	    "--repeats 1..64); a workload needing more host memory than the machine has is\n"
	    "refused before anything is allocated.\n");
	print_engines(f);
}

enum {
	OPT_MODEL = 256,
	OPT_LAYERS,
	OPT_HEADS,
	OPT_HEAD_DIM,
	OPT_ELEM,
	OPT_BLOCK,
	OPT_CHUNK,
	OPT_CONTEXT,
	OPT_REQUESTS,
	OPT_SHARED,
	OPT_ENGINE,
	OPT_ENGINE_OPTS,
	OPT_DIR,
	OPT_LAYOUT,
	OPT_LAYERWISE,
	OPT_DURABILITY,
	OPT_SAVE_CHUNKS,
	OPT_REPEATS,
	OPT_STAGING,
	OPT_IO,
	OPT_QD,
	OPT_PAGE_THREADS,
	OPT_NO_RAW,
	OPT_NO_BASELINE,
	OPT_CEILING,
	OPT_SEED,
	OPT_JSON,
	OPT_HELP,
};

static const struct option options[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"kv-heads", required_argument, NULL, OPT_HEADS},
    {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
    {"elem-bytes", required_argument, NULL, OPT_ELEM},
    {"block-tokens", required_argument, NULL, OPT_BLOCK},
    {"chunk-tokens", required_argument, NULL, OPT_CHUNK},
    {"context", required_argument, NULL, OPT_CONTEXT},
    {"requests", required_argument, NULL, OPT_REQUESTS},
    {"shared", required_argument, NULL, OPT_SHARED},
    {"engine", required_argument, NULL, OPT_ENGINE},
    {"engine-opts", required_argument, NULL, OPT_ENGINE_OPTS},
    {"dir", required_argument, NULL, OPT_DIR},
    {"layout", required_argument, NULL, OPT_LAYOUT},
    {"layerwise", no_argument, NULL, OPT_LAYERWISE},
    {"durability", required_argument, NULL, OPT_DURABILITY},
    {"save-chunks", required_argument, NULL, OPT_SAVE_CHUNKS},
    {"repeats", required_argument, NULL, OPT_REPEATS},
    {"staging-mib", required_argument, NULL, OPT_STAGING},
    {"io-kib", required_argument, NULL, OPT_IO},
    {"queue-depth", required_argument, NULL, OPT_QD},
    {"page-threads", required_argument, NULL, OPT_PAGE_THREADS},
    {"no-raw", no_argument, NULL, OPT_NO_RAW},
    {"no-baseline", no_argument, NULL, OPT_NO_BASELINE},
    {"ceiling-s", required_argument, NULL, OPT_CEILING},
    {"seed", required_argument, NULL, OPT_SEED},
    {"json", no_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int
parse_layout(const char *s, uint32_t *out)
{
	static const char *const names[] = {"kv-first", "packed", "cross-layer"};

	for (uint32_t i = 0; i < 3; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = i;
			return 0;
		}
	}
	return -EINVAL;
}

/*
 * The numeric options and their ranges. Geometry fields are bounded by what a store can hold
 * (the library checks how they combine); workload sizes by what a benchmark on one machine can
 * allocate (kvbench_run checks the host memory the whole workload needs).
 */
#define MAX_CONTEXT_TOKENS (1ull << 28)
#define MAX_REQUESTS 65536u
#define MAX_STAGING_MIB (1u << 20) /* 1 TiB */
#define MAX_IO_KIB (1u << 20)      /* 1 GiB: one I/O's length is 32-bit */

static int
bench_u32(const char *opt, const char *arg, uint32_t min, uint32_t max, uint32_t *out)
{
	return cliarg_u32("tutti bench", opt, arg, min, max, out);
}

/* Apply one option; returns 0, 1 for --help, or -EINVAL. */
static int
apply_option(int opt, const char *arg, struct kvbench_conf *c, bool *json, bool *dir_given)
{
	uint64_t n;
	int rc = 0;

	switch (opt) {
	case OPT_MODEL:
		c->model = arg;
		return tutti_geometry_preset(arg, &c->geo) == 0 ? 0 : -EINVAL;
	case OPT_LAYERS:
		return bench_u32("--layers", arg, 1, 4096, &c->geo.nr_layers);
	case OPT_HEADS:
		return bench_u32("--kv-heads", arg, 1, 4096, &c->geo.nr_kv_heads);
	case OPT_HEAD_DIM:
		return bench_u32("--head-dim", arg, 1, 4096, &c->geo.head_dim);
	case OPT_ELEM:
		return bench_u32("--elem-bytes", arg, 1, 8, &c->geo.elem_bytes);
	case OPT_BLOCK:
		return bench_u32("--block-tokens", arg, 1, 1u << 16, &c->geo.block_tokens);
	case OPT_CHUNK:
		return bench_u32("--chunk-tokens", arg, 1, 1u << 20, &c->geo.chunk_tokens);
	case OPT_CONTEXT:
		return cliarg_u64("tutti bench", "--context", arg, 1, MAX_CONTEXT_TOKENS,
		                  &c->context_tokens);
	case OPT_REQUESTS:
		return bench_u32("--requests", arg, 1, MAX_REQUESTS, &c->requests);
	case OPT_SHARED:
		return cliarg_u64("tutti bench", "--shared", arg, 0, MAX_CONTEXT_TOKENS,
		                  &c->shared_tokens);
	case OPT_ENGINE:
		rc = tutti_engine_parse(arg);
		if (rc >= 0) {
			c->engine = (uint32_t)rc;
		}
		return rc < 0 ? rc : 0;
	case OPT_ENGINE_OPTS:
		c->engine_opts = arg; /* the engine checks them when the store opens */
		return 0;
	case OPT_DIR:
		if (!*dir_given) {
			c->nr_dirs = 0;
			*dir_given = true;
		}
		if (c->nr_dirs == KVBENCH_MAX_DIRS) {
			return -EINVAL;
		}
		c->dirs[c->nr_dirs++] = arg;
		return 0;
	case OPT_LAYOUT:
		return parse_layout(arg, &c->layout);
	case OPT_LAYERWISE:
		c->layerwise = true;
		return 0;
	case OPT_SAVE_CHUNKS:
		return bench_u32("--save-chunks", arg, 0, UINT32_MAX, &c->save_chunks);
	case OPT_DURABILITY:
		if (strcmp(arg, "fast") == 0 || strcmp(arg, "durable") == 0) {
			c->durability =
			    arg[0] == 'd' ? TUTTI_DURABILITY_DURABLE : TUTTI_DURABILITY_FAST;
			return 0;
		}
		return -EINVAL;
	case OPT_REPEATS:
		return bench_u32("--repeats", arg, 1, KVBENCH_MAX_REPEATS, &c->repeats);
	case OPT_STAGING:
		rc = cliarg_u64("tutti bench", "--staging-mib", arg, 1, MAX_STAGING_MIB, &n);
		if (rc == 0) {
			c->staging_bytes = n << 20;
		}
		return rc;
	case OPT_IO:
		rc = cliarg_u64("tutti bench", "--io-kib", arg, 4, MAX_IO_KIB, &n);
		if (rc == 0) {
			c->max_io_bytes = n << 10;
		}
		return rc;
	case OPT_QD:
		return bench_u32("--queue-depth", arg, 1, 4096, &c->queue_depth);
	case OPT_PAGE_THREADS:
		return bench_u32("--page-threads", arg, 1, 1024, &c->page_threads);
	case OPT_NO_RAW:
		c->skip_raw = true;
		return 0;
	case OPT_NO_BASELINE:
		c->skip_page = true;
		return 0;
	case OPT_CEILING:
		return cliarg_double("tutti bench", "--ceiling-s", arg, 0, 3600, &c->ceiling_s);
	case OPT_SEED:
		return cliarg_u64("tutti bench", "--seed", arg, 0, UINT64_MAX, &c->seed);
	case OPT_JSON:
		*json = true;
		return 0;
	case OPT_HELP:
		return 1;
	default:
		return -EINVAL;
	}
}

static double
ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

/* A row: GB/s, its ratio to the limit ("-" without one), CPU seconds per GB. */
static void
print_row(const char *name, const struct kvbench_phase *p, double limit)
{
	char x[16] = "-";

	if (p->bytes == 0) {
		printf("  %-40s %8s\n", name, "skipped");
		return;
	}
	if (limit > 0) {
		snprintf(x, sizeof(x), "%.2f", p->gbps / limit);
	}
	printf("  %-40s %8.2f %8s %10.3f\n", name, p->gbps, x, p->cpu_s_per_gb);
}

static void
print_ceiling(const char *what, const struct ceiling_sweep *s)
{
	char name[80];

	if (s->best.gbps <= 0) {
		printf("  ceiling O_DIRECT %-22s %8s\n", what, "skipped");
		return;
	}
	snprintf(name, sizeof(name), "ceiling O_DIRECT %s (%ux %u KiB, %u f, qd %u)", what,
	         s->best.threads, s->best.io_bytes >> 10, s->best.files, s->best.depth);
	printf("  %-40s %8.2f %8.2f %10s\n", name, s->best.gbps, 1.0, "-");
}

/* The single io_uring reader or writer of earlier runs, kept as a column: never a limit. */
static void
print_raw(const char *what, double gbps, uint32_t bs, uint32_t qd, double limit)
{
	char name[80], x[16] = "-";

	if (gbps <= 0) {
		printf("  one-ring O_DIRECT %-21s %8s\n", what, "skipped");
		return;
	}
	if (limit > 0) {
		snprintf(x, sizeof(x), "%.2f", gbps / limit);
	}
	snprintf(name, sizeof(name), "one-ring O_DIRECT %s (%u KiB x QD%u)", what, bs >> 10, qd);
	printf("  %-40s %8.2f %8s %10s\n", name, gbps, x, "-");
}

static const char *
engine_name(uint32_t e)
{
	const char *name = tutti_engine_name(e);

	return name != NULL ? name : "unknown";
}

static const char *
layout_name(uint32_t l)
{
	return l == KVBENCH_KV_FIRST ? "kv-first" : l == KVBENCH_PACKED ? "packed" : "cross-layer";
}

static void
print_table(const struct kvbench_conf *c, const struct kvbench_result *r)
{
	const struct tutti_geometry *g = &c->geo;
	double rlim = ceiling_read_limit(&r->ceiling, false);
	double wlim = ceiling_write_limit(&r->ceiling, false);

	printf("\nTutti store benchmark\n");
	printf("  model      %s: %u layers, %u KV heads, head dim %u, %u-byte elements\n", c->model,
	       g->nr_layers, g->nr_kv_heads, g->head_dim, g->elem_bytes);
	printf("  paging     %u-token blocks, %u-token chunks, %s layout\n", g->block_tokens,
	       g->chunk_tokens, layout_name(c->layout));
	printf("  workload   %u requests x %llu tokens sharing a %llu-token prefix: %llu unique "
	       "chunks, %.2f GiB stored\n",
	       c->requests, (unsigned long long)c->context_tokens,
	       (unsigned long long)c->shared_tokens, (unsigned long long)r->unique_chunks,
	       (double)r->store.bytes / (1 << 30));
	printf("  store      %s (%u dir%s), engine %s, %.1f MiB staging, %s commits, %s retrieve\n",
	       c->dirs[0], c->nr_dirs, c->nr_dirs > 1 ? "s" : "", engine_name(c->engine),
	       (double)r->staging_bytes / (1 << 20),
	       c->durability == TUTTI_DURABILITY_DURABLE ? "durable" : "fast",
	       c->layerwise ? "layer-by-layer" : "all-layer");
	printf("  figures    median of %u repeats; x limit = ratio to the ceiling: the best "
	       "O_DIRECT\n             bandwidth of a sweep of threads x I/O size x files x "
	       "depth in the\n             same directories (tutti ceiling); one-ring = one "
	       "io_uring at the "
	       "best size and depth,\n             right before each timed round (the disk's "
	       "drift)\n\n",
	       c->repeats);
	printf("  %-40s %8s %8s %10s\n", "", "GB/s", "x limit", "CPU s/GB");
	print_ceiling("write", &r->ceiling.write);
	print_raw("write", r->raw_write_gbps, r->raw_write_bs, r->raw_write_qd, wlim);
	print_row("tutti store", &r->store, wlim);
	print_row("page-granular store (baseline)", &r->page_store, wlim);
	print_ceiling("read", &r->ceiling.read);
	print_raw("read", r->raw_read_gbps, r->raw_read_bs, r->raw_read_qd, rlim);
	print_row("tutti retrieve", &r->retrieve, rlim);
	print_row("page-granular retrieve (baseline)", &r->page_retrieve, rlim);
	printf("\n  retrieve: %llu I/Os in %llu engine submissions for %llu load calls; the "
	       "baseline issues one I/O per block per layer\n",
	       (unsigned long long)r->retrieve_ios, (unsigned long long)r->retrieve_submits,
	       (unsigned long long)r->layer_calls);
	if (c->requests > 1 && c->shared_tokens >= g->chunk_tokens) {
		printf(
		    "  note: each request re-reads the shared prefix; a device or host cache may "
		    "serve "
		    "repeats faster\n        than the raw sequential sweep, which reads every byte "
		    "once per pass\n");
	}
	if (r->ceiling.read.best.gbps > 0) {
		printf("  ceiling: %.1f s in the store's directories%s\n", r->ceiling.seconds,
		       r->ceiling.read.cut || r->ceiling.write.cut ? ", cut by its time budget"
		                                                   : "");
	}
	printf("  verified: %s\n\n", r->verified ? "yes, every block of every layer, bit for bit"
	                                         : "NO: retrieved KV differs");
}

static void
print_rounds_json(const char *name, const double *v, uint32_t n)
{
	printf("\"%s_rounds_gbps\":[", name);
	for (uint32_t i = 0; i < n; i++) {
		printf("%s%.4f", i ? "," : "", v[i]);
	}
	printf("],");
}

static void
print_phase_json(const char *name, const struct kvbench_phase *p)
{
	printf("\"%s_gbps\":%.4f,\"%s_cpu_s_per_gb\":%.4f,\"%s_bytes\":%llu,", name, p->gbps, name,
	       p->cpu_s_per_gb, name, (unsigned long long)p->bytes);
	print_rounds_json(name, p->round_gbps, p->nr_rounds);
}

static void
print_json(const struct kvbench_conf *c, const struct kvbench_result *r)
{
	const struct tutti_geometry *g = &c->geo;
	double rlim = ceiling_read_limit(&r->ceiling, false);
	double wlim = ceiling_write_limit(&r->ceiling, false);

	printf("{\"model\":\"%s\",\"nr_layers\":%u,\"nr_kv_heads\":%u,\"head_dim\":%u,"
	       "\"elem_bytes\":%u,\"block_tokens\":%u,\"chunk_tokens\":%u,\"layout\":\"%s\","
	       "\"context_tokens\":%llu,\"requests\":%u,\"shared_tokens\":%llu,\"engine\":\"%s\","
	       "\"nr_dirs\":%u,\"layerwise\":%s,\"durability\":\"%s\",\"repeats\":%u,"
	       "\"staging_bytes\":%llu,",
	       c->model, g->nr_layers, g->nr_kv_heads, g->head_dim, g->elem_bytes, g->block_tokens,
	       g->chunk_tokens, layout_name(c->layout), (unsigned long long)c->context_tokens,
	       c->requests, (unsigned long long)c->shared_tokens, engine_name(c->engine),
	       c->nr_dirs, c->layerwise ? "true" : "false",
	       c->durability == TUTTI_DURABILITY_DURABLE ? "durable" : "fast", c->repeats,
	       (unsigned long long)r->staging_bytes);
	print_phase_json("store", &r->store);
	print_phase_json("retrieve", &r->retrieve);
	print_phase_json("page_store", &r->page_store);
	print_phase_json("page_retrieve", &r->page_retrieve);
	printf("\"read_limit_gbps\":%.4f,\"write_limit_gbps\":%.4f,\"store_ratio_to_limit\":%.4f,"
	       "\"retrieve_ratio_to_limit\":%.4f,\"page_store_ratio_to_limit\":%.4f,"
	       "\"page_retrieve_ratio_to_limit\":%.4f,\"ceiling\":",
	       rlim, wlim, ratio(r->store.gbps, wlim), ratio(r->retrieve.gbps, rlim),
	       ratio(r->page_store.gbps, wlim), ratio(r->page_retrieve.gbps, rlim));
	if (r->ceiling.read.best.gbps > 0 || r->ceiling.write.best.gbps > 0) {
		ceiling_json(stdout, &r->ceiling);
	} else {
		printf("null");
	}
	printf(",");
	print_rounds_json("raw_read", r->raw_read_rounds, r->raw_read_gbps > 0 ? c->repeats : 0);
	print_rounds_json("raw_write", r->raw_write_rounds, r->raw_write_gbps > 0 ? c->repeats : 0);
	printf("\"raw_read_gbps\":%.4f,\"raw_write_gbps\":%.4f,\"cpu_s_per_gb\":%.4f,"
	       "\"page_cpu_s_per_gb\":%.4f,\"retrieve_ios\":%llu,\"retrieve_submits\":%llu,"
	       "\"load_calls\":%llu,\"store_flushes\":%llu,\"save_chunks\":%u,"
	       "\"unique_chunks\":%llu,\"verified\":%s}\n",
	       r->raw_read_gbps, r->raw_write_gbps, r->retrieve.cpu_s_per_gb,
	       r->page_retrieve.cpu_s_per_gb, (unsigned long long)r->retrieve_ios,
	       (unsigned long long)r->retrieve_submits, (unsigned long long)r->layer_calls,
	       (unsigned long long)r->store_flushes, c->save_chunks,
	       (unsigned long long)r->unique_chunks, r->verified ? "true" : "false");
}

static int
cmd_bench(int argc, char **argv, bool demo)
{
	struct kvbench_conf conf;
	struct kvbench_result res;
	bool json = false, dir_given = false;
	int opt, rc;

	kvbench_conf_init(&conf);
	conf.progress = stderr;
	if (demo) {
		/* Small enough for any machine: 16K-token requests, 5.5 GiB of host KV. */
		conf.context_tokens = 16384;
		conf.requests = 4;
		conf.shared_tokens = 12288;
	}
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		rc = apply_option(opt, optarg, &conf, &json, &dir_given);
		if (rc == 1) {
			usage(stdout);
			return 0;
		}
		if (rc < 0) {
			fprintf(stderr, "tutti: bad option or value%s%s\n", optarg ? ": " : "",
			        optarg ? optarg : "");
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tutti: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	if (json) {
		conf.progress = NULL;
	}
	rc = kvbench_run(&conf, &res);
	if (rc < 0) {
		return 1;
	}
	if (json) {
		print_json(&conf, &res);
	} else {
		print_table(&conf, &res);
	}
	return res.verified ? 0 : 1;
}

int
main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		/* TUTTI_BUILD_DESC: set by the build (cmake/build_info.cmake). */
		printf("tutti %s (on-disk format %u; %s)\n", tutti_version(),
		       tutti_format_version(), TUTTI_BUILD_DESC);
		return 0;
	}
	if (strcmp(argv[1], "inspect") == 0) {
		return cmd_inspect(argc - 1, argv + 1);
	}
	if (strcmp(argv[1], "fsck") == 0) {
		return cmd_fsck(argc - 1, argv + 1);
	}
	if (strcmp(argv[1], "profile") == 0) {
		return cmd_profile(argc - 1, argv + 1);
	}
	if (strcmp(argv[1], "ceiling") == 0) {
		return cmd_ceiling(argc - 1, argv + 1);
	}
	if (strcmp(argv[1], "demo") == 0 || strcmp(argv[1], "bench") == 0) {
		return cmd_bench(argc - 1, argv + 1, strcmp(argv[1], "demo") == 0);
	}
	fprintf(stderr, "tutti: unknown command %s\n", argv[1]);
	usage(stderr);
	return 2;
}
