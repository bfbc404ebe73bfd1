/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Description: what a store keeps across close and reopen, for both engines and both the direct
 * and the staged I/O path: saved chains (shared prefixes, partial last chunks) come back
 * bit-exact in both durability modes; recovery drops damaged and foreign slot headers and the
 * orphans they leave, frees zeroed ones, keeps one copy of a key written twice and restores the
 * LRU order; TUTTI_OPEN_REPAIR erases what it dropped; a save killed before its headers loses no
 * committed chunk; TUTTI_OPEN_EXISTING adopts the stored identity; load and fsck catch damaged
 * payloads; another model, namespace or format version is refused; one writer per store across
 * processes; private file modes; no symbolic link as the data file.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>
#include <cmocka.h>

#include "format/format.h"
#include "t_disk.h"
#include "t_kv.h"
#include "t_util.h"
#include "tutti/tutti.h"

#define KB 32u /* key bytes */
#define BPC 4u /* blocks per chunk */
#define NR_BLOCKS 256u
#define MAX_KEYS 4u
#define POISON 0xa5
#define NS "test-model/bf16/tp0"

static int g_engine;

struct fixture {
	char *tmp;
	struct tutti_geometry geo;
	struct t_log rec;
	struct t_rng r;
	uint32_t src_ids[NR_BLOCKS]; /* source blocks, in the order chains take them */
	uint32_t next_src;
};

/* A key chain and the source blocks its chunks were saved from. */
struct chain {
	uint32_t nr_keys;
	uint32_t nr_blocks;
	uint8_t keys[MAX_KEYS * KB];
	uint32_t ids[MAX_KEYS * BPC];
};

/* How to open a store; zero fields take the defaults below. */
struct how {
	uint32_t flags; /* TUTTI_OPEN_* beyond CREATE */
	uint32_t durability;
	const char *ns; /* NULL: NS */
	uint32_t key_bytes;
	bool no_create;
};

/* ---- helpers ---- */

/*
 * 2 layers, 1 KV head of dimension 64, 2-byte elements, 16-token blocks, 4 blocks per chunk:
 * 4 KiB layer blocks, 16 KiB objects, 36 KiB slots. Blocks-first memory (one 4 KiB segment per
 * block) takes the direct path; KV-first memory (two 2 KiB segments) is staged.
 */
static struct tutti_geometry
small_geo(void)
{
	struct tutti_geometry g;

	tutti_geometry_init(&g);
	g.nr_layers = 2;
	g.nr_kv_heads = 1;
	g.head_dim = 64;
	g.chunk_tokens = BPC * g.block_tokens;
	return g;
}

static const enum t_layout direct_layout = T_LAYOUT_BLOCKS_FIRST;
static const enum t_layout staged_layout = T_LAYOUT_KV_FIRST;

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL || (f->tmp = t_tmpdir_create()) == NULL) {
		return -1;
	}
	f->geo = small_geo();
	t_rng_init(&f->r, t_seed(83));
	t_random_distinct(&f->r, f->src_ids, NR_BLOCKS, NR_BLOCKS);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	t_tmpdir_remove(f->tmp);
	free(f);
	return 0;
}

static char *
store_dir(const struct fixture *f, const char *name)
{
	return t_path_join(f->tmp, name);
}

static void
fill_opts(struct fixture *f, struct tutti_store_opts *o, const char **dirs,
          const struct tutti_geometry *g, uint64_t slots, const struct how *h)
{
	static const struct how dflt;

	if (h == NULL) {
		h = &dflt;
	}
	tutti_store_opts_init(o);
	o->flags = (h->no_create ? 0 : TUTTI_OPEN_CREATE) | h->flags;
	o->dirs = dirs;
	o->nr_dirs = 1;
	o->engine = (uint32_t)g_engine;
	o->capacity_bytes = g != NULL ? slots * tutti_geometry_slot_bytes(g) : 0;
	o->ns = h->ns != NULL ? h->ns : NS;
	o->ns_bytes = (uint32_t)strlen(o->ns);
	o->key_bytes = h->key_bytes ? h->key_bytes : KB;
	o->durability = h->durability;
	o->log_fn = t_log_fn;
	o->log_arg = &f->rec;
}

static int
open_rc(struct fixture *f, const struct tutti_geometry *g, const char *dir, uint64_t slots,
        const struct how *h, struct tutti_store **st)
{
	struct tutti_store_opts o;
	const char *dirs[1] = {dir};

	fill_opts(f, &o, dirs, g, slots, h);
	t_log_reset(&f->rec);
	return tutti_store_open(g, &o, st);
}

static struct tutti_store *
open_ok(struct fixture *f, const struct tutti_geometry *g, const char *dir, uint64_t slots,
        const struct how *h)
{
	struct tutti_store *st = NULL;

	assert_int_equal(open_rc(f, g, dir, slots, h, &st), 0);
	assert_non_null(st);
	return st;
}

static struct tutti_stats
stats(struct tutti_store *st)
{
	struct tutti_stats s = {.size = sizeof(s)};

	assert_int_equal(tutti_store_get_stats(st, &s), 0);
	return s;
}

static void
assert_recovery(struct tutti_store *st, uint64_t recovered, uint64_t dropped, uint64_t orphans,
                uint64_t duplicates)
{
	struct tutti_stats s = stats(st);

	assert_int_equal(s.recovered_chunks, recovered);
	assert_int_equal(s.recovery_dropped, dropped);
	assert_int_equal(s.recovery_orphans, orphans);
	assert_int_equal(s.recovery_duplicates, duplicates);
	assert_int_equal(s.used_slots, recovered);
}

static struct t_kv *
new_kv(struct fixture *f, const struct tutti_geometry *g, enum t_layout layout, bool random)
{
	struct t_kv *k;

	assert_int_equal(t_kv_alloc(g, layout, NR_BLOCKS, &k), 0);
	if (random) {
		t_kv_fill_random(k, &f->r);
	} else {
		t_kv_poison(k, POISON);
	}
	return k;
}

/*
 * A chain of \p nr_keys keys and \p nr_blocks blocks whose first \p shared chunks are those of
 * \p prefix (same keys, same source blocks); the other chunks get new keys and new blocks.
 */
static void
make_chain(struct fixture *f, struct chain *c, uint32_t nr_keys, uint32_t nr_blocks,
           const struct chain *prefix, uint32_t shared)
{
	assert_true(nr_keys <= MAX_KEYS && nr_blocks > (nr_keys - 1) * BPC &&
	            nr_blocks <= nr_keys * BPC && shared <= nr_keys);
	memset(c, 0, sizeof(*c));
	c->nr_keys = nr_keys;
	c->nr_blocks = nr_blocks;
	t_rng_fill(&f->r, c->keys, (size_t)nr_keys * KB);
	for (uint32_t b = 0; b < nr_blocks; b++) {
		assert_true(f->next_src < NR_BLOCKS);
		c->ids[b] = f->src_ids[f->next_src++];
	}
	if (prefix != NULL && shared > 0) {
		assert_true(shared <= prefix->nr_keys && shared * BPC <= prefix->nr_blocks);
		memcpy(c->keys, prefix->keys, (size_t)shared * KB);
		memcpy(c->ids, prefix->ids, (size_t)shared * BPC * sizeof(c->ids[0]));
	}
}

static const uint8_t *
key_of(const struct chain *c, uint32_t i)
{
	return c->keys + (size_t)i * KB;
}

