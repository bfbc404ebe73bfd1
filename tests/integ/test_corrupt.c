/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: damage to a closed store's data file. A store of many chains (shared prefixes,
 * partial last chunks) is written once; then, for each kind of damage and several seeded rounds,
 * a copy of its data file is damaged at random places: bit flips in object payloads, bit flips
 * in slot headers, zeroed 4 KiB sectors of headers and data, truncation at random offsets (the
 * store extends the file again), random flips anywhere, and damage to the superblock. The store
 * is opened on the copy and every chain is looked up and loaded: a chunk that loads must be
 * bit-exact (never wrong data), and what is lost is exactly what the damage touched, as
 * predicted from the bytes that changed: damaged headers are dropped (recovery_dropped) while
 * their descendants are kept (recovery_orphans) yet not found by a lookup through the hole,
 * zeroed headers free their slots, damaged payloads fail their load with -EBADMSG, and fsck
 * counts every damaged chunk. A damaged superblock (a zeroed
 * one in front of committed slots included) fails every kind of open with -EBADMSG or -EPROTO
 * and leaves the file alone. Set T_SEED to vary the damage.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "t_disk.h"
#include "t_kv.h"
#include "t_store.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define KB 32u
#define BPC 2u
#define MAX_KEYS 3u
#define NR_CHAINS 80u
#define MAX_NODES (NR_CHAINS * MAX_KEYS)
#define NR_SRC (MAX_NODES * BPC)
#define SLOTS (MAX_NODES + 16u)
#define ROUNDS 6u
#define NONE UINT32_MAX

static uint64_t g_seed;
static bool g_uring;

/* A stored chunk. Nodes are numbered parents first. */
struct node {
	uint32_t parent; /* node, or NONE for a root */
	uint32_t nr_blocks;
	uint32_t src[BPC]; /* source blocks */
	uint32_t slot;     /* in the pristine file */
	uint8_t key[KB];
};

struct chain {
	uint32_t nr_keys;
	uint32_t node[MAX_KEYS];
};

/* What the changed bytes say about one node. */
enum verdict {
	V_OK = 0, /* untouched */
	V_MAYBE,  /* touched where the checksums do not look (header tail, object padding) */
	V_BAD,    /* header: dropped at open; payload: fails its checksum */
	V_FREE,   /* header: its magic is zero, so the slot reads as never committed */
};

struct fixture {
	char *tmp;
	char *pristine_dir;
	struct tutti_geometry geo;
	uint64_t lbb, slot_bytes, object_bytes;
	struct t_rng r;
	struct t_kv *src;     /* KV-first: saved through staging */
	struct t_kv *dst;     /* where loads go: one of the two below, per round */
	struct t_kv *dsts[2]; /* blocks-first (direct loads) and KV-first (staged loads) */
	struct node nodes[MAX_NODES];
	uint32_t nr_nodes;
	struct chain chains[NR_CHAINS];
	uint8_t *pristine; /* the pristine data file */
	size_t size;
	uint8_t *used; /* per slot of the file: 1 when a node lives there */
	uint32_t nr_slots;
	uint32_t used_end; /* one past the last slot in use */
	uint32_t round;
};

/* The prediction for one damaged copy. */
struct expect {
	enum verdict hdr[MAX_NODES];
	enum verdict payload[MAX_NODES];
	uint32_t free_garbage; /* free slots whose header no longer reads as free */
};

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			print_message("%s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
			print_message(__VA_ARGS__);                                                \
			print_message(" (round %u, seed %llu; T_SEED repeats it)\n", f->round,     \
			              (unsigned long long)g_seed);                                 \
			fail();                                                                    \
		}                                                                                  \
	} while (0)

/* ---- the pristine store ---- */

static int
open_dir(struct fixture *f, const char *dir, uint32_t engine, uint32_t flags, struct t_log *log,
         struct tutti_store **st)
{
	struct tutti_store_opts o;
	const char *dirs[1] = {dir};

