/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The layerwise pipeline's state, shared by the files of this module only.
 *
 * Threads. The engine's thread calls the public functions; the pipeline's own thread (the
 * worker) reads, copies into save staging, writes, and finalises steps. Both take p->lock for the
 * step records and the staging lists; the worker never holds it across I/O or a GPU wait. The
 * signal words are shared with the GPU without the lock (one writer each).
 */
#ifndef TT_PIPELINE_IMPL_H
#define TT_PIPELINE_IMPL_H

#include <pthread.h>
#include <stdbool.h>

#include "common/common.h"
#include "mover/mover.h"
#include "store/store.h"
#include "tutti/pipeline.h"

#define TT_PIPE_KEEP 8        /* step records kept (results readable) */
#define TT_PIPE_OUTSTANDING 4 /* steps begun and not yet final */
/* Per-step times per layer: 2 of the wait, 1 of save_layer's signal, 1 of the load, 1 issue. */
#define TT_PIPE_STEP_TIMES 5ull
/* Bit 63 of a wait's end time: the wait gave up (wait_timeout_ms) rather than saw the layer. */
#define TT_PIPE_WAIT_TIMED_OUT (1ull << 63)

/* One save request's chunks that got staging. */
struct tt_staged {
	struct tt_staged *next;
	int64_t step;
	struct tutti_request req; /* keys and staging block ids, as the store's save wants them */
	uint8_t *keys;            /* owned: req.nr_keys keys */
	uint32_t *ids;            /* owned: staging block ids of every staged chunk */
	uint32_t *src_ids;        /* owned: the paged block ids they are copied from */
	uint32_t *slots;          /* owned: the staging chunk slot of each staged chunk */
	uint32_t *chunk_blocks;   /* owned: blocks of each staged chunk */
	uint32_t nr_chunks;
	uint32_t written;  /* chunks written so far (from the first) */
	uint32_t gathered; /* layers copied into staging */
	bool failed;       /* a copy failed or the step ended early: not written */
};

struct tt_pipe_step {
	int64_t id; /* 0: free */
	uint32_t seq;
	void *stream;
	uint32_t compute_tokens;
	/* loads: copies of the caller's requests */
	struct tutti_request *loads;
	uint32_t nr_loads;
	uint8_t *load_keys;
	uint32_t *load_ids;
	uint32_t nr_chunks;    /* chunks of the loads */
	int32_t *status;       /* nr_chunks: final statuses */
	uint32_t next_load;    /* worker: next layer to issue */
	uint32_t readahead;    /* layers issued ahead of compute */
	struct tt_load_op *op; /* worker: the step's load, open from layer 0 until harvested */
	bool op_gpu_clock;     /* load_times are GPU times (the op's layers ran on the GPU) */
	uint32_t timed_out;
	uint64_t t_begin, t_loaded;
	uint64_t load_bytes;
	/* host side */
	uint32_t waited;       /* layers waited for */
	uint64_t host_wait_ns; /* the caller's thread blocked in wait_layer */
	uint32_t saved;        /* layers whose new KV was signalled */
	bool ended;
	uint64_t *wait_times;  /* 2 per layer (GPU: mapped, %globaltimer; CPU: host clock) */
	uint64_t *save_times;  /* 1 per layer: when save_layer's signal ran */
	uint64_t *load_times;  /* 1 per layer: when the layer was in the KV (see op_gpu_clock) */
	uint64_t *issue_times; /* 1 per layer: when the worker issued it (host clock) */
	uint64_t t_wait_call;  /* CPU mode: when the previous wait returned */
	/* saves */
	uint32_t nr_saves_staged, nr_saves_skipped;
	uint32_t gathered; /* worker: layers of this step's saves copied into staging */
	bool final;        /* the result is complete */
	struct tutti_step_result result;
	uint64_t *layer_stall; /* nr_layers */
};

struct tt_trace_event {
	const char *name;
	int64_t step;
	uint64_t t0, t1; /* host CLOCK_MONOTONIC ns */
	uint32_t layer;  /* writes: the number of chunks */
	uint32_t track;
};