static uint32_t
chunk_blocks(const struct chain *c, uint32_t i)
{
	return i + 1 < c->nr_keys ? BPC : c->nr_blocks - i * BPC;
}

static struct tutti_request
chain_req(const struct chain *c, uint32_t nr_keys, uint32_t first, const uint32_t *ids)
{
	uint32_t end = nr_keys == c->nr_keys ? c->nr_blocks : nr_keys * BPC;

	return (struct tutti_request){
	    .size = sizeof(struct tutti_request),
	    .nr_keys = nr_keys,
	    .keys = c->keys,
	    .first_chunk = first,
	    .nr_blocks = end - first * BPC,
	    .block_ids = ids + first * BPC,
	};
}

/* Save chunks [0, nr_keys) of \p c; returns the call's result and the statuses. */
static int64_t
save_keys(struct tutti_store *st, const struct t_kv *src, const struct chain *c, uint32_t nr_keys,
          int32_t *status)
{
	struct tutti_request r = chain_req(c, nr_keys, 0, c->ids);

	return tutti_store_save(st, src->kv, &r, 1, status);
}

/* Save the whole chain; every status must be \p want_first for the first \p nr_present chunks
 * (1: already stored) and 0 for the others. */
static void
save_chain(struct tutti_store *st, const struct t_kv *src, const struct chain *c,
           uint32_t nr_present)
{
	int32_t status[MAX_KEYS];

	assert_int_equal(save_keys(st, src, c, c->nr_keys, status), c->nr_keys - nr_present);
	for (uint32_t i = 0; i < c->nr_keys; i++) {
		assert_int_equal(status[i], i < nr_present ? 1 : 0);
	}
}

/*
 * Load chunks [first, nr_keys) of \p c into random blocks of a poisoned \p dst; statuses into
 * \p status; returns the call's result. \p dids receives the destination blocks.
 */
static int64_t
load_range(struct fixture *f, struct tutti_store *st, struct t_kv *dst, const struct chain *c,
           uint32_t first, uint32_t nr_keys, uint32_t *dids, int32_t *status)
{
	struct tutti_request r;

	t_kv_poison(dst, POISON);
	t_random_distinct(&f->r, dids, nr_keys * BPC, NR_BLOCKS);
	r = chain_req(c, nr_keys, first, dids);
	return tutti_store_load(st, dst->kv, &r, 1, 0, dst->geo.nr_layers, status);
}

/* Chunk \p i of \p c, loaded into dst at dids (indexed like c->ids), equals the source. */
static bool
chunk_equal(const struct t_kv *src, const struct t_kv *dst, const struct chain *c, uint32_t i,
            const uint32_t *dids)
{
	for (uint32_t b = i * BPC; b < i * BPC + chunk_blocks(c, i); b++) {
		for (uint32_t l = 0; l < src->geo.nr_layers; l++) {
			if (!t_kv_block_equal(src, c->ids[b], dst, dids[b], l)) {
				return false;
			}
		}
	}
	return true;
}

/* The whole chain is found and loads bit-exact. */
static void
assert_chain(struct fixture *f, struct tutti_store *st, const struct t_kv *src, struct t_kv *dst,
             const struct chain *c)
{
	uint32_t dids[MAX_KEYS * BPC];
	int32_t status[MAX_KEYS];
	uint64_t blocks = 0;

	assert_int_equal(tutti_store_lookup(st, c->keys, c->nr_keys, &blocks), c->nr_keys);
	assert_int_equal(blocks, c->nr_blocks);
	assert_int_equal(load_range(f, st, dst, c, 0, c->nr_keys, dids, status), c->nr_keys);
	for (uint32_t i = 0; i < c->nr_keys; i++) {
		assert_int_equal(status[i], 0);
		assert_true(chunk_equal(src, dst, c, i, dids));
	}
}

static char *
data_of(const char *dir)
{
	return t_data_path(dir);
}

/* Flip one bit of a random byte of the payload of layer \p layer of the chunk keyed \p key. */
static void
damage_payload(struct fixture *f, const char *dir, const struct tutti_geometry *g,
               const uint8_t *key, uint32_t layer, uint32_t nr_blocks)
{
	char *path = data_of(dir);
	uint32_t slot = t_key_slot(path, g, key, KB);
	uint64_t payload = nr_blocks * tutti_geometry_layer_block_bytes(g);
	uint64_t off = t_object_off(g, slot, layer) + t_rng_below(&f->r, (uint32_t)payload);

	assert_int_equal(t_disk_flip_bit(path, off, t_rng_below(&f->r, 8)), 0);
	free(path);
}

/* ---- persistence ---- */

static void
test_durable_saved_chains_come_back_bit_exact_after_reopen(void **state)
{
	struct fixture *f = *state;
	const enum t_layout layouts[2] = {direct_layout, staged_layout};

	for (uint32_t mode = 0; mode < 2; mode++) {
		for (uint32_t li = 0; li < 2; li++) {
			struct how h = {.durability = mode};
			char name[32];
			char *dir;
			struct t_kv *src = new_kv(f, &f->geo, layouts[li], true);
			struct t_kv *dst = new_kv(f, &f->geo, layouts[1 - li], false);
			struct chain c[5];
			struct tutti_store *st;
			struct tutti_stats s;

			snprintf(name, sizeof(name), "persist.%u.%u", mode, li);
			dir = store_dir(f, name);
			f->next_src = 0;
			make_chain(f, &c[0], 3, 3 * BPC, NULL, 0);
			make_chain(f, &c[1], 4, 3 * BPC + 2, &c[0], 2); /* partial last chunk */
			make_chain(f, &c[2], 1, 3, NULL, 0);            /* one partial chunk */
			make_chain(f, &c[3], 2, 2 * BPC, &c[0], 1);
			make_chain(f, &c[4], 2, BPC + 1, NULL, 0);

			st = open_ok(f, &f->geo, dir, 64, &h);
			save_chain(st, src, &c[0], 0);
			s = stats(st);
			/* Durable mode flushes before and after the headers of each call. */
			assert_int_equal(s.flushes, mode == TUTTI_DURABILITY_DURABLE ? 2 : 0);
			save_chain(st, src, &c[1], 2);
			save_chain(st, src, &c[2], 0);
			save_chain(st, src, &c[3], 1);
			s = stats(st);
			assert_int_equal(s.used_slots, 7);
			assert_true(mode == TUTTI_DURABILITY_DURABLE ? s.flushes > 0
			                                             : s.flushes == 0);
			tutti_store_close(st);

			/* First reopen: everything is back; a new chain must not land on old slots.
			 */
			st = open_ok(f, &f->geo, dir, 64, &h);
			assert_recovery(st, 7, 0, 0, 0);
			for (int i = 0; i < 4; i++) {
				assert_chain(f, st, src, dst, &c[i]);
			}
			assert_int_equal(tutti_store_lookup(st, c[4].keys, 2, NULL), 0);
			save_chain(st, src, &c[4], 0);
			for (int i = 0; i < 5; i++) {
				assert_chain(f, st, src, dst, &c[i]);
			}
			tutti_store_close(st);

			/* Second reopen. */
			st = open_ok(f, &f->geo, dir, 64, &h);
			assert_recovery(st, 9, 0, 0, 0);
			for (int i = 0; i < 5; i++) {
				assert_chain(f, st, src, dst, &c[i]);
			}
			tutti_store_close(st);
			t_kv_free(src);
			t_kv_free(dst);
			free(dir);
		}
	}
	assert_int_equal(f->rec.nr_err, 0);
}

