/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: src/layout/layout.c: geometry checks, presets and derived sizes (layer block,
 * object, slot, 4 KiB padding); and src/kv/kv.c: tutti_kv_create() for every paged KV layout
 * and its errors.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "kv/kv.h"
#include "layout/layout.h"
#include "t_kv.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)

static struct tutti_geometry
preset(const char *name)
{
	struct tutti_geometry g;

	assert_int_equal(tutti_geometry_preset(name, &g), 0);
	return g;
}

static void
assert_sizes(const struct tutti_geometry *g, uint64_t lbb, uint32_t bpc, uint64_t object,
             uint64_t slot)
{
	struct tt_geo d;

	assert_int_equal(tt_geo_derive(g, &d), 0);
	assert_int_equal(d.layer_block_bytes, lbb);
	assert_int_equal(d.blocks_per_chunk, bpc);
	assert_int_equal(d.chunk_layer_bytes, lbb * bpc);
	assert_int_equal(d.object_bytes, object);
	assert_int_equal(d.slot_bytes, slot);
	assert_int_equal(d.object_bytes % TUTTI_ALIGN, 0);
	/* The public accessors agree with the internal derivation. */
	assert_int_equal(tutti_geometry_check(g), 0);
	assert_int_equal(tutti_geometry_layer_block_bytes(g), lbb);
	assert_int_equal(tutti_geometry_blocks_per_chunk(g), bpc);
	assert_int_equal(tutti_geometry_object_bytes(g), object);
	assert_int_equal(tutti_geometry_slot_bytes(g), slot);
}

/* ---- derived sizes ---- */

static void
test_geo_llama_3_8b_has_64k_blocks_1m_objects_32m_slots(void **state)
{
	struct tutti_geometry g = preset("llama-3-8b");

	assert_sizes(&g, 64 * KIB, 16, 1 * MIB, 4 * KIB + 32 * MIB);
}

static void
test_geo_llama_3_70b_sizes(void **state)
{
	struct tutti_geometry g = preset("llama-3-70b");

	assert_sizes(&g, 64 * KIB, 16, 1 * MIB, 4 * KIB + 80 * MIB);
}

static void
test_geo_glm_4_9b_sizes(void **state)
{
	struct tutti_geometry g = preset("glm-4-9b");

	/* 2 planes x 16 tokens x 2 heads x 128 x 2 bytes = 16 KiB; 40 layers of 256 KiB. */
	assert_sizes(&g, 16 * KIB, 16, 256 * KIB, 4 * KIB + 40 * 256 * KIB);
}

static void
test_geo_tiny_sizes(void **state)
{
	struct tutti_geometry g = preset("tiny");

	assert_sizes(&g, 2 * KIB, 4, 8 * KIB, 4 * KIB + 2 * 8 * KIB);
}

static void
test_geo_mla_single_plane_halves_the_layer_block(void **state)
{
	struct tutti_geometry g = preset("llama-3-8b");

	g.kv_planes = 1;
	assert_sizes(&g, 32 * KIB, 16, 512 * KIB, 4 * KIB + 32 * 512 * KIB);
	/* A DeepSeek-like latent: 1 head of 576 elements, 64-token blocks, 61 layers. */
	g.nr_layers = 61;
	g.nr_kv_heads = 1;
	g.head_dim = 576;
	g.block_tokens = 64;
	assert_sizes(&g, 64 * 576 * 2, 4, 4 * 64 * 576 * 2, 4 * KIB + 61ull * 4 * 64 * 576 * 2);
}

