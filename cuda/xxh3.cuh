/* SPDX-License-Identifier: Apache-2.0 */
/*
 * XXH3-64 with a 192-byte secret, for inputs longer than TT_XXH3_MIDSIZE_MAX (format/format.h)
 * bytes, computed by one CUDA block: the same value as libxxhash's XXH3_64bits_withSecret
 * (tests/gpu checks them against each other). Written for this project from the algorithm's
 * description in the xxHash specification; no code of the library is used.
 *
 * Why it parallelises: the long path keeps 8 accumulators; each 64-byte stripe adds to
 * accumulator k the stripe's word k^1 and the 32x32->64 product of the halves of
 * (word k XOR secret word), and every 16 stripes (a 1 KiB block) each accumulator is
 * scrambled. Additions commute, so the 16 stripes of a block can be summed in any order and all
 * blocks' sums computed at once; only the scrambles form a chain, one cheap step per block.
 * The block's threads compute block sums for a window of blocks into shared memory, then eight
 * threads fold them through the scramble chain.
 */
#ifndef TT_CUDA_XXH3_CUH
#define TT_CUDA_XXH3_CUH

#include <stdint.h>

#define XXH_PRIME32_1 0x9E3779B1u
#define XXH_PRIME32_2 0x85EBCA77u
#define XXH_PRIME32_3 0xC2B2AE3Du
#define XXH_PRIME64_1 0x9E3779B185EBCA87ull
#define XXH_PRIME64_2 0xC2B2AE3D27D4EB4Full
#define XXH_PRIME64_3 0x165667B19E3779F9ull
#define XXH_PRIME64_4 0x85EBCA77C2B2AE63ull
#define XXH_PRIME64_5 0x27D4EB2F165667C5ull

/* Blocks of 1 KiB whose sums are computed together before being folded. */
#define XXH_WINDOW 32

/* The secret, as 24 little-endian words, in constant memory (set by the host, per file
 * that includes this header). */
static __constant__ uint64_t c_xxh_secret[24];

__device__ static inline uint64_t
xxh_secret_at(uint32_t byte_off)
{
	/* Unaligned reads of the secret (byte offsets such as 11 or 121 in the last steps). */
	uint32_t w = byte_off / 8, s = byte_off % 8;

	if (s == 0) {
		return c_xxh_secret[w];
	}
	return (c_xxh_secret[w] >> (8 * s)) | (c_xxh_secret[w + 1] << (64 - 8 * s));
}

__device__ static inline uint64_t
xxh_load64(const uint8_t *p)
{
	/* Objects and stripes are 8-byte aligned here; the last stripe may not be. */
	if (((uintptr_t)p & 7) == 0) {
		return *reinterpret_cast<const uint64_t *>(p);
	}
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--) {
		v = (v << 8) | p[i];
	}
	return v;
}

/* Accumulator k's share of one stripe at \p p with secret offset \p soff (bytes). */
__device__ static inline uint64_t
xxh_stripe_lane(const uint8_t *p, uint32_t soff, unsigned k)
{
	uint64_t data = xxh_load64(p + 8 * k);
	uint64_t swap = xxh_load64(p + 8 * (k ^ 1));
	uint64_t key = data ^ xxh_secret_at(soff + 8 * k);

	return swap + (uint64_t)(uint32_t)key * (key >> 32);
}

__device__ static inline uint64_t
xxh_scramble(uint64_t acc, unsigned k)
{
	acc ^= acc >> 47;
	acc ^= xxh_secret_at(192 - 64 + 8 * k);
	return acc * XXH_PRIME32_1;
}

__device__ static inline uint64_t
xxh_mul128_fold64(uint64_t a, uint64_t b)
{
	return a * b ^ __umul64hi(a, b);
}

__device__ static inline uint64_t
xxh_avalanche(uint64_t h)
{
	h ^= h >> 37;
	h *= 0x165667919E3779F9ull;
	return h ^ (h >> 32);
}

/*
 * The threads that work on one object together: a whole block, or one of several groups of a
 * block (the gpu-uring kernel packs several workers into a block, so that its I/O holds fewer
 * SMs), which synchronise on a named barrier of their own.
 */
struct team {
	unsigned lane;    /* this thread's index in the team */
	unsigned size;    /* threads in the team, a multiple of 32 */
	unsigned barrier; /* 0: the whole block (size == blockDim.x); else the team's own */
};

__device__ static inline void
team_sync(const team &t)
{
	asm volatile("bar.sync %0, %1;" ::"r"(t.barrier), "r"(t.size) : "memory");
}

/* Stripes of a block whose words one thread has in flight at once. */
#define XXH_STRIPES_IN_FLIGHT 8

/*
 * Accumulator k's sum over the 16 stripes of the 1 KiB block at \p b (16-byte aligned). Each
 * stripe's words k and k ^ 1 are one aligned 16-byte vector, and the vectors of
 * XXH_STRIPES_IN_FLIGHT stripes are loaded before any is used: one stripe at a time, every
 * stripe was a round trip to L2 in turn, and hashing took most of a worker's time on an object
 * (docs/design.md).
 */
