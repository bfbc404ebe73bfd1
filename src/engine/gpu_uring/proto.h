/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The submission and completion protocol of a GPU-driven io_uring, written once for both of its
 * drivers: CUDA device code and the host thread that plays the GPU's role (the twin, which CI
 * tests). Nothing here allocates, blocks or calls the kernel.
 *
 * Memory ordering follows the kernel's rules for a shared ring (io_uring.c, header comment):
 * SQEs are written before the SQ tail is published with a release store; the SQ head is read
 * with an acquire load before a slot is reused; the CQ tail is read with an acquire load before
 * the CQEs behind it, and the CQ head is advanced with a release store after they are read.
 * On the GPU these are system-scope operations (ld.acquire.sys / st.release.sys): the ring is
 * mapped host memory, and a weak load of it may be served stale from L1. The GPU cannot do
 * atomic read-modify-writes on host memory, and needs none: each index has one writer.
 */
#ifndef TT_ENGINE_GPU_URING_PROTO_H
#define TT_ENGINE_GPU_URING_PROTO_H

#include <stdint.h>

#if defined(__CUDACC__)
#define TT_GPU_URING_FN __device__ __forceinline__ static
/* Pure arithmetic that the host side of the driver needs too. */
#define TT_GPU_URING_HD __host__ __device__ __forceinline__ static

