/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the layerwise pipeline in GPU mode (KV in GPU memory, engine gpu-uring): a
 * prefix loaded behind one-thread wait kernels on a compute stream is bit-exact, the waits and
 * their stall are recorded on the GPU, new KV copied into save staging by the gather kernel is
 * written in slack and reads back bit-exact, a store's first GPU work as a step whose compute
 * runs on the legacy default stream (vLLM 0.26's model runner) loads bit-exact with gpu-uring
 * and with uring, a damaged object in such a step fails its chunk alone without holding up
 * compute or faulting, a kernel loaded lazily right after a layer's wait holds up nothing, and
 * the store serves other calls between a step's launched layers. Exits 77 without a GPU or a
 * usable ring.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpu/gpu.h"
#include "t_disk.h"
#include "t_gpu.h"
#include "t_kv.h"
#ifdef T_LAZY_KERNEL
#include "t_lazy.h"
#endif
#include "t_util.h"

#define NR_BLOCKS 256u
#define CHUNKS 6u

struct world {
	char *dir;
	struct tutti_geometry geo;
	uint32_t bpc;
	struct t_kv *src, *dst;
	struct d_kv dsrc, ddst;
	struct tutti_store *st;
	void *stream;
	struct t_rng r;
	uint8_t keys[2 * CHUNKS * 32];
	uint32_t src_ids[4 * CHUNKS * 4]; /* then dst_ids */
	uint32_t *dst_ids;
};

static void
log_to_output(void *arg, int level, const char *msg)
{
	(void)arg;
	print_message("tutti[%d]: %s\n", level, msg);
}

static void
world_open_layers(struct world *w, uint32_t engine, uint32_t nr_layers)
{
	const char *dirs[1];
	struct tutti_store_opts o;

	memset(w, 0, sizeof(*w));
	t_rng_init(&w->r, t_seed(4242));
	w->dir = t_tmpdir_create();
	dirs[0] = w->dir;
	assert_int_equal(tutti_geometry_preset("llama-3-8b", &w->geo), 0);
	w->geo.nr_layers = nr_layers;
	w->geo.chunk_tokens = 64; /* 4 blocks of 16 tokens, 64 KiB per layer block */
	w->bpc = 4;
	assert_int_equal(t_kv_alloc(&w->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &w->src), 0);
	assert_int_equal(t_kv_alloc(&w->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &w->dst), 0);
	t_kv_fill_random(w->src, &w->r);
	t_kv_poison(w->dst, 0xa5);
	assert_int_equal(d_kv_alloc(w->src, &w->dsrc), 0);
	assert_int_equal(d_kv_alloc(w->dst, &w->ddst), 0);
	assert_int_equal(d_kv_upload(&w->dsrc), 0);
	assert_int_equal(d_kv_upload(&w->ddst), 0);
	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_CREATE;
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.engine = engine;
	o.capacity_bytes = 64 * tutti_geometry_slot_bytes(&w->geo);
	o.log_fn = log_to_output;
	assert_int_equal(tutti_store_open(&w->geo, &o, &w->st), 0);
	assert_int_equal(tt_gpu_stream_create(0, &w->stream), 0);
	t_rng_fill(&w->r, w->keys, sizeof(w->keys));
	w->dst_ids = w->src_ids + 2 * CHUNKS * w->bpc;
	/* One draw for both: the prefix lands in blocks the new KV does not occupy. */
	t_random_distinct(&w->r, w->src_ids, 4 * CHUNKS * w->bpc, NR_BLOCKS);
}

static void
world_open(struct world *w, uint32_t engine)
{
	world_open_layers(w, engine, 4);
}

static void
world_close(struct world *w)
{
	tt_gpu_stream_destroy(w->stream);
	tutti_store_close(w->st);
	d_kv_free(&w->dsrc);
	d_kv_free(&w->ddst);
	t_kv_free(w->src);
	t_kv_free(w->dst);
	t_tmpdir_remove(w->dir);
}

/* Download the destination KV and check that blocks [first, end) of the request's block list
 * hold, in every layer, what the source's matching blocks hold. */
static void
assert_landed(struct world *w, uint32_t first, uint32_t end)
{
	assert_int_equal(d_kv_download(&w->ddst), 0);
	for (uint32_t b = first; b < end; b++) {
		for (uint32_t l = 0; l < w->geo.nr_layers; l++) {
			assert_true(
			    t_kv_block_equal(w->src, w->src_ids[b], w->dst, w->dst_ids[b], l));
		}
	}
}

static struct tutti_request
request(struct world *w, uint32_t nr_keys, uint32_t first, const uint32_t *ids)
{
	return (struct tutti_request){.size = sizeof(struct tutti_request),
	                              .nr_keys = nr_keys,
	                              .keys = w->keys,
	                              .first_chunk = first,
	                              .nr_blocks = (nr_keys - first) * w->bpc,
	                              .block_ids = ids};
}

static void
final_result(struct tutti_pipeline *p, int64_t id, struct tutti_step_result *res, int32_t *status,
             uint64_t *stall)
{
	res->size = sizeof(*res);
	for (int i = 0; i < 20000; i++) {
		int rc = tutti_pipeline_step_result(p, id, res, status, stall);

		if (rc == 0) {
			return;
		}
		assert_int_equal(rc, -EAGAIN);
		usleep(500);
	}
	fail_msg("step %lld never became final", (long long)id);
}

static void
test_gpu_pipeline_loads_behind_wait_kernels_and_saves_in_slack(void **state)
{
	struct world w;
	struct tutti_request saved, load, save;
	struct tutti_pipeline_opts o;
	struct tutti_pipeline *p;
	struct tutti_step step = {.size = sizeof(step)};
	struct tutti_step_result res;
	struct tutti_pipeline_stats stats = {.size = sizeof(stats)};
	int32_t status[CHUNKS];
	uint64_t stall[4];
	int64_t id;

	(void)state;
	world_open(&w, TUTTI_ENGINE_GPU_URING);
	saved = request(&w, CHUNKS, 0, w.src_ids);
	assert_int_equal(tutti_store_save(w.st, w.dsrc.kv, &saved, 1, NULL), CHUNKS);
	tutti_pipeline_opts_init(&o);
	o.save_staging_bytes = 64ull << 20;
	assert_int_equal(tutti_pipeline_create(w.st, w.ddst.kv, &o, &p), 0);

	/* Load the prefix and save the next CHUNKS chunks, whose "new KV" dsrc holds. */
	load = request(&w, CHUNKS, 0, w.dst_ids);
	step.nr_loads = 1;
	step.loads = &load;
	save = request(&w, 2 * CHUNKS, CHUNKS, w.src_ids + CHUNKS * w.bpc);
	step.nr_saves = 1;
	step.saves = &save;
	step.compute_tokens = CHUNKS * 64;
	step.stream = w.stream;
	/* The saves copy from ddst: give it the new KV first (download, patch, upload). */
	assert_int_equal(d_kv_download(&w.ddst), 0);
	for (uint32_t b = CHUNKS * w.bpc; b < 2 * CHUNKS * w.bpc; b++) {
		for (uint32_t l = 0; l < w.geo.nr_layers; l++) {
			uint8_t blk[65536];

			t_kv_read_block(w.src, l, w.src_ids[b], blk);
			t_kv_write_block(w.dst, l, w.src_ids[b], blk);
		}
	}
	assert_int_equal(d_kv_upload(&w.ddst), 0);
	id = tutti_pipeline_begin_step(p, &step);
	assert_true(id > 0);
	for (uint32_t l = 0; l < w.geo.nr_layers; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
		assert_int_equal(tutti_pipeline_save_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	assert_int_equal(tt_gpu_stream_sync(w.stream), 0);
	final_result(p, id, &res, status, stall);
	assert_int_equal(res.load_chunks, CHUNKS);
	assert_int_equal(res.load_errors, 0);
	assert_int_equal(res.timed_out, 0);
	assert_int_equal(res.saves_staged, CHUNKS);
	for (uint32_t i = 0; i < CHUNKS; i++) {
		assert_int_equal(status[i], 0);
	}
	/* The prefix landed bit for bit. */
	assert_landed(&w, 0, CHUNKS * w.bpc);
	/* The saves were written in slack: the whole chain is stored and reads back. */
	assert_int_equal(tutti_pipeline_flush(p), 0);
	assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
	assert_int_equal(stats.saves_written, CHUNKS);
	assert_int_equal(stats.save_errors, 0);
	assert_int_equal(tutti_store_lookup(w.st, w.keys, 2 * CHUNKS, NULL), 2 * CHUNKS);
	{
		struct tutti_request all = request(&w, 2 * CHUNKS, 0, w.dst_ids);

		t_kv_poison(w.dst, 0x5a);
		assert_int_equal(d_kv_upload(&w.ddst), 0);
		assert_int_equal(
		    tutti_store_load(w.st, w.ddst.kv, &all, 1, 0, w.geo.nr_layers, NULL),
		    2 * CHUNKS);
		assert_landed(&w, 0, 2 * CHUNKS * w.bpc);
	}
	tutti_pipeline_destroy(p);
	world_close(&w);
}

/* A step's load is an op whose layer kernels are launched one by one and left running on the
 * store's stream: a chunk missing from the store fails alone (listed first, so every later
 * chunk's place in the op's object lists differs from its place in the step), and a save of host
 * KV from another caller, which drives the same ring and bounce slots from the host, runs while
 * the op's kernels are in flight (it waits for them, not for compute). */
static void
test_gpu_pipeline_store_calls_run_between_launched_layers(void **state)
{
	struct world w;
	struct tutti_request saved, reqs[2], other, back;
	struct tutti_pipeline_opts o;
	struct tutti_pipeline *p;
	struct tutti_step step = {.size = sizeof(step)};
	struct tutti_step_result res;
	struct tutti_pipeline_stats stats = {.size = sizeof(stats)};
	uint8_t lost_key[32];
	int32_t status[CHUNKS];
	int64_t id;

	(void)state;
	world_open(&w, TUTTI_ENGINE_GPU_URING);
	saved = request(&w, CHUNKS - 1, 0, w.src_ids);
	assert_int_equal(tutti_store_save(w.st, w.dsrc.kv, &saved, 1, NULL), CHUNKS - 1);
	tutti_pipeline_opts_init(&o);
	o.readahead_layers = w.geo.nr_layers; /* every layer launched at once */
	assert_int_equal(tutti_pipeline_create(w.st, w.ddst.kv, &o, &p), 0);
	t_rng_fill(&w.r, lost_key, sizeof(lost_key));
	reqs[0] = (struct tutti_request){.size = sizeof(struct tutti_request),
	                                 .nr_keys = 1,
	                                 .keys = lost_key,
	                                 .nr_blocks = w.bpc,
	                                 .block_ids = w.dst_ids + (CHUNKS - 1) * w.bpc};
	reqs[1] = request(&w, CHUNKS - 1, 0, w.dst_ids);
	step.nr_loads = 2;
	step.loads = reqs;
	step.compute_tokens = 64;
	step.stream = w.stream;
	id = tutti_pipeline_begin_step(p, &step);
	assert_true(id > 0);

	/* The rest of the chain, saved from host KV while the step's kernels may run. */
	other = request(&w, 2 * CHUNKS - 1, CHUNKS - 1, w.src_ids + (CHUNKS - 1) * w.bpc);
	assert_int_equal(tutti_store_save(w.st, w.src->kv, &other, 1, NULL), CHUNKS);
	for (uint32_t l = 0; l < w.geo.nr_layers; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	assert_int_equal(tt_gpu_stream_sync(w.stream), 0);
	final_result(p, id, &res, status, NULL);
	assert_int_equal(res.load_chunks, CHUNKS - 1);
	assert_int_equal(res.load_errors, 1);
	assert_int_equal(res.timed_out, 0);
	assert_int_equal(status[0], -ENOENT);
	for (uint32_t i = 1; i < CHUNKS; i++) {
		assert_int_equal(status[i], 0);
	}
	assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
	assert_int_equal(stats.layers_loaded, w.geo.nr_layers);
	assert_true(stats.read_bytes_per_s > 0);
	assert_landed(&w, 0, (CHUNKS - 1) * w.bpc);
	/* What the host save wrote between the launches reads back bit for bit. */
	t_kv_poison(w.dst, 0x5a);
	assert_int_equal(d_kv_upload(&w.ddst), 0);
	back = request(&w, 2 * CHUNKS - 1, 0, w.dst_ids);
	assert_int_equal(tutti_store_load(w.st, w.ddst.kv, &back, 1, 0, w.geo.nr_layers, NULL),
	                 2 * CHUNKS - 1);
	assert_landed(&w, 0, (2 * CHUNKS - 1) * w.bpc);
	tutti_pipeline_destroy(p);
	world_close(&w);
}

/* A store's first GPU work is a layerwise load whose compute runs on the legacy default stream
 * (vLLM 0.26's model runner): what the engine makes at its first GPU batch (the checksum secret,
 * device words, the waves' staging) is made when the pipeline is created, since a step's GPU
 * call on the legacy stream would wait behind the layer-0 wait kernel, which waits for it. The
 * prefix is saved from host KV, which opens nothing on the GPU. With \p damaged, a bit of the
 * last chunk's layer-2 object is flipped on disk first: that chunk alone fails, its layers are
 * still released to compute without the wait timeout, and the GPU is left without an error. */
static void
first_load_on_the_legacy_stream(uint32_t engine, bool damaged)
{
	struct world w;
	struct tutti_request saved, load;
	struct tutti_pipeline_opts o;
	struct tutti_pipeline *p;
	struct tutti_step step = {.size = sizeof(step)};
	struct tutti_step_result res;
	int32_t status[CHUNKS];
	uint32_t good = damaged ? CHUNKS - 1 : CHUNKS;
	int64_t id;

	world_open(&w, engine);
	saved = request(&w, CHUNKS, 0, w.src_ids);
	assert_int_equal(tutti_store_save(w.st, w.src->kv, &saved, 1, NULL), CHUNKS);
	if (damaged) {
		char *path = t_data_path(w.dir);
		uint32_t slot = t_key_slot(path, &w.geo, w.keys + (CHUNKS - 1) * 32, 32);

		assert_int_equal(t_disk_flip_bit(path, t_object_off(&w.geo, slot, 2) + 8192, 5), 0);
		free(path);
	}
	tutti_pipeline_opts_init(&o);
	o.wait_timeout_ms = 5000; /* a wait held up by the load it waits for ends here */
	assert_int_equal(tutti_pipeline_create(w.st, w.ddst.kv, &o, &p), 0);
	load = request(&w, CHUNKS, 0, w.dst_ids);
	step.nr_loads = 1;
	step.loads = &load;
	step.stream = NULL;
	id = tutti_pipeline_begin_step(p, &step);
	assert_true(id > 0);
	for (uint32_t l = 0; l < w.geo.nr_layers; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	assert_int_equal(tt_gpu_stream_sync(NULL), 0);
	final_result(p, id, &res, status, NULL);
	assert_int_equal(res.load_chunks, good);
	assert_int_equal(res.load_errors, CHUNKS - good);
	assert_int_equal(res.timed_out, 0);
	if (damaged) {
		assert_int_equal(status[CHUNKS - 1], -EBADMSG);
	}
	assert_landed(&w, 0, good * w.bpc);
	tutti_pipeline_destroy(p);
	assert_int_equal(tt_gpu_stream_sync(NULL), 0);
	world_close(&w);
}

static void
test_gpu_pipeline_first_load_on_the_legacy_stream_gpu_uring(void **state)
{
	(void)state;
	first_load_on_the_legacy_stream(TUTTI_ENGINE_GPU_URING, false);
}

static void
test_gpu_pipeline_first_load_on_the_legacy_stream_uring(void **state)
{
	(void)state;
	first_load_on_the_legacy_stream(TUTTI_ENGINE_URING, false);
}

static void
test_gpu_pipeline_damaged_object_on_the_legacy_stream_gpu_uring(void **state)
{
	(void)state;
	first_load_on_the_legacy_stream(TUTTI_ENGINE_GPU_URING, true);
}

static void
test_gpu_pipeline_damaged_object_on_the_legacy_stream_uring(void **state)
{
	(void)state;
	first_load_on_the_legacy_stream(TUTTI_ENGINE_URING, true);
}

/* A model's depth (32 layers: gpu-uring's layer kernels and the objects checks span several
 * launches) and two requests in one step whose first chunks (their roots) are damaged in the
 * middle layer, as vLLM's output matrix damages a store: those two chunks fail alone, every
 * layer is released without the wait timeout, nothing faults on the GPU, and the other chunks
 * land bit for bit. */
static void
damaged_roots_mid_depth(uint32_t engine)
{
	struct world w;
	struct tutti_request saved[2], load[2];
	struct tutti_pipeline_opts o;
	struct tutti_pipeline *p;
	struct tutti_step step = {.size = sizeof(step)};
	struct tutti_step_result res;
	const uint32_t half = CHUNKS / 2;
	int32_t status[CHUNKS];
	char *path;
	int64_t id;

	world_open_layers(&w, engine, 32);
	path = t_data_path(w.dir);
	for (uint32_t r = 0; r < 2; r++) {
		saved[r] = request(&w, half, 0, w.src_ids + r * half * w.bpc);
		saved[r].keys = w.keys + r * half * 32;
		assert_int_equal(tutti_store_save(w.st, w.src->kv, &saved[r], 1, NULL), half);
		load[r] = request(&w, half, 0, w.dst_ids + r * half * w.bpc);
		load[r].keys = saved[r].keys;
	}
	for (uint32_t r = 0; r < 2; r++) {
		uint32_t slot = t_key_slot(path, &w.geo, saved[r].keys, 32);

		assert_int_equal(t_disk_flip_bit(path, t_object_off(&w.geo, slot, 16) + 8192, 5),
		                 0);
	}
	free(path);
	tutti_pipeline_opts_init(&o);
	o.wait_timeout_ms = 5000;
	assert_int_equal(tutti_pipeline_create(w.st, w.ddst.kv, &o, &p), 0);
	step.nr_loads = 2;
	step.loads = load;
	step.compute_tokens = 64;
	step.stream = w.stream;
	id = tutti_pipeline_begin_step(p, &step);
	assert_true(id > 0);
	for (uint32_t l = 0; l < w.geo.nr_layers; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	assert_int_equal(tt_gpu_stream_sync(w.stream), 0);
	final_result(p, id, &res, status, NULL);
	assert_int_equal(res.timed_out, 0);
	assert_int_equal(res.load_errors, 2);
	assert_int_equal(status[0], -EBADMSG);
	assert_int_equal(status[half], -EBADMSG);
	for (uint32_t c = 0; c < CHUNKS; c++) {
		if (c == 0 || c == half) {
			continue;
		}
		assert_int_equal(status[c], 0);
		assert_landed(&w, c * w.bpc, (c + 1) * w.bpc);
	}
	tutti_pipeline_destroy(p);
	assert_int_equal(tt_gpu_stream_sync(NULL), 0);
	world_close(&w);
}

static void
test_gpu_pipeline_damaged_roots_mid_depth_gpu_uring(void **state)
{
	(void)state;
	damaged_roots_mid_depth(TUTTI_ENGINE_GPU_URING);
}

static void
test_gpu_pipeline_damaged_roots_mid_depth_uring(void **state)
{
	(void)state;
	damaged_roots_mid_depth(TUTTI_ENGINE_URING);
}

#ifdef T_LAZY_KERNEL
/* Compute launches a kernel the process has never run (t_lazy.cu) right after a layer's wait,
 * as vLLM's first forward over a cached prefix does. Under CUDA's lazy module loading that
 * launch loads the kernel's module, which may synchronise the context: a wait kernel for a
 * layer whose load was not yet issued would hold that up, and with it the CUDA calls that are
 * to issue the load, until the wait timeout. No layer may be released by the timeout, and the
 * prefix lands bit for bit. The engines issue differently: gpu-uring launches a layer's kernels,
 * uring reads it on the host and copies it with CUDA calls. */
static void
lazy_kernel_behind_a_wait(uint32_t engine)
{
	struct world w;
	struct tutti_request saved, load;
	struct tutti_pipeline_opts o;
	struct tutti_pipeline *p;
	struct tutti_step step = {.size = sizeof(step)};
	struct tutti_step_result res;
	int32_t status[CHUNKS];
	int64_t id;

	world_open(&w, engine);
	saved = request(&w, CHUNKS, 0, w.src_ids);
	assert_int_equal(tutti_store_save(w.st, w.src->kv, &saved, 1, NULL), CHUNKS);
	tutti_pipeline_opts_init(&o);
	o.wait_timeout_ms = 5000;
	assert_int_equal(tutti_pipeline_create(w.st, w.ddst.kv, &o, &p), 0);
	load = request(&w, CHUNKS, 0, w.dst_ids);
	step.nr_loads = 1;
	step.loads = &load;
	step.stream = w.stream;
	id = tutti_pipeline_begin_step(p, &step);
	assert_true(id > 0);
	for (uint32_t l = 0; l < w.geo.nr_layers; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
		if (l == 0) {
			assert_int_equal(t_lazy_launch(w.stream), 0);
		}
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	assert_int_equal(tt_gpu_stream_sync(w.stream), 0);
	final_result(p, id, &res, status, NULL);
	assert_int_equal(res.timed_out, 0);
	assert_int_equal(res.load_errors, 0);
	assert_int_equal(res.load_chunks, CHUNKS);
	/* The host's blocking until each layer was issued reaches the step's result. */
	assert_true(res.host_wait_ns > 0);
	assert_landed(&w, 0, CHUNKS * w.bpc);
	tutti_pipeline_destroy(p);
	world_close(&w);
}

static void
test_gpu_pipeline_lazy_kernel_behind_a_wait_gpu_uring(void **state)
{
	(void)state;
	lazy_kernel_behind_a_wait(TUTTI_ENGINE_GPU_URING);
}

static void
test_gpu_pipeline_lazy_kernel_behind_a_wait_uring(void **state)
{
	(void)state;
	lazy_kernel_behind_a_wait(TUTTI_ENGINE_URING);
}
#endif

/* With an argument, only the tests whose names match it run (cmocka's filter, '*' a wildcard):
 * ctest runs each legacy-stream case again alone, in a process whose first GPU work it is, where
 * CUDA's lazy module loading has loaded none of the library's kernels yet. */
int
main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gpu_pipeline_loads_behind_wait_kernels_and_saves_in_slack),
	    cmocka_unit_test(test_gpu_pipeline_store_calls_run_between_launched_layers),
	    cmocka_unit_test(test_gpu_pipeline_first_load_on_the_legacy_stream_gpu_uring),
	    cmocka_unit_test(test_gpu_pipeline_first_load_on_the_legacy_stream_uring),
	    cmocka_unit_test(test_gpu_pipeline_damaged_object_on_the_legacy_stream_gpu_uring),
	    cmocka_unit_test(test_gpu_pipeline_damaged_object_on_the_legacy_stream_uring),
	    cmocka_unit_test(test_gpu_pipeline_damaged_roots_mid_depth_gpu_uring),
	    cmocka_unit_test(test_gpu_pipeline_damaged_roots_mid_depth_uring),
#ifdef T_LAZY_KERNEL
	    cmocka_unit_test(test_gpu_pipeline_lazy_kernel_behind_a_wait_gpu_uring),
	    cmocka_unit_test(test_gpu_pipeline_lazy_kernel_behind_a_wait_uring),
#endif
	};

	if (tt_gpu_device_count() <= 0 || !t_tmpdir_supports_odirect() || t_uring_probe() != 0) {
		return 77; /* no GPU here, built without CUDA, no O_DIRECT or no io_uring */
	}
	if (argc > 1) {
		cmocka_set_test_filter(argv[1]);
	}
	return cmocka_run_group_tests_name("gpu-pipeline", tests, NULL, NULL);
}
