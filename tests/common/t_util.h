/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: helpers shared by the tests: temporary directories, a seeded random generator,
 * aligned buffers, capability probes (O_DIRECT, io_uring), a log recorder, and the mains of
 * test programs run once per engine or in a mount namespace of their own.
 */
#ifndef T_UTIL_H
#define T_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit code of a test binary whose precondition is missing. */
#define T_EXIT_SKIP 77

/* ---- temporary directories ---- */

/* Create a unique directory under $TMPDIR (or /tmp). Returns a malloc'd path or NULL. */
char *t_tmpdir_create(void);
/* Remove \p path recursively (unmounting nothing) and free it. NULL is allowed. */
void t_tmpdir_remove(char *path);
/* malloc'd "\p dir/\p name"; never NULL (aborts on allocation failure). */
char *t_path_join(const char *dir, const char *name);
/* True when \p path exists. */
bool t_path_exists(const char *path);

/* ---- capabilities ---- */

/* 1 when a file in a fresh directory under $TMPDIR accepts 4 KiB O_DIRECT I/O, else 0. */
int t_tmpdir_supports_odirect(void);
/* 0 when io_uring works, or the negative errno of io_uring_queue_init. */
int t_uring_probe(void);

/*
 * A test program's main: run \p tests (cmocka, \p nr of them) once per engine this machine has,
 * *\p engine naming the one in use: uring and, with \p gpu_twin, gpu-uring driven by its host
 * twin (when io_uring works) twice, its I/O issued by the kernel's SQ thread and then by the
 * host (t_engine_opts "submit=sqpoll", then "submit=host"), then posix; suites are named
 * "\p suite/<engine>". Returns the number of failures, 1 when io_uring is there but broken, or
 * T_EXIT_SKIP without O_DIRECT.
 */
struct CMUnitTest;
int t_run_per_engine(const char *suite, const struct CMUnitTest *tests, size_t nr, bool gpu_twin,
                     int *engine);
/* The engine options of the run in progress (gpu-uring's "submit=..."), which t_store_opts()
 * gives a store of gpu-uring or auto (the engines that take them): NULL (the engine's own
 * choice) outside t_run_per_engine(). */
extern const char *t_engine_opts;

/*
 * A test program's main for tests that mount filesystems: as root the process moves into a mount
 * namespace of its own, so that the tests' mounts vanish with it and are seen by nobody else,
 * and *\p mounts becomes true (false when not root: the tests that mount skip); then \p tests
 * (\p nr of them) run as the group \p suite. Returns the number of failures, T_EXIT_SKIP without
 * O_DIRECT, or \p no_namespace_rc when root cannot get a namespace.
 */
int t_run_with_private_mounts(const char *suite, const struct CMUnitTest *tests, size_t nr,
                              bool *mounts, int no_namespace_rc);

/* ---- random data (xorshift64*, reproducible from a seed) ---- */

struct t_rng {
	uint64_t s;
};

/* The seed: $T_SEED when set, else \p dflt. */
uint64_t t_seed(uint64_t dflt);
void t_rng_init(struct t_rng *r, uint64_t seed);
uint64_t t_rng_next(struct t_rng *r);
/* Uniform in [0, n); n > 0. */
uint32_t t_rng_below(struct t_rng *r, uint32_t n);
void t_rng_fill(struct t_rng *r, void *buf, size_t len);
/* Fisher-Yates shuffle of ids[0..n). */
void t_shuffle(struct t_rng *r, uint32_t *ids, uint32_t n);
/* ids[0..n) = n distinct values of [0, range), in random order. n <= range. */
void t_random_distinct(struct t_rng *r, uint32_t *ids, uint32_t n, uint32_t range);

/* ---- memory ---- */

/* 4 KiB-aligned, zeroed memory; never NULL (aborts). Free with free(). */
void *t_aligned_alloc(size_t bytes);

/* ---- a log_fn that records what the library says ---- */

#define T_LOG_MAX 64

struct t_log {
	int nr;     /* messages received (may exceed T_LOG_MAX; only the first are kept) */
	int nr_err; /* of which at TUTTI_LOG_ERR */
	int levels[T_LOG_MAX];
	char msgs[T_LOG_MAX][512];
};

/* A tutti_log_fn; \p arg is a struct t_log. */
void t_log_fn(void *arg, int level, const char *msg);
void t_log_reset(struct t_log *log);
/* True when some recorded message contains \p needle. */
bool t_log_contains(const struct t_log *log, const char *needle);

#endif /* T_UTIL_H */
