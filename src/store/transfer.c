/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transfer pipeline shared by loads, saves and fsck: planning a call into chunks, then a
 * bounded I/O pipeline over them.
 *
 * A call is split into chunks (one per key moved) and each chunk into units: runs of up to
 * unit_layers consecutive objects of its slot, one I/O each. The pipeline keeps the unit slots
 * busy: it fills all free ones (gathering from paged KV for a staged save), hands the whole batch
 * to the engine in one submission, then reaps what completed (checking checksums and scattering
 * into paged KV for a staged load) and refills. Staging memory is fixed at open, so it never
 * grows with the context length; CPU work on one unit overlaps the I/O of the others.
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

#include "format/format.h"
#include "store/store_impl.h"

/* ---- planning ---- */

static int
check_request(const struct tutti_store *st, const struct tutti_kv *kv,
              const struct tutti_request *r, bool load, uint32_t *nr_chunks)
{
	uint64_t bpc = st->geo.blocks_per_chunk, moved, total;

	if (r->size != sizeof(*r) || r->reserved != 0 || r->keys == NULL || r->nr_keys == 0 ||
	    r->first_chunk >= r->nr_keys || r->nr_blocks == 0 || r->block_ids == NULL) {
		return -EINVAL;
	}
	if (r->skip_blocks >= bpc || (!load && r->skip_blocks != 0)) {
		return -EINVAL;
	}
	moved = r->nr_keys - r->first_chunk;
	total = (uint64_t)r->skip_blocks + r->nr_blocks;
	/* Every chunk but the last is whole; the last holds at least one block. */
	if (total <= (moved - 1) * bpc || total > moved * bpc) {
		tt_log_err(&st->log,
		           "request of %u chunks from chunk %u has %u blocks (skip %u); "
		           "%u blocks per chunk",
		           r->nr_keys, r->first_chunk, r->nr_blocks, r->skip_blocks, (unsigned)bpc);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < r->nr_blocks; i++) {
		if (r->block_ids[i] >= kv->nr_blocks) {
			tt_log_err(&st->log, "block id %u is beyond the %u registered blocks",
			           r->block_ids[i], kv->nr_blocks);
			return -EINVAL;
		}
	}
	*nr_chunks = (uint32_t)moved;
	return 0;
}

int
tt_plan_chunks(const struct tutti_store *st, const struct tutti_kv *kv,
               const struct tutti_request *reqs, uint32_t nr_reqs, bool load,
               struct tt_chunk_op **out, uint32_t *nr_out)
{
	uint64_t nr = 0, bpc = st->geo.blocks_per_chunk;
	struct tt_chunk_op *chunks;
	uint32_t c = 0;

	if (kv == NULL || (reqs == NULL && nr_reqs > 0) || !tt_geo_equal(&kv->geo, &st->geo)) {
		return -EINVAL;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		uint32_t n;
		int rc = check_request(st, kv, &reqs[i], load, &n);

		if (rc < 0) {
			return rc;
		}
		nr += n;
	}
	if (nr > UINT32_MAX) {
		return -EINVAL;
	}
	chunks = tt_calloc(nr, sizeof(*chunks));
	if (chunks == NULL) {
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nr_reqs; i++) {
		const struct tutti_request *r = &reqs[i];
		uint64_t total = (uint64_t)r->skip_blocks + r->nr_blocks;

		for (uint32_t k = r->first_chunk; k < r->nr_keys; k++, c++) {
			uint64_t start = (uint64_t)(k - r->first_chunk) * bpc;
			uint64_t end = TT_MIN(start + bpc, total);
			uint64_t from = TT_MAX(start, (uint64_t)r->skip_blocks);

			chunks[c] = (struct tt_chunk_op){
			    .req = r,
			    .key = k,
			    .slot = TT_NO_SLOT,
			    .id_off = (uint32_t)(from - r->skip_blocks),
			    .nr_moved = (uint32_t)(end - from),
			    .obj_skip = (uint32_t)(from - start),
			    .nr_blocks = (uint32_t)(end - start),
			};
		}
	}
	*out = chunks;
	*nr_out = c;
	return 0;
}

