/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU path every engine has: a batch through the engine's I/O queue, the store's records
 * (slot headers) and flushes. It is the whole of engines uring and posix (their folders hold
 * only their table entries).
 *
 * A batch's chunks are cut into units: runs of up to unit_layers consecutive objects of one
 * slot, one I/O each. A lane keeps its unit slots busy: it claims units for all its free ones
 * (gathering from paged KV for a staged save), hands them to its queue in one submission, then
 * reaps what completed (checking checksums and scattering into paged KV for a staged load) and
 * refills. Staging memory is fixed at open, so it never grows with the context length; CPU work
 * on one unit overlaps the I/O of the others.
 *
 * Host KV (and fsck) goes through several lanes at once, each a thread with its own queue and its
 * own slots, claiming units from the batch's one cursor: the checksums and copies after the I/O
 * then run on as many cores as there are lanes, instead of one thread checking everything that
 * the queue read in parallel. On page-cache-backed files a read is a CPU copy: a lane's queue
 * then copies inline, on the lane's own thread (uring without IOSQE_ASYNC, posix in the lane
 * itself), one object per I/O, so that the thread that copied an object checks it while it is
 * still in its cache. GPU KV goes through the solo lane: the calling thread on the engine's queue.
 *
 * Direct mode: when every segment of the paged KV is 4 KiB aligned in host memory, a chunk needs
 * no staging or copy: each I/O is a vector of the blocks' segments, and the kernel moves the
 * bytes between the file and the paged blocks. The canonical object layout is exactly the
 * concatenation of those segments, so both modes write the same bytes, and checksums are taken
 * over the same bytes: the staging buffer, or the segments themselves.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
/* For a stack-allocated XXH3_state_t; the state layout is that of the installed library. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#ifdef TT_HAVE_XXH_DISPATCH
/* XXH3's update with the CPU's widest vector unit, chosen at run time (CMakeLists.txt). */
#include <xxh_x86dispatch.h>
#endif

#include "engine/engine_impl.h"
#include "format/format.h"
#include "tutti/engine.h"

/* ---- the engines that are this path alone (src/engine/uring/, src/engine/posix/) ---- */

int
tt_cpu_engine_open(const struct tt_engine_ops *ops, const struct tt_ioq_ops *ioq,
                   const struct tt_engine_conf *conf, struct tt_engine **out)
{
	struct tt_engine *e = tt_calloc(1, sizeof(*e));
	int rc;

	if (e == NULL) {
		return -ENOMEM;
	}
	rc = tt_engine_init(e, ops, conf, ioq);
	if (rc < 0) {
		tt_engine_fini(e);
		tt_free(e);
		return rc;
	}
	*out = e;
	return 0;
}

void
tt_cpu_engine_close(struct tt_engine *e)
{
	tt_engine_fini(e);
	tt_free(e);
}

/* ---- starting a batch ---- */

/*
 * Direct mode is possible when the kernel can move every block segment itself: O_DIRECT needs
 * addresses and lengths aligned, and a whole layer's vector must fit in one I/O.
 */
static uint32_t
direct_layers(const struct tt_engine *e, const struct tutti_kv *kv)
{
	uint64_t per_layer;

	if (kv == NULL || kv->mem != TUTTI_MEM_HOST) {
		return 0;
	}
	per_layer = (uint64_t)e->geo->blocks_per_chunk * kv->segs_per_layer;
	if (per_layer > e->max_iov) {
		return 0;
	}
	for (uint64_t i = 0; i < (uint64_t)e->geo->g.nr_layers * kv->segs_per_layer; i++) {
		const struct tutti_segment *s = &kv->segs[i];

		if (s->base % TUTTI_ALIGN != 0 || s->bytes % TUTTI_ALIGN != 0 ||
		    (kv->nr_blocks > 1 && s->block_stride % TUTTI_ALIGN != 0)) {
			return 0;
		}
	}
	return (uint32_t)TT_MIN((uint64_t)e->unit_layers, e->max_iov / per_layer);
}

int
tt_xfer_start(struct tt_xfer *x, struct tt_engine *e, struct tt_batch *b, bool broken)
{
	*x = (struct tt_xfer){
	    .e = e, .b = b, .mover = &tt_mover_cpu, .staged_layers = e->unit_layers};
	if (broken) {
		tt_batch_fail_all(b, -EIO);
		return -EIO;
	}
	if (b->kv != NULL && b->kv->mem == TUTTI_MEM_CUDA) {
		struct tt_gpu *g;
		int rc = tt_engine_gpu(e, b->kv->device, &g);

		if (rc < 0) {
			tt_batch_fail_all(b, rc);
			return rc;
		}
		x->mover = &tt_mover_cuda;
		x->mover_ctx = g;
	}
	return 0;
}

/* ---- units ---- */

/* Layers per unit of chunk \p c: at most staged_layers. */
static uint32_t
unit_layers(const struct tt_xfer *x, const struct tt_chunk_op *c)
{
	if (c->direct) {
		/* Objects of a chunk are adjacent on disk only when whole. */
		bool whole = c->obj_skip == 0 && c->nr_moved == x->e->geo->blocks_per_chunk;

		return whole ? x->direct_layers : 1;
	}
	return x->staged_layers;
}

