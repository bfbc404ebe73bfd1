/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/engine/engine.c, the engine-independent wrapper, over a fake engine: argument
 * checks at create, -EAGAIN past the depth, in-flight accounting, reap's min clamp, counters,
 * engine lookup by kind and tutti_engine_parse(); the engines and their options as the public
 * API lists them (tutti_engine_count/info/option), and the one parser of engine_opts
 * (src/engine/options.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/engine_impl.h"
#include "engine/gpu_uring/gpu_uring.h"
#include "engine/gpu_uring/proto.h"
#include "tutti/store.h"

/* A fake engine: completes everything submitted, in order, when reaped. */
struct fake {
	struct tt_ioq base;
	uint64_t tags[64];
	uint32_t nr_done;
	uint32_t reap_calls;
	uint32_t last_min;
	int submit_rc;
};

static int
fake_create(const struct tt_ioq_conf *conf, struct tt_ioq **out)
{
	struct fake *f = calloc(1, sizeof(*f));

	if (f == NULL) {
		return -ENOMEM;
	}
	*out = &f->base;
	return 0;
}

static void
fake_destroy(struct tt_ioq *e)
{
	free(e);
}

static int
fake_submit(struct tt_ioq *e, const struct tt_io *ios, uint32_t nr)
{
	struct fake *f = (struct fake *)e;

	if (f->submit_rc < 0) {
		return f->submit_rc;
	}
	for (uint32_t i = 0; i < nr; i++) {
		f->tags[f->nr_done++] = ios[i].tag;
	}
	return 0;
}

static int
fake_reap(struct tt_ioq *e, struct tt_io_done *out, uint32_t max, uint32_t min)
{
	struct fake *f = (struct fake *)e;
	uint32_t n = f->nr_done < max ? f->nr_done : max;

	f->reap_calls++;
	f->last_min = min;
	assert_true(min <= f->nr_done); /* the wrapper never asks for more than in flight */
	for (uint32_t i = 0; i < n; i++) {
		out[i] = (struct tt_io_done){.tag = f->tags[i], .res = 4096};
	}
	memmove(f->tags, f->tags + n, (f->nr_done - n) * sizeof(f->tags[0]));
	f->nr_done -= n;
	return (int)n;
}

static const struct tt_ioq_ops fake_ops = {
    .name = "fake",
    .create = fake_create,
    .destroy = fake_destroy,
    .submit = fake_submit,
    .reap = fake_reap,
};

static int g_fd = 0;
static uint8_t g_buf[4096];

static struct tt_ioq_conf
conf(uint32_t depth)
{
	return (struct tt_ioq_conf){.fds = &g_fd, .nr_fds = 1, .depth = depth, .max_iov = 4};
}

static struct tt_io
io(uint64_t tag)
{
	return (struct tt_io){.tag = tag, .buf = g_buf, .len = 4096, .op = TT_IO_READ};
}

static void
test_engine_create_rejects_bad_conf(void **state)
{
	struct tt_ioq_conf c = conf(4);
	struct tt_ioq *e = (struct tt_ioq *)(uintptr_t)1;

	assert_int_equal(tt_ioq_create(NULL, &c, &e), -EINVAL);
	assert_int_equal(tt_ioq_create(&fake_ops, NULL, &e), -EINVAL);
	assert_int_equal(tt_ioq_create(&fake_ops, &c, NULL), -EINVAL);
	c.depth = 0;
	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), -EINVAL);
	c = conf(4);
	c.nr_fds = 0;
	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), -EINVAL);
	c.nr_fds = UINT16_MAX + 1u; /* a file index is 16 bits */
	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), -EINVAL);
	c = conf(4);
	c.max_iov = IOV_MAX + 1;
	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), -EINVAL);
	c = conf(4);
	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), 0);
	assert_ptr_equal(e->ops, &fake_ops);
	assert_int_equal(e->depth, 4);
	assert_int_equal(e->inflight, 0);
	tt_ioq_destroy(e);
	tt_ioq_destroy(NULL);
}

