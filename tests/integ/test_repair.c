/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: a repair converges (issue 48): after any one repair that runs to the end (an open
 * with TUTTI_OPEN_REPAIR, then tutti_store_fsck with TUTTI_FSCK_REPAIR, as `tutti fsck --repair`
 * does), whatever ran or was killed before it, the next open finds no damaged header and fsck no
 * damaged chunk. Covered: one flipped bit anywhere in a slot header (every bit of every field:
 * a flipped version bit was kept as "another version's" header and never erased); repairs
 * killed with SIGKILL at random points of their run, then one full repair; an older copy of a
 * key, damaged as well, that came back once the newer copy was removed. An intact header of
 * another version (sealed by its checksum) is not damage: reported, never erased. A superblock
 * with any
 * one bit flipped fails every open, a repair's included, the same way each time, and is left
 * byte for byte as it was: once the bit is restored, every chunk is there.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <xxhash.h>

#include "t_chain.h"
#include "t_disk.h"
#include "t_kv.h"
#include "t_util.h"
#include "tutti/tutti.h"

/* One-chunk chains over the same source blocks: more chunks than the KV has blocks. */
#define MAX_CHUNKS 192u

#define REPAIR (TUTTI_OPEN_EXISTING | TUTTI_OPEN_REPAIR)
#define READ_ONLY (TUTTI_OPEN_EXISTING | TUTTI_OPEN_READ_ONLY)

/*
 * t_open_rc() with \p flags as given (TUTTI_OPEN_CREATE among them or not; with
 * TUTTI_OPEN_EXISTING, no geometry), and a small engine: these tests open stores thousands of
 * times, and the default engine's threads and staging would make most of their time.
 */
static int
open_rc(struct t_chain_fixture *f, const char *dir, uint32_t flags, uint64_t slots,
        struct tutti_store **st)
{
	const struct tutti_geometry *g = (flags & TUTTI_OPEN_EXISTING) ? NULL : &f->geo;
	const char *dirs[1] = {dir};
	struct tutti_store_opts o;

	t_store_opts(&o, g, dirs, 1, slots, f->engine, &f->rec);
	o.flags = flags;
	o.ns = T_CHAIN_NS;
	o.ns_bytes = (uint32_t)strlen(o.ns);
	o.key_bytes = T_CHAIN_KB;
	o.staging_bytes = 1u << 20;
	o.queue_depth = 8;
	if (f->engine == TUTTI_ENGINE_POSIX) {
		o.engine_opts = "threads=2";
	}
	t_log_reset(&f->rec);
	return tutti_store_open(g, &o, st);
}

static struct tutti_store *
open_ok(struct t_chain_fixture *f, const char *dir, uint32_t flags, uint64_t slots)
{
	struct tutti_store *st = NULL;

	assert_int_equal(open_rc(f, dir, flags, slots, &st), 0);
	return st;
}

/*
 * A directory's data files, kept open for O_DIRECT reads and writes of slot headers and sectors:
 * these tests damage hundreds of headers per round, and t_disk's opens per call would make most
 * of their time. Slot s is slot s / nr of file s % nr (docs/format.md).
 */
struct files {
	int fd[64];
	uint32_t nr;
	uint32_t nr_slots;
	uint64_t slot_bytes;
	uint8_t *buf; /* one 4 KiB sector */
};

static uint64_t
get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--) {
		v = v << 8 | p[i];
	}
	return v;
}

