/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the gpu-uring engine with KV in GPU memory, where a CUDA kernel submits and
 * reaps every object I/O itself: the GPU checksum equals the CPU's for many lengths; saves and
 * loads are bit-exact for every layout, several geometries, batches with shared prefixes,
 * partial chunks, skipped leading blocks and layer ranges, into poisoned KV; a damaged object is
 * caught on the GPU (-EBADMSG) and never scattered; host system calls per layer do not grow
 * with the number of objects; the same with loads by the copy engine, also on tmpfs with fewer
 * reads in flight than bounce slots. Engine auto picks gpu-uring for GPU KV (the same tests pass
 * through it) and uring for host KV. Exits 77 without a GPU or a usable ring.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include <cmocka.h>

#include "format/format.h"
#include "gpu/gpu.h"
#include "t_disk.h"
#include "t_gpu.h"
#include "t_kv.h"
#include "t_util.h"

#define KEY_BYTES 32

static void
test_gpu_checksum_equals_the_cpu_checksum(void **state)
{
	static const uint64_t lens[] = {241,     255,           256,     1000,
	                                1024,    1025,          4096,    65536 + 8,
	                                1 << 20, (1 << 20) + 8, 3 << 20, (3 << 20) + 104};
	/* 16-byte aligned starts take the hash's vector loads, the others a stripe at a time. */
	static const uint64_t starts[] = {0, 8, 3};
	struct tt_gpu_conf conf = {.device = 0, .max_blocks = 1024};
	struct tt_gpu *g;
	struct t_rng r;
	uint64_t max = (3 << 20) + 104 + 16;
	uint8_t *host = malloc(max), *dev;

	assert_non_null(host);
	t_rng_init(&r, t_seed(5));
	t_rng_fill(&r, host, max);
	assert_int_equal(tt_gpu_open(&conf, &g), 0);
	assert_int_equal(tt_gpu_dev_alloc(max, (void **)&dev), 0);
	assert_int_equal(tt_gpu_copy(dev, host, max), 0);
	for (size_t a = 0; a < sizeof(starts) / sizeof(starts[0]); a++) {
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			uint64_t got = 0, want = tt_csum(host + starts[a], lens[i]);

			assert_int_equal(tt_gpu_csum(g, dev + starts[a], lens[i], &got), 0);
			if (got != want) {
				fail_msg("start %llu, length %llu: GPU %016llx, CPU %016llx",
				         (unsigned long long)starts[a], (unsigned long long)lens[i],
				         (unsigned long long)got, (unsigned long long)want);
			}
		}
	}
	assert_int_equal(tt_gpu_csum(g, dev, TT_XXH3_MIDSIZE_MAX, &(uint64_t){0}), -EINVAL);
	tt_gpu_dev_free(dev);
	tt_gpu_close(g);
	free(host);
}

/* ---- store round trips ---- */

/* Lines the store logged at WARN or more urgent. */
static int g_warnings;

/* Errors the store logs go to the test's output: a failure says why. */
static void
log_to_output(void *arg, int level, const char *msg)
{
	(void)arg;
	g_warnings += level <= TUTTI_LOG_WARN;
	print_message("tutti[%d]: %s\n", level, msg);
}

/* The engine under test: gpu-uring, then auto (gpu-uring for GPU KV), then gds (where libcufile
 * is installed). */
static uint32_t g_engine = TUTTI_ENGINE_GPU_URING;
/* The I/O kernel's workers and the SMs they are packed into (0: the store's defaults). */
static uint32_t g_io_workers, g_io_sms;
/* How loads cross PCIe (gpu-uring's option copy): auto (SM), then the copy engine. */
static const char *g_gpu_io_copy = "auto";

struct world {
	char *dir;
	struct tutti_geometry geo;
	uint32_t bpc, nr_blocks;
	struct t_kv *src, *dst;
	struct d_kv dsrc, ddst;
	struct tutti_store *st;
	struct t_rng r;
};

