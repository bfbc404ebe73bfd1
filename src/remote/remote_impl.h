/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier handle, shared by the files of this module only.
 *
 * A provider's operations run on two threads of the handle, so that a caller waits a bounded
 * time whatever the provider does.
 *
 * - The read thread (reads.c) runs lookups (exists) and fetches (get_into) in arrival order. A
 *   caller queues a call and waits for it until its deadline; a call whose caller gave up is
 *   "abandoned": the read thread frees it, and the fetch memory it writes into, when the provider
 *   returns. Fetch memory is a ring of record-sized slots; a call owns its slots until then.
 * - The publish thread (publish.c) takes queued records, oldest first, while no read is in
 *   progress, asks which the pool lacks and puts those, pacing itself to publish_rate.
 * - A breaker (breaker.c) counts consecutive faults; at breaker_faults the tier is down until a
 *   probe succeeds.
 *
 * Verification and scattering run on the caller's thread, after its call completed (fetch.c):
 * the handle's threads only ever touch the handle's memory, never paged KV.
 */
#ifndef TT_REMOTE_IMPL_H
#define TT_REMOTE_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/common.h"
#include "format/format.h"
#include "gpu/gpu.h"
#include "kv/kv.h"
#include "mover/mover.h"
#include "plan/plan.h"
#include "remote/record.h"
#include "tutti/remote.h"

/* Longest key prefix (the public header's limit) and longest object key string: the prefix,
 * the rank in decimal and a '/', the chunk key in hex, the NUL. */
#define TT_REMOTE_PREFIX_MAX 192u
#define TT_REMOTE_KEY_STR_MAX (TT_REMOTE_PREFIX_MAX + 12u + 2u * TT_MAX_KEY_BYTES + 1u)
/* The breaker's wait before a probe doubles up to this (the public header's 30 s). */
#define TT_REMOTE_BREAKER_MAX_OPEN_NS (30 * TT_NS_PER_S)
/* Most records of fetch memory, and of publish memory: larger memories are used up to this. */
#define TT_REMOTE_MAX_SLOTS 65536u
/* Records the publish thread puts with one provider call. */
#define TT_REMOTE_PUBLISH_BATCH 8u
/* Remembered published keys (a lossy set). */
#define TT_REMOTE_SEEN_SLOTS 8192u
/* Blocks one GPU mover call may move (the handle's GPU context is sized for it). */
#define TT_REMOTE_GPU_MAX_BLOCKS 4096u

enum tt_remote_job_kind { TT_REMOTE_JOB_EXISTS, TT_REMOTE_JOB_GET };

/* One provider call of the read thread. Owned by the caller until it abandons it, then by the
 * read thread. */
struct tt_remote_job {
	struct tt_remote_job *next;
	enum tt_remote_job_kind kind;
	uint32_t n;
	char **keys;
	void **bufs;
	uint64_t *lens;
	int64_t *got;
	int32_t *present;
	uint32_t *slots; /* ring slots written by a TT_REMOTE_JOB_GET */
	int rc;
	bool done;
	bool abandoned;
};

enum tt_pub_state { TT_PUB_FREE, TT_PUB_QUEUED, TT_PUB_BUSY };

struct tt_pub_slot {
	enum tt_pub_state state;
	uint64_t hash; /* of the key string */
	char key[TT_REMOTE_KEY_STR_MAX];
};

struct tutti_remote {
	struct tt_geo geo;
	struct tutti_remote_ops ops;
	void *ctx;
	struct tt_log log;
	char prefix[TT_REMOTE_PREFIX_MAX + 1];
	uint32_t key_bytes, rank, nr_ranks;
	uint64_t tag; /* of this rank's records */
	uint64_t timeout_ns, lookup_timeout_ns, publish_rate;
	uint64_t record_bytes;

