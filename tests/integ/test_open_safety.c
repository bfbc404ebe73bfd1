/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: who may open a store, and what an open may touch. A store whose owner was killed
 * opens again at once, whatever engine the owner ran (its I/O ring's teardown in the kernel
 * outlives the process); a live owner makes any other opener fail with -EBUSY at once. Two
 * processes creating one fresh store at the same moment end with one store that keeps what the
 * winner saved, and the loser fails with -EBUSY, never -EEXIST (which means another geometry);
 * killing either of them at any moment leaves a store that opens again. A data file that is not
 * a regular file with one link (a FIFO, a hard link) is refused without blocking and without a
 * byte written; a store directory may be a symbolic link to a directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
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
#define SLOTS 64u
#define NR_BLOCKS 8u
/* Rounds of the creation race: it was lost about once in 100 to 400 rounds before the fix. */
#define DEFAULT_RACE_ROUNDS 400u
/* An open after a kill may wait for the kernel to drop the dead owner's I/O ring (bounded by
 * the library); an open against a live owner must not wait at all. */
#define MAX_REOPEN_MS 6000u
#define MAX_BUSY_MS 500u

static bool g_uring;

static int
setup(void **state)
{
	struct tutti_geometry geo;

	if (tutti_geometry_preset("tiny", &geo) != 0) {
		return -1;
	}
	return t_tmp_fixture_setup(state, &geo, t_seed(7));
}

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Open \p dir, one directory of SLOTS slots (with TUTTI_OPEN_EXISTING: its own geometry). */
static int
open_dir(struct t_tmp_fixture *f, const char *dir, uint32_t engine, uint32_t flags,
         struct tutti_store **st)
{
	struct tutti_store_opts o;
	const char *dirs[1] = {dir};

	tutti_store_opts_init(&o);
	o.flags = flags;
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.engine = engine;
	o.capacity_bytes = SLOTS * tutti_geometry_slot_bytes(&f->geo);
	o.staging_bytes = 1u << 20;
	o.log_fn = t_log_fn;
	o.log_arg = &f->rec;
	t_log_reset(&f->rec);
	return tutti_store_open((flags & TUTTI_OPEN_EXISTING) ? NULL : &f->geo, &o, st);
}

/* The one-chunk chain number \p id: its key. */
static void
chain_key(uint32_t id, uint8_t *key)
{
	struct t_rng r;

	t_rng_init(&r, 0x6b657900ull + id);
	t_rng_fill(&r, key, KB);
}

/* Save chain \p id (one whole chunk of random KV); the tutti_store_save status of its chunk. */
static int
save_chain(struct tutti_store *st, const struct tutti_geometry *g, uint32_t id)
{
	uint32_t bpc = g->chunk_tokens / g->block_tokens, ids[NR_BLOCKS];
	uint8_t key[KB];
	struct t_kv *kv = NULL;
	struct t_rng r;
	struct tutti_request req = {
	    .size = sizeof(req), .nr_keys = 1, .keys = key, .nr_blocks = bpc, .block_ids = ids};
	int32_t status = -EINVAL;
	int rc = t_kv_alloc(g, T_LAYOUT_KV_FIRST, NR_BLOCKS, &kv);

	if (rc < 0) {
		return rc;
	}
	for (uint32_t b = 0; b < bpc; b++) {
		ids[b] = b;
	}
	chain_key(id, key);
	t_rng_init(&r, id);
	t_kv_fill_random(kv, &r);
	rc = (int)tutti_store_save(st, kv->kv, &req, 1, &status);
	t_kv_free(kv);
	return rc < 0 ? rc : status;
}

static bool
chain_found(struct tutti_store *st, uint32_t id)
{
	uint8_t key[KB];

	chain_key(id, key);
	return tutti_store_lookup(st, key, 1, NULL) == 1;
}

static void
report(int fd, int32_t v)
{
	(void)!write(fd, &v, sizeof(v));
}

/* The next value a child reported, or INT32_MIN when it closed the pipe first. */
static int32_t
receive(int fd)
{
	int32_t v;

	return read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v) ? v : INT32_MIN;
}

/*
 * Fork a child that reports on a pipe. In the child (0 returned) *fd is the pipe's write end,
 * and the child is gone with the test, whatever ends it; in the test (the child's pid returned)
 * *fd is the pipe's read end.
 */
