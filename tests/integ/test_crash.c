/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: crash consistency. A child process saves chains in a loop and reports each one
 * whose save returned with every chunk stored; the parent kills it with SIGKILL at a random
 * moment (inside its open, inside a save, between saves), 60 times per run, with fresh children
 * continuing on the same store. After every kill the parent reopens the store: every reported
 * chain must be found whole and load bit-exact, and whatever else is found (the chains in flight
 * when children died) must load bit-exact or fail its checksum: never wrong data; chains never
 * attempted are not found. Runs in both durability modes, and once with each save batching two
 * requests that share a new prefix; engines and I/O paths are picked at random per child. Also:
 * a process killed while creating a store leaves one that opens again. T_SEED picks the chains
 * and the kill times (the moments themselves vary from run to run); T_CRASH_KILLS the kills.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "t_disk.h"
#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define KB 32u
#define BPC 2u      /* blocks per chunk */
#define MAX_KEYS 3u /* chunks per chain */
#define SLOTS 2048u
#define PER_LIFE 16u      /* chains a child saves at most: nothing is ever evicted */
#define DEFAULT_KILLS 60u /* per durability mode */
#define BATCH 32u         /* chains per verifying load */
#define READY UINT32_MAX
#define FAILED (UINT32_MAX - 1)

static uint64_t g_seed;
static bool g_uring;

/* What a chain looks like; a pure function of the seed and its id. */
struct shape {
	uint32_t nr_keys;
	uint32_t nr_blocks;
	bool shared; /* its first chunk is the previous chain's first chunk */
};

/* ---- deterministic chains ---- */

static uint64_t
mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t
hash3(uint32_t a, uint32_t b, uint32_t c)
{
	return mix(g_seed ^ mix(((uint64_t)a << 32) ^ ((uint64_t)b << 16) ^ c));
}

static struct shape
plain_shape(uint32_t id)
{
	uint64_t h = hash3(id, 0xffff, 1);
	uint32_t keys = 1 + (uint32_t)(h % MAX_KEYS);

	return (struct shape){keys, (keys - 1) * BPC + 1 + (uint32_t)((h >> 8) % BPC), false};
}

static struct shape
shape_of(uint32_t id)
{
	struct shape s = plain_shape(id), prev;

	/* Every fourth chain continues the previous chain's first chunk, when both hold it whole.
	 */
	if (id > 0 && id % 4 == 3 && s.nr_keys > 1) {
		prev = plain_shape(id - 1);
		s.shared = prev.nr_keys > 1 || prev.nr_blocks == BPC;
	}
	return s;
}

/* The chain whose content chunk \p k of chain \p id holds. */
static uint32_t
family(uint32_t id, uint32_t k)
{
	return k == 0 && shape_of(id).shared ? id - 1 : id;
}

static void
chain_keys(uint32_t id, uint8_t *keys)
{
	struct shape s = shape_of(id);

	for (uint32_t k = 0; k < s.nr_keys; k++) {
		struct t_rng r;

		t_rng_init(&r, hash3(family(id, k), k, 0x4b45));
		t_rng_fill(&r, keys + (size_t)k * KB, KB);
	}
}

/* Block \p b (in chain order) of chain \p id. */
static void
chain_block(uint32_t id, uint32_t b, uint8_t *out, size_t len)
{
	struct t_rng r;

	t_rng_init(&r, hash3(family(id, b / BPC), b / BPC, 0x100 + b % BPC));
	t_rng_fill(&r, out, len);
}

/* ---- store ---- */

static int
open_logged(const struct tutti_geometry *g, const char *dir, uint32_t engine, uint32_t durability,
            uint32_t flags, uint64_t slots, struct t_log *log, struct tutti_store **st)
{
	struct tutti_store_opts o;
	const char *dirs[1] = {dir};

	t_store_opts(&o, g, dirs, 1, slots, engine, log);
	o.flags = flags;
	o.durability = durability;
	o.staging_bytes = 1u << 20;
	o.ns = "crash";
	o.ns_bytes = 5;
	return tutti_store_open(g, &o, st);
}

static int
open_slots(const struct tutti_geometry *g, const char *dir, uint32_t engine, uint32_t durability,
           uint32_t flags, uint64_t slots, struct tutti_store **st)
{
	return open_logged(g, dir, engine, durability, flags, slots, NULL, st);
}

static int
open_store(const struct tutti_geometry *g, const char *dir, uint32_t engine, uint32_t durability,
           uint32_t flags, struct tutti_store **st)
{
	return open_slots(g, dir, engine, durability, flags, SLOTS, st);
}