	pthread_mutex_t mu;
	pthread_cond_t read_cv;  /* read thread: a job was queued, or stop */
	pthread_cond_t done_cv;  /* callers: a job is done */
	pthread_cond_t pub_cv;   /* publish thread: work queued, reads finished, or stop */
	pthread_cond_t flush_cv; /* flushers: a publish finished */
	bool stop;
	struct tt_remote_job *head, *tail; /* queued read jobs */
	uint32_t reads_active;             /* lookups and fetches in progress (publishing yields) */

	/* breaker */
	uint32_t breaker_faults, consecutive;
	bool down, probing;
	uint64_t open_ns, retry_at;
	uint64_t first_open_ns;

	/* fetch ring */
	uint8_t *ring;
	uint64_t ring_bytes;
	bool ring_pinned, ring_registered;
	uint32_t nr_ring;
	bool *ring_busy;

	/* publish queue: fifo of queued slots, oldest first */
	uint8_t *pub;
	uint64_t pub_bytes;
	bool pub_pinned, pub_registered;
	uint32_t nr_pub;
	struct tt_pub_slot *pubs;
	uint32_t *fifo;
	uint32_t fifo_head, fifo_len, pub_busy;
	uint64_t next_put_ns; /* pacing */
	uint64_t *seen;       /* TT_REMOTE_SEEN_SLOTS hashes of keys queued or published */

	/* one mover user at a time (the GPU context is not shared between threads) */
	pthread_mutex_t mover_mu;
	struct tt_gpu *gpu;

	pthread_t read_thread, pub_thread;
	bool read_started, pub_started;

	struct tutti_remote_stats stats; /* under mu */
};

/* remote.c: the object key of chunk key \p key for rank \p rank into \p out
 * (TT_REMOTE_KEY_STR_MAX bytes). */
void tt_remote_key_string(const struct tutti_remote *r, uint32_t rank, const uint8_t *key,
                          char *out);
/* remote.c: CLOCK_MONOTONIC \p ns_from_now from now, for timed waits on the handle's
 * condition variables. */
struct timespec tt_remote_deadline(uint64_t ns_from_now);

/* breaker.c, under mu: 0 when a call may go to the provider, -EHOSTDOWN while the tier is down
 * (or a probe is already out); report the outcome of every call that went. */
int tt_breaker_gate(struct tutti_remote *r);
void tt_breaker_report(struct tutti_remote *r, bool fault);

/* reads.c: the read thread's body. */
void *tt_remote_read_main(void *arg);
/* reads.c: a job of \p n keys (with ring slots for a get), in one allocation; NULL when out of
 * memory. */
struct tt_remote_job *tt_remote_job_new(enum tt_remote_job_kind kind, uint32_t n);
/* reads.c, under mu: free \p j and give back its ring slots. */
void tt_remote_job_free(struct tutti_remote *r, struct tt_remote_job *j);
/*
 * reads.c: run \p j on the read thread and wait for it until the deadline. Under mu. Returns 0
 * when the job is done (the caller owns it again), -ETIMEDOUT when it was abandoned (the read
 * thread owns it now), -ESHUTDOWN when the handle is closing.
 */
int tt_remote_run_job(struct tutti_remote *r, struct tt_remote_job *j, uint64_t timeout_ns);
/* reads.c, under mu: a lookup or fetch ended (the caller counted it in reads_active). */
void tt_remote_reads_end(struct tutti_remote *r);

/* chunks.c: the mover for \p kv: the CPU's for host memory, the handle's GPU context for
 * device memory (opened on first use). Under mover_mu. */
int tt_remote_mover(struct tutti_remote *r, const struct tutti_kv *kv,
                    const struct tt_mover_ops **ops, void **ctx);
/* chunks.c: what the record of chunk \p k of \p q must say about itself. */
void tt_remote_record_id(const struct tutti_remote *r, const struct tutti_request *q, uint32_t k,
                         struct tt_record_id *id);

/* publish.c, under mu: note that the key hashed \p h is in the pool or queued for it (\p on),
 * or forget it. */
void tt_remote_seen_set(struct tutti_remote *r, uint64_t h, bool on);
/* publish.c: the publish thread's body. */
void *tt_remote_publish_main(void *arg);

#endif /* TT_REMOTE_IMPL_H */
