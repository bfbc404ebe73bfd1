/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * Paged KV memory as the library sees it: where it lives, its segments, its registration
 * (struct tutti_kv), and the requests that name its blocks in a load or a save. Shared by the
 * store (store.h), the remote tier (remote.h) and the pipeline (pipeline.h).
 *
 * Thread safety. A kv handle is immutable after creation and may be shared.
 */
#ifndef TUTTI_KV_H
#define TUTTI_KV_H

#include "tutti/base.h"
#include "tutti/geometry.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tutti_kv; /* opaque; immutable registration of paged KV memory */

/** Where registered KV memory lives. */
enum tutti_mem {
	TUTTI_MEM_HOST = 0, /**< ordinary host memory, moved by the CPU */
	TUTTI_MEM_CUDA = 1, /**< device memory of one CUDA GPU, moved by CUDA kernels */
};

/**
 * One segment of a layer's paged KV memory: block b's bytes of this segment are at
 * base + b * block_stride and are \p bytes long. A layer block is the concatenation of its
 * layer's segments in order. K/V-first layouts have two segments per layer (K and V);
 * blocks-first and packed layouts have one; cross-layer layouts use a stride of a whole block of
 * all layers. The library never interprets the bytes.
 */
struct tutti_segment {
	uint64_t base;         /**< address of block 0 of this segment */
	uint64_t block_stride; /**< bytes from one block to the next */
	uint64_t bytes;        /**< bytes of this segment in one block */
};

/**
 * Register paged KV memory of \p nr_blocks blocks per layer.
 *
 * \param segs            nr_layers * segs_per_layer segments, layer-major; copied.
 * \param segs_per_layer  1..8; each layer's segment bytes must add up to the layer block bytes.
 * \param mem             enum tutti_mem.
 * \param out             receives the handle; release it with tutti_kv_destroy().
 * \return 0, or -EINVAL (invalid geometry, zero base, sizes that do not add up, address overflow,
 *         TUTTI_MEM_CUDA segments that are not device memory of one GPU), -EOPNOTSUPP (a memory
 *         kind this build cannot move: TUTTI_MEM_CUDA without CUDA), -ENODEV (no usable GPU),
 *         -ENOMEM.
 * The memory must stay valid until the handle is destroyed; the library reads and writes it only
 * during tutti_store_load() and tutti_store_save().
 */
TUTTI_API int tutti_kv_create(const struct tutti_geometry *geo, const struct tutti_segment *segs,
                              uint32_t segs_per_layer, uint32_t nr_blocks, uint32_t mem,
                              struct tutti_kv **out);

/** Release \p kv. NULL is allowed. This function can't fail. */
TUTTI_API void tutti_kv_destroy(struct tutti_kv *kv);

/**
 * One request of a load or save batch: the chunks [first_chunk, nr_keys) of a key chain.
 *
 * block_ids lists the paged block of each token block moved, in token order: for load, chunk
 * first_chunk contributes its blocks from skip_blocks on; every chunk but the last contributes
 * blocks_per_chunk blocks; the last may contribute fewer (a partial chunk, which ends a chain).
 */
struct tutti_request {
	uint32_t size;             /**< = sizeof(struct tutti_request) */
	uint32_t nr_keys;          /**< keys in the chain, from the root to the last chunk moved */
	const uint8_t *keys;       /**< nr_keys * key_bytes bytes */
	uint32_t first_chunk;      /**< index of the first chunk moved (< nr_keys) */
	uint32_t skip_blocks;      /**< load only: leading blocks of chunk first_chunk not moved */
	uint32_t nr_blocks;        /**< entries in block_ids */
	uint32_t reserved;         /**< must be 0 */
	const uint32_t *block_ids; /**< paged block ids, each < the kv's nr_blocks */
};

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_KV_H */