	t_store_opts(&o, &f->geo, dirs, 1, SLOTS, engine, log);
	/* One data file: the damage is done to an image of the whole directory. */
	o.data_files = 1;
	o.flags = flags;
	o.ns = "corrupt";
	o.ns_bytes = 7;
	return tutti_store_open((flags & TUTTI_OPEN_EXISTING) ? NULL : &f->geo, &o, st);
}

static uint32_t
new_node(struct fixture *f, uint32_t parent, uint32_t nr_blocks, uint32_t *next_src)
{
	struct node *n = &f->nodes[f->nr_nodes];

	n->parent = parent;
	n->nr_blocks = nr_blocks;
	for (uint32_t b = 0; b < nr_blocks; b++) {
		n->src[b] = (*next_src)++;
	}
	t_rng_fill(&f->r, n->key, KB);
	return f->nr_nodes++;
}

/* Chains of 1 to 3 chunks, some ending in a partial chunk; every fifth one continues the
 * previous chain's first chunk. */
static void
make_chains(struct fixture *f)
{
	uint32_t next_src = 0;

	for (uint32_t c = 0; c < NR_CHAINS; c++) {
		struct chain *ch = &f->chains[c];
		uint32_t last = 1 + t_rng_below(&f->r, BPC);
		const struct chain *prev = c > 0 ? &f->chains[c - 1] : NULL;
		bool shared;

		ch->nr_keys = 1 + t_rng_below(&f->r, MAX_KEYS);
		shared = c % 5 == 4 && ch->nr_keys > 1 && f->nodes[prev->node[0]].nr_blocks == BPC;
		for (uint32_t k = 0; k < ch->nr_keys; k++) {
			uint32_t blocks = k + 1 == ch->nr_keys ? last : BPC;

			if (k == 0 && shared) {
				ch->node[0] = prev->node[0];
				continue;
			}
			ch->node[k] =
			    new_node(f, k == 0 ? NONE : ch->node[k - 1], blocks, &next_src);
		}
	}
}

static struct tutti_request
chain_req(const struct fixture *f, const struct chain *ch, uint32_t nr_keys, uint8_t *keys,
          uint32_t *ids, const uint32_t *dst_ids)
{
	uint32_t nr_blocks = 0;

	for (uint32_t k = 0; k < nr_keys; k++) {
		const struct node *n = &f->nodes[ch->node[k]];

		memcpy(keys + (size_t)k * KB, n->key, KB);
		for (uint32_t b = 0; b < n->nr_blocks; b++, nr_blocks++) {
			ids[nr_blocks] = dst_ids != NULL ? dst_ids[nr_blocks] : n->src[b];
		}
	}
	return t_request(keys, nr_keys, 0, 0, ids, nr_blocks);
}

static int
group_setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct tutti_store *st = NULL;
	char *path;

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	/* 4 KiB layer blocks, 8 KiB objects (a whole chunk has no padding; a one-block chunk has
	 * 4 KiB), 20 KiB slots. */
	f->geo = t_geo_small(2, BPC);
	f->lbb = tutti_geometry_layer_block_bytes(&f->geo);
	f->slot_bytes = tutti_geometry_slot_bytes(&f->geo);
	f->object_bytes = tutti_geometry_object_bytes(&f->geo);
	t_rng_init(&f->r, g_seed);
	if (t_kv_alloc(&f->geo, T_LAYOUT_KV_FIRST, NR_SRC, &f->src) != 0 ||
	    t_kv_alloc(&f->geo, T_LAYOUT_BLOCKS_FIRST, MAX_KEYS * BPC, &f->dsts[0]) != 0 ||
	    t_kv_alloc(&f->geo, T_LAYOUT_KV_FIRST, MAX_KEYS * BPC, &f->dsts[1]) != 0) {
		return -1;
	}
	t_kv_fill_random(f->src, &f->r);
	make_chains(f);
	f->pristine_dir = t_path_join(f->tmp, "pristine");
	if (open_dir(f, f->pristine_dir, TUTTI_ENGINE_POSIX, TUTTI_OPEN_CREATE, NULL, &st) != 0) {
		return -1;
	}
	for (uint32_t c = 0; c < NR_CHAINS; c++) {
		uint8_t keys[MAX_KEYS * KB];
		uint32_t ids[MAX_KEYS * BPC];
		struct tutti_request r =
		    chain_req(f, &f->chains[c], f->chains[c].nr_keys, keys, ids, NULL);
		int32_t status[MAX_KEYS];

		if (tutti_store_save(st, f->src->kv, &r, 1, status) < 0) {
			return -1;
		}
		for (uint32_t k = 0; k < r.nr_keys; k++) {
			if (status[k] != 0 && status[k] != 1) {
				return -1;
			}
		}
	}
	tutti_store_close(st);
	path = t_data_path(f->pristine_dir);
	f->pristine = t_file_read_all(path, &f->size);
	f->nr_slots = t_nr_slots(path, &f->geo);
	f->used = calloc(f->nr_slots, 1);
	if (f->pristine == NULL || f->used == NULL) {
		return -1;
	}
	for (uint32_t n = 0; n < f->nr_nodes; n++) {
		f->nodes[n].slot = t_key_slot(path, &f->geo, f->nodes[n].key, KB);
		f->used[f->nodes[n].slot] = 1;
		if (f->nodes[n].slot >= f->used_end) {
			f->used_end = f->nodes[n].slot + 1;
		}
	}
	free(path);
	*state = f;
	return 0;
}

