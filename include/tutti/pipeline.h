/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * The layerwise pipeline: what a serving engine calls at every step and every layer so that a
 * cached prefix loads behind compute and new KV is saved without slowing anyone down.
 *
 * A step (one forward pass of a batch) is declared up front: the chunks to load (a cached
 * prefix) and the chunks to save (KV this step computes). Then, layer by layer, the engine calls
 * tutti_pipeline_wait_layer() before the layer's attention and tutti_pipeline_save_layer() after
 * it, and tutti_pipeline_end_step() at the end. When the KV is in GPU memory the compute stream
 * waits on a device-side signal raised once the layer's objects have landed (a one-thread kernel
 * polls it; on engine gpu-uring a one-thread kernel behind the layer's I/O kernel raises it,
 * elsewhere the pipeline's own thread); wait_layer blocks the host thread only until the layer's
 * read is issued, which it is within the read-ahead window (on the CPU-driven engines issuing a
 * layer reads it), so that no wait on the GPU ever depends on a CUDA call still to come (see
 * tutti_pipeline_wait_layer()). With KV in host memory (CPU mode, the same scheduler with the
 * CPU mover and engines) wait_layer blocks the caller until the layer is loaded.
 *
 * The pipeline's thread runs the scheduler:
 *  - reads first: layer l of the step's loads is read when compute has reached layer
 *    l - readahead (the read-ahead window, from the profile: enough layers of compute to cover
 *    one layer's I/O, plus a margin), in layer order; on engine gpu-uring with GPU KV each layer
 *    is an I/O kernel launched behind the previous one, with no host round trip between them;
 *  - new KV is copied, layer by layer once the compute signals it, into bounded save staging;
 *    when the staging is full the chunk is not stored (counted), compute never waits for it;
 *  - staged chunks are written in slack: only while no step has reads outstanding (so into the
 *    tail of a prefill and into decode steps), in batches sized to about one layer's read time;
 *  - stall ("bubble") time is measured where it happens, per layer, on the GPU (%globaltimer in
 *    the wait kernel) or by the host clock in CPU mode, and reported per step and in the stats;
 *  - compute time per layer is measured between the wait points and refines the profile
 *    online, as the measured read bandwidth refines the storage calibration.
 *
 * One pipeline serves one (store, kv) pair from one host thread (the engine's); the pipeline's
 * calls are not thread-safe against each other. The store may be used by others meanwhile.
 */
#ifndef TUTTI_PIPELINE_H
#define TUTTI_PIPELINE_H

#include "tutti/base.h"
#include "tutti/store.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tutti_pipeline; /* opaque */

struct tutti_pipeline_opts {
	uint32_t size;               /**< = sizeof(struct tutti_pipeline_opts); set by _opts_init */
	uint32_t readahead_layers;   /**< layers read ahead of compute; 0: from the profile (all
	                                  layers without one) */
	uint64_t save_staging_bytes; /**< memory for new KV waiting to be written, in whole
	                                  chunks; default 256 MiB; 0: saves are not staged at all */
	const char *profile_path;    /**< NULL, or a profile written by `tutti profile` */
	uint32_t trace_events;       /**< timeline events kept for tutti_pipeline_write_trace
	                                  (the newest ones); 0: no timeline; default 65536 */
	uint32_t write_batch_chunks; /**< chunks per write in slack; 0: about one layer's read
	                                  time at the calibrated bandwidths (at least 1) */
	uint32_t wait_timeout_ms;    /**< a layer not loaded after this long is released to compute
	                                  as failed (every chunk of the step is then a load
	                                  error, -ETIMEDOUT); default 30000 */
	uint32_t reserved;
};

/** Fill \p opts with defaults and set opts->size. This function can't fail. */
TUTTI_API void tutti_pipeline_opts_init(struct tutti_pipeline_opts *opts);

/**
 * Make a pipeline over \p st for the paged KV \p kv (GPU mode for TUTTI_MEM_CUDA, CPU mode for
 * host memory), starting its thread and allocating all its staging now: nothing it uses grows
 * with the context length.
 * \return 0, or -EINVAL (bad options, a kv of another geometry, a profile_path that is not a
 *         regular file: a FIFO, a device, a directory; logged), -ENOENT (profile_path missing),
 *         -EBADMSG (a profile that does not parse or is for another layer count), -ENOMEM, or the
 *         GPU's error (-ENODEV, -EIO) in GPU mode.
 */
TUTTI_API int tutti_pipeline_create(struct tutti_store *st, const struct tutti_kv *kv,
                                    const struct tutti_pipeline_opts *opts,
                                    struct tutti_pipeline **out);

/**
 * Write every staged chunk, stop the thread and release everything. Steps still outstanding
 * are finished first (in GPU mode their streams must make progress). NULL is allowed.
 */
TUTTI_API void tutti_pipeline_destroy(struct tutti_pipeline *p);

/** A step's plan. Arrays are copied by tutti_pipeline_begin_step(). */
struct tutti_step {
	uint32_t size;                     /**< = sizeof(struct tutti_step) */
	uint32_t nr_loads;                 /**< requests whose chunks are loaded */
	const struct tutti_request *loads; /**< as for tutti_store_load() */
	uint32_t nr_saves;                 /**< requests whose chunks are saved */
	const struct tutti_request *saves; /**< as for tutti_store_save() */
	uint32_t compute_tokens; /**< tokens the step computes (for the profile); may be 0 */
	uint32_t reserved;
	/** GPU mode: the compute stream (a CUDA stream handle; NULL: the legacy default stream).
	 *  The legacy stream waits for, and holds up, the work of blocking streams only: every
	 *  stream the library loads on is created non-blocking, so a layer's wait on it never
	 *  holds up the reads it waits for. */
	void *stream;
};

/**
 * Declare a step and start reading its loads. Save chunks get staging now or never: those that
 * do not fit are counted as skipped (a request's chunks after a skipped one are skipped too,
 * since a chunk is only stored after its parent).
 * \return the step's id (> 0), or -EINVAL (bad requests: see tutti_store_load/save), -EBUSY
 *         (4 steps outstanding: end one first), -ENOMEM.
 */
TUTTI_API int64_t tutti_pipeline_begin_step(struct tutti_pipeline *p,
                                            const struct tutti_step *step);

/**
 * Layer \p layer's loaded KV is needed now. GPU mode: block until the layer's read is issued
 * (its kernels launched on engine gpu-uring; read and copied on the CPU-driven engines), then
 * enqueue on the step's stream a wait for the layer and return. A wait enqueued earlier could
 * deadlock: CUDA loads a kernel's module at its first launch by default, which may wait for
 * every kernel on the device, the wait among them, while the CUDA calls that issue the read
 * wait for the load. CPU mode: block until the layer is loaded (or failed). Either way a layer
 * not issued (loaded) within the wait timeout is released to compute and its chunks fail.
 * Call it for every layer, in order, whether or not the step loads anything.
 * \return 0, or -EINVAL (no step, layer out of range or out of order), -EIO.
 */
TUTTI_API int tutti_pipeline_wait_layer(struct tutti_pipeline *p, uint32_t layer);

/**
 * Layer \p layer's new KV is computed (GPU mode: once the work enqueued on the step's stream so
 * far completes): the step's saves may copy it. Returns at once.
 * \return 0, or -EINVAL (no step, layer out of range or out of order), -EIO.
 */
TUTTI_API int tutti_pipeline_save_layer(struct tutti_pipeline *p, uint32_t layer);

/**
 * End the current step (every layer must have been waited for). Returns at once; staged saves
 * are written later, in slack.
 * \return 0, or -EINVAL (no step, or layers not waited for).
 */
TUTTI_API int tutti_pipeline_end_step(struct tutti_pipeline *p);

/** What one step did. */
struct tutti_step_result {
	uint32_t size;          /**< = sizeof(struct tutti_step_result), set by the caller */
	uint32_t nr_loads;      /**< chunks the step asked to load (entries of load_status) */
	uint64_t load_chunks;   /**< chunks loaded (every layer) */
	uint64_t load_errors;   /**< chunks that failed in some layer: recompute them */
	uint64_t load_bytes;    /**< bytes read */
	uint64_t load_ns;       /**< from begin_step until the last layer was loaded */
	uint64_t stall_ns;      /**< compute waiting for loads, summed over the layers */
	uint64_t saves_staged;  /**< chunks staged for writing */
	uint64_t saves_skipped; /**< chunks not stored because the staging was full */
	uint32_t readahead;     /**< read-ahead window used (layers) */
	uint32_t timed_out;     /**< layers released to compute by the wait timeout */
	/** The caller's thread blocked in tutti_pipeline_wait_layer(), summed over the layers.
	 *  GPU mode: until each layer's read was issued (on the CPU-driven engines that is the
	 *  read itself, and stall_ns, measured on the GPU, then sees only what is left); an upper
	 *  bound on what that blocking cost compute. CPU mode: the stall. */
	uint64_t host_wait_ns;
};

/**
 * The result of step \p step, once final: every layer loaded and, in GPU mode, every wait
 * passed on the GPU. Non-blocking.
 * \param load_status     NULL, or out->nr_loads entries (chunks in request order) as
 *                        tutti_store_load() reports them; a chunk failing in any layer fails.
 * \param layer_stall_ns  NULL, or nr_layers entries: the stall before each layer's compute.
 * \return 0, -EAGAIN (not final yet), -ENOENT (an unknown or forgotten step: the 8 newest are
 *         kept), -EINVAL.
 */
TUTTI_API int tutti_pipeline_step_result(struct tutti_pipeline *p, int64_t step,
                                         struct tutti_step_result *out, int32_t *load_status,
                                         uint64_t *layer_stall_ns);

/** Wait until every staged chunk is written. \return 0, or -EINVAL. */
TUTTI_API int tutti_pipeline_flush(struct tutti_pipeline *p);

struct tutti_pipeline_stats {
	uint32_t size;             /**< = sizeof(struct tutti_pipeline_stats), set by the caller */
	uint32_t readahead;        /**< the current read-ahead window (layers) */
	uint64_t steps;            /**< steps ended */
	uint64_t steps_stalled;    /**< steps whose compute waited for loads at all */
	uint64_t stall_ns;         /**< compute waiting for loads, all steps */
	uint64_t stall_max_ns;     /**< the largest stall of one step */
	uint64_t request_loads;    /**< load requests over all steps */
	uint64_t request_stall_ns; /**< sum over load requests of their step's stall */
	uint64_t layers_loaded;    /**< layer reads issued (a store call, or a GPU launch, each) */
	uint64_t load_chunks, load_errors, load_bytes;
	uint64_t saves_staged;        /**< chunks copied into save staging */
	uint64_t saves_skipped;       /**< chunks not stored: staging full */
	uint64_t saves_written;       /**< staged chunks written and committed */
	uint64_t saves_present;       /**< staged chunks already stored (nothing written) */
	uint64_t save_errors;         /**< staged chunks that failed to write (orphans included) */
	uint64_t save_bytes;          /**< bytes written from staging */
	uint64_t writes_in_slack;     /**< write batches issued */
	uint64_t staging_bytes;       /**< memory this pipeline owns (save staging, signals) */
	uint64_t store_staging_bytes; /**< the store's own I/O staging */
	double read_bytes_per_s;      /**< storage read bandwidth (calibrated, refined online) */
	double write_bytes_per_s;     /**< storage write bandwidth (calibrated, refined online) */
	double compute_ns_per_token;  /**< mean over layers of the profile's compute per token */
	uint64_t host_wait_ns;        /**< the caller's blocking in wait_layer, all steps */
};

/** Copy the counters. \return 0 or -EINVAL (out->size wrong). */
TUTTI_API int tutti_pipeline_get_stats(struct tutti_pipeline *p, struct tutti_pipeline_stats *out);

/**
 * Write the kept timeline (layer reads, waits, compute, copies into staging, writes) as Chrome
 * trace JSON, viewable in Perfetto (ui.perfetto.dev) or chrome://tracing. GPU-measured spans are
 * placed on the host clock. \p path is created or truncated, never through a symbolic link,
 * and only as a regular file. \return 0, -EINVAL (also: \p path is a FIFO, a device or a
 * directory, refused without blocking and logged), -ENODATA (no timeline kept), -ELOOP (\p path
 * is a symbolic link), or the errno of the write.
 */
TUTTI_API int tutti_pipeline_write_trace(struct tutti_pipeline *p, const char *path);

/**
 * The profile the scheduler plans with: storage bandwidths and per-layer compute time per
 * token. Written by `tutti profile` (storage) and by the engine's own measurements (compute),
 * read by tutti_pipeline_create(). A text file: "tutti-profile 1", then "read_bytes_per_s X",
 * "write_bytes_per_s X", and "layer_ns_per_token L X" lines; '#' starts a comment.
 */
struct tutti_profile {
	uint32_t size; /**< = sizeof(struct tutti_profile) */
	uint32_t nr_layers;
	double read_bytes_per_s;    /**< 0: unknown */
	double write_bytes_per_s;   /**< 0: unknown */
	double *layer_ns_per_token; /**< nr_layers entries (0: unknown), owned by the caller */
};

/**
 * Parse the profile at \p path into \p out (out->nr_layers entries of layer_ns_per_token must be
 * provided; lines for other layers fail). \return 0, -ENOENT, -EBADMSG (with the line number
 * logged nowhere: the format is small), -EINVAL (bad arguments, or \p path is not a regular file:
 * a FIFO, refused without blocking, a device, a directory).
 */
TUTTI_API int tutti_profile_read(const char *path, struct tutti_profile *out);

/**
 * Write \p prof to \p path, mode 0644, replaced atomically: written under a new temporary name
 * beside it (created exclusively, so nothing planted there receives it) and renamed over \p path
 * (a symbolic link at \p path is replaced, not followed). \return 0, -EINVAL (bad arguments, or
 * \p path is neither missing, a regular file nor a symbolic link: a FIFO, a socket, a device or
 * a directory is left as it is), or the errno.
 */
TUTTI_API int tutti_profile_write(const char *path, const struct tutti_profile *prof);

/**
 * The profile as the pipeline refined it online (compute measured per layer, bandwidths
 * measured per read and write): out->nr_layers entries are filled. \return 0 or -EINVAL.
 */
TUTTI_API int tutti_pipeline_get_profile(struct tutti_pipeline *p, struct tutti_profile *out);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_PIPELINE_H */