static void
test_geo_object_is_padded_to_4k(void **state)
{
	struct tutti_geometry g;

	/* 2 x 16 x 1 x 24 x 2 = 1536-byte blocks, 3 per chunk: 4608 bytes, padded to 8 KiB. */
	tutti_geometry_init(&g);
	g.nr_layers = 3;
	g.nr_kv_heads = 1;
	g.head_dim = 24;
	g.chunk_tokens = 48;
	assert_sizes(&g, 1536, 3, 8 * KIB, 4 * KIB + 3 * 8 * KIB);

	/* A 3-byte layer block still takes a whole 4 KiB object. */
	g.kv_planes = 1;
	g.head_dim = 3;
	g.elem_bytes = 1;
	g.block_tokens = 1;
	g.chunk_tokens = 1;
	assert_sizes(&g, 3, 1, 4 * KIB, 4 * KIB + 3 * 4 * KIB);

	/* Exactly 4 KiB: no padding added. */
	g.head_dim = 4096;
	assert_sizes(&g, 4 * KIB, 1, 4 * KIB, 4 * KIB + 3 * 4 * KIB);
	g.head_dim = 4097;
	assert_sizes(&g, 4097, 1, 8 * KIB, 4 * KIB + 3 * 8 * KIB);
}

/* ---- invalid geometries ---- */

static void
assert_invalid(const struct tutti_geometry *g)
{
	struct tt_geo d;

	assert_int_equal(tt_geo_derive(g, &d), -EINVAL);
	assert_int_equal(tutti_geometry_check(g), -EINVAL);
	assert_int_equal(tutti_geometry_layer_block_bytes(g), 0);
	assert_int_equal(tutti_geometry_blocks_per_chunk(g), 0);
	assert_int_equal(tutti_geometry_object_bytes(g), 0);
	assert_int_equal(tutti_geometry_slot_bytes(g), 0);
}

static void
test_geo_each_zero_field_is_einval(void **state)
{
	const size_t fields[] = {
	    offsetof(struct tutti_geometry, nr_layers),
	    offsetof(struct tutti_geometry, nr_kv_heads),
	    offsetof(struct tutti_geometry, head_dim),
	    offsetof(struct tutti_geometry, elem_bytes),
	    offsetof(struct tutti_geometry, kv_planes),
	    offsetof(struct tutti_geometry, block_tokens),
	    offsetof(struct tutti_geometry, chunk_tokens),
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		struct tutti_geometry g = preset("tiny");
		uint32_t zero = 0;

		memcpy((uint8_t *)&g + fields[i], &zero, sizeof(zero));
		assert_invalid(&g);
	}
}

static void
test_geo_three_kv_planes_is_einval(void **state)
{
	struct tutti_geometry g = preset("tiny");

	g.kv_planes = 3;
	assert_invalid(&g);
}

static void
test_geo_chunk_not_multiple_of_block_is_einval(void **state)
{
	struct tutti_geometry g = preset("tiny");

	g.chunk_tokens = 24; /* block_tokens 16 */
	assert_invalid(&g);
	g.chunk_tokens = 8; /* below one block */
	assert_invalid(&g);
	g.chunk_tokens = 80;
	assert_int_equal(tutti_geometry_check(&g), 0);
}

static void
test_geo_wrong_size_member_is_einval(void **state)
{
	struct tutti_geometry g = preset("tiny");

	g.size = 0;
	assert_invalid(&g);
	g.size = sizeof(g) + 4;
	assert_invalid(&g);
	g.size = sizeof(g) - 4;
	assert_invalid(&g);
}

static void
test_geo_oversized_fields_are_einval(void **state)
{
	const size_t fields[] = {
	    offsetof(struct tutti_geometry, nr_layers),
	    offsetof(struct tutti_geometry, nr_kv_heads),
	    offsetof(struct tutti_geometry, head_dim),
	    offsetof(struct tutti_geometry, elem_bytes),
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		struct tutti_geometry g = preset("llama-3-8b");
		uint32_t big = UINT32_MAX;

		memcpy((uint8_t *)&g + fields[i], &big, sizeof(big));
		assert_invalid(&g);
	}
	/* Block and chunk both huge: a single block of 2^32 - 16 tokens. */
	{
		struct tutti_geometry g = preset("llama-3-8b");

		g.block_tokens = g.chunk_tokens = UINT32_MAX - 15;
		assert_invalid(&g);
	}
	/* Many blocks per chunk: 2^28 blocks of 64 KiB is 2^44 bytes per object. */
	{
		struct tutti_geometry g = preset("llama-3-8b");

		g.chunk_tokens = 1u << 31;
		assert_invalid(&g);
	}
}