/* ---- recovery drops ---- */

/*
 * A store of three chains, X (3 chunks), Y (1) and W (2), in 6 slots: garbage over X[1]'s
 * header and one flipped bit inside Y[0]'s. Recovery drops both and orphans X[2].
 */
static void
damaged_store(struct fixture *f, const char *dir, struct t_kv *src, struct chain *c)
{
	struct tutti_store *st = open_ok(f, &f->geo, dir, 6, NULL);
	char *path = data_of(dir);
	uint8_t junk[TUTTI_SLOT_HEADER_BYTES];
	uint32_t slot, len = t_slot_hdr_len(f->geo.nr_layers);

	make_chain(f, &c[0], 3, 3 * BPC, NULL, 0);
	make_chain(f, &c[1], 1, BPC, NULL, 0);
	make_chain(f, &c[2], 2, 2 * BPC - 1, NULL, 0);
	for (int i = 0; i < 3; i++) {
		save_chain(st, src, &c[i], 0);
	}
	tutti_store_close(st);
	t_rng_fill(&f->r, junk, sizeof(junk));
	slot = t_key_slot(path, &f->geo, key_of(&c[0], 1), KB);
	assert_int_equal(t_disk_write(path, t_slot_off(&f->geo, slot), junk, sizeof(junk)), 0);
	/* Past the magic, inside what the header's checksum covers. */
	slot = t_key_slot(path, &f->geo, key_of(&c[1], 0), KB);
	assert_int_equal(
	    t_disk_flip_bit(path, t_slot_off(&f->geo, slot) + 8 + t_rng_below(&f->r, len - 8),
	                    t_rng_below(&f->r, 8)),
	    0);
	free(path);
}

static void
test_durable_damaged_header_drops_its_chunk_and_orphans_the_children(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "dropped");
	struct t_kv *src = new_kv(f, &f->geo, staged_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, direct_layout, false);
	struct chain c[4];
	struct tutti_store *st;

	damaged_store(f, dir, src, c);
	st = open_ok(f, &f->geo, dir, 6, NULL);
	assert_recovery(st, 3, 2, 1, 0);
	assert_int_equal(tutti_store_lookup(st, c[0].keys, 3, NULL), 1);
	assert_int_equal(tutti_store_lookup(st, c[1].keys, 1, NULL), 0);
	assert_chain(f, st, src, dst, &c[2]);
	/* X[0] alone still loads. */
	c[3] = c[0];
	c[3].nr_keys = 1;
	c[3].nr_blocks = BPC;
	assert_chain(f, st, src, dst, &c[3]);
	/* The dropped and orphaned slots are free: three more chunks fit without eviction. */
	make_chain(f, &c[3], 3, 3 * BPC, NULL, 0);
	save_chain(st, src, &c[3], 0);
	assert_int_equal(stats(st).evictions, 0);
	assert_int_equal(stats(st).used_slots, 6);
	assert_chain(f, st, src, dst, &c[2]);
	assert_chain(f, st, src, dst, &c[3]);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
}

static void
test_durable_open_with_repair_erases_the_headers_it_drops(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "repair");
	char *path = data_of(dir);
	struct t_kv *src = new_kv(f, &f->geo, staged_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, staged_layout, false);
	const struct how repair = {.flags = TUTTI_OPEN_REPAIR};
	struct chain c[3];
	struct tutti_store *st;
	uint32_t nr, live = 0;
	uint8_t *hdrs;

	damaged_store(f, dir, src, c);
	/* Without repair nothing is erased: the next open meets the same headers. */
	for (int i = 0; i < 2; i++) {
		st = open_ok(f, &f->geo, dir, 6, NULL);
		assert_recovery(st, 3, 2, 1, 0);
		tutti_store_close(st);
	}
	st = open_ok(f, &f->geo, dir, 6, &repair);
	assert_recovery(st, 3, 2, 1, 0);
	tutti_store_close(st);
	st = open_ok(f, &f->geo, dir, 6, NULL);
	assert_recovery(st, 3, 0, 0, 0);
	assert_chain(f, st, src, dst, &c[2]);
	assert_int_equal(tutti_store_lookup(st, c[0].keys, 3, NULL), 1);
	tutti_store_close(st);
	/* On disk: exactly the three live chunks still carry a header; the rest are zero. */
	hdrs = t_read_headers(path, &f->geo, &nr);
	assert_non_null(hdrs);
	assert_int_equal(nr, 6);
	for (uint32_t s = 0; s < nr; s++) {
		const uint8_t *h = hdrs + (size_t)s * TUTTI_SLOT_HEADER_BYTES;
		bool zero = true;

		for (uint32_t i = 0; i < TUTTI_SLOT_HEADER_BYTES && zero; i++) {
			zero = h[i] == 0;
		}
		live += t_hdr_committed(h);
		assert_true(zero || t_hdr_committed(h));
	}
	assert_int_equal(live, 3);
	free(hdrs);
	t_kv_free(src);
	t_kv_free(dst);
	free(path);
	free(dir);
}

static void
test_durable_zeroed_header_frees_its_slot_without_counting_a_drop(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "zeroed");
	char *path = data_of(dir);
	struct t_kv *src = new_kv(f, &f->geo, direct_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, staged_layout, false);
	struct chain p, q, n[3];
	struct tutti_store *st = open_ok(f, &f->geo, dir, 4, NULL);

	make_chain(f, &p, 2, 2 * BPC, NULL, 0);
	make_chain(f, &q, 2, 2 * BPC, NULL, 0);
	save_chain(st, src, &p, 0);
	save_chain(st, src, &q, 0);
	tutti_store_close(st);
	/* P's tail and Q's root: Q[1] is left without its parent. */
	assert_int_equal(
	    t_disk_zero(path, t_slot_off(&f->geo, t_key_slot(path, &f->geo, key_of(&p, 1), KB)),
	                TUTTI_SLOT_HEADER_BYTES),
	    0);
	assert_int_equal(
	    t_disk_zero(path, t_slot_off(&f->geo, t_key_slot(path, &f->geo, key_of(&q, 0), KB)),
	                TUTTI_SLOT_HEADER_BYTES),
	    0);
	st = open_ok(f, &f->geo, dir, 4, NULL);
	assert_recovery(st, 1, 0, 1, 0);
	assert_int_equal(tutti_store_lookup(st, p.keys, 2, NULL), 1);
	assert_int_equal(tutti_store_lookup(st, q.keys, 2, NULL), 0);
	/* Three slots are free: three new chunks need no eviction. */
	for (int i = 0; i < 3; i++) {
		make_chain(f, &n[i], 1, BPC, NULL, 0);
		save_chain(st, src, &n[i], 0);
	}
	assert_int_equal(stats(st).evictions, 0);
	for (int i = 0; i < 3; i++) {
		assert_chain(f, st, src, dst, &n[i]);
	}
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(path);
	free(dir);
}

/* Copy slot \p from of file \p a (header and objects) over slot \p to of file \p b. */
static void
copy_slot(const struct tutti_geometry *g, const char *a, uint32_t from, const char *b, uint32_t to)
{
	uint64_t bytes = tutti_geometry_slot_bytes(g);
	uint8_t *buf = malloc(bytes);

	assert_non_null(buf);
	assert_int_equal(t_disk_read(a, t_slot_off(g, from), buf, bytes), 0);
	assert_int_equal(t_disk_write(b, t_slot_off(g, to), buf, bytes), 0);
	free(buf);
}

