/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging, allocation wrappers, opening paths of the kind meant, clocks, and the library-wide
 * version and error strings.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "tutti/geometry.h"

void
tt_log_msg(const struct tt_log *log, int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (log == NULL || log->fn == NULL || level > log->level) {
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log->fn(log->arg, level, line);
}

void *
tt_malloc(size_t bytes)
{
	return malloc(bytes ? bytes : 1);
}

void *
tt_calloc(size_t nr, size_t bytes)
{
	return calloc(nr ? nr : 1, bytes ? bytes : 1);
}

void
tt_free(void *p)
{
	free(p);
}

/* Large I/O buffers come from mmap with transparent huge pages where the system allows: a
 * buffer made of 2 MiB pages is a handful of segments for the block layer instead of one per
 * 4 KiB page. The size is kept in front of the buffer so that tt_aligned_free knows how it was
 * made. */
#define TT_MMAP_MIN (2u << 20)

void *
tt_aligned_alloc(size_t bytes)
{
	size_t len = tt_round_up(bytes ? bytes : 1, TUTTI_ALIGN) + TUTTI_ALIGN;
	uint8_t *p;

	if (len >= TT_MMAP_MIN) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			return NULL;
		}
		madvise(p, len, MADV_HUGEPAGE); /* a hint; failure is harmless */
	} else {
		if (posix_memalign((void **)&p, TUTTI_ALIGN, len) != 0) {
			return NULL;
		}
		/* Zeroed so that padding written to disk never carries stale process memory. */
		memset(p, 0, len);
	}
	memcpy(p, &len, sizeof(len));
	return p + TUTTI_ALIGN;
}

void
tt_aligned_free(void *ptr)
{
	uint8_t *p;
	size_t len;

	if (ptr == NULL) {
		return;
	}
	p = (uint8_t *)ptr - TUTTI_ALIGN;
	memcpy(&len, p, sizeof(len));
	if (len >= TT_MMAP_MIN) {
		munmap(p, len);
	} else {
		free(p);
	}
}

const char *
tt_kind_name(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return "a regular file";
	case S_IFDIR:
		return "a directory";
	case S_IFIFO:
		return "a FIFO";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	case S_IFSOCK:
		return "a socket";
	case S_IFLNK:
		return "a symbolic link";
	default:
		return "a file of an unknown type";
	}
}

static bool
is_kind(mode_t mode, enum tt_kind kind)
{
	return kind == TT_KIND_DIR ? S_ISDIR(mode) : S_ISREG(mode);
}

static int
refuse(mode_t mode, enum tt_kind kind, int refused, const char *path, const struct tt_log *log)
{
	tt_log_err(log, "%s is %s, not %s: refused", path, tt_kind_name(mode),
	           tt_kind_name(kind == TT_KIND_DIR ? S_IFDIR : S_IFREG));
	return refused;
}

int
tt_check_kind(int dir_fd, const char *name, bool follow, enum tt_kind kind, int refused,
              const char *path, const struct tt_log *log)
{
	struct stat st;

	/* Missing, or not to be looked at (a directory on the way denies it): the open says. */
	if (fstatat(dir_fd, name, &st, follow ? 0 : AT_SYMLINK_NOFOLLOW) != 0 ||
	    (!follow && S_ISLNK(st.st_mode)) || is_kind(st.st_mode, kind)) {
		return 0;
	}
	return refuse(st.st_mode, kind, refused, path, log);
}

int
tt_open_kind(int dir_fd, const char *name, int flags, mode_t mode, enum tt_kind kind, int refused,
             const char *path, const struct tt_log *log)
{
	bool follow = (flags & O_NOFOLLOW) == 0;
	struct stat st;
	int fd, rc = tt_check_kind(dir_fd, name, follow, kind, refused, path, log);

	if (rc < 0) {
		return rc;
	}
	fd = openat(dir_fd, name, flags | O_NONBLOCK | O_CLOEXEC, mode);
	if (fd < 0) {
		rc = -errno;
		/* Something of another kind put there since the look can fail the open in its own
		 * way (ENXIO: a FIFO without a reader; EISDIR; EINVAL: O_DIRECT refused): say what
		 * it is instead. */
		return rc != -ENOENT && rc != -EEXIST &&
		               tt_check_kind(dir_fd, name, follow, kind, refused, path, log) < 0
		           ? refused
		           : rc;
	}
	if (fstat(fd, &st) != 0) {
		rc = -errno;
	} else if (!is_kind(st.st_mode, kind)) {
		rc = refuse(st.st_mode, kind, refused, path, log);
	} else if ((flags & O_NONBLOCK) == 0 &&
	           fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
		rc = -errno;
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

uint64_t
tt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * TT_NS_PER_S + (uint64_t)ts.tv_nsec;
}

const char *
tutti_version(void)
{
#define TT_STR_(x) #x
#define TT_STR(x) TT_STR_(x)
	return TT_STR(TUTTI_VERSION_MAJOR) "." TT_STR(TUTTI_VERSION_MINOR) "." TT_STR(
	    TUTTI_VERSION_PATCH);
}

const char *
tutti_strerror(int rc)
{
	const char *desc;

	if (rc == 0) {
		return "Success";
	}
	if (rc < 0) {
		rc = rc == INT_MIN ? INT_MAX : -rc;
	}
	/* strerrordesc_np is thread-safe and returns static strings (glibc >= 2.32). */
	desc = strerrordesc_np(rc);
	return desc ? desc : "Unknown error";
}