static void
world_open(struct world *w, const struct tutti_geometry *geo, enum t_layout layout,
           uint32_t nr_blocks, uint32_t slots)
{
	const char *dirs[1];
	struct tutti_store_opts o;
	char opts[96];

	memset(w, 0, sizeof(*w));
	t_rng_init(&w->r, t_seed(1234));
	w->dir = t_tmpdir_create();
	dirs[0] = w->dir;
	w->geo = *geo;
	w->bpc = geo->chunk_tokens / geo->block_tokens;
	w->nr_blocks = nr_blocks;
	assert_int_equal(t_kv_alloc(geo, layout, nr_blocks, &w->src), 0);
	assert_int_equal(t_kv_alloc(geo, layout, nr_blocks, &w->dst), 0);
	t_kv_fill_random(w->src, &w->r);
	assert_int_equal(d_kv_alloc(w->src, &w->dsrc), 0);
	assert_int_equal(d_kv_alloc(w->dst, &w->ddst), 0);
	assert_int_equal(d_kv_upload(&w->dsrc), 0);
	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_CREATE;
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.engine = g_engine;
	o.capacity_bytes = 64 * tutti_geometry_slot_bytes(geo);
	o.staging_bytes = slots * tutti_geometry_object_bytes(geo);
	o.key_bytes = KEY_BYTES;
	o.log_fn = log_to_output;
	/* gpu-uring's options, which auto takes too (gds takes none). */
	if (g_engine == TUTTI_ENGINE_GPU_URING || g_engine == TUTTI_ENGINE_AUTO) {
		int n = snprintf(opts, sizeof(opts), "copy=%s", g_gpu_io_copy);

		if (g_io_workers != 0) {
			snprintf(opts + n, sizeof(opts) - (size_t)n, ",workers=%u,sms=%u",
			         g_io_workers, g_io_sms);
		}
		o.engine_opts = opts;
	}
	assert_int_equal(tutti_store_open(geo, &o, &w->st), 0);
}

static void
world_close(struct world *w)
{
	tutti_store_close(w->st);
	d_kv_free(&w->dsrc);
	d_kv_free(&w->ddst);
	t_kv_free(w->src);
	t_kv_free(w->dst);
	t_tmpdir_remove(w->dir);
}

struct chain {
	uint8_t keys[8 * KEY_BYTES];
	uint32_t nr_keys;
	uint32_t src_ids[8 * 64], dst_ids[8 * 64];
	uint32_t nr_blocks;
};

static void
make_chain(struct world *w, struct chain *c, const struct chain *prefix, uint32_t shared,
           uint32_t nr_keys, uint32_t nr_blocks, uint32_t *used_src, uint32_t *used_dst)
{
	memset(c, 0, sizeof(*c));
	c->nr_keys = nr_keys;
	c->nr_blocks = nr_blocks;
	t_rng_fill(&w->r, c->keys, sizeof(c->keys));
	for (uint32_t i = 0; i < nr_blocks; i++) {
		c->src_ids[i] = used_src[i];
		c->dst_ids[i] = used_dst[i];
	}
	if (prefix != NULL) {
		/* The first chunks are the prefix's: same keys, same source blocks. */
		memcpy(c->keys, prefix->keys, shared * KEY_BYTES);
		memcpy(c->src_ids, prefix->src_ids, shared * w->bpc * sizeof(uint32_t));
	}
}

static struct tutti_request
req_of(const struct chain *c, const uint32_t *ids, uint32_t first, uint32_t skip,
       uint32_t nr_blocks)
{
	return (struct tutti_request){
	    .size = sizeof(struct tutti_request),
	    .nr_keys = c->nr_keys,
	    .keys = c->keys,
	    .first_chunk = first,
	    .skip_blocks = skip,
	    .nr_blocks = nr_blocks,
	    .block_ids = ids,
	};
}

/* Blocks [from, to) of the chain must sit in dst as in src, for layers [lb, le). */
static void
assert_loaded(struct world *w, const struct chain *c, uint32_t from, uint32_t to, uint32_t lb,
              uint32_t le)
{
	assert_int_equal(d_kv_download(&w->ddst), 0);
	for (uint32_t i = from; i < to; i++) {
		for (uint32_t l = lb; l < le; l++) {
			if (!t_kv_block_equal(w->dst, c->dst_ids[i], w->src, c->src_ids[i], l)) {
				fail_msg("block %u layer %u differs", i, l);
			}
		}
	}
}

/* A geometry of \p layers layers, \p kv_heads KV heads of \p head_dim, 16-token blocks and
 * \p chunk_tokens-token chunks (2-byte elements). */