static void
test_geo_layer_block_product_that_wraps_64_bits_is_einval(void **state)
{
	struct tutti_geometry g;

	/*
	 * 2 planes x (2^32 - 1) tokens x (2^31 + 1) heads = 2^64 + 2^32 - 2 bytes, which wraps to
	 * 2^32 - 2 in 64-bit arithmetic: a plausible-looking 4 GiB block for a 16 EiB geometry.
	 */
	tutti_geometry_init(&g);
	g.nr_layers = 1;
	g.nr_kv_heads = (1u << 31) + 1;
	g.head_dim = 1;
	g.elem_bytes = 1;
	g.kv_planes = 2;
	g.block_tokens = UINT32_MAX;
	g.chunk_tokens = UINT32_MAX;
	assert_invalid(&g);
}

static void
test_geo_null_arguments_are_einval(void **state)
{
	struct tutti_geometry g = preset("tiny");
	struct tt_geo d;

	assert_int_equal(tt_geo_derive(NULL, &d), -EINVAL);
	assert_int_equal(tt_geo_derive(&g, NULL), -EINVAL);
	assert_invalid(NULL);
}

static void
test_geo_equal_compares_every_shape_field(void **state)
{
	const size_t fields[] = {
	    offsetof(struct tutti_geometry, nr_layers),
	    offsetof(struct tutti_geometry, nr_kv_heads),
	    offsetof(struct tutti_geometry, head_dim),
	    offsetof(struct tutti_geometry, elem_bytes),
	    offsetof(struct tutti_geometry, kv_planes),
	    offsetof(struct tutti_geometry, block_tokens),
	    offsetof(struct tutti_geometry, chunk_tokens),
	};
	struct tutti_geometry base = preset("tiny");
	struct tt_geo a, b;

	assert_int_equal(tt_geo_derive(&base, &a), 0);
	assert_int_equal(tt_geo_derive(&base, &b), 0);
	assert_true(tt_geo_equal(&a, &b));
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		struct tutti_geometry g = base;
		uint32_t v;

		memcpy(&v, (uint8_t *)&g + fields[i], sizeof(v));
		/* Stays valid: kv_planes 2 -> 1, others doubled (chunk with block). */
		v = fields[i] == offsetof(struct tutti_geometry, kv_planes) ? 1 : v * 2;
		memcpy((uint8_t *)&g + fields[i], &v, sizeof(v));
		if (fields[i] == offsetof(struct tutti_geometry, block_tokens)) {
			g.chunk_tokens *= 2;
		}
		assert_int_equal(tt_geo_derive(&g, &b), 0);
		assert_false(tt_geo_equal(&a, &b));
	}
}

/* ---- presets ---- */

static void
test_geometry_init_sets_documented_defaults(void **state)
{
	struct tutti_geometry g;

	memset(&g, 0xa5, sizeof(g));
	tutti_geometry_init(&g);
	assert_int_equal(g.size, sizeof(g));
	assert_int_equal(g.elem_bytes, 2);
	assert_int_equal(g.kv_planes, 2);
	assert_int_equal(g.block_tokens, 16);
	assert_int_equal(g.chunk_tokens, TUTTI_DEFAULT_CHUNK_TOKENS);
	assert_int_equal(g.nr_layers, 0);
	assert_int_equal(g.nr_kv_heads, 0);
	assert_int_equal(g.head_dim, 0);
	assert_int_equal(tutti_geometry_check(&g), -EINVAL);
	tutti_geometry_init(NULL); /* must not crash */
}

