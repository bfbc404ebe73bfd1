/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the engines share, for the files of this module only: the table every engine fills in,
 * the part of an engine all of them have (its CPU-driven I/O queue, staging and CPU path), the
 * steps of moving one unit, and the object lists of the engines whose GPU moves whole objects.
 */
#ifndef TT_ENGINE_IMPL_H
#define TT_ENGINE_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/common.h"
#include "engine/engine.h"
#include "gpu/gpu.h"
#include "mover/mover.h"

/* ---- I/O queues: asynchronous reads and writes of aligned extents of the data files ----
 *
 * Completion contract: a completion's res is the full length, or a negative errno. Queues finish
 * short transfers themselves and retry -EAGAIN/-EINTR; end of file inside an extent is -EIO.
 */

struct tt_io_done {
	uint64_t tag;
	int32_t res;
};

struct tt_ioq_conf {
	const int *fds; /* the files; borrowed for the queue's lifetime */
	uint32_t nr_fds;
	void *
	    reg_buf; /* memory that most I/O targets, registered where the queue can; may be NULL */
	size_t reg_bytes;
	uint32_t depth;   /* most I/Os in flight */
	uint32_t max_iov; /* longest I/O vector accepted */
	uint32_t threads; /* posix: worker threads */
	bool async_reads; /* uring: IOSQE_ASYNC on reads, for page-cache-backed files (tmpfs),
	                   * whose reads would otherwise be copied one after another inline */
	const struct tt_log *log;
	/* sync: each I/O moved in pieces of at most piece_bytes (0: whole), and piece(piece_arg,
	 * tag, iov, nr) called on the submitting thread with every byte of it once, in order:
	 * before it is written, after it is read. Other queues ignore both. */
	uint32_t piece_bytes;
	void (*piece)(void *arg, uint64_t tag, const struct iovec *iov, uint32_t nr);
	void *piece_arg;
};

struct tt_ioq;

struct tt_ioq_ops {
	const char *name;
	int (*create)(const struct tt_ioq_conf *conf, struct tt_ioq **out);
	void (*destroy)(struct tt_ioq *e);
	/* Queue and start \p nr I/Os (nr <= depth - in flight). 0, or -errno with none queued. */
	int (*submit)(struct tt_ioq *e, const struct tt_io *ios, uint32_t nr);
	/* Wait until at least \p min I/Os are complete; return how many (<= max) were stored. */
	int (*reap)(struct tt_ioq *e, struct tt_io_done *out, uint32_t max, uint32_t min);
};

/* The part of every queue the generic code sees. Queues embed it first. */
struct tt_ioq {
	const struct tt_ioq_ops *ops;
	uint32_t depth;
	uint32_t max_iov;
	uint32_t inflight;
	uint64_t nr_ios;     /* I/Os accepted */
	uint64_t nr_submits; /* submission calls (system calls for uring, wakeups for posix) */
};

extern const struct tt_ioq_ops tt_ioq_uring;
extern const struct tt_ioq_ops tt_ioq_posix;
/* The submitting thread does each I/O itself, inside submit (a posix lane's queue). */
extern const struct tt_ioq_ops tt_ioq_sync;

int tt_ioq_create(const struct tt_ioq_ops *ops, const struct tt_ioq_conf *conf,
                  struct tt_ioq **out);
void tt_ioq_destroy(struct tt_ioq *e);
/* Checked wrappers: argument and capacity checks, in-flight accounting. */
int tt_ioq_submit(struct tt_ioq *e, const struct tt_io *ios, uint32_t nr);
int tt_ioq_reap(struct tt_ioq *e, struct tt_io_done *out, uint32_t max, uint32_t min);

/*
 * An I/O in progress: its own copy of the vector (or one entry for a plain buffer), so that a
 * short transfer can continue where it stopped. Queues keep one per in-flight I/O.
 */
struct tt_io_state {
	struct tt_io io;
	struct iovec *iov; /* max(1, max_iov) entries, owned by the engine */
	uint32_t nr_iov;   /* entries not yet transferred */
	uint32_t done;     /* bytes transferred */
};

/* Start \p st on \p io. */
void tt_io_state_start(struct tt_io_state *st, const struct tt_io *io);
/* Account \p bytes transferred; returns true when the I/O is complete. */
bool tt_io_state_advance(struct tt_io_state *st, uint32_t bytes);

