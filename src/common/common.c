/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging, allocation wrappers, clocks, and the library-wide version and error strings.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

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
