/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU mover: memcpy between host paged KV memory and packed objects.
 */
#include <string.h>

#include "mover/mover.h"

static void
cpu_gather(const struct tutti_kv *kv, uint32_t layer, const uint32_t *block_ids, uint32_t nr_blocks,
           void *obj)
{
	const struct tutti_segment *segs = tt_kv_layer_segs(kv, layer);
	uint8_t *dst = obj;

	for (uint32_t i = 0; i < nr_blocks; i++) {
		for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
			const uint8_t *src =
			    (const uint8_t *)(uintptr_t)(segs[s].base + (uint64_t)block_ids[i] *
			                                                    segs[s].block_stride);

			memcpy(dst, src, segs[s].bytes);
			dst += segs[s].bytes;
		}
	}
}

static void
cpu_scatter(const struct tutti_kv *kv, uint32_t layer, const uint32_t *block_ids,
            uint32_t nr_blocks, const void *obj)
{
	const struct tutti_segment *segs = tt_kv_layer_segs(kv, layer);
	const uint8_t *src = obj;

	for (uint32_t i = 0; i < nr_blocks; i++) {
		for (uint32_t s = 0; s < kv->segs_per_layer; s++) {
			uint8_t *dst =
			    (uint8_t *)(uintptr_t)(segs[s].base +
			                           (uint64_t)block_ids[i] * segs[s].block_stride);

			memcpy(dst, src, segs[s].bytes);
			src += segs[s].bytes;
		}
	}
}

const struct tt_mover_ops tt_mover_cpu = {
    .name = "cpu",
    .gather = cpu_gather,
    .scatter = cpu_scatter,
};