static void
test_geometry_presets_have_documented_shapes(void **state)
{
	const struct {
		const char *name;
		uint32_t layers, heads, dim, chunk;
	} want[] = {
	    {"llama-3-8b", 32, 8, 128, 256},
	    {"llama-3-70b", 80, 8, 128, 256},
	    {"glm-4-9b", 40, 2, 128, 256},
	    {"tiny", 2, 2, 16, 64},
	};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		struct tutti_geometry g;

		memset(&g, 0xa5, sizeof(g));
		assert_int_equal(tutti_geometry_preset(want[i].name, &g), 0);
		assert_int_equal(g.size, sizeof(g));
		assert_int_equal(g.nr_layers, want[i].layers);
		assert_int_equal(g.nr_kv_heads, want[i].heads);
		assert_int_equal(g.head_dim, want[i].dim);
		assert_int_equal(g.chunk_tokens, want[i].chunk);
		assert_int_equal(g.elem_bytes, 2);
		assert_int_equal(g.kv_planes, 2);
		assert_int_equal(g.block_tokens, 16);
		assert_int_equal(tutti_geometry_check(&g), 0);
	}
}

static void
test_geometry_preset_unknown_name_is_enoent(void **state)
{
	struct tutti_geometry g;

	assert_int_equal(tutti_geometry_preset("llama", &g), -ENOENT);
	assert_int_equal(tutti_geometry_preset("", &g), -ENOENT);
	assert_int_equal(tutti_geometry_preset("TINY", &g), -ENOENT);
	assert_int_equal(tutti_geometry_preset(NULL, &g), -EINVAL);
	assert_int_equal(tutti_geometry_preset("tiny", NULL), -EINVAL);
}

/* ---- tutti_kv_create ---- */

#define FAKE_BASE 0x100000000ull /* never dereferenced: registration only checks numbers */

static void
test_kv_create_accepts_every_layout(void **state)
{
	struct tutti_geometry g = preset("tiny");

	for (int l = 0; l < T_NR_LAYOUTS; l++) {
		struct t_kv *k;

		assert_int_equal(t_kv_alloc(&g, (enum t_layout)l, 8, &k), 0);
		assert_non_null(k->kv);
		assert_int_equal(k->kv->segs_per_layer, k->segs_per_layer);
		assert_int_equal(k->kv->nr_blocks, 8);
		assert_int_equal(k->kv->mem, TUTTI_MEM_HOST);
		assert_memory_equal(k->kv->segs, k->segs,
		                    g.nr_layers * k->segs_per_layer * sizeof(*k->segs));
		t_kv_free(k);
	}
}

static void
test_kv_create_kv_first_has_two_segments_per_layer(void **state)
{
	struct tutti_geometry g = preset("tiny");
	struct tutti_segment segs[4];
	struct tutti_kv *kv;

	for (int i = 0; i < 4; i++) {
		segs[i] = (struct tutti_segment){FAKE_BASE + i * MIB, 1024, 1024};
	}
	assert_int_equal(tutti_kv_create(&g, segs, 2, 100, TUTTI_MEM_HOST, &kv), 0);
	/* The handle owns a copy: later changes to the caller's array do not reach it. */
	segs[3].bytes = 7;
	assert_int_equal(kv->segs[3].bytes, 1024);
	assert_int_equal(tt_kv_layer_segs(kv, 1)->base, FAKE_BASE + 2 * MIB);
	tutti_kv_destroy(kv);
}

static void
test_kv_create_cross_layer_stride_is_all_layers(void **state)
{
	struct tutti_geometry g = preset("tiny");
	struct tutti_segment segs[2] = {
	    {FAKE_BASE, 2 * 2048, 2048},
	    {FAKE_BASE + 2048, 2 * 2048, 2048},
	};
	struct tutti_kv *kv;

	assert_int_equal(tutti_kv_create(&g, segs, 1, 1000, TUTTI_MEM_HOST, &kv), 0);
	assert_int_equal(tt_kv_layer_segs(kv, 1)->block_stride, 4096);
	tutti_kv_destroy(kv);
}

