/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store benchmark behind `tutti demo` and `tutti bench`: a shared-prefix workload stored from
 * host paged KV and retrieved into another, shuffled block table, verified bit for bit, next to
 * the raw bandwidth of the same directory and a page-granular CPU-driven baseline.
 */
#ifndef TUTTI_TOOLS_KVBENCH_H
#define TUTTI_TOOLS_KVBENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

#include "ceiling.h"
#include "rawbw.h"
#include "tutti/tutti.h"

#define KVBENCH_MAX_DIRS 16
#define KVBENCH_MAX_REPEATS 64

enum kvbench_layout {
	KVBENCH_KV_FIRST = 0,   /* per layer: all K blocks, then all V blocks (two segments) */
	KVBENCH_PACKED = 1,     /* per layer: blocks of K|V together (one segment) */
	KVBENCH_CROSS_LAYER = 2 /* one block holds every layer (one segment, large stride) */
};

struct kvbench_conf {
	struct tutti_geometry geo;
	const char *model; /* preset name, for the report */
	const char *dirs[KVBENCH_MAX_DIRS];
	uint32_t nr_dirs;
	uint32_t engine;         /* enum tutti_engine */
	const char *engine_opts; /* its options (tutti_store_opts.engine_opts), or NULL */
	uint32_t layout;         /* enum kvbench_layout */
	uint32_t durability;     /* enum tutti_durability */
	uint32_t save_chunks;    /* chunks per save call; 0: a whole request per call */
	uint64_t context_tokens; /* tokens per request */
	uint32_t requests;
	uint64_t shared_tokens; /* prefix shared by every request */
	uint32_t repeats;       /* timed repetitions of each phase; the median is reported */
	uint64_t staging_bytes;
	uint64_t max_io_bytes;
	uint32_t queue_depth;
	uint32_t page_threads; /* threads of the page-granular baseline */
	bool layerwise;        /* retrieve one layer per call */
	bool skip_raw;
	bool skip_page;
	double ceiling_s; /* the ceiling sweep's time budget; 0: no ceiling */
	uint64_t seed;
	FILE *progress; /* progress lines, or NULL */
};

struct kvbench_phase {
	double gbps;         /* median over repeats */
	double cpu_s_per_gb; /* median over repeats */
	uint64_t bytes;      /* moved per repeat */
	uint32_t nr_rounds;
	double round_gbps[KVBENCH_MAX_REPEATS]; /* every repeat, in order */
};

struct kvbench_result {
	struct kvbench_phase store, retrieve, page_store, page_retrieve;
	/* The limit every row's ratio is taken to (tools/common/ceiling.h), in the store's
	 * directories at set-up; read.best.gbps 0 when not measured. */
	struct ceiling_result ceiling;
	/* One io_uring reader (writer) at the best size and depth of a short sweep, right before
	 * each timed round: the drift of a shared disk between rounds, never a ratio's
	 * denominator. Medians. */
	double raw_read_gbps, raw_write_gbps;
	double raw_read_rounds[KVBENCH_MAX_REPEATS], raw_write_rounds[KVBENCH_MAX_REPEATS];
	uint32_t raw_read_bs, raw_read_qd, raw_write_bs, raw_write_qd;
	bool verified;
	uint64_t unique_chunks;
	uint64_t retrieve_ios;     /* engine I/Os of one retrieve repeat */
	uint64_t retrieve_submits; /* engine submissions of one retrieve repeat */
	uint64_t layer_calls;      /* load calls of one retrieve repeat */
	uint64_t store_flushes;    /* device flushes of one store repeat (durable mode) */
	uint64_t staging_bytes;
	uint64_t kv_bytes; /* host paged KV allocated (source + destination) */
};

void kvbench_conf_init(struct kvbench_conf *conf);

/* Run the benchmark. Returns 0, or a negative errno after printing the reason to stderr. */
int kvbench_run(const struct kvbench_conf *conf, struct kvbench_result *res);

/* ---- the page-granular baseline, in pagebase.c ---- */

struct page_io {
	uint64_t off;
	uint32_t nr_iov;
	uint32_t first_iov; /* index into the iovec array */
};

/* One pwritev/preadv per page from \p threads threads, the way CPU-driven tiers move KV.
 * Returns the elapsed nanoseconds, or a negative errno. */
int64_t pagebase_run(int fd, const struct page_io *pages, uint64_t nr_pages,
                     const struct iovec *iovs, bool write, uint32_t threads);

#endif /* TUTTI_TOOLS_KVBENCH_H */
