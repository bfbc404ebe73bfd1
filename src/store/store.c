/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Store handle: open and close, lookup, statistics. Loads and saves are in transfer.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/vfs.h>
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
#define TT_OPEN_FLAGS (TUTTI_OPEN_CREATE | TUTTI_OPEN_EXISTING | TUTTI_OPEN_REPAIR)

void
tutti_store_opts_init(struct tutti_store_opts *opts)
{
	if (opts == NULL) {
		return;
	}
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->gpu_io_workers = 29;
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
	if (o->engine != TUTTI_ENGINE_GPU_URING && o->engine != TUTTI_ENGINE_GDS &&
	    tt_engine_ops_for(o->engine) == NULL) {
		tt_log_err(log, "store options: unknown engine %u", o->engine);
		return -EINVAL;
	}
	if ((o->flags & ~TT_OPEN_FLAGS) != 0) {
		tt_log_err(log, "store options: unknown flags 0x%x", o->flags & ~TT_OPEN_FLAGS);
		return -EINVAL;
	}
	if (o->gpu_io_workers == 0 || o->gpu_io_workers > 64) {
		tt_log_err(log, "store options: gpu_io_workers %u is not in 1..64",
		           o->gpu_io_workers);
		return -EINVAL;
	}
	if (o->gpu_io_sms > 64 || (o->gpu_io_sms != 0 && o->gpu_io_sms * TT_GRING_GROUPS_PER_BLOCK <
	                                                     o->gpu_io_workers + 1)) {
		tt_log_err(log,
		           "store options: gpu_io_sms %u cannot hold %u workers and the ring's "
		           "driver (at most %u to an SM, at most 64 SMs)",
		           o->gpu_io_sms, o->gpu_io_workers, TT_GRING_GROUPS_PER_BLOCK);
		return -EINVAL;
	}
	if (o->durability > TUTTI_DURABILITY_DURABLE) {
		tt_log_err(log, "store options: unknown durability %u", o->durability);
		return -EINVAL;
	}
	if (o->queue_depth == 0 || o->queue_depth > MAX_QUEUE_DEPTH || o->max_io_bytes == 0 ||
	    o->posix_threads > MAX_QUEUE_DEPTH) {
		tt_log_err(log,
		           "store options: queue_depth must be 1..%u and max_io_bytes non-zero",
		           MAX_QUEUE_DEPTH);
		return -EINVAL;
	}
	return 0;
}

/* Size the staging buffers: each holds one I/O of up to max_io_bytes whole objects, and there
 * is at least one buffer as long as the staging holds one object. */
static int
plan_staging(struct tutti_store *st, const struct tutti_store_opts *o)
{
	uint64_t layers = o->max_io_bytes / st->geo.object_bytes;
	uint64_t units;

	if (layers == 0) {
		layers = 1; /* an object is the smallest I/O */
	}
	if (layers > st->geo.g.nr_layers) {
		layers = st->geo.g.nr_layers;
	}
	if (layers > o->staging_bytes / st->geo.object_bytes) {
		layers = o->staging_bytes / st->geo.object_bytes;
	}
	/* One I/O carries a uint32_t length. */
	while (layers > 1 && layers * st->geo.object_bytes > UINT32_MAX) {
		layers--;
	}
	if (st->geo.object_bytes > UINT32_MAX) {
		tt_log_err(&st->log, "objects of %llu bytes exceed the 4 GiB I/O limit",
		           (unsigned long long)st->geo.object_bytes);
		return -EINVAL;
	}
	if (layers == 0) {
		tt_log_err(&st->log, "staging_bytes %llu is below one %llu-byte object",
		           (unsigned long long)o->staging_bytes,
		           (unsigned long long)st->geo.object_bytes);
		return -EINVAL;
	}
	st->unit_layers = (uint32_t)layers;
	st->unit_bytes = layers * st->geo.object_bytes;
	units = o->staging_bytes / st->unit_bytes;
	/* Direct I/O needs no staging, so only staged I/O is bounded by the staging buffers. */
	st->nr_staging = (uint32_t)TT_MIN(units, (uint64_t)o->queue_depth);
	st->nr_units = o->queue_depth;
	st->staging = tt_aligned_alloc(st->nr_staging * st->unit_bytes);
	/* Enough vector entries for a unit of whole chunks with every segment of every block. */
	st->max_iov = (uint32_t)TT_MIN((uint64_t)IOV_MAX, (uint64_t)st->unit_layers *
	                                                      st->geo.blocks_per_chunk *
	                                                      TT_MAX_SEGS_PER_LAYER);
	st->unit_iovs = tt_calloc((size_t)st->nr_units * st->max_iov, sizeof(*st->unit_iovs));
	st->units = tt_calloc(st->nr_units, sizeof(*st->units));
	st->free_bufs = tt_calloc(st->nr_units, sizeof(*st->free_bufs));
	st->ios = tt_calloc(st->nr_units, sizeof(*st->ios));
	st->dones = tt_calloc(st->nr_units, sizeof(*st->dones));
	if (st->staging == NULL || st->units == NULL || st->free_bufs == NULL || st->ios == NULL ||
	    st->dones == NULL || st->unit_iovs == NULL) {
		return -ENOMEM;
	}
	return 0;
}

