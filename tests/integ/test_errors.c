/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: error paths of the public API, for both engines: missing directories, invalid
 * options and requests (-EINVAL, with nothing created or stored), a second handle on an open
 * store (-EBUSY, then fine after close), another geometry, key size or namespace (-EEXIST), a
 * data file that is not a store (-EPROTO), NULL arguments everywhere, errors reported through
 * log_fn, and a library that never prints.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define KB 32u
#define BPC 4u
#define NR_BLOCKS 64u
#define SLOTS 16u

static int g_engine;

struct fixture {
	char *tmp;
	char *dir; /* tmp/store, not created yet */
	const char *dirs[1];
	struct tutti_geometry geo;
	struct tutti_store_opts opts;
	struct t_log rec;
	struct t_rng r;
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	f->dir = t_path_join(f->tmp, "store");
	f->dirs[0] = f->dir;
	if (tutti_geometry_preset("tiny", &f->geo) != 0) {
		return -1;
	}
	t_store_opts(&f->opts, &f->geo, f->dirs, 1, SLOTS, (uint32_t)g_engine, &f->rec);
	t_rng_init(&f->r, t_seed(71));
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	free(f->dir);
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

/* Open with f->opts; expect \p want, a logged error for a failure, and NULL out on failure. */
static struct tutti_store *
open_expect(struct fixture *f, int want)
{
	struct tutti_store *st = (struct tutti_store *)(uintptr_t)1;
	int rc;

	t_log_reset(&f->rec);
	rc = tutti_store_open(&f->geo, &f->opts, &st);
	assert_int_equal(rc, want);
	if (want != 0) {
		assert_null(st);
		assert_true(f->rec.nr_err > 0);
	} else {
		assert_non_null(st);
	}
	return st;
}

static char *
data_file(const struct fixture *f)
{
	return t_path_join(f->dir, "tutti.data");
}

/* ---- open ---- */

static void
test_open_missing_directory_without_create_is_enoent(void **state)
{
	struct fixture *f = *state;
	char *file = data_file(f);

	f->opts.flags = 0;
	open_expect(f, -ENOENT);
	assert_false(t_path_exists(f->dir));
	/* An existing directory without a store file is just as missing. */
	assert_int_equal(mkdir(f->dir, 0700), 0);
	open_expect(f, -ENOENT);
	assert_false(t_path_exists(file));
	/* With the flag it is created; afterwards it opens without the flag. */
	f->opts.flags = TUTTI_OPEN_CREATE;
	tutti_store_close(open_expect(f, 0));
	f->opts.flags = 0;
	tutti_store_close(open_expect(f, 0));
	free(file);
}

struct bad_opt {
	const char *what;
	void (*apply)(struct fixture *f, struct tutti_store_opts *o);
	bool logged; /* a reason is logged (not when the options' size is wrong) */
};

static void
capacity_zero(struct fixture *f, struct tutti_store_opts *o)
{
	o->capacity_bytes = 0;
}

static void
capacity_below_one_slot(struct fixture *f, struct tutti_store_opts *o)
{
	o->capacity_bytes = tutti_geometry_slot_bytes(&f->geo) - 1;
}

static void
capacity_below_one_slot_per_dir(struct fixture *f, struct tutti_store_opts *o)
{
	static const char *two[2];

	two[0] = f->dir;
	two[1] = f->tmp;
	o->dirs = two;
	o->nr_dirs = 2;
	o->capacity_bytes = 3 * tutti_geometry_slot_bytes(&f->geo) / 2;
}

static void
key_bytes_8(struct fixture *f, struct tutti_store_opts *o)
{
	o->key_bytes = 8;
}

static void
key_bytes_15(struct fixture *f, struct tutti_store_opts *o)
{
	o->key_bytes = 15;
}

static void
key_bytes_65(struct fixture *f, struct tutti_store_opts *o)
{
	o->key_bytes = 65;
}

static void
staging_below_one_object(struct fixture *f, struct tutti_store_opts *o)
{
	o->staging_bytes = tutti_geometry_object_bytes(&f->geo) - 1;
}

static void
staging_zero(struct fixture *f, struct tutti_store_opts *o)
{
	o->staging_bytes = 0;
}

static void
queue_depth_zero(struct fixture *f, struct tutti_store_opts *o)
{
	o->queue_depth = 0;
}

static void
queue_depth_huge(struct fixture *f, struct tutti_store_opts *o)
{
	o->queue_depth = UINT32_MAX;
}

static void
max_io_zero(struct fixture *f, struct tutti_store_opts *o)
{
	o->max_io_bytes = 0;
}

static void
size_zero(struct fixture *f, struct tutti_store_opts *o)
{
	o->size = 0;
}

static void
size_short(struct fixture *f, struct tutti_store_opts *o)
{
	o->size = sizeof(*o) - 8;
}

static void
size_long(struct fixture *f, struct tutti_store_opts *o)
{
	o->size = sizeof(*o) + 8;
}

static void
no_dirs(struct fixture *f, struct tutti_store_opts *o)
{
	o->nr_dirs = 0;
}

static void
too_many_dirs(struct fixture *f, struct tutti_store_opts *o)
{
	static const char *many[65];

	for (int i = 0; i < 65; i++) {
		many[i] = f->dir;
	}
	o->dirs = many;
	o->nr_dirs = 65;
}

static void
dirs_null(struct fixture *f, struct tutti_store_opts *o)
{
	o->dirs = NULL;
}

static void
dir_entry_null(struct fixture *f, struct tutti_store_opts *o)
{
	static const char *one[1];

	one[0] = NULL;
	o->dirs = one;
}

static void
dir_entry_empty(struct fixture *f, struct tutti_store_opts *o)
{
	static const char *one[1] = {""};

	o->dirs = one;
}

static void
unknown_engine(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_AUTO + 1;
}

static void
ns_bytes_without_ns(struct fixture *f, struct tutti_store_opts *o)
{
	o->ns = NULL;
	o->ns_bytes = 4;
}

static void
unknown_durability(struct fixture *f, struct tutti_store_opts *o)
{
	o->durability = 7;
}

/* Engine options are checked by the engine the store opens with, before anything is made. */
static void
gpu_io_workers_zero(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_GPU_URING;
	o->engine_opts = "workers=0";
}

static void
gpu_io_workers_65(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_GPU_URING;
	o->engine_opts = "workers=65";
}

static void
gpu_io_sms_65(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_GPU_URING;
	o->engine_opts = "sms=65";
}

/* 32 workers and the driver need 6 SMs at 6 to an SM. */
static void
gpu_io_sms_too_few(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_GPU_URING;
	o->engine_opts = "workers=32,sms=5";
}

static void
unknown_gpu_io_copy(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_GPU_URING;
	o->engine_opts = "copy=3";
}

static void
auto_sms_too_few(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_AUTO;
	o->engine_opts = "workers=32,sms=5";
}

static void
posix_threads_4097(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_POSIX;
	o->engine_opts = "threads=4097";
}

/* An option of another engine: gpu-uring's workers to uring or posix. */
static void
option_of_another_engine(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine_opts = "workers=29";
}

static void
option_without_value(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_POSIX;
	o->engine_opts = "threads";
}

static void
option_given_twice(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_POSIX;
	o->engine_opts = "threads=2,threads=3";
}

static void
option_trailing_comma(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_POSIX;
	o->engine_opts = "threads=2,";
}

static void
option_not_a_number(struct fixture *f, struct tutti_store_opts *o)
{
	o->engine = TUTTI_ENGINE_POSIX;
	o->engine_opts = "threads=-1";
}

static void
unknown_flag(struct fixture *f, struct tutti_store_opts *o)
{
	o->flags |= 0x80u;
}

static void
invalid_geometry(struct fixture *f, struct tutti_store_opts *o)
{
	f->geo.kv_planes = 3;
}

static void
test_open_invalid_options_are_einval_and_create_nothing(void **state)
{
	struct fixture *f = *state;
	const struct bad_opt bad[] = {
	    {"capacity 0", capacity_zero, true},
	    {"capacity below one slot", capacity_below_one_slot, true},
	    {"capacity below one slot per directory", capacity_below_one_slot_per_dir, true},
	    {"key_bytes 8", key_bytes_8, true},
	    {"key_bytes 15", key_bytes_15, true},
	    {"key_bytes 65", key_bytes_65, true},
	    {"staging below one object", staging_below_one_object, true},
	    {"staging 0", staging_zero, true},
	    {"queue_depth 0", queue_depth_zero, true},
	    {"queue_depth huge", queue_depth_huge, true},
	    {"max_io_bytes 0", max_io_zero, true},
	    {"size 0", size_zero, false},
	    {"size short", size_short, false},
	    {"size long", size_long, false},
	    {"no dirs", no_dirs, true},
	    {"65 dirs", too_many_dirs, true},
	    {"dirs NULL", dirs_null, true},
	    {"dirs[0] NULL", dir_entry_null, true},
	    {"dirs[0] empty", dir_entry_empty, true},
	    {"unknown engine", unknown_engine, true},
	    {"ns_bytes without ns", ns_bytes_without_ns, true},
	    {"unknown durability", unknown_durability, true},
	    {"gpu-uring workers=0", gpu_io_workers_zero, true},
	    {"gpu-uring workers=65", gpu_io_workers_65, true},
	    {"gpu-uring sms=65", gpu_io_sms_65, true},
	    {"gpu-uring sms=5 for 32 workers", gpu_io_sms_too_few, true},
	    {"gpu-uring copy=3", unknown_gpu_io_copy, true},
	    {"auto sms=5 for 32 workers", auto_sms_too_few, true},
	    {"posix threads=4097", posix_threads_4097, true},
	    {"workers=29 to uring or posix", option_of_another_engine, true},
	    {"posix threads without a value", option_without_value, true},
	    {"posix threads given twice", option_given_twice, true},
	    {"posix options ending in a comma", option_trailing_comma, true},
	    {"posix threads=-1", option_not_a_number, true},
	    {"unknown flag", unknown_flag, true},
	    {"invalid geometry", invalid_geometry, true},
	};
	struct tutti_store_opts saved = f->opts;
	struct tutti_geometry saved_geo = f->geo;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct tutti_store *st = (struct tutti_store *)(uintptr_t)1;

		f->opts = saved;
		f->geo = saved_geo;
		bad[i].apply(f, &f->opts);
		t_log_reset(&f->rec);
		print_message("  options: %s\n", bad[i].what);
		assert_int_equal(tutti_store_open(&f->geo, &f->opts, &st), -EINVAL);
		assert_null(st);
		if (bad[i].logged) {
			assert_true(f->rec.nr_err > 0);
		}
		/* Checked before touching the disk. */
		assert_false(t_path_exists(f->dir));
	}
}

