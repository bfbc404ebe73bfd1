/* SPDX-License-Identifier: Apache-2.0 */
/*
 * XXH3-64 with a 192-byte secret, for inputs longer than 240 bytes, computed by one CUDA block:
 * the same value as libxxhash's XXH3_64bits_withSecret (tests/gpu checks them against each
 * other). Written for this project from the algorithm's description in the xxHash
 * specification; no code of the library is used.
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
 * XXH3-64 of \p len (> 240) bytes at \p p, computed by all threads of the calling block (every
 * thread must call it). \p sums is XXH_WINDOW * 8 words of shared memory. The result is valid
 * in every thread.
 */
__device__ static uint64_t
xxh3_64_block(const uint8_t *p, uint64_t len, uint64_t *sums)
{
	__shared__ uint64_t acc[8];
	__shared__ uint64_t result;
	const uint64_t block_len = 1024;
	uint64_t nb_blocks = (len - 1) / block_len;

	if (threadIdx.x < 8) {
		const uint64_t init[8] = {XXH_PRIME32_3, XXH_PRIME64_1, XXH_PRIME64_2,
		                          XXH_PRIME64_3, XXH_PRIME64_4, XXH_PRIME32_2,
		                          XXH_PRIME64_5, XXH_PRIME32_1};

		acc[threadIdx.x] = init[threadIdx.x];
	}
	for (uint64_t first = 0; first < nb_blocks; first += XXH_WINDOW) {
		uint32_t n =
		    (uint32_t)(nb_blocks - first < XXH_WINDOW ? nb_blocks - first : XXH_WINDOW);

		/* Block sums of this window: task (block, k) adds its 16 stripes. */
		for (uint32_t t = threadIdx.x; t < n * 8; t += blockDim.x) {
			const uint8_t *b = p + (first + t / 8) * block_len;
			unsigned k = t % 8;
			uint64_t sum = 0;

			for (uint32_t s = 0; s < 16; s++) {
				sum += xxh_stripe_lane(b + 64 * s, 8 * s, k);
			}
			sums[t] = sum;
		}
		__syncthreads();
		/* The chain: add, scramble, per block in order. */
		if (threadIdx.x < 8) {
			uint64_t a = acc[threadIdx.x];

			for (uint32_t i = 0; i < n; i++) {
				a = xxh_scramble(a + sums[i * 8 + threadIdx.x], threadIdx.x);
			}
			acc[threadIdx.x] = a;
		}
		__syncthreads();
	}
	if (threadIdx.x < 8) {
		unsigned k = threadIdx.x;
		const uint8_t *tail = p + nb_blocks * block_len;
		uint64_t nb_stripes = ((len - 1) - block_len * nb_blocks) / 64;
		uint64_t a = acc[k];

		/* The last, partial block, without scramble; then the last stripe. */
		for (uint64_t s = 0; s < nb_stripes; s++) {
			a += xxh_stripe_lane(tail + 64 * s, (uint32_t)(8 * s), k);
		}
		a += xxh_stripe_lane(p + len - 64, 192 - 64 - 7, k);
		acc[k] = a;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		uint64_t h = len * XXH_PRIME64_1;

		for (int i = 0; i < 4; i++) {
			h += xxh_mul128_fold64(acc[2 * i] ^ xxh_secret_at(11 + 16 * i),
			                       acc[2 * i + 1] ^ xxh_secret_at(11 + 16 * i + 8));
		}
		result = xxh_avalanche(h);
	}
	__syncthreads();
	return result;
}

#endif /* TT_CUDA_XXH3_CUH */
