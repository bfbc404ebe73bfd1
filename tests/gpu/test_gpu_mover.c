/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the CUDA gather and scatter kernels against the CPU mover, byte for byte: every
 * KV layout (K/V-first, blocks-first/packed, cross-layer, uneven segments with gaps), several
 * block sizes and head counts, batches of 1 to 64 requests, objects in device memory and in
 * mapped host memory, 16-byte and byte-wise paths, calls split over several launches; outputs
 * are poisoned first so that unwritten bytes are caught, and scatter checks the whole KV image
 * so that stray writes are caught. Also the store end to end with KV in GPU memory through the
 * CPU-driven engines (their waves: the object mover's copies and kernels), with staging of one
 * wave and of many, and a damaged object failing its chunk alone. Exits 77 without a GPU.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpu/gpu.h"
#include "mover/mover.h"
#include "t_disk.h"
#include "t_gpu.h"
#include "t_kv.h"
#include "t_util.h"

struct geo_case {
	uint32_t heads, head_dim, elem, block, chunk, layers;
};

static const struct geo_case geos[] = {
    {2, 16, 2, 16, 64, 2},  /* 2 KiB layer blocks */
    {8, 128, 2, 16, 64, 2}, /* Llama-3-8B rows: 64 KiB layer blocks */
    {1, 64, 2, 32, 128, 3}, /* 32-token blocks, one head */
    {1, 5, 1, 1, 4, 2},     /* 10-byte layer blocks: the byte-wise path */
};

static void
make_geo(const struct geo_case *c, struct tutti_geometry *g)
{
	tutti_geometry_init(g);
	g->nr_layers = c->layers;
	g->nr_kv_heads = c->heads;
	g->head_dim = c->head_dim;
	g->elem_bytes = c->elem;
	g->block_tokens = c->block;
	g->chunk_tokens = c->chunk;
}

/* A batch of moves with random sizes and distinct random block ids over \p nr_blocks blocks
 * (a load never targets one block twice, and two writes to one block would race). */
struct batch {
	uint32_t nr;
	struct tt_move *moves;
	uint32_t *ids;
	uint64_t obj_bytes; /* one object's payload size, the largest move */
};

static void
make_batch(struct t_rng *r, uint32_t nr, uint32_t bpc, uint32_t nr_blocks, struct batch *b)
{
	b->nr = nr;
	b->moves = calloc(nr, sizeof(*b->moves));
	b->ids = calloc((size_t)nr * bpc, sizeof(*b->ids));
	assert_non_null(b->moves);
	assert_non_null(b->ids);
	t_random_distinct(r, b->ids, nr * bpc, nr_blocks);
	for (uint32_t m = 0; m < nr; m++) {
		b->moves[m].nr_blocks = 1 + t_rng_below(r, bpc);
		b->moves[m].block_ids = b->ids + (size_t)m * bpc;
	}
}

/* Point move m at object m of \p base (objects spaced by \p stride bytes). */
static void
place_objects(struct batch *b, uint8_t *base, uint64_t stride)
{
	for (uint32_t m = 0; m < b->nr; m++) {
		b->moves[m].obj = base + (uint64_t)m * stride;
	}
}

static struct tt_gpu *
open_gpu(uint32_t max_blocks)
{
	struct tt_gpu_conf conf = {.device = 0, .max_blocks = max_blocks};
	struct tt_gpu *g = NULL;

	assert_int_equal(tt_gpu_open(&conf, &g), 0);
	return g;
}

/* Gather and scatter one random batch for one layer and compare with the CPU mover. */
static void
check_case(struct t_rng *r, const struct geo_case *gc, enum t_layout layout, uint32_t nr_moves,
           bool mapped, uint32_t max_blocks)
{
	struct tutti_geometry geo;
	struct t_kv *host, *ref;
	struct d_kv dev;
	struct batch b;
	struct tt_gpu *g = open_gpu(max_blocks);
	uint32_t bpc, nr_blocks = 320, layer;
	uint64_t lbb, stride, bytes, launches;
	uint8_t *objs, *cpu_objs, *back;

	make_geo(gc, &geo);
	bpc = geo.chunk_tokens / geo.block_tokens;
	lbb = tutti_geometry_layer_block_bytes(&geo);
	stride = tt_round_up((uint64_t)bpc * lbb, 16);
	bytes = stride * nr_moves;
	assert_int_equal(t_kv_alloc(&geo, layout, nr_blocks, &host), 0);
	assert_int_equal(t_kv_alloc(&geo, layout, nr_blocks, &ref), 0);
	t_kv_fill_random(host, r);
	assert_int_equal(d_kv_alloc(host, &dev), 0);
	assert_int_equal(tt_gpu_copy(dev.mem, host->mem, host->mem_bytes), 0);
	make_batch(r, nr_moves, bpc, nr_blocks, &b);
	layer = t_rng_below(r, geo.nr_layers);

	/* gather */
	if (mapped) {
		assert_int_equal(tt_gpu_host_alloc(bytes, (void **)&objs), 0);
		memset(objs, 0xa5, bytes);
	} else {
		assert_int_equal(tt_gpu_dev_alloc(bytes, (void **)&objs), 0);
		assert_int_equal(tt_gpu_fill(objs, 0xa5, bytes), 0);
	}
	cpu_objs = malloc(bytes);
	back = malloc(bytes > host->mem_bytes ? bytes : host->mem_bytes);
	assert_non_null(cpu_objs);
	assert_non_null(back);
	memset(cpu_objs, 0xa5, bytes);
	place_objects(&b, objs, stride);
	launches = tt_gpu_launches(g);
	assert_int_equal(tt_mover_cuda.gather(g, dev.kv, layer, b.moves, b.nr), 0);
	assert_int_equal(tt_mover_cuda.sync(g), 0);
	if (max_blocks >= (uint32_t)nr_moves * bpc) {
		assert_int_equal(tt_gpu_launches(g) - launches, 1); /* one launch per layer */
	}
	place_objects(&b, cpu_objs, stride);
	assert_int_equal(tt_mover_cpu.gather(NULL, host->kv, layer, b.moves, b.nr), 0);
	assert_int_equal(tt_gpu_copy(back, objs, bytes), 0);
	assert_memory_equal(back, cpu_objs, bytes);

	/* scatter the same objects, randomised, into poisoned KV on both sides */
	t_rng_fill(r, cpu_objs, bytes);
	assert_int_equal(tt_gpu_copy(objs, cpu_objs, bytes), 0);
	t_kv_poison(ref, 0x5c);
	assert_int_equal(tt_gpu_fill(dev.mem, 0x5c, host->mem_bytes), 0);
	place_objects(&b, objs, stride);
	assert_int_equal(tt_mover_cuda.scatter(g, dev.kv, layer, b.moves, b.nr), 0);
	assert_int_equal(tt_mover_cuda.sync(g), 0);
	place_objects(&b, cpu_objs, stride);
	assert_int_equal(tt_mover_cpu.scatter(NULL, ref->kv, layer, b.moves, b.nr), 0);
	assert_int_equal(tt_gpu_copy(back, dev.mem, host->mem_bytes), 0);
	/* The whole image: blocks not listed, gaps and other layers must keep the poison. */
	assert_memory_equal(back, ref->mem, host->mem_bytes);

	if (mapped) {
		tt_gpu_host_free(objs);
	} else {
		tt_gpu_dev_free(objs);
	}
	free(cpu_objs);
	free(back);
	free(b.moves);
	free(b.ids);
	d_kv_free(&dev);
	t_kv_free(host);
	t_kv_free(ref);
	tt_gpu_close(g);
}

static void
test_gather_and_scatter_match_the_cpu_mover(void **state)
{
	static const uint32_t batches[] = {1, 2, 7, 64};
	struct t_rng r;

	t_rng_init(&r, t_seed(4242));
	for (size_t gi = 0; gi < sizeof(geos) / sizeof(geos[0]); gi++) {
		for (int layout = 0; layout < T_NR_LAYOUTS; layout++) {
			for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
				for (int mapped = 0; mapped < 2; mapped++) {
					check_case(&r, &geos[gi], (enum t_layout)layout,
					           batches[bi], mapped, 1u << 16);
				}
			}
		}
	}
}