static void
test_open_staging_of_exactly_one_object_is_enough(void **state)
{
	struct fixture *f = *state;

	/* The smallest staging that can move data: one object, with the default max_io_bytes. */
	f->opts.staging_bytes = tutti_geometry_object_bytes(&f->geo);
	tutti_store_close(open_expect(f, 0));
	f->opts.max_io_bytes = f->opts.staging_bytes;
	tutti_store_close(open_expect(f, 0));
}

/* The fewest SMs that hold the workers and the ring's driver, 6 to an SM, are accepted (by auto,
 * which takes gpu-uring's options and sets its ring up only for GPU KV). */
static void
test_open_gpu_io_sms_at_the_packing_bound_is_accepted(void **state)
{
	struct fixture *f = *state;

	f->opts.engine = TUTTI_ENGINE_AUTO;
	f->opts.engine_opts = "workers=32,sms=6";
	tutti_store_close(open_expect(f, 0));
	f->opts.engine_opts = "workers=1,sms=1,submit=host,copy=dma,threads=3";
	tutti_store_close(open_expect(f, 0));
	f->opts.engine_opts = "";
	tutti_store_close(open_expect(f, 0));
}

/* A refused option is said in one line that names the engine, the key, the value and what the
 * key allows. */
static void
test_open_engine_options_are_refused_with_their_reason(void **state)
{
	struct fixture *f = *state;
	static const struct {
		uint32_t engine;
		const char *opts, *says;
	} cases[] = {
	    {TUTTI_ENGINE_GPU_URING, "workers=0",
	     "engine gpu-uring: workers=0 is out of its range 1..64"},
	    {TUTTI_ENGINE_GPU_URING, "sms=1,submit=kernel",
	     "engine gpu-uring: submit=kernel is not one of auto, sqpoll, host"},
	    {TUTTI_ENGINE_AUTO, "copy=SM", "engine auto: copy=SM is not one of auto, sm, dma"},
	    {TUTTI_ENGINE_POSIX, "threads=x",
	     "engine posix: threads=x is not a whole number in 0..4096"},
	    {TUTTI_ENGINE_POSIX, "workers=2",
	     "engine posix: unknown option 'workers' (its options: threads)"},
	    {TUTTI_ENGINE_URING, "threads=2",
	     "engine uring: unknown option 'threads' (it takes none)"},
	    {TUTTI_ENGINE_GPU_URING, "workers=29;sms=5",
	     "engine gpu-uring: workers=29;sms=5 is not a whole"},
	    {TUTTI_ENGINE_GPU_URING, "=5", "engine gpu-uring: option '=5' is not key=value"},
	    {TUTTI_ENGINE_POSIX, "threads=1,threads=1",
	     "engine posix: option threads is given twice"},
	    {TUTTI_ENGINE_GPU_URING, "workers=32,sms=5",
	     "engine gpu-uring: sms=5 cannot hold 32 workers and the ring's driver"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		f->opts.engine = cases[i].engine;
		f->opts.engine_opts = cases[i].opts;
		t_log_reset(&f->rec);
		assert_null(open_expect(f, -EINVAL));
		if (!t_log_contains(&f->rec, cases[i].says)) {
			fail_msg("engine_opts '%s': the log does not say '%s'", cases[i].opts,
			         cases[i].says);
		}
		assert_int_equal(f->rec.nr_err, 1);
	}
}

static void
test_open_engine_gds_needs_libcufile(void **state)
{
	struct fixture *f = *state;
	void *lib = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
	struct stat sb;

	f->opts.engine = TUTTI_ENGINE_GDS;
	if (lib != NULL) {
		/* A GPU server: the store opens, unless cuFile refuses this platform's files
		 * (-EOPNOTSUPP) or its driver does not open (-EIO), which the log says. */
		struct tutti_store *st = NULL;
		int rc;

		t_log_reset(&f->rec);
		rc = tutti_store_open(&f->geo, &f->opts, &st);
		dlclose(lib);
		assert_true(rc == 0 || rc == -EOPNOTSUPP || rc == -EIO);
		assert_true(rc == 0 || t_log_contains(&f->rec, "engine gds"));
		tutti_store_close(st);
		return;
	}
	/* Refused before anything is created, with the reason in the log. */
	t_log_reset(&f->rec);
	open_expect(f, -EOPNOTSUPP);
	assert_true(t_log_contains(&f->rec, "libcufile"));
	assert_int_equal(stat(f->dir, &sb), -1);
}

static void
test_open_second_handle_is_ebusy_until_the_first_closes(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *first = open_expect(f, 0), *again;

	open_expect(f, -EBUSY);
	f->opts.flags = 0;
	open_expect(f, -EBUSY);
	tutti_store_close(first);
	again = open_expect(f, 0);
	tutti_store_close(again);
}

static void
test_open_store_sharing_one_directory_is_ebusy(void **state)
{
	struct fixture *f = *state;
	char *other = t_path_join(f->tmp, "other");
	const char *two[2] = {other, f->dir};
	struct tutti_store *first = open_expect(f, 0);

	f->opts.dirs = two;
	f->opts.nr_dirs = 2;
	open_expect(f, -EBUSY);
	tutti_store_close(first);
	free(other);
}

static void
test_open_other_geometry_key_size_or_namespace_is_eexist(void **state)
{
	struct fixture *f = *state;
	struct tutti_geometry tiny = f->geo;

	f->opts.ns = "model-a/bf16/tp0";
	f->opts.ns_bytes = 16;
	tutti_store_close(open_expect(f, 0));
	f->geo.nr_kv_heads = 4;
	open_expect(f, -EEXIST);
	f->geo = tiny;
	f->geo.chunk_tokens = 32;
	open_expect(f, -EEXIST);
	f->geo = tiny;
	f->geo.kv_planes = 1;
	open_expect(f, -EEXIST);
	f->geo = tiny;
	f->opts.key_bytes = 16;
	open_expect(f, -EEXIST);
	f->opts.key_bytes = 32;
	f->opts.ns = "model-b/bf16/tp0";
	open_expect(f, -EEXIST);
	f->opts.ns_bytes = 15; /* a prefix of the namespace is another namespace */
	f->opts.ns = "model-a/bf16/tp0";
	open_expect(f, -EEXIST);
	f->opts.ns_bytes = 0;
	open_expect(f, -EEXIST);
	/* The right identity still opens, and the capacity may change. */
	f->opts.ns_bytes = 16;
	f->opts.capacity_bytes *= 2;
	tutti_store_close(open_expect(f, 0));
}

static void
write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static void
test_open_data_file_with_garbage_superblock_is_eproto(void **state)
{
	struct fixture *f = *state;
	char *file = data_file(f);
	uint8_t junk[8192];
	struct stat st;

	assert_int_equal(mkdir(f->dir, 0700), 0);
	t_rng_fill(&f->r, junk, sizeof(junk));
	write_file(file, junk, sizeof(junk));
	open_expect(f, -EPROTO);
	/* Shorter than a superblock, and text: still not a store. */
	write_file(file, "hello, this is not a store\n", 27);
	open_expect(f, -EPROTO);
	/* A failed open leaves somebody else's file alone. */
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(st.st_size, 27);
	free(file);
}

/* ---- requests ---- */

struct req_fixture {
	struct tutti_store *st;
	struct t_kv *kv;
	uint8_t keys[3 * KB];
	uint32_t ids[3 * BPC];
};

static void
req_setup(struct fixture *f, struct req_fixture *q)
{
	q->st = open_expect(f, 0);
	assert_int_equal(t_kv_alloc(&f->geo, T_LAYOUT_KV_FIRST, NR_BLOCKS, &q->kv), 0);
	t_kv_fill_random(q->kv, &f->r);
	t_rng_fill(&f->r, q->keys, sizeof(q->keys));
	t_random_distinct(&f->r, q->ids, 3 * BPC, NR_BLOCKS);
}

static struct tutti_request
good(struct req_fixture *q)
{
	return (struct tutti_request){
	    .size = sizeof(struct tutti_request),
	    .nr_keys = 2,
	    .keys = q->keys,
	    .nr_blocks = 2 * BPC,
	    .block_ids = q->ids,
	};
}

/* Both a save and a load of \p r (after a good request) fail as a whole with -EINVAL, leave
 * the statuses alone and store nothing. */
static void
assert_request_einval(struct fixture *f, struct req_fixture *q, const struct tutti_request *r,
                      const struct tutti_kv *kv)
{
	struct tutti_request both[2] = {good(q), *r};
	int32_t status[8] = {7, 7, 7, 7, 7, 7, 7, 7};

	assert_int_equal(tutti_store_save(q->st, kv, both, 2, status), -EINVAL);
	assert_int_equal(tutti_store_save(q->st, kv, r, 1, NULL), -EINVAL);
	assert_int_equal(tutti_store_lookup(q->st, q->keys, 2, NULL), 0);
	assert_int_equal(tutti_store_load(q->st, kv, both, 2, 0, 2, status), -EINVAL);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(status[i], 7);
	}
}