static void
test_engine_submit_past_depth_returns_eagain(void **state)
{
	struct tt_ioq_conf c = conf(4);
	struct tt_io ios[5] = {io(0), io(1), io(2), io(3), io(4)};
	struct tt_io_done d[8];
	struct tt_ioq *e;

	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), 0);
	assert_int_equal(tt_ioq_submit(e, ios, 5), -EAGAIN);
	assert_int_equal(e->inflight, 0);
	assert_int_equal(tt_ioq_submit(e, ios, 3), 0);
	assert_int_equal(e->inflight, 3);
	assert_int_equal(tt_ioq_submit(e, ios + 3, 2), -EAGAIN);
	assert_int_equal(tt_ioq_submit(e, ios + 3, 1), 0);
	assert_int_equal(tt_ioq_submit(e, ios + 4, 1), -EAGAIN);
	assert_int_equal(e->inflight, 4);
	assert_int_equal(tt_ioq_reap(e, d, 2, 1), 2);
	assert_int_equal(d[0].tag, 0);
	assert_int_equal(d[1].tag, 1);
	assert_int_equal(e->inflight, 2);
	assert_int_equal(tt_ioq_submit(e, ios + 4, 1), 0);
	assert_int_equal(tt_ioq_reap(e, d, 8, 8), 3);
	assert_int_equal(e->inflight, 0);
	assert_int_equal(e->nr_ios, 5);
	assert_int_equal(e->nr_submits, 3);
	tt_ioq_destroy(e);
}

static void
test_engine_failed_submit_changes_no_accounting(void **state)
{
	struct tt_ioq_conf c = conf(4);
	struct tt_io ios[2] = {io(0), io(1)};
	struct tt_ioq *e;

	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), 0);
	((struct fake *)e)->submit_rc = -EIO;
	assert_int_equal(tt_ioq_submit(e, ios, 2), -EIO);
	assert_int_equal(e->inflight, 0);
	assert_int_equal(e->nr_ios, 0);
	assert_int_equal(e->nr_submits, 0);
	assert_int_equal(tt_ioq_submit(e, ios, 0), 0); /* an empty batch is not a submission */
	assert_int_equal(e->nr_submits, 0);
	tt_ioq_destroy(e);
}

static void
test_engine_reap_clamps_min_and_skips_idle_engine(void **state)
{
	struct tt_ioq_conf c = conf(8);
	struct tt_io ios[2] = {io(7), io(8)};
	struct tt_io_done d[8];
	struct tt_ioq *e;
	struct fake *f;

	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), 0);
	f = (struct fake *)e;
	/* Nothing in flight: returns at once without asking the engine (which could block). */
	assert_int_equal(tt_ioq_reap(e, d, 8, 8), 0);
	assert_int_equal(f->reap_calls, 0);
	assert_int_equal(tt_ioq_submit(e, ios, 2), 0);
	assert_int_equal(tt_ioq_reap(e, d, 0, 1), 0);
	assert_int_equal(tt_ioq_reap(e, d, 8, 5), 2);
	assert_int_equal(f->last_min, 2);
	assert_int_equal(d[0].tag, 7);
	assert_int_equal(d[1].tag, 8);
	tt_ioq_destroy(e);
}

static void
test_engine_submit_rejects_malformed_ios_without_queuing_any(void **state)
{
	struct tt_ioq_conf c = conf(8);
	struct iovec iov[5] = {
	    {g_buf, 4096}, {g_buf, 4096}, {g_buf, 4096}, {g_buf, 4096}, {g_buf, 4096}};
	struct tt_io ios[2] = {io(1), io(2)};
	struct tt_ioq *e;

	assert_int_equal(tt_ioq_create(&fake_ops, &c, &e), 0);
	ios[1].len = 0;
	assert_int_equal(tt_ioq_submit(e, ios, 2), -EINVAL);
	ios[1] = io(2);
	ios[1].buf = NULL;
	assert_int_equal(tt_ioq_submit(e, ios, 2), -EINVAL);
	ios[1].nr_iov = 2; /* a vector without its array */
	assert_int_equal(tt_ioq_submit(e, ios, 2), -EINVAL);
	ios[1].iov = iov;
	ios[1].nr_iov = 5; /* above max_iov */
	ios[1].len = 5 * 4096;
	assert_int_equal(tt_ioq_submit(e, ios, 2), -EINVAL);
	assert_int_equal(e->inflight, 0);
	assert_int_equal(((struct fake *)e)->nr_done, 0);
	ios[1].nr_iov = 4;
	ios[1].len = 4 * 4096;
	assert_int_equal(tt_ioq_submit(e, ios, 2), 0);
	assert_int_equal(e->inflight, 2);
	tt_ioq_destroy(e);
}