/* The data-path ring of engine gpu-uring: one bounce slot per object of staging, up to the CQ
 * credit. Reads of page-cache-backed files (tmpfs) get IOSQE_ASYNC: issued inline, their
 * copies would all run on the one SQ thread. */
#define GRING_MAX_SLOTS 4096u
#define GRING_SQ_IDLE_MS 100u
/* Those punted reads are published 4 us apart, so that each wakes an io-wq worker of its own
 * (gring/proto.h). On a 16-core H200 host 2 us apart read 27-38 GB/s, 5 and 20 us 31-50 GB/s
 * (bench/results/README.md, "Paced submission"). */
#define GRING_READ_PACE_NS 4000u

/* Page-cache-backed store files: their reads are CPU copies, best spread over io-wq. */
static bool
on_tmpfs(const struct tutti_store *st)
{
	struct statfs sfs;

	return fstatfs(tt_pool_fds(st->pool)[0], &sfs) == 0 && sfs.f_type == TMPFS_MAGIC;
}

static int
open_gring(struct tutti_store *st, const struct tutti_store_opts *opts)
{
	uint64_t slots = st->nr_staging * st->unit_bytes / st->geo.object_bytes;
	struct tt_gring_conf conf;
	uint32_t cq;
	int rc;

	st->gring_slots = (uint32_t)TT_MIN(slots, (uint64_t)GRING_MAX_SLOTS);
	cq = 1;
	while (cq < st->gring_slots || cq < opts->queue_depth) {
		cq <<= 1;
	}
	conf = (struct tt_gring_conf){
	    .fds = tt_pool_fds(st->pool),
	    .nr_fds = tt_pool_nr_dirs(st->pool),
	    .buf = st->staging,
	    .buf_bytes = st->nr_staging * st->unit_bytes,
	    .sq_entries = TT_MIN(cq, 1024u),
	    .cq_entries = cq,
	    .sq_idle_ms = GRING_SQ_IDLE_MS,
	    .async = on_tmpfs(st),
	    .log = &st->log,
	};
	conf.read_pace_ns = conf.async ? GRING_READ_PACE_NS : 0;
	rc = tt_gring_create(&conf, &st->gring);
	if (rc < 0) {
		tt_log_err(&st->log, "engine gpu-uring: %s", tutti_strerror(rc));
	}
	return rc;
}

/* Engine gds (cuFile's driver already open): a handle per data file, and (with the batch API)
 * a batch handle per staging half. The device staging waits for the first GPU transfer. */
#define GDS_MAX_BATCH 128u