static int
group_teardown(void **state)
{
	struct fixture *f = *state;

	t_kv_free(f->src);
	t_kv_free(f->dsts[0]);
	t_kv_free(f->dsts[1]);
	free(f->pristine);
	free(f->used);
	free(f->pristine_dir);
	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

/* ---- damage, planned on an image of the file ---- */

static uint8_t *
new_image(const struct fixture *f)
{
	uint8_t *img = t_aligned_alloc(f->size);

	memcpy(img, f->pristine, f->size);
	return img;
}

static uint64_t
slot_off(const struct fixture *f, uint32_t slot)
{
	return t_slot_off(&f->geo, slot);
}

static uint64_t
payload_off(const struct fixture *f, uint32_t node, uint32_t layer)
{
	return t_object_off(&f->geo, f->nodes[node].slot, layer);
}

static uint64_t
payload_bytes(const struct fixture *f, uint32_t node)
{
	return f->nodes[node].nr_blocks * f->lbb;
}

static void
flip(struct fixture *f, uint8_t *img, uint64_t off)
{
	img[off] ^= (uint8_t)(1u << t_rng_below(&f->r, 8));
}

static bool
all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != 0) {
			return false;
		}
	}
	return true;
}

/* Compare the damaged image with the pristine file and predict every node's fate. */
static void
predict(const struct fixture *f, const uint8_t *img, struct expect *e)
{
	uint32_t enc = t_slot_hdr_len(f->geo.nr_layers);

	memset(e, 0, sizeof(*e));
	for (uint32_t s = 0; s < f->nr_slots; s++) {
		const uint8_t *now = img + slot_off(f, s);

		if (!f->used[s] && !all_zero(now, 8)) {
			e->free_garbage++; /* a never-committed slot that no longer reads as one */
		}
	}
	for (uint32_t n = 0; n < f->nr_nodes; n++) {
		uint64_t h = slot_off(f, f->nodes[n].slot);
		const uint8_t *was = f->pristine + h, *now = img + h;

		if (memcmp(was, now, TUTTI_SLOT_HEADER_BYTES) == 0) {
			e->hdr[n] = V_OK;
		} else if (all_zero(now, 8)) {
			e->hdr[n] = V_FREE;
		} else if (memcmp(was, now, enc) != 0) {
			e->hdr[n] = V_BAD;
		} else {
			e->hdr[n] = V_MAYBE;
		}
		for (uint32_t l = 0; l < f->geo.nr_layers; l++) {
			uint64_t o = payload_off(f, n, l), p = payload_bytes(f, n);

			if (memcmp(f->pristine + o, img + o, p) != 0) {
				e->payload[n] = V_BAD;
			} else if (e->payload[n] == V_OK && memcmp(f->pristine + o + p, img + o + p,
			                                           f->object_bytes - p) != 0) {
				e->payload[n] = V_MAYBE;
			}
		}
	}
}

