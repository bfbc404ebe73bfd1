/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Save a prompt's KV to a Tutti store and load it back: what a serving engine does with the
 * library, in one program that uses the public API only.
 *
 * A serving engine keeps KV in paged blocks: per layer a K and a V tensor of nr_blocks blocks
 * each (the "kv-first" layout vLLM uses). This program
 *   1. opens (or creates) a store in DIR for a model's geometry;
 *   2. registers its paged KV: two segments, K and V, per layer;
 *   3. saves a prompt of three chunks from blocks 0, 1, 2, ...;
 *   4. looks the prompt up, loads it into other blocks in reverse order and checks every byte.
 * Run it twice on one DIR: the second run finds the chunks already stored (they survive
 * restarts), and list_chunks prints what the store holds.
 *
 * Usage: save_and_load DIR [MODEL]   (MODEL: a tutti_geometry_preset name; default llama-3-8b)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tutti/tutti.h>

#define PROMPT_CHUNKS 3u
#define KEY_BYTES 32u
#define CAPACITY_SLOTS 8u

/*
 * Keys are the caller's chained hashes (in vLLM, its block hashes): chunk i's key digests chunk
 * i-1's key and chunk i's tokens, so one key names the whole prefix up to its chunk. Any hash of
 * 16 to 64 bytes does; this toy one (FNV-1a, widened by splitmix64) keeps the example
 * self-contained.
 */
static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void
chain_keys(const uint32_t *tokens, uint32_t chunk_tokens, uint32_t nr_chunks, uint8_t *keys)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint32_t c = 0; c < nr_chunks; c++) {
		/* h already covers every earlier chunk: continue it over this chunk's tokens. */
		for (uint32_t t = c * chunk_tokens; t < (c + 1) * chunk_tokens; t++) {
			h = (h ^ tokens[t]) * 0x100000001b3ull;
		}
		uint64_t s = h;
		for (uint32_t w = 0; w < KEY_BYTES / 8; w++) {
			uint64_t v = splitmix64(&s);
			memcpy(keys + (size_t)c * KEY_BYTES + w * 8, &v, 8);
		}
	}
}

/* Bytes of layer l, block b, segment seg (0: K, 1: V) in the kv-first layout. */
static uint8_t *
block_at(uint8_t *kv, uint32_t nr_blocks, uint64_t half_bytes, uint32_t l, uint32_t b, uint32_t seg)
{
	return kv + ((uint64_t)(2 * l + seg) * nr_blocks + b) * half_bytes;
}