static void
test_kv_create_accepts_eight_segments_per_layer(void **state)
{
	struct tutti_geometry g = preset("tiny");
	struct tutti_segment segs[16];
	struct tutti_kv *kv;

	for (int i = 0; i < 16; i++) {
		segs[i] = (struct tutti_segment){FAKE_BASE + i * MIB, 256, 256};
	}
	assert_int_equal(tutti_kv_create(&g, segs, 8, 4, TUTTI_MEM_HOST, &kv), 0);
	tutti_kv_destroy(kv);
	assert_int_equal(tutti_kv_create(&g, segs, 9, 4, TUTTI_MEM_HOST, &kv), -EINVAL);
	assert_null(kv);
	assert_int_equal(tutti_kv_create(&g, segs, 0, 4, TUTTI_MEM_HOST, &kv), -EINVAL);
	assert_null(kv);
}

/* Two layers of one segment each, both valid; tests break one field of one of them. */
static void
blocks_first(struct tutti_segment segs[2])
{
	segs[0] = (struct tutti_segment){FAKE_BASE, 2048, 2048};
	segs[1] = (struct tutti_segment){FAKE_BASE + 64 * MIB, 2048, 2048};
}

static int
create_rc(const struct tutti_segment *segs, uint32_t spl, uint32_t nr_blocks, uint32_t mem)
{
	struct tutti_geometry g = preset("tiny");
	struct tutti_kv *kv = (struct tutti_kv *)(uintptr_t)1;
	int rc = tutti_kv_create(&g, segs, spl, nr_blocks, mem, &kv);

	if (rc == 0) {
		assert_non_null(kv);
		tutti_kv_destroy(kv);
	} else {
		assert_null(kv);
	}
	return rc;
}

static void
test_kv_create_segment_bytes_must_add_up_to_the_layer_block(void **state)
{
	struct tutti_segment segs[4];

	blocks_first(segs);
	assert_int_equal(create_rc(segs, 1, 16, TUTTI_MEM_HOST), 0);
	segs[1].bytes = 2047;
	assert_int_equal(create_rc(segs, 1, 16, TUTTI_MEM_HOST), -EINVAL);
	segs[1].bytes = 2049;
	assert_int_equal(create_rc(segs, 1, 16, TUTTI_MEM_HOST), -EINVAL);
	blocks_first(segs);
	segs[0].bytes = 1024;
	assert_int_equal(create_rc(segs, 1, 16, TUTTI_MEM_HOST), -EINVAL);

	/* Two segments per layer: K 1024 + V 1024 is right, 1024 + 1000 and 2048 + 0 are not. */
	for (int i = 0; i < 4; i++) {
		segs[i] = (struct tutti_segment){FAKE_BASE + i * MIB, 1024, 1024};
	}
	assert_int_equal(create_rc(segs, 2, 16, TUTTI_MEM_HOST), 0);
	segs[3].bytes = 1000;
	assert_int_equal(create_rc(segs, 2, 16, TUTTI_MEM_HOST), -EINVAL);
	segs[3].bytes = 1024;
	segs[2] = (struct tutti_segment){FAKE_BASE + 2 * MIB, 2048, 2048};
	segs[3].bytes = 0;
	assert_int_equal(create_rc(segs, 2, 16, TUTTI_MEM_HOST), -EINVAL);
}