/* ---- opening and checking a damaged copy ---- */

struct tally {
	uint64_t chunks_ok, chunks_corrupt, chunks_missing;
};

/* Whether the store may and must hold node n: its own header decides (a chunk whose parent is
 * gone is kept). */
static void
kept(const struct expect *e, uint32_t n, bool *must, bool *may)
{
	*must = e->hdr[n] == V_OK;
	*may = e->hdr[n] == V_OK || e->hdr[n] == V_MAYBE;
}

/* Whether a lookup of its chain may and must reach node n: its header and all its ancestors'
 * headers decide. */
static void
liveness(const struct fixture *f, const struct expect *e, uint32_t n, bool *must, bool *may)
{
	*must = *may = true;
	for (uint32_t a = n; a != NONE; a = f->nodes[a].parent) {
		*must = *must && e->hdr[a] == V_OK;
		*may = *may && (e->hdr[a] == V_OK || e->hdr[a] == V_MAYBE);
	}
}

/* Look up and load every chain; check each chunk against the prediction. gone[] marks chunks
 * a load found damaged (removed from then on). */
static void
check_chains(struct fixture *f, struct tutti_store *st, const struct expect *e, bool *gone,
             struct tally *t)
{
	for (uint32_t c = 0; c < NR_CHAINS; c++) {
		const struct chain *ch = &f->chains[c];
		uint8_t keys[MAX_KEYS * KB];
		uint32_t ids[MAX_KEYS * BPC], dids[MAX_KEYS * BPC];
		uint32_t lo = 0, hi = 0;
		int32_t status[MAX_KEYS];
		struct tutti_request r;
		int64_t found;

		/* Bounds on the prefix found: chunks that must live, and those that may. */
		for (uint32_t k = 0, must_run = 1, may_run = 1; k < ch->nr_keys; k++) {
			uint32_t n = ch->node[k];
			bool must, may;

			liveness(f, e, n, &must, &may);
			must_run = must_run && must && !gone[n];
			may_run = may_run && may && !gone[n];
			lo += must_run;
			hi += may_run;
		}
		r = chain_req(f, ch, ch->nr_keys, keys, ids, NULL);
		found = tutti_store_lookup(st, keys, ch->nr_keys, NULL);
		CHECK(found >= lo && found <= hi, "chain %u: lookup %lld, expected %u..%u", c,
		      (long long)found, lo, hi);
		t->chunks_missing += ch->nr_keys - (uint64_t)found;
		if (found == 0) {
			continue;
		}
		for (uint32_t i = 0; i < MAX_KEYS * BPC; i++) {
			dids[i] = i;
		}
		r = chain_req(f, ch, (uint32_t)found, keys, ids, dids);
		t_kv_poison(f->dst, T_POISON);
		CHECK(tutti_store_load(st, f->dst->kv, &r, 1, 0, f->geo.nr_layers, status) >= 0,
		      "chain %u: load failed as a whole", c);
		for (uint32_t k = 0, b0 = 0; k < (uint32_t)found; k++) {
			uint32_t n = ch->node[k];
			const struct node *nd = &f->nodes[n];

			if (status[k] != 0) {
				CHECK(status[k] == -EBADMSG && e->payload[n] != V_OK,
				      "chain %u chunk %u (node %u): load status %d, payload %s", c,
				      k, n, status[k],
				      e->payload[n] == V_OK ? "intact" : "damaged");
				gone[n] = true;
				t->chunks_corrupt++;
			} else {
				CHECK(e->payload[n] != V_BAD,
				      "chain %u chunk %u (node %u): damaged payload loaded", c, k,
				      n);
				for (uint32_t b = 0; b < nd->nr_blocks; b++) {
					for (uint32_t l = 0; l < f->geo.nr_layers; l++) {
						CHECK(t_kv_block_equal(f->src, nd->src[b], f->dst,
						                       dids[b0 + b], l),
						      "chain %u chunk %u block %u layer %u: WRONG "
						      "DATA served",
						      c, k, b, l);
					}
				}
				t->chunks_ok++;
			}
			b0 += nd->nr_blocks;
		}
	}
}

