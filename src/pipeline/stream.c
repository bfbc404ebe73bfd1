/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pipeline's hooks on the GPU, its only calls into the GPU layer: memory shared with the
 * GPU (the signal words and per-step times its kernels read and write, and the save staging its
 * copies write), the one-thread kernels a step enqueues on the caller's compute stream to wait
 * for a layer and to signal one, and the offset that puts GPU times on the host's clock. A
 * pipeline over host KV uses none of them: its memory is ordinary and its waits are the host's.
 */
#include <errno.h>
#include <string.h>

#include "gpu/gpu.h"
#include "pipeline/pipeline_impl.h"

int
tt_pipe_mem_alloc(const struct tutti_pipeline *p, uint64_t bytes, void **out)
{
	int rc;

	if (!p->gpu) {
		*out = tt_aligned_alloc(bytes); /* zeroed */
		return *out == NULL ? -ENOMEM : 0;
	}
	/* Mapped pinned: GPU kernels read and write it across PCIe, the host in place. */
	rc = tt_gpu_host_alloc(bytes, out);
	if (rc < 0) {
		*out = NULL;
		return rc;
	}
	memset(*out, 0, bytes);
	return 0;
}

void
tt_pipe_mem_free(const struct tutti_pipeline *p, void *mem)
{
	if (p->gpu) {
		tt_gpu_host_free(mem);
	} else {
		tt_aligned_free(mem);
	}
}

int
tt_pipe_stream_wait(struct tutti_pipeline *p, struct tt_pipe_step *s, uint32_t layer)
{
	return tt_gpu_stream_wait(p->device, s->stream, &p->loaded[layer], s->seq,
	                          (uint64_t)p->opts.wait_timeout_ms * TT_NS_PER_MS,
	                          &s->wait_times[2 * layer]);
}

int
tt_pipe_stream_signal(struct tutti_pipeline *p, struct tt_pipe_step *s, uint32_t layer)
{
	return tt_gpu_stream_signal(p->device, s->stream, &p->computed[layer], s->seq,
	                            &s->save_times[layer]);
}

int64_t
tt_pipe_clock_offset(const struct tutti_pipeline *p)
{
	int64_t offset;

	/* 0 when unknown: the timeline's GPU spans are then only relative. */
	return p->gpu && tt_gpu_timer_offset(p->device, &offset) == 0 ? offset : 0;
}
