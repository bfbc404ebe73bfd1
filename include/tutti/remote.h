/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * The remote tier: a cluster-wide pool of chunk records behind the local store, reached through
 * one table of operations that a provider fills (docs/cluster.md). The provider is a distributed
 * object store such as Mooncake Store; the library never speaks a network protocol itself.
 *
 * Objects. A chunk of rank r is one object under the key
 * "<key_prefix><r>/<hex of the chunk key>", whose value is a chunk record: the same 4 KiB header
 * and 4 KiB-aligned layer objects as a slot of the local store (docs/format.md), with the
 * fingerprint of the namespace, the rank and the rank count in the header's store id. A fetched
 * record is checked (header, key, parent key, namespace, every object's checksum) before a byte of
 * it reaches paged KV memory; a record that fails is a load error, never served.
 *
 * Bounded time. Provider calls run on threads the handle owns; a caller waits for a lookup or a
 * fetch at most lookup_timeout_ms or timeout_ms and then fails it with -ETIMEDOUT (the call keeps
 * its memory until the provider returns). After breaker_faults consecutive faults (timeouts,
 * provider errors) the tier is down: calls fail at once with -EHOSTDOWN until a probe call
 * succeeds, tried after breaker_open_ms, doubling up to 30 s while probes fail.
 *
 * Publishing. tutti_remote_publish copies chunks out of paged KV into the handle's publish
 * memory and returns; a thread of the handle puts them into the pool at lowest priority (it waits
 * while lookups or fetches run), skipping chunks the pool already holds, under a bandwidth cap.
 * When the publish memory is full the oldest queued chunk is dropped: the pool is a cache.
 *
 * Thread safety. A handle may be used from several threads at once.
 */
#ifndef TUTTI_REMOTE_H
#define TUTTI_REMOTE_H

#include "tutti/base.h"
#include "tutti/geometry.h"
#include "tutti/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tutti_remote; /* opaque; thread-safe */

/**
 * A provider's operations. Each is called from a thread of the handle, one call at a time per
 * thread, and returns 0 or a negative errno for the whole call (a fault of the tier); per-object
 * results go to the result array. Keys are NUL-terminated ASCII.
 */
struct tutti_remote_ops {
	uint32_t size; /**< = sizeof(struct tutti_remote_ops) */
	/** present[i] = 1 when keys[i] is in the pool, 0 when not. */
	int (*exists)(void *ctx, const char *const *keys, uint32_t n, int32_t *present);
	/** Read object keys[i] into bufs[i] (lens[i] bytes of registered memory); got[i] = the
	 *  object's length, or a negative errno (-ENOENT when absent). */
	int (*get_into)(void *ctx, const char *const *keys, void *const *bufs, const uint64_t *lens,
	                uint32_t n, int64_t *got);
	/** Write lens[i] bytes of bufs[i] (registered memory) as object keys[i]; res[i] = 0
	 * (written or already present) or a negative errno. */
	int (*put_from)(void *ctx, const char *const *keys, void *const *bufs, const uint64_t *lens,
	                uint32_t n, int32_t *res);
	/** Make [addr, addr + len) usable by get_into and put_from (called at open). */
	int (*register_mem)(void *ctx, void *addr, uint64_t len);
	/** Undo register_mem (called at close). */
	int (*unregister_mem)(void *ctx, void *addr, uint64_t len);
};

struct tutti_remote_opts {
	uint32_t size;      /**< = sizeof(struct tutti_remote_opts); set by _opts_init */
	uint32_t key_bytes; /**< bytes per chunk key, 16..64, as in the store; default 32 */
	/** Start of every object key, e.g. "tutti/1/<ns>/<tp>.<pp>/"; 1..192 printable ASCII
	 *  characters, no spaces; copied. Required. */
	const char *key_prefix;
	uint32_t rank;     /**< this process's rank (tensor x pipeline parallel); < nr_ranks */
	uint32_t nr_ranks; /**< ranks sharing a chunk; a lookup hit needs all of them; default 1 */
	const void *ns;    /**< namespace bytes, as the store's; fingerprinted into records */
	uint32_t ns_bytes; /**< length of ns */
	uint32_t timeout_ms;      /**< longest wait for a fetch call; default 1000 */
	uint64_t ring_bytes;      /**< fetch memory (whole records); default 64 MiB */
	uint64_t publish_bytes;   /**< publish memory; 0: no publishing; default 64 MiB */
	uint64_t publish_rate;    /**< publish bytes per second; 0: no cap (the default) */
	uint32_t breaker_faults;  /**< consecutive faults that take the tier down; default 3 */
	uint32_t breaker_open_ms; /**< first wait before a probe; default 1000 */
	/** Longest wait for a lookup, which the scheduler makes between steps; default 50. */
	uint32_t lookup_timeout_ms;
	tutti_log_fn log_fn; /**< where log lines go (caller threads only); NULL: nowhere */
	void *log_arg;       /**< passed to log_fn */
	uint32_t log_level;  /**< most verbose enum tutti_log_level passed on; default WARN */
};

/** Fill \p opts with defaults and set opts->size. This function can't fail. */
TUTTI_API void tutti_remote_opts_init(struct tutti_remote_opts *opts);

/**
 * Open a remote tier for chunks of geometry \p geo through \p ops and \p ctx (the provider's
 * state, which must outlive the handle). Allocates the fetch and publish memory, registers it
 * with the provider and starts the handle's two threads.
 * \return 0, or -EINVAL (bad geometry, options or ops; ring_bytes or a non-zero publish_bytes
 *         below one record), -ENOMEM, or the error of ops->register_mem.
 */
TUTTI_API int tutti_remote_open(const struct tutti_geometry *geo,
                                const struct tutti_remote_ops *ops, void *ctx,
                                const struct tutti_remote_opts *opts, struct tutti_remote **out);

/**
 * Stop the threads (a provider call in progress is waited for; queued publishes are dropped),
 * unregister and free the memory. No other call on \p r may be running. NULL is allowed. This
 * function can't fail.
 */
TUTTI_API void tutti_remote_close(struct tutti_remote *r);

/** Bytes of one chunk record (one object in the pool): the store's slot bytes. */
TUTTI_API uint64_t tutti_remote_record_bytes(const struct tutti_remote *r);

/**
 * How many chunks of the chain \p keys, from chunk \p first on, the pool holds for every rank
 * (stopping at the first chunk any rank lacks). One exists call for all of them.
 * \return 0..nr_keys - first, or -EINVAL, -EHOSTDOWN (tier down), -ETIMEDOUT, or the provider's
 *         error.
 */
TUTTI_API int64_t tutti_remote_lookup(struct tutti_remote *r, const uint8_t *keys, uint32_t nr_keys,
                                      uint32_t first);

/**
 * Fetch this rank's records of chunks [first_chunk, nr_keys) of each request, verify them and
 * scatter them into the paged blocks of \p kv (same request rules as tutti_store_load). Chunks
 * are fetched in batches as large as the fetch memory allows. A chunk that fails, and every later
 * chunk of its request, leaves its blocks untouched.
 * \param status  NULL, or one entry per chunk (in request order): 0 (loaded), -ENOENT (not in the
 *                pool), -EBADMSG (record damaged or forged: wrong length, header, key, parent,
 *                namespace or checksum), -ERANGE (record holds fewer blocks than asked),
 *                -ETIMEDOUT, -EHOSTDOWN, -EBUSY (fetch memory held by calls that timed out),
 *                -ECANCELED (an earlier chunk of the request failed), or the provider's error.
 * \return the number of chunks loaded, or -EINVAL for the whole call.
 */
TUTTI_API int64_t tutti_remote_fetch(struct tutti_remote *r, const struct tutti_kv *kv,
                                     const struct tutti_request *reqs, uint32_t nr_reqs,
                                     int32_t *status);

/**
 * Queue this rank's chunks [first_chunk, nr_keys) of each request for publishing: each is copied
 * from the paged blocks of \p kv into a record now (the blocks may be reused on return). Call it
 * for chunks committed to the local store. skip_blocks must be 0.
 * \param status  NULL, or one entry per chunk: 0 (queued), 1 (published or queued before: not
 *                copied again), -ENOBUFS (no publish memory: not queued), -EHOSTDOWN.
 * \return the number of chunks queued, or -EINVAL (bad arguments, publishing off).
 */
TUTTI_API int64_t tutti_remote_publish(struct tutti_remote *r, const struct tutti_kv *kv,
                                       const struct tutti_request *reqs, uint32_t nr_reqs,
                                       int32_t *status);

/**
 * Wait until every queued publish has been put or dropped, at most \p timeout_ms.
 * \return 0, or -ETIMEDOUT.
 */
TUTTI_API int tutti_remote_flush(struct tutti_remote *r, uint32_t timeout_ms);

struct tutti_remote_stats {
	uint32_t size;            /**< = sizeof(struct tutti_remote_stats), set by the caller */
	uint32_t up;              /**< 1 while the tier is usable, 0 while the breaker is open */
	uint64_t lookups;         /**< tutti_remote_lookup calls answered */
	uint64_t lookup_hits;     /**< chunks found by them */
	uint64_t lookup_ns;       /**< time spent in them */
	uint64_t fetch_chunks;    /**< chunks fetched, verified and scattered */
	uint64_t fetch_bytes;     /**< record bytes of those chunks */
	uint64_t fetch_ns;        /**< time spent in tutti_remote_fetch */
	uint64_t fetch_errors;    /**< chunks that failed to load (every reason) */
	uint64_t verify_failures; /**< records rejected as damaged or forged */
	uint64_t timeouts;        /**< calls that ran past their timeout */
	uint64_t faults;          /**< faults counted by the breaker (timeouts, provider errors) */
	uint64_t breaker_trips;   /**< times the tier went down */
	uint64_t publish_queued;  /**< chunks copied into the publish queue */
	uint64_t publish_chunks;  /**< chunks put into the pool */
	uint64_t publish_bytes;   /**< bytes put into the pool */
	uint64_t publish_present; /**< chunks skipped: already in the pool or queued */
	uint64_t publish_dropped; /**< chunks dropped: queue full, tier down, or put refused */
	uint64_t publish_ns;      /**< time the publish thread spent in provider calls */
};

/**
 * Copy the handle's counters into \p out. out->size must be sizeof(struct tutti_remote_stats).
 * \return 0 or -EINVAL.
 */
TUTTI_API int tutti_remote_get_stats(struct tutti_remote *r, struct tutti_remote_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_REMOTE_H */