/* What a check saw. */
struct seen {
	uint64_t dropped;      /* recovery_dropped */
	uint64_t fsck_corrupt; /* corrupt_chunks of an fsck right after open */
};

/*
 * Open a store on the damaged image \p img (truncated to \p trunc bytes unless 0), check the
 * recovery counters and fsck against the prediction, load everything.
 */
static struct seen
check_image(struct fixture *f, const char *what, const uint8_t *img, uint64_t trunc)
{
	char name[64];
	char *dir, *path;
	struct expect *e = calloc(1, sizeof(*e));
	bool gone[MAX_NODES] = {false};
	uint64_t must = 0, may = 0, bad_hdr = 0, maybe_hdr = 0, bad_payload = 0, maybe_payload = 0;
	uint64_t committed = 0;
	uint32_t engine =
	    g_uring && t_rng_below(&f->r, 2) ? TUTTI_ENGINE_URING : TUTTI_ENGINE_POSIX;
	struct tutti_stats s = {.size = sizeof(s)};
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	struct tally t = {0};
	struct tutti_store *st = NULL;
	struct seen out = {0};
	int rc;

	assert_non_null(e);
	snprintf(name, sizeof(name), "%s.%u", what, f->round);
	dir = t_path_join(f->tmp, name);
	path = t_data_path(dir);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(t_file_create(path, img, f->size), 0);
	if (trunc != 0) {
		assert_int_equal(truncate(path, (off_t)trunc), 0);
	}
	predict(f, img, e);
	for (uint32_t n = 0; n < f->nr_nodes; n++) {
		bool mu, ma;

		kept(e, n, &mu, &ma);
		must += mu;
		may += ma;
		bad_hdr += e->hdr[n] == V_BAD;
		committed += e->hdr[n] != V_FREE;
		maybe_hdr += e->hdr[n] == V_MAYBE;
		bad_payload += mu && e->payload[n] == V_BAD;
		maybe_payload += ma && e->payload[n] != V_OK;
	}

	f->dst = f->dsts[t_rng_below(&f->r, 2)];
	rc = open_dir(f, dir, engine, 0, NULL, &st);
	CHECK(rc == 0, "%s: open failed: %d", what, rc);
	assert_int_equal(tutti_store_get_stats(st, &s), 0);
	CHECK(s.recovered_chunks >= must && s.recovered_chunks <= may,
	      "%s: recovered %llu chunks, expected %llu..%llu", what,
	      (unsigned long long)s.recovered_chunks, (unsigned long long)must,
	      (unsigned long long)may);
	CHECK(s.recovery_dropped >= bad_hdr + e->free_garbage &&
	          s.recovery_dropped <= bad_hdr + maybe_hdr + e->free_garbage,
	      "%s: %llu headers dropped, %llu damaged (%llu more maybe, %u in free slots)", what,
	      (unsigned long long)s.recovery_dropped, (unsigned long long)bad_hdr,
	      (unsigned long long)maybe_hdr, e->free_garbage);
	/* Every header that reads as committed is indexed (orphans among them), dropped or a
	 * duplicate. */
	CHECK(s.recovered_chunks + s.recovery_dropped + s.recovery_duplicates ==
	              committed + e->free_garbage &&
	          s.recovery_orphans <= s.recovered_chunks,
	      "%s: %llu + %llu + %llu headers accounted for (%llu orphans), %llu committed", what,
	      (unsigned long long)s.recovered_chunks, (unsigned long long)s.recovery_dropped,
	      (unsigned long long)s.recovery_duplicates, (unsigned long long)s.recovery_orphans,
	      (unsigned long long)(committed + e->free_garbage));
	if (trunc != 0) {
		CHECK(t_file_size(path) == f->size, "%s: the file was not extended again", what);
	}
	/* Every damaged payload of a live chunk, and nothing else. */
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	CHECK(rep.chunks_checked == s.recovered_chunks, "%s: fsck checked %llu of %llu", what,
	      (unsigned long long)rep.chunks_checked, (unsigned long long)s.recovered_chunks);
	CHECK(rep.corrupt_chunks >= bad_payload && rep.corrupt_chunks <= maybe_payload,
	      "%s: fsck found %llu damaged chunks, expected %llu..%llu", what,
	      (unsigned long long)rep.corrupt_chunks, (unsigned long long)bad_payload,
	      (unsigned long long)maybe_payload);
	CHECK(rep.removed_chunks == 0, "%s: fsck without repair removed chunks", what);
	out.dropped = s.recovery_dropped;
	out.fsck_corrupt = rep.corrupt_chunks;
	check_chains(f, st, e, gone, &t);
	assert_int_equal(tutti_store_get_stats(st, &s), 0);
	CHECK(s.load_corrupt == t.chunks_corrupt, "%s: load_corrupt %llu, seen %llu", what,
	      (unsigned long long)s.load_corrupt, (unsigned long long)t.chunks_corrupt);
	/* What loads could not reach (children cut off by a damaged parent) fsck repairs. */
	assert_int_equal(tutti_store_fsck(st, TUTTI_FSCK_REPAIR, &rep), 0);
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	CHECK(rep.corrupt_chunks == 0, "%s: fsck after repair: %llu damaged", what,
	      (unsigned long long)rep.corrupt_chunks);
	tutti_store_close(st);
	print_message("  %-9s round %u: %llu chunks exact, %llu failed their checksum, %llu "
	              "missing; dropped %llu, orphans %llu\n",
	              what, f->round, (unsigned long long)t.chunks_ok,
	              (unsigned long long)t.chunks_corrupt, (unsigned long long)t.chunks_missing,
	              (unsigned long long)s.recovery_dropped,
	              (unsigned long long)s.recovery_orphans);
	t_tmpdir_remove(dir);
	free(path);
	free(e);
	return out;
}