static void
test_requests_that_do_not_fit_are_einval(void **state)
{
	struct fixture *f = *state;
	struct req_fixture q;
	struct tutti_geometry g2 = f->geo;
	struct t_kv *other;
	struct tutti_request r;

	req_setup(f, &q);
	r = good(&q);
	q.ids[3] = NR_BLOCKS; /* block id beyond the registered blocks */
	assert_request_einval(f, &q, &r, q.kv->kv);
	q.ids[3] = UINT32_MAX;
	assert_request_einval(f, &q, &r, q.kv->kv);
	q.ids[3] = 3;
	r.nr_blocks = BPC; /* two chunks need more than one chunk's blocks */
	assert_request_einval(f, &q, &r, q.kv->kv);
	r.nr_blocks = 2 * BPC + 1; /* and no more than two chunks' */
	assert_request_einval(f, &q, &r, q.kv->kv);
	r.nr_blocks = 0;
	assert_request_einval(f, &q, &r, q.kv->kv);
	r = good(&q);
	r.first_chunk = 2; /* first_chunk >= nr_keys */
	assert_request_einval(f, &q, &r, q.kv->kv);
	r = good(&q);
	r.nr_keys = 0;
	assert_request_einval(f, &q, &r, q.kv->kv);
	r = good(&q);
	r.keys = NULL;
	assert_request_einval(f, &q, &r, q.kv->kv);
	r = good(&q);
	r.block_ids = NULL;
	assert_request_einval(f, &q, &r, q.kv->kv);
	r = good(&q);
	r.size = sizeof(r) - 4;
	assert_request_einval(f, &q, &r, q.kv->kv);
	r = good(&q);
	r.reserved = 1;
	assert_request_einval(f, &q, &r, q.kv->kv);
	/* A kv of another geometry. */
	g2.head_dim = 32;
	assert_int_equal(t_kv_alloc(&g2, T_LAYOUT_KV_FIRST, NR_BLOCKS, &other), 0);
	r = good(&q);
	assert_request_einval(f, &q, &r, other->kv);
	assert_int_equal(tutti_store_save(q.st, other->kv, &r, 1, NULL), -EINVAL);
	t_kv_free(other);
	assert_int_equal(tutti_store_save(q.st, NULL, &r, 1, NULL), -EINVAL);
	assert_int_equal(tutti_store_load(q.st, NULL, &r, 1, 0, 2, NULL), -EINVAL);
	assert_int_equal(tutti_store_save(q.st, q.kv->kv, NULL, 1, NULL), -EINVAL);
	assert_int_equal(tutti_store_load(q.st, q.kv->kv, NULL, 1, 0, 2, NULL), -EINVAL);
	/* An empty batch is fine. */
	assert_int_equal(tutti_store_save(q.st, q.kv->kv, NULL, 0, NULL), 0);
	assert_int_equal(tutti_store_load(q.st, q.kv->kv, NULL, 0, 0, 2, NULL), 0);
	t_kv_free(q.kv);
	tutti_store_close(q.st);
}