static void
geo_init(struct tutti_geometry *geo, uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
         uint32_t chunk_tokens)
{
	tutti_geometry_init(geo);
	geo->nr_layers = layers;
	geo->nr_kv_heads = kv_heads;
	geo->head_dim = head_dim;
	geo->block_tokens = 16;
	geo->chunk_tokens = chunk_tokens;
}

/* A store holding one chain of \p nr_chunks whole chunks saved from random distinct blocks of
 * src (their ids, and the destination blocks', in src_ids and dst_ids). */
static void
world_with_chain(struct world *w, struct chain *a, const struct tutti_geometry *geo,
                 enum t_layout layout, uint32_t nr_blocks, uint32_t slots, uint32_t nr_chunks,
                 uint32_t *src_ids, uint32_t *dst_ids)
{
	struct tutti_request req;
	int32_t status[8];

	assert_true(nr_chunks <= 8);
	world_open(w, geo, layout, nr_blocks, slots);
	t_random_distinct(&w->r, src_ids, nr_blocks, nr_blocks);
	t_random_distinct(&w->r, dst_ids, nr_blocks, nr_blocks);
	make_chain(w, a, NULL, 0, nr_chunks, nr_chunks * w->bpc, src_ids, dst_ids);
	req = req_of(a, a->src_ids, 0, 0, a->nr_blocks);
	assert_int_equal(tutti_store_save(w->st, w->dsrc.kv, &req, 1, status), nr_chunks);
}

static void
round_trips(const struct tutti_geometry *geo, enum t_layout layout)
{
	struct world w;
	struct chain a, b;
	uint32_t src_ids[256], dst_ids[256];
	struct tutti_request reqs[2];
	int32_t status[16];

	world_open(&w, geo, layout, 256, 8);
	t_random_distinct(&w.r, src_ids, 256, 256);
	t_random_distinct(&w.r, dst_ids, 256, 256);
	/* a: 4 whole chunks; b: shares a's first 2 chunks, then 1 whole and 1 partial chunk. */
	make_chain(&w, &a, NULL, 0, 4, 4 * w.bpc, src_ids, dst_ids);
	make_chain(&w, &b, &a, 2, 4, 3 * w.bpc + 1, src_ids + 4 * w.bpc, dst_ids + 4 * w.bpc);
	reqs[0] = req_of(&a, a.src_ids, 0, 0, a.nr_blocks);
	reqs[1] = req_of(&b, b.src_ids, 0, 0, b.nr_blocks);
	assert_int_equal(tutti_store_save(w.st, w.dsrc.kv, reqs, 2, status), 6);
	assert_int_equal(tutti_store_lookup(w.st, b.keys, 4, NULL), 4);

	/* Whole chains, all layers, into poisoned KV. */
	assert_int_equal(tt_gpu_fill(w.ddst.mem, 0xa5, w.dst->mem_bytes), 0);
	reqs[0] = req_of(&a, a.dst_ids, 0, 0, a.nr_blocks);
	reqs[1] = req_of(&b, b.dst_ids, 0, 0, b.nr_blocks);
	assert_int_equal(tutti_store_load(w.st, w.ddst.kv, reqs, 2, 0, geo->nr_layers, status), 8);
	assert_loaded(&w, &a, 0, a.nr_blocks, 0, geo->nr_layers);
	assert_loaded(&w, &b, 0, b.nr_blocks, 0, geo->nr_layers);

	/* From chunk 1, skipping 1 block of it, one layer at a time. */
	assert_int_equal(tt_gpu_fill(w.ddst.mem, 0x5c, w.dst->mem_bytes), 0);
	reqs[0] = req_of(&a, a.dst_ids + w.bpc + 1, 1, 1, 3 * w.bpc - 1);
	for (uint32_t l = 0; l < geo->nr_layers; l++) {
		assert_int_equal(tutti_store_load(w.st, w.ddst.kv, reqs, 1, l, l + 1, status), 3);
	}
	assert_loaded(&w, &a, w.bpc + 1, a.nr_blocks, 0, geo->nr_layers);
	world_close(&w);
}

static void
test_gpu_uring_round_trips_are_bit_exact_for_every_layout(void **state)
{
	struct tutti_geometry geo;

	geo_init(&geo, 3, 2, 64, 64); /* 8 KiB layer blocks, 32 KiB objects */
	for (int layout = 0; layout < T_NR_LAYOUTS; layout++) {
		round_trips(&geo, (enum t_layout)layout);
	}
	/* Llama rows: 64 KiB layer blocks, 1 MiB objects. */
	geo.nr_kv_heads = 8;
	geo.head_dim = 128;
	geo.chunk_tokens = 256;
	round_trips(&geo, T_LAYOUT_KV_FIRST);
}