static void
test_io_state_advance_continues_a_vector_after_short_transfers(void **state)
{
	static uint8_t mem[4][8192];
	struct iovec own[4];
	const struct iovec iov[3] = {{mem[0], 4096}, {mem[1], 8192}, {mem[2], 4096}};
	struct tt_io v = {.iov = iov, .nr_iov = 3, .len = 16384};
	struct tt_io_state st = {.iov = own};

	tt_io_state_start(&st, &v);
	assert_int_equal(st.nr_iov, 3);
	assert_int_equal(st.done, 0);
	assert_false(tt_io_state_advance(&st, 4096)); /* exactly the first entry */
	assert_int_equal(st.nr_iov, 2);
	assert_ptr_equal(st.iov[0].iov_base, mem[1]);
	assert_int_equal(st.iov[0].iov_len, 8192);
	assert_false(tt_io_state_advance(&st, 6000)); /* into the middle of the second */
	assert_int_equal(st.nr_iov, 2);
	assert_ptr_equal(st.iov[0].iov_base, mem[1] + 6000);
	assert_int_equal(st.iov[0].iov_len, 2192);
	assert_ptr_equal(st.iov[1].iov_base, mem[2]);
	assert_false(tt_io_state_advance(&st, 2192 + 100)); /* across a boundary */
	assert_int_equal(st.nr_iov, 1);
	assert_ptr_equal(st.iov[0].iov_base, mem[2] + 100);
	assert_int_equal(st.iov[0].iov_len, 3996);
	assert_int_equal(st.done, 12388);
	assert_true(tt_io_state_advance(&st, 3996));
	assert_int_equal(st.done, 16384);
	/* The caller's vector was copied, never modified. */
	assert_ptr_equal(iov[1].iov_base, mem[1]);
	assert_int_equal(iov[1].iov_len, 8192);

	/* A plain buffer is a vector of one. */
	v = (struct tt_io){.buf = mem[3], .len = 8192};
	tt_io_state_start(&st, &v);
	assert_int_equal(st.nr_iov, 1);
	assert_false(tt_io_state_advance(&st, 512));
	assert_ptr_equal(st.iov[0].iov_base, mem[3] + 512);
	assert_true(tt_io_state_advance(&st, 8192 - 512));
}

/* Option \p name of \p engine, or fail. */
static struct tutti_engine_option
option_named(uint32_t engine, const char *name)
{
	struct tutti_engine_info info = {.size = sizeof(info)};
	struct tutti_engine_option o = {.size = sizeof(o)};

	assert_int_equal(tutti_engine_info(engine, &info), 0);
	for (uint32_t i = 0; i < info.nr_options; i++) {
		assert_int_equal(tutti_engine_option(engine, i, &o), 0);
		if (strcmp(o.name, name) == 0) {
			return o;
		}
	}
	fail_msg("engine %s has no option %s", info.name, name);
	return o;
}

/* \p name of \p engine is a choice of exactly the three \p names, in order, the first the
 * default. */
static void
expect_choices(uint32_t engine, const char *name, const char *names[3])
{
	struct tutti_engine_option o = option_named(engine, name);

	assert_int_equal(o.kind, TUTTI_ENGINE_OPTION_CHOICE);
	assert_int_equal(o.nr_choices, 3);
	assert_int_equal(o.min, 0);
	assert_int_equal(o.max, 2);
	assert_int_equal(o.def, 0);
	for (uint32_t k = 0; k < 3; k++) {
		assert_string_equal(o.choices[k], names[k]);
	}
}

