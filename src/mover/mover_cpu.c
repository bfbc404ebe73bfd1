/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU mover: memcpy between host paged KV memory and packed objects.
 */
#include <string.h>

#include "mover/mover.h"

static int
cpu_gather(void *ctx, const struct tutti_kv *kv, uint32_t layer, const struct tt_move *moves,
           uint32_t nr_moves)
{
	const struct tutti_segment *segs = tt_kv_layer_segs(kv, layer);

	for (uint32_t m = 0; m < nr_moves; m++) {
		uint8_t *dst = moves[m].obj;

		for (uint32_t i = 0; i < moves[m].nr_blocks; i++) {
			for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
				const uint8_t *src =
				    (const uint8_t *)(uintptr_t)(segs[s].base +
				                                 (uint64_t)moves[m].block_ids[i] *
				                                     segs[s].block_stride);

				memcpy(dst, src, segs[s].bytes);
				dst += segs[s].bytes;
			}
		}
	}
	return 0;
}

static int
cpu_scatter(void *ctx, const struct tutti_kv *kv, uint32_t layer, const struct tt_move *moves,
            uint32_t nr_moves)
{
	const struct tutti_segment *segs = tt_kv_layer_segs(kv, layer);

	for (uint32_t m = 0; m < nr_moves; m++) {
		const uint8_t *src = moves[m].obj;

		for (uint32_t i = 0; i < moves[m].nr_blocks; i++) {
			for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
				uint8_t *dst =
				    (uint8_t *)(uintptr_t)(segs[s].base +
				                           (uint64_t)moves[m].block_ids[i] *
				                               segs[s].block_stride);

				memcpy(dst, src, segs[s].bytes);
				src += segs[s].bytes;
			}
		}
	}
	return 0;
}

static int
cpu_sync(void *ctx)
{
	return 0;
}

const struct tt_mover_ops tt_mover_cpu = {
    .name = "cpu",
    .gather = cpu_gather,
    .scatter = cpu_scatter,
    .sync = cpu_sync,
};
