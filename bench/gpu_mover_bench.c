/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti-gpu-bench: bandwidth of the CUDA gather and scatter kernels, each against the ceiling
 * measured in the same run: cudaMemcpy device-to-device of the same bytes for device objects,
 * pinned cudaMemcpy host-to-device (device-to-host) for objects in mapped host memory. One call
 * moves one layer of a whole batch; launches per call are counted.
 *
 * Workload: Llama-3-8B geometry (64 KiB layer blocks, 16 blocks per chunk), 8192 paged blocks
 * per call (512 MiB), as 1, 8 or 64 requests, in three KV layouts over one 16 GiB arena. Each
 * figure is the median of --repeats timed calls after a warm-up; a call is timed from the host
 * until its completion (tt_gpu_sync), descriptors included.
 *
 * Usage: tutti-gpu-bench [--repeats N] [--blocks N] [--json]
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cliarg.h"
#include "gpu/gpu.h"
#include "mover/mover.h"

#define MAX_REPEATS 64

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double
median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void
die(const char *what, int rc)
{
	fprintf(stderr, "tutti-gpu-bench: %s: %s\n", what, strerror(rc < 0 ? -rc : rc));
	exit(1);
}

struct bench {
	struct tutti_geometry geo;
	uint64_t lbb;
	uint32_t bpc, nr_blocks, repeats;
	uint8_t *arena;  /* nr_blocks x nr_layers layer blocks on the device */
	uint8_t *d_objs; /* nr_blocks layer blocks on the device */
	uint8_t *h_objs; /* nr_blocks layer blocks in pinned, mapped host memory */
	uint8_t *d_copy; /* ceiling: the other side of a plain copy */
	uint32_t *ids;   /* a shuffled block table */
	struct tt_gpu *g;
	bool json;
};

enum layout { KV_FIRST, PACKED, CROSS_LAYER, NR_LAYOUTS };
static const char *const layout_names[] = {"kv-first", "packed", "cross-layer"};

static struct tutti_kv *
make_kv(struct bench *b, enum layout layout)
{
	uint32_t L = b->geo.nr_layers, spl = layout == KV_FIRST ? 2 : 1;
	struct tutti_segment *segs = calloc((size_t)L * spl, sizeof(*segs));
	uint64_t base = (uint64_t)(uintptr_t)b->arena, n = b->nr_blocks, page = b->lbb;
	struct tutti_kv *kv = NULL;
	int rc;

	if (segs == NULL) {
		die("calloc", -ENOMEM);
	}
	for (uint32_t l = 0; l < L; l++) {
		struct tutti_segment *s = &segs[(size_t)l * spl];

		if (layout == KV_FIRST) {
			s[0] = (struct tutti_segment){base + l * n * page, page / 2, page / 2};
			s[1] = (struct tutti_segment){base + l * n * page + n * page / 2, page / 2,
			                              page / 2};
		} else if (layout == PACKED) {
			s[0] = (struct tutti_segment){base + l * n * page, page, page};
		} else {
			s[0] = (struct tutti_segment){base + l * page, (uint64_t)L * page, page};
		}
	}
	rc = tutti_kv_create(&b->geo, segs, spl, b->nr_blocks, TUTTI_MEM_CUDA, &kv);
	free(segs);
	if (rc < 0) {
		die("tutti_kv_create", rc);
	}
	return kv;
}

/* Median GB/s of a plain copy of \p bytes. */
static double
copy_gbps(struct bench *b, void *dst, const void *src, uint64_t bytes)
{
	double v[MAX_REPEATS];

	tt_gpu_copy(dst, src, bytes); /* warm-up */
	for (uint32_t i = 0; i < b->repeats; i++) {
		uint64_t t0 = now_ns();
		int rc = tt_gpu_copy(dst, src, bytes);

		if (rc < 0) {
			die("copy", rc);
		}
		v[i] = (double)bytes / (double)(now_ns() - t0);
	}
	return median(v, (int)b->repeats);
}

