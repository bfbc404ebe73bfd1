/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Per-layer object lists for the engines whose GPU moves whole objects (gpu-uring, gds): every
 * moved chunk's object of each layer, with its file, offset, expected checksum and block ids,
 * in pinned, mapped host memory (the GPU reads the lists and writes the results in place, and
 * no launch waits on a copy), and the per-object results folded back into the chunks.
 */
#include <errno.h>
#include <string.h>

#include "engine/engine_impl.h"

static void
list_free(const struct tt_list_mem *m, void *p)
{
	if (m->plain) {
		tt_aligned_free(p);
	} else {
		tt_gpu_host_free(p);
	}
}

int
tt_list_mem_get(struct tt_list_mem *m, size_t bytes, void **out)
{
	if (m->bytes < bytes) {
		size_t want = TT_MAX(bytes, 2 * m->bytes);
		int rc = 0;

		if (m->cur != NULL && m->nr_old < TT_ARRAY_SIZE(m->old)) {
			m->old[m->nr_old++] = m->cur;
		} else if (m->cur != NULL) {
			list_free(m, m->cur); /* 16 doublings: not in practice */
		}
		m->cur = NULL;
		m->bytes = 0;
		if (m->plain) {
			m->cur = tt_aligned_alloc(want);
			rc = m->cur != NULL ? 0 : -ENOMEM;
		} else {
			rc = tt_gpu_host_alloc(want, &m->cur);
		}
		if (rc < 0) {
			return rc;
		}
		m->bytes = want;
	}
	*out = m->cur;
	return 0;
}

void
tt_list_mem_free(struct tt_list_mem *m)
{
	bool plain = m->plain;

	list_free(m, m->cur);
	for (uint32_t i = 0; i < m->nr_old; i++) {
		list_free(m, m->old[i]);
	}
	memset(m, 0, sizeof(*m));
	m->plain = plain;
}

/* List memory for \p n chunks in play, \p nr_ids moved blocks and \p nr_layers layers. */
static size_t
lists_bytes(uint32_t n, uint32_t nr_ids, uint32_t nr_layers)
{
	return (size_t)n * nr_layers * sizeof(struct tt_gpu_obj) +
	       (size_t)nr_ids * sizeof(uint32_t) + nr_layers * sizeof(int);
}

#define RESERVE_REQUESTS 256u
#define RESERVE_MAX_BYTES ((size_t)64 << 20)

int
tt_list_mem_reserve(struct tt_list_mem *m, const struct tutti_kv *kv)
{
	uint32_t bpc = kv->geo.blocks_per_chunk;
	uint64_t chunks = (kv->nr_blocks + bpc - 1) / bpc + RESERVE_REQUESTS;
	size_t want =
	    lists_bytes((uint32_t)TT_MIN(chunks, UINT32_MAX), kv->nr_blocks, kv->geo.g.nr_layers);
	void *p;

	return tt_list_mem_get(m, TT_MIN(want, RESERVE_MAX_BYTES), &p);
}

int
tt_obj_lists_make(const struct tt_batch *t, struct tt_list_mem *mem, struct tt_obj_lists *out)
{
	uint32_t L = t->layer_end - t->layer_begin, n = 0, nr_ids = 0;
	struct tt_gpu_obj *objs;
	uint32_t *ids;
	int rc;

	memset(out, 0, sizeof(*out));
	for (uint32_t c = 0; c < t->nr_chunks; c++) {
		n += t->chunks[c].status == 0;
		nr_ids += t->chunks[c].status == 0 ? t->chunks[c].nr_moved : 0;
	}
	if (n == 0) {
		return 0;
	}
	rc = tt_list_mem_get(mem, lists_bytes(n, nr_ids, L), (void **)&objs);
	if (rc < 0) {
		return rc;
	}
	memset(objs, 0, (size_t)n * L * sizeof(*objs));
	ids = (uint32_t *)(objs + (size_t)n * L);
	out->failed = (int *)(ids + nr_ids);
	memset(out->failed, 0, L * sizeof(int));
	/* The block ids of every moved chunk, once; each layer's objects point into them. */
	nr_ids = 0;
	for (uint32_t c = 0, k = 0; c < t->nr_chunks; c++) {
		const struct tt_chunk_op *op = &t->chunks[c];

		if (op->status != 0) {
			continue;
		}
		memcpy(ids + nr_ids, tt_chunk_ids(op), op->nr_moved * sizeof(*ids));
		for (uint32_t l = 0; l < L; l++) {
			uint32_t layer = t->layer_begin + l;

			objs[(size_t)l * n + k] = (struct tt_gpu_obj){
			    .off = op->off + tt_geo_object_off(&t->kv->geo, layer),
			    .csum = t->kind == TT_BATCH_LOAD ? op->csums[layer] : 0,
			    .file = op->file,
			    .ids_off = nr_ids,
			    .nr_moved = op->nr_moved,
			    .skip = op->obj_skip,
			    .stored = t->kind == TT_BATCH_LOAD ? op->stored_blocks : op->nr_moved,
			};
		}
		nr_ids += op->nr_moved;
		k++;
	}
	out->objs = objs;
	out->ids = ids;
	out->n = n;
	out->nr_ids = nr_ids;
	out->nr_layers = L;
	return 0;
}

void
tt_obj_lists_results(struct tt_engine *e, struct tt_batch *t, const struct tt_obj_lists *lists,
                     const char *path)
{
	for (uint32_t c = 0, k = 0; c < t->nr_chunks; c++) {
		struct tt_chunk_op *op = &t->chunks[c];

		if (op->status != 0) {
			continue;
		}
		for (uint32_t l = 0; l < lists->nr_layers; l++) {
			const struct tt_gpu_obj *o = &lists->objs[(size_t)l * lists->n + k];

			if (o->status == -EBADMSG) {
				tt_log_err(e->log,
				           "%s: slot %u layer %u: checksum mismatch on the GPU; "
				           "dropping the chunk",
				           path, op->slot, t->layer_begin + l);
				op->corrupt = true;
			}
			tt_chunk_fail(op, o->status);
			if (t->kind == TT_BATCH_SAVE) {
				op->csums[t->layer_begin + l] = o->csum;
			}
		}
		k++;
	}
}
