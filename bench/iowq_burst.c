/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti-iowq-burst: how fast an SQPOLL io_uring reads a page-cache-backed file (tmpfs: the
 * emulated NVMe of the benchmarks) with IOSQE_ASYNC, by how the reads are submitted. Such reads
 * are copies run by io-wq workers, and io-wq wakes one idle worker per enqueued read but counts
 * a woken worker as free until it runs: reads enqueued in one batch wake one or two workers,
 * which then copy the whole batch alone. This is why the gpu-uring engine publishes reads of
 * tmpfs files a few microseconds apart (src/engine/gpu_uring/proto.h).
 *
 * Each layer is L object reads of 1 MiB, at most W in flight (read i reuses the buffer of read
 * i - W); with L <= W a layer is one batch. The reads are published in batches (gap 0) or one at
 * a time, G microseconds apart. It prints one JSON line per configuration: the median of the
 * rounds' bandwidths and the io-wq workers alive at the end. Written against liburing directly
 * so that it shares no code with the store.
 *
 * Usage: tutti-iowq-burst --dir DIR [--layer-objects 64,120] [--windows 64,128]
 *            [--gaps-us 0,2,5,20] [--layers 32] [--rounds 3]
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "benchutil.h"

#define OBJ_BYTES (1u << 20)
#define MAX_LIST 16
#define MAX_ROUNDS BU_MAX_VALUES

struct list {
	uint32_t v[MAX_LIST];
	uint32_t n;
};

struct conf {
	const char *dir;
	struct list objects, windows, gaps;
	uint32_t layers, rounds;
};

static void
usage(void)
{
	fprintf(stderr, "usage: tutti-iowq-burst --dir DIR [--layer-objects 64,120] "
	                "[--windows 64,128] [--gaps-us 0,2,5,20] [--layers 32] [--rounds 3]\n");
	exit(2);
}

/* A count of the command line (of \p opt), \p min..2^20. */
static uint32_t
number(const char *opt, const char *s, uint32_t min)
{
	return (uint32_t)bu_number("tutti-iowq-burst", opt, s, min, 1u << 20);
}

static void
parse_list(const char *opt, const char *s, uint32_t min, struct list *l)
{
	char buf[256], *save = NULL;

	if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf)) {
		usage();
	}
	l->n = 0;
	for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		if (l->n == MAX_LIST) {
			usage();
		}
		l->v[l->n++] = number(opt, t, min);
	}
	if (l->n == 0) {
		usage();
	}
}

static void
parse(int argc, char **argv, struct conf *c)
{
	*c = (struct conf){
	    .objects = {{64, 120}, 2},
	    .windows = {{64, 128}, 2},
	    .gaps = {{0, 2, 5, 20}, 4},
	    .layers = 32,
	    .rounds = 3,
	};
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *a = argv[i], *v = argv[i + 1];

		if (strcmp(a, "--dir") == 0) {
			c->dir = v;
		} else if (strcmp(a, "--layer-objects") == 0) {
			parse_list(a, v, 1, &c->objects);
		} else if (strcmp(a, "--windows") == 0) {
			parse_list(a, v, 1, &c->windows);
		} else if (strcmp(a, "--gaps-us") == 0) {
			parse_list(a, v, 0, &c->gaps);
		} else if (strcmp(a, "--layers") == 0) {
			c->layers = number(a, v, 1);
		} else if (strcmp(a, "--rounds") == 0) {
			c->rounds = number(a, v, 1);
		} else {
			usage();
		}
	}
	if (argc % 2 == 0 || c->dir == NULL || c->layers == 0 || c->rounds == 0 ||
	    c->rounds > MAX_ROUNDS) {
		usage();
	}
	for (uint32_t i = 0; i < c->windows.n; i++) {
		if (c->windows.v[i] == 0 || c->windows.v[i] > 1024) {
			usage();
		}
	}
}

/* io-wq workers of this process (threads named iou-wrk-N). */
static int
iowq_workers(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (d == NULL) {
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		char path[64], name[32] = "";
		FILE *f;

		if (e->d_name[0] == '.' ||
		    snprintf(path, sizeof(path), "/proc/self/task/%.16s/comm", e->d_name) >=
		        (int)sizeof(path)) {
			continue;
		}
		f = fopen(path, "r");
		if (f != NULL) {
			n += fgets(name, sizeof(name), f) != NULL &&
			     strncmp(name, "iou-wrk", 7) == 0;
			fclose(f);
		}
	}
	closedir(d);
	return n;
}

