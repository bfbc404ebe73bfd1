/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The profile file: what the scheduler plans with before it has measured anything itself.
 * A line-oriented text format, small enough that reading it needs no library:
 *
 *   tutti-profile 1
 *   read_bytes_per_s 2.41e+10
 *   write_bytes_per_s 1.2e+10
 *   layer_ns_per_token 0 31.5
 *   ...
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "tutti/pipeline.h"

#define MAGIC "tutti-profile 1"

static int
parse_double(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || v < 0 || v != v) {
		return -EBADMSG;
	}
	while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r') {
		end++;
	}
	if (*end != '\0') {
		return -EBADMSG;
	}
	*out = v;
	return 0;
}

static int
parse_line(char *line, struct tutti_profile *out)
{
	char *val = strchr(line, ' ');
	char *end;
	unsigned long layer;

	if (val == NULL) {
		return -EBADMSG;
	}
	*val++ = '\0';
	if (strcmp(line, "read_bytes_per_s") == 0) {
		return parse_double(val, &out->read_bytes_per_s);
	}
	if (strcmp(line, "write_bytes_per_s") == 0) {
		return parse_double(val, &out->write_bytes_per_s);
	}
	if (strcmp(line, "layer_ns_per_token") == 0) {
		errno = 0;
		layer = strtoul(val, &end, 10);
		if (errno != 0 || end == val || *end != ' ' || layer >= out->nr_layers) {
			return -EBADMSG;
		}
		return parse_double(end + 1, &out->layer_ns_per_token[layer]);
	}
	return -EBADMSG;
}

int
tutti_profile_read(const char *path, struct tutti_profile *out)
{
	char line[256];
	FILE *f;
	int fd, rc = 0;
	bool first = true;

	if (path == NULL || out == NULL || out->size != sizeof(*out) || out->nr_layers == 0 ||
	    out->layer_ns_per_token == NULL) {
		return -EINVAL;
	}
	/* Only a regular file: a FIFO would block the open until a writer came (issue 48). */
	fd = tt_open_kind(AT_FDCWD, path, O_RDONLY, 0, TT_KIND_FILE, -EINVAL, path, NULL);
	if (fd < 0) {
		return fd;
	}
	f = fdopen(fd, "r");
	if (f == NULL) {
		rc = -errno;
		close(fd);
		return rc;
	}
	out->read_bytes_per_s = out->write_bytes_per_s = 0;
	memset(out->layer_ns_per_token, 0, out->nr_layers * sizeof(double));
	while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
		size_t n = strlen(line);

		if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
			rc = -EBADMSG; /* longer than any valid line */
			break;
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) {
			line[--n] = '\0';
		}
		if (first) {
			rc = strcmp(line, MAGIC) == 0 ? 0 : -EBADMSG;
			first = false;
		} else if (n > 0 && line[0] != '#') {
			rc = parse_line(line, out);
		}
	}
	if (rc == 0 && (ferror(f) || first)) {
		rc = ferror(f) ? -EIO : -EBADMSG;
	}
	fclose(f);
	return rc;
}

int
tutti_profile_write(const char *path, const struct tutti_profile *prof)
{
	char tmp[PATH_MAX];
	FILE *f;
	int n, rc = 0, fd;

	if (path == NULL || prof == NULL || prof->size != sizeof(*prof) ||
	    (prof->nr_layers > 0 && prof->layer_ns_per_token == NULL)) {
		return -EINVAL;
	}
	/* The profile is renamed over \p path, which replaces a symbolic link there rather than
	 * writing through it; anything else but a regular file (a FIFO, a socket, a device node,
	 * which root could replace) is refused. */
	rc = tt_check_kind(AT_FDCWD, path, false, TT_KIND_FILE, -EINVAL, path, NULL);
	if (rc < 0) {
		return rc;
	}
	/* A new name, created exclusively: a symbolic link planted under a predictable temporary
	 * name cannot redirect the write. */
	n = snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path);
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		return -ENAMETOOLONG;
	}
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		return -errno;
	}
	if (fchmod(fd, 0644) != 0) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return rc;
	}
	f = fdopen(fd, "w");
	if (f == NULL) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return rc;
	}
	fprintf(f, "%s\n# storage: bytes per second; compute: ns per token per layer\n", MAGIC);
	fprintf(f, "read_bytes_per_s %.6g\nwrite_bytes_per_s %.6g\n", prof->read_bytes_per_s,
	        prof->write_bytes_per_s);
	for (uint32_t l = 0; l < prof->nr_layers; l++) {
		fprintf(f, "layer_ns_per_token %u %.6g\n", l, prof->layer_ns_per_token[l]);
	}
	if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
		rc = -errno;
	}
	if (fclose(f) != 0 && rc == 0) {
		rc = -errno;
	}
	if (rc == 0 && rename(tmp, path) != 0) {
		rc = -errno;
	}
	if (rc < 0) {
		unlink(tmp);
	}
	return rc;
}
