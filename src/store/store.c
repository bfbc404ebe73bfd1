/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Store handle: open and close, lookup, listing, statistics. Loads are in load.c, saves in
 * save.c, what they share in transfer.c.
 */
#include <errno.h>
#include <string.h>

#include "format/format.h"
#include "store/store_impl.h"

#define DEFAULT_KEY_BYTES 32u
#define MIN_KEY_BYTES 16u
#define MAX_KEY_BYTES 64u
#define DEFAULT_STAGING_BYTES (64ull << 20)
#define DEFAULT_MAX_IO_BYTES (4ull << 20)
#define DEFAULT_QUEUE_DEPTH 32u
#define MAX_QUEUE_DEPTH 4096u
_Static_assert(TT_POOL_MAX_FILES <= TT_ENGINE_MAX_FILES, "an engine does I/O on every data file");

#define TT_OPEN_FLAGS                                                                              \
	(TUTTI_OPEN_CREATE | TUTTI_OPEN_EXISTING | TUTTI_OPEN_REPAIR | TUTTI_OPEN_READ_ONLY |      \
	 TUTTI_OPEN_REPLACE)

void
tutti_store_opts_init(struct tutti_store_opts *opts)
{
	if (opts == NULL) {
		return;
	}
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->engine = TUTTI_ENGINE_URING;
	opts->key_bytes = DEFAULT_KEY_BYTES;
	opts->staging_bytes = DEFAULT_STAGING_BYTES;
	opts->max_io_bytes = DEFAULT_MAX_IO_BYTES;
	opts->queue_depth = DEFAULT_QUEUE_DEPTH;
	opts->log_level = TUTTI_LOG_WARN;
}

static int
check_opts(const struct tutti_store_opts *o, const struct tt_log *log)
{
	if (o->size != sizeof(*o)) {
		tt_log_err(log, "store options: size %u, expected %zu (call tutti_store_opts_init)",
		           o->size, sizeof(*o));
		return -EINVAL;
	}
	if (o->dirs == NULL || o->nr_dirs == 0 || o->nr_dirs > TT_POOL_MAX_DIRS) {
		tt_log_err(log, "store options: 1 to %u directories are needed", TT_POOL_MAX_DIRS);
		return -EINVAL;
	}
	if (o->data_files > TT_POOL_FILES_PER_DIR ||
	    (uint64_t)o->data_files * o->nr_dirs > TT_POOL_MAX_FILES) {
		tt_log_err(log,
		           "store options: %u data files per directory: at most %u, and %u over "
		           "all directories",
		           o->data_files, TT_POOL_FILES_PER_DIR, TT_POOL_MAX_FILES);
		return -EINVAL;
	}
	for (uint32_t d = 0; d < o->nr_dirs; d++) {
		if (o->dirs[d] == NULL || o->dirs[d][0] == '\0') {
			tt_log_err(log, "store options: directory %u is empty", d);
			return -EINVAL;
		}
	}
	if (o->key_bytes < MIN_KEY_BYTES || o->key_bytes > MAX_KEY_BYTES) {
		tt_log_err(log, "store options: key_bytes %u is outside %u..%u", o->key_bytes,
		           MIN_KEY_BYTES, MAX_KEY_BYTES);
		return -EINVAL;
	}
	if (o->ns_bytes > 0 && o->ns == NULL) {
		tt_log_err(log, "store options: ns_bytes without ns");
		return -EINVAL;
	}
	if (tt_engine_kind_name(o->engine) == NULL) {
		tt_log_err(log, "store options: unknown engine %u", o->engine);
		return -EINVAL;
	}
	if ((o->flags & ~TT_OPEN_FLAGS) != 0) {
		tt_log_err(log, "store options: unknown flags 0x%x", o->flags & ~TT_OPEN_FLAGS);
		return -EINVAL;
	}
	if ((o->flags & TUTTI_OPEN_READ_ONLY) != 0 &&
	    (o->flags & (TUTTI_OPEN_CREATE | TUTTI_OPEN_REPAIR)) != 0) {
		tt_log_err(log, "store options: a read-only open can neither create nor repair");
		return -EINVAL;
	}
	if ((o->flags & TUTTI_OPEN_REPLACE) != 0 &&
	    (o->flags & (TUTTI_OPEN_EXISTING | TUTTI_OPEN_READ_ONLY)) != 0) {
		tt_log_err(log,
		           "store options: TUTTI_OPEN_REPLACE needs the geometry and namespace "
		           "to replace with and writes, which TUTTI_OPEN_EXISTING and "
		           "TUTTI_OPEN_READ_ONLY do not allow");
		return -EINVAL;
	}
	if (o->durability > TUTTI_DURABILITY_DURABLE) {
		tt_log_err(log, "store options: unknown durability %u", o->durability);
		return -EINVAL;
	}
	if (o->queue_depth == 0 || o->queue_depth > MAX_QUEUE_DEPTH || o->max_io_bytes == 0) {
		tt_log_err(log,
		           "store options: queue_depth must be 1..%u and max_io_bytes non-zero",
		           MAX_QUEUE_DEPTH);
		return -EINVAL;
	}
	return 0;
}

