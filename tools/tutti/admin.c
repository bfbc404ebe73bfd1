/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tutti inspect and tutti fsck: open an existing store with the geometry it was created with,
 * report what recovery found, and (fsck) read every object back against its checksum. Both open
 * the store read-only (they work on a read-only filesystem and change nothing, not even a
 * file's time), except fsck --repair, the one that writes.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "admin.h"
#include "tutti/tutti.h"

#define MAX_DIRS 64

/* fsck exit codes, after fsck(8): */
enum {
	FSCK_CLEAN = 0,
	FSCK_REPAIRED = 1,
	FSCK_USAGE = 2,
	FSCK_DAMAGED = 4,
	FSCK_FAILED = 8,
};

static void
log_line(void *arg, int level, const char *msg)
{
	(void)arg;
	fprintf(stderr, "tutti: %s%s\n", level == TUTTI_LOG_ERR ? "error: " : "", msg);
}

static int
open_existing(const char *const *dirs, uint32_t nr_dirs, bool repair, struct tutti_store **st)
{
	struct tutti_store_opts o;
	int rc;

	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_EXISTING | (repair ? TUTTI_OPEN_REPAIR : TUTTI_OPEN_READ_ONLY);
	o.dirs = dirs;
	o.nr_dirs = nr_dirs;
	o.log_fn = log_line;
	rc = tutti_store_open(NULL, &o, st);
	if (rc < 0) {
		/* The library's log lines above say why; this one says what failed. */
		fprintf(stderr, "tutti: cannot open the store in %s%s: %s\n", dirs[0],
		        nr_dirs > 1 ? " and the other directories given" : "", tutti_strerror(rc));
	}
	return rc;
}

static double
gib(uint64_t bytes)
{
	return (double)bytes / (double)(1ull << 30);
}

static void
print_store(const char *const *dirs, uint32_t nr_dirs, struct tutti_store *st,
            const struct tutti_stats *s)
{
	struct tutti_geometry g;

	tutti_store_geometry(st, &g);
	printf("store      %s", dirs[0]);
	for (uint32_t d = 1; d < nr_dirs; d++) {
		printf(", %s", dirs[d]);
	}
	printf(" (%u director%s)\n", nr_dirs, nr_dirs == 1 ? "y" : "ies");
	printf("geometry   %u layers, %u KV heads, head dim %u, %u-byte elements, %u plane%s, "
	       "%u-token blocks, %u-token chunks\n",
	       g.nr_layers, g.nr_kv_heads, g.head_dim, g.elem_bytes, g.kv_planes,
	       g.kv_planes == 1 ? "" : "s", g.block_tokens, g.chunk_tokens);
	printf("sizes      layer block %llu KiB, object %llu KiB, slot %llu KiB\n",
	       (unsigned long long)tutti_geometry_layer_block_bytes(&g) >> 10,
	       (unsigned long long)tutti_geometry_object_bytes(&g) >> 10,
	       (unsigned long long)tutti_geometry_slot_bytes(&g) >> 10);
	printf("capacity   %llu slots (%.2f GiB), %llu chunks stored (%.1f%% used, %.2f GiB)\n",
	       (unsigned long long)s->capacity_slots, gib(s->capacity_slots * s->slot_bytes),
	       (unsigned long long)s->used_slots,
	       s->capacity_slots ? 100.0 * (double)s->used_slots / (double)s->capacity_slots : 0.0,
	       gib(s->used_slots * s->slot_bytes));
	printf("recovery   %llu chunks in %.3f s; dropped %llu damaged or foreign headers; "
	       "%llu chunks whose parent is missing (kept); %llu second copies\n",
	       (unsigned long long)s->recovered_chunks, (double)s->recovery_ns / 1e9,
	       (unsigned long long)s->recovery_dropped, (unsigned long long)s->recovery_orphans,
	       (unsigned long long)s->recovery_duplicates);
}

/* The directory arguments after the options; returns how many, or -1 on a usage error. */
static int
collect_dirs(int argc, char **argv, const char **dirs)
{
	int n = 0;

	for (int i = optind; i < argc; i++) {
		if (n == MAX_DIRS) {
			return -1;
		}
		dirs[n++] = argv[i];
	}
	return n > 0 ? n : -1;
}

int
cmd_inspect(int argc, char **argv)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
	const char *dirs[MAX_DIRS];
	struct tutti_stats s = {.size = sizeof(s)};
	struct tutti_geometry g;
	struct tutti_store *st;
	bool json = false;
	int opt, n;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt != 'j') {
			return 2;
		}
		json = true;
	}
	n = collect_dirs(argc, argv, dirs);
	if (n < 0) {
		fprintf(stderr, "usage: tutti inspect [--json] DIR...\n");
		return 2;
	}
	if (open_existing(dirs, (uint32_t)n, false, &st) < 0) {
		return 1;
	}
	tutti_store_get_stats(st, &s);
	tutti_store_geometry(st, &g);
	if (json) {
		printf("{\"nr_dirs\":%d,\"nr_layers\":%u,\"nr_kv_heads\":%u,\"head_dim\":%u,"
		       "\"elem_bytes\":%u,\"kv_planes\":%u,\"block_tokens\":%u,\"chunk_tokens\":%u,"
		       "\"slot_bytes\":%llu,\"capacity_slots\":%llu,\"chunks\":%llu,"
		       "\"recovered_chunks\":%llu,\"recovery_dropped\":%llu,"
		       "\"recovery_orphans\":%llu,\"recovery_duplicates\":%llu,"
		       "\"recovery_s\":%.6f}\n",
		       n, g.nr_layers, g.nr_kv_heads, g.head_dim, g.elem_bytes, g.kv_planes,
		       g.block_tokens, g.chunk_tokens, (unsigned long long)s.slot_bytes,
		       (unsigned long long)s.capacity_slots, (unsigned long long)s.used_slots,
		       (unsigned long long)s.recovered_chunks,
		       (unsigned long long)s.recovery_dropped,
		       (unsigned long long)s.recovery_orphans,
		       (unsigned long long)s.recovery_duplicates, (double)s.recovery_ns / 1e9);
	} else {
		print_store(dirs, (uint32_t)n, st, &s);
	}
	tutti_store_close(st);
	return 0;
}