static int
open_gds(struct tutti_store *st)
{
	uint32_t nr = tt_pool_nr_dirs(st->pool);
	uint64_t objs = (uint64_t)st->nr_staging * st->unit_bytes / st->geo.object_bytes / 2;

	st->gds_batch_nr = (uint32_t)TT_MAX(1, TT_MIN(objs, (uint64_t)GDS_MAX_BATCH));
	st->gds_fh = tt_calloc(nr, sizeof(*st->gds_fh));
	st->gds_fds = tt_calloc(nr, sizeof(*st->gds_fds));
	for (uint32_t i = 0; st->gds_fds != NULL && i < nr; i++) {
		st->gds_fds[i] = -1;
	}
	st->gds_params = tt_calloc(2 * (size_t)st->gds_batch_nr, sizeof(*st->gds_params));
	st->gds_events = tt_calloc(st->gds_batch_nr, sizeof(*st->gds_events));
	if (st->gds_fh == NULL || st->gds_fds == NULL || st->gds_params == NULL ||
	    st->gds_events == NULL) {
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nr; i++) {
		struct tt_cufile_descr d = {.type = TT_CUFILE_HANDLE_TYPE_OPAQUE_FD};
		struct tt_cufile_error e;
		char path[64];

		/* cuFile refuses descriptors opened with O_NOFOLLOW, as the pool's are: reopen the
		 * same file through its /proc link (the inode the pool holds, no path lookup). */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", tt_pool_fds(st->pool)[i]);
		st->gds_fds[i] = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
		if (st->gds_fds[i] < 0) {
			int rc = -errno;

			tt_log_err(&st->log, "engine gds: reopening data file %u: %s", i,
			           tutti_strerror(rc));
			return rc;
		}
		d.handle.fd = st->gds_fds[i];
		e = st->cufile->handle_register(&st->gds_fh[i], &d);
		if (e.err != 0) {
			/* Typically the platform: cuFile could not classify the file's volume (its
			 * cufile.log says why), so it cannot do I/O on it, even in compat mode. */
			st->gds_fh[i] = NULL;
			tt_log_err(&st->log,
			           "engine gds: cuFile refuses data file %u (cuFileHandleRegister: "
			           "cuFile error %d; cufile.log has the reason)",
			           i, e.err);
			return -EOPNOTSUPP;
		}
	}
	for (uint32_t h = 0; st->cufile->batch_setup != NULL && h < 2; h++) {
		struct tt_cufile_error e =
		    st->cufile->batch_setup(&st->gds_batch[h], st->gds_batch_nr);

		if (e.err != 0) {
			tt_log_info(
			    &st->log,
			    "engine gds: cuFileBatchIOSetUp failed (cuFile error %d); one I/O "
			    "per call",
			    e.err);
			st->gds_batch[h] = NULL;
		}
	}
	if (st->gds_batch[0] == NULL || st->gds_batch[1] == NULL) {
		for (uint32_t h = 0; h < 2; h++) {
			if (st->gds_batch[h] != NULL) {
				st->cufile->batch_destroy(st->gds_batch[h]);
				st->gds_batch[h] = NULL;
			}
		}
	}
	return 0;
}