static void
test_durable_slot_of_another_store_is_dropped(void **state)
{
	struct fixture *f = *state;
	char *d1 = store_dir(f, "one"), *d2 = store_dir(f, "two");
	char *p1 = data_of(d1), *p2 = data_of(d2);
	struct t_kv *src = new_kv(f, &f->geo, direct_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, direct_layout, false);
	struct tutti_store *s1 = open_ok(f, &f->geo, d1, 8, NULL);
	struct tutti_store *s2 = open_ok(f, &f->geo, d2, 8, NULL);
	struct chain a, b;
	uint32_t from;

	/* Same geometry, namespace and key size; only the store ids differ. */
	make_chain(f, &a, 2, 2 * BPC, NULL, 0);
	make_chain(f, &b, 1, BPC, NULL, 0);
	save_chain(s1, src, &a, 0);
	save_chain(s2, src, &b, 0);
	tutti_store_close(s1);
	tutti_store_close(s2);
	from = t_key_slot(p2, &f->geo, key_of(&b, 0), KB);
	copy_slot(&f->geo, p2, from, p1, t_free_slot(p1, &f->geo));
	/* The control: the same copy inside its own store is a valid second copy. */
	copy_slot(&f->geo, p2, from, p2, t_free_slot(p2, &f->geo));

	s1 = open_ok(f, &f->geo, d1, 8, NULL);
	assert_recovery(s1, 2, 1, 0, 0);
	assert_int_equal(tutti_store_lookup(s1, b.keys, 1, NULL), 0);
	assert_chain(f, s1, src, dst, &a);
	tutti_store_close(s1);
	s2 = open_ok(f, &f->geo, d2, 8, NULL);
	assert_recovery(s2, 1, 0, 0, 1);
	assert_chain(f, s2, src, dst, &b);
	tutti_store_close(s2);
	t_kv_free(src);
	t_kv_free(dst);
	free(p1);
	free(p2);
	free(d1);
	free(d2);
}

/* Save [a b] and [a b c] in one call, as a serving engine batches two requests sharing a new
 * prefix: a and b are stored once. */
static void
save_shared_prefix_in_one_call(struct tutti_store *st, const struct t_kv *src,
                               const struct chain *abc)
{
	struct tutti_request reqs[2] = {chain_req(abc, 2, 0, abc->ids),
	                                chain_req(abc, 3, 0, abc->ids)};
	int32_t status[5];
	uint64_t used = stats(st).used_slots;

	assert_int_equal(tutti_store_save(st, src->kv, reqs, 2, status), 3);
	assert_int_equal(status[0], 0);
	assert_int_equal(status[1], 0);
	assert_true(status[2] == 0 || status[2] == 1);
	assert_true(status[3] == 0 || status[3] == 1);
	assert_int_equal(status[4], 0);
	assert_int_equal(stats(st).used_slots, used + 3);
}

static void
test_durable_two_copies_of_a_key_on_disk_recover_as_one(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "dups");
	char *path = data_of(dir);
	struct t_kv *src = new_kv(f, &f->geo, staged_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, direct_layout, false);
	struct chain abc, n[6];
	struct tutti_store *st = open_ok(f, &f->geo, dir, 8, NULL);
	uint32_t slots[4];
	int copies;
	uint64_t dups;

	make_chain(f, &abc, 3, 3 * BPC, NULL, 0);
	save_shared_prefix_in_one_call(st, src, &abc);
	tutti_store_close(st);
	/* However many copies the call wrote, recovery indexes one per key. */
	copies = t_find_key_slots(path, &f->geo, key_of(&abc, 0), KB, slots, 4) +
	         t_find_key_slots(path, &f->geo, key_of(&abc, 1), KB, slots, 4);
	assert_true(copies >= 2);
	dups = (uint64_t)copies - 2;
	/* A second copy of c, as a chunk evicted and saved again into another slot leaves. */
	copy_slot(&f->geo, path, t_key_slot(path, &f->geo, key_of(&abc, 2), KB), path,
	          t_free_slot(path, &f->geo));
	st = open_ok(f, &f->geo, dir, 8, NULL);
	assert_recovery(st, 3, 0, 0, dups + 1);
	assert_chain(f, st, src, dst, &abc);
	/* The LRU works: five more chunks fill the store without eviction (the extra copies'
	 * slots are free), the sixth evicts the least recently used chain's tail, c. */
	for (int i = 0; i < 5; i++) {
		make_chain(f, &n[i], 1, BPC, NULL, 0);
		save_chain(st, src, &n[i], 0);
	}
	assert_int_equal(stats(st).evictions, 0);
	make_chain(f, &n[5], 1, BPC, NULL, 0);
	save_chain(st, src, &n[5], 0);
	assert_int_equal(stats(st).evictions, 1);
	assert_int_equal(tutti_store_lookup(st, abc.keys, 3, NULL), 2);
	for (int i = 0; i < 6; i++) {
		assert_chain(f, st, src, dst, &n[i]);
	}
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(path);
	free(dir);
}

static void
test_durable_recovery_restores_the_lru_order_of_the_saves(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "lru");
	struct t_kv *src = new_kv(f, &f->geo, direct_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, direct_layout, false);
	struct chain x, y, z, n[3];
	struct tutti_store *st = open_ok(f, &f->geo, dir, 5, NULL);

	make_chain(f, &x, 2, 2 * BPC, NULL, 0);
	make_chain(f, &y, 1, BPC, NULL, 0);
	make_chain(f, &z, 1, BPC, NULL, 0);
	save_chain(st, src, &x, 0);
	save_chain(st, src, &y, 0);
	save_chain(st, src, &z, 0);
	tutti_store_close(st);
	st = open_ok(f, &f->geo, dir, 5, NULL);
	assert_recovery(st, 4, 0, 0, 0);
	for (int i = 0; i < 3; i++) {
		make_chain(f, &n[i], 1, BPC, NULL, 0);
		save_chain(st, src, &n[i], 0);
		assert_int_equal(stats(st).evictions, (uint64_t)i);
	}
	/* X was saved first: its tail went first, then its root. */
	assert_int_equal(tutti_store_lookup(st, x.keys, 2, NULL), 0);
	assert_chain(f, st, src, dst, &y);
	assert_chain(f, st, src, dst, &z);
	for (int i = 0; i < 3; i++) {
		assert_chain(f, st, src, dst, &n[i]);
	}
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
}

/*
 * A process killed inside a save, after the new chunks' objects reached the disk and before
 * their headers did, leaves every reused slot with the header it had before the save over the
 * new objects. Recovery must still find every chunk committed before that save intact.
 */
