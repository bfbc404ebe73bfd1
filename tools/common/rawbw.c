/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Raw device bandwidth (rawbw.h): sequential O_DIRECT reads and writes issued with io_uring at
 * a fixed block size and queue depth, and the best of a short sweep of sizes and depths. The
 * benchmark sweeps right next to each timed store and retrieve, over as many bytes of the same
 * device and to or from the same memory, so that the drift of a shared virtual disk affects
 * both sides alike; taking the best point of every sweep makes the limit, if anything, too
 * high. Written against liburing directly so that it shares no code with the store.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rawbw.h"

static const uint32_t sweep_bs[] = {1u << 20, 4u << 20};
static const uint32_t sweep_qd[] = {4, 16, 32};

#define NR_POINTS (sizeof(sweep_bs) / sizeof(sweep_bs[0]) * sizeof(sweep_qd) / sizeof(sweep_qd[0]))

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Queue I/O number \p n of a run. */
static void
prep(struct io_uring *ring, const struct rawbw_target *t, uint8_t *mem, uint64_t mem_bytes,
     uint64_t span, uint64_t start, uint64_t n, uint32_t bs)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	int fd = t->fds[n % t->nr_fds];
	/* span is a whole number of I/Os: an I/O never runs past the region. */
	uint64_t pos = t->off + (start + n / t->nr_fds * bs) % span;
	/* Consecutive I/Os use consecutive memory, as a transfer into paged KV does. */
	uint8_t *b = mem + n * bs % mem_bytes;

	if (t->write) {
		io_uring_prep_write(sqe, fd, b, bs, pos);
	} else {
		io_uring_prep_read(sqe, fd, b, bs, pos);
	}
	if (t->async && !t->write) {
		sqe->flags |= IOSQE_ASYNC;
	}
}

double
rawbw_run(const struct rawbw_target *t, uint64_t start, uint64_t bytes, uint32_t bs, uint32_t qd)
{
	uint64_t span = t->span / bs * bs, total, issued = 0, done = 0, t0, mem_bytes;
	struct io_uring ring;
	uint32_t inflight = 0;
	uint8_t *own = NULL, *mem = t->mem;
	int rc;

	total = bytes / bs * t->nr_fds;
	if (total == 0 || span == 0 || qd == 0 || t->nr_fds == 0) {
		return -EINVAL;
	}
	mem_bytes = t->mem != NULL ? t->mem_bytes / bs * bs : 0;
	if (mem_bytes < (uint64_t)bs * qd) {
		mem_bytes = (uint64_t)bs * qd;
		if (posix_memalign((void **)&own, 4096, mem_bytes) != 0) {
			return -ENOMEM;
		}
		memset(own, 0x5a, mem_bytes);
		mem = own;
	}
	rc = io_uring_queue_init(qd, &ring, 0);
	if (rc < 0) {
		free(own);
		return rc;
	}
	start = start / bs * bs;
	t0 = now_ns();
	while (done < total) {
		struct io_uring_cqe *cqe;

		for (; inflight < qd && issued < total; issued++, inflight++) {
			prep(&ring, t, mem, mem_bytes, span, start, issued, bs);
		}
		rc = io_uring_submit_and_wait(&ring, 1);
		if (rc < 0 && rc != -EINTR) {
			break;
		}
		rc = 0;
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			int res = cqe->res;

			io_uring_cqe_seen(&ring, cqe);
			if (res != (int)bs) {
				rc = res < 0 ? res : -EIO;
				goto out;
			}
			inflight--;
			done++;
		}
	}
out:
	io_uring_queue_exit(&ring);
	free(own);
	if (rc < 0) {
		return rc;
	}
	return (double)(total * bs) / (double)(now_ns() - t0);
}

int
rawbw_sweep(const struct rawbw_target *t, uint64_t bytes, struct rawbw_point *best)
{
	uint64_t share = bytes / NR_POINTS, start = 0;

	memset(best, 0, sizeof(*best));
	/* The points share the bytes of the round they stand beside. */
	for (size_t i = 0; i < sizeof(sweep_bs) / sizeof(sweep_bs[0]); i++) {
		for (size_t j = 0; j < sizeof(sweep_qd) / sizeof(sweep_qd[0]); j++) {
			double gbps;

			/* Workloads smaller than a point's I/O size leave that point out. */
			if (share < sweep_bs[i] || t->span < sweep_bs[i]) {
				continue;
			}
			gbps = rawbw_run(t, start, share, sweep_bs[i], sweep_qd[j]);
			if (gbps < 0) {
				return (int)gbps;
			}
			/* Each point moves on to bytes the previous one did not touch. */
			start = (start + share) % t->span;
			if (gbps > best->gbps) {
				best->gbps = gbps;
				best->bs = sweep_bs[i];
				best->qd = sweep_qd[j];
			}
		}
	}
	return 0;
}

int
rawbw_open_store_files(struct tutti_store *st, int *fds, uint32_t *dirs, uint32_t max, uint32_t *nr,
                       uint64_t *off, uint64_t *span)
{
	for (uint32_t i = 0;; i++) {
		struct tutti_store_file f = {.size = sizeof(f)};
		char path[4200];
		int fd, rc = tutti_store_file(st, i, &f, path, sizeof(path));

		if (rc == -ENOENT) {
			return 0;
		}
		if (rc < 0) {
			return rc;
		}
		if (i > 0 && f.slots_off != *off) {
			return -EPROTO;
		}
		*off = f.slots_off;
		if (*nr == max) {
			return -E2BIG;
		}
		/* One of the store's own files, opened and checked by it. */
		fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
		if (fd < 0) {
			return -errno;
		}
		if (dirs != NULL) {
			dirs[*nr] = f.dir;
		}
		fds[(*nr)++] = fd;
		*span = f.slots_bytes < *span ? f.slots_bytes : *span;
	}
}

void
rawbw_remove_store(const char *dir)
{
	char name[32], path[4200];

	for (uint32_t k = 0; tutti_store_file_name(k, name, sizeof(name)) > 0; k++) {
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		unlink(path);
	}
	rmdir(dir);
}
