/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine auto: gpu-uring (src/engine/gpu_uring/) for GPU KV only, set up on first use, so that a
 * process with host KV never starts an SQ thread or a doorbell. Host KV goes through the CPU
 * path (io_uring, or the posix queue's threads where io_uring is refused), and where the ring
 * cannot be set up for the GPU (no CUDA device, layer blocks too small for the GPU hash, too few
 * SMs, no such ring, no mapped memory) GPU KV does too, and one line of the log says why.
 */
#include "engine/gpu_uring/gpu_uring.h"
#include "tutti/engine.h"

/* Whether gpu-uring moves GPU KV, decided at the first batch of GPU KV. */
enum auto_state {
	AUTO_UNTRIED = 0,
	AUTO_RING,     /* gpu-uring moves GPU KV */
	AUTO_CPU_PATH, /* it could not be set up: the CPU path does */
};

struct auto_engine {
	struct tt_gpu_uring_engine gu; /* first: gpu-uring's operations take it as theirs */
	enum auto_state state;
};

static struct auto_engine *
to_auto(struct tt_engine *e)
{
	return (struct auto_engine *)e;
}

/* Its options: gpu-uring's, for GPU KV, then the threads of the posix queue it falls back on. */
static const struct tt_engine_opt *const opts[] = {
    &tt_gpu_uring_opts[TT_GPU_URING_OPT_WORKERS],
    &tt_gpu_uring_opts[TT_GPU_URING_OPT_SMS],
    &tt_gpu_uring_opts[TT_GPU_URING_OPT_SUBMIT],
    &tt_gpu_uring_opts[TT_GPU_URING_OPT_COPY],
    &tt_engine_opt_threads,
};
#define OPT_THREADS TT_GPU_URING_NR_OPTS

static int
auto_open(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	int rc = tt_gpu_uring_open_as(&tt_engine_auto, conf, sizeof(struct auto_engine), out);

	/* Host KV goes on a thread pool where io_uring is refused. */
	if (rc == 0) {
		(*out)->ioq_fallback = true;
		(*out)->ioq_threads = conf->opt[OPT_THREADS];
	}
	return rc;
}

/* Whether gpu-uring moves GPU KV of \p device: set up on the first call, which logs one line
 * when it cannot be (every later batch then takes the CPU path without a word). */
static bool
auto_ring(struct tt_engine *e, int device)
{
	struct auto_engine *a = to_auto(e);
	char why[192];

	if (a->state == AUTO_UNTRIED) {
		if (tt_gpu_uring_setup(&a->gu, device, why, sizeof(why)) == 0) {
			a->state = AUTO_RING;
			tt_log_info(e->log, "engine auto: gpu-uring moves GPU KV");
		} else {
			a->state = AUTO_CPU_PATH;
			tt_log_warn(e->log, "engine auto: %s moves GPU KV, not gpu-uring: %s",
			            tt_engine_kind_name(e->cpu_kind), why);
		}
	}
	return a->state == AUTO_RING;
}

static int
auto_transfer(struct tt_engine *e, struct tt_batch *b)
{
	return auto_ring(e, b->kv->device) ? tt_gpu_uring_transfer(e, b) : tt_cpu_transfer(e, b);
}

static uint32_t
auto_moved_by(struct tt_engine *e, const struct tutti_kv *kv)
{
	return auto_ring(e, kv->device) ? TUTTI_ENGINE_GPU_URING : e->cpu_kind;
}

static int
auto_prepare(struct tt_engine *e, const struct tutti_kv *kv, struct tt_gpu *gpu)
{
	return auto_ring(e, kv->device) ? tt_gpu_uring_prepare(e, kv, gpu) : 0;
}

static int
auto_launch_open(struct tt_engine *e, struct tt_batch *b, struct tt_list_mem *mem,
                 struct tt_launch **out)
{
	return auto_ring(e, b->kv->device) ? tt_gpu_uring_launch_open(e, b, mem, out) : 0;
}

const struct tt_engine_ops tt_engine_auto = {
    .name = "auto",
    .kind = TUTTI_ENGINE_AUTO,
    .description = "gpu-uring for GPU KV where it can be set up, else the CPU path on io_uring "
                   "(posix threads where io_uring is refused)",
    .opts = opts,
    .nr_opts = TT_ARRAY_SIZE(opts),
    .kv_mems = TT_KV_MEM(TUTTI_MEM_CUDA),
    .open = auto_open,
    .close = tt_gpu_uring_close,
    .transfer = auto_transfer,
    .flush = tt_cpu_flush,
    .stats = tt_gpu_uring_stats,
    .moved_by = auto_moved_by,
    .prepare = auto_prepare,
    .launch_open = auto_launch_open,
    .launch_layer = tt_gpu_uring_launch_layer,
    .launch_idle = tt_gpu_uring_launch_idle,
    .launch_finish = tt_gpu_uring_launch_finish,
    .quiesce = tt_gpu_uring_quiesce,
};