static void
test_durable_save_killed_before_its_headers_loses_no_committed_chunk(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "killed");
	char *path = data_of(dir);
	struct t_kv *src = new_kv(f, &f->geo, direct_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, staged_layout, false);
	struct chain abc, xy, other;
	struct tutti_store *st = open_ok(f, &f->geo, dir, 8, NULL);
	uint8_t *before, *after;
	uint32_t nr, nr2, restored = 0, dids[3 * BPC];
	int32_t status[3];
	int64_t loaded;

	make_chain(f, &abc, 3, 3 * BPC, NULL, 0);
	make_chain(f, &other, 1, BPC, NULL, 0);
	make_chain(f, &xy, 2, 2 * BPC, NULL, 0);
	save_chain(st, src, &other, 0);
	save_shared_prefix_in_one_call(st, src, &abc);
	/* The headers on disk before the next save, read beneath the open (idle) store. */
	before = t_read_headers(path, &f->geo, &nr);
	assert_non_null(before);
	save_chain(st, src, &xy, 0);
	tutti_store_close(st);
	/* Undo the header writes of that save: its objects stay. */
	after = t_read_headers(path, &f->geo, &nr2);
	assert_non_null(after);
	assert_int_equal(nr, nr2);
	for (uint32_t s = 0; s < nr; s++) {
		const uint8_t *old = before + (size_t)s * TUTTI_SLOT_HEADER_BYTES;

		if (memcmp(old, after + (size_t)s * TUTTI_SLOT_HEADER_BYTES,
		           TUTTI_SLOT_HEADER_BYTES) != 0) {
			assert_int_equal(t_disk_write(path, t_slot_off(&f->geo, s), old,
			                              TUTTI_SLOT_HEADER_BYTES),
			                 0);
			restored++;
		}
	}
	assert_int_equal(restored, 2);

	st = open_ok(f, &f->geo, dir, 8, NULL);
	assert_int_equal(tutti_store_lookup(st, xy.keys, 2, NULL), 0);
	assert_int_equal(tutti_store_lookup(st, abc.keys, 3, NULL), 3);
	loaded = load_range(f, st, dst, &abc, 0, 3, dids, status);
	for (uint32_t i = 0; i < 3; i++) {
		if (status[i] != 0) {
			print_message("chunk %u of [a b c], committed before the killed save, is "
			              "lost: load status %d\n",
			              i, status[i]);
		}
	}
	assert_int_equal(loaded, 3);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(status[i], 0);
		assert_true(chunk_equal(src, dst, &abc, i, dids));
	}
	assert_chain(f, st, src, dst, &other);
	assert_int_equal(stats(st).load_corrupt, 0);
	tutti_store_close(st);
	free(before);
	free(after);
	t_kv_free(src);
	t_kv_free(dst);
	free(path);
	free(dir);
}

/* ---- TUTTI_OPEN_EXISTING ---- */

static void
test_durable_open_existing_adopts_geometry_key_size_namespace_and_capacity(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "existing");
	const char *dirs[1] = {dir};
	struct tutti_geometry g = small_geo(), got;
	const struct how h = {.ns = "other-model/fp8/tp3", .key_bytes = 16};
	struct tutti_store_opts o;
	struct tutti_store *st;
	struct t_kv *src, *dst;
	struct tutti_request r;
	uint32_t ids[2 * BPC], dids[2 * BPC];
	uint8_t keys[2 * 16];
	int32_t status[2];

	/* Unlike the defaults in every identity field. */
	g.nr_layers = 3;
	g.nr_kv_heads = 2;
	g.head_dim = 32;
	g.elem_bytes = 1;
	g.block_tokens = 32;
	g.chunk_tokens = 64;
	src = new_kv(f, &g, staged_layout, true);
	dst = new_kv(f, &g, direct_layout, false);
	t_rng_fill(&f->r, keys, sizeof(keys));
	t_random_distinct(&f->r, ids, 2 * 2, NR_BLOCKS);
	t_random_distinct(&f->r, dids, 2 * 2, NR_BLOCKS);
	st = open_ok(f, &g, dir, 10, &h);
	r = (struct tutti_request){
	    .size = sizeof(r), .nr_keys = 2, .keys = keys, .nr_blocks = 3, .block_ids = ids};
	assert_int_equal(tutti_store_save(st, src->kv, &r, 1, status), 2);
	tutti_store_close(st);

	/* No geometry, no namespace, the default key size, capacity 0. */
	tutti_store_opts_init(&o);
	o.flags = TUTTI_OPEN_EXISTING;
	o.dirs = dirs;
	o.nr_dirs = 1;
	o.engine = (uint32_t)g_engine;
	o.log_fn = t_log_fn;
	o.log_arg = &f->rec;
	st = NULL;
	assert_int_equal(tutti_store_open(NULL, &o, &st), 0);
	assert_int_equal(tutti_store_geometry(st, &got), 0);
	assert_int_equal(got.nr_layers, g.nr_layers);
	assert_int_equal(got.nr_kv_heads, g.nr_kv_heads);
	assert_int_equal(got.head_dim, g.head_dim);
	assert_int_equal(got.elem_bytes, g.elem_bytes);
	assert_int_equal(got.kv_planes, g.kv_planes);
	assert_int_equal(got.block_tokens, g.block_tokens);
	assert_int_equal(got.chunk_tokens, g.chunk_tokens);
	assert_int_equal(stats(st).capacity_slots, 10);
	assert_recovery(st, 2, 0, 0, 0);
	/* 16-byte keys find the chain, and it loads bit-exact. */
	assert_int_equal(tutti_store_lookup(st, keys, 2, NULL), 2);
	r.block_ids = dids;
	assert_int_equal(tutti_store_load(st, dst->kv, &r, 1, 0, g.nr_layers, status), 2);
	for (uint32_t b = 0; b < 3; b++) {
		for (uint32_t l = 0; l < g.nr_layers; l++) {
			assert_true(t_kv_block_equal(src, ids[b], dst, dids[b], l));
		}
	}
	tutti_store_close(st);
	/* The identity was kept: the original options still open it, capacity unchanged. */
	st = open_ok(f, &g, dir, 10, &h);
	assert_int_equal(stats(st).capacity_slots, 10);
	assert_recovery(st, 2, 0, 0, 0);
	tutti_store_close(st);
	/* A capacity given with TUTTI_OPEN_EXISTING resizes. */
	o.capacity_bytes = 12 * tutti_geometry_slot_bytes(&g);
	assert_int_equal(tutti_store_open(NULL, &o, &st), 0);
	assert_int_equal(stats(st).capacity_slots, 12);
	assert_int_equal(tutti_store_lookup(st, keys, 2, NULL), 2);
	tutti_store_close(st);
	/* Nothing to adopt. */
	dirs[0] = f->tmp;
	assert_int_equal(tutti_store_open(NULL, &o, &st), -ENOENT);
	assert_null(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
}

/* ---- checksums ---- */