void
tt_fail_chunk(struct tt_chunk_op *c, int rc)
{
	if (c->status == 0) {
		c->status = rc;
	}
}

void
tt_unpin_all(struct tutti_store *st, struct tt_chunk_op *chunks, uint32_t nr)
{
	for (uint32_t i = 0; i < nr; i++) {
		if (chunks[i].pinned) {
			/* The last pin of a chunk removed as damaged releases its slot. */
			if (tt_index_unpin(st->idx, chunks[i].slot)) {
				tt_pool_free(st->pool, chunks[i].slot);
			}
			chunks[i].pinned = false;
		}
	}
}

void
tt_drop_chunk(struct tutti_store *st, uint32_t slot)
{
	if (tt_index_kill(st->idx, slot) == 1) {
		tt_pool_free(st->pool, slot);
	}
}

/*
 * Direct mode is possible when the kernel can move every block segment itself: O_DIRECT needs
 * addresses and lengths aligned, and a whole layer's vector must fit in one I/O.
 */
uint32_t
tt_direct_layers(const struct tutti_store *st, const struct tutti_kv *kv)
{
	uint64_t per_layer;

	if (kv == NULL || kv->mem != TUTTI_MEM_HOST) {
		return 0;
	}
	per_layer = (uint64_t)st->geo.blocks_per_chunk * kv->segs_per_layer;
	if (per_layer > st->max_iov) {
		return 0;
	}
	for (uint64_t i = 0; i < (uint64_t)st->geo.g.nr_layers * kv->segs_per_layer; i++) {
		const struct tutti_segment *s = &kv->segs[i];

		if (s->base % TUTTI_ALIGN != 0 || s->bytes % TUTTI_ALIGN != 0 ||
		    (kv->nr_blocks > 1 && s->block_stride % TUTTI_ALIGN != 0)) {
			return 0;
		}
	}
	return (uint32_t)TT_MIN((uint64_t)st->unit_layers, st->max_iov / per_layer);
}

/* ---- units ---- */

/* The next unit at the cursor, without moving it; false when none is left. */
static bool
peek_unit(struct tt_transfer *t, struct tt_unit *u)
{
	while (t->next_chunk < t->nr_chunks) {
		const struct tt_chunk_op *c = &t->chunks[t->next_chunk];

		if (c->status == 0 && t->next_layer < t->layer_end) {
			uint32_t layers = t->st->unit_layers;

			if (c->direct) {
				/* Objects of a chunk are adjacent on disk only when whole. */
				bool whole =
				    c->obj_skip == 0 && c->nr_moved == t->st->geo.blocks_per_chunk;

				layers = whole ? t->direct_layers : 1;
			}
			u->chunk = t->next_chunk;
			u->layer = t->next_layer;
			u->nr_layers = TT_MIN(layers, t->layer_end - t->next_layer);
			return true;
		}
		t->next_chunk++;
		t->next_layer = t->layer_begin;
	}
	return false;
}

static uint8_t *
unit_buf(const struct tutti_store *st, uint32_t b)
{
	return st->staging + (uint64_t)b * st->unit_bytes;
}