/* The handle with its log and locks, before anything else: every later step logs through it, and
 * tutti_store_close() releases whatever the steps got so far. */
static struct tutti_store *
store_alloc(const struct tutti_store_opts *opts)
{
	struct tutti_store *st = tt_calloc(1, sizeof(*st));

	if (st == NULL) {
		return NULL;
	}
	if (opts->size == sizeof(*opts)) {
		st->log.fn = opts->log_fn;
		st->log.arg = opts->log_arg;
		st->log.level = (int)opts->log_level;
	}
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->io_lock, NULL);
	return st;
}

static void
take_options(struct tutti_store *st, const struct tutti_store_opts *opts)
{
	st->flags = opts->flags;
	st->read_only = (opts->flags & TUTTI_OPEN_READ_ONLY) != 0;
	st->durability = opts->durability;
	st->key_bytes = opts->key_bytes;
}

/* TUTTI_OPEN_EXISTING: take geometry, key size, namespace and capacity from the first
 * directory's superblock. */
static int
adopt_existing(struct tutti_store *st, const struct tutti_store_opts *opts,
               struct tutti_geometry *geo, uint8_t *ns_fp, uint64_t *per_dir)
{
	struct tt_superblock sb;
	int rc = tt_pool_peek(opts->dirs[0], &sb, &st->log);

	if (rc < 0) {
		return rc;
	}
	*geo = sb.geo;
	st->key_bytes = sb.key_bytes;
	memcpy(ns_fp, sb.ns_fp, TT_NS_FP_BYTES);
	if (opts->capacity_bytes == 0) {
		*per_dir = sb.nr_slots;
	}
	return 0;
}

/* The geometry (the caller's, or an existing store's) and the namespace fingerprint; *per_dir
 * is an existing store's slots per directory when its capacity is kept, else 0. */
static int
settle_geometry(struct tutti_store *st, const struct tutti_geometry *geo,
                const struct tutti_store_opts *opts, uint8_t *ns_fp, uint64_t *per_dir)
{
	struct tutti_geometry found;
	int rc;

	tt_ns_fingerprint(opts->ns, opts->ns_bytes, ns_fp);
	if ((opts->flags & TUTTI_OPEN_EXISTING) != 0) {
		rc = adopt_existing(st, opts, &found, ns_fp, per_dir);
		if (rc < 0) {
			return rc;
		}
		geo = &found;
	}
	rc = geo == NULL ? -EINVAL : tt_geo_derive(geo, &st->geo);
	if (rc < 0 || st->geo.g.nr_layers > TT_SLOT_MAX_LAYERS) {
		tt_log_err(&st->log,
		           "invalid geometry: every field must be non-zero, kv_planes 1 or "
		           "2, chunk_tokens a multiple of block_tokens, at most %u layers",
		           TT_SLOT_MAX_LAYERS);
		return -EINVAL;
	}
	return 0;
}

/* Slots per directory: the capacity asked for, split evenly (unless an existing store's count is
 * kept); at least one, and every slot number below TT_NO_SLOT. */
static int
size_slots(struct tutti_store *st, const struct tutti_store_opts *opts, uint64_t *per_dir)
{
	if (*per_dir == 0) {
		*per_dir = opts->capacity_bytes / opts->nr_dirs / st->geo.slot_bytes;
	}
	if (*per_dir == 0 || *per_dir * opts->nr_dirs >= TT_NO_SLOT) {
		tt_log_err(&st->log,
		           "capacity %llu bytes over %u directories gives %llu slots of "
		           "%llu bytes per directory; at least 1 is needed",
		           (unsigned long long)opts->capacity_bytes, opts->nr_dirs,
		           (unsigned long long)*per_dir, (unsigned long long)st->geo.slot_bytes);
		return -EINVAL;
	}
	return 0;
}