static pid_t
fork_reporter(int *fd)
{
	int p[2];
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		*fd = p[1];
		return 0;
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* ---- an owner killed, a live owner ---- */

/*
 * Fork an owner: it opens \p dir with \p engine, saves a chain so that its engine has done I/O
 * on the file, reports 1 (or -errno) on the pipe and waits. Returns its pid; *rd reads the pipe.
 */
static pid_t
spawn_owner(struct t_tmp_fixture *f, const char *dir, uint32_t engine, int *rd)
{
	int fd;
	pid_t pid = fork_reporter(&fd);

	if (pid == 0) {
		struct tutti_store *st = NULL;
		int rc = open_dir(f, dir, engine, TUTTI_OPEN_CREATE, &st);

		if (rc == 0) {
			rc = save_chain(st, &f->geo, 1);
		}
		report(fd, rc == 0 ? 1 : rc);
		for (;;) {
			pause();
		}
	}
	*rd = fd;
	return pid;
}

static void
reopen_after_kill(struct t_tmp_fixture *f, uint32_t engine, uint32_t rounds)
{
	char *dir = t_path_join(f->tmp, "killed");
	uint64_t longest = 0;

	for (uint32_t i = 0; i < rounds; i++) {
		struct tutti_store *st = NULL;
		int rd, rc;
		pid_t pid = spawn_owner(f, dir, engine, &rd);
		uint64_t t0;

		assert_int_equal(receive(rd), 1);
		close(rd);
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, NULL, 0), pid);
		/* A supervisor restarting the server right away: one open, no retry. */
		t0 = now_ms();
		rc = open_dir(f, dir, engine, 0, &st);
		if (rc != 0) {
			fail_msg("round %u: reopening right after the owner was killed: %s", i,
			         tutti_strerror(rc));
		}
		longest = now_ms() - t0 > longest ? now_ms() - t0 : longest;
		assert_true(chain_found(st, 1));
		tutti_store_close(st);
	}
	print_message("the longest open after a kill took %llu ms\n", (unsigned long long)longest);
	assert_true(longest < MAX_REOPEN_MS);
	free(dir);
}

static void
test_open_right_after_a_killed_uring_owner_succeeds(void **state)
{
	if (!g_uring) {
		skip();
	}
	reopen_after_kill(*state, TUTTI_ENGINE_URING, 10);
}

static void
test_open_right_after_a_killed_posix_owner_succeeds(void **state)
{
	reopen_after_kill(*state, TUTTI_ENGINE_POSIX, 3);
}