/* ---- the child ---- */

static void
report(int fd, uint32_t v)
{
	(void)!write(fd, &v, sizeof(v));
}

/* How a child runs. */
struct life {
	const char *dir;
	uint32_t engine;
	uint32_t durability;
	enum t_layout layout;
	uint32_t first; /* its first chain */
	bool batched;   /* save a chain as two requests, [all but the last chunk] and [all] */
};

/* Save chains [first, first + PER_LIFE), reporting each stored one, then wait to be killed. */
static void __attribute__((noreturn))
child_main(const struct tutti_geometry *g, const struct life *life, int fd)
{
	uint64_t lbb = tutti_geometry_layer_block_bytes(g);
	uint8_t keys[MAX_KEYS * KB], *block = malloc(lbb);
	uint32_t ids[MAX_KEYS * BPC];
	struct tutti_store *st = NULL;
	struct t_kv *kv = NULL;
	int rc = open_store(g, life->dir, life->engine, life->durability, 0, &st);

	if (rc == 0) {
		rc = t_kv_alloc(g, life->layout, MAX_KEYS * BPC, &kv);
	}
	if (rc < 0 || block == NULL) {
		report(fd, FAILED);
		report(fd, (uint32_t)-rc);
		_exit(2);
	}
	report(fd, READY);
	for (uint32_t i = 0; i < MAX_KEYS * BPC; i++) {
		ids[i] = i;
	}
	for (uint32_t id = life->first; id < life->first + PER_LIFE; id++) {
		struct shape s = shape_of(id);
		struct tutti_request r[2] = {{.size = sizeof(r[0]),
		                              .nr_keys = s.nr_keys - 1,
		                              .keys = keys,
		                              .nr_blocks = (s.nr_keys - 1) * BPC,
		                              .block_ids = ids},
		                             {.size = sizeof(r[0]),
		                              .nr_keys = s.nr_keys,
		                              .keys = keys,
		                              .nr_blocks = s.nr_blocks,
		                              .block_ids = ids}};
		/* As a serving engine batches two requests that share a new prefix. */
		uint32_t nr_reqs = life->batched && s.nr_keys > 1 ? 2 : 1;
		uint32_t nr_chunks = nr_reqs == 2 ? 2 * s.nr_keys - 1 : s.nr_keys;
		int32_t status[2 * MAX_KEYS];
		int64_t n;

		chain_keys(id, keys);
		for (uint32_t b = 0; b < s.nr_blocks; b++) {
			chain_block(id, b, block, lbb);
			t_kv_write_block(kv, 0, b, block);
		}
		n = tutti_store_save(st, kv->kv, r + 2 - nr_reqs, nr_reqs, status);
		for (uint32_t k = 0; n >= 0 && k < nr_chunks; k++) {
			if (status[k] != 0 && status[k] != 1) {
				n = status[k];
			}
		}
		if (n < 0) {
			report(fd, FAILED);
			report(fd, (uint32_t)-n);
			_exit(3);
		}
		report(fd, id);
	}
	for (;;) {
		pause();
	}
}

/* ---- the parent's checks ---- */

struct verifier {
	const struct tutti_geometry *g;
	struct tutti_store *st;
	struct t_kv *kv;
	uint8_t *expect, *got; /* one layer block each */
	uint64_t lbb;
	uint64_t chunks_ok;  /* loaded and exact */
	uint64_t chunks_bad; /* unreported chunks that failed their checksum */
};

/*
 * Load the first found[i] chunks of chains ids[i] (i < n <= BATCH, found[i] >= 1) in one call.
 * Every chunk that loads must be exact; a reported chain must load whole; an unreported chunk
 * may fail its checksum, nothing else.
 */
