/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Chunk record codec: the slot header of the local store over objects gathered from paged KV.
 */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "common/common.h"
#include "format/format.h"
#include "format/le.h"
#include "remote/record.h"

uint64_t
tt_record_tag(const void *ns, uint32_t ns_bytes, uint32_t rank, uint32_t nr_ranks)
{
	uint8_t in[TT_NS_FP_BYTES + 8];

	tt_ns_fingerprint(ns, ns_bytes, in);
	put32(in + TT_NS_FP_BYTES, rank);
	put32(in + TT_NS_FP_BYTES + 4, nr_ranks);
	return XXH3_64bits(in, sizeof(in));
}

int
tt_record_encode(const struct tt_geo *geo, const struct tutti_kv *kv,
                 const struct tt_mover_ops *mover, void *mover_ctx, const struct tt_record_id *id,
                 const uint32_t *block_ids, uint32_t nr_blocks, uint8_t *buf)
{
	struct tt_slot_header h;
	uint64_t payload = (uint64_t)nr_blocks * geo->layer_block_bytes;
	int rc;

	memset(&h, 0, sizeof(h));
	for (uint32_t l = 0; l < geo->g.nr_layers; l++) {
		struct tt_move m = {.obj = buf + tt_geo_object_off(geo, l),
		                    .block_ids = block_ids,
		                    .nr_blocks = nr_blocks};

		rc = mover->gather(mover_ctx, kv, l, &m, 1);
		if (rc < 0) {
			return rc;
		}
	}
	rc = mover->sync(mover_ctx);
	if (rc < 0) {
		return rc;
	}
	for (uint32_t l = 0; l < geo->g.nr_layers; l++) {
		uint8_t *obj = buf + tt_geo_object_off(geo, l);

		/* Padding is part of the object on the wire: zero, never stale memory. */
		memset(obj + payload, 0, geo->object_bytes - payload);
		h.csum[l] = tt_csum(obj, payload);
	}
	h.store_uid = id->tag;
	h.seq = 0;
	h.nr_blocks = nr_blocks;
	h.key_bytes = id->key_bytes;
	h.nr_objects = geo->g.nr_layers;
	h.has_parent = id->parent != NULL;
	memcpy(h.key, id->key, id->key_bytes);
	if (id->parent != NULL) {
		memcpy(h.parent, id->parent, id->key_bytes);
	}
	tt_slot_encode(&h, buf);
	return 0;
}

int
tt_record_check(const struct tt_geo *geo, const uint8_t *buf, uint64_t len,
                const struct tt_record_id *id, uint32_t need_blocks)
{
	struct tt_slot_header h;
	uint64_t payload;

	if (len != geo->slot_bytes || tt_slot_decode(buf, len, &h) < 0) {
		return -EBADMSG;
	}
	if (h.store_uid != id->tag || h.nr_objects != geo->g.nr_layers ||
	    h.key_bytes != id->key_bytes || memcmp(h.key, id->key, id->key_bytes) != 0 ||
	    h.has_parent != (id->parent != NULL) ||
	    (id->parent != NULL && memcmp(h.parent, id->parent, id->key_bytes) != 0) ||
	    h.nr_blocks == 0 || h.nr_blocks > geo->blocks_per_chunk) {
		return -EBADMSG;
	}
	payload = (uint64_t)h.nr_blocks * geo->layer_block_bytes;
	for (uint32_t l = 0; l < geo->g.nr_layers; l++) {
		if (tt_csum(buf + tt_geo_object_off(geo, l), payload) != h.csum[l]) {
			return -EBADMSG;
		}
	}
	return h.nr_blocks < need_blocks ? -ERANGE : 0;
}