static void
close_gds(struct tutti_store *st)
{
	if (st->cufile == NULL) {
		return;
	}
	for (uint32_t h = 0; h < 2; h++) {
		if (st->gds_batch[h] != NULL) {
			st->cufile->batch_destroy(st->gds_batch[h]);
		}
	}
	if (st->gds_buf_registered) {
		st->cufile->buf_deregister(st->gds_staging);
	}
	tt_gpu_dev_free(st->gds_staging);
	for (uint32_t i = 0; st->gds_fh != NULL && i < tt_pool_nr_dirs(st->pool); i++) {
		if (st->gds_fh[i] != NULL) {
			st->cufile->handle_deregister(st->gds_fh[i]);
		}
		if (st->gds_fds[i] >= 0) {
			close(st->gds_fds[i]);
		}
	}
	tt_cufile_close(st->cufile);
	tt_free(st->gds_fh);
	tt_free(st->gds_fds);
	tt_free(st->gds_params);
	tt_free(st->gds_events);
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

/* Engines that need a library this machine may lack are refused before anything is created. */
static int
check_engine_library(struct tutti_store *st, const struct tutti_store_opts *opts)
{
	if (opts->engine == TUTTI_ENGINE_GDS) {
		return tt_cufile_open(&st->log, &st->cufile);
	}
	return 0;
}

static void
take_options(struct tutti_store *st, const struct tutti_store_opts *opts)
{
	st->flags = opts->flags;
	st->durability = opts->durability;
	st->gpu_io_workers = opts->gpu_io_workers;
	/* 0: the fewest SMs that hold the workers and the ring's driver. */
	st->gpu_io_sms =
	    opts->gpu_io_sms != 0
	        ? opts->gpu_io_sms
	        : (opts->gpu_io_workers + TT_GRING_GROUPS_PER_BLOCK) / TT_GRING_GROUPS_PER_BLOCK;
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

static int
open_pool(struct tutti_store *st, const struct tutti_store_opts *opts, const uint8_t *ns_fp,
          uint64_t per_dir)
{
	struct tt_pool_conf pc = {
	    .dirs = opts->dirs,
	    .nr_dirs = opts->nr_dirs,
	    .create = (opts->flags & TUTTI_OPEN_CREATE) != 0,
	    .slots_per_dir = per_dir,
	    .geo = &st->geo,
	    .key_bytes = st->key_bytes,
	    .ns_fp = ns_fp,
	    .log = &st->log,
	};

	return tt_pool_open(&pc, &st->pool);
}

/* The index and the in-memory copy of every slot's object checksums (filled by recovery). */
static int
make_index(struct tutti_store *st)
{
	int rc = tt_index_create(tt_pool_nr_slots(st->pool), st->key_bytes, &st->idx);

	if (rc < 0) {
		return rc;
	}
	st->slot_csums = tt_calloc((size_t)tt_pool_nr_slots(st->pool) * st->geo.g.nr_layers,
	                           sizeof(*st->slot_csums));
	return st->slot_csums == NULL ? -ENOMEM : 0;
}

static int
open_engines(struct tutti_store *st, const struct tutti_store_opts *opts)
{
	struct tt_engine_conf ec = {
	    .async_reads = on_tmpfs(st),
	    .fds = tt_pool_fds(st->pool),
	    .nr_fds = tt_pool_nr_dirs(st->pool),
	    .reg_buf = st->staging,
	    .reg_bytes = st->nr_staging * st->unit_bytes,
	    .depth = st->nr_units,
	    .max_iov = st->max_iov,
	    .threads = opts->posix_threads,
	    .log = &st->log,
	};
	int rc;

	/* gpu-uring and gds keep the uring engine for control I/O (recovery, headers, flushes)
	 * and for host KV. */
	rc = tt_engine_create(tt_engine_ops_for(opts->engine == TUTTI_ENGINE_GPU_URING ||
	                                                opts->engine == TUTTI_ENGINE_GDS
	                                            ? TUTTI_ENGINE_URING
	                                            : opts->engine),
	                      &ec, &st->engine);
	if (rc == 0 && opts->engine == TUTTI_ENGINE_GPU_URING) {
		rc = open_gring(st, opts);
	}
	if (rc == 0 && opts->engine == TUTTI_ENGINE_GDS) {
		rc = open_gds(st);
	}
	return rc;
}

static void
init_stats(struct tutti_store *st, const struct tutti_store_opts *opts)
{
	st->stats.size = sizeof(st->stats);
	st->stats.nr_dirs = opts->nr_dirs;
	st->stats.slot_bytes = st->geo.slot_bytes;
	st->stats.capacity_slots = tt_pool_nr_slots(st->pool);
	st->stats.staging_bytes = st->nr_staging * st->unit_bytes;
	tt_log_info(&st->log,
	            "store open: %u dirs, %u slots of %llu bytes, engine %s, %u x %llu "
	            "bytes staging",
	            opts->nr_dirs, tt_pool_nr_slots(st->pool),
	            (unsigned long long)st->geo.slot_bytes, st->engine->ops->name, st->nr_staging,
	            (unsigned long long)st->unit_bytes);
}

int
tutti_store_open(const struct tutti_geometry *geo, const struct tutti_store_opts *opts,
                 struct tutti_store **out)
{
	uint8_t ns_fp[TT_NS_FP_BYTES];
	struct tutti_store *st;
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
		rc = check_engine_library(st, opts);
	}
	if (rc == 0) {
		take_options(st, opts);
		rc = settle_geometry(st, geo, opts, ns_fp, &per_dir);
	}
	if (rc == 0) {
		rc = size_slots(st, opts, &per_dir);
	}
	if (rc == 0) {
		rc = plan_staging(st, opts);
	}
	/* Nothing exists on disk before this step. */
	if (rc == 0) {
		rc = open_pool(st, opts, ns_fp, per_dir);
	}
	if (rc == 0) {
		rc = make_index(st);
	}
	if (rc == 0) {
		rc = open_engines(st, opts);
	}
	if (rc == 0) {
		rc = tt_store_recover(st, (opts->flags & TUTTI_OPEN_REPAIR) != 0);
	}
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
	/* The rings go first: they wait for the kernel to finish with the staging memory; then
	 * the GPU, which may still read it. */
	if (st->gpu_inflight) {
		tt_gpu_sync(st->gpu); /* a load op's kernels (an op left open is a caller's bug) */
	}
	tt_gring_destroy(st->gring);
	tt_engine_destroy(st->engine);
	close_gds(st);
	tt_list_mem_free(&st->lists);
	tt_gpu_close(st->gpu);
	if (st->staging_mapped) {
		tt_gpu_host_unregister(st->staging);
	}
	tt_aligned_free(st->staging);
	tt_free(st->units);
	tt_free(st->free_bufs);
	tt_free(st->ios);
	tt_free(st->dones);
	tt_free(st->unit_iovs);
	tt_free(st->slot_csums);
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

/* Launch descriptors of one GPU context: a launch moving more blocks is split. */
#define TT_GPU_MAX_BLOCKS (1u << 18)

void
tt_io_lock(struct tutti_store *st)
{
	pthread_mutex_lock(&st->io_lock);
	if (st->gpu_inflight) {
		int rc = tt_gpu_sync(st->gpu);

		if (rc < 0) {
			tt_log_err(&st->log, "waiting for a load's layer kernels: %s",
			           tutti_strerror(rc));
		}
		st->gpu_inflight = false;
		for (uint32_t l = 0; st->op_failed != NULL && l < st->op_launched; l++) {
			if (st->op_failed[l] && !st->gring_broken) {
				tt_log_err(&st->log,
				           "gpu-uring: a load's layer made no progress: the "
				           "ring is given up on");
				st->gring_broken = true;
			}
		}
	}
}

int
tt_store_gpu(struct tutti_store *st, int device, struct tt_gpu **out)
{
	struct tt_gpu_conf conf = {
	    .device = device,
	    .max_blocks = TT_GPU_MAX_BLOCKS,
	    .log = &st->log,
	    .high_priority = true, /* loads gate time to first token */
	};
	int rc;

	if (st->gpu != NULL) {
		if (tt_gpu_device(st->gpu) != device) {
			tt_log_err(&st->log, "a store moves KV of one GPU: device %d, not %d",
			           tt_gpu_device(st->gpu), device);
			return -EINVAL;
		}
		*out = st->gpu;
		return 0;
	}
	rc = tt_gpu_open(&conf, &st->gpu);
	if (rc == 0 && !st->staging_mapped) {
		/* Kernels read and write the staging across PCIe, without a copy. */
		rc = tt_gpu_host_register(st->staging, st->nr_staging * st->unit_bytes);
		st->staging_mapped = rc == 0;
	}
	if (rc < 0) {
		tt_log_err(&st->log, "GPU %d: %s", device, tutti_strerror(rc));
		tt_gpu_close(st->gpu);
		st->gpu = NULL;
		return rc;
	}
	*out = st->gpu;
	return 0;
}

void
tt_store_note_io(struct tutti_store *st)
{
	uint64_t ios = st->engine->nr_ios + st->gring_ios + st->gds_ios;
	/* System calls on the data path: engine submissions, for the ring only the host's
	 * wake-ups of its SQ thread (never one per I/O), for gds the cuFile calls. */
	uint64_t calls =
	    st->engine->nr_submits + (st->gring ? tt_gring_wakeups(st->gring) : 0) + st->gds_calls;

	pthread_mutex_lock(&st->lock);
	st->stats.io_ops = ios;
	st->stats.io_submits = calls;
	pthread_mutex_unlock(&st->lock);
}
