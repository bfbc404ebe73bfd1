/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: the uring, posix and sync queues on a real O_DIRECT file: random data written and
 * read back (plain buffers, registered staging and vectors), up to depth I/Os in flight, -EAGAIN
 * past the depth, and an error completion (-EIO) rather than a hang for reads beyond end of file;
 * the sync queue moving I/Os in pieces hands every byte to its hook once, in order (before a
 * write, after a read).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/engine_impl.h"
#include "t_util.h"

#define FILE_BYTES (1u << 20)
#define SMALL_BYTES (8u << 10) /* the second file: reads past it hit end of file */
#define DEPTH 8u
#define WATCHDOG_S 30

struct config {
	const char *name;
	const struct tt_ioq_ops *ops;
	bool reg;             /* register the buffer (uring: fixed reads and writes) */
	uint32_t threads;     /* posix */
	bool async_reads;     /* uring: reads punted to io-wq (as on tmpfs) */
	uint32_t piece_bytes; /* sync: pieces, each handed to the fixture's hook */
};

/* Pieces that split the test's vectors inside their entries. */
#define PIECE (12u << 10)

static const struct config configs[] = {
    {"uring+registered", &tt_ioq_uring, true, 0, false, 0},
    {"uring", &tt_ioq_uring, false, 0, false, 0},
    {"uring+async reads", &tt_ioq_uring, true, 0, true, 0},
    {"posix", &tt_ioq_posix, false, 0, false, 0},
    {"posix/2 threads", &tt_ioq_posix, false, 2, false, 0},
    {"sync", &tt_ioq_sync, false, 0, false, 0},
    {"sync+pieces", &tt_ioq_sync, false, 0, false, PIECE},
};

#define NR_CONFIGS (sizeof(configs) / sizeof(configs[0]))

struct fixture {
	char *tmp;
	int fds[2];
	uint8_t *buf;  /* FILE_BYTES, the registered memory */
	uint8_t *back; /* FILE_BYTES */
	struct t_log rec;
	struct tt_log log;
	struct t_rng r;
	/* What the sync queue's hook was handed for tags 0..3, in order (other tags are not kept).
	 */
	uint8_t *fed[4];
	uint32_t fed_len[4];
};

#define FED_MAX (64u << 10)

static void
hook(void *arg, uint64_t tag, const struct iovec *iov, uint32_t nr)
{
	struct fixture *f = arg;

	if (tag >= 4) {
		return;
	}
	for (uint32_t i = 0; i < nr; i++) {
		if (f->fed_len[tag] + iov[i].iov_len <= FED_MAX) {
			memcpy(f->fed[tag] + f->fed_len[tag], iov[i].iov_base, iov[i].iov_len);
		}
		f->fed_len[tag] += (uint32_t)iov[i].iov_len;
	}
}

static bool g_have_uring;

static int
open_file(const char *dir, const char *name, off_t size)
{
	char *path = t_path_join(dir, name);
	int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);

	free(path);
	if (fd < 0 || ftruncate(fd, size) != 0) {
		return -1;
	}
	return fd;
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	f->fds[0] = open_file(f->tmp, "big", FILE_BYTES);
	f->fds[1] = open_file(f->tmp, "small", SMALL_BYTES);
	if (f->fds[0] < 0 || f->fds[1] < 0) {
		return -1;
	}
	f->buf = t_aligned_alloc(FILE_BYTES);
	f->back = t_aligned_alloc(FILE_BYTES);
	for (int i = 0; i < 4; i++) {
		f->fed[i] = t_aligned_alloc(FED_MAX);
	}
	f->log = (struct tt_log){.fn = t_log_fn, .arg = &f->rec, .level = TUTTI_LOG_DEBUG};
	t_rng_init(&f->r, t_seed(51));
	*state = f;
	alarm(WATCHDOG_S); /* a hung reap fails the test instead of stalling the suite */
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	alarm(0);
	close(f->fds[0]);
	close(f->fds[1]);
	free(f->buf);
	free(f->back);
	for (int i = 0; i < 4; i++) {
		free(f->fed[i]);
	}
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