/*
 * The next unit at the cursor, without moving it; false when none is left. A load takes each
 * chunk whole in turn. A save takes staged_layers of every chunk in turn, then the next
 * staged_layers: the units in flight belong to many chunks, which lie in different data files
 * (pool.h), so that a filesystem that serialises the writers of one file writes them side by
 * side; whole chunks in turn would keep all of them in one or two files.
 */
static bool
peek_unit(struct tt_xfer *x, struct tt_unit *u)
{
	const struct tt_batch *b = x->b;
	bool save = b->kind == TT_BATCH_SAVE;

	while (x->round < b->layer_end) {
		uint32_t end =
		    save ? TT_MIN(x->round + x->staged_layers, b->layer_end) : b->layer_end;

		while (x->next_chunk < b->nr_chunks) {
			const struct tt_chunk_op *c = &b->chunks[x->next_chunk];

			if (c->status == 0 && x->next_layer < end) {
				u->chunk = x->next_chunk;
				u->layer = x->next_layer;
				u->nr_layers = TT_MIN(unit_layers(x, c), end - x->next_layer);
				return true;
			}
			x->next_chunk++;
			x->next_layer = x->round;
		}
		if (!save) {
			return false;
		}
		x->round = end;
		x->next_chunk = 0;
		x->next_layer = x->round;
	}
	return false;
}

static uint8_t *
unit_buf(const struct tt_engine *e, uint32_t slot)
{
	return e->staging + (uint64_t)slot * e->unit_bytes;
}

/* A unit slot's running checksum: XXH3 over the first \p left bytes its queue hands over. */
struct tt_slot_hash {
	XXH3_state_t st;
	uint64_t left;
	bool on;
};

/* The queue's piece hook (page-cache lanes): the bytes just read, or about to be written. */
static void
slot_hash_piece(void *arg, uint64_t tag, const struct iovec *iov, uint32_t nr)
{
	struct tt_slot_hash *h;

	if ((tag & TT_TAG_OBJECT) != 0) {
		return; /* an object list's I/O: checked where the KV lives */
	}
	h = &((struct tt_engine *)arg)->slot_hashes[tag];
	for (uint32_t i = 0; h->on && i < nr && h->left > 0; i++) {
		size_t len = iov[i].iov_len < h->left ? iov[i].iov_len : h->left;

		XXH3_64bits_update(&h->st, iov[i].iov_base, len);
		h->left -= len;
	}
}

/* XXH3-64 of a layer's object as it sits in paged KV: the moved blocks' segments in order. */
static uint64_t
hash_layer_kv(const struct tutti_kv *kv, uint32_t layer, const uint32_t *ids, uint32_t n)
{
	const struct tutti_segment *segs = tt_kv_layer_segs(kv, layer);
	XXH3_state_t state;

	XXH3_64bits_reset_withSecret(&state, tt_csum_secret, sizeof(tt_csum_secret));
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
			const void *p =
			    (const void *)(uintptr_t)(segs[s].base +
			                              (uint64_t)ids[i] * segs[s].block_stride);

			XXH3_64bits_update(&state, p, segs[s].bytes);
		}
	}
	return XXH3_64bits_digest(&state);
}

/* The vector of a direct unit: each moved block's segments, layer by layer. The entry count
 * never exceeds layers x blocks x segments, which direct_layers() bounds. */
static uint32_t
unit_vector(const struct tt_xfer *x, const struct tt_unit *u, struct iovec *iov)
{
	const struct tutti_kv *kv = x->b->kv;
	const struct tt_chunk_op *c = &x->b->chunks[u->chunk];
	const uint32_t *ids = tt_chunk_ids(c);
	uint32_t n = 0;

	for (uint32_t l = u->layer; l < u->layer + u->nr_layers; l++) {
		const struct tutti_segment *segs = tt_kv_layer_segs(kv, l);

		for (uint32_t i = 0; i < c->nr_moved; i++) {
			for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
				uint8_t *addr =
				    (uint8_t *)(uintptr_t)(segs[s].base +
				                           (uint64_t)ids[i] * segs[s].block_stride);

				/* Adjacent memory (consecutive block ids, say) is one entry: fewer
				 * descriptors per I/O for the device. */
				if (n > 0 &&
				    (uint8_t *)iov[n - 1].iov_base + iov[n - 1].iov_len == addr) {
					iov[n - 1].iov_len += segs[s].bytes;
					continue;
				}
				iov[n].iov_base = addr;
				iov[n].iov_len = segs[s].bytes;
				n++;
			}
		}
	}
	return n;
}