int
main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s DIR [MODEL]\n", argv[0]);
		return 2;
	}
	const char *dir = argv[1], *model = argc > 2 ? argv[2] : "llama-3-8b";
	struct tutti_store *st = NULL;
	struct tutti_kv *kv = NULL;
	uint8_t *mem = NULL;
	int status = 1;

	/* 1. The model's KV geometry and a store for it. */
	struct tutti_geometry geo;
	int rc = tutti_geometry_preset(model, &geo);
	if (rc < 0) {
		fprintf(stderr, "unknown model %s: %s\n", model, tutti_strerror(rc));
		return 2;
	}
	const uint32_t bpc = tutti_geometry_blocks_per_chunk(&geo);
	const uint64_t half = tutti_geometry_layer_block_bytes(&geo) / 2; /* K or V of a block */

	struct tutti_store_opts o;
	tutti_store_opts_init(&o);
	const char *dirs[] = {dir}; /* one directory per disk */
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.capacity_bytes = CAPACITY_SLOTS * tutti_geometry_slot_bytes(&geo);
	o.flags = TUTTI_OPEN_CREATE;
	o.ns = model; /* a store serves one model: its namespace says which */
	o.ns_bytes = (uint32_t)strlen(model);
	o.key_bytes = KEY_BYTES;
	rc = tutti_store_open(&geo, &o, &st);
	if (rc < 0) {
		fprintf(stderr, "tutti_store_open %s: %s\n", dir, tutti_strerror(rc));
		goto out;
	}

	/* 2. Paged KV of nr_blocks blocks: the prompt's blocks, then as many to load into. */
	const uint32_t prompt_blocks = PROMPT_CHUNKS * bpc, nr_blocks = 2 * prompt_blocks;
	const size_t mem_bytes = (size_t)geo.nr_layers * 2 * nr_blocks * half;
	mem = aligned_alloc(TUTTI_ALIGN, mem_bytes);
	if (mem == NULL) {
		fprintf(stderr, "out of memory (%zu bytes of KV)\n", mem_bytes);
		goto out;
	}
	struct tutti_segment *segs = calloc((size_t)geo.nr_layers * 2, sizeof(*segs));
	if (segs == NULL) {
		fprintf(stderr, "out of memory\n");
		goto out;
	}
	for (uint32_t l = 0; l < geo.nr_layers; l++) {
		for (uint32_t seg = 0; seg < 2; seg++) {
			segs[2 * l + seg] = (struct tutti_segment){
			    .base = (uint64_t)(uintptr_t)block_at(mem, nr_blocks, half, l, 0, seg),
			    .block_stride = half,
			    .bytes = half,
			};
		}
	}
	rc = tutti_kv_create(&geo, segs, 2, nr_blocks, TUTTI_MEM_HOST, &kv);
	free(segs); /* copied by tutti_kv_create */
	if (rc < 0) {
		fprintf(stderr, "tutti_kv_create: %s\n", tutti_strerror(rc));
		goto out;
	}

	/* The prompt: its tokens, their chained keys, and KV the model would have computed. */
	uint32_t tokens[PROMPT_CHUNKS * 1024];
	if (PROMPT_CHUNKS * geo.chunk_tokens > sizeof(tokens) / sizeof(tokens[0])) {
		fprintf(stderr, "chunks of %u tokens: too long for this example\n",
		        geo.chunk_tokens);
		goto out;
	}
	uint64_t seed = 42;
	for (uint32_t t = 0; t < PROMPT_CHUNKS * geo.chunk_tokens; t++) {
		tokens[t] = (uint32_t)(splitmix64(&seed) % 128000);
	}
	uint8_t keys[PROMPT_CHUNKS * KEY_BYTES];
	chain_keys(tokens, geo.chunk_tokens, PROMPT_CHUNKS, keys);
	for (size_t i = 0; i < mem_bytes; i += 8) {
		uint64_t v = splitmix64(&seed);
		memcpy(mem + i, &v, 8);
	}

	/* 3. Save: the prompt's chunks from blocks 0 .. prompt_blocks - 1. */
	uint32_t saved_ids[PROMPT_CHUNKS * 64], loaded_ids[PROMPT_CHUNKS * 64];
	if (prompt_blocks > sizeof(saved_ids) / sizeof(saved_ids[0])) {
		fprintf(stderr, "%u blocks per chunk: too many for this example\n", bpc);
		goto out;
	}
	for (uint32_t i = 0; i < prompt_blocks; i++) {
		saved_ids[i] = i;
		loaded_ids[i] = nr_blocks - 1 - i; /* elsewhere, and in reverse order */
	}
	struct tutti_request req = {
	    .size = sizeof(req),
	    .nr_keys = PROMPT_CHUNKS,
	    .keys = keys,
	    .first_chunk = 0,
	    .nr_blocks = prompt_blocks,
	    .block_ids = saved_ids,
	};
	int32_t chunk_status[PROMPT_CHUNKS];
	int64_t n = tutti_store_save(st, kv, &req, 1, chunk_status);
	if (n < 0) {
		fprintf(stderr, "tutti_store_save: %s\n", tutti_strerror((int)n));
		goto out;
	}
	uint32_t present = 0;
	for (uint32_t c = 0; c < PROMPT_CHUNKS; c++) {
		if (chunk_status[c] < 0) {
			fprintf(stderr, "chunk %u not saved: %s\n", c,
			        tutti_strerror(chunk_status[c]));
			goto out;
		}
		present += chunk_status[c] == 1;
	}
	printf("saved %lld chunks, %u already stored\n", (long long)n, present);

	/* 4. Look the prompt up (the longest stored prefix), load it elsewhere, check it. */
	uint64_t hit_blocks = 0;
	int64_t hit = tutti_store_lookup(st, keys, PROMPT_CHUNKS, &hit_blocks);
	if (hit != PROMPT_CHUNKS) {
		fprintf(stderr, "lookup found %lld of %u chunks\n", (long long)hit, PROMPT_CHUNKS);
		goto out;
	}
	req.nr_blocks = (uint32_t)hit_blocks;
	req.block_ids = loaded_ids;
	n = tutti_store_load(st, kv, &req, 1, 0, geo.nr_layers, chunk_status);
	if (n < 0) {
		fprintf(stderr, "tutti_store_load: %s\n", tutti_strerror((int)n));
		goto out;
	}
	for (uint32_t c = 0; c < PROMPT_CHUNKS; c++) {
		if (chunk_status[c] < 0) {
			/* Evicted or damaged since the lookup: a serving engine recomputes it. */
			fprintf(stderr, "chunk %u not loaded: %s\n", c,
			        tutti_strerror(chunk_status[c]));
			goto out;
		}
	}
	for (uint32_t l = 0; l < geo.nr_layers; l++) {
		for (uint32_t i = 0; i < prompt_blocks; i++) {
			for (uint32_t seg = 0; seg < 2; seg++) {
				if (memcmp(block_at(mem, nr_blocks, half, l, saved_ids[i], seg),
				           block_at(mem, nr_blocks, half, l, loaded_ids[i], seg),
				           half) != 0) {
					fprintf(stderr, "layer %u block %u differs after load\n", l,
					        i);
					goto out;
				}
			}
		}
	}
	printf("loaded %lld chunks (%llu blocks of %u layers) into other blocks: identical\n",
	       (long long)n, (unsigned long long)hit_blocks, geo.nr_layers);
	status = 0;
out:
	tutti_kv_destroy(kv);
	tutti_store_close(st);
	free(mem);
	return status;
}
