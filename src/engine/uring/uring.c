/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine uring: the CPU path (cpu_path.c) on the io_uring queue (ioq_uring.c). The default.
 */
#include "engine/engine_impl.h"
#include "tutti/engine.h"

static int
uring_open(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	return tt_cpu_engine_open(&tt_engine_uring, &tt_ioq_uring, conf, out);
}

const struct tt_engine_ops tt_engine_uring = {
    .name = "uring",
    .kind = TUTTI_ENGINE_URING,
    .description = "io_uring (liburing): batched submission, registered files and staging; "
                   "host or GPU KV; the default",
    .kv_mems = TT_KV_MEM(TUTTI_MEM_HOST) | TT_KV_MEM(TUTTI_MEM_CUDA),
    .open = uring_open,
    .close = tt_cpu_engine_close,
    .transfer = tt_cpu_transfer,
    .flush = tt_cpu_flush,
    .stats = tt_cpu_stats,
};