/* The move of one layer of unit \p u: its object in staging buffer \p buf. */
static struct tt_move
unit_move(const struct tt_xfer *x, const struct tt_unit *u, uint8_t *buf, uint32_t i)
{
	const struct tt_chunk_op *c = &x->b->chunks[u->chunk];
	uint64_t skip = (uint64_t)c->obj_skip * x->e->geo->layer_block_bytes;

	return (struct tt_move){
	    .obj = buf + (uint64_t)i * x->e->geo->object_bytes + skip,
	    .block_ids = tt_chunk_ids(c),
	    .nr_blocks = c->nr_moved,
	};
}

/* Save: fill a staging buffer with a unit's objects and note their checksums. */
int
tt_unit_gather(const struct tt_xfer *x, const struct tt_unit *u, uint8_t *buf)
{
	const struct tt_geo *geo = x->e->geo;
	const struct tt_chunk_op *c = &x->b->chunks[u->chunk];
	uint64_t payload = (uint64_t)c->nr_moved * geo->layer_block_bytes;
	int rc = 0;

	for (uint32_t i = 0; rc == 0 && i < u->nr_layers; i++) {
		struct tt_move m = unit_move(x, u, buf, i);

		rc = x->mover->gather(x->mover_ctx, x->b->kv, u->layer + i, &m, 1);
	}
	if (rc == 0) {
		rc = x->mover->sync(x->mover_ctx);
	}
	for (uint32_t i = 0; rc == 0 && i < u->nr_layers; i++) {
		uint8_t *obj = buf + (uint64_t)i * geo->object_bytes;

		/* Padding of a partial or unaligned object is zero, never stale staging bytes. */
		memset(obj + payload, 0, geo->object_bytes - payload);
		c->csums[u->layer + i] = tt_csum(obj, payload);
	}
	return rc;
}

/* Save, direct: the checksums come from the paged KV the I/O vector points at. */
static void
hash_direct_unit(const struct tt_xfer *x, const struct tt_unit *u)
{
	const struct tt_chunk_op *c = &x->b->chunks[u->chunk];

	for (uint32_t l = u->layer; l < u->layer + u->nr_layers; l++) {
		c->csums[l] = hash_layer_kv(x->b->kv, l, tt_chunk_ids(c), c->nr_moved);
	}
}

/* Load and fsck: check a completed read against the checksums of its slot. */
bool
tt_unit_verify(const struct tt_xfer *x, const struct tt_unit *u, const uint8_t *buf,
               uint64_t *verified)
{
	const struct tt_geo *geo = x->e->geo;
	const struct tt_chunk_op *c = &x->b->chunks[u->chunk];
	/* A staged read holds whole objects: hash the blocks the slot holds, as written. */
	uint64_t stored = (uint64_t)c->stored_blocks * geo->layer_block_bytes;

	for (uint32_t i = 0; i < u->nr_layers; i++) {
		uint32_t l = u->layer + i;
		uint64_t h = c->direct ? hash_layer_kv(x->b->kv, l, tt_chunk_ids(c), c->nr_moved)
		                       : tt_csum(buf + (uint64_t)i * geo->object_bytes, stored);

		if (h != c->csums[l]) {
			tt_log_err(x->e->log,
			           "slot %u layer %u: checksum mismatch; dropping the chunk",
			           c->slot, l);
			return false;
		}
		*verified += c->direct ? (uint64_t)c->nr_moved * geo->layer_block_bytes : stored;
	}
	return true;
}

int
tt_unit_scatter(const struct tt_xfer *x, const struct tt_unit *u, uint8_t *buf)
{
	int rc = 0;

	for (uint32_t i = 0; rc == 0 && i < u->nr_layers; i++) {
		struct tt_move m = unit_move(x, u, buf, i);

		rc = x->mover->scatter(x->mover_ctx, x->b->kv, u->layer + i, &m, 1);
	}
	/* The buffer is reused as soon as this returns. */
	return rc == 0 ? x->mover->sync(x->mover_ctx) : rc;
}

/* ---- one lane ---- */

static void
xlock(const struct tt_xfer *x)
{
	if (x->lock != NULL) {
		pthread_mutex_lock(x->lock);
	}
}

static void
xunlock(const struct tt_xfer *x)
{
	if (x->lock != NULL) {
		pthread_mutex_unlock(x->lock);
	}
}

/* Chunk \p c fails with \p rc: lanes share the chunks, so under the batch's lock. */
static void
chunk_fail(struct tt_xfer *x, struct tt_chunk_op *c, int rc, bool corrupt)
{
	xlock(x);
	c->corrupt = c->corrupt || corrupt;
	tt_chunk_fail(c, rc);
	xunlock(x);
}

static bool
chunk_live(struct tt_xfer *x, const struct tt_chunk_op *c)
{
	bool live;

	xlock(x);
	live = c->status == 0;
	xunlock(x);
	return live;
}

/* Free unit slots: those below nr_staging own a staging buffer; the rest serve direct I/O
 * only. */
static bool
take_slot(struct tt_lane *ln, bool direct, uint32_t *s)
{
	if (direct && ln->nr_free_direct > 0) {
		*s = ln->free_direct[--ln->nr_free_direct];
		return true;
	}
	if (ln->nr_free_staged > 0) {
		*s = ln->free_staged[--ln->nr_free_staged];
		return true;
	}
	return false;
}

