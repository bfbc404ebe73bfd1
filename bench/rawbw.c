/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Raw device bandwidth: sequential O_DIRECT reads and writes issued with io_uring at a fixed
 * block size and queue depth, and the best of a short sweep of sizes and depths. The benchmark
 * sweeps right next to each timed store and retrieve, over as many bytes, so that the drift of a
 * shared virtual disk affects both sides alike; taking the best point of every sweep makes the
 * limit, if anything, too high. Written against liburing directly so that it shares no code
 * with the store.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvbench.h"

static const uint32_t sweep_bs[] = {1u << 20, 4u << 20};
static const uint32_t sweep_qd[] = {4, 16, 32};

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Move \p bytes sequentially in each of \p nr_fds files, from \p start within the region of
 * \p span bytes at \p off, wrapping around at its end, \p bs at a time with \p qd in flight over
 * all files (I/Os alternate between the files); return GB/s or -errno. */
double
rawbw_run(const int *fds, uint32_t nr_fds, uint64_t off, uint64_t span, uint64_t start,
          uint64_t bytes, uint32_t bs, uint32_t qd, bool write)
{
	struct io_uring ring;
	uint64_t issued = 0, done = 0, total, t0;
	uint32_t inflight = 0;
	uint8_t *buf = NULL;
	int rc;

	bytes = bytes / bs * bs;
	span = span / bs * bs;
	start = start / bs * bs;
	total = bytes * nr_fds;
	if (total == 0 || span == 0 || qd == 0) {
		return -EINVAL;
	}
	if (posix_memalign((void **)&buf, 4096, (size_t)bs * qd) != 0) {
		return -ENOMEM;
	}
	memset(buf, 0x5a, (size_t)bs * qd);
	rc = io_uring_queue_init(qd, &ring, 0);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	t0 = now_ns();
	while (done < total) {
		struct io_uring_cqe *cqe;

		while (inflight < qd && issued < total) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			uint64_t n = issued / bs;
			int fd = fds[n % nr_fds];
			uint64_t pos = off + (start + n / nr_fds * bs) % span;
			/* Each in-flight I/O has its own part of the buffer. */
			uint8_t *b = buf + (uint64_t)(n % qd) * bs;

			if (write) {
				io_uring_prep_write(sqe, fd, b, bs, pos);
			} else {
				io_uring_prep_read(sqe, fd, b, bs, pos);
			}
			issued += bs;
			inflight++;
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
			done += bs;
		}
	}
out:
	io_uring_queue_exit(&ring);
	free(buf);
	if (rc < 0) {
		return rc;
	}
	return (double)total / (double)(now_ns() - t0);
}

int
rawbw_sweep(const int *fds, uint32_t nr_fds, uint64_t off, uint64_t span, uint64_t bytes,
            bool write, struct rawbw_point *best)
{
	uint32_t nr_points = 0;
	uint64_t start = 0;

	memset(best, 0, sizeof(*best));
	for (size_t i = 0; i < sizeof(sweep_bs) / sizeof(sweep_bs[0]); i++) {
		for (size_t j = 0; j < sizeof(sweep_qd) / sizeof(sweep_qd[0]); j++) {
			nr_points++;
		}
	}
	/* The points share the bytes of the round they stand beside. */
	for (size_t i = 0; i < sizeof(sweep_bs) / sizeof(sweep_bs[0]); i++) {
		for (size_t j = 0; j < sizeof(sweep_qd) / sizeof(sweep_qd[0]); j++) {
			double gbps;

			/* Workloads smaller than a point's I/O size leave that point out. */
			if (bytes / nr_points < sweep_bs[i] || span < sweep_bs[i]) {
				continue;
			}
			gbps = rawbw_run(fds, nr_fds, off, span, start, bytes / nr_points,
			                 sweep_bs[i], sweep_qd[j], write);

			/* Each point moves on to bytes the previous one did not touch. */
			start = (start + bytes / nr_points) / (4u << 20) * (4u << 20) % span;

			if (gbps < 0) {
				return (int)gbps;
			}
			if (gbps > best->gbps) {
				best->gbps = gbps;
				best->bs = sweep_bs[i];
				best->qd = sweep_qd[j];
			}
		}
	}
	return 0;
}
