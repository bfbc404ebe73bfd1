/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Raw device bandwidth: sequential O_DIRECT reads and writes issued with io_uring at a fixed
 * block size and queue depth, and the best of a short sweep of sizes and depths, over the same
 * bytes a store keeps (its data files, found through the public API) or scratch files. For
 * `tutti bench`, `tutti profile` and the benchmark programs of bench/.
 */
#ifndef TUTTI_TOOLS_RAWBW_H
#define TUTTI_TOOLS_RAWBW_H

#include <stdbool.h>
#include <stdint.h>

#include "tutti/store.h"

/* Most data files of a store, all directories together (the library allows no more). */
#define RAWBW_MAX_FILES 64u

struct rawbw_point {
	double gbps;
	uint32_t bs, qd;
};

/* Where raw I/O goes: a region of \p span bytes at \p off in each file (I/Os alternate between
 * the files), moved to or from \p mem (reused cyclically; NULL: a small buffer of its own). */
struct rawbw_target {
	const int *fds;
	uint32_t nr_fds;
	uint64_t off, span;
	uint8_t *mem;
	uint64_t mem_bytes;
	bool write;
	bool async; /* IOSQE_ASYNC on reads: for page-cache-backed files (tmpfs), whose reads would
	             * otherwise all be copied inline by the submitting thread (writes serialize
	             * on the file's lock either way, as the store's do) */
};

/* Sequential O_DIRECT transfer of \p bytes of each file, from \p start in the region (wrapping
 * around), \p bs per I/O with \p qd in flight. Returns GB/s (all files together) or -errno. */
double rawbw_run(const struct rawbw_target *t, uint64_t start, uint64_t bytes, uint32_t bs,
                 uint32_t qd);

/* The best point of a short sweep of block sizes and queue depths, the points sharing \p bytes
 * per file; points whose I/O size exceeds their share are left out, and best->gbps stays 0 if
 * none fits. Returns 0 or a negative errno. */
int rawbw_sweep(const struct rawbw_target *t, uint64_t bytes, struct rawbw_point *best);

/*
 * Open the data files of the open store \p st (tutti_store_file: directory by directory)
 * read-only with O_DIRECT, appended to \p fds at *nr (at most \p max in all), each file's
 * directory (an index into the store's directories) into \p dirs at the same place unless
 * \p dirs is NULL. *off becomes where their slots start (-EPROTO where files differ), *span the
 * smaller of itself and the slot bytes the smallest of them holds. Returns 0 or -errno (-E2BIG
 * past \p max; the files opened stay in fds for the caller to close).
 */
int rawbw_open_store_files(struct tutti_store *st, int *fds, uint32_t *dirs, uint32_t max,
                           uint32_t *nr, uint64_t *off, uint64_t *span);

/* Remove store directory \p dir: its data files (every name tutti_store_file_name gives), then
 * the directory (when empty). */
void rawbw_remove_store(const char *dir);

#endif /* TUTTI_TOOLS_RAWBW_H */