static void
test_gpu_uring_damaged_object_is_caught_on_the_gpu(void **state)
{
	struct tutti_geometry geo;
	struct world w;
	struct chain a;
	uint32_t src_ids[256], dst_ids[256];
	struct tutti_request req;
	struct tutti_stats s = {.size = sizeof(s)};
	int32_t status[4];
	char *path;

	geo_init(&geo, 2, 2, 64, 64);
	world_with_chain(&w, &a, &geo, T_LAYOUT_BLOCKS_FIRST, 256, 4, 4, src_ids, dst_ids);
	/* Flip a byte in layer 1 of chunk 3 (slot 3 of a fresh store: allocation is in order),
	 * wherever among the directory's data files it lies (t_disk.h). */
	path = t_data_path(w.dir);
	assert_int_equal(t_disk_flip_bit(path, t_object_off(&geo, 3, 1) + 8192 + 17, 5), 0);
	free(path);
	assert_int_equal(tt_gpu_fill(w.ddst.mem, 0xa5, w.dst->mem_bytes), 0);
	req = req_of(&a, a.dst_ids, 0, 0, a.nr_blocks);
	/* Chunk 3's parent chain is intact: chunks 0..2 load, chunk 3 is refused. */
	assert_int_equal(tutti_store_load(w.st, w.ddst.kv, &req, 1, 0, geo.nr_layers, status), 3);
	assert_int_equal(status[3], -EBADMSG);
	assert_loaded(&w, &a, 0, 3 * w.bpc, 0, geo.nr_layers);
	/* Layer 1 of chunk 3 was never scattered: its blocks keep the poison. */
	for (uint32_t i = 3 * w.bpc; i < 4 * w.bpc; i++) {
		if (!t_kv_block_is(w.dst, 1, a.dst_ids[i], 0xa5)) {
			fail_msg("block %u layer 1 was scattered from a damaged object", i);
		}
	}
	assert_int_equal(tutti_store_get_stats(w.st, &s), 0);
	assert_int_equal(s.load_corrupt, 1);
	assert_int_equal(tutti_store_lookup(w.st, a.keys, 4, NULL), 3);
	world_close(&w);
}

static void
test_gpu_uring_system_calls_per_layer_do_not_grow_with_objects(void **state)
{
	struct tutti_geometry geo;
	struct world w;
	struct chain a;
	uint32_t src_ids[512], dst_ids[512];
	struct tutti_request req;
	int32_t status[32];
	uint64_t calls[2];

	geo_init(&geo, 4, 2, 64, 64);
	world_with_chain(&w, &a, &geo, T_LAYOUT_KV_FIRST, 512, 8, 8, src_ids, dst_ids);
	for (int big = 0; big < 2; big++) {
		struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};
		uint32_t chunks = big ? 8 : 1;

		req = req_of(&a, a.dst_ids, 0, 0, chunks * w.bpc);
		req.nr_keys = chunks;
		tutti_store_get_stats(w.st, &s0);
		assert_int_equal(
		    tutti_store_load(w.st, w.ddst.kv, &req, 1, 0, geo.nr_layers, status), chunks);
		tutti_store_get_stats(w.st, &s1);
		calls[big] = s1.io_submits - s0.io_submits;
		/* The I/O kernels' GPU time is accounted, with the blocks they held. */
		assert_true(s1.gpu_io_kernel_ns > s0.gpu_io_kernel_ns);
		assert_true(s1.gpu_io_block_ns - s0.gpu_io_block_ns >=
		            2 * (s1.gpu_io_kernel_ns - s0.gpu_io_kernel_ns));
	}
	/* At most one wake-up per layer launch (plus the doorbell's), whatever the object count. */
	assert_true(calls[0] <= 2 * geo.nr_layers);
	assert_true(calls[1] <= 2 * geo.nr_layers);
	world_close(&w);
}

/* However the workers are packed into blocks, they move the same bytes, catch the same damage,
 * and the stats count the blocks held: 7 workers and the driver in 3 blocks of 3 groups of 256
 * threads (the last with a spare group), 10 in 2 blocks of 6 groups of 128 (the last with a
 * spare), and 5 with a block each. The other tests run the default packing. */