/* One pass over every layer; returns bytes per second, or a negative errno. */
static double
read_layers(struct io_uring *ring, uint8_t *buf, uint32_t objects, uint32_t window, uint32_t layers,
            uint64_t gap_ns)
{
	uint64_t t0 = bu_now_ns(), bytes = 0;

	for (uint32_t l = 0; l < layers; l++) {
		uint32_t next = 0, done = 0, in_flight = 0;

		while (done < objects) {
			while (next < objects && in_flight < window) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
				uint64_t off = ((uint64_t)l * objects + next) * OBJ_BYTES;

				if (sqe == NULL) {
					break; /* the SQ is full: reap first */
				}
				io_uring_prep_read_fixed(
				    sqe, 0, buf + (uint64_t)(next % window) * OBJ_BYTES, OBJ_BYTES,
				    off, 0);
				sqe->flags |= IOSQE_FIXED_FILE | IOSQE_ASYNC;
				next++;
				in_flight++;
				if (gap_ns != 0) {
					uint64_t at = bu_now_ns();

					io_uring_submit(ring);
					while (bu_now_ns() - at < gap_ns) {
					}
				}
			}
			io_uring_submit(ring);
			for (;;) {
				struct io_uring_cqe *cqe;
				int rc = io_uring_peek_cqe(ring, &cqe);

				if (rc != 0) {
					break;
				}
				if (cqe->res != (int)OBJ_BYTES) {
					fprintf(stderr, "tutti-iowq-burst: read returned %d\n",
					        cqe->res);
					return cqe->res < 0 ? cqe->res : -EIO;
				}
				io_uring_cqe_seen(ring, cqe);
				bytes += OBJ_BYTES;
				done++;
				in_flight--;
			}
		}
	}
	return (double)bytes / ((double)(bu_now_ns() - t0) / 1e9);
}

static int
run(const struct conf *c, int fd, uint32_t objects, uint32_t window, uint32_t gap_us)
{
	struct io_uring_params p = {.flags = IORING_SETUP_SQPOLL, .sq_thread_idle = 100};
	struct io_uring ring;
	size_t buf_bytes = (size_t)window * OBJ_BYTES;
	uint8_t *buf = mmap(NULL, buf_bytes, PROT_READ | PROT_WRITE,
	                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	struct iovec iov = {buf, buf_bytes};
	double gbps[MAX_ROUNDS];
	int rc;

	if (buf == MAP_FAILED) {
		return -errno;
	}
	rc = io_uring_queue_init_params(window < 64 ? 64 : window, &ring, &p);
	if (rc < 0) {
		fprintf(stderr, "tutti-iowq-burst: io_uring with SQPOLL: %s\n", strerror(-rc));
		munmap(buf, buf_bytes);
		return rc;
	}
	rc = io_uring_register_files(&ring, &fd, 1);
	if (rc == 0) {
		rc = io_uring_register_buffers(&ring, &iov, 1);
	}
	for (uint32_t r = 0; rc == 0 && r < c->rounds; r++) {
		double v = read_layers(&ring, buf, objects, window, c->layers, gap_us * 1000ull);

		if (v < 0) {
			rc = (int)v;
		}
		gbps[r] = v / 1e9;
	}
	if (rc == 0) {
		double lo = gbps[0], hi = gbps[0];

		for (uint32_t r = 1; r < c->rounds; r++) {
			lo = gbps[r] < lo ? gbps[r] : lo;
			hi = gbps[r] > hi ? gbps[r] : hi;
		}
		printf(
		    "{\"layer_objects\": %u, \"window\": %u, \"gap_us\": %u, \"layers\": %u, "
		    "\"rounds\": %u, \"read_gbps\": %.2f, \"min_gbps\": %.2f, \"max_gbps\": %.2f, "
		    "\"iowq_workers\": %d}\n",
		    objects, window, gap_us, c->layers, c->rounds, bu_median(gbps, c->rounds), lo,
		    hi, iowq_workers());
		fflush(stdout);
	} else {
		fprintf(stderr, "tutti-iowq-burst: %s\n", strerror(-rc));
	}
	io_uring_queue_exit(&ring);
	munmap(buf, buf_bytes);
	return rc;
}

int
main(int argc, char **argv)
{
	struct conf c;
	uint32_t most = 0;
	char path[4096];
	uint8_t *fill;
	int fd, rc = 0;

	parse(argc, argv, &c);
	for (uint32_t i = 0; i < c.objects.n; i++) {
		most = c.objects.v[i] > most ? c.objects.v[i] : most;
	}
	if (snprintf(path, sizeof(path), "%s/iowq-burst.data", c.dir) >= (int)sizeof(path)) {
		usage();
	}
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	fill = malloc(OBJ_BYTES);
	if (fd < 0 || fill == NULL) {
		fprintf(stderr, "tutti-iowq-burst: %s: %s\n", path, strerror(errno));
		return 1;
	}
	memset(fill, 0x5a, OBJ_BYTES);
	for (uint64_t o = 0; o < (uint64_t)most * c.layers; o++) {
		if (pwrite(fd, fill, OBJ_BYTES, (off_t)(o * OBJ_BYTES)) != (ssize_t)OBJ_BYTES) {
			fprintf(stderr, "tutti-iowq-burst: writing %s: %s\n", path,
			        strerror(errno));
			rc = 1;
			break;
		}
	}
	free(fill);
	for (uint32_t i = 0; rc == 0 && i < c.objects.n; i++) {
		for (uint32_t w = 0; rc == 0 && w < c.windows.n; w++) {
			for (uint32_t g = 0; rc == 0 && g < c.gaps.n; g++) {
				rc = run(&c, fd, c.objects.v[i], c.windows.v[w], c.gaps.v[g]) < 0;
			}
		}
	}
	close(fd);
	unlink(path);
	return rc;
}