static void
test_skip_blocks_is_einval_on_save_and_past_a_chunk_on_load(void **state)
{
	struct fixture *f = *state;
	struct req_fixture q;
	struct tutti_request r;
	int32_t status[2];

	req_setup(f, &q);
	r = good(&q);
	r.skip_blocks = 1;
	r.nr_blocks = 2 * BPC - 1;
	assert_int_equal(tutti_store_save(q.st, q.kv->kv, &r, 1, status), -EINVAL);
	assert_int_equal(tutti_store_lookup(q.st, q.keys, 2, NULL), 0);
	r = good(&q);
	assert_int_equal(tutti_store_save(q.st, q.kv->kv, &r, 1, status), 2);
	r.skip_blocks = BPC; /* a whole chunk: use first_chunk instead */
	r.nr_blocks = BPC;
	assert_int_equal(tutti_store_load(q.st, q.kv->kv, &r, 1, 0, 2, status), -EINVAL);
	r.skip_blocks = BPC - 1;
	r.nr_blocks = BPC + 1;
	assert_int_equal(tutti_store_load(q.st, q.kv->kv, &r, 1, 0, 2, status), 2);
	t_kv_free(q.kv);
	tutti_store_close(q.st);
}

/* ---- NULL arguments, logging, silence ---- */