static void
load_batch(struct verifier *v, const uint32_t *ids, const uint32_t *found, uint32_t n,
           bool reported)
{
	static uint8_t keys[BATCH][MAX_KEYS * KB];
	static uint32_t blocks[BATCH][MAX_KEYS * BPC];
	struct tutti_request reqs[BATCH];
	int32_t status[BATCH * MAX_KEYS];
	uint32_t next_block = 0, c = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct shape s = shape_of(ids[i]);

		chain_keys(ids[i], keys[i]);
		reqs[i] = (struct tutti_request){
		    .size = sizeof(reqs[i]),
		    .nr_keys = found[i],
		    .keys = keys[i],
		    .nr_blocks = found[i] == s.nr_keys ? s.nr_blocks : found[i] * BPC,
		    .block_ids = blocks[i],
		};
		for (uint32_t b = 0; b < reqs[i].nr_blocks; b++) {
			blocks[i][b] = next_block++;
		}
	}
	t_kv_poison(v->kv, T_POISON);
	assert_true(tutti_store_load(v->st, v->kv->kv, reqs, n, 0, 1, status) >= 0);
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t k = 0; k < found[i]; k++, c++) {
			uint32_t end = (k + 1) * BPC;

			if (status[c] != 0) {
				if (reported || status[c] != -EBADMSG) {
					print_message("chain %u chunk %u (%s): load status %d; "
					              "seed %llu\n",
					              ids[i], k,
					              reported ? "reported" : "unreported",
					              status[c], (unsigned long long)g_seed);
					fail();
				}
				v->chunks_bad++;
				continue;
			}
			for (uint32_t b = k * BPC; b < end && b < reqs[i].nr_blocks; b++) {
				chain_block(ids[i], b, v->expect, v->lbb);
				t_kv_read_block(v->kv, 0, blocks[i][b], v->got);
				if (memcmp(v->got, v->expect, v->lbb) != 0) {
					print_message("chain %u block %u: WRONG DATA; seed %llu\n",
					              ids[i], b, (unsigned long long)g_seed);
					fail();
				}
			}
			v->chunks_ok++;
		}
	}
}

/* How many leading chunks of chain \p id the store finds. */
static uint32_t
lookup_chain(struct verifier *v, uint32_t id, uint64_t *nr_blocks)
{
	uint8_t keys[MAX_KEYS * KB];
	int64_t n;

	chain_keys(id, keys);
	n = tutti_store_lookup(v->st, keys, shape_of(id).nr_keys, nr_blocks);
	assert_true(n >= 0);
	return (uint32_t)n;
}

/* Check chains ids[0..n): reported ones must be found whole, the others as far as found. */
static void
check_chains(struct verifier *v, const uint32_t *ids, uint32_t n, bool reported)
{
	for (uint32_t first = 0; first < n; first += BATCH) {
		uint32_t batch_ids[BATCH], found[BATCH], m = 0;

		for (uint32_t i = first; i < n && i < first + BATCH; i++) {
			struct shape s = shape_of(ids[i]);
			uint64_t blocks = 0;
			uint32_t got = lookup_chain(v, ids[i], &blocks);

			if (reported && (got != s.nr_keys || blocks != s.nr_blocks)) {
				print_message(
				    "reported chain %u: %u of %u chunks found; seed %llu\n", ids[i],
				    got, s.nr_keys, (unsigned long long)g_seed);
				fail();
			}
			if (got > 0) {
				batch_ids[m] = ids[i];
				found[m++] = got;
			}
		}
		if (m > 0) {
			load_batch(v, batch_ids, found, m, reported);
		}
	}
}

/* Open right after a child was killed and reaped, as a supervisor restarting a server does: one
 * attempt, which must not fail because the dead child's I/O ring still holds the file. What the
 * library said is printed when it fails. */
static int
reopen_rc(const struct tutti_geometry *g, const char *dir, uint32_t engine, uint32_t durability,
          uint32_t flags, uint64_t slots, struct tutti_store **st)
{
	struct t_log log = {0};
	int rc = open_logged(g, dir, engine, durability, flags, slots, &log, st);

	for (int i = 0; rc != 0 && i < log.nr && i < T_LOG_MAX; i++) {
		print_message("  store log: %s\n", log.msgs[i]);
	}
	return rc;
}

/* Open the store right after a kill (reopen_rc). */
static struct tutti_store *
reopen(const struct tutti_geometry *g, const char *dir, uint32_t engine, uint32_t durability,
       uint32_t flags)
{
	struct tutti_store *st = NULL;
	int rc = reopen_rc(g, dir, engine, durability, flags, SLOTS, &st);

	if (rc != 0) {
		print_message("reopen after a kill: %d; seed %llu\n", rc,
		              (unsigned long long)g_seed);
	}
	assert_int_equal(rc, 0);
	return st;
}

struct run {
	uint32_t *reported; /* every chain reported so far */
	uint32_t nr_reported;
	uint32_t *in_flight; /* per life, the chain that was being saved when the child died */
	uint32_t nr_in_flight;
	uint64_t kills_early, kills_in_saves, kills_idle;
	uint64_t dropped, orphans, duplicates;
	uint64_t in_flight_found; /* kills after some of the chain in flight was committed */
};