static void
test_calls_larger_than_the_descriptors_are_split(void **state)
{
	struct t_rng r;

	t_rng_init(&r, t_seed(77));
	/* 64 moves of up to 4 blocks through 16 descriptors: several launches, same bytes. */
	check_case(&r, &geos[0], T_LAYOUT_KV_FIRST, 64, false, 16);
	check_case(&r, &geos[1], T_LAYOUT_CROSS_LAYER, 64, true, 16);
}

static void
test_kv_create_checks_device_memory(void **state)
{
	struct tutti_geometry geo;
	struct t_kv *host;
	struct d_kv dev;
	struct tutti_kv *kv = NULL;

	make_geo(&geos[0], &geo);
	assert_int_equal(t_kv_alloc(&geo, T_LAYOUT_BLOCKS_FIRST, 8, &host), 0);
	assert_int_equal(d_kv_alloc(host, &dev), 0);
	assert_int_equal(dev.kv->device, 0);
	/* Host memory is not device memory. */
	assert_int_equal(
	    tutti_kv_create(&geo, host->segs, host->segs_per_layer, 8, TUTTI_MEM_CUDA, &kv),
	    -EINVAL);
	assert_null(kv);
	d_kv_free(&dev);
	t_kv_free(host);
}

/* The store, end to end, with KV in GPU memory, for one engine, geometry and staging size (0:
 * the default); chunk 2's layer 1 damaged before a second load when \p damage. */
