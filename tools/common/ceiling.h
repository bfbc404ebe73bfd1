/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The machine's limit, one definition for every benchmark: what the storage under a directory
 * gives at best, found by a sweep over threads x I/O size x files x I/Os in flight per thread
 * of O_DIRECT reads and writes (one synchronous I/O at a time, or an io_uring of the thread's
 * own; the files dealt round-robin), and, for KV in GPU memory, the pinned host <-> device copy
 * measured in the same run. A row's ratio is its GB/s over the limit of its direction: host KV
 * reads over the read ceiling, SSD -> HBM over min(read ceiling, pinned host-to-device), and the
 * same for writes.
 *
 * Where a row's bytes land decides which reads bound it. KV in host memory is written where it
 * lies, memory as large as the KV, so its limit is the sweep over I/O that cycles through
 * mem_bytes. KV in GPU memory passes through host buffers the engine chooses, a few MiB per
 * thread that the CPU's cache may hold: on tmpfs, where every byte moved is a CPU copy, a copy
 * into such a buffer skips the write to DRAM, and engines staging through 256 MiB read 45-47
 * GB/s where the sweep through 1 GiB found 40.7 (docs/results.md, C5). So when the GPU limit is
 * asked for on tmpfs the search runs a second phase, "staged", whose threads each reuse just
 * the buffers their I/Os in flight need, and the GPU limit takes the better of the two.
 *
 * Neither phase moves a byte past the host, while a load into GPU memory must: on tmpfs the
 * CPU's copy out of the page cache and the DMA across PCIe then share the host's memory. So
 * where the GPU limit is asked for on tmpfs a third phase, "through", runs the same I/O with
 * each buffer's bytes crossing to the GPU (a read's after it lands, a write's before it goes)
 * while the thread's other I/Os run, each thread with a stream of its own and 1, 2, 4 or 8
 * buffers per I/O in flight. Its best is the most this search found storage and PCIe to give
 * together, a lower bound on what the machine gives a load into HBM: reported beside the limit
 * (what the row is divided by stays min(storage, PCIe)), as a measure of how much of the gap to
 * that limit a CPU-copied path can close. Asked for with the host as the destination
 * (through_host), the same phase copies each buffer into host memory instead: the host-KV path's
 * composed limit, on any storage and in builds without CUDA.
 *
 * The sweep is a coordinate search, not the whole grid: from (online CPUs, 1 file, 4 MiB, one
 * in flight) it sweeps the files, then the threads, the depth (1, 4, 16, 32; 1 alone where
 * io_uring is refused) and the I/O size, each time keeping the best, and
 * repeats while a round still gains; every point runs for a share of a time budget, so a
 * benchmark's set-up stays short whatever the storage. The files are scratch files of the
 * directories (no name, removed on return), written once in full before anything is read, so
 * that reads reach the storage and not unwritten extents.
 */
#ifndef TUTTI_TOOLS_CEILING_H
#define TUTTI_TOOLS_CEILING_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define CEILING_MAX_DIRS 16
#define CEILING_MAX_THREADS 128
#define CEILING_MAX_FILES 64
#define CEILING_MAX_POINTS 96

struct ceiling_conf {
	const char *dirs[CEILING_MAX_DIRS]; /* scratch files go round-robin over these */
	uint32_t nr_dirs;
	double budget_s;     /* the read and write sweeps together (default 8) */
	uint64_t file_bytes; /* region of each scratch file (default 128 MiB; cut to free space) */
	/* false: on tmpfs file_bytes is raised to 4x the CPU's largest cache, so that no point
	 * reads from that cache; true: taken as it is (to measure that cache's effect). */
	bool exact_file_bytes;
	uint64_t space_bytes; /* scratch space per directory at most (0: a quarter of the free) */
	uint32_t max_threads; /* 0: twice the online CPUs (at most CEILING_MAX_THREADS) */
	uint32_t max_files;   /* 0: 16 */
	uint64_t mem_bytes;   /* host memory the I/O cycles through (0: 1 GiB, at most RAM / 8) */
	bool skip_reads, skip_writes;
	int gpu; /* device whose pinned copies are measured; -1: none */
	/* Run the through phase into host memory (on any storage) rather than into GPU gpu's
	 * memory (which runs on tmpfs with gpu >= 0 unless skip_through: a caller that does not
	 * use it). */
	bool through_host, skip_through;
};

struct ceiling_point {
	double gbps;
	uint32_t threads, files, io_bytes;
	uint32_t depth;     /* I/Os in flight per thread */
	uint64_t mem_bytes; /* host memory the threads' I/O cycles through, all of them */
};

struct ceiling_sweep {
	struct ceiling_point best;   /* through mem_bytes of memory; gbps 0: not measured */
	struct ceiling_point staged; /* each thread reusing depth buffers; gbps 0: not searched */
	struct ceiling_point points[CEILING_MAX_POINTS];
	uint32_t nr_points;
	bool cut; /* the budget ended the search before a round stopped gaining */
};

struct ceiling_result {
	struct ceiling_sweep read, write;
	/* The through phase (points: mem_bytes is the host buffers, I/Os in flight x 1, 2, 4 or
	 * 8 per thread); best.gbps 0: not run. */
	struct ceiling_sweep read_through, write_through;
	int through_rc;    /* 0 run, 1 not asked for, or the -errno that kept it from running */
	bool through_host; /* its copies went to host memory, not to the GPU */
	bool emulated;     /* tmpfs: every byte moved is a CPU copy */
	/* Pinned copies: copy_rc 0 when measured, else why not (-EOPNOTSUPP: built without CUDA,
	 * -ENODEV: no GPU, 1: not asked for). */
	int copy_rc;
	double h2d_gbps, d2h_gbps;
	double seconds, prefill_s;
	uint64_t file_bytes;
	uint32_t max_threads, max_files, nr_dirs;
};

/* Defaults for the directories \p dirs (one or more). */
void ceiling_conf_init(struct ceiling_conf *c, const char *const *dirs, uint32_t nr_dirs);

/* Measure. Returns 0, or a negative errno after saying why on stderr (a directory without
 * room or O_DIRECT, say). Nothing is left in the directories either way. */
int ceiling_measure(const struct ceiling_conf *c, struct ceiling_result *r);

/* The limits a row is divided by: host KV (gpu false: the best point through mem_bytes) or KV
 * in GPU memory (gpu true: the better of that and the staged best, capped by the pinned copy
 * where it was measured). 0 when that direction was not measured. */
double ceiling_read_limit(const struct ceiling_result *r, bool gpu);
double ceiling_write_limit(const struct ceiling_result *r, bool gpu);
/* The through phase's best for reads and writes; 0 where it did not run. */
double ceiling_read_through(const struct ceiling_result *r);
double ceiling_write_through(const struct ceiling_result *r);
/* "gpu", "host", or why the through phase did not run. */
const char *ceiling_through_note(const struct ceiling_result *r);
/* "measured", or why the pinned copies were not. */
const char *ceiling_copy_note(const struct ceiling_result *r);

/* One JSON object (no newline): the best points, every point measured, the copies, the limits. */
void ceiling_json(FILE *f, const struct ceiling_result *r);
/* A few lines for a report (the best points, the through phase's, the copies), each starting
 * with \p prefix. */
void ceiling_print(FILE *f, const char *prefix, const struct ceiling_result *r);

#endif /* TUTTI_TOOLS_CEILING_H */
