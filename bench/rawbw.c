/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Raw device bandwidth: sequential O_DIRECT reads and writes of a temporary file, issued with
 * io_uring at a fixed queue depth, for a short sweep of block sizes and depths. The best point
 * is the physical limit the store is measured against. Written against liburing directly so that
 * it shares no code with the store.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvbench.h"

static const uint32_t sweep_bs[] = {256u << 10, 1u << 20, 4u << 20};
static const uint32_t sweep_qd[] = {4, 16, 32};

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Move \p bytes sequentially in \p bs pieces with \p qd in flight; return GB/s or -errno. */
static double
run_point(int fd, uint8_t *buf, uint64_t bytes, uint32_t bs, uint32_t qd, bool write)
{
	struct io_uring ring;
	uint64_t next = 0, done = 0, t0;
	uint32_t inflight = 0;
	int rc = io_uring_queue_init(qd, &ring, 0);

	if (rc < 0) {
		return rc;
	}
	t0 = now_ns();
	while (done < bytes) {
		struct io_uring_cqe *cqe;

		while (inflight < qd && next < bytes) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			/* Each in-flight I/O has its own part of the buffer. */
			uint8_t *b = buf + (uint64_t)(next / bs % qd) * bs;

			if (write) {
				io_uring_prep_write(sqe, fd, b, bs, next);
			} else {
				io_uring_prep_read(sqe, fd, b, bs, next);
			}
			next += bs;
			inflight++;
		}
		rc = io_uring_submit_and_wait(&ring, 1);
		if (rc < 0 && rc != -EINTR) {
			break;
		}
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			if (cqe->res != (int)bs) {
				rc = cqe->res < 0 ? cqe->res : -EIO;
				io_uring_cqe_seen(&ring, cqe);
				goto out;
			}
			io_uring_cqe_seen(&ring, cqe);
			inflight--;
			done += bs;
		}
		rc = 0;
	}
out:
	io_uring_queue_exit(&ring);
	if (rc < 0) {
		return rc;
	}
	return (double)bytes / (double)(now_ns() - t0);
}

int
rawbw_measure(const char *dir, uint64_t bytes, struct rawbw_result *out)
{
	uint32_t max_bs = 4u << 20, max_qd = 32;
	uint8_t *buf = NULL;
	int fd, rc = 0;

	memset(out, 0, sizeof(*out));
	bytes = bytes / max_bs * max_bs;
	if (bytes == 0) {
		return -EINVAL;
	}
	fd = open(dir, O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		return -errno;
	}
	if (fallocate(fd, 0, 0, (off_t)bytes) != 0) {
		rc = -errno;
		goto out;
	}
	if (posix_memalign((void **)&buf, 4096, (size_t)max_bs * max_qd) != 0) {
		rc = -ENOMEM;
		goto out;
	}
	memset(buf, 0x5a, (size_t)max_bs * max_qd);
	/* Writes first: they also give the reads real data to fetch. */
	for (int w = 1; w >= 0; w--) {
		for (size_t i = 0; i < sizeof(sweep_bs) / sizeof(sweep_bs[0]); i++) {
			for (size_t j = 0; j < sizeof(sweep_qd) / sizeof(sweep_qd[0]); j++) {
				double gbps = run_point(fd, buf, bytes, sweep_bs[i], sweep_qd[j], w);

				if (gbps < 0) {
					rc = (int)gbps;
					goto out;
				}
				if (w && gbps > out->write_gbps) {
					out->write_gbps = gbps;
					out->write_bs = sweep_bs[i];
					out->write_qd = sweep_qd[j];
				} else if (!w && gbps > out->read_gbps) {
					out->read_gbps = gbps;
					out->read_bs = sweep_bs[i];
					out->read_qd = sweep_qd[j];
				}
			}
		}
	}
out:
	free(buf);
	close(fd);
	return rc;
}
