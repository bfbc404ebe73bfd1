/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Page-granular baseline: what CPU-driven KV tiers do. Every paged block of every layer is its
 * own I/O (one preadv/pwritev whose iovecs are the block's segments), issued by a pool of
 * threads that each take the next page. Pages are issued in file order, the order most
 * favourable to the baseline.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kvbench.h"

struct pagebase {
	int fd;
	const struct page_io *pages;
	uint64_t nr_pages;
	const struct iovec *iovs;
	bool write;
	uint64_t next; /* next page to take; atomic */
	int error;     /* first error; atomic */
};

static int
move_page(const struct pagebase *pb, const struct page_io *p)
{
	struct iovec iov[16];
	uint32_t nr = p->nr_iov;
	uint64_t off = p->off;

	if (nr > 16) {
		return -EINVAL;
	}
	for (uint32_t i = 0; i < nr; i++) {
		iov[i] = pb->iovs[p->first_iov + i];
	}
	while (nr > 0) {
		ssize_t n = pb->write ? pwritev(pb->fd, iov, (int)nr, (off_t)off)
		                      : preadv(pb->fd, iov, (int)nr, (off_t)off);
		uint32_t k = 0;

		if (n < 0 && errno == EINTR) {
			continue;
		}
		if (n <= 0) {
			return n < 0 ? -errno : -EIO;
		}
		off += (uint64_t)n;
		/* Drop what was transferred: whole iovecs, then a partial one. */
		while (k < nr && (size_t)n >= iov[k].iov_len) {
			n -= (ssize_t)iov[k].iov_len;
			k++;
		}
		if (k < nr) {
			iov[k].iov_base = (uint8_t *)iov[k].iov_base + n;
			iov[k].iov_len -= (size_t)n;
		}
		for (uint32_t i = k; i < nr; i++) {
			iov[i - k] = iov[i];
		}
		nr -= k;
	}
	return 0;
}

static void *
worker(void *arg)
{
	struct pagebase *pb = arg;

	for (;;) {
		uint64_t i = __atomic_fetch_add(&pb->next, 1, __ATOMIC_RELAXED);
		int rc;

		if (i >= pb->nr_pages || __atomic_load_n(&pb->error, __ATOMIC_RELAXED) != 0) {
			return NULL;
		}
		rc = move_page(pb, &pb->pages[i]);
		if (rc < 0) {
			int zero = 0;

			__atomic_compare_exchange_n(&pb->error, &zero, rc, false, __ATOMIC_RELAXED,
			                            __ATOMIC_RELAXED);
		}
	}
}

int64_t
pagebase_run(int fd, const struct page_io *pages, uint64_t nr_pages, const struct iovec *iovs,
             bool write, uint32_t threads)
{
	struct pagebase pb = {
	    .fd = fd, .pages = pages, .nr_pages = nr_pages, .iovs = iovs, .write = write};
	pthread_t *tids = calloc(threads, sizeof(*tids));
	struct timespec a, b;
	uint32_t started = 0;

	if (tids == NULL || threads == 0) {
		free(tids);
		return -EINVAL;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (; started < threads; started++) {
		if (pthread_create(&tids[started], NULL, worker, &pb) != 0) {
			pb.error = -EAGAIN;
			break;
		}
	}
	for (uint32_t i = 0; i < started; i++) {
		pthread_join(tids[i], NULL);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	free(tids);
	if (pb.error != 0) {
		return pb.error;
	}
	return (int64_t)(b.tv_sec - a.tv_sec) * 1000000000ll + (b.tv_nsec - a.tv_nsec);
}