static void
test_open_beside_a_live_owner_is_ebusy_at_once(void **state)
{
	struct t_tmp_fixture *f = *state;
	char *dir = t_path_join(f->tmp, "live");
	uint32_t engine = g_uring ? TUTTI_ENGINE_URING : TUTTI_ENGINE_POSIX;
	struct tutti_store *st = NULL, *st2 = NULL;
	int rd;
	pid_t pid = spawn_owner(f, dir, engine, &rd);
	uint64_t t0;

	assert_int_equal(receive(rd), 1);
	close(rd);
	for (uint32_t flags = 0; flags <= TUTTI_OPEN_CREATE; flags += TUTTI_OPEN_CREATE) {
		t0 = now_ms();
		assert_int_equal(open_dir(f, dir, engine, flags, &st), -EBUSY);
		assert_true(now_ms() - t0 < MAX_BUSY_MS);
		assert_null(st);
		assert_true(t_log_contains(&f->rec, "in use"));
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* A second handle in one process is another opener too. */
	assert_int_equal(open_dir(f, dir, engine, 0, &st), 0);
	t0 = now_ms();
	assert_int_equal(open_dir(f, dir, engine, 0, &st2), -EBUSY);
	assert_true(now_ms() - t0 < MAX_BUSY_MS);
	tutti_store_close(st);
	free(dir);
}

/* ---- two processes creating one store ---- */

/*
 * A creator: waits for the go byte, opens \p dir with TUTTI_OPEN_CREATE, saves chain \p id when
 * it got the store, reports the open's result and then the save's, and exits (closing the
 * store), unless it is killed first.
 */
static pid_t
spawn_creator(struct t_tmp_fixture *f, const char *dir, uint32_t engine, uint32_t id, int go,
              int *rd)
{
	int fd;
	pid_t pid = fork_reporter(&fd);

	if (pid == 0) {
		struct tutti_store *st = NULL;
		struct pollfd pfd = {.fd = go, .events = POLLIN};
		int rc;

		poll(&pfd, 1, -1);
		rc = open_dir(f, dir, engine, TUTTI_OPEN_CREATE, &st);
		report(fd, rc);
		if (rc == 0) {
			report(fd, save_chain(st, &f->geo, id));
			tutti_store_close(st);
		}
		_exit(0);
	}
	*rd = fd;
	return pid;
}

/* Let two creators race on \p dir and kill both \p kill_after_us after the start; saved[i]
 * says whether creator i reported its chain saved before it died. */
static void
race_and_kill(struct t_tmp_fixture *f, const char *dir, uint32_t engine, uint32_t round,
              uint32_t kill_after_us, bool saved[2], int32_t open_rc[2])
{
	int go[2], rd[2];
	pid_t pid[2];

	assert_int_equal(pipe(go), 0);
	for (int i = 0; i < 2; i++) {
		pid[i] = spawn_creator(f, dir, engine, 2 * round + (uint32_t)i, go[0], &rd[i]);
	}
	close(go[0]);
	assert_int_equal(write(go[1], "g", 1), 1); /* both wake on the same byte */
	usleep(kill_after_us);
	kill(pid[0], SIGKILL);
	kill(pid[1], SIGKILL);
	for (int i = 0; i < 2; i++) {
		open_rc[i] = receive(rd[i]);
		saved[i] = open_rc[i] == 0 && receive(rd[i]) == 0;
		close(rd[i]);
		assert_int_equal(waitpid(pid[i], NULL, 0), pid[i]);
	}
	close(go[1]);
}

/* Round \p round of the race: its directory and engine. */
static char *
race_dir(struct t_tmp_fixture *f, uint32_t round, uint32_t *engine)
{
	char name[32];

	snprintf(name, sizeof(name), "race%u", round);
	*engine = g_uring && round % 2 ? TUTTI_ENGINE_URING : TUTTI_ENGINE_POSIX;
	return t_path_join(f->tmp, name);
}

/*
 * Racer \p who of two, for \p rounds rounds: each round both pass \p start (a process-shared
 * barrier) and open that round's directory with TUTTI_OPEN_CREATE at the same moment; the one
 * that got it saves its chain and closes; then each reports the open's result and the save's.
 * Two long-lived processes rather than two per round keep the race cheap under sanitizers.
 */
static pid_t
spawn_racer(struct t_tmp_fixture *f, pthread_barrier_t *start, uint32_t rounds, uint32_t who,
            int *rd)
{
	int fd;
	pid_t pid = fork_reporter(&fd);

	if (pid == 0) {
		for (uint32_t round = 0; round < rounds; round++) {
			struct tutti_store *st = NULL;
			uint32_t engine;
			char *dir = race_dir(f, round, &engine);
			int rc, saved = -EINVAL;

			pthread_barrier_wait(start);
			rc = open_dir(f, dir, engine, TUTTI_OPEN_CREATE, &st);
			if (rc == 0) {
				saved = save_chain(st, &f->geo, 2 * round + who);
				tutti_store_close(st);
			}
			report(fd, rc);
			report(fd, saved);
			free(dir);
		}
		_exit(0);
	}
	*rd = fd;
	return pid;
}

static void
test_two_processes_creating_one_store_keep_what_the_winner_saved(void **state)
{
	struct t_tmp_fixture *f = *state;
	const char *env = getenv("T_RACE_ROUNDS");
	uint32_t rounds = env != NULL ? (uint32_t)strtoul(env, NULL, 10) : DEFAULT_RACE_ROUNDS;
	uint32_t busy = 0, both = 0;
	pthread_barrierattr_t attr;
	pthread_barrier_t *start =
	    mmap(NULL, sizeof(*start), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int rd[2];
	pid_t pid[2];

	assert_true(start != MAP_FAILED);
	assert_int_equal(pthread_barrierattr_init(&attr), 0);
	assert_int_equal(pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED), 0);
	assert_int_equal(pthread_barrier_init(start, &attr, 2), 0);
	for (uint32_t i = 0; i < 2; i++) {
		pid[i] = spawn_racer(f, start, rounds, i, &rd[i]);
	}
	for (uint32_t round = 0; round < rounds; round++) {
		uint32_t engine;
		char *dir = race_dir(f, round, &engine), *file = t_data_path(dir);
		struct tutti_store *st = NULL;
		int32_t rc[2];
		bool saved[2];

		for (int i = 0; i < 2; i++) {
			rc[i] = receive(rd[i]);
			saved[i] = receive(rd[i]) == 0;
			/* -EEXIST would claim another geometry is stored here. */
			if (rc[i] != 0 && rc[i] != -EBUSY) {
				fail_msg("round %u: a creator's open: %d (%s)", round, rc[i],
				         tutti_strerror(rc[i]));
			}
			busy += rc[i] == -EBUSY;
		}
		both += rc[0] == 0 && rc[1] == 0;
		assert_true(rc[0] == 0 || rc[1] == 0);
		/* Both have closed it: whatever the winner saved is in the store at its path. */
		assert_int_equal(open_dir(f, dir, engine, 0, &st), 0);
		for (int i = 0; i < 2; i++) {
			if (saved[i] && !chain_found(st, 2 * round + (uint32_t)i)) {
				fail_msg(
				    "round %u: creator %d saved its chain and the store lost it",
				    round, i);
			}
		}
		tutti_store_close(st);
		unlink(file);
		rmdir(dir);
		free(file);
		free(dir);
	}
	for (int i = 0; i < 2; i++) {
		close(rd[i]);
		assert_int_equal(waitpid(pid[i], NULL, 0), pid[i]);
	}
	pthread_barrier_destroy(start);
	munmap(start, sizeof(*start));
	print_message("%u rounds: %u losers got -EBUSY, %u rounds opened one after the other\n",
	              rounds, busy, both);
}

static void
test_creators_killed_while_racing_leave_a_store_that_opens(void **state)
{
	struct t_tmp_fixture *f = *state;
	char *dir = t_path_join(f->tmp, "killed-race"), *file = t_data_path(dir);

	for (uint32_t round = 0; round < 40; round++) {
		uint32_t engine = g_uring && round % 2 ? TUTTI_ENGINE_URING : TUTTI_ENGINE_POSIX;
		struct tutti_store *st = NULL;
		int32_t rc[2];
		bool saved[2];

		race_and_kill(f, dir, engine, round, 1 + t_rng_below(&f->r, 4000), saved, rc);
		/* Whatever the kill left (no file, an empty one, a store) opens with CREATE, and
		 * keeps every chain a creator reported saved. */
		rc[0] = open_dir(f, dir, engine, TUTTI_OPEN_CREATE, &st);
		if (rc[0] != 0) {
			fail_msg("round %u: the store cannot be opened after the kill: %s", round,
			         tutti_strerror(rc[0]));
		}
		for (int i = 0; i < 2; i++) {
			assert_true(!saved[i] || chain_found(st, 2 * round + (uint32_t)i));
		}
		tutti_store_close(st);
		if (round % 4 == 3) {
			unlink(file); /* sometimes from nothing again */
		}
	}
	free(file);
	free(dir);
}

/* ---- what stands where the data file should be ---- */

static const uint32_t g_open_kinds[] = {0, TUTTI_OPEN_CREATE, TUTTI_OPEN_EXISTING};

static void
test_a_fifo_as_data_file_is_eproto_without_blocking(void **state)
{
	struct t_tmp_fixture *f = *state;
	char *dir = t_path_join(f->tmp, "fifo"), *file = t_data_path(dir);

	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(mkfifo(file, 0600), 0);
	/* An open that blocks on the FIFO ends the test program here. */
	alarm(20);
	for (size_t i = 0; i < sizeof(g_open_kinds) / sizeof(g_open_kinds[0]); i++) {
		struct tutti_store *st = NULL;

		assert_int_equal(open_dir(f, dir, TUTTI_ENGINE_POSIX, g_open_kinds[i], &st),
		                 -EPROTO);
		assert_true(t_log_contains(&f->rec, "not a regular file"));
	}
	alarm(0);
	free(file);
	free(dir);
}

static void
test_a_hard_linked_data_file_is_emlink_and_untouched(void **state)
{
	struct t_tmp_fixture *f = *state;
	char *dir = t_path_join(f->tmp, "linked"), *file = t_data_path(dir);
	char *other = t_path_join(f->tmp, "other");
	struct tutti_store *st = NULL;
	struct stat sb;
	int fd = open(other, O_CREAT | O_WRONLY, 0644);

	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(link(other, file), 0);
	for (uint32_t flags = 0; flags <= TUTTI_OPEN_CREATE; flags += TUTTI_OPEN_CREATE) {
		assert_int_equal(open_dir(f, dir, TUTTI_ENGINE_POSIX, flags, &st), -EMLINK);
		assert_true(t_log_contains(&f->rec, "hard links"));
	}
	assert_int_equal(stat(other, &sb), 0);
	assert_int_equal(sb.st_size, 0);
	assert_int_equal(sb.st_mode & 0777, 0644);
	/* A store of its own, linked under a second name, is refused too. */
	unlink(file);
	assert_int_equal(open_dir(f, dir, TUTTI_ENGINE_POSIX, TUTTI_OPEN_CREATE, &st), 0);
	tutti_store_close(st);
	unlink(other);
	assert_int_equal(link(file, other), 0);
	assert_int_equal(open_dir(f, dir, TUTTI_ENGINE_POSIX, 0, &st), -EMLINK);
	unlink(other);
	assert_int_equal(open_dir(f, dir, TUTTI_ENGINE_POSIX, 0, &st), 0);
	tutti_store_close(st);
	free(other);
	free(file);
	free(dir);
}

static void
test_an_empty_data_file_made_elsewhere_becomes_mode_0600(void **state)
{
	struct t_tmp_fixture *f = *state;
	char *dir = t_path_join(f->tmp, "touched"), *file = t_data_path(dir);
	struct tutti_store *st = NULL;
	struct stat sb;
	int fd;

	assert_int_equal(mkdir(dir, 0700), 0);
	fd = open(file, O_CREAT | O_WRONLY, 0644);
	assert_true(fd >= 0);
	assert_int_equal(fchmod(fd, 0644), 0); /* whatever the umask */
	close(fd);
	/* Without CREATE an empty file is no store, and is left as it is. */
	assert_int_equal(open_dir(f, dir, TUTTI_ENGINE_POSIX, 0, &st), -ENOENT);
	assert_true(t_log_contains(&f->rec, "empty"));
	assert_int_equal(open_dir(f, dir, TUTTI_ENGINE_POSIX, TUTTI_OPEN_EXISTING, &st), -ENOENT);
	assert_true(t_log_contains(&f->rec, "empty"));
	assert_int_equal(stat(file, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0644);
	assert_int_equal(open_dir(f, dir, TUTTI_ENGINE_POSIX, TUTTI_OPEN_CREATE, &st), 0);
	tutti_store_close(st);
	assert_int_equal(stat(file, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	free(file);
	free(dir);
}

static void
test_a_store_directory_may_be_a_symbolic_link(void **state)
{
	struct t_tmp_fixture *f = *state;
	char *real = t_path_join(f->tmp, "real"), *link_path = t_path_join(f->tmp, "link");
	char *slash = t_path_join(f->tmp, "link/"), *file = t_data_path(real);
	struct tutti_store *st = NULL;

	assert_int_equal(mkdir(real, 0700), 0);
	assert_int_equal(symlink("real", link_path), 0);
	assert_int_equal(open_dir(f, link_path, TUTTI_ENGINE_POSIX, TUTTI_OPEN_CREATE, &st), 0);
	assert_int_equal(save_chain(st, &f->geo, 9), 0);
	tutti_store_close(st);
	assert_true(t_path_exists(file));
	/* With or without a trailing slash, and through the real path: one store. */
	assert_int_equal(open_dir(f, slash, TUTTI_ENGINE_POSIX, 0, &st), 0);
	assert_true(chain_found(st, 9));
	tutti_store_close(st);
	assert_int_equal(open_dir(f, real, TUTTI_ENGINE_POSIX, 0, &st), 0);
	assert_true(chain_found(st, 9));
	tutti_store_close(st);
	/* A link to something that is not a directory is not a store directory. */
	unlink(link_path);
	assert_int_equal(symlink("real/tutti.data", link_path), 0);
	assert_int_equal(open_dir(f, link_path, TUTTI_ENGINE_POSIX, TUTTI_OPEN_CREATE, &st),
	                 -ENOTDIR);
	free(file);
	free(slash);
	free(link_path);
	free(real);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, t_tmp_fixture_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_open_right_after_a_killed_uring_owner_succeeds),
	    T(test_open_right_after_a_killed_posix_owner_succeeds),
	    T(test_open_beside_a_live_owner_is_ebusy_at_once),
	    T(test_two_processes_creating_one_store_keep_what_the_winner_saved),
	    T(test_creators_killed_while_racing_leave_a_store_that_opens),
	    T(test_a_fifo_as_data_file_is_eproto_without_blocking),
	    T(test_a_hard_linked_data_file_is_emlink_and_untouched),
	    T(test_an_empty_data_file_made_elsewhere_becomes_mode_0600),
	    T(test_a_store_directory_may_be_a_symbolic_link),
	};

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	g_uring = t_uring_probe() == 0;
	return cmocka_run_group_tests_name("open_safety", tests, NULL, NULL);
}