/* Create the engine of config \p c, or return NULL when it cannot run here (skip). */
static struct tt_ioq *
engine(struct fixture *f, const struct config *c, uint32_t depth)
{
	struct tt_ioq_conf conf = {
	    .fds = f->fds,
	    .nr_fds = 2,
	    .reg_buf = c->reg ? f->buf : NULL,
	    .reg_bytes = c->reg ? FILE_BYTES : 0,
	    .depth = depth,
	    .max_iov = 8,
	    .threads = c->threads,
	    .async_reads = c->async_reads,
	    .log = &f->log,
	    .piece_bytes = c->piece_bytes,
	    .piece = c->piece_bytes ? hook : NULL,
	    .piece_arg = f,
	};
	struct tt_ioq *e = NULL;

	if (c->ops == &tt_ioq_uring && !g_have_uring) {
		return NULL;
	}
	assert_int_equal(tt_ioq_create(c->ops, &conf, &e), 0);
	assert_non_null(e);
	return e;
}

/* Reap exactly \p nr completions, each successful with the length of its I/O. */
static void
reap_ok(struct tt_ioq *e, const struct tt_io *ios, uint32_t nr)
{
	struct tt_io_done d[64];
	bool seen[64] = {false};
	uint32_t got = 0;

	assert_true(nr <= 64);
	while (got < nr) {
		int n = tt_ioq_reap(e, d, 64, 1);

		assert_true(n > 0);
		for (int i = 0; i < n; i++) {
			assert_true(d[i].tag < nr);
			assert_false(seen[d[i].tag]);
			seen[d[i].tag] = true;
			assert_int_equal(d[i].res, ios[d[i].tag].len);
		}
		got += (uint32_t)n;
	}
	assert_int_equal(e->inflight, 0);
}

/* Submit \p nr I/Os in batches of at most depth, reaping between batches. */
static void
run_all(struct tt_ioq *e, struct tt_io *ios, uint32_t nr, uint32_t depth)
{
	for (uint32_t i = 0; i < nr; i += depth) {
		uint32_t n = nr - i < depth ? nr - i : depth;
		struct tt_io batch[64];

		for (uint32_t j = 0; j < n; j++) {
			batch[j] = ios[i + j];
			batch[j].tag = j;
		}
		assert_int_equal(tt_ioq_submit(e, batch, n), 0);
		reap_ok(e, batch, n);
	}
}

static void
test_engines_write_then_read_back_random_data(void **state)
{
	struct fixture *f = *state;

	for (size_t ci = 0; ci < NR_CONFIGS; ci++) {
		struct tt_ioq *e = engine(f, &configs[ci], DEPTH);
		const uint32_t ext = 64u << 10, nr = FILE_BYTES / ext;
		struct tt_io ios[FILE_BYTES / (64u << 10)];
		uint32_t order[FILE_BYTES / (64u << 10)];

		if (e == NULL) {
			continue;
		}
		t_rng_fill(&f->r, f->buf, FILE_BYTES);
		for (uint32_t i = 0; i < nr; i++) {
			ios[i] = (struct tt_io){.off = (uint64_t)i * ext,
			                        .buf = f->buf + i * ext,
			                        .len = ext,
			                        .op = TT_IO_WRITE};
		}
		run_all(e, ios, nr, DEPTH);
		/* Read back into other memory, in another order, two extents per I/O. */
		memset(f->back, 0, FILE_BYTES);
		for (uint32_t i = 0; i < nr / 2; i++) {
			order[i] = i;
		}
		t_shuffle(&f->r, order, nr / 2);
		for (uint32_t i = 0; i < nr / 2; i++) {
			ios[i] = (struct tt_io){.off = (uint64_t)order[i] * 2 * ext,
			                        .buf = f->back + order[i] * 2 * ext,
			                        .len = 2 * ext,
			                        .op = TT_IO_READ};
		}
		run_all(e, ios, nr / 2, DEPTH);
		assert_memory_equal(f->back, f->buf, FILE_BYTES);
		/* And the file really holds it (not just some cache of the engine). */
		memset(f->back, 0, FILE_BYTES);
		assert_int_equal(pread(f->fds[0], f->back, FILE_BYTES, 0), FILE_BYTES);
		assert_memory_equal(f->back, f->buf, FILE_BYTES);
		assert_int_equal(e->nr_ios, nr + nr / 2);
		tt_ioq_destroy(e);
	}
}