static void
test_null_arguments_are_einval_and_never_crash(void **state)
{
	struct fixture *f = *state;
	struct tutti_store *st = (struct tutti_store *)(uintptr_t)1;
	struct tutti_kv *kv = (struct tutti_kv *)(uintptr_t)1;
	struct tutti_stats s = {.size = sizeof(s)};
	struct tutti_request r = {.size = sizeof(r)};
	struct tutti_segment seg = {4096, 2048, 2048};
	uint8_t key[KB] = {0};
	uint64_t blocks;

	assert_int_equal(tutti_store_open(NULL, &f->opts, &st), -EINVAL);
	assert_null(st);
	st = (struct tutti_store *)(uintptr_t)1;
	assert_int_equal(tutti_store_open(&f->geo, NULL, &st), -EINVAL);
	assert_null(st);
	assert_int_equal(tutti_store_open(&f->geo, &f->opts, NULL), -EINVAL);
	assert_false(t_path_exists(f->dir));
	assert_int_equal(tutti_store_lookup(NULL, key, 1, &blocks), -EINVAL);
	assert_int_equal(tutti_store_load(NULL, NULL, &r, 1, 0, 1, NULL), -EINVAL);
	assert_int_equal(tutti_store_save(NULL, NULL, &r, 1, NULL), -EINVAL);
	assert_int_equal(tutti_store_get_stats(NULL, &s), -EINVAL);
	assert_int_equal(tutti_kv_create(NULL, &seg, 1, 1, TUTTI_MEM_HOST, &kv), -EINVAL);
	assert_int_equal(tutti_kv_create(&f->geo, NULL, 1, 1, TUTTI_MEM_HOST, &kv), -EINVAL);
	assert_int_equal(tutti_kv_create(&f->geo, &seg, 1, 1, TUTTI_MEM_HOST, NULL), -EINVAL);
	assert_int_equal(tutti_geometry_preset(NULL, &f->geo), -EINVAL);
	assert_int_equal(tutti_geometry_preset("tiny", NULL), -EINVAL);
	assert_int_equal(tutti_geometry_check(NULL), -EINVAL);
	assert_int_equal(tutti_geometry_slot_bytes(NULL), 0);
	assert_int_equal(tutti_geometry_object_bytes(NULL), 0);
	assert_int_equal(tutti_geometry_layer_block_bytes(NULL), 0);
	assert_int_equal(tutti_geometry_blocks_per_chunk(NULL), 0);
	assert_int_equal(tutti_engine_parse(NULL), -EINVAL);
	assert_non_null(tutti_strerror(-EINVAL));
	assert_non_null(tutti_version());
	tutti_geometry_init(NULL);
	tutti_store_opts_init(NULL);
	tutti_store_close(NULL);
	tutti_kv_destroy(NULL);

	/* And on an open store: NULL keys, kv, requests and outputs. */
	st = open_expect(f, 0);
	assert_int_equal(tutti_store_lookup(st, NULL, 1, &blocks), -EINVAL);
	assert_int_equal(tutti_store_lookup(st, NULL, 0, NULL), 0);
	assert_int_equal(tutti_store_get_stats(st, NULL), -EINVAL);
	assert_int_equal(tutti_store_load(st, NULL, &r, 1, 0, 1, NULL), -EINVAL);
	assert_int_equal(tutti_store_save(st, NULL, &r, 1, NULL), -EINVAL);
	tutti_store_close(st);
}