static void
give_slot(struct tt_lane *ln, uint32_t s)
{
	if (s < ln->e->nr_staging) {
		ln->free_staged[ln->nr_free_staged++] = s;
	} else {
		ln->free_direct[ln->nr_free_direct++] = s;
	}
}

static void
lane_reset(struct tt_lane *ln)
{
	ln->nr_free_staged = 0;
	ln->nr_free_direct = 0;
	for (uint32_t k = ln->nr_slots; k-- > 0;) {
		give_slot(ln, ln->first_slot + k * ln->slot_stride);
	}
	ln->verified = 0;
	ln->rc = 0;
}

/* Prepare unit slot \p s (its unit claimed) as entry \p n of the lane's submission. */
static void
prep_unit(struct tt_xfer *x, struct tt_lane *ln, uint32_t s, uint32_t n)
{
	struct tt_engine *e = x->e;
	const struct tt_unit *u = &e->units[s];
	struct tt_chunk_op *c = &x->b->chunks[u->chunk];
	bool save = x->b->kind == TT_BATCH_SAVE;
	uint8_t op = save ? TT_IO_WRITE : TT_IO_READ;
	uint64_t off = c->off + tt_geo_object_off(e->geo, u->layer);
	/* One object hashed by pieces as its queue moves it: every read, and direct writes (a
	 * staged write's checksum is taken as it is gathered). */
	bool pieces = ln->pieces && u->nr_layers == 1 && (!save || c->direct);

	if (pieces) {
		struct tt_slot_hash *h = &e->slot_hashes[s];

		XXH3_64bits_reset_withSecret(&h->st, tt_csum_secret, sizeof(tt_csum_secret));
		h->left = (uint64_t)(c->direct ? c->nr_moved : c->stored_blocks) *
		          e->geo->layer_block_bytes;
		h->on = true;
	}
	if (c->direct) {
		struct iovec *iov = e->unit_iovs + (size_t)s * e->max_iov;

		if (save && !pieces) {
			hash_direct_unit(x, u);
		}
		ln->ios[n] = (struct tt_io){
		    .tag = s,
		    .off = off + (uint64_t)c->obj_skip * e->geo->layer_block_bytes,
		    .iov = iov,
		    .nr_iov = unit_vector(x, u, iov),
		    .len = (uint32_t)(u->nr_layers * c->nr_moved * e->geo->layer_block_bytes),
		    .file = c->file,
		    .op = op,
		};
		return;
	}
	if (save) {
		int rc = tt_unit_gather(x, u, unit_buf(e, s));

		if (rc < 0) {
			/* The I/O still runs (its buffer is ours), but the chunk is not committed.
			 */
			tt_log_err(e->log, "gathering slot %u from GPU KV failed: %s", c->slot,
			           tutti_strerror(rc));
			chunk_fail(x, c, rc, false);
		}
	}
	ln->ios[n] = (struct tt_io){
	    .tag = s,
	    .off = off,
	    .buf = unit_buf(e, s),
	    .len = (uint32_t)(u->nr_layers * e->geo->object_bytes),
	    .file = c->file,
	    .op = op,
	};
}

/* Claim the next units for the lane's free slots, prepare them and submit them as one batch.
 * Returns the units claimed. */
static uint32_t
fill(struct tt_xfer *x, struct tt_lane *ln)
{
	struct tt_engine *e = x->e;
	uint32_t n = 0, s;
	struct tt_unit u;
	int rc;

	xlock(x);
	while (!x->abort && peek_unit(x, &u) && take_slot(ln, x->b->chunks[u.chunk].direct, &s)) {
		x->next_layer += u.nr_layers;
		e->units[s] = u;
		ln->ios[n++].tag = s;
	}
	xunlock(x);
	for (uint32_t i = 0; i < n; i++) {
		prep_unit(x, ln, (uint32_t)ln->ios[i].tag, i);
	}
	rc = tt_ioq_submit(ln->ioq, ln->ios, n);
	if (rc < 0) {
		tt_log_err(e->log, "submitting %u I/Os failed: %s", n, tutti_strerror(rc));
		for (uint32_t i = 0; i < n; i++) {
			s = (uint32_t)ln->ios[i].tag;
			chunk_fail(x, &x->b->chunks[e->units[s].chunk], rc, false);
			give_slot(ln, s);
		}
	}
	return n;
}

/* A one-object read hashed by pieces: its digest against the checksum of its slot. */
static bool
digest_matches(const struct tt_xfer *x, const struct tt_unit *u, uint64_t digest,
               uint64_t *verified)
{
	const struct tt_chunk_op *c = &x->b->chunks[u->chunk];

	if (digest != c->csums[u->layer]) {
		tt_log_err(x->e->log, "slot %u layer %u: checksum mismatch; dropping the chunk",
		           c->slot, u->layer);
		return false;
	}
	*verified +=
	    (uint64_t)(c->direct ? c->nr_moved : c->stored_blocks) * x->e->geo->layer_block_bytes;
	return true;
}