static void
test_engines_vectored_io_round_trips(void **state)
{
	struct fixture *f = *state;

	for (size_t ci = 0; ci < NR_CONFIGS; ci++) {
		struct tt_ioq *e = engine(f, &configs[ci], DEPTH);
		/* Scattered pieces of memory, written as one contiguous extent at 128 KiB. */
		struct iovec wv[3] = {
		    {f->buf + 8192, 4096}, {f->buf + 65536, 16384}, {f->buf + 4096, 4096}};
		struct iovec rv[2] = {{f->back + 40960, 12288}, {f->back + 0, 12288}};
		struct tt_io io[1];

		if (e == NULL) {
			continue;
		}
		t_rng_fill(&f->r, f->buf, FILE_BYTES);
		memset(f->back, 0, FILE_BYTES);
		io[0] = (struct tt_io){
		    .off = 131072, .iov = wv, .nr_iov = 3, .len = 24576, .op = TT_IO_WRITE};
		assert_int_equal(tt_ioq_submit(e, io, 1), 0);
		wv[0].iov_base = f->back; /* the engine copied the vector at submission */
		reap_ok(e, io, 1);
		io[0] = (struct tt_io){
		    .off = 131072, .iov = rv, .nr_iov = 2, .len = 24576, .op = TT_IO_READ};
		assert_int_equal(tt_ioq_submit(e, io, 1), 0);
		reap_ok(e, io, 1);
		assert_memory_equal(f->back + 40960, f->buf + 8192, 4096);
		assert_memory_equal(f->back + 40960 + 4096, f->buf + 65536, 8192);
		assert_memory_equal(f->back, f->buf + 65536 + 8192, 8192);
		assert_memory_equal(f->back + 8192, f->buf + 4096, 4096);
		tt_ioq_destroy(e);
	}
}

static void
test_engines_keep_depth_ios_in_flight_and_refuse_more(void **state)
{
	struct fixture *f = *state;
	const uint32_t depth = 32;

	for (size_t ci = 0; ci < NR_CONFIGS; ci++) {
		struct tt_ioq *e = engine(f, &configs[ci], depth);
		struct tt_io ios[33];

		if (e == NULL) {
			continue;
		}
		t_rng_fill(&f->r, f->buf, FILE_BYTES);
		assert_int_equal(pwrite(f->fds[0], f->buf, FILE_BYTES, 0), FILE_BYTES);
		memset(f->back, 0, FILE_BYTES);
		for (uint32_t i = 0; i < 33; i++) {
			/* 4 KiB reads spread over the file, all in one submission. */
			ios[i] = (struct tt_io){.tag = i,
			                        .off = (uint64_t)i * 28672,
			                        .buf = f->back + (uint64_t)i * 28672,
			                        .len = 4096,
			                        .op = TT_IO_READ};
		}
		assert_int_equal(tt_ioq_submit(e, ios, 33), -EAGAIN);
		assert_int_equal(tt_ioq_submit(e, ios, depth), 0);
		assert_int_equal(e->inflight, depth);
		assert_int_equal(tt_ioq_submit(e, ios + depth, 1), -EAGAIN);
		reap_ok(e, ios, depth);
		for (uint32_t i = 0; i < depth; i++) {
			assert_memory_equal(f->back + i * 28672, f->buf + i * 28672, 4096);
		}
		/* Room again after reaping. */
		ios[depth].tag = 0;
		assert_int_equal(tt_ioq_submit(e, ios + depth, 1), 0);
		reap_ok(e, ios + depth, 1);
		tt_ioq_destroy(e);
	}
}

static void
test_engines_read_beyond_eof_completes_with_eio(void **state)
{
	struct fixture *f = *state;

	for (size_t ci = 0; ci < NR_CONFIGS; ci++) {
		struct tt_ioq *e = engine(f, &configs[ci], DEPTH);
		struct tt_io ios[3] = {
		    /* wholly past the end of the 8 KiB file */
		    {.tag = 0, .off = SMALL_BYTES, .buf = f->back, .len = 4096, .file = 1},
		    /* straddling the end: a short transfer, then end of file */
		    {.tag = 1, .off = 4096, .buf = f->back + 8192, .len = 8192, .file = 1},
		    /* a good one in the same batch still succeeds */
		    {.tag = 2, .off = 0, .buf = f->back + 65536, .len = 4096, .file = 0},
		};
		struct tt_io_done d[3];
		int32_t res[3] = {1, 1, 1};
		uint32_t got = 0;

		if (e == NULL) {
			continue;
		}
		assert_int_equal(tt_ioq_submit(e, ios, 3), 0);
		while (got < 3) {
			int n = tt_ioq_reap(e, d, 3, 1);

			assert_true(n > 0);
			for (int i = 0; i < n; i++) {
				res[d[i].tag] = d[i].res;
			}
			got += (uint32_t)n;
		}
		assert_int_equal(res[0], -EIO);
		assert_int_equal(res[1], -EIO);
		assert_int_equal(res[2], 4096);
		assert_int_equal(e->inflight, 0);
		tt_ioq_destroy(e);
	}
}