static void
test_durable_load_fails_damaged_chunks_alone_and_forgets_them(void **state)
{
	struct fixture *f = *state;
	const enum t_layout layouts[2] = {direct_layout, staged_layout};

	for (uint32_t li = 0; li < 2; li++) {
		char name[32];
		char *dir, *path;
		struct t_kv *src = new_kv(f, &f->geo, layouts[li], true);
		struct t_kv *dst = new_kv(f, &f->geo, layouts[li], false);
		struct chain c, d, e;
		struct tutti_store *st;
		struct tutti_request reqs[3];
		uint32_t dc[3 * BPC], dd[2 * BPC], de[2 * BPC];
		int32_t status[7];

		snprintf(name, sizeof(name), "csum.%u", li);
		dir = store_dir(f, name);
		path = data_of(dir);
		f->next_src = 0;
		make_chain(f, &c, 3, 3 * BPC, NULL, 0);
		make_chain(f, &d, 2, BPC + 2, NULL, 0);
		make_chain(f, &e, 2, 2 * BPC, NULL, 0);
		st = open_ok(f, &f->geo, dir, 16, NULL);
		save_chain(st, src, &c, 0);
		save_chain(st, src, &d, 0);
		save_chain(st, src, &e, 0);
		/* Beneath the open store: C's middle chunk and E's root. */
		damage_payload(f, dir, &f->geo, key_of(&c, 1), 1, BPC);
		damage_payload(f, dir, &f->geo, key_of(&e, 0), 0, BPC);

		t_kv_poison(dst, POISON);
		t_random_distinct(&f->r, dc, 3 * BPC, NR_BLOCKS / 2);
		for (uint32_t i = 0; i < 2 * BPC; i++) {
			dd[i] = NR_BLOCKS / 2 + i;
			de[i] = NR_BLOCKS / 2 + 2 * BPC + i;
		}
		reqs[0] = chain_req(&c, 3, 0, dc);
		reqs[1] = chain_req(&d, 2, 0, dd);
		reqs[2] = chain_req(&e, 2, 0, de);
		assert_int_equal(tutti_store_load(st, dst->kv, reqs, 3, 0, 2, status), 5);
		assert_int_equal(status[0], 0);
		assert_int_equal(status[1], -EBADMSG);
		assert_int_equal(status[2], 0);
		assert_int_equal(status[3], 0);
		assert_int_equal(status[4], 0);
		assert_int_equal(status[5], -EBADMSG);
		assert_int_equal(status[6], 0);
		assert_true(chunk_equal(src, dst, &c, 0, dc));
		assert_true(chunk_equal(src, dst, &c, 2, dc));
		assert_true(chunk_equal(src, dst, &d, 0, dd));
		assert_true(chunk_equal(src, dst, &d, 1, dd));
		assert_true(chunk_equal(src, dst, &e, 1, de));
		assert_int_equal(stats(st).load_corrupt, 2);
		assert_true(t_log_contains(&f->rec, "checksum"));
		/* Never served again; the children are cut off from their chains. */
		assert_int_equal(tutti_store_lookup(st, c.keys, 3, NULL), 1);
		assert_int_equal(tutti_store_lookup(st, e.keys, 2, NULL), 0);
		assert_int_equal(load_range(f, st, dst, &c, 1, 2, dc, status), 0);
		assert_int_equal(status[0], -ENOENT);
		/* Saved again, C[1] joins its child, whose slot was never touched, back in. */
		assert_int_equal(save_keys(st, src, &c, 2, status), 1);
		assert_int_equal(status[0], 1);
		assert_int_equal(status[1], 0);
		assert_chain(f, st, src, dst, &c);
		assert_chain(f, st, src, dst, &d);
		tutti_store_close(st);

		/* E[0]'s header was erased: gone for good, not a damaged header; E[1] is an
		 * orphan now. C[1] is on disk once. */
		assert_int_equal(t_find_key_slots(path, &f->geo, key_of(&e, 0), KB, dc, 1), 0);
		assert_int_equal(t_find_key_slots(path, &f->geo, key_of(&c, 1), KB, dc, 1), 1);
		st = open_ok(f, &f->geo, dir, 16, NULL);
		assert_recovery(st, 5, 0, 1, 0);
		assert_int_equal(tutti_store_lookup(st, e.keys, 2, NULL), 0);
		assert_chain(f, st, src, dst, &c);
		assert_chain(f, st, src, dst, &d);
		tutti_store_close(st);
		t_kv_free(src);
		t_kv_free(dst);
		free(path);
		free(dir);
	}
}

static void
test_durable_partial_loads_verify_the_whole_stored_payload(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "partial");
	char *path = data_of(dir);
	struct t_kv *src = new_kv(f, &f->geo, direct_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, direct_layout, false);
	uint64_t lbb = tutti_geometry_layer_block_bytes(&f->geo);
	struct chain a, p;
	struct tutti_store *st = open_ok(f, &f->geo, dir, 8, NULL);
	struct tutti_request r;
	uint32_t dids[BPC];
	int32_t status[1];
	uint32_t slot;

	make_chain(f, &a, 1, BPC, NULL, 0);
	make_chain(f, &p, 1, 2, NULL, 0); /* two of four blocks */
	save_chain(st, src, &a, 0);
	save_chain(st, src, &p, 0);
	/* Block 0 of A damaged; a load of blocks 2..3 only still fails. */
	slot = t_key_slot(path, &f->geo, a.keys, KB);
	assert_int_equal(t_disk_flip_bit(path, t_object_off(&f->geo, slot, 0) + 100, 3), 0);
	t_random_distinct(&f->r, dids, BPC, NR_BLOCKS);
	r = (struct tutti_request){.size = sizeof(r),
	                           .nr_keys = 1,
	                           .keys = a.keys,
	                           .skip_blocks = 2,
	                           .nr_blocks = 2,
	                           .block_ids = dids};
	assert_int_equal(tutti_store_load(st, dst->kv, &r, 1, 0, 2, status), 0);
	assert_int_equal(status[0], -EBADMSG);
	assert_int_equal(tutti_store_lookup(st, a.keys, 1, NULL), 0);
	/* P's padding (past its two blocks) is no data: damage there is harmless, damage inside
	 * its blocks is not. */
	slot = t_key_slot(path, &f->geo, p.keys, KB);
	assert_int_equal(t_disk_flip_bit(path, t_object_off(&f->geo, slot, 1) + 2 * lbb + 5, 0), 0);
	assert_chain(f, st, src, dst, &p);
	assert_int_equal(t_disk_flip_bit(path, t_object_off(&f->geo, slot, 1) + 2 * lbb - 1, 7), 0);
	assert_int_equal(load_range(f, st, dst, &p, 0, 1, dids, status), 0);
	assert_int_equal(status[0], -EBADMSG);
	assert_int_equal(stats(st).load_corrupt, 2);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(path);
	free(dir);
}