static void
test_kv_create_segment_bytes_that_wrap_the_sum_are_einval(void **state)
{
	struct tutti_segment segs[6];

	/*
	 * Layer 0 is fine. Layer 1's three segments add up to 2048 only modulo 2^64:
	 * 100 + (2^64 - 52) + 2000. The middle one fits the address space (base 1, one block),
	 * so only the sum can catch it.
	 */
	segs[0] = (struct tutti_segment){FAKE_BASE, 1000, 1000};
	segs[1] = (struct tutti_segment){FAKE_BASE + 1 * MIB, 1024, 1024};
	segs[2] = (struct tutti_segment){FAKE_BASE + 2 * MIB, 24, 24};
	segs[3] = (struct tutti_segment){FAKE_BASE + 3 * MIB, 100, 100};
	segs[4] = (struct tutti_segment){1, 0, UINT64_MAX - 51};
	segs[5] = (struct tutti_segment){FAKE_BASE + 5 * MIB, 2000, 2000};
	assert_int_equal(create_rc(segs, 3, 1, TUTTI_MEM_HOST), -EINVAL);
}

static void
test_kv_create_zero_base_is_einval(void **state)
{
	struct tutti_segment segs[2];

	blocks_first(segs);
	segs[1].base = 0;
	assert_int_equal(create_rc(segs, 1, 16, TUTTI_MEM_HOST), -EINVAL);
}

static void
test_kv_create_overlapping_blocks_are_einval(void **state)
{
	struct tutti_segment segs[2];

	blocks_first(segs);
	segs[0].block_stride = 2047;
	assert_int_equal(create_rc(segs, 1, 16, TUTTI_MEM_HOST), -EINVAL);
	segs[0].block_stride = 0;
	assert_int_equal(create_rc(segs, 1, 2, TUTTI_MEM_HOST), -EINVAL);
	/* One block cannot overlap itself: any stride will do. */
	assert_int_equal(create_rc(segs, 1, 1, TUTTI_MEM_HOST), 0);
	/* Gaps between blocks are fine. */
	segs[0].block_stride = 4096;
	assert_int_equal(create_rc(segs, 1, 16, TUTTI_MEM_HOST), 0);
}

static void
test_kv_create_address_overflow_is_einval(void **state)
{
	struct tutti_segment segs[2];

	blocks_first(segs);
	segs[1].base = UINT64_MAX - 1000; /* the first block already wraps */
	assert_int_equal(create_rc(segs, 1, 1, TUTTI_MEM_HOST), -EINVAL);
	blocks_first(segs);
	segs[1].base = UINT64_MAX - 2048; /* block 0 ends just below the top: fine */
	assert_int_equal(create_rc(segs, 1, 1, TUTTI_MEM_HOST), 0);
	assert_int_equal(create_rc(segs, 1, 2, TUTTI_MEM_HOST), -EINVAL);
	blocks_first(segs);
	segs[0].block_stride = 1ull << 63; /* the last block's offset wraps */
	assert_int_equal(create_rc(segs, 1, 3, TUTTI_MEM_HOST), -EINVAL);
	segs[0].block_stride = UINT64_MAX / 2; /* (nr_blocks - 1) x stride overflows */
	assert_int_equal(create_rc(segs, 1, 4, TUTTI_MEM_HOST), -EINVAL);
}

static void
test_kv_create_zero_blocks_is_einval(void **state)
{
	struct tutti_segment segs[2];

	blocks_first(segs);
	assert_int_equal(create_rc(segs, 1, 0, TUTTI_MEM_HOST), -EINVAL);
}

static void
test_kv_create_unknown_memory_kind_is_eopnotsupp(void **state)
{
	struct tutti_segment segs[2];

	blocks_first(segs);
	assert_int_equal(create_rc(segs, 1, 16, TUTTI_MEM_CUDA + 1), -EOPNOTSUPP);
	assert_int_equal(create_rc(segs, 1, 16, UINT32_MAX), -EOPNOTSUPP);
}

