/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The per-block CPU-driven SSD baseline of the layerwise benchmark (bench/layerwise_ttft.py),
 * loaded there with ctypes: what CPU-centric tiers do. A pool of host threads takes the
 * (layer, block) units of a load in layer order; each unit is one pread of a paged block of one
 * layer (O_DIRECT) into a pinned buffer and one cudaMemcpyAsync per K/V half into its paged block.
 * Buffers are double-buffered per thread. done[l] counts the blocks of layer l whose copies have
 * completed, so the engine's thread can start layer l once done[l] reaches the block count.
 *
 * The file holds the blocks layer-major: block i of layer l at (l * file_blocks + i) * block_bytes.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_THREADS 64
#define MAX_LAYERS 256

struct bl_thread {
	struct bl *bl;
	pthread_t tid;
	cudaStream_t stream;
	cudaEvent_t ev[2];
	uint8_t *buf[2];
	int64_t pending[2]; /* unit waiting on ev[k], or -1 */
};

struct bl {
	int fd;
	int device;
	uint32_t nr_threads;
	uint64_t block_bytes; /* one layer block: K half then V half */
	uint64_t file_blocks;
	/* the current load */
	uint32_t nr_layers, nr_blocks;
	uint64_t k_base[MAX_LAYERS], v_base[MAX_LAYERS], stride;
	uint64_t next; /* next unit; atomic */
	int error;     /* first error; atomic */
	uint32_t done[MAX_LAYERS];
	struct bl_thread th[MAX_THREADS];
};

static void
unit_done(struct bl *b, int64_t u)
{
	__atomic_add_fetch(&b->done[u / b->nr_blocks], 1, __ATOMIC_RELEASE);
}

static int
run_unit(struct bl *b, struct bl_thread *t, int k, uint64_t u)
{
	uint32_t l = (uint32_t)(u / b->nr_blocks), i = (uint32_t)(u % b->nr_blocks);
	uint64_t half = b->block_bytes / 2;
	ssize_t r = pread(b->fd, t->buf[k], b->block_bytes,
	                  (off_t)(((uint64_t)l * b->file_blocks + i) * b->block_bytes));

	if (r != (ssize_t)b->block_bytes) {
		return r < 0 ? -errno : -EIO;
	}
	if (cudaMemcpyAsync((void *)(uintptr_t)(b->k_base[l] + i * b->stride), t->buf[k], half,
	                    cudaMemcpyHostToDevice, t->stream) != cudaSuccess ||
	    cudaMemcpyAsync((void *)(uintptr_t)(b->v_base[l] + i * b->stride), t->buf[k] + half,
	                    half, cudaMemcpyHostToDevice, t->stream) != cudaSuccess ||
	    cudaEventRecord(t->ev[k], t->stream) != cudaSuccess) {
		return -EIO;
	}
	return 0;
}

static void *
worker(void *arg)
{
	struct bl_thread *t = arg;
	struct bl *b = t->bl;
	uint64_t units = (uint64_t)b->nr_layers * b->nr_blocks;
	int rc = 0;

	cudaSetDevice(b->device);
	for (int k = 0; rc == 0; k ^= 1) {
		uint64_t u = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED);

		if (u >= units || __atomic_load_n(&b->error, __ATOMIC_RELAXED) != 0) {
			break;
		}
		if (t->pending[k] >= 0) {
			if (cudaEventSynchronize(t->ev[k]) != cudaSuccess) {
				rc = -EIO;
				break;
			}
			unit_done(b, t->pending[k]);
			t->pending[k] = -1;
		}
		rc = run_unit(b, t, k, u);
		if (rc == 0) {
			t->pending[k] = (int64_t)u;
		}
	}
	for (int k = 0; k < 2; k++) {
		if (t->pending[k] >= 0 && cudaEventSynchronize(t->ev[k]) == cudaSuccess) {
			unit_done(b, t->pending[k]);
		}
		t->pending[k] = -1;
	}
	if (rc < 0) {
		int zero = 0;

		__atomic_compare_exchange_n(&b->error, &zero, rc, false, __ATOMIC_RELAXED,
		                            __ATOMIC_RELAXED);
	}
	return NULL;
}

