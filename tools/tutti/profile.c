/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `tutti profile`: the offline profile the layerwise pipeline plans with. It measures the
 * storage (sequential O_DIRECT write, then read, of a scratch file in each directory, the best
 * point of a short sweep of I/O sizes and depths) and writes the bandwidths with per-layer compute
 * times: given on the command line, kept from the existing profile, or left unknown (0), which
 * the pipeline then measures online.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "cliarg.h"
#include "rawbw.h"
#include "tutti/tutti.h"

#define MAX_DIRS 16

/* The sweep measures 6 points of up to 4 MiB I/Os, each over its share of the bytes: below
 * 6 x 4 MiB some points would not run and the figure would not be the storage's. */
#define MIN_MIB 24u
#define MAX_MIB (1u << 24)
/* A layer's compute per token: far above any model's, far below what a typo gives. */
#define MAX_LAYER_NS_PER_TOKEN 1e9

static void
profile_usage(FILE *f)
{
	fprintf(f,
	        "usage: tutti profile [--dir DIR]... [--out FILE] [--model NAME] [--mib N]\n"
	        "                     [--layer-ns-per-token X] [--async]\n"
	        "  --dir DIR   a store directory (repeat for several disks; default tutti-store)\n"
	        "  --out FILE  the profile to write (default DIR/tutti.profile of the first)\n"
	        "  --model     geometry preset giving the layer count (default llama-3-8b)\n"
	        "  --mib N     MiB written and read per directory, 24..16777216 (default 1024)\n"
	        "  --layer-ns-per-token X   compute time of every layer per token, 0..1e9 "
	        "(default: kept\n"
	        "              from FILE if it exists, else unknown and measured online)\n"
	        "  --async     reads with IOSQE_ASYNC (page-cache backed storage such as tmpfs)\n");
}

/*
 * Open a scratch file of \p bytes in each directory; fds[] receive them. The files have no name
 * (O_TMPFILE): nothing planted under a name in the directory (a symbolic link to a file worth
 * keeping) can receive the writes, and a killed run leaves nothing behind. Where the filesystem
 * has no O_TMPFILE, a new name is created exclusively and removed at once.
 */
