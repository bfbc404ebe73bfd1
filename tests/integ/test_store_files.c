/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: what a store keeps on disk, through the public calls that tools use instead of
 * the library's internals: the format version (tutti_format_version: the one every data file
 * of a new store carries), the data file names of a store directory (tutti_store_file_name: the
 * names a created store's directories hold, every index up to the limit, and its errors) and
 * the data files of an open store (tutti_store_file: each directory's files in order with their
 * paths, the slots each holds adding up to the capacity, the slot headers of saved chunks found
 * where it says the slots are, a read-only open listing the same, and each error).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

#include "format/format.h"
#include "t_disk.h"
#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define NR_DIRS 2u
#define FILES 3u  /* per directory */
#define SLOTS 10u /* 5 per directory: its files hold 2, 2 and 1 */
#define CHUNKS 7u

/* The layout Python and other bindings mirror: pinned, so that a change is deliberate. */
_Static_assert(sizeof(struct tutti_store_file) == 32, "struct tutti_store_file changed");

/* \p len bytes at \p off of the file \p path itself (t_disk_read sees a directory's files as
 * one). */
static int
read_at(const char *path, uint64_t off, void *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0) {
		return -errno;
	}
	n = pread(fd, buf, len, (off_t)off);
	close(fd);
	return n == (ssize_t)len ? 0 : -EIO;
}

static int
setup(void **state)
{
	struct tutti_geometry geo;

	if (tutti_geometry_preset("tiny", &geo) != 0) {
		return -1;
	}
	return t_tmp_fixture_setup(state, &geo, t_seed(44));
}

/* The store of the fixture: NR_DIRS directories "disk0", "disk1" of FILES data files each. */
struct dirs {
	char *path[NR_DIRS];
	const char *ptrs[NR_DIRS];
};

static struct dirs
dirs_new(const struct t_tmp_fixture *f)
{
	struct dirs d;

	for (uint32_t i = 0; i < NR_DIRS; i++) {
		char name[16];

		snprintf(name, sizeof(name), "disk%u", i);
		d.path[i] = t_path_join(f->tmp, name);
		d.ptrs[i] = d.path[i];
	}
	return d;
}

static void
dirs_free(struct dirs *d)
{
	for (uint32_t i = 0; i < NR_DIRS; i++) {
		free(d->path[i]);
	}
}

static struct tutti_store *
open_store(struct t_tmp_fixture *f, struct dirs *d, uint32_t flags)
{
	struct tutti_store_opts o;
	struct tutti_store *st = NULL;

	t_store_opts(&o, (flags & TUTTI_OPEN_EXISTING) ? NULL : &f->geo, d->ptrs, NR_DIRS, SLOTS,
	             TUTTI_ENGINE_URING, &f->rec);
	o.flags = flags;
	o.data_files = FILES;
	assert_int_equal(tutti_store_open(o.flags & TUTTI_OPEN_EXISTING ? NULL : &f->geo, &o, &st),
	                 0);
	return st;
}

static void
test_format_version_is_the_one_a_new_store_writes(void **state)
{
	struct t_tmp_fixture *f = *state;
	struct dirs d = dirs_new(f);
	struct tutti_store *st = open_store(f, &d, TUTTI_OPEN_CREATE);
	uint8_t sb[16];
	char *path;

	assert_int_equal(tutti_format_version(), TT_SB_VERSION);
	assert_int_equal(tutti_format_version(), T_SB_VERSION); /* docs/format.md's */
	tutti_store_close(st);
	/* Every data file's superblock: the magic, then the version (little-endian). */
	for (uint32_t i = 0; i < NR_DIRS; i++) {
		for (uint32_t k = 0; k < FILES; k++) {
			char name[32];

			assert_true(tutti_store_file_name(k, name, sizeof(name)) > 0);
			path = t_path_join(d.path[i], name);
			assert_int_equal(read_at(path, 0, sb, sizeof(sb)), 0);
			assert_memory_equal(sb, TT_SB_MAGIC, 8);
			assert_int_equal((uint32_t)sb[T_SB_OFF_VERSION] |
			                     (uint32_t)sb[T_SB_OFF_VERSION + 1] << 8 |
			                     (uint32_t)sb[T_SB_OFF_VERSION + 2] << 16 |
			                     (uint32_t)sb[T_SB_OFF_VERSION + 3] << 24,
			                 tutti_format_version());
			free(path);
		}
	}
	dirs_free(&d);
}

