/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: a store's identity and files, for both engines: TUTTI_OPEN_EXISTING adopts the
 * stored geometry, key size, namespace and capacity; another model, namespace or format version
 * is refused and left untouched, or with TUTTI_OPEN_REPLACE (another model or namespace) replaced
 * by an empty store; one writer per store across processes; private file modes; no
 * symbolic link as the data file.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>
#include <cmocka.h>

#include "format/format.h"
#include "t_chain.h"
#include "t_disk.h"
#include "t_kv.h"
#include "t_util.h"
#include "tutti/tutti.h"

/* ---- TUTTI_OPEN_EXISTING ---- */

static void
test_durable_open_existing_adopts_geometry_key_size_namespace_and_capacity(void **state)
{
	struct t_chain_fixture *f = *state;
	char *dir = t_chain_dir(f, "existing");
	const char *dirs[1] = {dir};
	struct tutti_geometry g = t_geo_small(2, T_CHAIN_BPC), got;
	const struct t_how h = {.ns = "other-model/fp8/tp3", .key_bytes = 16};
	struct tutti_store_opts o;
	struct tutti_store *st;
	struct t_kv *src, *dst;
	struct tutti_request r;
	uint32_t ids[2 * T_CHAIN_BPC], dids[2 * T_CHAIN_BPC];
	uint8_t keys[2 * 16];
	int32_t status[2];

	/* Unlike the defaults in every identity field. */
	g.nr_layers = 3;
	g.nr_kv_heads = 2;
	g.head_dim = 32;
	g.elem_bytes = 1;
	g.block_tokens = 32;
	g.chunk_tokens = 64;
	src = t_chain_kv(f, &g, T_CHAIN_STAGED, true);
	dst = t_chain_kv(f, &g, T_CHAIN_DIRECT, false);
	t_rng_fill(&f->r, keys, sizeof(keys));
	t_random_distinct(&f->r, ids, 2 * 2, T_CHAIN_NR_BLOCKS);
	t_random_distinct(&f->r, dids, 2 * 2, T_CHAIN_NR_BLOCKS);
	st = t_open_ok(f, &g, dir, 10, &h);
	r = (struct tutti_request){
	    .size = sizeof(r), .nr_keys = 2, .keys = keys, .nr_blocks = 3, .block_ids = ids};
	assert_int_equal(tutti_store_save(st, src->kv, &r, 1, status), 2);
	tutti_store_close(st);

	/* No geometry, no namespace, the default key size, capacity 0. */
	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_EXISTING;
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.engine = f->engine;
	o.log_fn = t_log_fn;
	o.log_arg = &f->rec;
	st = NULL;
	assert_int_equal(tutti_store_open(NULL, &o, &st), 0);
	assert_int_equal(tutti_store_geometry(st, &got), 0);
	assert_int_equal(got.nr_layers, g.nr_layers);
	assert_int_equal(got.nr_kv_heads, g.nr_kv_heads);
	assert_int_equal(got.head_dim, g.head_dim);
	assert_int_equal(got.elem_bytes, g.elem_bytes);
	assert_int_equal(got.kv_planes, g.kv_planes);
	assert_int_equal(got.block_tokens, g.block_tokens);
	assert_int_equal(got.chunk_tokens, g.chunk_tokens);
	assert_int_equal(t_store_stats(st).capacity_slots, 10);
	t_assert_recovery(st, 2, 0, 0, 0);
	/* 16-byte keys find the chain, and it loads bit-exact. */
	assert_int_equal(tutti_store_lookup(st, keys, 2, NULL), 2);
	r.block_ids = dids;
	assert_int_equal(tutti_store_load(st, dst->kv, &r, 1, 0, g.nr_layers, status), 2);
	for (uint32_t b = 0; b < 3; b++) {
		for (uint32_t l = 0; l < g.nr_layers; l++) {
			assert_true(t_kv_block_equal(src, ids[b], dst, dids[b], l));
		}
	}
	tutti_store_close(st);
	/* The identity was kept: the original options still open it, capacity unchanged. */
	st = t_open_ok(f, &g, dir, 10, &h);
	assert_int_equal(t_store_stats(st).capacity_slots, 10);
	t_assert_recovery(st, 2, 0, 0, 0);
	tutti_store_close(st);
	/* A capacity given with TUTTI_OPEN_EXISTING resizes. */
	o.capacity_bytes = 12 * tutti_geometry_slot_bytes(&g);
	assert_int_equal(tutti_store_open(NULL, &o, &st), 0);
	assert_int_equal(t_store_stats(st).capacity_slots, 12);
	assert_int_equal(tutti_store_lookup(st, keys, 2, NULL), 2);
	tutti_store_close(st);
	/* Nothing to adopt. */
	dirs[0] = f->tmp;
	assert_int_equal(tutti_store_open(NULL, &o, &st), -ENOENT);
	assert_null(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
}

/* ---- identity ---- */

static void
test_durable_store_of_another_model_or_namespace_is_eexist_and_untouched(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "model", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	struct tutti_geometry other = f->geo;
	const struct t_how model_b = {.ns = "model-b/bf16/tp0"};
	const struct t_how keys16 = {.key_bytes = 16};
	struct tutti_store *st = t_open_ok(f, &f->geo, tc.dir, 8, NULL);
	uint8_t sb[4096], sb2[4096];
	uint64_t size;
	struct t_chain c;

	t_make_chain(f, &c, 2, 2 * T_CHAIN_BPC, NULL, 0);
	t_save_chain(st, tc.src, &c, 0);
	tutti_store_close(st);
	assert_int_equal(t_disk_read(tc.path, 0, sb, sizeof(sb)), 0);
	size = t_file_size(tc.path);

	other.nr_kv_heads = 2; /* another model: another layer block size */
	st = (struct tutti_store *)(uintptr_t)1;
	assert_int_equal(t_open_rc(f, &other, tc.dir, 8, NULL, &st), -EEXIST);
	assert_null(st);
	assert_true(f->rec.nr_err > 0);
	other = f->geo;
	other.head_dim = 32;
	other.nr_kv_heads = 2; /* the same bytes per block, another shape */
	assert_int_equal(t_open_rc(f, &other, tc.dir, 8, NULL, &st), -EEXIST);
	assert_int_equal(t_open_rc(f, &f->geo, tc.dir, 8, &model_b, &st), -EEXIST);
	assert_int_equal(t_open_rc(f, &f->geo, tc.dir, 8, &keys16, &st), -EEXIST);
	assert_null(st);
	/* The refused opens wrote nothing. */
	assert_int_equal(t_disk_read(tc.path, 0, sb2, sizeof(sb2)), 0);
	assert_memory_equal(sb, sb2, sizeof(sb));
	assert_int_equal(t_file_size(tc.path), size);
	st = t_open_ok(f, &f->geo, tc.dir, 8, NULL);
	t_assert_recovery(st, 2, 0, 0, 0);
	t_assert_chain(f, st, tc.src, tc.dst, &c);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

/* TUTTI_OPEN_REPLACE: a store of another namespace or geometry gives way to an empty store of
 * the one asked for, with a warning; the store asked for itself is kept as it is. */
static void
test_durable_open_replace_swaps_another_models_store_for_an_empty_one(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "model", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	struct tutti_geometry other = f->geo;
	const struct t_how replace = {.flags = TUTTI_OPEN_REPLACE};
	const struct t_how model_b = {.ns = "model-b/bf16/tp0", .flags = TUTTI_OPEN_REPLACE};
	const struct t_how existing = {.flags = TUTTI_OPEN_EXISTING | TUTTI_OPEN_REPLACE};
	struct tutti_store *st = t_open_ok(f, &f->geo, tc.dir, 8, NULL);
	uint64_t blocks = 0;
	struct t_chain c;

	t_make_chain(f, &c, 2, 2 * T_CHAIN_BPC, NULL, 0);
	t_save_chain(st, tc.src, &c, 0);
	tutti_store_close(st);
	/* Its own store: kept, chunks and all, and nothing replaced. */
	st = t_open_ok(f, &f->geo, tc.dir, 8, &replace);
	assert_false(t_log_contains(&f->rec, "replaced"));
	t_assert_recovery(st, 2, 0, 0, 0);
	t_assert_chain(f, st, tc.src, tc.dst, &c);
	tutti_store_close(st);
	/* Another namespace: an empty store of that namespace, and a warning that says so. */
	st = t_open_ok(f, &f->geo, tc.dir, 8, &model_b);
	assert_true(t_log_contains(&f->rec, "replaced by an empty store"));
	assert_int_equal(f->rec.nr_err, 0);
	t_assert_recovery(st, 0, 0, 0, 0);
	assert_int_equal(tutti_store_lookup(st, c.keys, c.nr_keys, &blocks), 0);
	tutti_store_close(st);
	/* It is that namespace's store now: the first namespace is refused without the flag. */
	assert_int_equal(t_open_rc(f, &f->geo, tc.dir, 8, NULL, &st), -EEXIST);
	assert_null(st);
	/* Another geometry (slots of another size) replaces it too, and the new store works. */
	other.nr_kv_heads = 2;
	st = t_open_ok(f, &other, tc.dir, 8, &replace);
	assert_true(t_log_contains(&f->rec, "replaced by an empty store"));
	t_assert_recovery(st, 0, 0, 0, 0);
	tutti_store_close(st);
	st = t_open_ok(f, &other, tc.dir, 8, NULL);
	t_assert_recovery(st, 0, 0, 0, 0);
	tutti_store_close(st);
	/* Replacing needs the identity to replace with, which TUTTI_OPEN_EXISTING does not give. */
	assert_int_equal(t_open_rc(f, NULL, tc.dir, 0, &existing, &st), -EINVAL);
	assert_null(st);
	t_store_case_free(&tc);
}

static void
put32le(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

static void
put64le(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

static void
test_durable_other_format_versions_are_eproto_and_damage_is_ebadmsg(void **state)
{
	struct t_chain_fixture *f = *state;
	char *dir = t_chain_dir(f, "version");
	char *path = t_data_path(dir);
	const struct t_how existing = {.flags = TUTTI_OPEN_EXISTING, .no_create = true};
	struct tutti_store *st = t_open_ok(f, &f->geo, dir, 8, NULL);
	uint8_t sb[T_SB_BYTES], v1[T_SB_BYTES], v4[T_SB_BYTES], bad[T_SB_BYTES], now[T_SB_BYTES];

	tutti_store_close(st);
	assert_int_equal(t_disk_read(path, 0, sb, sizeof(sb)), 0);
	/* Version 1 as docs/format.md describes it: 96 encoded bytes, checksum at 88. */
	memcpy(v1, sb, sizeof(v1));
	memset(v1 + 88, 0, sizeof(v1) - 88);
	put32le(v1 + T_SB_OFF_VERSION, 1);
	put32le(v1 + 12, 96);
	put64le(v1 + 88, XXH3_64bits(v1, 88));
	assert_int_equal(t_disk_write(path, 0, v1, sizeof(v1)), 0);
	assert_int_equal(t_open_rc(f, &f->geo, dir, 8, NULL, &st), -EPROTO);
	assert_true(f->rec.nr_err > 0);
	assert_int_equal(t_open_rc(f, NULL, dir, 0, &existing, &st), -EPROTO);
	assert_null(st);
	/* Version 4, the last of one data file per directory: 128 encoded bytes, checksum at
	 * 120. The log names its version. */
	memcpy(v4, sb, sizeof(v4));
	memset(v4 + 116, 0, sizeof(v4) - 116);
	put32le(v4 + T_SB_OFF_VERSION, 4);
	put32le(v4 + 12, 128);
	put64le(v4 + 120, XXH3_64bits(v4, 120));
	assert_int_equal(t_disk_write(path, 0, v4, sizeof(v4)), 0);
	t_log_reset(&f->rec);
	assert_int_equal(t_open_rc(f, &f->geo, dir, 8, NULL, &st), -EPROTO);
	assert_true(
	    t_log_contains(&f->rec, "a store of format version 4; this build reads version 5"));
	/* A later version, correctly sealed. */
	memcpy(bad, sb, sizeof(bad));
	put32le(bad + T_SB_OFF_VERSION, TT_SB_VERSION + 1);
	put64le(bad + T_SB_OFF_CSUM, XXH3_64bits(bad, T_SB_OFF_CSUM));
	assert_int_equal(t_disk_write(path, 0, bad, sizeof(bad)), 0);
	assert_int_equal(t_open_rc(f, &f->geo, dir, 8, NULL, &st), -EPROTO);
	/* The right version with a damaged field. */
	memcpy(bad, sb, sizeof(bad));
	bad[T_SB_OFF_NR_SLOTS] ^= 0x10;
	assert_int_equal(t_disk_write(path, 0, bad, sizeof(bad)), 0);
	assert_int_equal(t_open_rc(f, &f->geo, dir, 8, NULL, &st), -EBADMSG);
	assert_int_equal(t_open_rc(f, NULL, dir, 0, &existing, &st), -EBADMSG);
	assert_null(st);
	/* Refused opens leave the superblock as they found it. */
	assert_int_equal(t_disk_read(path, 0, now, sizeof(now)), 0);
	assert_memory_equal(now, bad, sizeof(now));
	assert_int_equal(t_disk_write(path, 0, sb, sizeof(sb)), 0);
	st = t_open_ok(f, &f->geo, dir, 8, NULL);
	tutti_store_close(st);
	free(path);
	free(dir);
}

/* ---- one writer, file modes, links ---- */

/* In a child process: open the store in \p dir and report the result as the exit status
 * (0, or the errno). No cmocka in the child. */
static pid_t
child_open(struct t_chain_fixture *f, const char *dir, int hold_fd, int ready_fd)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct tutti_store *st = NULL;
		int rc = t_open_rc(f, &f->geo, dir, 8, NULL, &st);
		char c = 0;

		if (ready_fd >= 0) {
			(void)!write(ready_fd, &c, 1);
		}
		if (hold_fd >= 0) {
			(void)!read(hold_fd, &c, 1); /* hold the store until told */
		}
		tutti_store_close(st);
		_exit(rc < 0 ? -rc : 0);
	}
	return pid;
}

static int
child_status(pid_t pid)
{
	int ws = 0;

	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws));
	return WEXITSTATUS(ws);
}