TT_GPU_URING_FN uint32_t
tt_ld_acquire(const uint32_t *p)
{
	uint32_t v;

	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

TT_GPU_URING_FN void
tt_st_release(uint32_t *p, uint32_t v)
{
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* A strong (uncached) load of a CQE field. */
TT_GPU_URING_FN uint64_t
tt_ld_relaxed64(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}
#else
#define TT_GPU_URING_FN static inline
#define TT_GPU_URING_HD static inline

TT_GPU_URING_FN uint32_t
tt_ld_acquire(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

TT_GPU_URING_FN void
tt_st_release(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

TT_GPU_URING_FN uint64_t
tt_ld_relaxed64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}
#endif

/* io_uring ABI values used here (linux/io_uring.h), so that device code needs no kernel
 * header. */
#define TT_OP_READV 1
#define TT_OP_WRITEV 2
#define TT_OP_READ_FIXED 4
#define TT_OP_WRITE_FIXED 5
#define TT_OP_READ 22
#define TT_OP_WRITE 23
#define TT_SQE_FIXED_FILE (1u << 0)
#define TT_SQE_ASYNC (1u << 4)
#define TT_SQ_NEED_WAKEUP (1u << 0)
#define TT_SQ_CQ_OVERFLOW (1u << 1)

#define TT_GPU_URING_MAX_FILES 64

/* One I/O of a program, as the driver turns it into an SQE. user_data is its index. */
struct tt_gpu_uring_io {
	uint64_t off;
	uint64_t buf; /* host virtual address (the kernel pins it) */
	uint32_t len;
	uint16_t file; /* index into the ring's files */
	uint8_t write;
	uint8_t pad;
};

/* Everything a driver needs to use a ring: plain data, passed by value to kernels. */
struct tt_gpu_uring_view {
	uint32_t *sq_head; /* written by the kernel */
	uint32_t *sq_tail; /* written by the driver */
	uint32_t *sq_flags;
	uint32_t *cq_head; /* written by the driver */
	uint32_t *cq_tail; /* written by the kernel */
	uint64_t *sqes;    /* sq_entries x 8 words */
	uint64_t *cqes;    /* cq_entries x 2 words: user_data, res | flags << 32 */
	uint32_t sq_mask, sq_entries;
	uint32_t cq_mask, cq_entries;
	uint32_t fixed_files;     /* files registered: an SQE names the file by index */
	uint32_t fixed_buf;       /* [buf_base, buf_base + buf_bytes) is registered buffer 0 */
	uint32_t sqe_flags;       /* reads: IOSQE_ASYNC for page-cache-backed files */
	uint32_t write_sqe_flags; /* writes: the same, where they spread over several files */
	/* Reads are published one SQE at a time, at least this many ns apart (0: in batches).
	 * Punted reads run on io-wq, which wakes one idle worker per enqueue and counts a woken
	 * worker as free until it runs: a batch of reads enqueued at once wakes one or two
	 * workers, which then copy the whole batch alone, while reads enqueued a few
	 * microseconds apart each wake their own (docs/results.md, row I1). */
	uint32_t read_pace_ns;
	uint32_t write_pace_ns; /* the same for punted writes (0: in batches) */
	uint64_t buf_base, buf_bytes;
	int32_t fds[TT_GPU_URING_MAX_FILES];
};

/* SQ slots free for a producer whose own tail is \p tail. */
TT_GPU_URING_FN uint32_t
tt_gpu_uring_sq_space(const struct tt_gpu_uring_view *v, uint32_t tail)
{
	return v->sq_entries - (tail - tt_ld_acquire(v->sq_head));
}

/* Write the SQE for \p io (index \p tag) at the producer's \p tail; not yet visible. */
TT_GPU_URING_FN void
tt_gpu_uring_put(const struct tt_gpu_uring_view *v, uint32_t tail, const struct tt_gpu_uring_io *io,
                 uint64_t tag)
{
	uint64_t *s = v->sqes + (uint64_t)(tail & v->sq_mask) * 8;
	int fixed_buf = v->fixed_buf && io->buf >= v->buf_base &&
	                io->buf + io->len <= v->buf_base + v->buf_bytes;
	uint32_t op = io->write ? (fixed_buf ? TT_OP_WRITE_FIXED : TT_OP_WRITE)
	                        : (fixed_buf ? TT_OP_READ_FIXED : TT_OP_READ);
	/* Writes are punted only where they spread over several files: writes to one
	 * page-cache-backed file serialize on its inode lock, and punted they only make io-wq
	 * workers spin on it, at many times the CPU of writes issued inline for the same
	 * bandwidth; issued inline, writes to many files all run on the one SQ thread's copy. */
	uint32_t flags = (io->write ? v->write_sqe_flags : v->sqe_flags) |
	                 (v->fixed_files ? TT_SQE_FIXED_FILE : 0);
	int32_t fd = v->fixed_files ? (int32_t)io->file : v->fds[io->file];

	s[0] = (uint64_t)op | (uint64_t)flags << 8 | (uint64_t)(uint32_t)fd << 32;
	s[1] = io->off;
	s[2] = io->buf;
	s[3] = io->len; /* rw_flags 0 */
	s[4] = tag;
	s[5] = 0; /* buf_index 0, personality 0, splice_fd_in 0 */
	s[6] = 0;
	s[7] = 0;
}

/* Make every SQE before \p tail visible to the kernel. */
TT_GPU_URING_FN void
tt_gpu_uring_publish(const struct tt_gpu_uring_view *v, uint32_t tail)
{
	tt_st_release(v->sq_tail, tail);
}

/* CQEs ready for a consumer whose own head is \p head. */
TT_GPU_URING_FN uint32_t
tt_gpu_uring_cq_ready(const struct tt_gpu_uring_view *v, uint32_t head)
{
	return tt_ld_acquire(v->cq_tail) - head;
}

/* Read the CQE at \p head (after tt_gpu_uring_cq_ready said it is there). */
TT_GPU_URING_FN void
tt_gpu_uring_cqe(const struct tt_gpu_uring_view *v, uint32_t head, uint64_t *tag, int32_t *res)
{
	const uint64_t *c = v->cqes + (uint64_t)(head & v->cq_mask) * 2;

	*tag = tt_ld_relaxed64(&c[0]);
	*res = (int32_t)(uint32_t)tt_ld_relaxed64(&c[1]);
}

/* Hand CQ slots before \p head back to the kernel. */
TT_GPU_URING_FN void
tt_gpu_uring_cq_release(const struct tt_gpu_uring_view *v, uint32_t head)
{
	tt_st_release(v->cq_head, head);
}

/* ---- loads by the copy engine (option copy=dma) ----
 * SMs read host memory slower than the copy engine moves it (docs/results.md, F3), so a
 * load whose workers read each object out of its bounce slot cannot reach the link's rate. In
 * this mode the I/Os go in groups of consecutive ones. Once every read of a group has completed,
 * the driver marks the group's word "arrived" with a sequence number (the launch's epoch << 32 |
 * group + 1, so that a word only grows from one launch to the next); a copy stream waiting on
 * that word copies the group's slots into device staging in one copy and marks it "copied",
 * which frees the bounce slots; the workers check and scatter each object from device staging,
 * and then free its staging slot. Groups complete in any order. A group's slots are consecutive
 * because the slots are a multiple of the group. */

/* Bytes one copy moves at most. While io-wq's workers keep the CPUs busy, small copies queued
 * ahead crawl and copies of 16 MiB or more run at the link's rate (docs/results.md, F4); our
 * reading, not measured apart, is that the fewer the copies, the less the host's queuing of
 * them competes for a CPU. */
#define TT_GPU_URING_DMA_GROUP_BYTES (16ull << 20)

/* The device staging holds this many times the bounce slots: a bounce slot is free again once
 * its group is copied, a staging slot once its worker has checked and scattered it, so reads
 * keep going into the bounce slots while the workers catch up. */
#define TT_GPU_URING_DMA_STAGING 2u

/* Copy streams a load by the copy engine spreads its groups over, in turn: a group whose last
 * read is late holds back only the groups behind it on its stream. */
#define TT_GPU_URING_DMA_STREAMS 4u

/* The most groups a window of slots holds (one slot a group at least): the words the driver and
 * the copy streams signal through, one per group, reused every window. */
#define TT_GPU_URING_MAX_GROUP_WORDS 4096u

/* Sequence number \p n of launch \p epoch. */
TT_GPU_URING_HD uint64_t
tt_gpu_uring_seq(uint64_t epoch, uint32_t n)
{
	return epoch << 32 | n;
}

/* I/Os per copy for \p slots slots of \p slot_bytes: at most TT_GPU_URING_DMA_GROUP_BYTES
 * (one object at least), at most a quarter of the slots, so that reads go on into three
 * quarters of them while one group waits for its last read, and a divisor of the slots. */
TT_GPU_URING_HD uint32_t
tt_gpu_uring_dma_group(uint32_t slots, uint64_t slot_bytes)
{
	uint64_t g = slot_bytes >= TT_GPU_URING_DMA_GROUP_BYTES
	                 ? 1
	                 : TT_GPU_URING_DMA_GROUP_BYTES / slot_bytes;

	if (g > slots / 4) {
		g = slots / 4;
	}
	if (g < 1) {
		g = 1;
	}
	while (slots % g != 0) {
		g--;
	}
	return (uint32_t)g;
}

/* I/Os in group \p k of \p nr I/Os in groups of \p group: the last one may be short. */
TT_GPU_URING_HD uint32_t
tt_gpu_uring_group_size(uint32_t k, uint32_t group, uint32_t nr)
{
	uint64_t first = (uint64_t)k * group;

	return first >= nr ? 0 : (nr - first < group ? (uint32_t)(nr - first) : group);
}

#endif /* TT_ENGINE_GPU_URING_PROTO_H */