/* Open, lock and check the directories (pool.h): nothing is written yet. */
static int
open_pool(struct tutti_store *st, const struct tutti_store_opts *opts, const uint8_t *ns_fp,
          uint64_t per_dir)
{
	struct tt_pool_conf pc = {
	    .dirs = opts->dirs,
	    .nr_dirs = opts->nr_dirs,
	    .create = (opts->flags & TUTTI_OPEN_CREATE) != 0,
	    .read_only = st->read_only,
	    .replace = (opts->flags & TUTTI_OPEN_REPLACE) != 0,
	    /* TUTTI_OPEN_EXISTING without a capacity: the store as it is. */
	    .keep_slots = (opts->flags & TUTTI_OPEN_EXISTING) != 0 && opts->capacity_bytes == 0,
	    .slots_per_dir = per_dir,
	    .files_per_dir = opts->data_files,
	    .geo = &st->geo,
	    .key_bytes = st->key_bytes,
	    .ns_fp = ns_fp,
	    .log = &st->log,
	};

	return tt_pool_open(&pc, &st->pool);
}

/* The open has succeeded in everything else: write what the pool decided (a new store, a
 * resize), then, with TUTTI_OPEN_REPAIR, erase the headers recovery proved damaged. */
static int
commit(struct tutti_store *st, const uint32_t *damaged, uint32_t nr_damaged)
{
	int rc = tt_pool_commit(st->pool);

	if (rc == 0 && (st->flags & TUTTI_OPEN_REPAIR) != 0 && nr_damaged > 0) {
		pthread_mutex_lock(&st->io_lock);
		tt_erase_headers(st, damaged, nr_damaged);
		pthread_mutex_unlock(&st->io_lock);
		tt_log_info(&st->log, "repair: erased %u damaged slot headers", nr_damaged);
	}
	return rc;
}

/* The index, the in-memory copy of every slot's object checksums (filled by recovery) and the
 * older copies' slots. */
static int
make_index(struct tutti_store *st)
{
	int rc = tt_index_create(tt_pool_nr_slots(st->pool), st->key_bytes, &st->idx);

	if (rc < 0) {
		return rc;
	}
	st->slot_csums = tt_calloc((size_t)tt_pool_nr_slots(st->pool) * st->geo.g.nr_layers,
	                           sizeof(*st->slot_csums));
	st->older = tt_malloc((size_t)tt_pool_nr_slots(st->pool) * sizeof(*st->older));
	if (st->slot_csums == NULL || st->older == NULL) {
		return -ENOMEM;
	}
	for (uint32_t s = 0; s < tt_pool_nr_slots(st->pool); s++) {
		st->older[s] = TT_NO_SLOT;
	}
	return 0;
}

/* The engine, for the store's sizes: before anything is created, so that an engine this
 * machine cannot run (gds without libcufile) is refused with nothing left behind. */
static int
open_engine(struct tutti_store *st, const struct tutti_store_opts *opts)
{
	struct tt_engine_conf conf = {
	    .geo = &st->geo,
	    .staging_bytes = opts->staging_bytes,
	    .max_io_bytes = opts->max_io_bytes,
	    .queue_depth = opts->queue_depth,
	    .opts = opts->engine_opts,
	    .log = &st->log,
	};

	return tt_engine_open(opts->engine, &conf, &st->engine);
}

static void
init_stats(struct tutti_store *st, const struct tutti_store_opts *opts)
{
	struct tt_engine_stats es;

	tt_engine_stats(st->engine, &es);
	st->stats.size = sizeof(st->stats);
	st->stats.nr_dirs = opts->nr_dirs;
	st->stats.slot_bytes = st->geo.slot_bytes;
	st->stats.capacity_slots = tt_pool_nr_slots(st->pool);
	st->stats.staging_bytes = es.staging_bytes;
	tt_log_info(
	    &st->log, "store open: %u dirs, %u slots of %llu bytes, engine %s, %llu bytes staging",
	    opts->nr_dirs, tt_pool_nr_slots(st->pool), (unsigned long long)st->geo.slot_bytes,
	    tt_engine_name(st->engine), (unsigned long long)es.staging_bytes);
}