/* I/O that makes no progress for this long is given up on, and the path it ran on is taken out
 * of service (it may still land in the staging): far beyond any device's worst latency, short
 * enough that a stalled engine fails its calls instead of hanging them. */
#define TT_ENGINE_STALL_MS 30000u

/* ---- the engine table ---- */

/* The bit of enum tutti_mem \p mem in an engine's kv_mems. */
#define TT_KV_MEM(mem) (1u << (mem))

struct tt_engine_ops;

/*
 * One option an engine takes in engine_opts (include/tutti/engine.h, struct tutti_engine_option).
 * An engine's table entry lists its options; tt_engine_open checks the string against them with
 * one parser (options.c), so that every engine refuses alike and says why alike.
 */
struct tt_engine_opt {
	const char *name;
	uint32_t kind;     /* enum tutti_engine_option_kind */
	uint32_t min, max; /* TUTTI_ENGINE_OPTION_INT: the values accepted, inclusive */
	uint32_t def;      /* the default: the number, or the index of its choice */
	/* TUTTI_ENGINE_OPTION_CHOICE: the names, NULL-terminated; a value is its name's index */
	const char *const *choices;
	const char *help; /* one line */
};

/* Parse \p text (key=value pairs separated by commas; NULL or "": every default) against the
 * options of \p ops into vals[] (one per option, in the table's order; defaults where not given).
 * Returns 0, or -EINVAL with one line of the log that names the engine, the key, the value and
 * what is allowed: an unknown key, a pair that is not key=value, a key given twice, a value
 * outside the option's range or choices. */
int tt_engine_opts_parse(const struct tt_engine_ops *ops, const char *text,
                         const struct tt_log *log, uint32_t *vals);

/* Engine posix's option threads, which auto takes too for the thread pool it falls back on. */
extern const struct tt_engine_opt tt_engine_opt_threads;

struct tt_engine_ops {
	const char *name;        /* as tutti_engine_parse spells it */
	uint32_t kind;           /* enum tutti_engine */
	const char *description; /* one line (tutti_engine_info) */
	/* The options it takes (tutti_store_opts.engine_opts), in the order of conf->opt[]: at
	 * most TT_ENGINE_MAX_OPTS. */
	const struct tt_engine_opt *const *opts;
	uint32_t nr_opts;
	/* The KV memories (TT_KV_MEM bits) whose batches the engine's transfer takes; batches of
	 * other KV, and fsck's, go through its CPU path (tt_cpu_transfer). */
	uint32_t kv_mems;
	/* Allocate the engine (embedding struct tt_engine first) and tt_engine_init() it: sizes,
	 * staging, libraries; nothing on disk. */
	int (*open)(const struct tt_engine_conf *conf, struct tt_engine **out);
	/* Optional: set up the engine's own path on the data files, once its queue is attached. */
	int (*attach)(struct tt_engine *e);
	/* Release what open and attach made, ending with tt_engine_fini(). */
	void (*close)(struct tt_engine *e);
	int (*transfer)(struct tt_engine *e, struct tt_batch *b);
	int (*flush)(struct tt_engine *e, uint64_t files);
	void (*stats)(struct tt_engine *e, struct tt_engine_stats *out);
	/* Optional: the engine that moves batches of \p kv (one the table entry takes), when not
	 * this one; see tt_engine_moved_by(). */
	uint32_t (*moved_by)(struct tt_engine *e, const struct tutti_kv *kv);
	/* Optional: make now, for GPU KV \p kv on context \p gpu, what the engine's own GPU path
	 * would make at its first batch beyond the GPU layer's (tt_gpu_prepare); see
	 * tt_engine_prepare(). */
	int (*prepare)(struct tt_engine *e, const struct tutti_kv *kv, struct tt_gpu *gpu);
	/* Optional: layerwise loads launched on the GPU; see tt_engine_launch_open(). */
	int (*launch_open)(struct tt_engine *e, struct tt_batch *b, struct tt_list_mem *mem,
	                   struct tt_launch **out);
	int (*launch_layer)(struct tt_engine *e, struct tt_launch *l, uint32_t layer,
	                    uint32_t *word, uint32_t value, uint64_t *done_ns);
	int (*launch_idle)(struct tt_engine *e, struct tt_launch *l);
	int (*launch_finish)(struct tt_engine *e, struct tt_launch *l);
	void (*quiesce)(struct tt_engine *e);
};