static void
complete_unit(struct tt_xfer *x, struct tt_lane *ln, const struct tt_io_done *d)
{
	struct tt_engine *e = x->e;
	uint32_t s = (uint32_t)d->tag;
	const struct tt_unit *u = &e->units[s];
	struct tt_chunk_op *c = &x->b->chunks[u->chunk];

	struct tt_slot_hash *h = ln->pieces ? &e->slot_hashes[s] : NULL;
	bool hashed = h != NULL && h->on;
	uint64_t digest = 0;

	if (hashed) {
		h->on = false;
		digest = XXH3_64bits_digest(&h->st);
	}
	if (d->res < 0) {
		tt_log_warn(e->log, "%s of slot %u layers %u..%u failed: %s",
		            x->b->kind == TT_BATCH_SAVE ? "write" : "read", c->slot, u->layer,
		            u->layer + u->nr_layers - 1, tutti_strerror(d->res));
		chunk_fail(x, c, d->res, false);
		return;
	}
	if (x->b->kind == TT_BATCH_SAVE) {
		if (hashed) {
			c->csums[u->layer] = digest;
		}
		return;
	}
	if (!chunk_live(x, c)) {
		return;
	}
	if (hashed ? !digest_matches(x, u, digest, &ln->verified)
	           : !tt_unit_verify(x, u, unit_buf(e, s), &ln->verified)) {
		chunk_fail(x, c, -EBADMSG, true);
		return;
	}
	if (x->b->kind == TT_BATCH_LOAD && !c->direct) {
		int rc = tt_unit_scatter(x, u, unit_buf(e, s));

		if (rc < 0) {
			tt_log_err(e->log, "scattering slot %u into the KV failed: %s", c->slot,
			           tutti_strerror(rc));
			chunk_fail(x, c, rc, false);
		}
	}
}

/*
 * Move units of \p x on lane \p ln until none is left that it can take. A chunk whose I/O or
 * checksum fails gets the error as its status and no further units. Returns 0, or a negative
 * errno when the lane's queue broke down (then every unfinished chunk has failed, the batch is
 * aborted and the engine refuses further I/O).
 */
static int
lane_run(struct tt_lane *ln, struct tt_xfer *x)
{
	struct tt_engine *e = x->e;

	lane_reset(ln);
	for (;;) {
		uint32_t took = fill(x, ln);
		int got;

		if (ln->ioq->inflight == 0) {
			if (took == 0) {
				/* Nothing left, or nothing this lane's slots can carry (staged
				 * units on a lane without staging): the others finish the batch. */
				return 0;
			}
			continue; /* a submission failed; its chunks have failed, go on */
		}
		got = tt_ioq_reap(ln->ioq, ln->dones, ln->nr_slots, 1);
		if (got < 0) {
			/* In-flight I/O may still target the staging: it cannot be reused. */
			xlock(x);
			x->abort = true;
			e->ioq_broken = true;
			tt_batch_fail_all(x->b, got);
			xunlock(x);
			tt_log_err(e->log, "I/O engine failed: %s; the store refuses further I/O",
			           tutti_strerror(got));
			return got;
		}
		for (int i = 0; i < got; i++) {
			complete_unit(x, ln, &ln->dones[i]);
			give_slot(ln, (uint32_t)ln->dones[i].tag);
		}
	}
}

/* Which chunks go by direct I/O: every chunk a save writes, and a load's chunks whose read
 * covers the whole stored payload (its checksum is over all of it). */
static void
choose_direct(struct tt_xfer *x)
{
	struct tt_batch *b = x->b;

	x->direct_layers = direct_layers(x->e, b->kv);
	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		struct tt_chunk_op *c = &b->chunks[i];

		c->direct =
		    x->direct_layers > 0 && c->status == 0 &&
		    (b->kind == TT_BATCH_SAVE || (b->kind == TT_BATCH_LOAD && c->obj_skip == 0 &&
		                                  c->nr_moved == c->stored_blocks));
	}
}

/* ---- lanes ---- */

static void *
lane_main(void *arg)
{
	struct tt_lane *ln = arg;
	struct tt_lanes *L = ln->e->lanes;

	pthread_mutex_lock(&L->lock);
	for (;;) {
		tt_lane_fn fn;
		void *work;

		while (!L->stop && L->gen == ln->seen) {
			pthread_cond_wait(&L->start, &L->lock);
		}
		if (L->stop) {
			break;
		}
		ln->seen = L->gen;
		fn = L->fn;
		work = L->arg;
		pthread_mutex_unlock(&L->lock);
		ln->rc = fn(ln, work);
		pthread_mutex_lock(&L->lock);
		if (--L->busy == 0) {
			pthread_cond_signal(&L->done);
		}
	}
	pthread_mutex_unlock(&L->lock);
	return NULL;
}