static int
open_scratch(char *const *dirs, uint32_t n, uint64_t bytes, int *fds)
{
	for (uint32_t i = 0; i < n; i++) {
		int rc;

		fds[i] = open(dirs[i], O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
		if (fds[i] < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
			char path[PATH_MAX];
			int len =
			    snprintf(path, sizeof(path), "%s/profile.scratch.XXXXXX", dirs[i]);

			if (len < 0 || len >= (int)sizeof(path)) {
				return -ENAMETOOLONG;
			}
			fds[i] = mkostemp(path, O_CLOEXEC | O_DIRECT);
			if (fds[i] >= 0) {
				unlink(path);
			}
		}
		if (fds[i] < 0) {
			rc = -errno;
			fprintf(stderr, "tutti profile: a scratch file in %s: %s\n", dirs[i],
			        strerror(-rc));
			return rc;
		}
		if (ftruncate(fds[i], (off_t)bytes) != 0) {
			return -errno;
		}
	}
	return 0;
}

/* What `tutti profile` was asked for. */
struct profile_args {
	char *dirs[MAX_DIRS];
	uint32_t nr_dirs;
	const char *out; /* the profile written: --out, or out_default */
	char out_default[PATH_MAX];
	struct tutti_geometry geo;
	double layer_ns; /* < 0: keep the existing profile's compute times */
	uint64_t mib;
	bool async;
};

/* Parse the command line into \p a. Returns -1 to go on, else the exit code (0 for --help). */
static int
parse_args(int argc, char **argv, struct profile_args *a)
{
	static const struct option options[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"out", required_argument, NULL, 'o'},
	    {"model", required_argument, NULL, 'm'},
	    {"mib", required_argument, NULL, 'b'},
	    {"layer-ns-per-token", required_argument, NULL, 'l'},
	    {"async", no_argument, NULL, 'a'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *model = "llama-3-8b";
	int opt;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'd':
			if (a->nr_dirs == MAX_DIRS) {
				fprintf(stderr, "tutti profile: at most %d directories\n",
				        MAX_DIRS);
				return 2;
			}
			a->dirs[a->nr_dirs++] = optarg;
			break;
		case 'o':
			a->out = optarg;
			break;
		case 'm':
			model = optarg;
			break;
		case 'b':
			if (cliarg_u64("tutti profile", "--mib", optarg, MIN_MIB, MAX_MIB,
			               &a->mib) < 0) {
				return 2;
			}
			break;
		case 'l':
			if (cliarg_double("tutti profile", "--layer-ns-per-token", optarg, 0,
			                  MAX_LAYER_NS_PER_TOKEN, &a->layer_ns) < 0) {
				return 2;
			}
			break;
		case 'a':
			a->async = true;
			break;
		case 'h':
			profile_usage(stdout);
			return 0;
		default:
			profile_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tutti profile: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	if (tutti_geometry_preset(model, &a->geo) < 0) {
		fprintf(stderr, "tutti profile: unknown model %s\n", model);
		return 2;
	}
	if (a->nr_dirs == 0) {
		a->dirs[a->nr_dirs++] = "tutti-store";
	}
	return -1;
}

/* What the paths are, before anything is read or measured: a directory that is not one would
 * otherwise be reported as a profile that does not parse, and a FIFO as the profile would block
 * its read. A missing directory is reported by the measurement. Returns 0 or the exit code. */
static int
check_paths(struct profile_args *a)
{
	int len;

	for (uint32_t i = 0; i < a->nr_dirs; i++) {
		if (cliarg_path("tutti profile", "--dir", a->dirs[i], true) < 0) {
			return 2;
		}
	}
	if (a->out != NULL) {
		return cliarg_path("tutti profile", "--out", a->out, false) < 0 ? 2 : 0;
	}
	len = snprintf(a->out_default, sizeof(a->out_default), "%s/tutti.profile", a->dirs[0]);

	if (len < 0 || len >= (int)sizeof(a->out_default)) {
		fprintf(stderr, "tutti profile: directory name too long: %s\n", a->dirs[0]);
		return 2;
	}
	if (cliarg_path("tutti profile", NULL, a->out_default, false) < 0) {
		return 2;
	}
	a->out = a->out_default;
	return 0;
}

/* The compute part of the profile: --layer-ns-per-token for every layer, or the existing
 * profile's (re-profiling storage is routine), or unknown (0) where there is none. Returns 0 or
 * the exit code. */
static int
compute_times(const struct profile_args *a, struct tutti_profile *prof)
{
	struct tutti_profile old = *prof;
	int rc;

	if (a->layer_ns >= 0) {
		for (uint32_t l = 0; l < a->geo.nr_layers; l++) {
			prof->layer_ns_per_token[l] = a->layer_ns;
		}
		return 0;
	}
	rc = tutti_profile_read(a->out, &old);

	if (rc == 0 || rc == -ENOENT) {
		return 0;
	}
	if (rc == -EBADMSG) {
		fprintf(stderr, "tutti profile: %s exists but is not a profile for %u layers\n",
		        a->out, a->geo.nr_layers);
	} else if (rc == -EINVAL) {
		fprintf(stderr, "tutti profile: %s is not a regular file\n", a->out);
	} else {
		fprintf(stderr, "tutti profile: reading %s: %s\n", a->out, strerror(-rc));
	}
	return rc == -EINVAL ? 2 : 1;
}

/* Sweep a scratch file in every directory: sequential writes, then reads. Returns 0 with both
 * points measured, or -errno (-EIO where no point of a sweep ran: no figure to plan with). */
static int
measure_storage(const struct profile_args *a, struct rawbw_point *wr, struct rawbw_point *rd)
{
	uint64_t bytes = a->mib << 20;
	struct rawbw_target t = {0};
	int fds[MAX_DIRS], rc;

	for (uint32_t i = 0; i < a->nr_dirs; i++) {
		fds[i] = -1;
	}
	rc = open_scratch(a->dirs, a->nr_dirs, bytes, fds);
	if (rc == 0) {
		t.fds = fds;
		t.nr_fds = a->nr_dirs;
		t.span = bytes;
		t.write = true;
		rc = rawbw_sweep(&t, bytes, wr);
	}
	if (rc == 0) {
		t.write = false;
		t.async = a->async;
		rc = rawbw_sweep(&t, bytes, rd);
	}
	for (uint32_t i = 0; i < a->nr_dirs; i++) {
		if (fds[i] >= 0) {
			close(fds[i]);
		}
	}
	if (rc == 0 &&
	    !(rd->gbps > 0 && wr->gbps > 0 && isfinite(rd->gbps) && isfinite(wr->gbps))) {
		rc = -EIO;
	}
	return rc;
}

int
cmd_profile(int argc, char **argv)
{
	struct profile_args a = {.layer_ns = -1, .mib = 1024};
	struct tutti_profile prof = {.size = sizeof(prof)};
	struct rawbw_point wr, rd;
	int rc;

	rc = parse_args(argc, argv, &a);
	if (rc >= 0) {
		return rc;
	}
	rc = check_paths(&a);
	if (rc != 0) {
		return rc;
	}
	prof.nr_layers = a.geo.nr_layers;
	prof.layer_ns_per_token = calloc(a.geo.nr_layers, sizeof(double));
	if (prof.layer_ns_per_token == NULL) {
		return 1;
	}
	rc = compute_times(&a, &prof);
	if (rc == 0) {
		rc = measure_storage(&a, &wr, &rd);
		if (rc < 0) {
			fprintf(stderr,
			        "tutti profile: measuring the storage failed: %s; %s is left as it "
			        "was\n",
			        strerror(-rc), a.out);
			rc = 1;
		}
	}
	if (rc == 0) {
		prof.read_bytes_per_s = rd.gbps * 1e9;
		prof.write_bytes_per_s = wr.gbps * 1e9;
		rc = tutti_profile_write(a.out, &prof);
		if (rc < 0) {
			fprintf(stderr, "tutti profile: writing %s: %s\n", a.out, strerror(-rc));
			rc = 1;
		}
	}
	if (rc == 0) {
		printf("profile %s: read %.2f GB/s (%u KiB x %u), write %.2f GB/s (%u KiB x %u), "
		       "%u layers\n",
		       a.out, rd.gbps, rd.bs >> 10, rd.qd, wr.gbps, wr.bs >> 10, wr.qd,
		       a.geo.nr_layers);
	}
	free(prof.layer_ns_per_token);
	return rc;
}