static void
test_kv_create_cuda_with_host_memory_is_refused(void **state)
{
	struct tutti_segment segs[2];
	int rc;

	blocks_first(segs);
	rc = create_rc(segs, 1, 16, TUTTI_MEM_CUDA);
	/* Built without CUDA, no GPU here, or a GPU that says this is not its memory. */
	assert_true(rc == -EOPNOTSUPP || rc == -ENODEV || rc == -EINVAL);
}

static void
test_kv_create_null_and_invalid_arguments_are_einval(void **state)
{
	struct tutti_geometry g = preset("tiny"), bad = g;
	struct tutti_segment segs[2];
	struct tutti_kv *kv = (struct tutti_kv *)(uintptr_t)1;

	blocks_first(segs);
	assert_int_equal(tutti_kv_create(&g, segs, 1, 16, TUTTI_MEM_HOST, NULL), -EINVAL);
	assert_int_equal(tutti_kv_create(NULL, segs, 1, 16, TUTTI_MEM_HOST, &kv), -EINVAL);
	assert_null(kv);
	kv = (struct tutti_kv *)(uintptr_t)1;
	assert_int_equal(tutti_kv_create(&g, NULL, 1, 16, TUTTI_MEM_HOST, &kv), -EINVAL);
	assert_null(kv);
	bad.kv_planes = 3;
	assert_int_equal(tutti_kv_create(&bad, segs, 1, 16, TUTTI_MEM_HOST, &kv), -EINVAL);
	tutti_kv_destroy(NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_geo_llama_3_8b_has_64k_blocks_1m_objects_32m_slots),
	    cmocka_unit_test(test_geo_llama_3_70b_sizes),
	    cmocka_unit_test(test_geo_glm_4_9b_sizes),
	    cmocka_unit_test(test_geo_tiny_sizes),
	    cmocka_unit_test(test_geo_mla_single_plane_halves_the_layer_block),
	    cmocka_unit_test(test_geo_object_is_padded_to_4k),
	    cmocka_unit_test(test_geo_each_zero_field_is_einval),
	    cmocka_unit_test(test_geo_three_kv_planes_is_einval),
	    cmocka_unit_test(test_geo_chunk_not_multiple_of_block_is_einval),
	    cmocka_unit_test(test_geo_wrong_size_member_is_einval),
	    cmocka_unit_test(test_geo_oversized_fields_are_einval),
	    cmocka_unit_test(test_geo_layer_block_product_that_wraps_64_bits_is_einval),
	    cmocka_unit_test(test_geo_null_arguments_are_einval),
	    cmocka_unit_test(test_geo_equal_compares_every_shape_field),
	    cmocka_unit_test(test_geometry_init_sets_documented_defaults),
	    cmocka_unit_test(test_geometry_presets_have_documented_shapes),
	    cmocka_unit_test(test_geometry_preset_unknown_name_is_enoent),
	    cmocka_unit_test(test_kv_create_accepts_every_layout),
	    cmocka_unit_test(test_kv_create_kv_first_has_two_segments_per_layer),
	    cmocka_unit_test(test_kv_create_cross_layer_stride_is_all_layers),
	    cmocka_unit_test(test_kv_create_accepts_eight_segments_per_layer),
	    cmocka_unit_test(test_kv_create_segment_bytes_must_add_up_to_the_layer_block),
	    cmocka_unit_test(test_kv_create_segment_bytes_that_wrap_the_sum_are_einval),
	    cmocka_unit_test(test_kv_create_zero_base_is_einval),
	    cmocka_unit_test(test_kv_create_overlapping_blocks_are_einval),
	    cmocka_unit_test(test_kv_create_address_overflow_is_einval),
	    cmocka_unit_test(test_kv_create_zero_blocks_is_einval),
	    cmocka_unit_test(test_kv_create_unknown_memory_kind_is_eopnotsupp),
	    cmocka_unit_test(test_kv_create_cuda_with_host_memory_is_refused),
	    cmocka_unit_test(test_kv_create_null_and_invalid_arguments_are_einval),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
