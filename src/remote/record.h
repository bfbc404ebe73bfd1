/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Chunk records: a chunk as one self-checking blob for the remote tier, laid out as a slot of the
 * local store (the slot header codec, then 4 KiB-aligned layer objects with their checksums in
 * the header). The header's store id carries a tag of the namespace and the rank, so a record is
 * only accepted where it was meant to be served.
 */
#ifndef TT_RECORD_H
#define TT_RECORD_H

#include <stdint.h>

#include "kv/kv.h"
#include "mover/mover.h"

/* The tag of records of namespace \p ns for rank \p rank of \p nr_ranks. */
uint64_t tt_record_tag(const void *ns, uint32_t ns_bytes, uint32_t rank, uint32_t nr_ranks);

/* What a record must say about itself to be accepted. */
struct tt_record_id {
	uint64_t tag;
	const uint8_t *key;
	const uint8_t *parent; /* NULL for the root of a chain */
	uint32_t key_bytes;
};

/*
 * Gather blocks \p block_ids[0..nr_blocks) of every layer of \p kv through \p mover into the
 * record at \p buf (geo->slot_bytes bytes) and write its header. Returns 0 or the mover's error.
 */
int tt_record_encode(const struct tt_geo *geo, const struct tutti_kv *kv,
                     const struct tt_mover_ops *mover, void *mover_ctx,
                     const struct tt_record_id *id, const uint32_t *block_ids, uint32_t nr_blocks,
                     uint8_t *buf);

/*
 * Check the \p len bytes at \p buf as the record \p id of at least \p need_blocks blocks:
 * length, header, tag, key, parent, sizes, then every object's checksum. Returns 0, -EBADMSG
 * (anything wrong) or -ERANGE (a valid record of fewer blocks).
 */
int tt_record_check(const struct tt_geo *geo, const uint8_t *buf, uint64_t len,
                    const struct tt_record_id *id, uint32_t need_blocks);

#endif /* TT_RECORD_H */