int
tutti_store_open(const struct tutti_geometry *geo, const struct tutti_store_opts *opts,
                 struct tutti_store **out)
{
	uint8_t ns_fp[TT_NS_FP_BYTES];
	struct tutti_store *st;
	uint32_t *damaged = NULL, nr_damaged = 0;
	uint64_t per_dir = 0;
	int rc;

	if (out == NULL) {
		return -EINVAL;
	}
	*out = NULL;
	if (opts == NULL) {
		return -EINVAL;
	}
	st = store_alloc(opts);
	if (st == NULL) {
		return -ENOMEM;
	}
	rc = check_opts(opts, &st->log);
	if (rc == 0) {
		take_options(st, opts);
		rc = settle_geometry(st, geo, opts, ns_fp, &per_dir);
	}
	if (rc == 0) {
		rc = size_slots(st, opts, &per_dir);
	}
	if (rc == 0) {
		rc = open_engine(st, opts);
	}
	if (rc == 0) {
		rc = open_pool(st, opts, ns_fp, per_dir);
	}
	if (rc == 0) {
		rc = make_index(st);
	}
	if (rc == 0) {
		rc =
		    tt_engine_attach(st->engine, tt_pool_fds(st->pool), tt_pool_nr_files(st->pool));
	}
	if (rc == 0) {
		rc = tt_store_recover(st, &damaged, &nr_damaged);
	}
	/* Nothing was written before this step: a failed open leaves the store as it was. */
	if (rc == 0) {
		rc = commit(st, damaged, nr_damaged);
	}
	tt_free(damaged);
	if (rc < 0) {
		tutti_store_close(st);
		return rc;
	}
	init_stats(st, opts);
	*out = st;
	return 0;
}

void
tutti_store_close(struct tutti_store *st)
{
	if (st == NULL) {
		return;
	}
	tt_engine_close(st->engine);
	tt_free(st->slot_csums);
	tt_free(st->older);
	tt_index_destroy(st->idx);
	tt_pool_close(st->pool);
	pthread_mutex_destroy(&st->io_lock);
	pthread_mutex_destroy(&st->lock);
	tt_free(st);
}

int64_t
tutti_store_lookup(struct tutti_store *st, const uint8_t *keys, uint32_t nr_keys,
                   uint64_t *nr_blocks)
{
	uint32_t hit = 0, last = TT_NO_SLOT;
	uint64_t blocks = 0;

	if (st == NULL || (keys == NULL && nr_keys > 0)) {
		return -EINVAL;
	}
	pthread_mutex_lock(&st->lock);
	while (hit < nr_keys) {
		uint32_t slot = tt_index_find(st->idx, keys + (uint64_t)hit * st->key_bytes);
		uint32_t n;

		if (slot == TT_NO_SLOT) {
			break;
		}
		n = tt_index_nr_blocks(st->idx, slot);
		blocks += n;
		last = slot;
		hit++;
		if (n < st->geo.blocks_per_chunk) {
			break; /* a partial chunk ends its chain */
		}
	}
	if (last != TT_NO_SLOT) {
		tt_index_touch_chain(st->idx, last);
	}
	st->stats.lookups++;
	st->stats.lookup_keys += nr_keys;
	st->stats.lookup_hits += hit;
	pthread_mutex_unlock(&st->lock);
	if (nr_blocks != NULL) {
		*nr_blocks = blocks;
	}
	return hit;
}

int64_t
tutti_store_list(struct tutti_store *st, uint64_t *cursor, uint8_t *keys, uint32_t *nr_blocks,
                 uint32_t max)
{
	uint32_t nr_slots, n = 0;
	uint64_t slot;

	if (st == NULL || cursor == NULL || (keys == NULL && max > 0)) {
		return -EINVAL;
	}
	nr_slots = tt_pool_nr_slots(st->pool);
	pthread_mutex_lock(&st->lock);
	/* The cursor is a slot number: slots only come and go, they never move. */
	for (slot = *cursor; slot < nr_slots && n < max; slot++) {
		const uint8_t *key = tt_index_key(st->idx, (uint32_t)slot);

		if (key == NULL) {
			continue;
		}
		memcpy(keys + (uint64_t)n * st->key_bytes, key, st->key_bytes);
		if (nr_blocks != NULL) {
			nr_blocks[n] = tt_index_nr_blocks(st->idx, (uint32_t)slot);
		}
		n++;
	}
	pthread_mutex_unlock(&st->lock);
	*cursor = slot;
	return n;
}

