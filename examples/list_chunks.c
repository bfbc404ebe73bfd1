/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Open an existing store without knowing its model and say what it holds: its geometry, what
 * recovery found at open, and every stored chunk (a process that matches prompts against a
 * store's contents lists them this way instead of asking key by key).
 *
 * Usage: list_chunks DIR...   (the store's directories, in the order it was created with)
 * Prints "N chunks" last; exits 1 when the store cannot be opened.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <tutti/tutti.h>

#define BATCH 256u

int
main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR...\n", argv[0]);
		return 2;
	}
	struct tutti_store *st = NULL;
	uint8_t *keys = NULL;
	int status = 1;

	struct tutti_store_opts o;
	tutti_store_opts_init(&o);
	o.dirs = (const char *const *)(argv + 1);
	o.nr_dirs = (uint32_t)(argc - 1);
	/* The geometry, key size, namespace and capacity the store was created with. */
	o.flags = TUTTI_OPEN_EXISTING;
	int rc = tutti_store_open(NULL, &o, &st);
	if (rc < 0) {
		fprintf(stderr, "tutti_store_open %s: %s\n", argv[1], tutti_strerror(rc));
		goto out;
	}
	struct tutti_geometry geo = {.size = sizeof(geo)};
	struct tutti_stats stats = {.size = sizeof(stats)};
	if ((rc = tutti_store_geometry(st, &geo)) < 0 ||
	    (rc = tutti_store_get_stats(st, &stats)) < 0) {
		fprintf(stderr, "store: %s\n", tutti_strerror(rc));
		goto out;
	}
	printf("geometry: %u layers, %u KV heads of %u x %u bytes, %u-token blocks, %u-token "
	       "chunks\n",
	       geo.nr_layers, geo.nr_kv_heads, geo.head_dim, geo.elem_bytes, geo.block_tokens,
	       geo.chunk_tokens);
	printf("capacity: %llu of %llu slots used; recovery found %llu chunks, dropped %llu\n",
	       (unsigned long long)stats.used_slots, (unsigned long long)stats.capacity_slots,
	       (unsigned long long)stats.recovered_chunks,
	       (unsigned long long)(stats.recovery_dropped + stats.recovery_orphans +
	                            stats.recovery_duplicates));

	/* The key size is the store's: 64 bytes is the most a key may have. */
	keys = malloc((size_t)BATCH * 64);
	uint32_t blocks[BATCH];
	if (keys == NULL) {
		fprintf(stderr, "out of memory\n");
		goto out;
	}
	uint64_t cursor = 0, chunks = 0, total_blocks = 0;
	int64_t n;
	while ((n = tutti_store_list(st, &cursor, keys, blocks, BATCH)) > 0) {
		for (int64_t i = 0; i < n; i++) {
			total_blocks += blocks[i];
		}
		chunks += (uint64_t)n;
	}
	if (n < 0) {
		fprintf(stderr, "tutti_store_list: %s\n", tutti_strerror((int)n));
		goto out;
	}
	printf("%llu chunks, %llu paged blocks\n", (unsigned long long)chunks,
	       (unsigned long long)total_blocks);
	status = 0;
out:
	tutti_store_close(st);
	free(keys);
	return status;
}