static void
test_engine_kinds_and_names(void **state)
{
	/* The table: one entry per enum tutti_engine, named as the parser spells it. */
	assert_ptr_equal(tt_engine_ops_for(TUTTI_ENGINE_URING), &tt_engine_uring);
	assert_ptr_equal(tt_engine_ops_for(TUTTI_ENGINE_POSIX), &tt_engine_posix);
	assert_ptr_equal(tt_engine_ops_for(TUTTI_ENGINE_GPU_URING), &tt_engine_gpu_uring);
	assert_ptr_equal(tt_engine_ops_for(TUTTI_ENGINE_GDS), &tt_engine_gds);
	assert_ptr_equal(tt_engine_ops_for(TUTTI_ENGINE_AUTO), &tt_engine_auto);
	assert_null(tt_engine_ops_for(TUTTI_ENGINE_AUTO + 1));
	assert_null(tt_engine_ops_for(UINT32_MAX));
	for (uint32_t k = TUTTI_ENGINE_URING; k <= TUTTI_ENGINE_AUTO; k++) {
		assert_int_equal(tt_engine_ops_for(k)->kind, k);
		assert_int_equal(tutti_engine_parse(tt_engine_kind_name(k)), (int)k);
	}
	assert_null(tt_engine_kind_name(TUTTI_ENGINE_AUTO + 1));
	assert_string_equal(tutti_engine_name(TUTTI_ENGINE_AUTO), "auto");
	assert_null(tutti_engine_name(UINT32_MAX));
	assert_int_equal(tutti_engine_parse("uring"), TUTTI_ENGINE_URING);
	assert_int_equal(tutti_engine_parse("posix"), TUTTI_ENGINE_POSIX);
	assert_int_equal(tutti_engine_parse("gpu-uring"), TUTTI_ENGINE_GPU_URING);
	assert_int_equal(tutti_engine_parse("gds"), TUTTI_ENGINE_GDS);
	assert_int_equal(tutti_engine_parse("auto"), TUTTI_ENGINE_AUTO);
	assert_int_equal(tutti_engine_parse("io_uring"), -EINVAL);
	assert_int_equal(tutti_engine_parse(""), -EINVAL);
	assert_int_equal(tutti_engine_parse("POSIX"), -EINVAL);
	assert_int_equal(tutti_engine_parse(NULL), -EINVAL);
	/* Who issues gpu-uring's I/O, and how its loads cross into HBM: the choices of its options
	 * submit and copy, a value its name's index, auto the default. */
	expect_choices(TUTTI_ENGINE_GPU_URING, "submit",
	               (const char *[]){"auto", "sqpoll", "host"});
	expect_choices(TUTTI_ENGINE_GPU_URING, "copy", (const char *[]){"auto", "sm", "dma"});
	expect_choices(TUTTI_ENGINE_AUTO, "submit", (const char *[]){"auto", "sqpoll", "host"});
	expect_choices(TUTTI_ENGINE_AUTO, "copy", (const char *[]){"auto", "sm", "dma"});
}

/* Every engine is listed with its name, a description and its options, each option with a help
 * line and a default it accepts; asking past the end, or with a wrong size, is refused. */
static void
test_engine_info_lists_every_engine_and_its_options(void **state)
{
	static const struct {
		uint32_t engine;
		const char *options;
	} want[] = {
	    {TUTTI_ENGINE_URING, ""},
	    {TUTTI_ENGINE_POSIX, "threads"},
	    {TUTTI_ENGINE_GPU_URING, "workers sms submit copy"},
	    {TUTTI_ENGINE_GDS, ""},
	    {TUTTI_ENGINE_AUTO, "workers sms submit copy threads"},
	};
	struct tutti_engine_info info = {.size = sizeof(info)};
	struct tutti_engine_option o = {.size = sizeof(o)};

	assert_int_equal(tutti_engine_count(), 5);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char names[128] = "";
		size_t used = 0;

		assert_int_equal(tutti_engine_info(want[i].engine, &info), 0);
		assert_int_equal(info.size, sizeof(info));
		assert_int_equal(info.engine, want[i].engine);
		assert_string_equal(info.name, tutti_engine_name(want[i].engine));
		assert_true(strlen(info.description) > 10);
		assert_true(info.nr_options <= TT_ENGINE_MAX_OPTS);
		for (uint32_t k = 0; k < info.nr_options; k++) {
			assert_int_equal(tutti_engine_option(want[i].engine, k, &o), 0);
			assert_true(strlen(o.help) > 10);
			assert_true(o.min <= o.def && o.def <= o.max);
			if (o.kind == TUTTI_ENGINE_OPTION_INT) {
				assert_null(o.choices);
				assert_int_equal(o.nr_choices, 0);
			} else {
				assert_int_equal(o.kind, TUTTI_ENGINE_OPTION_CHOICE);
				assert_int_equal(o.max, o.nr_choices - 1);
				assert_null(o.choices[o.nr_choices]);
			}
			used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
			                         k > 0 ? " " : "", o.name);
		}
		assert_string_equal(names, want[i].options);
		assert_int_equal(tutti_engine_option(want[i].engine, info.nr_options, &o), -ENOENT);
	}
	/* The defaults of the store's options before they were strings. */
	o = option_named(TUTTI_ENGINE_GPU_URING, "workers");
	assert_int_equal(o.def, 29);
	assert_int_equal(o.min, 1);
	assert_int_equal(o.max, 64);
	o = option_named(TUTTI_ENGINE_GPU_URING, "sms");
	assert_int_equal(o.def, 0);
	assert_int_equal(o.max, 64);
	o = option_named(TUTTI_ENGINE_POSIX, "threads");
	assert_int_equal(o.def, 0);
	assert_int_equal(o.max, 4096);
	assert_int_equal(tutti_engine_info(tutti_engine_count(), &info), -ENOENT);
	assert_int_equal(tutti_engine_info(UINT32_MAX, &info), -ENOENT);
	assert_int_equal(tutti_engine_info(0, NULL), -EINVAL);
	info.size = sizeof(info) - 8;
	assert_int_equal(tutti_engine_info(0, &info), -EINVAL);
	assert_int_equal(tutti_engine_option(TUTTI_ENGINE_AUTO + 1, 0, &o), -ENOENT);
	assert_int_equal(tutti_engine_option(TUTTI_ENGINE_POSIX, 0, NULL), -EINVAL);
	o.size = 0;
	assert_int_equal(tutti_engine_option(TUTTI_ENGINE_POSIX, 0, &o), -EINVAL);
}