static void
test_file_names_are_the_ones_a_store_directory_holds(void **state)
{
	struct t_tmp_fixture *f = *state;
	struct dirs d = dirs_new(f);
	struct tutti_store *st = open_store(f, &d, TUTTI_OPEN_CREATE);
	char name[32], small[8];
	uint32_t n = 0;

	tutti_store_close(st);
	assert_int_equal(tutti_store_file_name(0, name, sizeof(name)), 10);
	assert_string_equal(name, "tutti.data");
	assert_int_equal(tutti_store_file_name(1, name, sizeof(name)), 12);
	assert_string_equal(name, "tutti.data.1");
	assert_int_equal(tutti_store_file_name(63, name, sizeof(name)), 13);
	assert_string_equal(name, "tutti.data.63");
	/* The names of the files the directory holds, and no other file in it by a later name. */
	for (uint32_t k = 0; tutti_store_file_name(k, name, sizeof(name)) > 0; k++) {
		char *path = t_path_join(d.path[0], name);

		assert_true(t_path_exists(path) == (k < FILES));
		free(path);
		n++;
	}
	assert_int_equal(n, TT_SB_MAX_FILES);
	/* Errors: the end of the names, a buffer too short (untouched), no buffer. */
	assert_int_equal(tutti_store_file_name(TT_SB_MAX_FILES, name, sizeof(name)), -ERANGE);
	assert_int_equal(tutti_store_file_name(UINT32_MAX, name, sizeof(name)), -ERANGE);
	memset(small, 'x', sizeof(small));
	assert_int_equal(tutti_store_file_name(0, small, sizeof(small)), -ENAMETOOLONG);
	assert_int_equal(tutti_store_file_name(0, name, 10), -ENAMETOOLONG); /* no room for NUL */
	for (size_t i = 0; i < sizeof(small); i++) {
		assert_int_equal(small[i], 'x');
	}
	assert_int_equal(tutti_store_file_name(0, name, 11), 10);
	assert_int_equal(tutti_store_file_name(0, NULL, 32), -EINVAL);
	dirs_free(&d);
}

/* Every file of \p st: in order, each directory's FILES files with their paths (the directory's
 * canonical path and the file's name), its slots inside the file; all the slots together the
 * store's capacity. */