static void
test_durable_second_process_is_ebusy_while_the_store_is_open(void **state)
{
	struct t_chain_fixture *f = *state;
	char *dir = t_chain_dir(f, "busy");
	struct tutti_store *st = t_open_ok(f, &f->geo, dir, 8, NULL), *again = NULL;
	int hold[2], ready[2];
	char c = 0;
	pid_t pid;

	assert_int_equal(child_status(child_open(f, dir, -1, -1)), EBUSY);
	tutti_store_close(st);
	assert_int_equal(child_status(child_open(f, dir, -1, -1)), 0);

	/* The other way round: a child holds the store, this process is refused. */
	assert_int_equal(pipe(hold), 0);
	assert_int_equal(pipe(ready), 0);
	pid = child_open(f, dir, hold[0], ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	assert_int_equal(t_open_rc(f, &f->geo, dir, 8, NULL, &again), -EBUSY);
	assert_null(again);
	assert_true(t_log_contains(&f->rec, "in use"));
	assert_int_equal(write(hold[1], &c, 1), 1);
	assert_int_equal(child_status(pid), 0);
	/* The child closed the store: the lock is free at once. */
	assert_int_equal(t_open_rc(f, &f->geo, dir, 8, NULL, &again), 0);
	tutti_store_close(again);
	for (int i = 0; i < 2; i++) {
		close(hold[i]);
		close(ready[i]);
	}
	free(dir);
}

static void
test_durable_created_directory_and_file_are_private(void **state)
{
	struct t_chain_fixture *f = *state;
	char *dir = t_chain_dir(f, "private");
	char *path = t_data_path(dir);
	mode_t old = umask(0); /* the library's modes, not the umask's */
	struct tutti_store *st;
	struct stat sd, sf;

	st = t_open_ok(f, &f->geo, dir, 4, NULL);
	umask(old);
	tutti_store_close(st);
	assert_int_equal(stat(dir, &sd), 0);
	assert_int_equal(stat(path, &sf), 0);
	assert_true(S_ISDIR(sd.st_mode));
	assert_true(S_ISREG(sf.st_mode));
	assert_int_equal(sd.st_mode & 07777, 0700);
	assert_int_equal(sf.st_mode & 07777, 0600);
	free(path);
	free(dir);
}

static void
test_durable_symbolic_link_as_data_file_is_eloop_and_writes_nothing(void **state)
{
	struct t_chain_fixture *f = *state;
	char *real = t_chain_dir(f, "real"), *linked = t_chain_dir(f, "linked");
	char *real_data = t_data_path(real), *link_path = t_data_path(linked);
	char *victim = t_path_join(f->tmp, "victim"), *nowhere = t_path_join(f->tmp, "nowhere");
	const struct t_how plain = {.no_create = true};
	const struct t_how existing = {.flags = TUTTI_OPEN_EXISTING, .no_create = true};
	const char *targets[3] = {victim, nowhere, real_data};
	struct t_kv *src = t_chain_kv(f, &f->geo, T_CHAIN_DIRECT, true);
	struct t_kv *dst = t_chain_kv(f, &f->geo, T_CHAIN_DIRECT, false);
	struct tutti_store *st = t_open_ok(f, &f->geo, real, 8, NULL);
	uint8_t *real_before, *real_after;
	struct t_chain c;
	struct stat sv;
	FILE *fp;

	t_make_chain(f, &c, 1, T_CHAIN_BPC, NULL, 0);
	t_save_chain(st, src, &c, 0);
	tutti_store_close(st);
	real_before = malloc(t_file_size(real_data));
	real_after = malloc(t_file_size(real_data));
	assert_non_null(real_before);
	assert_non_null(real_after);
	assert_int_equal(t_disk_read(real_data, 0, real_before, t_file_size(real_data)), 0);
	fp = fopen(victim, "w");
	assert_non_null(fp);
	fputs("someone else's file\n", fp);
	fclose(fp);
	assert_int_equal(mkdir(linked, 0700), 0);

	for (int t = 0; t < 3; t++) {
		unlink(link_path);
		assert_int_equal(symlink(targets[t], link_path), 0);
		st = (struct tutti_store *)(uintptr_t)1;
		assert_int_equal(t_open_rc(f, &f->geo, linked, 8, NULL, &st), -ELOOP);
		assert_null(st);
		assert_true(f->rec.nr_err > 0);
		assert_int_equal(t_open_rc(f, &f->geo, linked, 8, &plain, &st), -ELOOP);
		assert_int_equal(t_open_rc(f, NULL, linked, 0, &existing, &st), -ELOOP);
		assert_null(st);
		/* The link itself is left alone. */
		assert_int_equal(lstat(link_path, &sv), 0);
		assert_true(S_ISLNK(sv.st_mode));
	}
	assert_int_equal(stat(victim, &sv), 0);
	assert_int_equal(sv.st_size, 20);
	assert_false(t_path_exists(nowhere));
	assert_int_equal(t_disk_read(real_data, 0, real_after, t_file_size(real_data)), 0);
	assert_memory_equal(real_before, real_after, t_file_size(real_data));
	st = t_open_ok(f, &f->geo, real, 8, NULL);
	t_assert_chain(f, st, src, dst, &c);
	tutti_store_close(st);
	free(real_before);
	free(real_after);
	t_kv_free(src);
	t_kv_free(dst);
	free(victim);
	free(nowhere);
	free(real_data);
	free(link_path);
	free(real);
	free(linked);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(
	        test_durable_open_existing_adopts_geometry_key_size_namespace_and_capacity),
	    cmocka_unit_test(
	        test_durable_store_of_another_model_or_namespace_is_eexist_and_untouched),
	    cmocka_unit_test(test_durable_open_replace_swaps_another_models_store_for_an_empty_one),
	    cmocka_unit_test(test_durable_other_format_versions_are_eproto_and_damage_is_ebadmsg),
	    cmocka_unit_test(test_durable_second_process_is_ebusy_while_the_store_is_open),
	    cmocka_unit_test(test_durable_created_directory_and_file_are_private),
	    cmocka_unit_test(test_durable_symbolic_link_as_data_file_is_eloop_and_writes_nothing),
	};

	return t_chain_run("identity", tests, sizeof(tests) / sizeof(tests[0]));
}