struct lines {
	uint32_t n;
	char last[256];
};

static void
keep_line(void *arg, int level, const char *msg)
{
	struct lines *l = arg;

	l->n++;
	snprintf(l->last, sizeof(l->last), "%s", msg);
}

/* The parser: defaults for keys not given, values in the table's order, and one log line for
 * each string it refuses. */
static void
test_engine_opts_parse_takes_values_and_refuses_with_one_line(void **state)
{
	static const struct {
		const char *text;
		uint32_t vals[5];
	} good[] = {
	    {NULL, {29, 0, 0, 0, 0}},
	    {"", {29, 0, 0, 0, 0}},
	    {"workers=5", {5, 0, 0, 0, 0}},
	    {"threads=8,copy=dma,sms=64,submit=host,workers=64", {64, 64, 2, 2, 8}},
	    {"workers=1,sms=0", {1, 0, 0, 0, 0}},
	    {"threads=4096", {29, 0, 0, 0, 4096}},
	    {"workers=0064", {64, 0, 0, 0, 0}},
	};
	static const char *const bad[] = {
	    "workers=65",
	    "workers=0",
	    "sms=65",
	    "threads=4097",
	    "workers=",
	    "workers=+5",
	    "workers=5x",
	    "workers",
	    "=5",
	    ",",
	    "workers=5,",
	    ",workers=5",
	    "submit=",
	    "submit=Host",
	    "copy=dma ",
	    " copy=dma",
	    "cores=4",
	    "workers=1,workers=1",
	    "threads=99999999999",
	    "workers=4294967301",
	};
	const struct tt_engine_ops *ops = tt_engine_ops_for(TUTTI_ENGINE_AUTO);
	struct lines lines = {0};
	struct tt_log log = {.fn = keep_line, .arg = &lines, .level = TUTTI_LOG_DEBUG};
	uint32_t vals[TT_ENGINE_MAX_OPTS];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		memset(vals, 0xff, sizeof(vals));
		assert_int_equal(tt_engine_opts_parse(ops, good[i].text, &log, vals), 0);
		assert_memory_equal(vals, good[i].vals, sizeof(good[i].vals));
	}
	assert_int_equal(lines.n, 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lines.n = 0;
		assert_int_equal(tt_engine_opts_parse(ops, bad[i], &log, vals), -EINVAL);
		if (lines.n != 1 || strncmp(lines.last, "engine auto: ", 13) != 0) {
			fail_msg("'%s': %u lines, the last '%s'", bad[i], lines.n, lines.last);
		}
	}
	/* An engine without options takes none, and says so. */
	lines.n = 0;
	ops = tt_engine_ops_for(TUTTI_ENGINE_URING);
	assert_int_equal(tt_engine_opts_parse(ops, "", &log, vals), 0);
	assert_int_equal(tt_engine_opts_parse(ops, "threads=1", &log, vals), -EINVAL);
	assert_string_equal(lines.last, "engine uring: unknown option 'threads' (it takes none)");
}

/* gpu-uring's bounce slots: all of the staging on a block device, at most 64 MiB of it on
 * page-cache-backed files (more reads in flight there only start io-wq workers that contend),
 * at least one object, at most 4096 slots. */