static void
files_open(struct files *d, const char *dir)
{
	d->buf = t_aligned_alloc(4096);
	for (uint32_t f = 0; f == 0 || f < d->nr; f++) {
		char name[32];
		char *path;

		snprintf(name, sizeof(name), f == 0 ? "tutti.data" : "tutti.data.%u", f);
		path = t_path_join(dir, name);
		d->fd[f] = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
		assert_true(d->fd[f] >= 0);
		free(path);
		if (f == 0) {
			assert_int_equal(pread(d->fd[0], d->buf, 4096, 0), 4096);
			d->nr = (uint32_t)get_le(d->buf + T_SB_OFF_NR_FILES, 4);
			d->nr_slots = (uint32_t)get_le(d->buf + T_SB_OFF_NR_SLOTS, 8);
			d->slot_bytes = get_le(d->buf + T_SB_OFF_SLOT_BYTES, 8);
			assert_true(d->nr >= 1 && d->nr <= 64);
		}
	}
}

static void
files_close(struct files *d)
{
	for (uint32_t f = 0; f < d->nr; f++) {
		close(d->fd[f]);
	}
	free(d->buf);
}

/* Read (into d->buf) or write (from it) the sector at \p off within \p slot. */
static void
sector_io(struct files *d, uint32_t slot, uint64_t off, bool write)
{
	int fd = d->fd[slot % d->nr];
	off_t at =
	    (off_t)(T_DATA_OFF + (uint64_t)(slot / d->nr) * d->slot_bytes + off / 4096 * 4096);

	assert_int_equal(write ? pwrite(fd, d->buf, 4096, at) : pread(fd, d->buf, 4096, at), 4096);
}

/* Flip bit \p bit (0..7) of byte \p off of \p slot. */
static void
flip(struct files *d, uint32_t slot, uint64_t off, unsigned bit)
{
	sector_io(d, slot, off, false);
	d->buf[off % 4096] ^= (uint8_t)(1u << bit);
	sector_io(d, slot, off, true);
}

