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
open_scratch(char **dirs, uint32_t n, uint64_t bytes, int *fds)
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

int
cmd_profile(int argc, char **argv)
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
	char *dirs[MAX_DIRS], out_default[PATH_MAX];
	const char *out = NULL, *model = "llama-3-8b";
	double layer_ns = -1;
	uint64_t mib = 1024;
	struct tutti_geometry geo;
	struct rawbw_point wr, rd;
	struct rawbw_target t = {0};
	struct tutti_profile prof = {.size = sizeof(prof)};
	int fds[MAX_DIRS], opt, rc;
	uint32_t nr_dirs = 0;
	uint64_t bytes;
	bool async = false;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'd':
			if (nr_dirs == MAX_DIRS) {
				fprintf(stderr, "tutti profile: at most %d directories\n",
				        MAX_DIRS);
				return 2;
			}
			dirs[nr_dirs++] = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'm':
			model = optarg;
			break;
		case 'b':
			if (cliarg_u64("tutti profile", "--mib", optarg, MIN_MIB, MAX_MIB, &mib) <
			    0) {
				return 2;
			}
			break;
		case 'l':
			if (cliarg_double("tutti profile", "--layer-ns-per-token", optarg, 0,
			                  MAX_LAYER_NS_PER_TOKEN, &layer_ns) < 0) {
				return 2;
			}
			break;
		case 'a':
			async = true;
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
	if (tutti_geometry_preset(model, &geo) < 0) {
		fprintf(stderr, "tutti profile: unknown model %s\n", model);
		return 2;
	}
	if (nr_dirs == 0) {
		dirs[nr_dirs++] = "tutti-store";
	}
	/* What the paths are, before anything is read or measured: a directory that is not one
	 * would otherwise be reported as a profile that does not parse, and a FIFO as the profile
	 * would block its read (issue 48). A missing directory is reported by the measurement. */
	for (uint32_t i = 0; i < nr_dirs; i++) {
		if (cliarg_path("tutti profile", "--dir", dirs[i], true) < 0) {
			return 2;
		}
	}
	if (out == NULL) {
		int len = snprintf(out_default, sizeof(out_default), "%s/tutti.profile", dirs[0]);

		if (len < 0 || len >= (int)sizeof(out_default)) {
			fprintf(stderr, "tutti profile: directory name too long: %s\n", dirs[0]);
			return 2;
		}
		if (cliarg_path("tutti profile", NULL, out_default, false) < 0) {
			return 2;
		}
		out = out_default;
	} else if (cliarg_path("tutti profile", "--out", out, false) < 0) {
		return 2;
	}
	prof.nr_layers = geo.nr_layers;
	prof.layer_ns_per_token = calloc(geo.nr_layers, sizeof(double));
	if (prof.layer_ns_per_token == NULL) {
		return 1;
	}
	if (layer_ns < 0) {
		/* Keep the compute part of an existing profile: re-profiling storage is routine. */
		struct tutti_profile old = prof;

		rc = tutti_profile_read(out, &old);
		if (rc == -EBADMSG) {
			fprintf(stderr,
			        "tutti profile: %s exists but is not a profile for %u layers\n",
			        out, geo.nr_layers);
		} else if (rc == -EINVAL) {
			fprintf(stderr, "tutti profile: %s is not a regular file\n", out);
		} else if (rc < 0 && rc != -ENOENT) {
			fprintf(stderr, "tutti profile: reading %s: %s\n", out, strerror(-rc));
		}
		if (rc < 0 && rc != -ENOENT) {
			free(prof.layer_ns_per_token);
			return rc == -EINVAL ? 2 : 1;
		}
	} else {
		for (uint32_t l = 0; l < geo.nr_layers; l++) {
			prof.layer_ns_per_token[l] = layer_ns;
		}
	}

	bytes = mib << 20;
	for (uint32_t i = 0; i < nr_dirs; i++) {
		fds[i] = -1;
	}
	rc = open_scratch(dirs, nr_dirs, bytes, fds);
	if (rc == 0) {
		t.fds = fds;
		t.nr_fds = nr_dirs;
		t.span = bytes;
		t.write = true;
		rc = rawbw_sweep(&t, bytes, &wr);
	}
	if (rc == 0) {
		t.write = false;
		t.async = async;
		rc = rawbw_sweep(&t, bytes, &rd);
	}
	for (uint32_t i = 0; i < nr_dirs; i++) {
		if (fds[i] >= 0) {
			close(fds[i]);
		}
	}
	if (rc == 0 && !(rd.gbps > 0 && wr.gbps > 0 && isfinite(rd.gbps) && isfinite(wr.gbps))) {
		rc = -EIO; /* no point of the sweep ran: there is no figure to plan with */
	}
	if (rc < 0) {
		fprintf(stderr,
		        "tutti profile: measuring the storage failed: %s; %s is left as it was\n",
		        strerror(-rc), out);
		free(prof.layer_ns_per_token);
		return 1;
	}
	prof.read_bytes_per_s = rd.gbps * 1e9;
	prof.write_bytes_per_s = wr.gbps * 1e9;
	rc = tutti_profile_write(out, &prof);
	if (rc < 0) {
		fprintf(stderr, "tutti profile: writing %s: %s\n", out, strerror(-rc));
		free(prof.layer_ns_per_token);
		return 1;
	}
	printf("profile %s: read %.2f GB/s (%u KiB x %u), write %.2f GB/s (%u KiB x %u), "
	       "%u layers\n",
	       out, rd.gbps, rd.bs >> 10, rd.qd, wr.gbps, wr.bs >> 10, wr.qd, geo.nr_layers);
	free(prof.layer_ns_per_token);
	return 0;
}