int
tutti_store_get_stats(struct tutti_store *st, struct tutti_stats *out)
{
	if (st == NULL || out == NULL || out->size != sizeof(*out)) {
		return -EINVAL;
	}
	pthread_mutex_lock(&st->lock);
	*out = st->stats;
	out->used_slots = tt_index_count(st->idx);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

int
tutti_store_geometry(struct tutti_store *st, struct tutti_geometry *out)
{
	if (st == NULL || out == NULL) {
		return -EINVAL;
	}
	*out = st->geo.g;
	return 0;
}

int
tutti_store_engine(struct tutti_store *st, const struct tutti_kv *kv)
{
	uint32_t kind;

	if (st == NULL || kv == NULL || !tt_geo_equal(&kv->geo, &st->geo)) {
		return -EINVAL;
	}
	tt_io_lock(st);
	kind = tt_engine_moved_by(st->engine, kv);
	pthread_mutex_unlock(&st->io_lock);
	return (int)kind;
}

uint32_t
tutti_format_version(void)
{
	return TT_SB_VERSION;
}

int
tutti_store_file_name(uint32_t index, char *buf, size_t len)
{
	char name[TT_POOL_NAME_BYTES];
	size_t n;
	int rc;

	if (buf == NULL) {
		return -EINVAL;
	}
	if (index >= TT_SB_MAX_FILES) {
		return -ERANGE;
	}
	rc = tt_pool_file_name(index, name, sizeof(name));
	n = rc == 0 ? strlen(name) : 0;
	if (rc < 0 || n >= len) {
		return -ENAMETOOLONG;
	}
	memcpy(buf, name, n + 1);
	return (int)n;
}

/* The pool's files never change while the store is open: no lock. */
int
tutti_store_file(struct tutti_store *st, uint32_t i, struct tutti_store_file *out, char *path,
                 size_t path_len)
{
	struct tutti_store_file f = {.size = sizeof(f)};
	int rc;

	if (st == NULL || out == NULL || out->size != sizeof(*out) ||
	    (path == NULL && path_len != 0)) {
		return -EINVAL;
	}
	if (i >= tt_pool_nr_files(st->pool)) {
		return -ENOENT;
	}
	rc = tt_pool_file_info(st->pool, i, &f.dir, &f.index, &f.slots_off, &f.slots_bytes, path,
	                       path_len);
	*out = f;
	return rc;
}

int
tt_store_prepare(struct tutti_store *st, const struct tutti_kv *kv)
{
	int rc;

	tt_io_lock(st);
	rc = tt_engine_prepare(st->engine, kv);
	pthread_mutex_unlock(&st->io_lock);
	return rc;
}

void
tt_io_lock(struct tutti_store *st)
{
	pthread_mutex_lock(&st->io_lock);
	tt_engine_quiesce(st->engine);
}

void
tt_store_note_io(struct tutti_store *st)
{
	struct tt_engine_stats es;

	tt_engine_stats(st->engine, &es);
	pthread_mutex_lock(&st->lock);
	st->stats.io_ops = es.io_ops;
	st->stats.io_submits = es.io_submits;
	st->stats.gpu_io_kernel_ns = es.gpu_io_kernel_ns;
	st->stats.gpu_io_block_ns = es.gpu_io_block_ns;
	st->stats.wave_io_wait_ns = es.wave_io_wait_ns;
	st->stats.wave_copy_wait_ns = es.wave_copy_wait_ns;
	pthread_mutex_unlock(&st->lock);
}

/* ---- for the modules beside the store ---- */

const struct tt_geo *
tt_store_geo(const struct tutti_store *st)
{
	return &st->geo;
}

uint32_t
tt_store_key_bytes(const struct tutti_store *st)
{
	return st->key_bytes;
}

const struct tt_log *
tt_store_log(const struct tutti_store *st)
{
	return &st->log;
}