static void
test_gpu_uring_any_packing_of_workers_is_bit_exact_and_holds_its_sms(void **state)
{
	static const uint32_t configs[][2] = {{7, 3}, {10, 2}, {5, 6}};

	for (size_t c = 0; c < sizeof(configs) / sizeof(configs[0]); c++) {
		struct tutti_geometry geo;
		struct world w;
		struct chain a;
		uint32_t src_ids[256], dst_ids[256];
		struct tutti_request req;
		struct tutti_stats s0 = {.size = sizeof(s0)}, s1 = {.size = sizeof(s1)};
		int32_t status[8];

		g_io_workers = configs[c][0];
		g_io_sms = configs[c][1];
		print_message("  %u workers in %u SMs\n", g_io_workers, g_io_sms);
		test_gpu_uring_round_trips_are_bit_exact_for_every_layout(state);
		test_gpu_uring_damaged_object_is_caught_on_the_gpu(state);

		geo_init(&geo, 2, 8, 128, 256);
		world_with_chain(&w, &a, &geo, T_LAYOUT_KV_FIRST, 256, 8, 8, src_ids, dst_ids);
		tutti_store_get_stats(w.st, &s0);
		req = req_of(&a, a.dst_ids, 0, 0, a.nr_blocks);
		assert_int_equal(
		    tutti_store_load(w.st, w.ddst.kv, &req, 1, 0, geo.nr_layers, status), 8);
		assert_loaded(&w, &a, 0, a.nr_blocks, 0, geo.nr_layers);
		tutti_store_get_stats(w.st, &s1);
		assert_true(s1.gpu_io_kernel_ns > s0.gpu_io_kernel_ns);
		assert_int_equal(s1.gpu_io_block_ns - s0.gpu_io_block_ns,
		                 g_io_sms * (s1.gpu_io_kernel_ns - s0.gpu_io_kernel_ns));
		world_close(&w);
	}
	g_io_workers = 0;
	g_io_sms = 0;
}

/* Engine auto on a GPU machine: GPU KV goes through gpu-uring and host KV through uring, with no
 * fallback to log. */
/* Loads by the copy engine where every read is a copy by io-wq (tmpfs at /dev/shm; skipped
 * without one): 96 bounce slots, at most 64 reads in flight (the cap of page-cache-backed
 * files), 128 objects of 1 MiB in a load, bit for bit. */
static void
test_gpu_uring_dma_loads_on_tmpfs_read_fewer_in_flight_than_slots(void **state)
{
	struct tutti_geometry geo;
	struct world w;
	struct chain a;
	uint32_t src_ids[128], dst_ids[128];
	struct tutti_request req;
	int32_t status[8];
	const char *tmp = getenv("TMPDIR");
	char *saved = tmp != NULL ? strdup(tmp) : NULL;
	struct statfs sfs;

	if (statfs("/dev/shm", &sfs) != 0 || sfs.f_type != TMPFS_MAGIC) {
		free(saved);
		skip();
	}
	geo_init(&geo, 16, 8, 128, 256); /* 64 KiB layer blocks, 1 MiB objects */
	/* The world's directory on tmpfs (world_open makes it under TMPDIR). */
	assert_int_equal(setenv("TMPDIR", "/dev/shm", 1), 0);
	world_with_chain(&w, &a, &geo, T_LAYOUT_KV_FIRST, 128, 96, 8, src_ids, dst_ids);
	assert_int_equal(saved != NULL ? setenv("TMPDIR", saved, 1) : unsetenv("TMPDIR"), 0);
	free(saved);
	assert_int_equal(tt_gpu_fill(w.ddst.mem, 0xa5, w.dst->mem_bytes), 0);
	req = req_of(&a, a.dst_ids, 0, 0, a.nr_blocks);
	assert_int_equal(tutti_store_load(w.st, w.ddst.kv, &req, 1, 0, geo.nr_layers, status), 8);
	assert_loaded(&w, &a, 0, a.nr_blocks, 0, geo.nr_layers);
	world_close(&w);
}