static void
test_gpu_uring_bounce_slots_cap_page_cache_staging(void **state)
{
	const uint64_t MiB = 1ull << 20;
	static const struct {
		uint64_t staging, object;
		bool page_cache;
		uint32_t slots;
	} cases[] = {
	    {128 << 20, 1 << 20, false, 128},  {128 << 20, 1 << 20, true, 64},
	    {64 << 20, 1 << 20, true, 64},     {32 << 20, 1 << 20, true, 32},
	    {512 << 20, 1 << 20, true, 64},    {512 << 20, 1 << 20, false, 512},
	    {256 << 20, 64 << 10, true, 1024}, {256 << 20, 64 << 10, false, 4096},
	    {96 << 20, 80 << 20, true, 1},     {96 << 20, 48 << 20, true, 1},
	    {96 << 20, 48 << 20, false, 2},    {5 << 20, 5 << 20, true, 1},
	};

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		assert_int_equal(tt_gpu_uring_bounce_slots(cases[c].staging, cases[c].object,
		                                           cases[c].page_cache),
		                 cases[c].slots);
	}
	/* The cap is by bytes: whatever the object, no more than 64 MiB of slots on tmpfs. */
	for (uint64_t object = 4096; object <= 64 * MiB; object *= 2) {
		uint32_t n = tt_gpu_uring_bounce_slots(1024 * MiB, object, true);

		assert_true(n >= 1);
		assert_true((uint64_t)n * object <= 64 * MiB);
		assert_true(n == 4096 || (uint64_t)(n + 1) * object > 64 * MiB);
	}
}

/* Loads by the copy engine go in groups of at most 16 MiB, at most a quarter of the slots, a
 * divisor of the slots (so a group's slots never wrap), one object at least; the last group of
 * a launch may be short. */
static void
test_gpu_uring_dma_groups_divide_the_slots(void **state)
{
	static const struct {
		uint32_t slots;
		uint64_t slot_bytes;
		uint32_t group;
	} cases[] = {
	    {64, 1 << 20, 16}, {256, 1 << 20, 16}, {128, 4 << 20, 4},  {64, 32 << 20, 1},
	    {6, 1 << 20, 1},   {100, 1 << 20, 10}, {4096, 4096, 1024}, {1, 1 << 20, 1},
	    {3, 64 << 10, 1},  {60, 1 << 20, 15},  {97, 1 << 20, 1},   {64, 17 << 20, 1},
	};

	(void)state;
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint32_t g = tt_gpu_uring_dma_group(cases[c].slots, cases[c].slot_bytes);

		assert_int_equal(g, cases[c].group);
		assert_int_equal(cases[c].slots % g, 0);
	}
	for (uint32_t slots = 1; slots <= 512; slots++) {
		uint32_t g = tt_gpu_uring_dma_group(slots, 1 << 20);

		assert_true(g >= 1 && slots % g == 0 && (g == 1 || g <= slots / 4) && g <= 16);
	}
	assert_int_equal(tt_gpu_uring_group_size(0, 16, 100), 16);
	assert_int_equal(tt_gpu_uring_group_size(6, 16, 100), 4);
	assert_int_equal(tt_gpu_uring_group_size(7, 16, 100), 0);
	assert_int_equal(tt_gpu_uring_group_size(UINT32_MAX, 16, 100), 0);
	assert_true(tt_gpu_uring_seq(2, 0) > tt_gpu_uring_seq(1, UINT32_MAX));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_engine_create_rejects_bad_conf),
	    cmocka_unit_test(test_engine_submit_past_depth_returns_eagain),
	    cmocka_unit_test(test_engine_failed_submit_changes_no_accounting),
	    cmocka_unit_test(test_engine_reap_clamps_min_and_skips_idle_engine),
	    cmocka_unit_test(test_engine_submit_rejects_malformed_ios_without_queuing_any),
	    cmocka_unit_test(test_io_state_advance_continues_a_vector_after_short_transfers),
	    cmocka_unit_test(test_engine_kinds_and_names),
	    cmocka_unit_test(test_engine_info_lists_every_engine_and_its_options),
	    cmocka_unit_test(test_engine_opts_parse_takes_values_and_refuses_with_one_line),
	    cmocka_unit_test(test_gpu_uring_bounce_slots_cap_page_cache_staging),
	    cmocka_unit_test(test_gpu_uring_dma_groups_divide_the_slots),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