/* One entry per enum tutti_engine (engine.c's table lists them). */
extern const struct tt_engine_ops tt_engine_uring;
extern const struct tt_engine_ops tt_engine_posix;
extern const struct tt_engine_ops tt_engine_gpu_uring;
extern const struct tt_engine_ops tt_engine_gds;
extern const struct tt_engine_ops tt_engine_auto;

/* The entry for enum tutti_engine \p kind, or NULL. */
const struct tt_engine_ops *tt_engine_ops_for(uint32_t kind);

/* One I/O of the CPU path: layers [layer, layer + nr_layers) of one chunk. */
struct tt_unit {
	uint32_t chunk;
	uint32_t layer;
	uint32_t nr_layers;
};

/*
 * A lane of the CPU path: one thread moving units from start to finish on an I/O queue of its
 * own: gather and hash before a write, verify and scatter after a read, so that the CPU work
 * after the I/O is spread over as many threads as there are lanes. It owns the unit slots
 * first_slot + k * slot_stride, k < nr_slots (those below the engine's nr_staging have a staging
 * buffer). The engine's solo lane is the calling thread on the engine's own queue with every slot.
 */
struct tt_lane {
	struct tt_engine *e;
	struct tt_ioq *ioq; /* owned, except the solo lane's */
	uint32_t first_slot, slot_stride, nr_slots;
	struct tt_io *ios;                   /* nr_slots: one submission */
	struct tt_io_done *dones;            /* nr_slots */
	uint32_t *free_staged, *free_direct; /* free slots during a batch, as stacks */
	uint32_t nr_free_staged, nr_free_direct;
	uint64_t verified; /* the batch's bytes this lane checked */
	int rc;            /* the batch's outcome on this lane */
	uint64_t seen;     /* the last batch generation it ran */
	pthread_t tid;
	bool thread; /* tid runs */
	bool owned;  /* ios, dones and the free stacks are the lane's own */
	bool pieces; /* its queue hashes one-object units by pieces (e->slot_hashes) */
};

/* What lanes run: a batch's work on one lane (0 or a negative errno). */
typedef int (*tt_lane_fn)(struct tt_lane *ln, void *arg);

/* The lanes of an engine (made on first use): lane 0 runs on the calling thread, the others on
 * threads of their own, all on one piece of work (a batch's units, a wave's objects), claiming
 * it under lock. */
struct tt_lanes {
	struct tt_lane *lane;
	uint32_t nr;
	pthread_mutex_t lock; /* the work's cursor and outcomes, the fields below */
	pthread_cond_t start, done;
	tt_lane_fn fn;
	void *arg;
	uint64_t gen;  /* pieces of work started */
	uint32_t busy; /* lanes still on it, the caller's lane 0 not counted */
	bool stop;
	/* The engine's log while lanes exist: the caller's, one line at a time (its function need
	 * not expect several threads at once). */
	struct tt_log log;
	const struct tt_log *caller_log;
	pthread_mutex_t log_lock;
};

/* Most lanes an engine runs. */
#define TT_LANES_MAX 64u
/* A lane's reads and writes of page-cache-backed files go in pieces of this size, each hashed
 * on the lane's thread right after it is copied in (or right before it is copied out): small
 * enough to still be in the core's L2 cache, so that the checksum reads cached bytes instead
 * of memory (docs/design.md, "Engines"). */
#define TT_LANE_PIECE_BYTES (128u << 10)

/* A unit slot's running checksum, fed by its queue piece by piece (page-cache lanes). */
struct tt_slot_hash;

/*
 * The part of every engine: its CPU-driven I/O queue on the data files, the staging it moves
 * through (nr_staging buffers of one I/O each), the scratch of its CPU path, and the GPU context
 * for GPU KV. Engines embed it first.
 */
