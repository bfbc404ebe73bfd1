/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine posix: the CPU path (cpu_path.c) on the posix queue (ioq_posix.c), a pool of threads
 * issuing pread/pwrite: for where io_uring is refused, and the reference the uring engine is
 * measured against.
 */
#include "engine/engine_impl.h"
#include "tutti/engine.h"

static int
posix_open(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	return tt_cpu_engine_open(&tt_engine_posix, &tt_ioq_posix, conf, out);
}

const struct tt_engine_ops tt_engine_posix = {
    .name = "posix",
    .kind = TUTTI_ENGINE_POSIX,
    .kv_mems = TT_KV_MEM(TUTTI_MEM_HOST) | TT_KV_MEM(TUTTI_MEM_CUDA),
    .open = posix_open,
    .close = tt_cpu_engine_close,
    .transfer = tt_cpu_transfer,
    .flush = tt_cpu_flush,
    .stats = tt_cpu_stats,
};