static void
test_durable_fsck_finds_damaged_chunks_and_repair_removes_them(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "fsck");
	struct t_kv *src = new_kv(f, &f->geo, staged_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, direct_layout, false);
	uint64_t lbb = tutti_geometry_layer_block_bytes(&f->geo);
	struct tutti_fsck_report rep = {.size = sizeof(rep)};
	struct chain c[10];
	uint32_t owner[30], idx[30], bad[3], nr = 0, alive = 0;
	uint64_t all_bytes = 0, bad_bytes = 0;
	bool dead[30] = {false};
	struct tutti_store *st = open_ok(f, &f->geo, dir, 32, NULL);

	for (uint32_t i = 0; i < 10; i++) {
		uint32_t keys = 1 + t_rng_below(&f->r, 3);
		uint32_t blocks = (keys - 1) * BPC + 1 + t_rng_below(&f->r, BPC);

		make_chain(f, &c[i], keys, blocks, NULL, 0);
		save_chain(st, src, &c[i], 0);
		for (uint32_t k = 0; k < keys; k++, nr++) {
			owner[nr] = i;
			idx[nr] = k;
			all_bytes += chunk_blocks(&c[i], k) * lbb * f->geo.nr_layers;
		}
	}
	tutti_store_close(st);
	t_random_distinct(&f->r, bad, 3, nr);
	for (int i = 0; i < 3; i++) {
		const struct chain *ch = &c[owner[bad[i]]];
		uint32_t k = idx[bad[i]];

		damage_payload(f, dir, &f->geo, key_of(ch, k), t_rng_below(&f->r, 2),
		               chunk_blocks(ch, k));
		dead[bad[i]] = true;
		bad_bytes += chunk_blocks(ch, k) * lbb * f->geo.nr_layers;
	}

	st = open_ok(f, &f->geo, dir, 32, NULL);
	/* Checking changes nothing, so a second check finds the same. */
	for (int pass = 0; pass < 2; pass++) {
		assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
		assert_int_equal(rep.chunks_checked, nr);
		assert_int_equal(rep.corrupt_chunks, 3);
		assert_int_equal(rep.removed_chunks, 0);
		assert_true(rep.bytes_checked > 0 && rep.bytes_checked <= all_bytes);
		assert_int_equal(stats(st).used_slots, nr);
		for (uint32_t i = 0; i < 10; i++) {
			assert_int_equal(tutti_store_lookup(st, c[i].keys, c[i].nr_keys, NULL),
			                 c[i].nr_keys);
		}
	}
	assert_int_equal(tutti_store_fsck(st, TUTTI_FSCK_REPAIR, &rep), 0);
	assert_int_equal(rep.chunks_checked, nr);
	assert_int_equal(rep.corrupt_chunks, 3);
	assert_int_equal(rep.removed_chunks, 3);
	assert_int_equal(stats(st).used_slots, nr - 3);
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	assert_int_equal(rep.chunks_checked, nr - 3);
	assert_int_equal(rep.corrupt_chunks, 0);
	assert_int_equal(rep.bytes_checked, all_bytes - bad_bytes);
	tutti_store_close(st);

	/* After reopen the removed chunks stay removed, and their descendants are orphans. */
	st = open_ok(f, &f->geo, dir, 32, NULL);
	for (uint32_t n = 0, chain_dead = 0; n < nr; n++) {
		chain_dead = idx[n] == 0 ? dead[n] : chain_dead || dead[n];
		alive += !chain_dead;
	}
	assert_recovery(st, alive, 0, nr - 3 - alive, 0);
	for (uint32_t n = 0, prefix = 0; n < nr; n++) {
		const struct chain *ch = &c[owner[n]];

		prefix = idx[n] == 0 ? 0 : prefix;
		prefix += prefix == idx[n] && !dead[n];
		if (idx[n] + 1 == ch->nr_keys) {
			assert_int_equal(tutti_store_lookup(st, ch->keys, ch->nr_keys, NULL),
			                 prefix);
			if (prefix == ch->nr_keys) {
				assert_chain(f, st, src, dst, ch);
			}
		}
	}
	assert_int_equal(tutti_store_fsck(st, 0, &rep), 0);
	assert_int_equal(rep.corrupt_chunks, 0);
	assert_int_equal(rep.chunks_checked, alive);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(dir);
}

/* ---- identity ---- */

static void
test_durable_store_of_another_model_or_namespace_is_eexist_and_untouched(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "model");
	char *path = data_of(dir);
	struct t_kv *src = new_kv(f, &f->geo, direct_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, direct_layout, false);
	struct tutti_geometry other = f->geo;
	const struct how model_b = {.ns = "model-b/bf16/tp0"};
	const struct how keys16 = {.key_bytes = 16};
	struct tutti_store *st = open_ok(f, &f->geo, dir, 8, NULL);
	uint8_t sb[4096], sb2[4096];
	uint64_t size;
	struct chain c;

	make_chain(f, &c, 2, 2 * BPC, NULL, 0);
	save_chain(st, src, &c, 0);
	tutti_store_close(st);
	assert_int_equal(t_disk_read(path, 0, sb, sizeof(sb)), 0);
	size = t_file_size(path);

	other.nr_kv_heads = 2; /* another model: another layer block size */
	st = (struct tutti_store *)(uintptr_t)1;
	assert_int_equal(open_rc(f, &other, dir, 8, NULL, &st), -EEXIST);
	assert_null(st);
	assert_true(f->rec.nr_err > 0);
	other = f->geo;
	other.head_dim = 32;
	other.nr_kv_heads = 2; /* the same bytes per block, another shape */
	assert_int_equal(open_rc(f, &other, dir, 8, NULL, &st), -EEXIST);
	assert_int_equal(open_rc(f, &f->geo, dir, 8, &model_b, &st), -EEXIST);
	assert_int_equal(open_rc(f, &f->geo, dir, 8, &keys16, &st), -EEXIST);
	assert_null(st);
	/* The refused opens wrote nothing. */
	assert_int_equal(t_disk_read(path, 0, sb2, sizeof(sb2)), 0);
	assert_memory_equal(sb, sb2, sizeof(sb));
	assert_int_equal(t_file_size(path), size);
	st = open_ok(f, &f->geo, dir, 8, NULL);
	assert_recovery(st, 2, 0, 0, 0);
	assert_chain(f, st, src, dst, &c);
	tutti_store_close(st);
	t_kv_free(src);
	t_kv_free(dst);
	free(path);
	free(dir);
}

static void
put32le(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

static void
put64le(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t)(v >> (8 * i));
	}
}

static void
test_durable_other_format_versions_are_eproto_and_damage_is_ebadmsg(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "version");
	char *path = data_of(dir);
	const struct how existing = {.flags = TUTTI_OPEN_EXISTING, .no_create = true};
	struct tutti_store *st = open_ok(f, &f->geo, dir, 8, NULL);
	uint8_t sb[T_SB_BYTES], v1[T_SB_BYTES], bad[T_SB_BYTES], now[T_SB_BYTES];

	tutti_store_close(st);
	assert_int_equal(t_disk_read(path, 0, sb, sizeof(sb)), 0);
	/* Version 1 as docs/format.md describes it: 96 encoded bytes, checksum at 88. */
	memcpy(v1, sb, sizeof(v1));
	memset(v1 + 88, 0, sizeof(v1) - 88);
	put32le(v1 + T_SB_OFF_VERSION, 1);
	put32le(v1 + 12, 96);
	put64le(v1 + 88, XXH3_64bits(v1, 88));
	assert_int_equal(t_disk_write(path, 0, v1, sizeof(v1)), 0);
	assert_int_equal(open_rc(f, &f->geo, dir, 8, NULL, &st), -EPROTO);
	assert_true(f->rec.nr_err > 0);
	assert_int_equal(open_rc(f, NULL, dir, 0, &existing, &st), -EPROTO);
	assert_null(st);
	/* A later version, correctly sealed. */
	memcpy(bad, sb, sizeof(bad));
	put32le(bad + T_SB_OFF_VERSION, TT_SB_VERSION + 1);
	put64le(bad + T_SB_OFF_CSUM, XXH3_64bits(bad, T_SB_OFF_CSUM));
	assert_int_equal(t_disk_write(path, 0, bad, sizeof(bad)), 0);
	assert_int_equal(open_rc(f, &f->geo, dir, 8, NULL, &st), -EPROTO);
	/* The right version with a damaged field. */
	memcpy(bad, sb, sizeof(bad));
	bad[T_SB_OFF_NR_SLOTS] ^= 0x10;
	assert_int_equal(t_disk_write(path, 0, bad, sizeof(bad)), 0);
	assert_int_equal(open_rc(f, &f->geo, dir, 8, NULL, &st), -EBADMSG);
	assert_int_equal(open_rc(f, NULL, dir, 0, &existing, &st), -EBADMSG);
	assert_null(st);
	/* Refused opens leave the superblock as they found it. */
	assert_int_equal(t_disk_read(path, 0, now, sizeof(now)), 0);
	assert_memory_equal(now, bad, sizeof(now));
	assert_int_equal(t_disk_write(path, 0, sb, sizeof(sb)), 0);
	st = open_ok(f, &f->geo, dir, 8, NULL);
	tutti_store_close(st);
	free(path);
	free(dir);
}

/* ---- one writer, file modes, links ---- */