static void
test_engines_write_error_is_reported_in_the_completion(void **state)
{
	struct fixture *f = *state;
	char *path = t_path_join(f->tmp, "big");
	int ro = open(path, O_RDONLY | O_DIRECT);

	free(path);
	assert_true(ro >= 0);
	for (size_t ci = 0; ci < NR_CONFIGS; ci++) {
		int keep = f->fds[1];
		struct tt_ioq *e;
		struct tt_io io = {
		    .tag = 0, .off = 0, .buf = f->buf, .len = 4096, .file = 1, .op = TT_IO_WRITE};
		struct tt_io_done d;

		f->fds[1] = ro; /* file 1 is read-only for this engine (which borrows the array) */
		e = engine(f, &configs[ci], DEPTH);
		if (e == NULL) {
			f->fds[1] = keep;
			continue;
		}
		assert_int_equal(tt_ioq_submit(e, &io, 1), 0);
		assert_int_equal(tt_ioq_reap(e, &d, 1, 1), 1);
		assert_int_equal(d.res, -EBADF);
		tt_ioq_destroy(e);
		f->fds[1] = keep;
	}
	close(ro);
}

/* The sync queue in pieces: every byte of a vectored write is handed over before it goes out and
 * every byte of a read once it is in, each once and in order; a read cut short by the end of the
 * file hands over what it read. */
static void
test_sync_pieces_feed_every_byte_once_in_order(void **state)
{
	struct fixture *f = *state;
	const struct config *c = &configs[NR_CONFIGS - 1];
	struct tt_ioq *e = engine(f, c, DEPTH);
	struct iovec wv[3] = {
	    {f->buf + 8192, 4096}, {f->buf + 65536, 16384}, {f->buf + 4096, 4096}};
	struct iovec rv[2] = {{f->back + 40960, 12288}, {f->back + 0, 12288}};
	struct tt_io io[2];
	struct tt_io_done d[2];

	assert_int_equal(c->piece_bytes, PIECE);
	t_rng_fill(&f->r, f->buf, FILE_BYTES);
	t_rng_fill(&f->r, f->back, FILE_BYTES);
	io[0] = (struct tt_io){
	    .tag = 1, .off = 131072, .iov = wv, .nr_iov = 3, .len = 24576, .op = TT_IO_WRITE};
	assert_int_equal(tt_ioq_submit(e, io, 1), 0);
	assert_int_equal(tt_ioq_reap(e, d, 2, 1), 1);
	assert_int_equal(d[0].res, 24576);
	assert_int_equal(f->fed_len[1], 24576);
	assert_memory_equal(f->fed[1], f->buf + 8192, 4096);
	assert_memory_equal(f->fed[1] + 4096, f->buf + 65536, 16384);
	assert_memory_equal(f->fed[1] + 20480, f->buf + 4096, 4096);
	io[0] = (struct tt_io){
	    .tag = 2, .off = 131072, .iov = rv, .nr_iov = 2, .len = 24576, .op = TT_IO_READ};
	/* Straddling the end of the 8 KiB file: 4 KiB in, then end of file. */
	io[1] = (struct tt_io){
	    .tag = 3, .off = 4096, .buf = f->back + 65536, .len = 8192, .file = 1, .op = 0};
	assert_int_equal(pwrite(f->fds[1], f->buf, SMALL_BYTES, 0), SMALL_BYTES);
	assert_int_equal(tt_ioq_submit(e, io, 2), 0);
	assert_int_equal(tt_ioq_reap(e, d, 2, 2), 2);
	assert_int_equal(d[0].res, 24576);
	assert_int_equal(d[1].res, -EIO);
	assert_int_equal(f->fed_len[2], 24576);
	assert_memory_equal(f->fed[2], f->back + 40960, 12288);
	assert_memory_equal(f->fed[2] + 12288, f->back, 12288);
	assert_memory_equal(f->fed[2], f->fed[1], 24576);
	assert_int_equal(f->fed_len[3], 4096);
	assert_memory_equal(f->fed[3], f->buf + 4096, 4096);
	tt_ioq_destroy(e);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_engines_write_then_read_back_random_data, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_engines_vectored_io_round_trips, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_engines_keep_depth_ios_in_flight_and_refuse_more,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_engines_read_beyond_eof_completes_with_eio, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_engines_write_error_is_reported_in_the_completion,
	                                    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sync_pieces_feed_every_byte_once_in_order, setup,
	                                    teardown),
	};
	int rc = t_uring_probe();

	if (rc == -ENOSYS || rc == -EPERM) {
		return T_EXIT_SKIP;
	}
	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	g_have_uring = rc == 0;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