/* The slot of each of the \p n one-chunk chains \p c, from their headers. */
static void
slots_of(struct files *d, const struct t_chain *c, uint32_t n, uint32_t *slots)
{
	for (uint32_t i = 0; i < n; i++) {
		slots[i] = UINT32_MAX;
	}
	for (uint32_t s = 0; s < d->nr_slots; s++) {
		sector_io(d, s, 0, false);
		for (uint32_t i = 0; i < n && t_hdr_committed(d->buf); i++) {
			if (t_hdr_has_key(d->buf, t_key_of(&c[i], 0), T_CHAIN_KB)) {
				assert_int_equal(slots[i], UINT32_MAX);
				slots[i] = s;
			}
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		assert_true(slots[i] != UINT32_MAX);
	}
}

/* \p n one-chunk chains of new random keys, all saved from the blocks of one. */
static void
make_chunks(struct t_chain_fixture *f, struct t_chain *c, uint32_t n)
{
	t_make_chain(f, &c[0], 1, T_CHAIN_BPC, NULL, 0);
	for (uint32_t i = 1; i < n; i++) {
		c[i] = c[0];
		t_rng_fill(&f->r, c[i].keys, T_CHAIN_KB);
	}
}

/* Save every chunk not stored (those a repair removed); returns how many were written. */
static uint32_t
save_missing(struct t_chain_fixture *f, const struct t_store_case *tc, const struct t_chain *c,
             uint32_t n, uint64_t slots)
{
	struct tutti_store *st = open_ok(f, tc->dir, TUTTI_OPEN_CREATE, slots);
	struct tutti_request reqs[MAX_CHUNKS];
	int32_t status[MAX_CHUNKS];
	uint32_t written = 0;

	assert_true(n <= MAX_CHUNKS);
	for (uint32_t i = 0; i < n; i++) {
		reqs[i] = t_chain_req(&c[i], 1, 0, c[i].ids);
	}
	assert_true(tutti_store_save(st, tc->src->kv, reqs, n, status) >= 0);
	for (uint32_t i = 0; i < n; i++) {
		assert_true(status[i] == 0 || status[i] == 1);
		written += status[i] == 0;
	}
	tutti_store_close(st);
	return written;
}

/* One repair, run to the end, as `tutti fsck --repair` runs it. */
static struct tutti_fsck_report
repair(struct t_chain_fixture *f, const char *dir)
{
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	struct tutti_store *st = open_ok(f, dir, REPAIR, 0);

	assert_int_equal(tutti_store_fsck(st, TUTTI_FSCK_REPAIR, &rep), 0);
	tutti_store_close(st);
	return rep;
}

/*
 * What `tutti fsck` checks, read-only: no header dropped at open, no chunk failing its checksum,
 * and \p chunks chunks stored (none lost beyond the damaged ones). \p what says which case.
 */
static void
assert_clean(struct t_chain_fixture *f, const char *dir, uint64_t chunks, const char *what)
{
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	struct tutti_store *st = open_ok(f, dir, READ_ONLY, 0);
	struct tutti_stats s = t_store_stats(st);

	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	tutti_store_close(st);
	if (s.recovery_dropped != 0 || rep.corrupt_chunks != 0 || s.recovered_chunks != chunks) {
		fail_msg("%s: after a repair, %llu headers dropped, %llu chunks damaged, %llu "
		         "chunks stored (%llu expected)",
		         what, (unsigned long long)s.recovery_dropped,
		         (unsigned long long)rep.corrupt_chunks,
		         (unsigned long long)s.recovered_chunks, (unsigned long long)chunks);
	}
}

/* ---- one flipped bit in a slot header ---- */

static void
test_repair_erases_a_slot_header_with_any_bit_flipped(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "bits", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	const uint32_t n = 128, len = t_slot_hdr_len(f->geo.nr_layers);
	struct t_chain c[128];
	uint32_t slots[128];

	if (f->engine != TUTTI_ENGINE_POSIX) {
		/* What a header is does not depend on the engine: once is enough. */
		t_store_case_free(&tc);
		skip();
	}
	make_chunks(f, c, n);
	assert_int_equal(save_missing(f, &tc, c, n, n + 16), n);
	/* Each round flips one bit in each of n headers: every bit of the encoded header, the
	 * fields, the object checksums and the header's own checksum, is flipped once. */
	for (uint32_t first = 0; first < 8 * len; first += n) {
		uint32_t nr = first + n <= 8 * len ? n : 8 * len - first;
		struct files d;
		char what[64];

		files_open(&d, tc.dir);
		slots_of(&d, c, nr, slots);
		for (uint32_t i = 0; i < nr; i++) {
			flip(&d, slots[i], (first + i) / 8, (first + i) % 8);
		}
		files_close(&d);
		repair(f, tc.dir);
		snprintf(what, sizeof(what), "header bits %u..%u flipped", first, first + nr - 1);
		assert_clean(f, tc.dir, n - nr, what);
		/* The damaged chunks are gone, and saved again for the next round. */
		assert_int_equal(save_missing(f, &tc, c, n, n + 16), nr);
	}
	assert_clean(f, tc.dir, n, "every chunk saved again");
	t_store_case_free(&tc);
}

/* ---- an older copy of a key ---- */

/*
 * Put a copy of \p key's slot into a free slot, with an older sequence number, as a chunk that
 * was evicted and then saved again leaves it. Returns the copy's slot.
 */
static uint32_t
older_copy(struct t_chain_fixture *f, const char *path, const uint8_t *key)
{
	uint64_t slot_bytes = tutti_geometry_slot_bytes(&f->geo), seq, sum;
	uint32_t from = t_key_slot(path, &f->geo, key, T_CHAIN_KB), to = t_free_slot(path, &f->geo);
	uint32_t len = t_slot_hdr_len(f->geo.nr_layers);
	uint8_t *s = t_aligned_alloc(slot_bytes);

	assert_true(to != UINT32_MAX);
	assert_int_equal(t_disk_read(path, t_slot_off(&f->geo, from), s, slot_bytes), 0);
	memcpy(&seq, s + T_SLOT_OFF_SEQ, 8);
	assert_true(seq > 0);
	seq--;
	memcpy(s + T_SLOT_OFF_SEQ, &seq, 8);
	sum = XXH3_64bits(s, len - 8);
	memcpy(s + len - 8, &sum, 8);
	assert_int_equal(t_disk_write(path, t_slot_off(&f->geo, to), s, slot_bytes), 0);
	free(s);
	return to;
}

/* Flip a random bit of a random object's payload of \p slot. */
static void
flip_object_bit(struct t_chain_fixture *f, struct files *d, uint32_t slot)
{
	uint64_t off = TUTTI_SLOT_HEADER_BYTES +
	               t_rng_below(&f->r, f->geo.nr_layers) * tutti_geometry_object_bytes(&f->geo) +
	               t_rng_below(&f->r, T_CHAIN_BPC * tutti_geometry_layer_block_bytes(&f->geo));

	flip(d, slot, off, t_rng_below(&f->r, 8));
}

static void
test_repair_checks_the_older_copy_of_a_removed_chunk(void **state)
{
	struct t_chain_fixture *f = *state;

	/* The older copy damaged too: the repair removes it as well. Intact: it is what the key
	 * holds from then on, as at any open. */
	for (int older_damaged = 1; older_damaged >= 0; older_damaged--) {
		struct t_store_case tc = t_chain_case_new(
		    f, older_damaged ? "older.bad" : "older.ok", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
		struct t_chain c[4];
		struct tutti_store *st;
		uint32_t newer, older, both[2];
		struct files d;

		make_chunks(f, c, 4);
		assert_int_equal(save_missing(f, &tc, c, 4, 16), 4);
		older = older_copy(f, tc.path, t_key_of(&c[3], 0));
		assert_int_equal(
		    t_find_key_slots(tc.path, &f->geo, t_key_of(&c[3], 0), T_CHAIN_KB, both, 2), 2);
		newer = both[0] == older ? both[1] : both[0];
		st = open_ok(f, tc.dir, READ_ONLY, 0);
		t_assert_recovery(st, 4, 0, 0, 1);
		tutti_store_close(st);

		files_open(&d, tc.dir);
		flip_object_bit(f, &d, newer);
		if (older_damaged) {
			flip_object_bit(f, &d, older);
		}
		files_close(&d);
		repair(f, tc.dir);
		assert_clean(f, tc.dir, older_damaged ? 3 : 4,
		             older_damaged ? "both copies damaged" : "the newer copy damaged");
		st = open_ok(f, tc.dir, READ_ONLY, 0);
		assert_int_equal(tutti_store_lookup(st, c[3].keys, 1, NULL), older_damaged ? 0 : 1);
		if (!older_damaged) {
			t_assert_chain(f, st, tc.src, tc.dst, &c[3]);
		}
		tutti_store_close(st);
		t_store_case_free(&tc);
	}
}

/* ---- an intact header of another version ---- */

static void
test_repair_keeps_an_intact_header_of_another_version(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "foreign", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	uint32_t len = t_slot_hdr_len(f->geo.nr_layers), version = 3, at, from;
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	uint8_t hdr[TUTTI_SLOT_HEADER_BYTES], now[TUTTI_SLOT_HEADER_BYTES];
	struct tutti_store *st;
	struct t_chain c[4];
	uint64_t sum;

	make_chunks(f, c, 4);
	assert_int_equal(save_missing(f, &tc, c, 4, 16), 4);
	/* A header as a later version would seal it: the size at byte 12, the checksum of every
	 * byte before the last 8 in them. */
	from = t_key_slot(tc.path, &f->geo, t_key_of(&c[0], 0), T_CHAIN_KB);
	at = t_free_slot(tc.path, &f->geo);
	assert_int_equal(t_disk_read(tc.path, t_slot_off(&f->geo, from), hdr, sizeof(hdr)), 0);
	memcpy(hdr + 8, &version, 4);
	sum = XXH3_64bits(hdr, len - 8);
	memcpy(hdr + len - 8, &sum, 8);
	assert_int_equal(t_disk_write(tc.path, t_slot_off(&f->geo, at), hdr, sizeof(hdr)), 0);

	/* Not damage: reported as another version's, and left by a repair. */
	for (int pass = 0; pass < 2; pass++) {
		st = open_ok(f, tc.dir, pass == 0 ? REPAIR : READ_ONLY, 0);
		assert_int_equal(tutti_store_fsck(st, pass == 0 ? TUTTI_FSCK_REPAIR : 0, &rep), 0);
		tutti_store_close(st);
		assert_int_equal(rep.foreign_headers, 1);
		assert_int_equal(rep.damaged_headers, 0);
		assert_int_equal(rep.unreadable_headers, 0);
		assert_int_equal(rep.corrupt_chunks, 0);
		assert_int_equal(rep.chunks_checked, 4);
		assert_int_equal(t_disk_read(tc.path, t_slot_off(&f->geo, at), now, sizeof(now)),
		                 0);
		assert_memory_equal(now, hdr, sizeof(hdr));
	}
	/* The same with one bit flipped is damage, erased by one repair. */
	assert_int_equal(t_disk_flip_bit(tc.path, t_slot_off(&f->geo, at) + 9, 2), 0);
	st = open_ok(f, tc.dir, REPAIR, 0);
	assert_int_equal(tutti_store_fsck(st, TUTTI_FSCK_REPAIR, &rep), 0);
	tutti_store_close(st);
	assert_int_equal(rep.foreign_headers, 0);
	assert_int_equal(rep.damaged_headers, 1);
	assert_clean(f, tc.dir, 4, "a damaged header of another version");
	t_store_case_free(&tc);
}

/* The report of a caller built against 0.2.0, whose structure ends before the header counts:
 * accepted, and nothing written beyond it. */
static void
test_fsck_takes_the_report_of_0_2_0(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "report", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	struct tutti_fsck_report rep;
	struct tutti_store *st;
	struct t_chain c[2];

	make_chunks(f, c, 2);
	assert_int_equal(save_missing(f, &tc, c, 2, 16), 2);
	st = open_ok(f, tc.dir, READ_ONLY, 0);
	memset(&rep, 0x5c, sizeof(rep));
	rep.size = offsetof(struct tutti_fsck_report, damaged_headers);
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	assert_int_equal(rep.chunks_checked, 2);
	assert_int_equal(rep.damaged_headers, 0x5c5c5c5c5c5c5c5cull);
	rep.size = offsetof(struct tutti_fsck_report, damaged_headers) + 8;
	assert_int_equal(tutti_store_fsck(st, 0, &rep), -EINVAL);
	tutti_store_close(st);
	t_store_case_free(&tc);
}

/* ---- repairs killed at random points ---- */

static uint64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A repair in a child process, killed after \p delay_us (or run to the end, if sooner). */
static void
killed_repair(struct t_chain_fixture *f, const char *dir, uint32_t delay_us)
{
	int ws = 0;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct tutti_fsck_report rep = {.size = sizeof(rep)};
		struct tutti_store *st = NULL;

		if (open_rc(f, dir, REPAIR, 0, &st) == 0) {
			tutti_store_fsck(st, TUTTI_FSCK_REPAIR, &rep);
			tutti_store_close(st);
		}
		_exit(0);
	}
	usleep(delay_us);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &ws, 0), pid);
}

