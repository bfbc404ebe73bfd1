/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Built only where the real <cufile.h> is found: our copies of cuFile's types must match it
 * field by field, or the build fails here.
 */
#include <cufile.h>
#include <stddef.h>

#include "engine/gds/cufile.h"

#define SAME(ours, theirs)                                                                         \
	_Static_assert(sizeof(ours) == sizeof(theirs), #ours " has the size of " #theirs)
#define AT(ours, f, theirs, g)                                                                     \
	_Static_assert(offsetof(ours, f) == offsetof(theirs, g),                                   \
	               #ours "." #f " is at " #theirs "." #g)

SAME(struct tt_cufile_error, CUfileError_t);
AT(struct tt_cufile_error, cu_err, CUfileError_t, cu_err);
SAME(struct tt_cufile_descr, CUfileDescr_t);
AT(struct tt_cufile_descr, handle, CUfileDescr_t, handle);
AT(struct tt_cufile_descr, fs_ops, CUfileDescr_t, fs_ops);
SAME(struct tt_cufile_io_params, CUfileIOParams_t);
AT(struct tt_cufile_io_params, u.batch.dev_ptr_base, CUfileIOParams_t, u.batch.devPtr_base);
AT(struct tt_cufile_io_params, u.batch.file_offset, CUfileIOParams_t, u.batch.file_offset);
AT(struct tt_cufile_io_params, u.batch.dev_ptr_offset, CUfileIOParams_t, u.batch.devPtr_offset);
AT(struct tt_cufile_io_params, u.batch.size, CUfileIOParams_t, u.batch.size);
AT(struct tt_cufile_io_params, fh, CUfileIOParams_t, fh);
AT(struct tt_cufile_io_params, opcode, CUfileIOParams_t, opcode);
AT(struct tt_cufile_io_params, cookie, CUfileIOParams_t, cookie);
SAME(struct tt_cufile_io_event, CUfileIOEvents_t);
AT(struct tt_cufile_io_event, status, CUfileIOEvents_t, status);
AT(struct tt_cufile_io_event, ret, CUfileIOEvents_t, ret);
_Static_assert(TT_CUFILE_HANDLE_TYPE_OPAQUE_FD == CU_FILE_HANDLE_TYPE_OPAQUE_FD, "fd handles");
_Static_assert(TT_CUFILE_BATCH == CUFILE_BATCH && TT_CUFILE_READ == CUFILE_READ &&
                   TT_CUFILE_WRITE == CUFILE_WRITE && TT_CUFILE_COMPLETE == CUFILE_COMPLETE &&
                   TT_CUFILE_WAITING == CUFILE_WAITING && TT_CUFILE_PENDING == CUFILE_PENDING,
               "batch constants");