struct tt_engine {
	const struct tt_engine_ops *ops;
	struct tt_engine_conf conf;
	const struct tt_log *log;
	const struct tt_geo *geo;
	/* The data files (attach); page_cache: they are page-cache-backed (tmpfs), so reads are
	 * CPU copies, best spread over io-wq. */
	const int *fds;
	uint32_t nr_fds;
	bool page_cache;
	/* The queue: uring, or posix (the posix engine, or auto where io_uring is unavailable). */
	const struct tt_ioq_ops *ioq_ops;
	bool ioq_fallback; /* auto: fall back to posix where io_uring is refused */
	/* The posix queue's threads, set by the engines that may keep one (posix, auto) from their
	 * option threads; 0: one per unit slot (fewer lanes on page-cache-backed files). */
	uint32_t ioq_threads;
	struct tt_ioq *ioq;
	uint32_t cpu_kind;    /* enum tutti_engine of the queue: what tt_engine_moved_by() says */
	bool ioq_broken;      /* a queue-level failure: refuse further I/O */
	uint8_t *staging;     /* nr_staging * unit_bytes, owned */
	uint32_t nr_staging;  /* staging buffers: most staged I/Os in flight */
	uint32_t nr_units;    /* most I/Os in flight (queue depth); >= nr_staging */
	uint32_t unit_layers; /* objects (layers) per I/O */
	uint64_t unit_bytes;
	/* Per-call scratch with one entry per unit slot. Direct I/O between the files and aligned
	 * host paged KV goes without staging: one vector of up to max_iov block segments per I/O.
	 */
	struct tt_unit *units;
	uint32_t *free_bufs;
	struct tt_io *ios;
	struct tt_io_done *dones;
	uint32_t max_iov;
	struct iovec *unit_iovs;
	/* The CPU path's lanes: the solo lane (the engine's queue) and, for host KV, the lanes of
	 * threads of their own, made on first use (lanes_tried: tried already, NULL: one lane);
	 * with them on page-cache-backed files, one running checksum per unit slot. */
	struct tt_lane solo;
	struct tt_lanes *lanes;
	bool lanes_tried;
	struct tt_slot_hash *slot_hashes;
	/* Waves (waves.c): the object mover's staging, as large as the host staging, made on first
	 * use (stage_ops frees it); for host KV when tests ask for it (host_waves), the CPU twin of
	 * the GPU path with list memory of its own. */
	void *stage;
	const struct tt_objmover_ops *stage_ops;
	void *stage_ctx;
	bool host_waves;
	/* What the caller of a waves transfer waited for, summed over the engine's life: the
	 * storage (a wave's reads not all in, a buffer not yet written out) and the mover (a
	 * wave's copy across PCIe). Written by the one caller under the store's io_lock. */
	uint64_t wave_io_wait_ns, wave_copy_wait_ns;
	struct tt_objmover_twin *twin;
	struct tt_list_mem twin_lists;
	/* GPU KV: a context on its device and the staging pinned and mapped for it, made on first
	 * use. One device per engine. */
	struct tt_gpu *gpu;
	bool staging_mapped;
	/* The object lists of the engines whose GPU moves whole objects (gpu-uring, gds). */
	struct tt_list_mem lists;
};

/* Fill in \p e's part for \p conf and queue \p ioq: size and allocate the staging. Returns 0,
 * -EINVAL (the log says why) or -ENOMEM; tt_engine_fini() releases a partial one. */
int tt_engine_init(struct tt_engine *e, const struct tt_engine_ops *ops,
                   const struct tt_engine_conf *conf, const struct tt_ioq_ops *ioq);
void tt_engine_fini(struct tt_engine *e);
/* The GPU context for KV on \p device (opened on first use, with the staging mapped). */
int tt_engine_gpu(struct tt_engine *e, int device, struct tt_gpu **out);

/* ---- the CPU path (cpu_path.c) ---- */

/* A batch on its way: how its KV is reached, and the CPU path's cursor. */
struct tt_xfer {
	struct tt_engine *e;
	struct tt_batch *b;
	const struct tt_mover_ops *mover; /* chosen by where the KV lives */
	void *mover_ctx;
	uint32_t direct_layers; /* layers per direct I/O of a whole chunk; 0: no direct I/O */
	uint32_t staged_layers; /* layers per staged I/O */
	/* With lanes: the lock over the cursor and the chunks' outcomes (NULL: one thread), and
	 * abort, set when a queue broke down (no lane claims another unit). */
	pthread_mutex_t *lock;
	bool abort;
	uint32_t next_chunk;
	uint32_t next_layer;
	uint32_t round; /* a save's: the first layer of the units every chunk takes in turn */
};

/* The start of every path: every chunk fails with -EIO when the path broke down (\p broken),
 * else the mover is chosen by where the KV lives (opening the GPU context on first use). */
int tt_xfer_start(struct tt_xfer *x, struct tt_engine *e, struct tt_batch *b, bool broken);
/* An engine that is the CPU path alone (uring, posix) on queue \p ioq, and its close. */
int tt_cpu_engine_open(const struct tt_engine_ops *ops, const struct tt_ioq_ops *ioq,
                       const struct tt_engine_conf *conf, struct tt_engine **out);