/* Damage a third of the headers (one bit of a random field: magic and version included) and a
 * tenth of the payloads; \p dead[i] says whether chunk i was hit. Returns how many were. */
static uint32_t
damage_many(struct t_chain_fixture *f, const char *dir, const struct t_chain *c, uint32_t n,
            bool *dead)
{
	static const uint32_t fields[] = {0, 8, 12, 16, 24, 32, 36, 40, 44, 48, 112, 176};
	const uint32_t nr_fields = sizeof(fields) / sizeof(fields[0]);
	uint32_t len = t_slot_hdr_len(f->geo.nr_layers), nr = 0, slots[MAX_CHUNKS];
	struct files d;

	files_open(&d, dir);
	slots_of(&d, c, n, slots);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t pick = t_rng_below(&f->r, 30);

		dead[i] = pick < 13;
		nr += dead[i];
		if (pick < 10) {
			uint32_t k = t_rng_below(&f->r, nr_fields + 1);
			/* A field's first byte, or any byte of the header. */
			uint32_t byte = k < nr_fields ? fields[k] : t_rng_below(&f->r, len);

			flip(&d, slots[i], byte, t_rng_below(&f->r, 8));
		} else if (pick < 13) {
			flip_object_bit(f, &d, slots[i]);
		}
	}
	files_close(&d);
	return nr;
}