/* The lane's scratch: one submission's entries and completions, the free-slot stacks. */
static int
lane_alloc(struct tt_lane *ln)
{
	ln->ios = tt_calloc(ln->nr_slots, sizeof(*ln->ios));
	ln->dones = tt_calloc(ln->nr_slots, sizeof(*ln->dones));
	ln->free_staged = tt_calloc(ln->nr_slots, sizeof(*ln->free_staged));
	ln->free_direct = tt_calloc(ln->nr_slots, sizeof(*ln->free_direct));
	ln->owned = true;
	return ln->ios == NULL || ln->dones == NULL || ln->free_staged == NULL ||
	               ln->free_direct == NULL
	           ? -ENOMEM
	           : 0;
}

static void
lane_free(struct tt_lane *ln)
{
	if (ln->owned) {
		tt_ioq_destroy(ln->ioq);
		tt_free(ln->ios);
		tt_free(ln->dones);
		tt_free(ln->free_staged);
		tt_free(ln->free_direct);
	}
}

void
tt_lanes_destroy(struct tt_engine *e)
{
	struct tt_lanes *L = e->lanes;

	if (L == NULL) {
		return;
	}
	pthread_mutex_lock(&L->lock);
	L->stop = true;
	pthread_cond_broadcast(&L->start);
	pthread_mutex_unlock(&L->lock);
	for (uint32_t i = 0; i < L->nr; i++) {
		if (L->lane[i].thread) {
			pthread_join(L->lane[i].tid, NULL);
		}
		lane_free(&L->lane[i]);
	}
	e->log = L->caller_log;
	tt_aligned_free(e->slot_hashes);
	e->slot_hashes = NULL;
	pthread_cond_destroy(&L->start);
	pthread_cond_destroy(&L->done);
	pthread_mutex_destroy(&L->lock);
	pthread_mutex_destroy(&L->log_lock);
	tt_free(L->lane);
	tt_free(L);
	e->lanes = NULL;
}

static void
serial_log(void *arg, int level, const char *msg)
{
	struct tt_lanes *L = arg;

	pthread_mutex_lock(&L->log_lock);
	L->caller_log->fn(L->caller_log->arg, level, msg);
	pthread_mutex_unlock(&L->log_lock);
}

/* How many lanes: for io_uring one per online CPU; for the posix engine its threads
 * (option threads; by default one per unit slot, but no more than the online CPUs on
 * page-cache-backed files, where every I/O is a copy by the lane's own thread, so that lanes
 * beyond the CPUs only wait for one and slow the others down, E22); never more than the unit
 * slots. */
static uint32_t
lane_count(const struct tt_engine *e)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t cpus = (uint32_t)(online > 0 ? online : 1), n;

	if (e->ioq_ops != &tt_ioq_posix) {
		n = cpus;
	} else if (e->ioq_threads != 0) {
		n = e->ioq_threads;
	} else {
		n = e->page_cache ? TT_MIN(e->nr_units, cpus) : e->nr_units;
	}
	return TT_MIN(TT_MIN(n, e->nr_units), TT_LANES_MAX);
}

static int
lanes_create(struct tt_engine *e, uint32_t nr)
{
	struct tt_lanes *L = tt_calloc(1, sizeof(*L));
	int rc = 0;

	if (L == NULL) {
		return -ENOMEM;
	}
	L->lane = tt_calloc(nr, sizeof(*L->lane));
	if (L->lane == NULL) {
		tt_free(L);
		return -ENOMEM;
	}
	if (e->page_cache) {
		e->slot_hashes = tt_aligned_alloc(e->nr_units * sizeof(*e->slot_hashes));
		if (e->slot_hashes == NULL) {
			tt_free(L->lane);
			tt_free(L);
			return -ENOMEM;
		}
	}
	pthread_mutex_init(&L->lock, NULL);
	pthread_mutex_init(&L->log_lock, NULL);
	pthread_cond_init(&L->start, NULL);
	pthread_cond_init(&L->done, NULL);
	L->nr = nr;
	L->caller_log = e->log;
	if (e->log != NULL && e->log->fn != NULL) {
		L->log = (struct tt_log){.fn = serial_log, .arg = L, .level = e->log->level};
		e->log = &L->log;
	}
	e->lanes = L;
	for (uint32_t i = 0; rc == 0 && i < nr; i++) {
		struct tt_lane *ln = &L->lane[i];
		/* Page-cache-backed files are copied by the lane's own thread, in pieces that it
		 * hashes while they are in its cache: whatever the engine, a read of such a file is
		 * a memcpy by the thread that issues it. */
		struct tt_ioq_conf qc = {
		    .fds = e->fds,
		    .nr_fds = e->nr_fds,
		    .depth = (e->nr_units - i + nr - 1) / nr,
		    .max_iov = e->max_iov,
		    .log = e->log,
		    .piece_bytes = e->page_cache ? TT_LANE_PIECE_BYTES : 0,
		    .piece = e->page_cache ? slot_hash_piece : NULL,
		    .piece_arg = e,
		};
		bool sync = e->page_cache || e->ioq_ops == &tt_ioq_posix;

		*ln = (struct tt_lane){.e = e,
		                       .first_slot = i,
		                       .slot_stride = nr,
		                       .nr_slots = qc.depth,
		                       .pieces = e->page_cache};
		rc = lane_alloc(ln);
		if (rc == 0) {
			rc = tt_ioq_create(sync ? &tt_ioq_sync : e->ioq_ops, &qc, &ln->ioq);
		}
		if (rc == 0 && i > 0) {
			rc = -pthread_create(&ln->tid, NULL, lane_main, ln);
			ln->thread = rc == 0;
		}
	}
	return rc;
}