static const uint32_t *
chunk_ids(const struct tt_chunk_op *c)
{
	return c->req->block_ids + c->id_off;
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
 * never exceeds layers x blocks x segments, which tt_direct_layers() bounds. */
static uint32_t
unit_vector(const struct tt_transfer *t, const struct tt_unit *u, struct iovec *iov)
{
	const struct tt_chunk_op *c = &t->chunks[u->chunk];
	const uint32_t *ids = chunk_ids(c);
	uint32_t n = 0;

	for (uint32_t l = u->layer; l < u->layer + u->nr_layers; l++) {
		const struct tutti_segment *segs = tt_kv_layer_segs(t->kv, l);

		for (uint32_t i = 0; i < c->nr_moved; i++) {
			for (uint32_t s = 0; s < t->kv->segs_per_layer; s++) {
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
unit_move(const struct tt_transfer *t, const struct tt_unit *u, uint8_t *buf, uint32_t i)
{
	const struct tt_chunk_op *c = &t->chunks[u->chunk];
	uint64_t skip = (uint64_t)c->obj_skip * t->st->geo.layer_block_bytes;

	return (struct tt_move){
	    .obj = buf + (uint64_t)i * t->st->geo.object_bytes + skip,
	    .block_ids = chunk_ids(c),
	    .nr_blocks = c->nr_moved,
	};
}

/* Save: fill a staging buffer with a unit's objects and note their checksums. */
int
tt_unit_gather(const struct tt_transfer *t, const struct tt_unit *u, uint8_t *buf)
{
	const struct tutti_store *st = t->st;
	const struct tt_chunk_op *c = &t->chunks[u->chunk];
	uint64_t payload = (uint64_t)c->nr_moved * st->geo.layer_block_bytes;
	int rc = 0;

	for (uint32_t i = 0; rc == 0 && i < u->nr_layers; i++) {
		struct tt_move m = unit_move(t, u, buf, i);

		rc = t->mover->gather(t->mover_ctx, t->kv, u->layer + i, &m, 1);
	}
	if (rc == 0) {
		rc = t->mover->sync(t->mover_ctx);
	}
	for (uint32_t i = 0; rc == 0 && i < u->nr_layers; i++) {
		uint8_t *obj = buf + (uint64_t)i * st->geo.object_bytes;

		/* Padding of a partial or unaligned object is zero, never stale staging bytes. */
		memset(obj + payload, 0, st->geo.object_bytes - payload);
		t->csums[(uint64_t)u->chunk * st->geo.g.nr_layers + u->layer + i] =
		    tt_csum(obj, payload);
	}
	return rc;
}

/* Save, direct: the checksums come from the paged KV the I/O vector points at. */
static void
hash_direct_unit(const struct tt_transfer *t, const struct tt_unit *u)
{
	const struct tt_chunk_op *c = &t->chunks[u->chunk];

	for (uint32_t l = u->layer; l < u->layer + u->nr_layers; l++) {
		t->csums[(uint64_t)u->chunk * t->st->geo.g.nr_layers + l] =
		    hash_layer_kv(t->kv, l, chunk_ids(c), c->nr_moved);
	}
}

/* Load and fsck: check a completed read against the checksums of its slot. */
bool
tt_unit_verify(struct tt_transfer *t, const struct tt_unit *u, const uint8_t *buf)
{
	const struct tutti_store *st = t->st;
	const struct tt_chunk_op *c = &t->chunks[u->chunk];
	const uint64_t *csums = tt_slot_csums(st, c->slot);
	/* A staged read holds whole objects: hash the blocks the slot holds, as written. */
	uint64_t stored = (uint64_t)c->stored_blocks * st->geo.layer_block_bytes;

	for (uint32_t i = 0; i < u->nr_layers; i++) {
		uint32_t l = u->layer + i;
		uint64_t h = c->direct ? hash_layer_kv(t->kv, l, chunk_ids(c), c->nr_moved)
		                       : tt_csum(buf + (uint64_t)i * st->geo.object_bytes, stored);

		if (h != csums[l]) {
			tt_log_err(&st->log,
			           "slot %u layer %u: checksum mismatch; dropping the chunk",
			           c->slot, l);
			return false;
		}
		t->bytes_verified +=
		    c->direct ? (uint64_t)c->nr_moved * st->geo.layer_block_bytes : stored;
	}
	return true;
}

int
tt_unit_scatter(const struct tt_transfer *t, const struct tt_unit *u, uint8_t *buf)
{
	int rc = 0;

	for (uint32_t i = 0; rc == 0 && i < u->nr_layers; i++) {
		struct tt_move m = unit_move(t, u, buf, i);

		rc = t->mover->scatter(t->mover_ctx, t->kv, u->layer + i, &m, 1);
	}
	/* The buffer is reused as soon as this returns. */
	return rc == 0 ? t->mover->sync(t->mover_ctx) : rc;
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
give_slot(const struct tutti_store *st, struct slots *fs, uint32_t b)
{
	if (b < st->nr_staging) {
		fs->staged[fs->nr_staged++] = b;
	} else {
		fs->direct[fs->nr_direct++] = b;
	}
}

/* Prepare unit \p u in unit slot \p b as I/O number \p n of the batch. */
static void
prep_unit(struct tt_transfer *t, const struct tt_unit *u, uint32_t b, uint32_t n)
{
	struct tutti_store *st = t->st;
	const struct tt_chunk_op *c = &t->chunks[u->chunk];
	uint8_t op = t->kind == TT_TRANSFER_SAVE ? TT_IO_WRITE : TT_IO_READ;
	uint32_t dir;
	uint64_t off;

	st->units[b] = *u;
	tt_pool_locate(st->pool, c->slot, &dir, &off);
	off += tt_geo_object_off(&st->geo, u->layer);
	if (c->direct) {
		struct iovec *iov = st->unit_iovs + (size_t)b * st->max_iov;

		if (t->kind == TT_TRANSFER_SAVE) {
			hash_direct_unit(t, u);
		}
		st->ios[n] = (struct tt_io){
		    .tag = b,
		    .off = off + (uint64_t)c->obj_skip * st->geo.layer_block_bytes,
		    .iov = iov,
		    .nr_iov = unit_vector(t, u, iov),
		    .len = (uint32_t)(u->nr_layers * c->nr_moved * st->geo.layer_block_bytes),
		    .file = (uint16_t)dir,
		    .op = op,
		};
		return;
	}
	if (t->kind == TT_TRANSFER_SAVE) {
		int rc = tt_unit_gather(t, u, unit_buf(st, b));

		if (rc < 0) {
			/* The I/O still runs (its buffer is ours), but the chunk is not committed.
			 */
			tt_log_err(&st->log, "gathering slot %u from GPU KV failed: %s", c->slot,
			           tutti_strerror(rc));
			tt_fail_chunk(&t->chunks[u->chunk], rc);
		}
	}
	st->ios[n] = (struct tt_io){
	    .tag = b,
	    .off = off,
	    .buf = unit_buf(st, b),
	    .len = (uint32_t)(u->nr_layers * st->geo.object_bytes),
	    .file = (uint16_t)dir,
	    .op = op,
	};
}

/* Fill free unit slots with the next units and submit them as one batch. */
static void
fill(struct tt_transfer *t, struct slots *fs)
{
	struct tutti_store *st = t->st;
	uint32_t n = 0, b;
	struct tt_unit u;
	int rc;

	while (peek_unit(t, &u) && take_slot(fs, t->chunks[u.chunk].direct, &b)) {
		t->next_layer += u.nr_layers;
		prep_unit(t, &u, b, n++);
	}
	rc = tt_engine_submit(st->engine, st->ios, n);
	if (rc < 0) {
		tt_log_err(&st->log, "submitting %u I/Os failed: %s", n, tutti_strerror(rc));
		for (uint32_t i = 0; i < n; i++) {
			b = (uint32_t)st->ios[i].tag;
			tt_fail_chunk(&t->chunks[st->units[b].chunk], rc);
			give_slot(st, fs, b);
		}
	}
}

static void
complete_unit(struct tt_transfer *t, const struct tt_io_done *d)
{
	struct tutti_store *st = t->st;
	uint32_t b = (uint32_t)d->tag;
	const struct tt_unit *u = &st->units[b];
	struct tt_chunk_op *c = &t->chunks[u->chunk];

	if (d->res < 0) {
		tt_log_warn(&st->log, "%s of slot %u layers %u..%u failed: %s",
		            t->kind == TT_TRANSFER_SAVE ? "write" : "read", c->slot, u->layer,
		            u->layer + u->nr_layers - 1, tutti_strerror(d->res));
		tt_fail_chunk(c, d->res);
		return;
	}
	if (t->kind == TT_TRANSFER_SAVE || c->status != 0) {
		return;
	}
	if (!tt_unit_verify(t, u, unit_buf(st, b))) {
		c->corrupt = true;
		tt_fail_chunk(c, -EBADMSG);
		return;
	}
	if (t->kind == TT_TRANSFER_LOAD && !c->direct) {
		int rc = tt_unit_scatter(t, u, unit_buf(st, b));

		if (rc < 0) {
			tt_log_err(&st->log, "scattering slot %u into the KV failed: %s", c->slot,
			           tutti_strerror(rc));
			tt_fail_chunk(c, rc);
		}
	}
}

void
tt_transfer_fail_all(struct tt_transfer *t, int rc)
{
	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		tt_fail_chunk(&t->chunks[i], rc);
	}
}

int
tt_transfer_mover(struct tt_transfer *t)
{
	struct tutti_store *st = t->st;

	t->mover = &tt_mover_cpu;
	t->mover_ctx = NULL;
	if (t->kv != NULL && t->kv->mem == TUTTI_MEM_CUDA) {
		struct tt_gpu *g;
		int rc = tt_store_gpu(st, t->kv->device, &g);

		if (rc < 0) {
			tt_transfer_fail_all(t, rc);
			return rc;
		}
		t->mover = &tt_mover_cuda;
		t->mover_ctx = g;
	}
	return 0;
}

void
tt_transfer_on_engine(struct tt_transfer *t)
{
	struct tutti_store *st = t->st;

	if (st->gring != NULL) {
		tt_gring_transfer(t);
	} else if (st->cufile != NULL) {
		tt_gds_transfer(t);
	} else {
		tt_transfer_run(t);
	}
}

int
tt_transfer_prepare(struct tt_transfer *t, bool engine_broken)
{
	if (engine_broken) {
		tt_transfer_fail_all(t, -EIO);
		return -EIO;
	}
	return tt_transfer_mover(t);
}

/*
 * Move every unit of every chunk whose status is 0. A chunk whose I/O or checksum fails gets
 * the error as its status and no further units. Returns 0, or a negative errno when the engine
 * broke down (then every unfinished chunk has failed and the engine is unusable).
 */
int
tt_transfer_run(struct tt_transfer *t)
{
	struct tutti_store *st = t->st;
	struct slots fs;
	int rc;

	rc = tt_transfer_prepare(t, st->engine_broken);
	if (rc < 0) {
		return rc;
	}
	t->next_chunk = 0;
	t->next_layer = t->layer_begin;
	fs.staged = st->free_bufs;
	fs.nr_staged = 0;
	fs.direct = st->free_bufs + st->nr_staging;
	fs.nr_direct = 0;
	for (uint32_t b = st->nr_units; b-- > 0;) {
		give_slot(st, &fs, b);
	}
	for (;;) {
		int got;

		fill(t, &fs);
		if (st->engine->inflight == 0) {
			struct tt_unit u;

			if (!peek_unit(t, &u)) {
				return 0;
			}
			continue; /* a submission failed; its chunks have failed, go on */
		}
		got = tt_engine_reap(st->engine, st->dones, st->nr_units, 1);
		if (got < 0) {
			/* In-flight I/O may still target the staging: it cannot be reused. */
			st->engine_broken = true;
			tt_log_err(&st->log, "I/O engine failed: %s; the store refuses further I/O",
			           tutti_strerror(got));
			tt_transfer_fail_all(t, got);
			return got;
		}
		for (int i = 0; i < got; i++) {
			complete_unit(t, &st->dones[i]);
			give_slot(st, &fs, (uint32_t)st->dones[i].tag);
		}
	}
}

/* ---- headers and flushes ---- */

/* Submit \p nr prepared I/Os and reap them all into res[] (indexed by tag). */
static int
submit_all(struct tutti_store *st, uint32_t nr, int32_t *res)
{
	uint32_t done = 0;
	int rc = tt_engine_submit(st->engine, st->ios, nr);

	if (rc < 0) {
		return rc;
	}
	while (done < nr) {
		int got = tt_engine_reap(st->engine, st->dones, st->nr_units, 1);

		if (got < 0) {
			st->engine_broken = true;
			return got;
		}
		for (int i = 0; i < got; i++) {
			res[st->dones[i].tag] = st->dones[i].res;
		}
		done += (uint32_t)got;
	}
	return 0;
}

int
tt_write_headers(struct tutti_store *st, const uint32_t *slots, uint32_t nr, const uint8_t *bufs,
                 int32_t *res)
{
	if (st->engine_broken) {
		return -EIO;
	}
	for (uint32_t first = 0; first < nr; first += st->nr_units) {
		uint32_t n = TT_MIN(nr - first, st->nr_units);
		int rc;

		for (uint32_t i = 0; i < n; i++) {
			uint32_t dir;
			uint64_t off;

			tt_pool_locate(st->pool, slots[first + i], &dir, &off);
			st->ios[i] = (struct tt_io){
			    .tag = first + i,
			    .off = off,
			    .buf = (void *)(bufs + (uint64_t)(first + i) * TUTTI_SLOT_HEADER_BYTES),
			    .len = TUTTI_SLOT_HEADER_BYTES,
			    .file = (uint16_t)dir,
			    .op = TT_IO_WRITE,
			};
		}
		rc = submit_all(st, n, res);
		if (rc < 0) {
			return rc;
		}
	}
	return 0;
}

int
tt_flush(struct tutti_store *st)
{
	uint32_t nr_dirs = tt_pool_nr_dirs(st->pool);
	int32_t res[TT_POOL_MAX_DIRS];
	int rc;

	if (st->engine_broken) {
		return -EIO;
	}
	for (uint32_t first = 0; first < nr_dirs; first += st->nr_units) {
		uint32_t n = TT_MIN(nr_dirs - first, st->nr_units);

		for (uint32_t i = 0; i < n; i++) {
			st->ios[i] = (struct tt_io){
			    .tag = first + i, .file = (uint16_t)(first + i), .op = TT_IO_FSYNC};
		}
		rc = submit_all(st, n, res);
		if (rc < 0) {
			return rc;
		}
	}
	for (uint32_t d = 0; d < nr_dirs; d++) {
		if (res[d] < 0) {
			tt_log_err(&st->log, "flushing directory %u failed: %s", d,
			           tutti_strerror(res[d]));
			return res[d];
		}
	}
	return 0;
}

void
tt_erase_headers(struct tutti_store *st, const uint32_t *slots, uint32_t nr)
{
	uint8_t *zero =
	    tt_aligned_alloc((size_t)TT_MIN(nr, st->nr_units) * TUTTI_SLOT_HEADER_BYTES);
	int32_t *res = tt_calloc(nr, sizeof(*res));

	if (zero != NULL && res != NULL) {
		for (uint32_t first = 0; first < nr; first += st->nr_units) {
			uint32_t n = TT_MIN(nr - first, st->nr_units);

			/* Each batch reuses the same zeroed buffers. */
			tt_write_headers(st, slots + first, n, zero, res + first);
		}
		for (uint32_t i = 0; i < nr; i++) {
			if (res[i] < 0) {
				tt_log_warn(&st->log, "erasing the header of slot %u failed: %s",
				            slots[i], tutti_strerror(res[i]));
			}
		}
	}
	tt_aligned_free(zero);
	tt_free(res);
}