/* Median GB/s of gather or scatter of one layer for \p nr_req requests sharing nr_blocks. */
static double
move_gbps(struct bench *b, const struct tutti_kv *kv, bool gather, uint8_t *objs, uint32_t nr_req,
          uint64_t *launches)
{
	struct tt_move *moves = calloc(nr_req, sizeof(*moves));
	uint32_t per = b->nr_blocks / nr_req;
	double v[MAX_REPEATS];

	if (moves == NULL) {
		die("calloc", -ENOMEM);
	}
	for (uint32_t m = 0; m < nr_req; m++) {
		moves[m] = (struct tt_move){
		    .obj = objs + (uint64_t)m * per * b->lbb,
		    .block_ids = b->ids + (uint64_t)m * per,
		    .nr_blocks = per,
		};
	}
	for (uint32_t i = 0; i <= b->repeats; i++) {
		uint64_t t0 = now_ns(), l0 = tt_gpu_launches(b->g);
		uint32_t layer = i % b->geo.nr_layers;
		int rc = gather ? tt_mover_cuda.gather(b->g, kv, layer, moves, nr_req)
		                : tt_mover_cuda.scatter(b->g, kv, layer, moves, nr_req);

		if (rc == 0) {
			rc = tt_mover_cuda.sync(b->g);
		}
		if (rc < 0) {
			die(gather ? "gather" : "scatter", rc);
		}
		*launches = tt_gpu_launches(b->g) - l0;
		if (i > 0) { /* the first call is the warm-up */
			v[i - 1] = (double)per * nr_req * b->lbb / (double)(now_ns() - t0);
		}
	}
	free(moves);
	return median(v, (int)b->repeats);
}

static void
report(const struct bench *b, const char *layout, const char *op, const char *objs, uint32_t nr_req,
       double gbps, const char *ceiling, double limit, uint64_t launches)
{
	if (b->json) {
		printf("{\"layout\":\"%s\",\"op\":\"%s\",\"objects\":\"%s\",\"requests\":%u,"
		       "\"bytes\":%llu,\"gbps\":%.2f,\"ceiling\":\"%s\",\"ceiling_gbps\":%.2f,"
		       "\"ratio\":%.3f,\"launches\":%llu}\n",
		       layout, op, objs, nr_req, (unsigned long long)b->nr_blocks * b->lbb, gbps,
		       ceiling, limit, gbps / limit, (unsigned long long)launches);
	} else {
		printf(
		    "%-12s %-8s %-7s %3u req %8.1f GB/s  %5.2f x %-22s (%7.1f GB/s)  %llu launch\n",
		    layout, op, objs, nr_req, gbps, gbps / limit, ceiling, limit,
		    (unsigned long long)launches);
	}
	fflush(stdout);
}