bool
tt_lanes_ready(struct tt_engine *e)
{
	uint32_t nr;
	int rc;

	if (e->lanes != NULL || e->lanes_tried) {
		return e->lanes != NULL;
	}
	e->lanes_tried = true;
	nr = lane_count(e);
	if (nr < 2) {
		return false;
	}
	rc = lanes_create(e, nr);
	if (rc < 0) {
		tt_log_info(e->log,
		            "CPU path: %u lanes could not be started (%s); one thread moves "
		            "the units",
		            nr, tutti_strerror(rc));
		tt_lanes_destroy(e);
		return false;
	}
	return true;
}

void
tt_lanes_start(struct tt_engine *e, tt_lane_fn fn, void *arg)
{
	struct tt_lanes *L = e->lanes;

	pthread_mutex_lock(&L->lock);
	L->fn = fn;
	L->arg = arg;
	L->gen++;
	L->busy = L->nr - 1;
	pthread_cond_broadcast(&L->start);
	pthread_mutex_unlock(&L->lock);
}

int
tt_lanes_join(struct tt_engine *e)
{
	struct tt_lanes *L = e->lanes;
	int rc = 0;

	pthread_mutex_lock(&L->lock);
	while (L->busy > 0) {
		pthread_cond_wait(&L->done, &L->lock);
	}
	L->fn = NULL;
	L->arg = NULL;
	pthread_mutex_unlock(&L->lock);
	for (uint32_t i = 1; i < L->nr; i++) {
		rc = rc < 0 ? rc : L->lane[i].rc;
	}
	return rc;
}

static int
lane_units(struct tt_lane *ln, void *arg)
{
	return lane_run(ln, arg);
}

static int
run_lanes(struct tt_engine *e, struct tt_xfer *x)
{
	struct tt_lanes *L = e->lanes;
	int rc, rc_lanes;

	x->lock = &L->lock;
	if (e->page_cache) {
		/* One object per I/O: the lane that copied it hashes it in its cache. */
		x->direct_layers = TT_MIN(x->direct_layers, 1u);
		x->staged_layers = 1;
	}
	tt_lanes_start(e, lane_units, x);
	rc = lane_run(&L->lane[0], x);
	rc_lanes = tt_lanes_join(e);
	for (uint32_t i = 0; i < L->nr; i++) {
		x->b->bytes_verified += L->lane[i].verified;
	}
	x->lock = NULL;
	return rc < 0 ? rc : rc_lanes;
}

bool
tt_cpu_waves_take(struct tt_engine *e, const struct tt_mover_ops *mover)
{
	return (mover == &tt_mover_cuda || e->host_waves) &&
	       e->geo->layer_block_bytes > TT_XXH3_MIDSIZE_MAX && tt_lanes_ready(e);
}

/*
 * Move every unit of every chunk whose status is 0: host KV and fsck over the lanes, GPU KV on
 * the solo lane. Returns 0, or a negative errno when a queue broke down (then every unfinished
 * chunk has failed and the engine refuses further I/O).
 */
int
tt_cpu_transfer(struct tt_engine *e, struct tt_batch *b)
{
	struct tt_xfer x;
	int rc;

	rc = tt_xfer_start(&x, e, b, e->ioq_broken);
	if (rc < 0) {
		return rc;
	}
	choose_direct(&x);
	x.next_layer = x.round = b->layer_begin;
	if (x.mover == &tt_mover_cpu && !e->host_waves && tt_lanes_ready(e)) {
		return run_lanes(e, &x);
	}
	/* KV elsewhere (a GPU's) in waves through the object mover, its I/O over the lanes. */
	if (tt_cpu_waves_take(e, x.mover)) {
		if (x.mover == &tt_mover_cuda) {
			return tt_waves_transfer(e, &x, &tt_objmover_cuda, x.mover_ctx);
		}
		return tt_waves_transfer(e, &x, &tt_objmover_twin, NULL);
	}
	e->solo = (struct tt_lane){
	    .e = e,
	    .ioq = e->ioq,
	    .slot_stride = 1,
	    .nr_slots = e->nr_units,
	    .ios = e->ios,
	    .dones = e->dones,
	    .free_staged = e->free_bufs,
	    .free_direct = e->free_bufs + e->nr_staging,
	};
	rc = lane_run(&e->solo, &x);
	b->bytes_verified += e->solo.verified;
	return rc;
}

/* ---- records and flushes ---- */