static void
test_repair_killed_at_random_points_then_run_once_leaves_a_clean_store(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "kills", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	const uint32_t n = MAX_CHUNKS, rounds = 10;
	struct t_chain *c = calloc(n, sizeof(*c));
	bool dead[MAX_CHUNKS];
	uint32_t kills = 0, full_us;
	uint64_t t0;

	assert_non_null(c);
	make_chunks(f, c, n);
	assert_int_equal(save_missing(f, &tc, c, n, n + 16), n);
	/* How long a repair of such a store takes: the kills are spread over that time. */
	damage_many(f, tc.dir, c, n, dead);
	t0 = now_us();
	repair(f, tc.dir);
	full_us = (uint32_t)(now_us() - t0) + 200;
	save_missing(f, &tc, c, n, n + 16);
	for (uint32_t round = 0; round < rounds; round++) {
		uint32_t nr_dead = damage_many(f, tc.dir, c, n, dead);
		uint32_t nr_kills = 1 + t_rng_below(&f->r, 3);
		char what[96];

		for (uint32_t k = 0; k < nr_kills; k++, kills++) {
			/* Forking and the open take part of the time: some kills land before
			 * anything was written, some in the erasing, some after the end. */
			killed_repair(f, tc.dir, t_rng_below(&f->r, 2 * full_us + 2000));
		}
		repair(f, tc.dir);
		snprintf(what, sizeof(what), "round %u, %u repairs killed, %u chunks damaged",
		         round, nr_kills, nr_dead);
		assert_clean(f, tc.dir, n - nr_dead, what);
		assert_int_equal(save_missing(f, &tc, c, n, n + 16), nr_dead);
	}
	print_message("%u repairs killed within %u us of their start (a whole one takes about %u "
	              "us)\n",
	              kills, 2 * full_us + 2000, full_us);
	free(c);
	t_store_case_free(&tc);
}