static void
test_log_level_filters_what_log_fn_receives(void **state)
{
	struct fixture *f = *state;

	/* A clean open says nothing at ERR, and something (its summary) at DEBUG. */
	f->opts.log_level = TUTTI_LOG_ERR;
	t_log_reset(&f->rec);
	tutti_store_close(open_expect(f, 0));
	assert_int_equal(f->rec.nr, 0);
	f->opts.log_level = TUTTI_LOG_DEBUG;
	tutti_store_close(open_expect(f, 0));
	assert_true(f->rec.nr > 0);
	assert_int_equal(f->rec.nr_err, 0);
	/* Errors are logged at ERR with their reason. */
	f->opts.key_bytes = 65;
	open_expect(f, -EINVAL);
	assert_int_equal(f->rec.levels[0], TUTTI_LOG_ERR);
	assert_true(t_log_contains(&f->rec, "key_bytes"));
}

static void
test_library_never_prints(void **state)
{
	struct fixture *f = *state;
	char *out = t_path_join(f->tmp, "stdio");
	int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0600);
	int saved_out = dup(1), saved_err = dup(2);
	struct tutti_store *st, *busy = NULL;
	struct tutti_request r = {.size = sizeof(r)};
	struct stat sb;
	int rc;

	assert_true(fd >= 0 && saved_out >= 0 && saved_err >= 0);
	f->opts.log_fn = NULL;
	f->opts.log_level = TUTTI_LOG_DEBUG;
	fflush(stdout);
	fflush(stderr);
	dup2(fd, 1);
	dup2(fd, 2);
	/* A battery of failures and successes with no log_fn: all silent. */
	rc = tutti_store_open(&f->geo, &f->opts, &st);
	if (rc == 0) {
		f->opts.key_bytes = 65;
		tutti_store_open(&f->geo, &f->opts, &busy);
		f->opts.key_bytes = 32;
		tutti_store_open(&f->geo, &f->opts, &busy);
		tutti_store_save(st, NULL, &r, 1, NULL);
		tutti_store_lookup(st, NULL, 3, NULL);
		tutti_store_close(st);
	}
	f->opts.flags = 0;
	f->opts.dirs = (const char *const[]){"/nonexistent/tutti"};
	tutti_store_open(&f->geo, &f->opts, &busy);
	fflush(stdout);
	fflush(stderr);
	dup2(saved_out, 1);
	dup2(saved_err, 2);
	close(saved_out);
	close(saved_err);
	assert_int_equal(rc, 0);
	assert_null(busy);
	assert_int_equal(fstat(fd, &sb), 0);
	assert_int_equal(sb.st_size, 0);
	close(fd);
	free(out);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_open_missing_directory_without_create_is_enoent),
	    T(test_open_invalid_options_are_einval_and_create_nothing),
	    T(test_open_staging_of_exactly_one_object_is_enough),
	    T(test_open_gpu_io_sms_at_the_packing_bound_is_accepted),
	    T(test_open_engine_options_are_refused_with_their_reason),
	    T(test_open_engine_gds_needs_libcufile),
	    T(test_open_second_handle_is_ebusy_until_the_first_closes),
	    T(test_open_store_sharing_one_directory_is_ebusy),
	    T(test_open_other_geometry_key_size_or_namespace_is_eexist),
	    T(test_open_data_file_with_garbage_superblock_is_eproto),
	    T(test_requests_that_do_not_fit_are_einval),
	    T(test_skip_blocks_is_einval_on_save_and_past_a_chunk_on_load),
	    T(test_null_arguments_are_einval_and_never_crash),
	    T(test_log_level_filters_what_log_fn_receives),
	    T(test_library_never_prints),
	};

	return t_run_per_engine("errors", tests, sizeof(tests) / sizeof(tests[0]), false,
	                        &g_engine);
}