enum tt_trace_track {
	TT_TRACK_READS = 0,
	TT_TRACK_WAITS,
	TT_TRACK_COMPUTE,
	TT_TRACK_COPIES,
	TT_TRACK_WRITES,
	TT_TRACK_COUNT,
};

struct tutti_pipeline {
	struct tutti_store *st;
	const struct tt_geo *geo; /* the store's */
	uint32_t key_bytes;
	const struct tutti_kv *kv;
	struct tt_log log;
	uint32_t nr_layers;
	bool gpu; /* KV in GPU memory */
	int device;
	struct tutti_pipeline_opts opts;

	pthread_t worker;
	bool worker_started;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* the worker: something to do */
	pthread_cond_t done; /* the engine's thread: a layer loaded, a write finished */
	bool stopping;

	/* Signal words, one writer each: loaded[l] (the worker) and computed[l] (the compute
	 * stream, or the engine's thread in CPU mode) hold the newest step seq done for layer l.
	 * GPU mode: mapped pinned memory (sig_mem), also holding every step's times. */
	void *sig_mem;
	uint64_t sig_bytes;
	uint32_t *loaded;
	uint32_t *computed;
	int64_t timer_offset; /* GPU time minus host time */

	struct tt_pipe_step steps[TT_PIPE_KEEP];
	int64_t next_id;
	struct tt_pipe_step *cur; /* the step between begin and end, or NULL */

	/* Save staging: host memory registered as a KV of the store's geometry, layer-major, in
	 * chunk slots of blocks_per_chunk blocks. */
	uint8_t *staging;
	uint64_t staging_bytes;
	struct tutti_kv *staging_kv;
	uint32_t nr_slots;
	uint32_t *free_slots;
	uint32_t nr_free;
	struct tt_staged *staged_head, *staged_tail; /* FIFO, oldest first */
	struct tt_move *moves;                       /* nr_slots: the worker's copy list */
	struct tt_mover copier;                      /* copies into staging */
	struct tt_load_mem *op_mem; /* the worker's load ops' object lists (one op at a time) */

	/* The scheduler's model: refined online. */
	double read_bps, write_bps;
	double *layer_ns_per_token;
	uint32_t readahead;

	struct tutti_pipeline_stats stats;

	/* The timeline: a ring of the newest events. */
	struct tt_trace_event *trace;
	uint64_t trace_next; /* events recorded so far */
};

/* pipeline.c: give a staged request's staging slots back and free it. NULL is allowed. Caller
 * holds the lock. */
void tt_pipe_retire_staged(struct tutti_pipeline *p, struct tt_staged *s);

/* stream.c: the pipeline's hooks on the GPU. Memory shared with the GPU in GPU mode (mapped
 * pinned), aligned host memory otherwise; zeroed. */
int tt_pipe_mem_alloc(const struct tutti_pipeline *p, uint64_t bytes, void **out);
void tt_pipe_mem_free(const struct tutti_pipeline *p, void *mem);
/* GPU mode: enqueue on the step's compute stream the wait for layer \p layer's load, and the
 * signal that its new KV is computed. */
int tt_pipe_stream_wait(struct tutti_pipeline *p, struct tt_pipe_step *s, uint32_t layer);
int tt_pipe_stream_signal(struct tutti_pipeline *p, struct tt_pipe_step *s, uint32_t layer);
/* GPU time minus host time in GPU mode, or 0. */
int64_t tt_pipe_clock_offset(const struct tutti_pipeline *p);

/* worker.c */
void *tt_pipe_worker(void *arg);
/* The read-ahead window for a step computing \p tokens and reading \p layer_bytes per layer.
 * Caller holds the lock. */
uint32_t tt_pipe_readahead(const struct tutti_pipeline *p, uint32_t tokens, uint64_t layer_bytes);
/* Wait on \p cond for at most \p ns nanoseconds. */
void tt_pipe_cond_wait_ns(pthread_cond_t *cond, pthread_mutex_t *lock, uint64_t ns);
/* Record a timeline event; caller holds the lock. */
void tt_pipe_trace(struct tutti_pipeline *p, uint32_t track, const char *name, int64_t step,
                   uint32_t layer, uint64_t t0, uint64_t t1);

#endif /* TT_PIPELINE_IMPL_H */
