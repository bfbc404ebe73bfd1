/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: helpers shared by the tests (see t_util.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "t_util.h"
#include "tutti/base.h"
#include "tutti/store.h"

/* ---- temporary directories ---- */

char *
t_tmpdir_create(void)
{
	const char *base = getenv("TMPDIR");
	char *path;

	if (base == NULL || base[0] == '\0') {
		base = "/tmp";
	}
	if (asprintf(&path, "%s/tutti-test.XXXXXX", base) < 0) {
		return NULL;
	}
	if (mkdtemp(path) == NULL) {
		free(path);
		return NULL;
	}
	return path;
}

static int
make_writable(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	if (type == FTW_D || type == FTW_DNR) {
		chmod(path, 0700);
	}
	return 0;
}

static int
remove_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	if (remove(path) != 0) {
		fprintf(stderr, "t_tmpdir_remove: %s: %s\n", path, strerror(errno));
	}
	return 0;
}

void
t_tmpdir_remove(char *path)
{
	if (path == NULL) {
		return;
	}
	/* Pre-order first, so that a directory made read-only by a test can be emptied. */
	nftw(path, make_writable, 16, FTW_PHYS | FTW_MOUNT);
	nftw(path, remove_one, 16, FTW_PHYS | FTW_MOUNT | FTW_DEPTH);
	free(path);
}

char *
t_path_join(const char *dir, const char *name)
{
	char *p;

	if (asprintf(&p, "%s/%s", dir, name) < 0) {
		abort();
	}
	return p;
}

bool
t_path_exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* ---- capabilities ---- */

int
t_tmpdir_supports_odirect(void)
{
	char *dir = t_tmpdir_create(), *file;
	void *buf;
	int fd, ok = 0;

	if (dir == NULL) {
		return 0;
	}
	file = t_path_join(dir, "probe");
	buf = t_aligned_alloc(4096);
	fd = open(file, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd >= 0) {
		ok = pwrite(fd, buf, 4096, 0) == 4096 && pread(fd, buf, 4096, 0) == 4096;
		close(fd);
	}
	free(buf);
	free(file);
	t_tmpdir_remove(dir);
	return ok;
}

int
t_uring_probe(void)
{
	struct io_uring ring;
	int rc = io_uring_queue_init(4, &ring, 0);

	if (rc == 0) {
		io_uring_queue_exit(&ring);
	}
	return rc;
}

/* ---- random data ---- */

uint64_t
t_seed(uint64_t dflt)
{
	const char *s = getenv("T_SEED");
	char *end;
	unsigned long long v;

	if (s == NULL || s[0] == '\0') {
		return dflt;
	}
	errno = 0;
	v = strtoull(s, &end, 0);
	return errno == 0 && *end == '\0' ? (uint64_t)v : dflt;
}

void
t_rng_init(struct t_rng *r, uint64_t seed)
{
	r->s = seed ? seed : 0x9e3779b97f4a7c15ull;
}

uint64_t
t_rng_next(struct t_rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 0x2545f4914f6cdd1dull;
}

uint32_t
t_rng_below(struct t_rng *r, uint32_t n)
{
	return (uint32_t)((t_rng_next(r) >> 32) % n);
}

void
t_rng_fill(struct t_rng *r, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len >= 8) {
		uint64_t v = t_rng_next(r);

		memcpy(p, &v, 8);
		p += 8;
		len -= 8;
	}
	if (len > 0) {
		uint64_t v = t_rng_next(r);

		memcpy(p, &v, len);
	}
}

void
t_shuffle(struct t_rng *r, uint32_t *ids, uint32_t n)
{
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = t_rng_below(r, i), t = ids[i - 1];

		ids[i - 1] = ids[j];
		ids[j] = t;
	}
}

void
t_random_distinct(struct t_rng *r, uint32_t *ids, uint32_t n, uint32_t range)
{
	uint32_t *all = malloc((size_t)range * sizeof(*all));

	if (all == NULL || n > range) {
		abort();
	}
	for (uint32_t i = 0; i < range; i++) {
		all[i] = i;
	}
	t_shuffle(r, all, range);
	memcpy(ids, all, (size_t)n * sizeof(*ids));
	free(all);
}

/* ---- memory ---- */

void *
t_aligned_alloc(size_t bytes)
{
	void *p = NULL;

	bytes = (bytes + 4095) / 4096 * 4096;
	if (bytes == 0 || posix_memalign(&p, 4096, bytes) != 0) {
		abort();
	}
	memset(p, 0, bytes);
	return p;
}

/* ---- log recorder ---- */

void
t_log_fn(void *arg, int level, const char *msg)
{
	struct t_log *log = arg;

	if (log->nr < T_LOG_MAX) {
		log->levels[log->nr] = level;
		snprintf(log->msgs[log->nr], sizeof(log->msgs[0]), "%s", msg);
	}
	log->nr++;
	log->nr_err += level == TUTTI_LOG_ERR;
}

void
t_log_reset(struct t_log *log)
{
	memset(log, 0, sizeof(*log));
}

bool
t_log_contains(const struct t_log *log, const char *needle)
{
	for (int i = 0; i < log->nr && i < T_LOG_MAX; i++) {
		if (strstr(log->msgs[i], needle) != NULL) {
			return true;
		}
	}
	return false;
}

/* ---- a test program in a mount namespace of its own ---- */

int
t_run_with_private_mounts(const char *suite, const struct CMUnitTest *tests, size_t nr,
                          bool *mounts, int no_namespace_rc)
{
	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	*mounts = geteuid() == 0;
	if (*mounts &&
	    (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)) {
		return no_namespace_rc;
	}
	return _cmocka_run_group_tests(suite, tests, nr, NULL, NULL);
}

/* ---- a test program per engine ---- */

const char *t_engine_opts;

int
t_run_per_engine(const char *suite, const struct CMUnitTest *tests, size_t nr, bool gpu_twin,
                 int *engine)
{
	static const struct {
		int engine;
		const char *name;
		bool uring, twin;
		const char *opts;
	} runs[] = {
	    {TUTTI_ENGINE_URING, "uring", true, false, NULL},
	    /* The GPU-drivable ring driven by its host twin: the GPU engine's protocol in CI, with
	     * either issuer whatever filesystem the temporary directory is on. */
	    {TUTTI_ENGINE_GPU_URING, "gpu-uring-sqpoll", true, true, "submit=sqpoll"},
	    {TUTTI_ENGINE_GPU_URING, "gpu-uring-host", true, true, "submit=host"},
	    {TUTTI_ENGINE_POSIX, "posix", false, false, NULL},
	};
	int rc, failed = 0;

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	rc = t_uring_probe();
	if (rc != 0 && rc != -ENOSYS && rc != -EPERM) {
		return 1; /* io_uring is there but broken */
	}
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char name[128];

		if ((runs[i].uring && rc != 0) || (runs[i].twin && !gpu_twin)) {
			continue;
		}
		snprintf(name, sizeof(name), "%s/%s", suite, runs[i].name);
		*engine = runs[i].engine;
		t_engine_opts = runs[i].opts;
		failed += _cmocka_run_group_tests(name, tests, nr, NULL, NULL);
	}
	t_engine_opts = NULL;
	return failed;
}