/* After a kill: every reported chain is there and exact; the chain in flight and the chains
 * never attempted hold nothing wrong. */
static void
verify_store(struct t_tmp_fixture *f, const char *dir, uint32_t durability, struct run *run,
             uint32_t in_flight, uint32_t life_end)
{
	struct verifier v = {.g = &f->geo, .lbb = tutti_geometry_layer_block_bytes(&f->geo)};
	uint32_t engine =
	    g_uring && t_rng_below(&f->r, 2) ? TUTTI_ENGINE_URING : TUTTI_ENGINE_POSIX;
	uint32_t flags = t_rng_below(&f->r, 4) == 0 ? TUTTI_OPEN_REPAIR : 0;
	enum t_layout layout = t_rng_below(&f->r, 2) ? T_LAYOUT_BLOCKS_FIRST : T_LAYOUT_KV_FIRST;
	struct tutti_stats s = {.size = sizeof(s)};

	v.st = reopen(&f->geo, dir, engine, durability, flags);
	assert_int_equal(t_kv_alloc(&f->geo, layout, BATCH * MAX_KEYS * BPC, &v.kv), 0);
	v.expect = malloc(v.lbb);
	v.got = malloc(v.lbb);
	assert_non_null(v.expect);
	assert_non_null(v.got);
	assert_int_equal(tutti_store_get_stats(v.st, &s), 0);
	run->dropped += s.recovery_dropped;
	run->orphans += s.recovery_orphans;
	run->duplicates += s.recovery_duplicates;

	check_chains(&v, run->reported, run->nr_reported, true);
	check_chains(&v, run->in_flight, run->nr_in_flight, false);
	if (in_flight < life_end) {
		run->in_flight_found += lookup_chain(&v, in_flight, NULL) > 0;
	}
	/* Chains the child never reached are not there, but for a first chunk shared with the
	 * chain in flight. */
	for (uint32_t id = in_flight + 1; id < life_end; id++) {
		uint32_t got = lookup_chain(&v, id, NULL);

		if (got > (id == in_flight + 1 && shape_of(id).shared ? 1u : 0u)) {
			print_message(
			    "chain %u was never saved, yet %u chunks are found; seed %llu\n", id,
			    got, (unsigned long long)g_seed);
			fail();
		}
		if (got > 0) {
			uint32_t one = 1;

			load_batch(&v, &id, &one, 1, false);
		}
	}
	assert_int_equal(tutti_store_get_stats(v.st, &s), 0);
	assert_int_equal(s.evictions, 0);
	tutti_store_close(v.st);
	t_kv_free(v.kv);
	free(v.expect);
	free(v.got);
}

