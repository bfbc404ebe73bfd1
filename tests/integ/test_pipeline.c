/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the layerwise pipeline in CPU mode (host KV, CPU mover, real engines): a cached
 * prefix loaded layer by layer is bit-exact and every layer is waited for; the read-ahead window
 * holds reads back until compute reaches them; new KV saved per layer is written later, in
 * slack, and reads back bit-exact; a full save staging skips chunks (counted) and never blocks;
 * missing chunks are per-chunk load errors; the profile file round-trips and sets the window;
 * the timeline is written; bad calls are refused, and so is a profile or a trace path that is not
 * a regular file (a FIFO, a device, a directory), at once.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "t_disk.h"
#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define KB 32u
#define NR_BLOCKS 512u
#define LAYERS 8u
#define BPC 4u

static int g_engine;

struct fixture {
	char *tmp;
	struct tutti_geometry geo;
	struct tutti_store *st;
	struct t_log rec;
	struct t_rng r;
	struct t_kv *src; /* KV the chunks were saved from */
	struct t_kv *dst; /* KV the pipeline loads into and saves from */
};

static struct tutti_geometry
geometry(void)
{
	struct tutti_geometry g;

	tutti_geometry_init(&g);
	g.nr_layers = LAYERS;
	g.nr_kv_heads = 2;
	g.head_dim = 64; /* 4 KiB layer blocks: direct I/O where the layout allows */
	g.block_tokens = 8;
	g.chunk_tokens = 8 * BPC;
	return g;
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct tutti_store_opts o;
	char *dir;

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	*state = f;
	f->geo = geometry();
	t_rng_init(&f->r, t_seed(97));
	dir = t_path_join(f->tmp, "store");
	t_store_opts(&o, &f->geo, (const char **)&dir, 1, 96, (uint32_t)g_engine, &f->rec);
	if (tutti_store_open(&f->geo, &o, &f->st) != 0) {
		return -1;
	}
	free(dir);
	if (t_kv_alloc(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &f->src) != 0 ||
	    t_kv_alloc(&f->geo, T_LAYOUT_BLOCKS_FIRST, NR_BLOCKS, &f->dst) != 0) {
		return -1;
	}
	t_kv_fill_random(f->src, &f->r);
	t_kv_poison(f->dst, T_POISON);
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	t_kv_free(f->src);
	t_kv_free(f->dst);
	tutti_store_close(f->st);
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

/* Save \p nr chunks of random blocks from src under new keys; ids receive the source blocks. */
static uint8_t *
saved_chain(struct fixture *f, uint32_t nr, uint32_t *ids)
{
	uint8_t *keys = t_keys_new(&f->r, nr, KB);
	struct tutti_request r;

	t_random_distinct(&f->r, ids, nr * BPC, NR_BLOCKS);
	r = t_request(keys, nr, 0, 0, ids, nr * BPC);
	assert_int_equal(tutti_store_save(f->st, f->src->kv, &r, 1, NULL), nr);
	return keys;
}

static struct tutti_pipeline *
pipeline(struct fixture *f, uint32_t readahead, uint64_t staging, const char *profile)
{
	struct tutti_pipeline_opts o;
	struct tutti_pipeline *p = NULL;

	tutti_pipeline_opts_init(&o);
	o.readahead_layers = readahead;
	o.save_staging_bytes = staging;
	o.profile_path = profile;
	assert_int_equal(tutti_pipeline_create(f->st, f->dst->kv, &o, &p), 0);
	return p;
}

/* Every layer waited for and signalled, then the step ended; its final result. */
static void
run_layers(struct tutti_pipeline *p, int64_t step, struct tutti_step_result *res, int32_t *status,
           uint64_t *stall)
{
	for (uint32_t l = 0; l < LAYERS; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
		assert_int_equal(tutti_pipeline_save_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	res->size = sizeof(*res);
	for (int i = 0; i < 5000; i++) {
		int rc = tutti_pipeline_step_result(p, step, res, status, stall);

		if (rc == 0) {
			return;
		}
		assert_int_equal(rc, -EAGAIN);
		usleep(1000);
	}
	fail_msg("step %lld never became final", (long long)step);
}

static void
test_pipeline_prefix_loads_bit_exact_layer_by_layer(void **state)
{
	struct fixture *f = *state;
	uint32_t src_ids[6 * BPC], dst_ids[6 * BPC];
	uint8_t *keys = saved_chain(f, 6, src_ids);
	struct tutti_pipeline *p = pipeline(f, 0, 0, NULL);
	struct tutti_request r;
	struct tutti_step step = {.size = sizeof(step), .nr_loads = 1, .loads = &r};
	struct tutti_step_result res;
	struct tutti_pipeline_stats stats = {.size = sizeof(stats)};
	int32_t status[6];
	uint64_t stall[LAYERS];
	int64_t id;

	t_random_distinct(&f->r, dst_ids, 6 * BPC, NR_BLOCKS);
	r = t_request(keys, 6, 0, 0, dst_ids, 6 * BPC);
	id = tutti_pipeline_begin_step(p, &step);
	assert_true(id > 0);
	/* Layer l is in place as soon as its wait returns. */
	for (uint32_t l = 0; l < LAYERS; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
		for (uint32_t b = 0; b < 6 * BPC; b++) {
			assert_true(t_kv_block_equal(f->src, src_ids[b], f->dst, dst_ids[b], l));
		}
		assert_int_equal(tutti_pipeline_save_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	res.size = sizeof(res);
	while (tutti_pipeline_step_result(p, id, &res, status, stall) == -EAGAIN) {
		usleep(1000);
	}
	assert_int_equal(res.nr_loads, 6);
	assert_int_equal(res.load_chunks, 6);
	assert_int_equal(res.load_errors, 0);
	assert_int_equal(res.load_bytes, 6ull * LAYERS * tutti_geometry_object_bytes(&f->geo));
	assert_int_equal(res.readahead, LAYERS); /* no profile: read as far ahead as it goes */
	for (uint32_t i = 0; i < 6; i++) {
		assert_int_equal(status[i], 0);
	}
	uint64_t sum = 0;
	for (uint32_t l = 0; l < LAYERS; l++) {
		sum += stall[l];
	}
	assert_int_equal(sum, res.stall_ns);
	assert_int_equal(res.host_wait_ns,
	                 res.stall_ns); /* CPU mode: the caller's wait is the stall */
	assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
	assert_int_equal(stats.host_wait_ns, res.host_wait_ns);
	assert_int_equal(stats.steps, 1);
	assert_int_equal(stats.layers_loaded, LAYERS);
	assert_int_equal(stats.load_chunks, 6);
	assert_int_equal(stats.request_loads, 1);
	assert_true(stats.read_bytes_per_s > 0); /* measured online */
	tutti_pipeline_destroy(p);
	free(keys);
	assert_int_equal(f->rec.nr_err, 0);
}

/* The layers read once reads have had time to reach \p want: waits up to 10 s for \p want,
 * then as long again as that took (at least 50 ms) to let reads that should not happen show. */
static uint64_t
layers_read_settled(struct tutti_pipeline *p, uint64_t want)
{
	struct tutti_pipeline_stats stats = {.size = sizeof(stats)};
	uint32_t waited_ms = 0;

	for (; waited_ms < 10000; waited_ms++) {
		assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
		if (stats.layers_loaded >= want) {
			break;
		}
		usleep(1000);
	}
	usleep(1000 * (waited_ms > 50 ? waited_ms : 50));
	assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
	return stats.layers_loaded;
}

static void
test_pipeline_readahead_window_holds_reads_until_compute_reaches_them(void **state)
{
	struct fixture *f = *state;
	uint32_t src_ids[4 * BPC], dst_ids[4 * BPC];
	uint8_t *keys = saved_chain(f, 4, src_ids);
	struct tutti_pipeline *p = pipeline(f, 2, 0, NULL);
	struct tutti_request r;
	struct tutti_step step = {.size = sizeof(step), .nr_loads = 1, .loads = &r};
	struct tutti_pipeline_stats stats = {.size = sizeof(stats)};
	struct tutti_step_result res;

	t_random_distinct(&f->r, dst_ids, 4 * BPC, NR_BLOCKS);
	r = t_request(keys, 4, 0, 0, dst_ids, 4 * BPC);
	assert_true(tutti_pipeline_begin_step(p, &step) > 0);
	assert_int_equal(layers_read_settled(p, 2), 2);
	assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
	assert_int_equal(stats.readahead, 2);
	/* Compute reaches layer 0 and 1: two more layers may be read. */
	assert_int_equal(tutti_pipeline_wait_layer(p, 0), 0);
	assert_int_equal(tutti_pipeline_wait_layer(p, 1), 0);
	assert_int_equal(layers_read_settled(p, 4), 4);
	for (uint32_t l = 2; l < LAYERS; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	res.size = sizeof(res);
	while (tutti_pipeline_step_result(p, 1, &res, NULL, NULL) == -EAGAIN) {
		usleep(1000);
	}
	assert_int_equal(res.load_chunks, 4);
	for (uint32_t b = 0; b < 4 * BPC; b++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			assert_true(t_kv_block_equal(f->src, src_ids[b], f->dst, dst_ids[b], l));
		}
	}
	tutti_pipeline_destroy(p);
	free(keys);
}

static void
test_pipeline_saves_are_written_in_slack_and_read_back(void **state)
{
	struct fixture *f = *state;
	uint32_t pre_ids[3 * BPC], load_ids[3 * BPC], new_ids[5 * BPC + 2], back_ids[8 * BPC];
	uint8_t *pre = saved_chain(f, 3, pre_ids);
	uint8_t keys[8 * KB];
	struct tutti_pipeline *p = pipeline(f, 0, 64ull << 20, NULL);
	struct tutti_request load, save, all;
	struct tutti_step step = {.size = sizeof(step),
	                          .nr_loads = 1,
	                          .loads = &load,
	                          .nr_saves = 1,
	                          .saves = &save,
	                          .compute_tokens = 5 * 32};
	struct tutti_pipeline_stats stats = {.size = sizeof(stats)};
	struct tutti_step_result res;
	int32_t status[8];
	int64_t id;

	/* A request whose first 3 chunks are cached and whose next 5 (the last one partial:
	 * 2 blocks) it computes: load 3, save 5. */
	memcpy(keys, pre, 3 * KB);
	t_rng_fill(&f->r, keys + 3 * KB, 5 * KB);
	t_random_distinct(&f->r, load_ids, 3 * BPC, NR_BLOCKS);
	t_random_distinct(&f->r, new_ids, 4 * BPC + 2, NR_BLOCKS);
	load = t_request(keys, 3, 0, 0, load_ids, 3 * BPC);
	save = t_request(keys, 8, 0, 0, new_ids, 4 * BPC + 2);
	save.first_chunk = 3;
	/* The new KV "computed" into dst's blocks. */
	for (uint32_t b = 0; b < 4 * BPC + 2; b++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			uint8_t block[8192];

			t_kv_read_block(f->src, l, b, block);
			t_kv_write_block(f->dst, l, new_ids[b], block);
		}
	}
	id = tutti_pipeline_begin_step(p, &step);
	assert_true(id > 0);
	run_layers(p, id, &res, status, NULL);
	assert_int_equal(res.load_chunks, 3);
	assert_int_equal(res.saves_staged, 5);
	assert_int_equal(res.saves_skipped, 0);
	assert_int_equal(tutti_pipeline_flush(p), 0);
	assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
	assert_int_equal(stats.saves_written, 5);
	assert_int_equal(stats.save_errors, 0);
	assert_true(stats.writes_in_slack >= 1);
	assert_true(stats.write_bytes_per_s > 0);
	/* The whole chain is stored and reads back bit-exact. */
	assert_int_equal(tutti_store_lookup(f->st, keys, 8, NULL), 8);
	memcpy(back_ids, pre_ids, sizeof(pre_ids));
	for (uint32_t b = 0; b < 4 * BPC + 2; b++) {
		back_ids[3 * BPC + b] = b; /* src's blocks 0.. hold the new KV */
	}
	{
		struct t_kv *chk;
		uint32_t chk_ids[8 * BPC];

		assert_int_equal(t_kv_alloc(&f->geo, T_LAYOUT_CROSS_LAYER, NR_BLOCKS, &chk), 0);
		for (uint32_t b = 0; b < 7 * BPC + 2; b++) {
			chk_ids[b] = b;
		}
		all = t_request(keys, 8, 0, 0, chk_ids, 7 * BPC + 2);
		assert_int_equal(tutti_store_load(f->st, chk->kv, &all, 1, 0, LAYERS, status), 8);
		for (uint32_t b = 0; b < 7 * BPC + 2; b++) {
			for (uint32_t l = 0; l < LAYERS; l++) {
				assert_true(t_kv_block_equal(f->src, back_ids[b], chk, b, l));
			}
		}
		t_kv_free(chk);
	}
	tutti_pipeline_destroy(p);
	free(pre);
	assert_int_equal(f->rec.nr_err, 0);
}

static void
test_pipeline_full_staging_skips_chunks_without_blocking(void **state)
{
	struct fixture *f = *state;
	uint64_t chunk = (uint64_t)LAYERS * BPC * 8192; /* 4 KiB blocks, K and V: 8 KiB? */
	struct tutti_pipeline *p;
	uint8_t keys[6 * KB];
	uint32_t ids[6 * BPC];
	struct tutti_request save;
	struct tutti_step step = {.size = sizeof(step), .nr_saves = 1, .saves = &save};
	struct tutti_pipeline_stats stats = {.size = sizeof(stats)};
	struct tutti_step_result res;
	int64_t id;

	chunk = (uint64_t)LAYERS * BPC * tutti_geometry_layer_block_bytes(&f->geo);
	p = pipeline(f, 0, 2 * chunk + chunk / 2, NULL); /* room for two chunks */
	t_rng_fill(&f->r, keys, sizeof(keys));
	t_random_distinct(&f->r, ids, 6 * BPC, NR_BLOCKS);
	save = t_request(keys, 6, 0, 0, ids, 6 * BPC);
	id = tutti_pipeline_begin_step(p, &step);
	assert_true(id > 0);
	run_layers(p, id, &res, NULL, NULL);
	assert_int_equal(res.saves_staged, 2);
	assert_int_equal(res.saves_skipped, 4);
	assert_int_equal(res.stall_ns, 0);
	assert_int_equal(tutti_pipeline_flush(p), 0);
	assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
	assert_int_equal(stats.saves_written, 2);
	assert_int_equal(stats.saves_skipped, 4);
	assert_true(stats.staging_bytes >= 2 * chunk);
	/* What was stored is the head of the chain. */
	assert_int_equal(tutti_store_lookup(f->st, keys, 6, NULL), 2);
	/* The staging is free again: the next step stages its chunks. */
	t_rng_fill(&f->r, keys, sizeof(keys));
	save = t_request(keys, 2, 0, 0, ids, 2 * BPC);
	id = tutti_pipeline_begin_step(p, &step);
	run_layers(p, id, &res, NULL, NULL);
	assert_int_equal(res.saves_staged, 2);
	tutti_pipeline_destroy(p); /* writes what is staged */
	assert_int_equal(tutti_store_lookup(f->st, keys, 2, NULL), 2);
}

static void
test_pipeline_missing_chunks_are_per_chunk_load_errors(void **state)
{
	struct fixture *f = *state;
	uint32_t src_ids[2 * BPC], dst_ids[4 * BPC];
	uint8_t *stored = saved_chain(f, 2, src_ids);
	uint8_t keys[4 * KB];
	struct tutti_pipeline *p = pipeline(f, 0, 0, NULL);
	struct tutti_request r;
	struct tutti_step step = {.size = sizeof(step), .nr_loads = 1, .loads = &r};
	struct tutti_step_result res;
	int32_t status[4];
	int64_t id;

	memcpy(keys, stored, 2 * KB);
	t_rng_fill(&f->r, keys + 2 * KB, 2 * KB); /* chunks 2 and 3 were never stored */
	t_random_distinct(&f->r, dst_ids, 4 * BPC, NR_BLOCKS);
	r = t_request(keys, 4, 0, 0, dst_ids, 4 * BPC);
	id = tutti_pipeline_begin_step(p, &step);
	run_layers(p, id, &res, status, NULL);
	assert_int_equal(res.load_chunks, 2);
	assert_int_equal(res.load_errors, 2);
	assert_int_equal(status[0], 0);
	assert_int_equal(status[1], 0);
	assert_int_equal(status[2], -ENOENT);
	assert_int_equal(status[3], -ENOENT);
	tutti_pipeline_destroy(p);
	free(stored);
}

#define VICTIM_TEXT "a file worth keeping\n"

/* tmp/victim holding VICTIM_TEXT, and a symbolic link to it at \p path, or (\p tmp_name) at
 * the name "\p path.tmp.<pid>" that a writer could once be predicted to use. */
static void
plant_link_to_victim(struct fixture *f, const char *path, bool tmp_name)
{
	char *victim = t_path_join(f->tmp, "victim"), link_path[4096];
	FILE *fp = fopen(victim, "w");

	assert_non_null(fp);
	fputs(VICTIM_TEXT, fp);
	fclose(fp);
	if (tmp_name) {
		snprintf(link_path, sizeof(link_path), "%s.tmp.%ld", path, (long)getpid());
	} else {
		snprintf(link_path, sizeof(link_path), "%s", path);
	}
	unlink(link_path);
	assert_int_equal(symlink(victim, link_path), 0);
	free(victim);
}

static void
assert_victim_untouched(struct fixture *f)
{
	char *victim = t_path_join(f->tmp, "victim"), buf[64] = {0};
	FILE *fp = fopen(victim, "r");

	assert_non_null(fp);
	assert_true(fread(buf, 1, sizeof(buf) - 1, fp) > 0);
	fclose(fp);
	assert_string_equal(buf, VICTIM_TEXT);
	free(victim);
}

static void
test_pipeline_profile_round_trips_and_sets_the_window(void **state)
{
	struct fixture *f = *state;
	char *path = t_path_join(f->tmp, "profile");
	double ns[LAYERS], back[LAYERS];
	struct tutti_profile prof = {.size = sizeof(prof),
	                             .nr_layers = LAYERS,
	                             .read_bytes_per_s = 1e12,
	                             .write_bytes_per_s = 5e11,
	                             .layer_ns_per_token = ns};
	struct tutti_profile got = {
	    .size = sizeof(got), .nr_layers = LAYERS, .layer_ns_per_token = back};
	struct tutti_pipeline_stats stats = {.size = sizeof(stats)};
	uint32_t src_ids[2 * BPC], dst_ids[2 * BPC];
	uint8_t *keys = saved_chain(f, 2, src_ids);
	struct tutti_request r;
	struct tutti_step step = {
	    .size = sizeof(step), .nr_loads = 1, .loads = &r, .compute_tokens = 1000};
	struct tutti_pipeline *p;
	struct tutti_step_result res;
	FILE *fp;
	int64_t id;

	for (uint32_t l = 0; l < LAYERS; l++) {
		ns[l] = 100.0 + l;
	}
	/* A link planted where a temporary name could be guessed receives nothing. */
	plant_link_to_victim(f, path, true);
	assert_int_equal(tutti_profile_write(path, &prof), 0);
	assert_victim_untouched(f);
	assert_int_equal(tutti_profile_read(path, &got), 0);
	assert_true(got.read_bytes_per_s == 1e12 && got.write_bytes_per_s == 5e11);
	for (uint32_t l = 0; l < LAYERS; l++) {
		assert_true(back[l] == ns[l]);
	}
	/* Fast storage against 100 us of compute per layer: a window of ceil(io/compute) + 2. */
	p = pipeline(f, 0, 0, path);
	t_random_distinct(&f->r, dst_ids, 2 * BPC, NR_BLOCKS);
	r = t_request(keys, 2, 0, 0, dst_ids, 2 * BPC);
	id = tutti_pipeline_begin_step(p, &step);
	assert_int_equal(tutti_pipeline_get_stats(p, &stats), 0);
	assert_int_equal(stats.readahead, 3);
	run_layers(p, id, &res, NULL, NULL);
	assert_int_equal(res.readahead, 3);
	assert_int_equal(res.load_chunks, 2);
	tutti_pipeline_destroy(p);
	/* Profiles that do not parse, or are for more layers than the model has. */
	got.nr_layers = LAYERS / 2;
	assert_int_equal(tutti_profile_read(path, &got), -EBADMSG);
	got.nr_layers = LAYERS;
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("tutti-profile 1\nread_bytes_per_s fast\n", fp);
	fclose(fp);
	assert_int_equal(tutti_profile_read(path, &got), -EBADMSG);
	fp = fopen(path, "w");
	fputs("something else\n", fp);
	fclose(fp);
	assert_int_equal(tutti_profile_read(path, &got), -EBADMSG);
	{
		struct tutti_pipeline_opts o;
		struct tutti_pipeline *bad = NULL;

		tutti_pipeline_opts_init(&o);
		o.profile_path = path;
		assert_int_equal(tutti_pipeline_create(f->st, f->dst->kv, &o, &bad), -EBADMSG);
		assert_null(bad);
		o.profile_path = "/nonexistent/profile";
		assert_int_equal(tutti_pipeline_create(f->st, f->dst->kv, &o, &bad), -ENOENT);
	}
	free(path);
	free(keys);
}

static void
test_pipeline_writes_a_chrome_trace(void **state)
{
	struct fixture *f = *state;
	char *path = t_path_join(f->tmp, "trace.json");
	uint32_t src_ids[2 * BPC], dst_ids[2 * BPC];
	uint8_t *keys = saved_chain(f, 2, src_ids);
	struct tutti_pipeline *p = pipeline(f, 0, 0, NULL);
	struct tutti_request r;
	struct tutti_step step = {.size = sizeof(step), .nr_loads = 1, .loads = &r};
	struct tutti_step_result res;
	char buf[1 << 16];
	size_t n;
	FILE *fp;

	assert_int_equal(tutti_pipeline_write_trace(p, path), -ENODATA);
	t_random_distinct(&f->r, dst_ids, 2 * BPC, NR_BLOCKS);
	r = t_request(keys, 2, 0, 0, dst_ids, 2 * BPC);
	run_layers(p, tutti_pipeline_begin_step(p, &step), &res, NULL, NULL);
	assert_int_equal(tutti_pipeline_write_trace(p, path), 0);
	fp = fopen(path, "r");
	assert_non_null(fp);
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "\"traceEvents\""));
	assert_non_null(strstr(buf, "\"read L0\""));
	assert_non_null(strstr(buf, "\"read L7\""));
	assert_non_null(strstr(buf, "\"stall L7\""));
	assert_non_null(strstr(buf, "\"compute L6\""));
	/* A symbolic link at the path is refused, not written through. */
	plant_link_to_victim(f, path, false);
	assert_int_equal(tutti_pipeline_write_trace(p, path), -ELOOP);
	assert_victim_untouched(f);
	tutti_pipeline_destroy(p);
	free(path);
	free(keys);
}

/* Regression (issue 48): a FIFO as the profile blocked tutti_pipeline_create in fopen until a
 * writer came, and as the trace blocked the write until a reader came. A FIFO, a device or a
 * directory is refused at once, logged with its path; the alarm fails a regression that hangs. */
static void
test_pipeline_refuses_a_profile_or_trace_that_is_not_a_regular_file(void **state)
{
	struct fixture *f = *state;
	char *fifo = t_path_join(f->tmp, "fifo"), *dir = t_path_join(f->tmp, "dir");
	const char *paths[3] = {fifo, "/dev/null", dir};
	uint32_t src_ids[2 * BPC], dst_ids[2 * BPC];
	uint8_t *keys = saved_chain(f, 2, src_ids);
	struct tutti_request r;
	struct tutti_step step = {.size = sizeof(step), .nr_loads = 1, .loads = &r};
	struct tutti_step_result res;
	struct tutti_pipeline_opts o;
	struct tutti_pipeline *p = NULL;
	struct stat st;

	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(mkdir(dir, 0700), 0);
	alarm(20);
	for (int i = 0; i < 3; i++) {
		tutti_pipeline_opts_init(&o);
		o.profile_path = paths[i];
		t_log_reset(&f->rec);
		assert_int_equal(tutti_pipeline_create(f->st, f->dst->kv, &o, &p), -EINVAL);
		assert_null(p);
		assert_true(t_log_contains(&f->rec, paths[i]));
	}
	p = pipeline(f, 0, 0, NULL);
	t_random_distinct(&f->r, dst_ids, 2 * BPC, NR_BLOCKS);
	r = t_request(keys, 2, 0, 0, dst_ids, 2 * BPC);
	run_layers(p, tutti_pipeline_begin_step(p, &step), &res, NULL, NULL);
	for (int i = 0; i < 3; i++) {
		t_log_reset(&f->rec);
		assert_int_equal(tutti_pipeline_write_trace(p, paths[i]), -EINVAL);
		assert_true(t_log_contains(&f->rec, paths[i]));
	}
	alarm(0);
	assert_int_equal(stat(fifo, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	tutti_pipeline_destroy(p);
	free(keys);
	free(dir);
	free(fifo);
}

static void
test_pipeline_refuses_bad_calls(void **state)
{
	struct fixture *f = *state;
	struct tutti_pipeline_opts o;
	struct tutti_pipeline *p = NULL;
	struct t_kv *other;
	struct tutti_geometry g = geometry();
	uint8_t keys[2 * KB] = {0};
	uint32_t ids[2 * BPC] = {0};
	struct tutti_request r = t_request(keys, 2, 0, 0, ids, 2 * BPC);
	struct tutti_step step = {.size = sizeof(step), .nr_loads = 1, .loads = &r};
	struct tutti_step_result res = {.size = sizeof(res)};

	tutti_pipeline_opts_init(&o);
	assert_int_equal(tutti_pipeline_create(NULL, f->dst->kv, &o, &p), -EINVAL);
	assert_int_equal(tutti_pipeline_create(f->st, NULL, &o, &p), -EINVAL);
	o.readahead_layers = LAYERS + 1;
	assert_int_equal(tutti_pipeline_create(f->st, f->dst->kv, &o, &p), -EINVAL);
	tutti_pipeline_opts_init(&o);
	o.size = 8;
	assert_int_equal(tutti_pipeline_create(f->st, f->dst->kv, &o, &p), -EINVAL);
	g.nr_layers = LAYERS / 2;
	assert_int_equal(t_kv_alloc(&g, T_LAYOUT_KV_FIRST, 16, &other), 0);
	assert_int_equal(tutti_pipeline_create(f->st, other->kv, NULL, &p), -EINVAL);
	t_kv_free(other);

	p = pipeline(f, 0, 0, NULL);
	assert_int_equal(tutti_pipeline_wait_layer(p, 0), -EINVAL); /* no step */
	assert_int_equal(tutti_pipeline_end_step(p), -EINVAL);      /* no step */
	ids[3] = NR_BLOCKS;                                         /* out of range */
	assert_int_equal(tutti_pipeline_begin_step(p, &step), -EINVAL);
	ids[3] = 3;
	r.nr_blocks = 2 * BPC + 1; /* more blocks than the chunks hold */
	assert_int_equal(tutti_pipeline_begin_step(p, &step), -EINVAL);
	r.nr_blocks = 2 * BPC;
	step.size = 4;
	assert_int_equal(tutti_pipeline_begin_step(p, &step), -EINVAL);
	step.size = sizeof(step);
	assert_true(tutti_pipeline_begin_step(p, &step) > 0);
	assert_int_equal(tutti_pipeline_begin_step(p, &step), -EINVAL); /* one at a time */
	assert_int_equal(tutti_pipeline_wait_layer(p, 1), -EINVAL);     /* out of order */
	assert_int_equal(tutti_pipeline_wait_layer(p, 0), 0);
	assert_int_equal(tutti_pipeline_end_step(p), -EINVAL); /* layers not waited for */
	for (uint32_t l = 1; l < LAYERS; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_wait_layer(p, LAYERS), -EINVAL);
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	assert_int_equal(tutti_pipeline_step_result(p, 99, &res, NULL, NULL), -ENOENT);
	res.size = 0;
	assert_int_equal(tutti_pipeline_step_result(p, 1, &res, NULL, NULL), -EINVAL);
	tutti_pipeline_destroy(p);
	tutti_pipeline_destroy(NULL);
}

/*
 * A step's load is one op across all its layers: a chunk damaged on disk (layer 2 of the third
 * of five) fails alone with -EBADMSG, is dropped from the store when the op closes, and its
 * neighbours land bit for bit; saves and loads from the caller's thread run between the op's
 * layers; and a pipeline destroyed in the middle of a step still closes the op (the store
 * counts its loads, nothing stays pinned).
 */
static void
test_pipeline_damaged_chunk_fails_alone_and_store_calls_interleave(void **state)
{
	struct fixture *f = *state;
	uint32_t src_ids[5 * BPC], dst_ids[5 * BPC], more_ids[2 * BPC];
	uint8_t *keys = saved_chain(f, 5, src_ids), *more;
	char *dir = t_path_join(f->tmp, "store"), *data = t_data_path(dir);
	struct tutti_pipeline *p = pipeline(f, 1, 0, NULL);
	struct tutti_request r, again;
	struct tutti_step step = {.size = sizeof(step), .nr_loads = 1, .loads = &r};
	struct tutti_step_result res;
	struct tutti_stats st = {.size = sizeof(st)};
	int32_t status[5];
	uint32_t slot = t_key_slot(data, &f->geo, keys + 2 * KB, KB);

	assert_int_equal(t_disk_flip_bit(data, t_object_off(&f->geo, slot, 2) + 17, 3), 0);
	t_random_distinct(&f->r, dst_ids, 5 * BPC, NR_BLOCKS);
	r = t_request(keys, 5, 0, 0, dst_ids, 5 * BPC);
	assert_true(tutti_pipeline_begin_step(p, &step) > 0);
	assert_int_equal(tutti_pipeline_wait_layer(p, 0), 0);
	/* Between layers: a new chain saved, the undamaged head of the prefix loaded elsewhere. */
	more = saved_chain(f, 2, more_ids);
	again = t_request(keys, 2, 0, 0, more_ids, 2 * BPC);
	assert_int_equal(tutti_store_load(f->st, f->dst->kv, &again, 1, 0, LAYERS, NULL), 2);
	for (uint32_t l = 1; l < LAYERS; l++) {
		assert_int_equal(tutti_pipeline_wait_layer(p, l), 0);
	}
	assert_int_equal(tutti_pipeline_end_step(p), 0);
	res.size = sizeof(res);
	for (int i = 0; tutti_pipeline_step_result(p, 1, &res, status, NULL) == -EAGAIN; i++) {
		assert_true(i < 5000);
		usleep(1000);
	}
	assert_int_equal(res.load_chunks, 4);
	assert_int_equal(res.load_errors, 1);
	for (uint32_t i = 0; i < 5; i++) {
		assert_int_equal(status[i], i == 2 ? -EBADMSG : 0);
	}
	for (uint32_t c = 0; c < 5; c++) {
		for (uint32_t b = c * BPC; c != 2 && b < (c + 1) * BPC; b++) {
			for (uint32_t l = 0; l < LAYERS; l++) {
				assert_true(
				    t_kv_block_equal(f->src, src_ids[b], f->dst, dst_ids[b], l));
			}
		}
	}
	for (uint32_t b = 0; b < 2 * BPC; b++) {
		for (uint32_t l = 0; l < LAYERS; l++) {
			assert_true(t_kv_block_equal(f->src, src_ids[b], f->dst, more_ids[b], l));
		}
	}
	assert_int_equal(tutti_store_get_stats(f->st, &st), 0);
	assert_int_equal(st.load_corrupt, 1);
	assert_int_equal(tutti_store_lookup(f->st, keys, 5, NULL), 2); /* stops at the damage */

	/* Destroyed mid-step: the op opened for this step is closed all the same. */
	r = t_request(keys, 2, 0, 0, dst_ids, 2 * BPC);
	assert_true(tutti_pipeline_begin_step(p, &step) > 0);
	assert_int_equal(tutti_pipeline_wait_layer(p, 0), 0);
	tutti_pipeline_destroy(p);
	assert_int_equal(tutti_store_get_stats(f->st, &st), 0);
	assert_int_equal(st.load_chunks, 4 + 2 + 2);
	{
		int32_t present[2];

		assert_int_equal(tutti_store_save(f->st, f->src->kv, &again, 1, present), 0);
		assert_int_equal(present[0], 1);
		assert_int_equal(present[1], 1);
	}
	free(keys);
	free(more);
	free(data);
	free(dir);
	assert_true(f->rec.nr_err >= 1); /* the damaged chunk was logged */
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_pipeline_prefix_loads_bit_exact_layer_by_layer),
	    T(test_pipeline_readahead_window_holds_reads_until_compute_reaches_them),
	    T(test_pipeline_saves_are_written_in_slack_and_read_back),
	    T(test_pipeline_full_staging_skips_chunks_without_blocking),
	    T(test_pipeline_missing_chunks_are_per_chunk_load_errors),
	    T(test_pipeline_damaged_chunk_fails_alone_and_store_calls_interleave),
	    T(test_pipeline_profile_round_trips_and_sets_the_window),
	    T(test_pipeline_writes_a_chrome_trace),
	    T(test_pipeline_refuses_bad_calls),
	    T(test_pipeline_refuses_a_profile_or_trace_that_is_not_a_regular_file),
	};

	return t_run_per_engine("pipeline", tests, sizeof(tests) / sizeof(tests[0]), true,
	                        &g_engine);
}
