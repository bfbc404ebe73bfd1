/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU path every engine has: a batch through the engine's I/O queue, the store's records
 * (slot headers) and flushes. It is the whole of engines uring and posix.
 *
 * A batch's chunks are cut into units: runs of up to unit_layers consecutive objects of one
 * slot, one I/O each. The path keeps the unit slots busy: it fills all free ones (gathering from
 * paged KV for a staged save), hands the whole batch to the queue in one submission, then reaps
 * what completed (checking checksums and scattering into paged KV for a staged load) and
 * refills. Staging memory is fixed at open, so it never grows with the context length; CPU work
 * on one unit overlaps the I/O of the others.
 *
 * Direct mode: when every segment of the paged KV is 4 KiB aligned in host memory, a chunk needs
 * no staging or copy: each I/O is a vector of the blocks' segments, and the kernel moves the
 * bytes between the file and the paged blocks. The canonical object layout is exactly the
 * concatenation of those segments, so both modes write the same bytes, and checksums are taken
 * over the same bytes: the staging buffer, or the segments themselves.
 */
#include <errno.h>
#include <string.h>
/* For a stack-allocated XXH3_state_t; the state layout is that of the installed library. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#ifdef TT_HAVE_XXH_DISPATCH
/* XXH3's update with the CPU's widest vector unit, chosen at run time (CMakeLists.txt). */
#include <xxh_x86dispatch.h>
#endif

#include "engine/engine_impl.h"
#include "format/format.h"
#include "tutti/store.h"

/* ---- the engines that are this path alone: uring and posix ---- */