/* The interface bench/layerwise_ttft.py calls through ctypes. */
int bl_create(const char *path, int device, uint32_t threads, uint64_t block_bytes,
              uint64_t file_blocks, struct bl **out);
int bl_start(struct bl *b, uint32_t nr_layers, uint32_t nr_blocks, const uint64_t *k_base,
             const uint64_t *v_base, uint64_t stride);
uint32_t bl_done(struct bl *b, uint32_t layer);
int bl_error(struct bl *b);
int bl_finish(struct bl *b);
void bl_destroy(struct bl *b);

int
bl_create(const char *path, int device, uint32_t threads, uint64_t block_bytes,
          uint64_t file_blocks, struct bl **out)
{
	struct bl *b;

	if (threads == 0 || threads > MAX_THREADS || block_bytes % 4096 != 0) {
		return -EINVAL;
	}
	b = calloc(1, sizeof(*b));
	if (b == NULL) {
		return -ENOMEM;
	}
	b->fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (b->fd < 0) {
		int rc = -errno;

		free(b);
		return rc;
	}
	b->device = device;
	b->nr_threads = threads;
	b->block_bytes = block_bytes;
	b->file_blocks = file_blocks;
	cudaSetDevice(device);
	for (uint32_t i = 0; i < threads; i++) {
		struct bl_thread *t = &b->th[i];

		t->bl = b;
		t->pending[0] = t->pending[1] = -1;
		if (cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking) != cudaSuccess) {
			bl_destroy(b);
			return -EIO;
		}
		for (int k = 0; k < 2; k++) {
			if (cudaEventCreateWithFlags(&t->ev[k], cudaEventDisableTiming) !=
			        cudaSuccess ||
			    cudaHostAlloc((void **)&t->buf[k], block_bytes, cudaHostAllocDefault) !=
			        cudaSuccess) {
				bl_destroy(b);
				return -EIO;
			}
		}
	}
	*out = b;
	return 0;
}

/* Start loading blocks [0, nr_blocks) of every layer; returns at once. */
int
bl_start(struct bl *b, uint32_t nr_layers, uint32_t nr_blocks, const uint64_t *k_base,
         const uint64_t *v_base, uint64_t stride)
{
	if (nr_layers == 0 || nr_layers > MAX_LAYERS || nr_blocks == 0 ||
	    nr_blocks > b->file_blocks) {
		return -EINVAL;
	}
	b->nr_layers = nr_layers;
	b->nr_blocks = nr_blocks;
	memcpy(b->k_base, k_base, nr_layers * sizeof(uint64_t));
	memcpy(b->v_base, v_base, nr_layers * sizeof(uint64_t));
	b->stride = stride;
	b->next = 0;
	b->error = 0;
	memset(b->done, 0, sizeof(b->done));
	for (uint32_t i = 0; i < b->nr_threads; i++) {
		if (pthread_create(&b->th[i].tid, NULL, worker, &b->th[i]) != 0) {
			return -EAGAIN;
		}
	}
	return 0;
}

/* Blocks of layer l loaded so far (acquire). */
uint32_t
bl_done(struct bl *b, uint32_t layer)
{
	return __atomic_load_n(&b->done[layer], __ATOMIC_ACQUIRE);
}

int
bl_error(struct bl *b)
{
	return __atomic_load_n(&b->error, __ATOMIC_RELAXED);
}

/* Join the threads of the current load; its first error or 0. */
int
bl_finish(struct bl *b)
{
	for (uint32_t i = 0; i < b->nr_threads; i++) {
		pthread_join(b->th[i].tid, NULL);
	}
	return b->error;
}

void
bl_destroy(struct bl *b)
{
	if (b == NULL) {
		return;
	}
	for (uint32_t i = 0; i < b->nr_threads; i++) {
		struct bl_thread *t = &b->th[i];

		if (t->stream != NULL) {
			cudaStreamDestroy(t->stream);
		}
		for (int k = 0; k < 2; k++) {
			if (t->ev[k] != NULL) {
				cudaEventDestroy(t->ev[k]);
			}
			if (t->buf[k] != NULL) {
				cudaFreeHost(t->buf[k]);
			}
		}
	}
	close(b->fd);
	free(b);
}