/* ---- one flipped bit in a superblock ---- */

/*
 * Every kind of open of the store in \p dir, a repair's included, fails with \p want and logs an
 * error naming \p path, and the first 4 KiB of \p path still hold \p sb.
 */
static void
assert_refused_alike(struct t_chain_fixture *f, const char *dir, const char *path,
                     const uint8_t *sb, int want, const char *what)
{
	/* A server's (which creates what is missing), fsck's and fsck --repair's. */
	static const uint32_t hows[] = {TUTTI_OPEN_CREATE, READ_ONLY, REPAIR};
	uint8_t now[4096];

	for (size_t h = 0; h < sizeof(hows) / sizeof(hows[0]); h++) {
		struct tutti_store *st = NULL;
		int rc = open_rc(f, dir, hows[h], 64, &st);

		if (rc != want || st != NULL || f->rec.nr_err == 0 ||
		    !t_log_contains(&f->rec, path)) {
			fail_msg("%s, open %zu: %d (%s expected), %d errors logged%s", what, h, rc,
			         want == -EPROTO ? "-EPROTO" : "-EBADMSG", f->rec.nr_err,
			         t_log_contains(&f->rec, path) ? "" : ", none naming the file");
		}
		if (want == -EBADMSG && !t_log_contains(&f->rec, "damaged superblock")) {
			fail_msg("%s, open %zu: the log does not say the superblock is damaged: %s",
			         what, h, f->rec.nr > 0 ? f->rec.msgs[0] : "");
		}
	}
	assert_int_equal(t_disk_read(path, 0, now, sizeof(now)), 0);
	if (memcmp(now, sb, sizeof(now)) != 0) {
		fail_msg("%s: the superblock was written", what);
	}
}