static int
cpu_open(const struct tt_engine_ops *ops, const struct tt_ioq_ops *ioq,
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

static int
uring_open(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	return cpu_open(&tt_engine_uring, &tt_ioq_uring, conf, out);
}

static int
posix_open(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	return cpu_open(&tt_engine_posix, &tt_ioq_posix, conf, out);
}

static void
cpu_close(struct tt_engine *e)
{
	tt_engine_fini(e);
	tt_free(e);
}

const struct tt_engine_ops tt_engine_uring = {
    .name = "uring",
    .kind = TUTTI_ENGINE_URING,
    .kv_mems = TT_KV_MEM(TUTTI_MEM_HOST) | TT_KV_MEM(TUTTI_MEM_CUDA),
    .open = uring_open,
    .close = cpu_close,
    .transfer = tt_cpu_transfer,
    .flush = tt_cpu_flush,
    .stats = tt_cpu_stats,
};

const struct tt_engine_ops tt_engine_posix = {
    .name = "posix",
    .kind = TUTTI_ENGINE_POSIX,
    .kv_mems = TT_KV_MEM(TUTTI_MEM_HOST) | TT_KV_MEM(TUTTI_MEM_CUDA),
    .open = posix_open,
    .close = cpu_close,
    .transfer = tt_cpu_transfer,
    .flush = tt_cpu_flush,
    .stats = tt_cpu_stats,
};

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
	*x = (struct tt_xfer){.e = e, .b = b, .mover = &tt_mover_cpu};
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

/* The next unit at the cursor, without moving it; false when none is left. */
static bool
peek_unit(struct tt_xfer *x, struct tt_unit *u)
{
	const struct tt_batch *b = x->b;

	while (x->next_chunk < b->nr_chunks) {
		const struct tt_chunk_op *c = &b->chunks[x->next_chunk];

		if (c->status == 0 && x->next_layer < b->layer_end) {
			uint32_t layers = x->e->unit_layers;

			if (c->direct) {
				/* Objects of a chunk are adjacent on disk only when whole. */
				bool whole =
				    c->obj_skip == 0 && c->nr_moved == x->e->geo->blocks_per_chunk;

				layers = whole ? x->direct_layers : 1;
			}
			u->chunk = x->next_chunk;
			u->layer = x->next_layer;
			u->nr_layers = TT_MIN(layers, b->layer_end - x->next_layer);
			return true;
		}
		x->next_chunk++;
		x->next_layer = b->layer_begin;
	}
	return false;
}

static uint8_t *
unit_buf(const struct tt_engine *e, uint32_t slot)
{
	return e->staging + (uint64_t)slot * e->unit_bytes;
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
tt_unit_verify(const struct tt_xfer *x, const struct tt_unit *u, const uint8_t *buf)
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
		x->b->bytes_verified +=
		    c->direct ? (uint64_t)c->nr_moved * geo->layer_block_bytes : stored;
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

/* ---- the pipeline ---- */

/* Free unit slots: [0, nr_staging) own a staging buffer; the rest serve direct I/O only. */
struct slots {
	uint32_t *staged;
	uint32_t nr_staged;
	uint32_t *direct;
	uint32_t nr_direct;
};

static bool
take_slot(struct slots *fs, bool direct, uint32_t *b)
{
	if (direct && fs->nr_direct > 0) {
		*b = fs->direct[--fs->nr_direct];
		return true;
	}
	if (fs->nr_staged > 0) {
		*b = fs->staged[--fs->nr_staged];
		return true;
	}
	return false;
}

static void
give_slot(const struct tt_engine *e, struct slots *fs, uint32_t b)
{
	if (b < e->nr_staging) {
		fs->staged[fs->nr_staged++] = b;
	} else {
		fs->direct[fs->nr_direct++] = b;
	}
}

/* Prepare unit \p u in unit slot \p s as I/O number \p n of the batch. */
static void
prep_unit(struct tt_xfer *x, const struct tt_unit *u, uint32_t s, uint32_t n)
{
	struct tt_engine *e = x->e;
	struct tt_chunk_op *c = &x->b->chunks[u->chunk];
	bool save = x->b->kind == TT_BATCH_SAVE;
	uint8_t op = save ? TT_IO_WRITE : TT_IO_READ;
	uint64_t off = c->off + tt_geo_object_off(e->geo, u->layer);

	e->units[s] = *u;
	if (c->direct) {
		struct iovec *iov = e->unit_iovs + (size_t)s * e->max_iov;

		if (save) {
			hash_direct_unit(x, u);
		}
		e->ios[n] = (struct tt_io){
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
			tt_chunk_fail(c, rc);
		}
	}
	e->ios[n] = (struct tt_io){
	    .tag = s,
	    .off = off,
	    .buf = unit_buf(e, s),
	    .len = (uint32_t)(u->nr_layers * e->geo->object_bytes),
	    .file = c->file,
	    .op = op,
	};
}

/* Fill free unit slots with the next units and submit them as one batch. */
static void
fill(struct tt_xfer *x, struct slots *fs)
{
	struct tt_engine *e = x->e;
	uint32_t n = 0, s;
	struct tt_unit u;
	int rc;

	while (peek_unit(x, &u) && take_slot(fs, x->b->chunks[u.chunk].direct, &s)) {
		x->next_layer += u.nr_layers;
		prep_unit(x, &u, s, n++);
	}
	rc = tt_ioq_submit(e->ioq, e->ios, n);
	if (rc < 0) {
		tt_log_err(e->log, "submitting %u I/Os failed: %s", n, tutti_strerror(rc));
		for (uint32_t i = 0; i < n; i++) {
			s = (uint32_t)e->ios[i].tag;
			tt_chunk_fail(&x->b->chunks[e->units[s].chunk], rc);
			give_slot(e, fs, s);
		}
	}
}

static void
complete_unit(struct tt_xfer *x, const struct tt_io_done *d)
{
	struct tt_engine *e = x->e;
	uint32_t s = (uint32_t)d->tag;
	const struct tt_unit *u = &e->units[s];
	struct tt_chunk_op *c = &x->b->chunks[u->chunk];

	if (d->res < 0) {
		tt_log_warn(e->log, "%s of slot %u layers %u..%u failed: %s",
		            x->b->kind == TT_BATCH_SAVE ? "write" : "read", c->slot, u->layer,
		            u->layer + u->nr_layers - 1, tutti_strerror(d->res));
		tt_chunk_fail(c, d->res);
		return;
	}
	if (x->b->kind == TT_BATCH_SAVE || c->status != 0) {
		return;
	}
	if (!tt_unit_verify(x, u, unit_buf(e, s))) {
		c->corrupt = true;
		tt_chunk_fail(c, -EBADMSG);
		return;
	}
	if (x->b->kind == TT_BATCH_LOAD && !c->direct) {
		int rc = tt_unit_scatter(x, u, unit_buf(e, s));

		if (rc < 0) {
			tt_log_err(e->log, "scattering slot %u into the KV failed: %s", c->slot,
			           tutti_strerror(rc));
			tt_chunk_fail(c, rc);
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

/*
 * Move every unit of every chunk whose status is 0. A chunk whose I/O or checksum fails gets
 * the error as its status and no further units. Returns 0, or a negative errno when the queue
 * broke down (then every unfinished chunk has failed and the queue is unusable).
 */
int
tt_cpu_transfer(struct tt_engine *e, struct tt_batch *b)
{
	struct tt_xfer x;
	struct slots fs;
	int rc;

	rc = tt_xfer_start(&x, e, b, e->ioq_broken);
	if (rc < 0) {
		return rc;
	}
	choose_direct(&x);
	x.next_layer = b->layer_begin;
	fs.staged = e->free_bufs;
	fs.nr_staged = 0;
	fs.direct = e->free_bufs + e->nr_staging;
	fs.nr_direct = 0;
	for (uint32_t s = e->nr_units; s-- > 0;) {
		give_slot(e, &fs, s);
	}
	for (;;) {
		int got;

		fill(&x, &fs);
		if (e->ioq->inflight == 0) {
			struct tt_unit u;

			if (!peek_unit(&x, &u)) {
				return 0;
			}
			continue; /* a submission failed; its chunks have failed, go on */
		}
		got = tt_ioq_reap(e->ioq, e->dones, e->nr_units, 1);
		if (got < 0) {
			/* In-flight I/O may still target the staging: it cannot be reused. */
			e->ioq_broken = true;
			tt_log_err(e->log, "I/O engine failed: %s; the store refuses further I/O",
			           tutti_strerror(got));
			tt_batch_fail_all(b, got);
			return got;
		}
		for (int i = 0; i < got; i++) {
			complete_unit(&x, &e->dones[i]);
			give_slot(e, &fs, (uint32_t)e->dones[i].tag);
		}
	}
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
tt_cpu_flush(struct tt_engine *e)
{
	int32_t res[TT_ENGINE_MAX_FILES];
	struct tt_io ios[TT_ENGINE_MAX_FILES];
	int rc;

	if (e->nr_fds > TT_ENGINE_MAX_FILES) {
		return -EINVAL;
	}
	for (uint32_t d = 0; d < e->nr_fds; d++) {
		ios[d] = (struct tt_io){.file = (uint16_t)d, .op = TT_IO_FSYNC};
	}
	rc = tt_engine_io(e, ios, e->nr_fds, res);
	if (rc < 0) {
		return rc;
	}
	for (uint32_t d = 0; d < e->nr_fds; d++) {
		if (res[d] < 0) {
			tt_log_err(e->log, "flushing directory %u failed: %s", d,
			           tutti_strerror(res[d]));
			return res[d];
		}
	}
	return 0;
}

void
tt_cpu_stats(struct tt_engine *e, struct tt_engine_stats *out)
{
	out->io_ops += e->ioq != NULL ? e->ioq->nr_ios : 0;
	out->io_submits += e->ioq != NULL ? e->ioq->nr_submits : 0;
	out->staging_bytes = e->nr_staging * e->unit_bytes;
}
