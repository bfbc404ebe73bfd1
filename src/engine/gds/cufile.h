/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcufile (NVIDIA GPUDirect Storage), loaded at run time.
 *
 * Why dlopen and our own declarations rather than <cufile.h> and -lcufile: cuFile ships with the
 * CUDA toolkit of GPU servers only (not with the toolkit packages our builds and CI use), and a
 * store must open on machines without it, where engine gds is simply unavailable. The few types
 * below copy the C ABI of cufile.h (CUDA 12/13); where the real header is present, the build
 * checks them against it field by field (src/engine/gds/cufile_abi_check.c).
 */
#ifndef TT_ENGINE_GDS_CUFILE_H
#define TT_ENGINE_GDS_CUFILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/common.h"

/* CUfileError_t: a cuFile status and a CUDA driver status; err 0 is success. */
struct tt_cufile_error {
	int err;
	int cu_err;
};

/* CUfileDescr_t, with handle type CU_FILE_HANDLE_TYPE_OPAQUE_FD. */
struct tt_cufile_descr {
	int type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
};
#define TT_CUFILE_HANDLE_TYPE_OPAQUE_FD 1

/* CUfileIOParams_t of the batch API, mode CUFILE_BATCH. */
struct tt_cufile_io_params {
	int mode;
	union {
		struct {
			void *dev_ptr_base;
			off_t file_offset;
			off_t dev_ptr_offset;
			size_t size;
		} batch;
	} u;
	void *fh;
	int opcode; /* CUFILE_READ 0, CUFILE_WRITE 1 */
	void *cookie;
};
#define TT_CUFILE_BATCH 1
#define TT_CUFILE_READ 0
#define TT_CUFILE_WRITE 1

/* CUfileIOEvents_t */
struct tt_cufile_io_event {
	void *cookie;
	int status; /* CUfileStatus_t */
	size_t ret; /* bytes moved, or a negative error */
};
#define TT_CUFILE_COMPLETE 0x10
#define TT_CUFILE_WAITING 0x01
#define TT_CUFILE_PENDING 0x02

/* The entry points, resolved from the library. The batch ones are NULL where absent. */
struct tt_cufile {
	void *lib;
	struct tt_cufile_error (*driver_open)(void);
	struct tt_cufile_error (*driver_close)(void);
	struct tt_cufile_error (*handle_register)(void **fh, struct tt_cufile_descr *descr);
	void (*handle_deregister)(void *fh);
	struct tt_cufile_error (*buf_register)(const void *base, size_t len, int flags);
	struct tt_cufile_error (*buf_deregister)(const void *base);
	ssize_t (*read)(void *fh, void *base, size_t size, off_t file_off, off_t base_off);
	ssize_t (*write)(void *fh, const void *base, size_t size, off_t file_off, off_t base_off);
	struct tt_cufile_error (*batch_setup)(void **batch, unsigned nr);
	struct tt_cufile_error (*batch_submit)(void *batch, unsigned nr,
	                                       struct tt_cufile_io_params *ios, unsigned flags);
	struct tt_cufile_error (*batch_status)(void *batch, unsigned min_nr, unsigned *nr,
	                                       struct tt_cufile_io_event *events,
	                                       struct timespec *timeout);
	void (*batch_destroy)(void *batch);
};

/* Load libcufile and open its driver. Returns 0, or -EOPNOTSUPP (no library, or a library
 * without the entry points) or -EIO (the driver does not open), logged. */
int tt_cufile_open(const struct tt_log *log, struct tt_cufile **out);
/* Close the driver and unload. NULL is allowed. */
void tt_cufile_close(struct tt_cufile *cf);

#endif /* TT_ENGINE_GDS_CUFILE_H */