/* ---- the kinds of damage ---- */

static void
random_distinct_nodes(struct fixture *f, uint32_t *ids, uint32_t n)
{
	t_random_distinct(&f->r, ids, n, f->nr_nodes);
}

static void
test_corrupt_payload_bit_flips_fail_exactly_their_chunks(void **state)
{
	struct fixture *f = *state;

	for (f->round = 0; f->round < ROUNDS; f->round++) {
		uint8_t *img = new_image(f);
		uint32_t ids[6], k = 1 + t_rng_below(&f->r, 6);

		random_distinct_nodes(f, ids, k);
		for (uint32_t i = 0; i < k; i++) {
			for (uint32_t j = 1 + t_rng_below(&f->r, 3); j > 0; j--) {
				uint32_t l = t_rng_below(&f->r, f->geo.nr_layers);

				flip(f, img,
				     payload_off(f, ids[i], l) +
				         t_rng_below(&f->r, (uint32_t)payload_bytes(f, ids[i])));
			}
		}
		/* fsck finds every one. */
		assert_int_equal(check_image(f, "payload", img, 0).fsck_corrupt, k);
		free(img);
	}
}

static void
test_corrupt_header_bit_flips_drop_their_chunks_and_orphan_the_children(void **state)
{
	struct fixture *f = *state;
	uint32_t enc = t_slot_hdr_len(f->geo.nr_layers);

	for (f->round = 0; f->round < ROUNDS; f->round++) {
		uint8_t *img = new_image(f);
		uint32_t ids[6], h = 1 + t_rng_below(&f->r, 6);

		random_distinct_nodes(f, ids, h);
		for (uint32_t i = 0; i < h; i++) {
			for (uint32_t j = 1 + t_rng_below(&f->r, 3); j > 0; j--) {
				flip(f, img,
				     slot_off(f, f->nodes[ids[i]].slot) + t_rng_below(&f->r, enc));
			}
		}
		/* Recovery drops every one. */
		assert_int_equal(check_image(f, "header", img, 0).dropped, h);
		free(img);
	}
}