static void
test_repair_leaves_a_superblock_with_any_bit_flipped_as_it_was(void **state)
{
	struct t_chain_fixture *f = *state;
	struct t_store_case tc = t_chain_case_new(f, "sb", T_CHAIN_DIRECT, T_CHAIN_DIRECT);
	char *file1 = t_path_join(tc.dir, "tutti.data.1");
	const char *paths[2] = {tc.path, file1};
	struct t_chain c[8];
	uint8_t sb[4096];

	if (f->engine != TUTTI_ENGINE_POSIX) {
		/* A superblock is read before any engine's I/O: once is enough. */
		free(file1);
		t_store_case_free(&tc);
		skip();
	}
	make_chunks(f, c, 8);
	assert_int_equal(save_missing(f, &tc, c, 8, 64), 8);
	/* The superblock of tutti.data and of another data file: every bit of the magic and the
	 * version, one bit of every other byte (each bit of every byte: tests/unit/format). */
	for (int p = 0; p < 2; p++) {
		/* Each file's own superblock, read raw (t_disk_* sees tutti.data's files as one
		 * only beyond the superblock). */
		assert_int_equal(t_disk_read(paths[p], 0, sb, sizeof(sb)), 0);
		for (uint32_t bit = 0; bit < 8 * T_SB_BYTES; bit += bit < 95 ? 1 : 9) {
			char what[80];

			sb[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			assert_int_equal(t_disk_write(paths[p], 0, sb, sizeof(sb)), 0);
			snprintf(what, sizeof(what), "%s: superblock bit %u flipped",
			         p ? "tutti.data.1" : "tutti.data", bit);
			/* The magic is what says this is a Tutti file at all. */
			assert_refused_alike(f, tc.dir, paths[p], sb, bit < 64 ? -EPROTO : -EBADMSG,
			                     what);
			sb[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			assert_int_equal(t_disk_write(paths[p], 0, sb, sizeof(sb)), 0);
		}
	}
	/* Nothing was lost. */
	assert_clean(f, tc.dir, 8, "every superblock bit restored");
	/* What the log says to do: with tutti.data removed, the next open makes a new, empty
	 * store, the damaged file included. */
	assert_int_equal(t_disk_flip_bit(file1, 100, 3), 0);
	assert_int_equal(unlink(tc.path), 0);
	tutti_store_close(open_ok(f, tc.dir, TUTTI_OPEN_CREATE, 64));
	assert_clean(f, tc.dir, 0, "a new store made where a superblock was damaged");
	free(file1);
	t_store_case_free(&tc);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_repair_erases_a_slot_header_with_any_bit_flipped),
	    cmocka_unit_test(test_repair_checks_the_older_copy_of_a_removed_chunk),
	    cmocka_unit_test(test_repair_keeps_an_intact_header_of_another_version),
	    cmocka_unit_test(test_fsck_takes_the_report_of_0_2_0),
	    cmocka_unit_test(
	        test_repair_killed_at_random_points_then_run_once_leaves_a_clean_store),
	    cmocka_unit_test(test_repair_leaves_a_superblock_with_any_bit_flipped_as_it_was),
	};

	return t_chain_run("repair", tests, sizeof(tests) / sizeof(tests[0]));
}
