/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: engine auto on a machine without a GPU, as CI runs it: host KV moves through the
 * CPU-driven engine (uring, posix where io_uring is refused), which tutti_store_engine() reports,
 * without a word in the log and without setting gpu-uring up; GPU KV that gpu-uring cannot take
 * (no CUDA device; layer blocks too small for the GPU hash) falls back to the CPU-driven engine
 * with exactly one line of the log saying why, however often it is asked.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/engine_impl.h"
#include "format/format.h"
#include "gpu/gpu.h"
#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"

#define SLOTS 16u
#define LAYERS 4u
#define BPC 4u /* blocks per chunk */
#define NR_BLOCKS 64u

struct fixture {
	char *tmp;
	struct t_log rec;
	struct t_rng r;
	uint32_t cpu_engine; /* what auto's CPU-driven engine is on this machine */
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->tmp = t_tmpdir_create();
	t_rng_init(&f->r, 17);
	f->cpu_engine = t_uring_probe() == 0 ? TUTTI_ENGINE_URING : TUTTI_ENGINE_POSIX;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

/* Log lines at WARN or more urgent. */
static int
warnings(const struct t_log *log)
{
	int n = 0;

	for (int i = 0; i < log->nr && i < T_LOG_MAX; i++) {
		n += log->levels[i] <= TUTTI_LOG_WARN;
	}
	return n;
}

static void
test_auto_moves_host_kv_through_the_cpu_engine(void **state)
{
	struct fixture *f = *state;
	struct tutti_geometry geo = t_geo_small(LAYERS, BPC);
	const char *dirs[1] = {f->tmp};
	const enum t_layout layouts[2] = {T_LAYOUT_BLOCKS_FIRST, T_LAYOUT_KV_FIRST};
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;
	uint8_t *keys = t_keys_new(&f->r, 4, 32); /* a chain of 2 per layout */
	uint32_t src_ids[2 * BPC], dst_ids[2 * BPC];
	struct tutti_stats stats;

	t_store_opts(&o, &geo, dirs, 1, SLOTS, TUTTI_ENGINE_AUTO, &f->rec);
	o.log_level = TUTTI_LOG_DEBUG;
	t_log_reset(&f->rec);
	assert_int_equal(tutti_store_open(&geo, &o, &st), 0);
	for (uint32_t i = 0; i < 2 * BPC; i++) {
		src_ids[i] = i;
		dst_ids[i] = NR_BLOCKS - 1 - i;
	}
	/* Direct (blocks-first, aligned) and staged (kv-first) host KV alike. */
	for (uint32_t li = 0; li < 2; li++) {
		struct t_kv *src = t_kv_new(&geo, layouts[li], NR_BLOCKS, &f->r);
		struct t_kv *dst = t_kv_new(&geo, layouts[li], NR_BLOCKS, NULL);
		struct tutti_request save = t_request(keys + li * 64, 2, 0, 0, src_ids, 2 * BPC);
		struct tutti_request load = t_request(keys + li * 64, 2, 0, 0, dst_ids, 2 * BPC);
		uint8_t *a = malloc(src->lbb), *b = malloc(src->lbb);
		int32_t status[2];

		assert_int_equal(tutti_store_engine(st, src->kv), (int)f->cpu_engine);
		assert_int_equal(tutti_store_save(st, src->kv, &save, 1, status), 2);
		assert_int_equal(tutti_store_load(st, dst->kv, &load, 1, 0, LAYERS, status), 2);
		for (uint32_t l = 0; l < LAYERS; l++) {
			for (uint32_t i = 0; i < 2 * BPC; i++) {
				t_kv_read_block(src, l, src_ids[i], a);
				t_kv_read_block(dst, l, dst_ids[i], b);
				assert_memory_equal(a, b, src->lbb);
			}
		}
		free(a);
		free(b);
		t_kv_free(src);
		t_kv_free(dst);
	}
	stats = t_store_stats(st);
	assert_true(stats.io_ops > 0);
	assert_int_equal(stats.gpu_io_kernel_ns, 0);
	/* gpu-uring was never set up or even tried: host KV says nothing about it. */
	assert_int_equal(warnings(&f->rec), 0);
	assert_false(t_log_contains(&f->rec, "gpu-uring"));
	assert_int_equal(tutti_store_engine(NULL, NULL), -EINVAL);
	tutti_store_close(st);
	free(keys);
}

/* An auto engine on one data file of \p geo, as a store opens it. */
static struct tt_engine *
auto_engine(struct fixture *f, const struct tt_geo *geo, struct tt_log *log, int *fd)
{
	struct tt_engine_conf conf = {
	    .geo = geo,
	    .staging_bytes = 1u << 20,
	    .max_io_bytes = 1u << 20,
	    .queue_depth = 8,
	    .log = log,
	};
	char *path = t_path_join(f->tmp, "data");
	struct tt_engine *e = NULL;

	*fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	free(path);
	assert_true(*fd >= 0);
	assert_int_equal(ftruncate(*fd, 1u << 20), 0);
	assert_int_equal(tt_engine_open(TUTTI_ENGINE_AUTO, &conf, &e), 0);
	assert_int_equal(tt_engine_attach(e, fd, 1), 0);
	assert_string_equal(tt_engine_name(e), "auto");
	return e;
}

/* GPU KV of \p geo on device 0, as tutti_kv_create() would register it on a GPU machine. */
static struct tutti_kv
gpu_kv(const struct tt_geo *geo)
{
	return (struct tutti_kv){
	    .geo = *geo, .segs_per_layer = 1, .nr_blocks = 1, .mem = TUTTI_MEM_CUDA};
}

/* Asking again (a load, a launched load, the query) sets nothing up and logs nothing more. */
static void
expect_one_fallback(struct fixture *f, struct tt_engine *e, const struct tutti_kv *kv,
                    const char *why)
{
	struct tt_list_mem mem = {0};
	struct tt_batch b = {.kind = TT_BATCH_LOAD, .kv = kv, .layer_end = 1};
	struct tt_launch *l = (struct tt_launch *)(uintptr_t)1;

	for (int i = 0; i < 3; i++) {
		assert_int_equal(tt_engine_moved_by(e, kv), f->cpu_engine);
	}
	assert_int_equal(tt_engine_launch_open(e, &b, &mem, &l), 0);
	assert_null(l);
	assert_int_equal(warnings(&f->rec), 1);
	assert_true(t_log_contains(&f->rec, "not gpu-uring"));
	assert_true(t_log_contains(&f->rec, why));
	tt_list_mem_free(&mem);
}

static void
test_auto_gpu_kv_with_blocks_below_the_gpu_hash_falls_back_with_one_line(void **state)
{
	struct fixture *f = *state;
	/* 4-token blocks of one head of dimension 8 in 2 bytes, K and V: 128-byte layer blocks. */
	struct tutti_geometry g = {.size = sizeof(g),
	                           .nr_layers = LAYERS,
	                           .kv_planes = 2,
	                           .nr_kv_heads = 1,
	                           .head_dim = 8,
	                           .elem_bytes = 2,
	                           .block_tokens = 4,
	                           .chunk_tokens = 16};
	struct tt_log log = {.fn = t_log_fn, .arg = &f->rec, .level = TUTTI_LOG_DEBUG};
	struct tt_geo geo;
	struct tt_engine *e;
	struct tutti_kv kv;
	int fd;

	assert_int_equal(tt_geo_derive(&g, &geo), 0);
	assert_true(geo.layer_block_bytes <= TT_XXH3_MIDSIZE_MAX);
	t_log_reset(&f->rec);
	e = auto_engine(f, &geo, &log, &fd);
	kv = gpu_kv(&geo);
	expect_one_fallback(f, e, &kv, "layer blocks of 128 bytes");
	tt_engine_close(e);
	close(fd);
}

static void
test_auto_gpu_kv_without_a_cuda_device_falls_back_with_one_line(void **state)
{
	struct fixture *f = *state;
	struct tutti_geometry g = t_geo_small(LAYERS, BPC);
	struct tt_log log = {.fn = t_log_fn, .arg = &f->rec, .level = TUTTI_LOG_DEBUG};
	struct tt_geo geo;
	struct tt_engine *e;
	struct tutti_kv kv;
	int fd;

	if (tt_gpu_device_count() > 0) {
		skip(); /* a GPU machine: gpu-uring may well be set up there (tests/gpu) */
	}
	assert_int_equal(tt_geo_derive(&g, &geo), 0);
	t_log_reset(&f->rec);
	e = auto_engine(f, &geo, &log, &fd);
	kv = gpu_kv(&geo);
	expect_one_fallback(f, e, &kv, "no CUDA device");
	tt_engine_close(e);
	close(fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_auto_moves_host_kv_through_the_cpu_engine, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(
	        test_auto_gpu_kv_with_blocks_below_the_gpu_hash_falls_back_with_one_line, setup,
	        teardown),
	    cmocka_unit_test_setup_teardown(
	        test_auto_gpu_kv_without_a_cuda_device_falls_back_with_one_line, setup, teardown),
	};

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