static void
test_auto_picks_gpu_uring_for_gpu_kv_and_uring_for_host_kv(void **state)
{
	struct tutti_geometry geo;
	struct world w;
	int warnings = g_warnings;

	geo_init(&geo, 2, 8, 128, 256);
	world_open(&w, &geo, T_LAYOUT_KV_FIRST, 64, 16);
	assert_int_equal(tutti_store_engine(w.st, w.ddst.kv), TUTTI_ENGINE_GPU_URING);
	assert_int_equal(tutti_store_engine(w.st, w.src->kv), TUTTI_ENGINE_URING);
	assert_int_equal(g_warnings, warnings);
	world_close(&w);
}

/* Whether a store of engine gds opens here: cuFile may refuse the files of a platform it
 * cannot classify (-EOPNOTSUPP, logged). Any other failure is a failure. */
static bool
gds_usable(void)
{
	struct tutti_geometry geo;
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;
	char *dir = t_tmpdir_create();
	const char *dirs[1] = {dir};
	int rc;

	assert_int_equal(tutti_geometry_preset("tiny", &geo), 0);
	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_CREATE;
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.engine = TUTTI_ENGINE_GDS;
	o.capacity_bytes = 4 * tutti_geometry_slot_bytes(&geo);
	o.log_fn = log_to_output;
	rc = tutti_store_open(&geo, &o, &st);
	tutti_store_close(st);
	t_tmpdir_remove(dir);
	if (rc != 0 && rc != -EOPNOTSUPP) {
		print_message("engine gds: opening a store failed: %d\n", rc);
		exit(1);
	}
	return rc == 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gpu_checksum_equals_the_cpu_checksum),
	    cmocka_unit_test(test_gpu_uring_round_trips_are_bit_exact_for_every_layout),
	    cmocka_unit_test(test_gpu_uring_damaged_object_is_caught_on_the_gpu),
	    cmocka_unit_test(test_gpu_uring_system_calls_per_layer_do_not_grow_with_objects),
	    cmocka_unit_test(test_gpu_uring_any_packing_of_workers_is_bit_exact_and_holds_its_sms),
	};
	/* The same through engine auto, which must pick gpu-uring for GPU KV. */
	const struct CMUnitTest auto_tests[] = {
	    cmocka_unit_test(test_auto_picks_gpu_uring_for_gpu_kv_and_uring_for_host_kv),
	    cmocka_unit_test(test_gpu_uring_round_trips_are_bit_exact_for_every_layout),
	    cmocka_unit_test(test_gpu_uring_damaged_object_is_caught_on_the_gpu),
	    cmocka_unit_test(test_gpu_uring_system_calls_per_layer_do_not_grow_with_objects),
	};
	/* gpu-uring with its loads by the copy engine. */
	const struct CMUnitTest dma_tests[] = {
	    cmocka_unit_test(test_gpu_uring_round_trips_are_bit_exact_for_every_layout),
	    cmocka_unit_test(test_gpu_uring_damaged_object_is_caught_on_the_gpu),
	    cmocka_unit_test(test_gpu_uring_dma_loads_on_tmpfs_read_fewer_in_flight_than_slots),
	};
	/* The same round trips and damage through engine gds (cuFile into device staging). */
	const struct CMUnitTest gds_tests[] = {
	    cmocka_unit_test(test_gpu_uring_round_trips_are_bit_exact_for_every_layout),
	    cmocka_unit_test(test_gpu_uring_damaged_object_is_caught_on_the_gpu),
	};
	void *cufile;
	int rc;

	if (tt_gpu_device_count() <= 0 || !t_tmpdir_supports_odirect()) {
		return 77; /* no GPU here, built without CUDA, or no O_DIRECT */
	}
	rc = cmocka_run_group_tests_name("gpu-uring", tests, NULL, NULL);
	g_gpu_io_copy = "dma";
	rc |= cmocka_run_group_tests_name("gpu-uring-dma", dma_tests, NULL, NULL);
	g_gpu_io_copy = "auto";
	g_engine = TUTTI_ENGINE_AUTO;
	rc |= cmocka_run_group_tests_name("auto", auto_tests, NULL, NULL);
	cufile = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
	if (cufile == NULL) {
		print_message("engine gds: not tested, libcufile is not installed\n");
		return rc;
	}
	dlclose(cufile);
	if (!gds_usable()) {
		print_message("engine gds: not tested, cuFile refuses this platform's files (the "
		              "error above)\n");
		return rc;
	}
	g_engine = TUTTI_ENGINE_GDS;
	return rc | cmocka_run_group_tests_name("gds", gds_tests, NULL, NULL);
}