static void
assert_listing(struct tutti_store *st, const struct dirs *d)
{
	struct tutti_stats s = t_store_stats(st);
	uint64_t slots = 0;
	uint32_t i;

	for (i = 0;; i++) {
		struct tutti_store_file info = {.size = sizeof(info)};
		char path[PATH_MAX], want[PATH_MAX + 32], name[32], *real;
		struct stat sb;
		int rc = tutti_store_file(st, i, &info, path, sizeof(path));

		if (rc == -ENOENT) {
			break;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(info.size, sizeof(info));
		assert_int_equal(info.dir, i / FILES);
		assert_int_equal(info.index, i % FILES);
		assert_int_equal(info.reserved, 0);
		real = realpath(d->path[info.dir], NULL);
		assert_non_null(real);
		assert_true(tutti_store_file_name(info.index, name, sizeof(name)) > 0);
		snprintf(want, sizeof(want), "%s/%s", real, name);
		assert_string_equal(path, want);
		free(real);
		assert_int_equal(stat(path, &sb), 0);
		assert_true(S_ISREG(sb.st_mode));
		assert_true(info.slots_off > 0);
		assert_int_equal(info.slots_bytes % s.slot_bytes, 0);
		/* Rows of 2, 2 and 1 slots: file f holds one more than the last while f < 5 % 3. */
		assert_int_equal(info.slots_bytes / s.slot_bytes, info.index < 2 ? 2 : 1);
		assert_true(info.slots_off + info.slots_bytes <= (uint64_t)sb.st_size);
		slots += info.slots_bytes / s.slot_bytes;
	}
	assert_int_equal(i, NR_DIRS * FILES);
	assert_int_equal(slots, s.capacity_slots);
	assert_int_equal(slots, SLOTS);
}

static void
test_store_file_lists_every_data_file_with_its_slots(void **state)
{
	struct t_tmp_fixture *f = *state;
	struct dirs d = dirs_new(f);
	struct tutti_store *st = open_store(f, &d, TUTTI_OPEN_CREATE);

	assert_listing(st, &d);
	tutti_store_close(st);
	/* A read-only open of the same store lists the same files. */
	st = open_store(f, &d, TUTTI_OPEN_EXISTING | TUTTI_OPEN_READ_ONLY);
	assert_listing(st, &d);
	tutti_store_close(st);
	dirs_free(&d);
}

/* The slot headers of saved chunks lie where tutti_store_file says the slots are: counted over
 * every slot of every file, one per chunk saved, and none before a save. */
static uint32_t
count_slot_headers(struct tutti_store *st)
{
	struct tutti_stats s = t_store_stats(st);
	uint32_t n = 0;

	for (uint32_t i = 0;; i++) {
		struct tutti_store_file info = {.size = sizeof(info)};
		char path[PATH_MAX];
		int rc = tutti_store_file(st, i, &info, path, sizeof(path));

		if (rc == -ENOENT) {
			return n;
		}
		assert_int_equal(rc, 0);
		for (uint64_t off = 0; off < info.slots_bytes; off += s.slot_bytes) {
			uint8_t magic[8];

			assert_int_equal(read_at(path, info.slots_off + off, magic, 8), 0);
			n += memcmp(magic, T_SLOT_MAGIC, 8) == 0;
		}
	}
}

static void
test_store_file_slots_hold_the_saved_chunks(void **state)
{
	struct t_tmp_fixture *f = *state;
	struct dirs d = dirs_new(f);
	struct tutti_store *st = open_store(f, &d, TUTTI_OPEN_CREATE);
	uint32_t bpc = f->geo.chunk_tokens / f->geo.block_tokens, nr_blocks = CHUNKS * bpc;
	struct t_kv *src = t_kv_new(&f->geo, T_LAYOUT_BLOCKS_FIRST, nr_blocks, &f->r);
	uint8_t *keys = t_keys_new(&f->r, CHUNKS, 32);
	uint32_t *ids = calloc(nr_blocks, sizeof(*ids));
	struct tutti_request r;

	assert_non_null(ids);
	for (uint32_t b = 0; b < nr_blocks; b++) {
		ids[b] = b;
	}
	r = t_request(keys, CHUNKS, 0, 0, ids, nr_blocks);
	assert_int_equal(count_slot_headers(st), 0);
	assert_int_equal(tutti_store_save(st, src->kv, &r, 1, NULL), CHUNKS);
	assert_int_equal(count_slot_headers(st), CHUNKS);
	tutti_store_close(st);
	t_kv_free(src);
	free(keys);
	free(ids);
	dirs_free(&d);
}

static void
test_store_file_errors(void **state)
{
	struct t_tmp_fixture *f = *state;
	struct dirs d = dirs_new(f);
	struct tutti_store *st = open_store(f, &d, TUTTI_OPEN_CREATE);
	struct tutti_store_file info = {.size = sizeof(info)};
	char path[PATH_MAX], small[8];

	assert_int_equal(tutti_store_file(NULL, 0, &info, path, sizeof(path)), -EINVAL);
	assert_int_equal(tutti_store_file(st, 0, NULL, path, sizeof(path)), -EINVAL);
	info.size = sizeof(info) - 8;
	assert_int_equal(tutti_store_file(st, 0, &info, path, sizeof(path)), -EINVAL);
	info.size = sizeof(info);
	assert_int_equal(tutti_store_file(st, 0, &info, NULL, 16), -EINVAL);
	/* The end of the listing. */
	assert_int_equal(tutti_store_file(st, NR_DIRS * FILES, &info, path, sizeof(path)), -ENOENT);
	assert_int_equal(tutti_store_file(st, UINT32_MAX, &info, NULL, 0), -ENOENT);
	/* No path asked for: the rest still comes. */
	memset(&info, 0, sizeof(info));
	info.size = sizeof(info);
	assert_int_equal(tutti_store_file(st, FILES + 1, &info, NULL, 0), 0);
	assert_int_equal(info.dir, 1);
	assert_int_equal(info.index, 1);
	assert_true(info.slots_bytes > 0);
	/* A path buffer too short: -ENAMETOOLONG, the place still filled, the path empty. */
	memset(&info, 0, sizeof(info));
	info.size = sizeof(info);
	memset(small, 'x', sizeof(small));
	assert_int_equal(tutti_store_file(st, FILES + 1, &info, small, sizeof(small)),
	                 -ENAMETOOLONG);
	assert_int_equal(info.dir, 1);
	assert_int_equal(info.index, 1);
	assert_true(info.slots_bytes > 0);
	assert_int_equal(small[0], '\0');
	assert_int_equal(tutti_store_file(st, 0, &info, path, 0), -ENAMETOOLONG);
	tutti_store_close(st);
	dirs_free(&d);
}

int
main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, t_tmp_fixture_teardown)
	const struct CMUnitTest tests[] = {
	    T(test_format_version_is_the_one_a_new_store_writes),
	    T(test_file_names_are_the_ones_a_store_directory_holds),
	    T(test_store_file_lists_every_data_file_with_its_slots),
	    T(test_store_file_slots_hold_the_saved_chunks),
	    T(test_store_file_errors),
	};

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	return cmocka_run_group_tests_name("store_files", tests, NULL, NULL);
}
