/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strict command-line numbers, and paths of the kind meant (cliarg.h).
 */
#define _XOPEN_SOURCE 700 /* lstat and the file types, built without the library's _GNU_SOURCE */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cliarg.h"

static int
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

int
cliarg_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (s == NULL || !is_digit(s[0])) {
		return -EINVAL; /* also refuses the sign and spaces strtoull would skip */
	}
	for (const char *p = s; *p != '\0'; p++) {
		if (!is_digit(*p)) {
			return -EINVAL;
		}
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) {
			return -ERANGE;
		}
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v < min || v > max) {
		return -ERANGE;
	}
	*out = v;
	return 0;
}

int
cliarg_parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;

	/* A digit or a point first: no sign, no spaces, no "inf" or "nan". */
	if (s == NULL || !(is_digit(s[0]) || (s[0] == '.' && is_digit(s[1])))) {
		return -EINVAL;
	}
	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0') {
		return -EINVAL;
	}
	if (errno == ERANGE || !isfinite(v) || v < min || v > max) {
		return -ERANGE;
	}
	*out = v;
	return 0;
}

int
cliarg_u64(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max,
           uint64_t *out)
{
	int rc = cliarg_parse_u64(s, min, max, out);

	if (rc == -EINVAL) {
		fprintf(stderr, "%s: %s: '%s' is not a whole number\n", prog, opt, s ? s : "");
	} else if (rc < 0) {
		fprintf(stderr, "%s: %s: %s is outside %llu..%llu\n", prog, opt, s,
		        (unsigned long long)min, (unsigned long long)max);
	}
	return rc;
}

int
cliarg_u32(const char *prog, const char *opt, const char *s, uint32_t min, uint32_t max,
           uint32_t *out)
{
	uint64_t v;
	int rc = cliarg_u64(prog, opt, s, min, max, &v);

	if (rc == 0) {
		*out = (uint32_t)v;
	}
	return rc;
}

int
cliarg_double(const char *prog, const char *opt, const char *s, double min, double max, double *out)
{
	int rc = cliarg_parse_double(s, min, max, out);

	if (rc == -EINVAL) {
		fprintf(stderr, "%s: %s: '%s' is not a number\n", prog, opt, s ? s : "");
	} else if (rc < 0) {
		fprintf(stderr, "%s: %s: %s is outside %g..%g\n", prog, opt, s, min, max);
	}
	return rc;
}

static const char *
kind_name(mode_t mode)
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
	default:
		return "a file of an unknown type";
	}
}

int
cliarg_path(const char *prog, const char *opt, const char *path, bool dir)
{
	struct stat st;

	if ((dir ? stat(path, &st) : lstat(path, &st)) != 0 ||
	    (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) {
		return 0;
	}
	fprintf(stderr, "%s: %s%s%s is %s, not %s\n", prog, opt != NULL ? opt : "",
	        opt != NULL ? " " : "", path, kind_name(st.st_mode),
	        dir ? "a directory" : "a regular file");
	return -EINVAL;
}

int
cliarg_open(const char *prog, const char *opt, const char *path, int flags, unsigned mode)
{
	struct stat st;
	int fd, fl;

	if (cliarg_path(prog, opt, path, false) < 0) {
		return -EINVAL;
	}
	fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, (mode_t)mode);
	if (fd < 0) {
		int rc = -errno;

		/* A FIFO put there since, without a reader, fails a non-blocking open for writing.
		 */
		if (rc == -ENXIO && cliarg_path(prog, opt, path, false) < 0) {
			return -EINVAL;
		}
		return rc;
	}
	if (fstat(fd, &st) != 0 || (fl = fcntl(fd, F_GETFL)) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		fprintf(stderr, "%s: %s%s%s is %s, not a regular file\n", prog,
		        opt != NULL ? opt : "", opt != NULL ? " " : "", path,
		        kind_name(st.st_mode));
		return -EINVAL;
	}
	if ((flags & O_NONBLOCK) == 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}