static uint64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void
sleep_us(uint32_t us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* Read what the child wrote: ids into run, READY is skipped; FAILED fails the test. */
static uint32_t
drain(int fd, struct run *run, bool *ready)
{
	uint32_t v, got = 0;

	while (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
		if (v == READY) {
			*ready = true;
			continue;
		}
		if (v == FAILED) {
			uint32_t err = 0;

			(void)!read(fd, &err, sizeof(err));
			print_message("the child failed: %s; seed %llu\n", strerror((int)err),
			              (unsigned long long)g_seed);
			fail();
		}
		run->reported[run->nr_reported++] = v;
		got++;
	}
	return got;
}

static void
run_kills(struct t_tmp_fixture *f, uint32_t durability, bool batched)
{
	const char *env = getenv("T_CRASH_KILLS");
	unsigned long n = env != NULL ? strtoul(env, NULL, 10) : 0;
	uint32_t kills = n > 0 && n < 100000 ? (uint32_t)n : DEFAULT_KILLS;
	char *dir = t_path_join(f->tmp, batched ? "batched" : durability ? "durable" : "fast");
	struct run run = {0};
	struct tutti_store *st = NULL;
	uint32_t delay_max = 0; /* microseconds: how long a child takes for its saves */
	uint64_t t0 = (uint64_t)time(NULL);

	run.reported = calloc((size_t)kills * PER_LIFE, sizeof(*run.reported));
	run.in_flight = calloc(kills, sizeof(*run.in_flight));
	assert_non_null(run.reported);
	assert_non_null(run.in_flight);
	/* Created here: a kill inside creation is test_crash_store_killed_while_being_created's. */
	assert_int_equal(
	    open_store(&f->geo, dir, TUTTI_ENGINE_POSIX, durability, TUTTI_OPEN_CREATE, &st), 0);
	tutti_store_close(st);

	for (uint32_t life = 0; life < kills; life++) {
		uint32_t first = life * PER_LIFE, got, delay;
		uint32_t engine =
		    g_uring && t_rng_below(&f->r, 2) ? TUTTI_ENGINE_URING : TUTTI_ENGINE_POSIX;
		enum t_layout layout =
		    t_rng_below(&f->r, 2) ? T_LAYOUT_BLOCKS_FIRST : T_LAYOUT_KV_FIRST;
		bool early = life > 0 && t_rng_below(&f->r, 8) == 0, ready = false;
		int fds[2], ws = 0;
		struct life conf = {dir, engine, durability, layout, first, batched};
		pid_t pid;

		assert_int_equal(pipe(fds), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(fds[0]);
			child_main(&f->geo, &conf, fds[1]);
		}
		close(fds[1]);
		if (!early) {
			struct pollfd p = {.fd = fds[0], .events = POLLIN};
			uint32_t v = 0;

			/* Wait until the child has opened the store. */
			assert_int_equal(poll(&p, 1, 20000), 1);
			assert_int_equal(read(fds[0], &v, sizeof(v)), (ssize_t)sizeof(v));
			if (v == FAILED) {
				(void)!read(fds[0], &v, sizeof(v));
				print_message("the child could not start: %s; seed %llu\n",
				              strerror((int)v), (unsigned long long)g_seed);
				fail();
			}
			assert_int_equal(v, READY);
			ready = true;
		}
		if (life == 0) {
			/* The first child is timed through all its saves, then killed idle:
			 * later kills are spread over that time. */
			uint64_t t1 = now_us();

			for (uint32_t i = 0; i < PER_LIFE; i++) {
				struct pollfd p = {.fd = fds[0], .events = POLLIN};
				uint32_t v = 0;

				assert_int_equal(poll(&p, 1, 20000), 1);
				assert_int_equal(read(fds[0], &v, sizeof(v)), (ssize_t)sizeof(v));
				assert_true(v == first + i);
				run.reported[run.nr_reported++] = v;
			}
			delay_max = (uint32_t)((now_us() - t1) * 11 / 10) + 100;
			delay = 0;
		} else {
			delay = early ? t_rng_below(&f->r, 4000) : t_rng_below(&f->r, delay_max);
		}
		sleep_us(delay);
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &ws, 0), pid);
		got = drain(fds[0], &run, &ready) + (life == 0 ? PER_LIFE : 0);
		close(fds[0]);
		if (!WIFSIGNALED(ws) || WTERMSIG(ws) != SIGKILL) {
			print_message("the child ended by itself (status 0x%x); seed %llu\n", ws,
			              (unsigned long long)g_seed);
			fail();
		}
		if (got < PER_LIFE) {
			run.in_flight[run.nr_in_flight++] = first + got;
		}
		run.kills_early += !ready;
		run.kills_in_saves += ready && got < PER_LIFE;
		run.kills_idle += got == PER_LIFE;
		/* Follow drifts in the speed of the saves. */
		if (life > 0 && got == PER_LIFE) {
			delay_max = delay_max * 7 / 8 > 200 ? delay_max * 7 / 8 : 200;
		} else if (ready && got < PER_LIFE / 4) {
			delay_max = delay_max * 9 / 8 < 1000000 ? delay_max * 9 / 8 : 1000000;
		}
		verify_store(f, dir, durability, &run, first + got, first + PER_LIFE);
	}
	print_message("%s: %u kills (%llu in open, %llu while saving, %llu idle; a life's saves "
	              "take %u us), %u chains reported, %llu chains in flight found; recovery "
	              "dropped %llu, orphans %llu, duplicates %llu; %llu s\n",
	              batched      ? "batched"
	              : durability ? "durable"
	                           : "fast",
	              kills, (unsigned long long)run.kills_early,
	              (unsigned long long)run.kills_in_saves, (unsigned long long)run.kills_idle,
	              delay_max, run.nr_reported, (unsigned long long)run.in_flight_found,
	              (unsigned long long)run.dropped, (unsigned long long)run.orphans,
	              (unsigned long long)run.duplicates,
	              (unsigned long long)((uint64_t)time(NULL) - t0));
	/* The kills must mostly land while the child is saving (some 80 % do). */
	assert_true(run.kills_in_saves * 4 >= kills);
	free(run.reported);
	free(run.in_flight);
	free(dir);
}

/* ---- tests ---- */