/* In a child process: open the store in \p dir and report the result as the exit status
 * (0, or the errno). No cmocka in the child. */
static pid_t
child_open(struct fixture *f, const char *dir, int hold_fd, int ready_fd)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct tutti_store *st = NULL;
		int rc = open_rc(f, &f->geo, dir, 8, NULL, &st);
		char c = 0;

		if (ready_fd >= 0) {
			(void)!write(ready_fd, &c, 1);
		}
		if (hold_fd >= 0) {
			(void)!read(hold_fd, &c, 1); /* hold the store until told */
		}
		tutti_store_close(st);
		_exit(rc < 0 ? -rc : 0);
	}
	return pid;
}

static int
child_status(pid_t pid)
{
	int ws = 0;

	assert_int_equal(waitpid(pid, &ws, 0), pid);
	assert_true(WIFEXITED(ws));
	return WEXITSTATUS(ws);
}

static void
test_durable_second_process_is_ebusy_while_the_store_is_open(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "busy");
	struct tutti_store *st = open_ok(f, &f->geo, dir, 8, NULL), *again = NULL;
	int hold[2], ready[2];
	char c = 0;
	pid_t pid;

	assert_int_equal(child_status(child_open(f, dir, -1, -1)), EBUSY);
	tutti_store_close(st);
	assert_int_equal(child_status(child_open(f, dir, -1, -1)), 0);

	/* The other way round: a child holds the store, this process is refused. */
	assert_int_equal(pipe(hold), 0);
	assert_int_equal(pipe(ready), 0);
	pid = child_open(f, dir, hold[0], ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	assert_int_equal(open_rc(f, &f->geo, dir, 8, NULL, &again), -EBUSY);
	assert_null(again);
	assert_true(t_log_contains(&f->rec, "in use"));
	assert_int_equal(write(hold[1], &c, 1), 1);
	assert_int_equal(child_status(pid), 0);
	/* The child closed the store: the lock is free at once. */
	assert_int_equal(open_rc(f, &f->geo, dir, 8, NULL, &again), 0);
	tutti_store_close(again);
	for (int i = 0; i < 2; i++) {
		close(hold[i]);
		close(ready[i]);
	}
	free(dir);
}

static void
test_durable_created_directory_and_file_are_private(void **state)
{
	struct fixture *f = *state;
	char *dir = store_dir(f, "private");
	char *path = data_of(dir);
	mode_t old = umask(0); /* the library's modes, not the umask's */
	struct tutti_store *st;
	struct stat sd, sf;

	st = open_ok(f, &f->geo, dir, 4, NULL);
	umask(old);
	tutti_store_close(st);
	assert_int_equal(stat(dir, &sd), 0);
	assert_int_equal(stat(path, &sf), 0);
	assert_true(S_ISDIR(sd.st_mode));
	assert_true(S_ISREG(sf.st_mode));
	assert_int_equal(sd.st_mode & 07777, 0700);
	assert_int_equal(sf.st_mode & 07777, 0600);
	free(path);
	free(dir);
}

static void
test_durable_symbolic_link_as_data_file_is_eloop_and_writes_nothing(void **state)
{
	struct fixture *f = *state;
	char *real = store_dir(f, "real"), *linked = store_dir(f, "linked");
	char *real_data = data_of(real), *link_path = data_of(linked);
	char *victim = t_path_join(f->tmp, "victim"), *nowhere = t_path_join(f->tmp, "nowhere");
	const struct how plain = {.no_create = true};
	const struct how existing = {.flags = TUTTI_OPEN_EXISTING, .no_create = true};
	const char *targets[3] = {victim, nowhere, real_data};
	struct t_kv *src = new_kv(f, &f->geo, direct_layout, true);
	struct t_kv *dst = new_kv(f, &f->geo, direct_layout, false);
	struct tutti_store *st = open_ok(f, &f->geo, real, 8, NULL);
	uint8_t *real_before, *real_after;
	struct chain c;
	struct stat sv;
	FILE *fp;

	make_chain(f, &c, 1, BPC, NULL, 0);
	save_chain(st, src, &c, 0);
	tutti_store_close(st);
	real_before = malloc(t_file_size(real_data));
	real_after = malloc(t_file_size(real_data));
	assert_non_null(real_before);
	assert_non_null(real_after);
	assert_int_equal(t_disk_read(real_data, 0, real_before, t_file_size(real_data)), 0);
	fp = fopen(victim, "w");
	assert_non_null(fp);
	fputs("someone else's file\n", fp);
	fclose(fp);
	assert_int_equal(mkdir(linked, 0700), 0);

	for (int t = 0; t < 3; t++) {
		unlink(link_path);
		assert_int_equal(symlink(targets[t], link_path), 0);
		st = (struct tutti_store *)(uintptr_t)1;
		assert_int_equal(open_rc(f, &f->geo, linked, 8, NULL, &st), -ELOOP);
		assert_null(st);
		assert_true(f->rec.nr_err > 0);
		assert_int_equal(open_rc(f, &f->geo, linked, 8, &plain, &st), -ELOOP);
		assert_int_equal(open_rc(f, NULL, linked, 0, &existing, &st), -ELOOP);
		assert_null(st);
		/* The link itself is left alone. */
		assert_int_equal(lstat(link_path, &sv), 0);
		assert_true(S_ISLNK(sv.st_mode));
	}
	assert_int_equal(stat(victim, &sv), 0);
	assert_int_equal(sv.st_size, 20);
	assert_false(t_path_exists(nowhere));
	assert_int_equal(t_disk_read(real_data, 0, real_after, t_file_size(real_data)), 0);
	assert_memory_equal(real_before, real_after, t_file_size(real_data));
	st = open_ok(f, &f->geo, real, 8, NULL);
	assert_chain(f, st, src, dst, &c);
	tutti_store_close(st);
	free(real_before);
	free(real_after);
	t_kv_free(src);
	t_kv_free(dst);
	free(victim);
	free(nowhere);
	free(real_data);
	free(link_path);
	free(real);
	free(linked);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_durable_saved_chains_come_back_bit_exact_after_reopen),
	    T(test_durable_damaged_header_drops_its_chunk_and_orphans_the_children),
	    T(test_durable_open_with_repair_erases_the_headers_it_drops),
	    T(test_durable_zeroed_header_frees_its_slot_without_counting_a_drop),
	    T(test_durable_slot_of_another_store_is_dropped),
	    T(test_durable_two_copies_of_a_key_on_disk_recover_as_one),
	    T(test_durable_recovery_restores_the_lru_order_of_the_saves),
	    T(test_durable_save_killed_before_its_headers_loses_no_committed_chunk),
	    T(test_durable_open_existing_adopts_geometry_key_size_namespace_and_capacity),
	    T(test_durable_load_fails_damaged_chunks_alone_and_forgets_them),
	    T(test_durable_partial_loads_verify_the_whole_stored_payload),
	    T(test_durable_fsck_finds_damaged_chunks_and_repair_removes_them),
	    T(test_durable_store_of_another_model_or_namespace_is_eexist_and_untouched),
	    T(test_durable_other_format_versions_are_eproto_and_damage_is_ebadmsg),
	    T(test_durable_second_process_is_ebusy_while_the_store_is_open),
	    T(test_durable_created_directory_and_file_are_private),
	    T(test_durable_symbolic_link_as_data_file_is_eloop_and_writes_nothing),
	};

	return t_run_per_engine("durable", tests, sizeof(tests) / sizeof(tests[0]), false,
	                        &g_engine);
}