__device__ static inline uint64_t
xxh_block_lane_vec(const uint8_t *b, unsigned k)
{
	const ulonglong2 *v = reinterpret_cast<const ulonglong2 *>(b) + (k >> 1);
	uint64_t sum = 0;

#pragma unroll
	for (unsigned s0 = 0; s0 < 16; s0 += XXH_STRIPES_IN_FLIGHT) {
		ulonglong2 w[XXH_STRIPES_IN_FLIGHT];

#pragma unroll
		for (unsigned j = 0; j < XXH_STRIPES_IN_FLIGHT; j++) {
			w[j] = v[4 * (s0 + j)]; /* stripe s0 + j: 64 bytes, 4 vectors */
		}
#pragma unroll
		for (unsigned j = 0; j < XXH_STRIPES_IN_FLIGHT; j++) {
			uint64_t data = (k & 1) ? w[j].y : w[j].x, swap = (k & 1) ? w[j].x : w[j].y;
			/* secret offset 8 (s0 + j) + 8 k: an aligned word */
			uint64_t key = data ^ c_xxh_secret[s0 + j + k];

			sum += swap + (uint64_t)(uint32_t)key * (key >> 32);
		}
	}
	return sum;
}

/* The same for any alignment, a stripe at a time. */
__device__ static inline uint64_t
xxh_block_lane(const uint8_t *b, unsigned k)
{
	uint64_t sum = 0;

	if (((uintptr_t)b & 15) == 0) {
		return xxh_block_lane_vec(b, k);
	}
	for (uint32_t s = 0; s < 16; s++) {
		sum += xxh_stripe_lane(b + 64 * s, 8 * s, k);
	}
	return sum;
}

/* The shared memory one team's hash needs. */
struct xxh_shared {
	uint64_t sums[XXH_WINDOW * 8];
	uint64_t acc[8];
	uint64_t result;
};

/*
 * XXH3-64 of \p len (> TT_XXH3_MIDSIZE_MAX) bytes at \p p, computed by all threads of team \p t
 * (every one must call it) in \p sh, the team's own shared memory. The result is valid in every
 * thread.
 */
__device__ static uint64_t
xxh3_64_block(const uint8_t *p, uint64_t len, xxh_shared *sh, const team &t)
{
	const uint64_t block_len = 1024;
	uint64_t nb_blocks = (len - 1) / block_len;

	if (t.lane < 8) {
		const uint64_t init[8] = {XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2,
		                          XXH_PRIME64_3, XXH_PRIME64_4, XXH_PRIME32_2,
		                          XXH_PRIME64_5, XXH_PRIME32_1};

		sh->acc[t.lane] = init[t.lane];
	}
	for (uint64_t first = 0; first < nb_blocks; first += XXH_WINDOW) {
		uint32_t n =
		    (uint32_t)(nb_blocks - first < XXH_WINDOW ? nb_blocks - first : XXH_WINDOW);

		/* Block sums of this window: task (block, k) adds its 16 stripes. */
		for (uint32_t i = t.lane; i < n * 8; i += t.size) {
			sh->sums[i] = xxh_block_lane(p + (first + i / 8) * block_len, i % 8);
		}
		team_sync(t);
		/* The chain: add, scramble, per block in order. */
		if (t.lane < 8) {
			uint64_t a = sh->acc[t.lane];

			for (uint32_t i = 0; i < n; i++) {
				a = xxh_scramble(a + sh->sums[i * 8 + t.lane], t.lane);
			}
			sh->acc[t.lane] = a;
		}
		team_sync(t);
	}
	if (t.lane < 8) {
		unsigned k = t.lane;
		const uint8_t *tail = p + nb_blocks * block_len;
		uint64_t nb_stripes = ((len - 1) - block_len * nb_blocks) / 64;
		uint64_t a = sh->acc[k];

		/* The last, partial block, without scramble; then the last stripe. */
		for (uint64_t s = 0; s < nb_stripes; s++) {
			a += xxh_stripe_lane(tail + 64 * s, (uint32_t)(8 * s), k);
		}
		a += xxh_stripe_lane(p + len - 64, 192 - 64 - 7, k);
		sh->acc[k] = a;
	}
	team_sync(t);
	if (t.lane == 0) {
		uint64_t h = len * XXH_PRIME64_1;

		for (int i = 0; i < 4; i++) {
			h += xxh_mul128_fold64(sh->acc[2 * i] ^ xxh_secret_at(11 + 16 * i),
			                       sh->acc[2 * i + 1] ^ xxh_secret_at(11 + 16 * i + 8));
		}
		sh->result = xxh_avalanche(h);
	}
	team_sync(t);
	return sh->result;
}

#endif /* TT_CUDA_XXH3_CUH */