int
cmd_fsck(int argc, char **argv)
{
	static const struct option opts[] = {{"repair", no_argument, NULL, 'r'},
	                                     {NULL, 0, NULL, 0}};
	const char *dirs[MAX_DIRS];
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	struct tutti_stats s = {.size = sizeof(s)};
	struct tutti_store *st;
	bool repair = false;
	uint64_t damaged, left;
	int opt, n, rc;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt != 'r') {
			return FSCK_USAGE;
		}
		repair = true;
	}
	n = collect_dirs(argc, argv, dirs);
	if (n < 0) {
		fprintf(stderr, "usage: tutti fsck [--repair] DIR...\n");
		return FSCK_USAGE;
	}
	if (open_existing(dirs, (uint32_t)n, repair, &st) < 0) {
		return FSCK_FAILED;
	}
	tutti_store_get_stats(st, &s);
	print_store(dirs, (uint32_t)n, st, &s);
	rc = tutti_store_fsck(st, repair ? TUTTI_FSCK_REPAIR : 0, &rep);
	tutti_store_close(st);
	if (rc < 0) {
		fprintf(stderr, "tutti: fsck failed: %s\n", tutti_strerror(rc));
		return FSCK_FAILED;
	}
	/* Orphans and duplicates come from ordinary eviction before a restart; damaged headers and
	 * failed checksums do not. Headers of another format version, store or configuration are
	 * intact (their checksum says so): reported, not damage, and no repair touches them. What
	 * could not be read is damage no repair mends: it may pass. */
	damaged = rep.damaged_headers + rep.unreadable_headers + rep.corrupt_chunks;
	left = rep.unreadable_headers + (rep.corrupt_chunks - rep.removed_chunks);
	printf("checked    %llu chunks, %.2f GiB of objects in %.2f s\n",
	       (unsigned long long)rep.chunks_checked, gib(rep.bytes_checked),
	       (double)rep.elapsed_ns / 1e9);
	printf("damaged    %llu chunks failed their checksums or could not be read; %llu damaged "
	       "slot headers%s; %llu slot headers could not be read\n",
	       (unsigned long long)rep.corrupt_chunks, (unsigned long long)rep.damaged_headers,
	       repair ? " (erased)" : "", (unsigned long long)rep.unreadable_headers);
	if (rep.foreign_headers > 0) {
		printf("foreign    %llu intact slot headers of another format version, store or "
		       "configuration: left as they are, their slots free\n",
		       (unsigned long long)rep.foreign_headers);
	}
	printf("orphans    %llu chunks whose parent is missing: kept, found again once the parent "
	       "is saved anew; %llu second copies of a key, unused\n",
	       (unsigned long long)s.recovery_orphans, (unsigned long long)s.recovery_duplicates);
	if (damaged == 0) {
		printf("result     clean\n");
		return FSCK_CLEAN;
	}
	if (repair && left > 0) {
		printf("result     damage left: %llu chunks or slot headers could not be read (a "
		       "read error may pass: run fsck again later); %llu damaged chunks removed, "
		       "damaged headers erased\n",
		       (unsigned long long)left, (unsigned long long)rep.removed_chunks);
		return FSCK_DAMAGED;
	}
	if (repair) {
		printf("result     repaired: %llu damaged chunks removed, the chunks after "
		       "them kept; damaged headers erased\n",
		       (unsigned long long)rep.removed_chunks);
		return FSCK_REPAIRED;
	}
	printf("result     damaged; run with --repair to remove the damaged chunks (they are never "
	       "served either way; the chunks after them are kept)\n");
	return FSCK_DAMAGED;
}
