/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine posix: the CPU path (cpu_path.c) on the posix queue (ioq_posix.c), a pool of threads
 * issuing pread/pwrite: for where io_uring is refused, and the reference the uring engine is
 * measured against.
 */
#include "engine/engine_impl.h"
#include "tutti/engine.h"

/* The most threads: the store's largest queue depth, beyond which threads would find no I/O. */
#define MAX_THREADS 4096u

const struct tt_engine_opt tt_engine_opt_threads = {
    .name = "threads",
    .kind = TUTTI_ENGINE_OPTION_INT,
    .min = 0,
    .max = MAX_THREADS,
    .def = 0,
    .help = "threads issuing pread/pwrite; 0: one per I/O in flight (queue_depth), but no more "
            "than the online CPUs on page-cache-backed files (tmpfs), where each read or write "
            "is a copy by the thread itself",
};

static const struct tt_engine_opt *const opts[] = {&tt_engine_opt_threads};

static int
posix_open(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	int rc = tt_cpu_engine_open(&tt_engine_posix, &tt_ioq_posix, conf, out);

	if (rc == 0) {
		(*out)->ioq_threads = conf->opt[0];
	}
	return rc;
}

const struct tt_engine_ops tt_engine_posix = {
    .name = "posix",
    .kind = TUTTI_ENGINE_POSIX,
    .description = "a pool of threads issuing pread/pwrite, for where io_uring is refused; "
                   "host or GPU KV",
    .opts = opts,
    .nr_opts = TT_ARRAY_SIZE(opts),
    .kv_mems = TT_KV_MEM(TUTTI_MEM_HOST) | TT_KV_MEM(TUTTI_MEM_CUDA),
    .open = posix_open,
    .close = tt_cpu_engine_close,
    .transfer = tt_cpu_transfer,
    .flush = tt_cpu_flush,
    .stats = tt_cpu_stats,
};
