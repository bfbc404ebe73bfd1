/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `tutti ceiling`: the machine's limit under a directory (tools/common/ceiling.h), the one every
 * benchmark divides by, as a table or one JSON object; scripts (the layerwise benchmark) read
 * the JSON.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "admin.h"
#include "ceiling.h"
#include "cliarg.h"

#define PROG "tutti ceiling"
#define MAX_BUDGET_S 3600.0
#define MAX_FILE_MIB (1u << 20)
#define MAX_MEM_MIB (1u << 20)
#define MAX_SPACE_MIB (1ull << 30)
#define MAX_GPU 1024u

static void
ceiling_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tutti ceiling --dir DIR [--dir DIR]... [--budget-s X] [--gpu N] [--json]\n"
	    "                     [--file-mib N] [--max-threads N] [--max-files N] "
	    "[--mem-mib N]\n"
	    "                     [--space-mib N] [--through-host]\n"
	    "                     [--reads-only | --writes-only]\n"
	    "  The best O_DIRECT read and write bandwidth of the storage under DIR, from a sweep\n"
	    "  over threads x I/O size x files x I/Os in flight per thread (scratch files,\n"
	    "  removed), and with --gpu the pinned host<->device copies of GPU N: the limit\n"
	    "  every benchmark divides by. With --gpu on tmpfs each direction is searched a\n"
	    "  second time with every thread reusing only its I/Os' buffers (staged), as an\n"
	    "  engine staging KV for the GPU does; the GPU limit takes the better phase. A\n"
	    "  third phase (through) runs the I/O with every buffer copied on to the GPU (reads)\n"
	    "  or from it (writes) at once: the best found of storage and PCIe together, reported\n"
	    "  beside the limit.\n"
	    "  --budget-s X    seconds for the read and write sweeps together, 0.1..3600 "
	    "(default 8)\n"
	    "  --file-mib N    region of each scratch file, 16..1048576, cut to a quarter of\n"
	    "                  the free space (default 128, and on tmpfs at least 4x the\n"
	    "                  CPU's largest cache, so that no read comes from that cache)\n"
	    "  --max-threads N 1..%u (default twice the online CPUs)\n"
	    "  --max-files N   1..%u (default 16)\n"
	    "  --mem-mib N     host memory the I/O cycles through, 16..1048576 (default 1024)\n"
	    "  --space-mib N   scratch space per directory at most, 1..1073741824 (default a\n"
	    "                  quarter of the free space); fewer files are swept where the\n"
	    "                  most do not fit\n"
	    "  --through-host  run the through phase on any storage, copying into host memory\n"
	    "                  instead of the GPU (the host-KV path's composed limit)\n",
	    CEILING_MAX_THREADS, CEILING_MAX_FILES);
}

int
cmd_ceiling(int argc, char **argv)
{
	static const struct option options[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"budget-s", required_argument, NULL, 'b'},
	    {"file-mib", required_argument, NULL, 'f'},
	    {"max-threads", required_argument, NULL, 't'},
	    {"max-files", required_argument, NULL, 'n'},
	    {"mem-mib", required_argument, NULL, 'm'},
	    {"space-mib", required_argument, NULL, 's'},
	    {"gpu", required_argument, NULL, 'g'},
	    {"reads-only", no_argument, NULL, 'r'},
	    {"writes-only", no_argument, NULL, 'w'},
	    {"json", no_argument, NULL, 'j'},
	    {"through-host", no_argument, NULL, 'H'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct ceiling_conf c;
	struct ceiling_result r;
	uint32_t nr_dirs = 0, u;
	uint64_t n;
	bool json = false;
	int opt, rc = 0;

	ceiling_conf_init(&c, NULL, 0);
	optind = 1;
	while (rc == 0 && (opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'd':
			if (nr_dirs == CEILING_MAX_DIRS) {
				fprintf(stderr, PROG ": at most %u directories\n",
				        CEILING_MAX_DIRS);
				return 2;
			}
			c.dirs[nr_dirs++] = optarg;
			break;
		case 'b':
			rc = cliarg_double(PROG, "--budget-s", optarg, 0.1, MAX_BUDGET_S,
			                   &c.budget_s);
			break;
		case 'f':
			rc = cliarg_u64(PROG, "--file-mib", optarg, 16, MAX_FILE_MIB, &n);
			c.file_bytes = n << 20;
			c.exact_file_bytes = true;
			break;
		case 't':
			rc = cliarg_u32(PROG, "--max-threads", optarg, 1, CEILING_MAX_THREADS,
			                &c.max_threads);
			break;
		case 'n':
			rc = cliarg_u32(PROG, "--max-files", optarg, 1, CEILING_MAX_FILES,
			                &c.max_files);
			break;
		case 'm':
			rc = cliarg_u64(PROG, "--mem-mib", optarg, 16, MAX_MEM_MIB, &n);
			c.mem_bytes = n << 20;
			break;
		case 's':
			rc = cliarg_u64(PROG, "--space-mib", optarg, 1, MAX_SPACE_MIB, &n);
			c.space_bytes = n << 20;
			break;
		case 'g':
			rc = cliarg_u32(PROG, "--gpu", optarg, 0, MAX_GPU, &u);
			c.gpu = (int)u;
			break;
		case 'r':
			c.skip_writes = true;
			break;
		case 'w':
			c.skip_reads = true;
			break;
		case 'j':
			json = true;
			break;
		case 'H':
			c.through_host = true;
			break;
		case 'h':
			ceiling_usage(stdout);
			return 0;
		default:
			ceiling_usage(stderr);
			return 2;
		}
	}
	if (rc != 0) {
		return 2;
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument %s\n", argv[optind]);
		return 2;
	}
	if (nr_dirs == 0 || (c.skip_reads && c.skip_writes)) {
		fprintf(stderr, PROG ": %s\n",
		        nr_dirs == 0 ? "--dir is required"
		                     : "--reads-only or --writes-only, not both");
		ceiling_usage(stderr);
		return 2;
	}
	c.nr_dirs = nr_dirs;
	if (ceiling_measure(&c, &r) < 0) {
		return 1;
	}
	if (json) {
		ceiling_json(stdout, &r);
		printf("\n");
	} else {
		printf("%s (%s), %.1f s:\n", c.dirs[0], r.emulated ? "tmpfs: emulated" : "disk",
		       r.seconds);
		ceiling_print(stdout, "  ", &r);
	}
	return 0;
}