static void
test_corrupt_zeroed_sectors_free_headers_and_fail_payloads(void **state)
{
	struct fixture *f = *state;
	uint32_t sectors = (uint32_t)((f->size - T_DATA_OFF) / 4096);

	for (f->round = 0; f->round < ROUNDS; f->round++) {
		uint8_t *img = new_image(f);
		uint32_t ids[8], z = 2 + t_rng_below(&f->r, 7);

		random_distinct_nodes(f, ids, z);
		for (uint32_t i = 0; i < z; i++) {
			uint64_t off = slot_off(f, f->nodes[ids[i]].slot);

			/* Half the headers, half a sector of some object. */
			if (i % 2 == 1) {
				off = payload_off(f, ids[i], t_rng_below(&f->r, f->geo.nr_layers)) +
				      4096ull *
				          t_rng_below(&f->r, (uint32_t)(f->object_bytes / 4096));
			}
			memset(img + off, 0, 4096);
		}
		/* And one sector anywhere. */
		memset(img + T_DATA_OFF + 4096ull * t_rng_below(&f->r, sectors), 0, 4096);
		check_image(f, "zeroed", img, 0);
		free(img);
	}
}

static void
test_corrupt_truncated_file_is_extended_and_loses_only_its_tail(void **state)
{
	struct fixture *f = *state;

	for (f->round = 0; f->round < ROUNDS; f->round++) {
		uint8_t *img = new_image(f);
		uint64_t t;

		/* Most cuts fall among the slots in use, one inside the gap after the
		 * superblock, one past the slots in use. */
		if (f->round == 0) {
			t = 4096 + t_rng_below(&f->r, T_DATA_OFF - 4096);
		} else if (f->round == 2) {
			/* Through a header, past its magic. */
			t = slot_off(f, t_rng_below(&f->r, f->used_end)) + 8 +
			    t_rng_below(&f->r, t_slot_hdr_len(f->geo.nr_layers) - 8);
		} else if (f->round == 1) {
			t = slot_off(f, f->used_end) +
			    t_rng_below(&f->r, (uint32_t)(f->size - slot_off(f, f->used_end)));
		} else {
			t = T_DATA_OFF +
			    t_rng_below(&f->r, (uint32_t)(slot_off(f, f->used_end) - T_DATA_OFF));
		}
		memset(img + t, 0, f->size - t);
		check_image(f, "truncated", img, t);
		free(img);
	}
}

static void
test_corrupt_random_flips_anywhere_never_serve_wrong_data(void **state)
{
	struct fixture *f = *state;

	for (f->round = 0; f->round < ROUNDS; f->round++) {
		uint8_t *img = new_image(f);

		for (uint32_t i = 0; i < 24; i++) {
			flip(f, img,
			     T_DATA_OFF + t_rng_below(&f->r, (uint32_t)(f->size - T_DATA_OFF)));
		}
		check_image(f, "anywhere", img, 0);
		free(img);
	}
}

/*
 * Damage the superblock of a copy (\p kind: 0 bit flips in its encoded bytes, 1 one flip in the
 * magic or version, 2 the whole sector zeroed, 3 garbage, 4 the file cut inside it) and open it
 * every way: the open must fail with the error the damage calls for, log it, and leave the file
 * as it was.
 */
