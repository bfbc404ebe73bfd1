/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU interface of a build without CUDA: every call reports -EOPNOTSUPP.
 */
#include <errno.h>

#include "gpu/gpu.h"

int
tt_gpu_device_count(void)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_open(const struct tt_gpu_conf *conf, struct tt_gpu **out)
{
	if (out != NULL) {
		*out = NULL;
	}
	return -EOPNOTSUPP;
}

void
tt_gpu_close(struct tt_gpu *g)
{
}

int
tt_gpu_device(const struct tt_gpu *g)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_sms(const struct tt_gpu *g)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_gather(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer,
              const struct tt_move *moves, uint32_t nr_moves)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_scatter(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer,
               const struct tt_move *moves, uint32_t nr_moves)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_sync(struct tt_gpu *g)
{
	return -EOPNOTSUPP;
}

uint64_t
tt_gpu_launches(const struct tt_gpu *g)
{
	return 0;
}

int
tt_gpu_host_register(void *p, size_t bytes)
{
	return -EOPNOTSUPP;
}

void
tt_gpu_host_unregister(void *p)
{
}

int
tt_gpu_host_alloc(size_t bytes, void **p)
{
	return -EOPNOTSUPP;
}

void
tt_gpu_host_free(void *p)
{
}

int
tt_gpu_set_device(int device)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_dev_alloc(size_t bytes, void **p)
{
	return -EOPNOTSUPP;
}

void
tt_gpu_dev_free(void *p)
{
}

int
tt_gpu_copy(void *dst, const void *src, size_t bytes)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_fill(void *dst, int byte, size_t bytes)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_device_of(const void *p, int *device)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_prepare(struct tt_gpu *g)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_objs(struct tt_gpu *g, const struct tutti_kv *kv, uint32_t layer, uint32_t per_layer,
            uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr, const uint32_t *ids, uint8_t *mem,
            uint64_t slot_bytes, bool write)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_mark(struct tt_gpu *g, unsigned i)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_wait_mark(struct tt_gpu *g, unsigned i)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_buf_copy(struct tt_gpu *g, unsigned buf, void *dst, const void *src, size_t bytes)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_buf_objs(struct tt_gpu *g, unsigned buf, const struct tutti_kv *kv, uint32_t layer,
                uint32_t per_layer, uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr,
                const uint32_t *ids, uint8_t *mem, uint64_t slot_bytes, bool write)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_buf_wait(struct tt_gpu *g, unsigned buf)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_buf_alloc(struct tt_gpu *g, size_t bytes, void **out)
{
	return -EOPNOTSUPP;
}

void
tt_gpu_buf_free(struct tt_gpu *g, void *p)
{
}

int
tt_gpu_csum(struct tt_gpu *g, const void *p, uint64_t len, uint64_t *out)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_stream_wait(int device, void *stream, const uint32_t *word, uint32_t value,
                   uint64_t timeout_ns, uint64_t *times)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_stream_signal(int device, void *stream, uint32_t *word, uint32_t value, uint64_t *time)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_ctx_signal(struct tt_gpu *g, uint32_t *word, uint32_t value, uint64_t *time)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_idle(struct tt_gpu *g)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_timer_offset(int device, int64_t *offset_ns)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_stream_create(int device, void **out)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_stream_sync(void *stream)
{
	return -EOPNOTSUPP;
}

void
tt_gpu_stream_destroy(void *stream)
{
}

int
tt_gpu_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_event_create(int device, void **out)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_event_record(void *event, void *stream)
{
	return -EOPNOTSUPP;
}

int
tt_gpu_event_sync(void *event)
{
	return -EOPNOTSUPP;
}

void
tt_gpu_event_destroy(void *event)
{
}