int
main(int argc, char **argv)
{
	static const uint32_t batches[] = {1, 8, 64};
	struct tt_gpu_conf conf = {.device = 0, .max_blocks = 1u << 18};
	struct bench b = {.repeats = 10, .nr_blocks = 8192};
	double d2d, h2d, d2h;
	uint64_t bytes;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			b.json = true;
		} else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
			if (cliarg_u32("tutti-gpu-bench", "--repeats", argv[++i], 1, MAX_REPEATS,
			               &b.repeats) < 0) {
				return 2;
			}
		} else if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
			if (cliarg_u32("tutti-gpu-bench", "--blocks", argv[++i], 64, 1u << 24,
			               &b.nr_blocks) < 0) {
				return 2;
			}
		} else {
			fprintf(stderr,
			        "usage: tutti-gpu-bench [--repeats N] [--blocks N] [--json]\n");
			return 2;
		}
	}
	if (b.repeats == 0 || b.repeats > MAX_REPEATS || b.nr_blocks < 64 ||
	    b.nr_blocks % 64 != 0) {
		fprintf(stderr, "tutti-gpu-bench: repeats 1..%d, blocks a multiple of 64\n",
		        MAX_REPEATS);
		return 2;
	}
	rc = tt_gpu_device_count();
	if (rc <= 0) {
		fprintf(stderr, "tutti-gpu-bench: no GPU (%s)\n", rc < 0 ? strerror(-rc) : "0");
		return 1;
	}
	tutti_geometry_preset("llama-3-8b", &b.geo);
	b.lbb = tutti_geometry_layer_block_bytes(&b.geo);
	b.bpc = tutti_geometry_blocks_per_chunk(&b.geo);
	bytes = (uint64_t)b.nr_blocks * b.lbb;
	if ((rc = tt_gpu_set_device(0)) < 0 ||
	    (rc = tt_gpu_dev_alloc(bytes * b.geo.nr_layers, (void **)&b.arena)) < 0 ||
	    (rc = tt_gpu_dev_alloc(bytes, (void **)&b.d_objs)) < 0 ||
	    (rc = tt_gpu_dev_alloc(bytes, (void **)&b.d_copy)) < 0 ||
	    (rc = tt_gpu_host_alloc(bytes, (void **)&b.h_objs)) < 0 ||
	    (rc = tt_gpu_open(&conf, &b.g)) < 0) {
		die("set-up", rc);
	}
	b.ids = malloc(b.nr_blocks * sizeof(*b.ids));
	if (b.ids == NULL) {
		die("malloc", -ENOMEM);
	}
	/* A shuffled block table, as a paged allocator hands out blocks. */
	srand(42);
	for (uint32_t i = 0; i < b.nr_blocks; i++) {
		b.ids[i] = i;
	}
	for (uint32_t i = b.nr_blocks - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rand() % (i + 1), t = b.ids[i];

		b.ids[i] = b.ids[j];
		b.ids[j] = t;
	}
	tt_gpu_fill(b.arena, 1, bytes * b.geo.nr_layers);
	memset(b.h_objs, 2, bytes);

	d2d = copy_gbps(&b, b.d_copy, b.d_objs, bytes);
	h2d = copy_gbps(&b, b.d_objs, b.h_objs, bytes);
	d2h = copy_gbps(&b, b.h_objs, b.d_objs, bytes);
	if (!b.json) {
		printf("ceilings over %.0f MiB: cudaMemcpy D2D %.1f GB/s, H2D pinned %.1f GB/s, "
		       "D2H pinned %.1f GB/s\n",
		       (double)bytes / (1 << 20), d2d, h2d, d2h);
	}
	for (int layout = 0; layout < NR_LAYOUTS; layout++) {
		struct tutti_kv *kv = make_kv(&b, (enum layout)layout);

		for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
			uint32_t n = batches[bi];
			uint64_t launches = 0;
			double gbps;

			gbps = move_gbps(&b, kv, true, b.d_objs, n, &launches);
			report(&b, layout_names[layout], "gather", "device", n, gbps,
			       "cudaMemcpy D2D", d2d, launches);
			gbps = move_gbps(&b, kv, false, b.d_objs, n, &launches);
			report(&b, layout_names[layout], "scatter", "device", n, gbps,
			       "cudaMemcpy D2D", d2d, launches);
			gbps = move_gbps(&b, kv, false, b.h_objs, n, &launches);
			report(&b, layout_names[layout], "scatter", "mapped", n, gbps,
			       "pinned cudaMemcpy H2D", h2d, launches);
			gbps = move_gbps(&b, kv, true, b.h_objs, n, &launches);
			report(&b, layout_names[layout], "gather", "mapped", n, gbps,
			       "pinned cudaMemcpy D2H", d2h, launches);
		}
		tutti_kv_destroy(kv);
	}
	tt_gpu_close(b.g);
	tt_gpu_host_free(b.h_objs);
	tt_gpu_dev_free(b.d_copy);
	tt_gpu_dev_free(b.d_objs);
	tt_gpu_dev_free(b.arena);
	free(b.ids);
	return 0;
}