static void
damage_superblock(struct fixture *f, uint32_t kind)
{
	char name[32];
	char *dir, *path;
	uint8_t *img = new_image(f), *after;
	uint64_t size = f->size;
	struct tutti_store *st = (struct tutti_store *)(uintptr_t)1;
	struct t_log log;
	size_t len = 0;
	int want, rc;

	snprintf(name, sizeof(name), "sb.%u.%u", kind, f->round);
	dir = t_path_join(f->tmp, name);
	path = t_data_path(dir);
	switch (kind) {
	case 0: /* bit flips in the encoded superblock */
		for (uint32_t j = 1 + t_rng_below(&f->r, 3); j > 0; j--) {
			flip(f, img, t_rng_below(&f->r, T_SB_BYTES));
		}
		break;
	case 1: /* one flip in the magic or the version */
		flip(f, img, t_rng_below(&f->r, 12));
		break;
	case 2: /* a zeroed sector */
		memset(img, 0, 4096);
		break;
	case 3: /* garbage */
		t_rng_fill(&f->r, img, 4096);
		break;
	default: /* cut inside the superblock */
		size = 1 + t_rng_below(&f->r, T_SB_BYTES - 1);
		break;
	}
	if (size < T_SB_BYTES) {
		want = -EBADMSG; /* too short to hold a superblock */
	} else if (memcmp(img, f->pristine, 8) != 0) {
		want = -EPROTO; /* no Tutti magic: not a Tutti file */
	} else {
		/* A flipped version bit is damage too, not another version (issue 48). */
		want = -EBADMSG;
	}
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(t_file_create(path, img, f->size), 0);
	if (size != f->size) {
		assert_int_equal(truncate(path, (off_t)size), 0);
	}
	/* Plain, for a tool, and for a serving engine that creates what is missing. */
	for (int i = 0; i < 3; i++) {
		static const uint32_t flags[3] = {0, TUTTI_OPEN_EXISTING, TUTTI_OPEN_CREATE};
		static const char *const names[3] = {"no flags", "TUTTI_OPEN_EXISTING",
		                                     "TUTTI_OPEN_CREATE"};

		t_log_reset(&log);
		rc = open_dir(f, dir, g_uring ? TUTTI_ENGINE_URING : TUTTI_ENGINE_POSIX, flags[i],
		              &log, &st);
		if (rc == 0) {
			struct tutti_stats s = {.size = sizeof(s)};

			tutti_store_get_stats(st, &s);
			print_message("superblock damage %u (%s): the store opened with %s "
			              "and %llu of its %u chunks were dropped\n",
			              kind, kind == 2 ? "zeroed" : "damaged", names[i],
			              (unsigned long long)s.recovery_dropped, f->nr_nodes);
			tutti_store_close(st);
			st = NULL;
		}
		CHECK(rc == want, "superblock damage %u, open with %s: %d, expected %d", kind,
		      names[i], rc, want);
		CHECK(st == NULL, "superblock damage %u: a handle despite the failure", kind);
		CHECK(log.nr_err > 0, "superblock damage %u: no error logged", kind);
	}
	/* The refused opens left the file as it was. */
	CHECK(t_file_size(path) == size, "superblock damage %u: size changed", kind);
	if (size == f->size) {
		after = t_file_read_all(path, &len);
		assert_non_null(after);
		CHECK(memcmp(after, img, 4096) == 0, "superblock damage %u: rewritten", kind);
		free(after);
	}
	t_tmpdir_remove(dir);
	free(path);
	free(img);
}

static void
test_corrupt_damaged_superblock_fails_open_cleanly(void **state)
{
	struct fixture *f = *state;
	const uint32_t kinds[4] = {0, 1, 3, 4};

	for (f->round = 0; f->round < 3 * ROUNDS; f->round++) {
		damage_superblock(f, kinds[f->round % 4]);
	}
}

/*
 * A zeroed superblock sector in front of committed slots is damage, not a store never made:
 * opening must refuse it rather than make a new store there and drop every chunk as foreign.
 */
static void
test_corrupt_zeroed_superblock_of_a_populated_store_is_refused(void **state)
{
	struct fixture *f = *state;

	f->round = 0;
	damage_superblock(f, 2);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_corrupt_payload_bit_flips_fail_exactly_their_chunks),
	    cmocka_unit_test(
	        test_corrupt_header_bit_flips_drop_their_chunks_and_orphan_the_children),
	    cmocka_unit_test(test_corrupt_zeroed_sectors_free_headers_and_fail_payloads),
	    cmocka_unit_test(test_corrupt_truncated_file_is_extended_and_loses_only_its_tail),
	    cmocka_unit_test(test_corrupt_random_flips_anywhere_never_serve_wrong_data),
	    cmocka_unit_test(test_corrupt_damaged_superblock_fails_open_cleanly),
	    cmocka_unit_test(test_corrupt_zeroed_superblock_of_a_populated_store_is_refused),
	};

	if (!t_tmpdir_supports_odirect()) {
		return T_EXIT_SKIP;
	}
	g_seed = t_seed(131);
	g_uring = t_uring_probe() == 0;
	print_message("seed %llu (T_SEED=%llu repeats it)\n", (unsigned long long)g_seed,
	              (unsigned long long)g_seed);
	return cmocka_run_group_tests_name("corrupt", tests, group_setup, group_teardown);
}
