/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * KV geometry: the shape of a model's KV cache and the sizes of Tutti's on-disk units.
 *
 * Units, from small to large:
 *  - a *layer block*: one paged KV block (block_tokens tokens) of one layer, K and V together:
 *    kv_planes * block_tokens * nr_kv_heads * head_dim * elem_bytes bytes;
 *  - an *object*: one layer of one chunk (chunk_tokens tokens) in the canonical layout (the chunk's
 *    layer blocks in token order, each as the concatenation of its segments), padded to 4 KiB;
 *  - a *slot*: one chunk on disk: a 4 KiB header followed by the nr_layers objects in layer order.
 */
#ifndef TUTTI_GEOMETRY_H
#define TUTTI_GEOMETRY_H

#include "tutti/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Alignment of objects and slots on disk and of staging buffers in memory. */
#define TUTTI_ALIGN 4096u
/** Bytes reserved at the start of every slot for its header. */
#define TUTTI_SLOT_HEADER_BYTES 4096u
/** Default tokens per chunk. */
#define TUTTI_DEFAULT_CHUNK_TOKENS 256u

struct tutti_geometry {
	uint32_t size;        /**< = sizeof(struct tutti_geometry); set by tutti_geometry_init() */
	uint32_t nr_layers;   /**< attention layers holding KV */
	uint32_t nr_kv_heads; /**< KV heads held by this process (this TP rank's share) */
	uint32_t head_dim;    /**< elements per head */
	uint32_t elem_bytes;  /**< bytes per element (2 for bf16/fp16, 1 for fp8) */
	uint32_t kv_planes; /**< 2 when K and V are stored (default); 1 for a single latent (MLA) */
	uint32_t block_tokens; /**< tokens per paged block of the serving engine */
	uint32_t chunk_tokens; /**< tokens per chunk, a multiple of block_tokens (default 256) */
};

/**
 * Fill \p geo with defaults: kv_planes 2, elem_bytes 2, block_tokens 16, chunk_tokens 256, and
 * zero for the model's own fields (nr_layers, nr_kv_heads, head_dim), which the caller must set.
 * This function can't fail.
 */
TUTTI_API void tutti_geometry_init(struct tutti_geometry *geo);

/**
 * Fill \p geo with a named model preset on top of tutti_geometry_init()'s defaults.
 * Known names: "llama-3-8b" (32 layers, 8 KV heads, head dim 128, bf16), "llama-3-70b"
 * (80, 8, 128), "glm-4-9b" (40, 2, 128), "tiny" (2, 2, 16, chunk 64 tokens; for tests).
 *
 * \return 0, or -ENOENT for an unknown name, -EINVAL for NULL arguments.
 */
TUTTI_API int tutti_geometry_preset(const char *name, struct tutti_geometry *geo);

/**
 * Check that \p geo is usable: every field non-zero, kv_planes 1 or 2, chunk_tokens a multiple of
 * block_tokens, and every derived size below 2^40 bytes.
 *
 * \return 0, or -EINVAL (the reason is not reported; check the fields above).
 */
TUTTI_API int tutti_geometry_check(const struct tutti_geometry *geo);

/** Bytes of one layer block, or 0 if tutti_geometry_check() fails. */
TUTTI_API uint64_t tutti_geometry_layer_block_bytes(const struct tutti_geometry *geo);

/** Paged blocks per chunk (chunk_tokens / block_tokens), or 0 if the geometry is invalid. */
TUTTI_API uint32_t tutti_geometry_blocks_per_chunk(const struct tutti_geometry *geo);

/** Bytes of one object on disk (padded to TUTTI_ALIGN), or 0 if the geometry is invalid. */
TUTTI_API uint64_t tutti_geometry_object_bytes(const struct tutti_geometry *geo);

/** Bytes of one slot on disk (header plus nr_layers objects), or 0 if the geometry is invalid. */
TUTTI_API uint64_t tutti_geometry_slot_bytes(const struct tutti_geometry *geo);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_GEOMETRY_H */