/* Submit \p nr prepared I/Os and reap them all, res[i] the result of ios[i]. */
static int
submit_all(struct tt_engine *e, struct tt_io *ios, uint32_t nr, int32_t *res)
{
	uint32_t done = 0;
	int rc;

	for (uint32_t i = 0; i < nr; i++) {
		ios[i].tag = i;
	}
	rc = tt_ioq_submit(e->ioq, ios, nr);
	if (rc < 0) {
		return rc;
	}
	while (done < nr) {
		int got = tt_ioq_reap(e->ioq, e->dones, e->nr_units, 1);

		if (got < 0) {
			e->ioq_broken = true;
			return got;
		}
		for (int i = 0; i < got; i++) {
			res[e->dones[i].tag] = e->dones[i].res;
		}
		done += (uint32_t)got;
	}
	return 0;
}

int
tt_engine_io(struct tt_engine *e, struct tt_io *ios, uint32_t nr, int32_t *res)
{
	if (e->ioq_broken) {
		return -EIO;
	}
	for (uint32_t first = 0; first < nr; first += e->nr_units) {
		uint32_t n = TT_MIN(nr - first, e->nr_units);
		int rc = submit_all(e, ios + first, n, res + first);

		if (rc < 0) {
			return rc;
		}
	}
	return 0;
}

int
tt_engine_read_records(struct tt_engine *e, uint32_t nr, uint32_t bytes,
                       void (*where)(void *arg, uint32_t i, uint16_t *file, uint64_t *off),
                       void (*got)(void *arg, uint32_t i, const uint8_t *buf, int32_t res),
                       void *arg)
{
	uint64_t per_buf = e->nr_staging * e->unit_bytes / bytes;
	uint32_t depth = (uint32_t)TT_MIN(per_buf, (uint64_t)e->nr_units);
	uint32_t next = 0, free_top = depth;
	uint32_t *record_of = e->free_bufs; /* scratch: the record each buffer is reading */
	uint32_t *free_bufs;

	if (e->ioq_broken) {
		return -EIO;
	}
	if (depth == 0) {
		return -EINVAL;
	}
	free_bufs = tt_malloc(depth * sizeof(*free_bufs));
	if (free_bufs == NULL) {
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < depth; b++) {
		free_bufs[b] = b;
	}
	while (next < nr || e->ioq->inflight > 0) {
		uint32_t n = 0;
		int done, rc;

		while (free_top > 0 && next < nr) {
			uint32_t b = free_bufs[--free_top];

			record_of[b] = next;
			e->ios[n] = (struct tt_io){
			    .tag = b,
			    .buf = e->staging + (uint64_t)b * bytes,
			    .len = bytes,
			    .op = TT_IO_READ,
			};
			where(arg, next++, &e->ios[n].file, &e->ios[n].off);
			n++;
		}
		rc = tt_ioq_submit(e->ioq, e->ios, n);
		if (rc < 0) {
			tt_free(free_bufs);
			return rc;
		}
		done = tt_ioq_reap(e->ioq, e->dones, e->nr_units, 1);
		if (done < 0) {
			e->ioq_broken = true;
			tt_free(free_bufs);
			return done;
		}
		for (int i = 0; i < done; i++) {
			uint32_t b = (uint32_t)e->dones[i].tag;

			got(arg, record_of[b], e->staging + (uint64_t)b * bytes, e->dones[i].res);
			free_bufs[free_top++] = b;
		}
	}
	tt_free(free_bufs);
	return 0;
}

int
tt_cpu_flush(struct tt_engine *e, uint64_t files)
{
	int32_t res[TT_ENGINE_MAX_FILES];
	struct tt_io ios[TT_ENGINE_MAX_FILES];
	uint32_t nr = 0;
	int rc;

	if (e->nr_fds > TT_ENGINE_MAX_FILES) {
		return -EINVAL;
	}
	for (uint32_t d = 0; d < e->nr_fds; d++) {
		if (files >> d & 1) {
			ios[nr++] = (struct tt_io){.file = (uint16_t)d, .op = TT_IO_FSYNC};
		}
	}
	rc = nr == 0 ? 0 : tt_engine_io(e, ios, nr, res);
	if (rc < 0) {
		return rc;
	}
	for (uint32_t i = 0; i < nr; i++) {
		if (res[i] < 0) {
			tt_log_err(e->log, "flushing data file %u failed: %s", ios[i].file,
			           tutti_strerror(res[i]));
			return res[i];
		}
	}
	return 0;
}

void
tt_cpu_stats(struct tt_engine *e, struct tt_engine_stats *out)
{
	out->io_ops += e->ioq != NULL ? e->ioq->nr_ios : 0;
	out->io_submits += e->ioq != NULL ? e->ioq->nr_submits : 0;
	for (uint32_t i = 0; e->lanes != NULL && i < e->lanes->nr; i++) {
		const struct tt_ioq *q = e->lanes->lane[i].ioq;

		out->io_ops += q != NULL ? q->nr_ios : 0;
		out->io_submits += q != NULL ? q->nr_submits : 0;
	}
	out->staging_bytes = e->nr_staging * e->unit_bytes;
	out->wave_io_wait_ns = e->wave_io_wait_ns;
	out->wave_copy_wait_ns = e->wave_copy_wait_ns;
}