static void
store_round_trip(struct t_rng *r, uint32_t engine, const struct geo_case *gc, uint64_t staging,
                 bool damage)
{
	char *dir = t_tmpdir_create();
	const char *dirs[1] = {dir};
	struct tutti_geometry geo;
	struct tutti_store_opts o;
	struct tutti_store *st;
	struct t_kv *src, *dst;
	struct d_kv dsrc, ddst;
	uint32_t ids_src[64], ids_dst[64], bpc;
	uint8_t keys[8 * 32];
	struct tutti_request req = {.size = sizeof(req)};
	int32_t status[8];
	uint8_t *back;

	make_geo(gc, &geo);
	bpc = geo.chunk_tokens / geo.block_tokens;
	assert_true(8 * bpc <= 64);
	assert_int_equal(t_kv_alloc(&geo, T_LAYOUT_KV_FIRST, 64, &src), 0);
	assert_int_equal(t_kv_alloc(&geo, T_LAYOUT_KV_FIRST, 64, &dst), 0);
	t_kv_fill_random(src, r);
	assert_int_equal(d_kv_alloc(src, &dsrc), 0);
	assert_int_equal(d_kv_alloc(dst, &ddst), 0);
	assert_int_equal(tt_gpu_copy(dsrc.mem, src->mem, src->mem_bytes), 0);
	assert_int_equal(tt_gpu_fill(ddst.mem, 0xa5, dst->mem_bytes), 0);
	t_random_distinct(r, ids_src, 8 * bpc, 64);
	t_random_distinct(r, ids_dst, 8 * bpc, 64);
	t_rng_fill(r, keys, sizeof(keys));

	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_CREATE;
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.engine = engine;
	o.capacity_bytes = 16 * tutti_geometry_slot_bytes(&geo);
	if (staging != 0) {
		o.staging_bytes = staging;
		o.max_io_bytes = tutti_geometry_object_bytes(&geo);
	}
	assert_int_equal(tutti_store_open(&geo, &o, &st), 0);
	req.nr_keys = 8;
	req.keys = keys;
	req.nr_blocks = 8 * bpc;
	req.block_ids = ids_src;
	assert_int_equal(tutti_store_save(st, dsrc.kv, &req, 1, status), 8);
	req.block_ids = ids_dst;
	assert_int_equal(tutti_store_load(st, ddst.kv, &req, 1, 0, geo.nr_layers, status), 8);
	if (damage) {
		char *path = t_data_path(dir);
		uint32_t slot = t_key_slot(path, &geo, keys + 2 * 32, 32);

		assert_int_equal(t_disk_flip_bit(path, t_object_off(&geo, slot, 1) + 5, 1), 0);
		assert_int_equal(tt_gpu_fill(ddst.mem, 0xa5, dst->mem_bytes), 0);
		assert_int_equal(tutti_store_load(st, ddst.kv, &req, 1, 0, geo.nr_layers, status),
		                 7);
		assert_int_equal(status[2], -EBADMSG);
		free(path);
	}
	tutti_store_close(st);

	back = malloc(dst->mem_bytes);
	assert_non_null(back);
	assert_int_equal(tt_gpu_copy(back, ddst.mem, dst->mem_bytes), 0);
	memcpy(dst->mem, back, dst->mem_bytes);
	for (uint32_t i = 0; i < 8 * bpc; i++) {
		if (damage && i / bpc == 2) {
			continue; /* a failed chunk's blocks are unspecified */
		}
		for (uint32_t l = 0; l < geo.nr_layers; l++) {
			assert_true(t_kv_block_equal(dst, ids_dst[i], src, ids_src[i], l));
		}
	}
	free(back);
	d_kv_free(&dsrc);
	d_kv_free(&ddst);
	t_kv_free(src);
	t_kv_free(dst);
	t_tmpdir_remove(dir);
}

static void
test_store_round_trip_with_gpu_kv(void **state)
{
	static const uint32_t engines[] = {TUTTI_ENGINE_URING, TUTTI_ENGINE_POSIX};
	struct t_rng r;

	t_rng_init(&r, t_seed(99));
	for (size_t e = 0; e < 2; e++) {
		for (int g = 0; g < 2; g++) {
			struct tutti_geometry geo;

			make_geo(&geos[g], &geo);
			/* The default staging (one wave), then two objects of it (a wave each). */
			store_round_trip(&r, engines[e], &geos[g], 0, false);
			store_round_trip(&r, engines[e], &geos[g],
			                 2 * tutti_geometry_object_bytes(&geo), true);
		}
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gather_and_scatter_match_the_cpu_mover),
	    cmocka_unit_test(test_calls_larger_than_the_descriptors_are_split),
	    cmocka_unit_test(test_kv_create_checks_device_memory),
	    cmocka_unit_test(test_store_round_trip_with_gpu_kv),
	};

	if (tt_gpu_device_count() <= 0) {
		return 77; /* no GPU here, or built without CUDA */
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