void tt_cpu_engine_close(struct tt_engine *e);
/* The batch through the queue, staged or direct; see cpu_path.c. */
int tt_cpu_transfer(struct tt_engine *e, struct tt_batch *b);
/* Whether the CPU path moves KV that \p mover copies in waves (tt_waves_transfer). */
bool tt_cpu_waves_take(struct tt_engine *e, const struct tt_mover_ops *mover);
int tt_cpu_flush(struct tt_engine *e, uint64_t files);
void tt_cpu_stats(struct tt_engine *e, struct tt_engine_stats *out);
/* One unit's CPU-side steps (shared by the CPU path and gpu-uring's twin): fill a staging
 * buffer and note checksums (save); check a read against the chunk's checksums, adding the
 * bytes checked to *verified; copy it into the KV (load). Safe on several threads at once for
 * distinct units. */
int tt_unit_gather(const struct tt_xfer *x, const struct tt_unit *u, uint8_t *buf);
bool tt_unit_verify(const struct tt_xfer *x, const struct tt_unit *u, const uint8_t *buf,
                    uint64_t *verified);
int tt_unit_scatter(const struct tt_xfer *x, const struct tt_unit *u, uint8_t *buf);
/* Stop and free the lanes (engine close). */
void tt_lanes_destroy(struct tt_engine *e);
/* The lanes, made on first use; false where the engine has one (one CPU or one unit slot, or
 * they could not be made; the log says why). */
bool tt_lanes_ready(struct tt_engine *e);
/* Start lanes 1.. on \p fn(lane, arg); tt_lanes_join waits for them and returns the first
 * error. Lane 0 is the caller's to run, or not. */
void tt_lanes_start(struct tt_engine *e, tt_lane_fn fn, void *arg);
int tt_lanes_join(struct tt_engine *e);

/* Tags of I/Os that lanes move for an object list (no running checksum: the objects are checked
 * where the KV lives). */
#define TT_TAG_OBJECT (1ull << 63)

/* ---- waves (waves.c): KV the CPU path moves through an object mover ---- */

/*
 * Move batch \p x in waves of whole objects through the staging and the object mover \p om
 * (\p ctx): lanes read (write) each wave's objects while the mover checks and scatters the
 * previous ones (gathers and hashes the next ones). Returns 0, or a negative errno when a queue
 * broke down (every unfinished chunk then failed).
 */
int tt_waves_transfer(struct tt_engine *e, struct tt_xfer *x, const struct tt_objmover_ops *om,
                      void *ctx);
/* How a transfer of \p total objects goes through staging of \p slots object slots: waves of
 * *per_wave objects in *nr_bufs buffers (at most TT_OBJMOVER_BUFS, per_wave x nr_bufs <= slots). */
void tt_waves_cut(uint32_t slots, uint32_t total, uint32_t *per_wave, uint32_t *nr_bufs);
/* Make the object mover's staging for \p om (\p ctx) now rather than at the first wave. */
int tt_waves_prepare(struct tt_engine *e, const struct tt_objmover_ops *om, void *ctx);

/* ---- object lists (obj_lists.c), for the engines whose GPU moves whole objects ---- */

/*
 * The per-layer object lists of a batch: layer l's objects are objs[l * n, (l + 1) * n), one
 * per chunk still in play, in chunk order; ids holds every such chunk's moved block ids; failed
 * has one int per layer. All of it lives in list memory (reused by the next call that uses the
 * same memory).
 */
struct tt_obj_lists {
	struct tt_gpu_obj *objs;
	uint32_t *ids;
	int *failed;
	uint32_t n, nr_ids, nr_layers;
};

/* At least \p bytes of \p m, contents undefined. Returns 0 or -ENOMEM / -ENODEV. */
int tt_list_mem_get(struct tt_list_mem *m, size_t bytes, void **out);
/* Build the lists of \p b; n is 0 when no chunk is in play. Returns 0 or -ENOMEM. */
int tt_obj_lists_make(const struct tt_batch *b, struct tt_list_mem *mem, struct tt_obj_lists *out);
/* Fold the objects' statuses (and, for saves, checksums) into the chunks; \p path names the
 * engine in log lines. */
void tt_obj_lists_results(struct tt_engine *e, struct tt_batch *b, const struct tt_obj_lists *lists,
                          const char *path);

#endif /* TT_ENGINE_IMPL_H */