static int
setup(void **state)
{
	/* 4 KiB layer blocks, 8 KiB objects, 12 KiB slots (a 25 MiB file). Blocks-first memory
	 * takes the direct path, KV-first memory is staged. */
	struct tutti_geometry geo = t_geo_small(1, BPC);

	return t_tmp_fixture_setup(state, &geo, g_seed);
}

static void
test_crash_killed_writers_lose_no_reported_chain_fast(void **state)
{
	run_kills(*state, TUTTI_DURABILITY_FAST, false);
}

static void
test_crash_killed_writers_lose_no_reported_chain_durable(void **state)
{
	run_kills(*state, TUTTI_DURABILITY_DURABLE, false);
}

/* Two requests sharing a new prefix in one call: the prefix must be stored once for good. */
static void
test_crash_killed_writers_batching_a_shared_prefix_lose_no_reported_chain(void **state)
{
	run_kills(*state, TUTTI_DURABILITY_FAST, true);
}

/*
 * A process killed while it creates a store (the data file is created, its space reserved, its
 * superblock written, in some order) must leave something that opening with TUTTI_OPEN_CREATE
 * turns into a working store again, never a file that every later open refuses. Children are
 * killed the moment the new file grows, or at a random moment of their open.
 */
static void
test_crash_store_killed_while_being_created_opens_again(void **state)
{
	struct t_tmp_fixture *f = *state;
	const uint64_t slots = 16384; /* 192 MiB to reserve: a wide window */
	uint32_t zero_sb = 0, empty = 0, whole = 0;

	for (uint32_t attempt = 0; attempt < 24; attempt++) {
		char name[32];
		char *dir, *path;
		struct tutti_store *st = NULL;
		uint8_t sb[4096];
		struct stat sf;
		int rc, ws = 0;
		pid_t pid;

		snprintf(name, sizeof(name), "create.%u", attempt);
		dir = t_path_join(f->tmp, name);
		path = t_data_path(dir);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			rc = open_slots(&f->geo, dir, TUTTI_ENGINE_POSIX, TUTTI_DURABILITY_FAST,
			                TUTTI_OPEN_CREATE, slots, &st);
			_exit(rc < 0 ? -rc : 0);
		}
		if (attempt % 2 == 0) {
			/* As soon as the file has grown. */
			while (waitpid(pid, &ws, WNOHANG) == 0 &&
			       !(stat(path, &sf) == 0 && sf.st_size > 0)) {
			}
		} else {
			sleep_us(t_rng_below(&f->r, 3000));
		}
		kill(pid, SIGKILL);
		waitpid(pid, &ws, 0);
		/* What the kill left. */
		if (stat(path, &sf) != 0) {
			sf.st_size = -1;
		} else if (sf.st_size == 0) {
			empty++;
		} else if (sf.st_size >= 4096 && t_disk_read(path, 0, sb, sizeof(sb)) == 0) {
			bool zero = true;

			for (size_t i = 0; i < sizeof(sb) && zero; i++) {
				zero = sb[i] == 0;
			}
			zero_sb += zero;
			whole += !zero;
		}
		rc = reopen_rc(&f->geo, dir, TUTTI_ENGINE_POSIX, TUTTI_DURABILITY_FAST,
		               TUTTI_OPEN_CREATE, slots, &st);
		if (rc != 0) {
			print_message("attempt %u: killed with a %lld-byte data file, the store "
			              "cannot be opened again: %d (%s)\n",
			              attempt, (long long)sf.st_size, rc, tutti_strerror(rc));
		}
		assert_int_equal(rc, 0);
		tutti_store_close(st);
		unlink(path);
		rmdir(dir);
		free(path);
		free(dir);
	}
	print_message("killed creations left: %u empty files, %u sized files without a "
	              "superblock, %u with one\n",
	              empty, zero_sb, whole);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, t_tmp_fixture_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_crash_killed_writers_lose_no_reported_chain_fast),
	    T(test_crash_killed_writers_lose_no_reported_chain_durable),
	    T(test_crash_killed_writers_batching_a_shared_prefix_lose_no_reported_chain),
	    T(test_crash_store_killed_while_being_created_opens_again),
	};

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	g_seed = t_seed(97);
	g_uring = t_uring_probe() == 0;
	print_message("seed %llu (T_SEED=%llu to repeat), io_uring %s\n",
	              (unsigned long long)g_seed, (unsigned long long)g_seed,
	              g_uring ? "and posix" : "unavailable: posix only");
	return cmocka_run_group_tests_name("crash", tests, NULL, NULL);
}
