/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine table, the calls every engine answers (dispatched through it), and the part every
 * engine has: staging, its CPU-driven I/O queue and the GPU context for GPU KV.
 */
#include <errno.h>
#include <limits.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/vfs.h>

#include "engine/engine_impl.h"
#include "gpu/gpu.h"
#include "tutti/engine.h"

/* Indexed by enum tutti_engine. A new engine is a file of its own and one entry here. */
static const struct tt_engine_ops *const engines[] = {
    [TUTTI_ENGINE_URING] = &tt_engine_uring,         [TUTTI_ENGINE_POSIX] = &tt_engine_posix,
    [TUTTI_ENGINE_GPU_URING] = &tt_engine_gpu_uring, [TUTTI_ENGINE_GDS] = &tt_engine_gds,
    [TUTTI_ENGINE_AUTO] = &tt_engine_auto,
};

const struct tt_engine_ops *
tt_engine_ops_for(uint32_t kind)
{
	return kind < TT_ARRAY_SIZE(engines) ? engines[kind] : NULL;
}

const char *
tt_engine_kind_name(uint32_t kind)
{
	const struct tt_engine_ops *ops = tt_engine_ops_for(kind);

	return ops != NULL ? ops->name : NULL;
}

const char *
tutti_engine_name(uint32_t engine)
{
	return tt_engine_kind_name(engine);
}

int
tutti_engine_parse(const char *name)
{
	if (name == NULL) {
		return -EINVAL;
	}
	for (uint32_t k = 0; k < TT_ARRAY_SIZE(engines); k++) {
		if (strcmp(engines[k]->name, name) == 0) {
			return (int)k;
		}
	}
	return -EINVAL;
}

uint32_t
tutti_engine_count(void)
{
	return TT_ARRAY_SIZE(engines);
}

int
tutti_engine_info(uint32_t engine, struct tutti_engine_info *out)
{
	const struct tt_engine_ops *ops = tt_engine_ops_for(engine);

	if (out == NULL || out->size != sizeof(*out)) {
		return -EINVAL;
	}
	if (ops == NULL) {
		return -ENOENT;
	}
	*out = (struct tutti_engine_info){
	    .size = sizeof(*out),
	    .engine = engine,
	    .name = ops->name,
	    .description = ops->description,
	    .nr_options = ops->nr_opts,
	};
	return 0;
}

int
tutti_engine_option(uint32_t engine, uint32_t index, struct tutti_engine_option *out)
{
	const struct tt_engine_ops *ops = tt_engine_ops_for(engine);
	const struct tt_engine_opt *o;
	uint32_t n = 0;

	if (out == NULL || out->size != sizeof(*out)) {
		return -EINVAL;
	}
	if (ops == NULL || index >= ops->nr_opts) {
		return -ENOENT;
	}
	o = ops->opts[index];
	while (o->choices != NULL && o->choices[n] != NULL) {
		n++;
	}
	*out = (struct tutti_engine_option){
	    .size = sizeof(*out),
	    .kind = o->kind,
	    .name = o->name,
	    .help = o->help,
	    .min = o->kind == TUTTI_ENGINE_OPTION_CHOICE ? 0 : o->min,
	    .max = o->kind == TUTTI_ENGINE_OPTION_CHOICE ? n - 1 : o->max,
	    .def = o->def,
	    .choices = o->kind == TUTTI_ENGINE_OPTION_CHOICE ? o->choices : NULL,
	    .nr_choices = o->kind == TUTTI_ENGINE_OPTION_CHOICE ? n : 0,
	};
	return 0;
}

/* ---- the part every engine has ---- */

/* Launch descriptors of one GPU context: a launch moving more blocks is split. */
#define GPU_MAX_BLOCKS (1u << 18)

/* Size the staging buffers: each holds one I/O of up to max_io_bytes whole objects, and there
 * is at least one buffer as long as the staging holds one object. */
static int
plan_staging(struct tt_engine *e)
{
	const struct tt_engine_conf *c = &e->conf;
	uint64_t object_bytes = e->geo->object_bytes;
	uint64_t layers = c->max_io_bytes / object_bytes;
	uint64_t units;

	if (layers == 0) {
		layers = 1; /* an object is the smallest I/O */
	}
	if (layers > e->geo->g.nr_layers) {
		layers = e->geo->g.nr_layers;
	}
	if (layers > c->staging_bytes / object_bytes) {
		layers = c->staging_bytes / object_bytes;
	}
	/* One I/O carries a uint32_t length. */
	while (layers > 1 && layers * object_bytes > UINT32_MAX) {
		layers--;
	}
	if (object_bytes > UINT32_MAX) {
		tt_log_err(e->log, "objects of %llu bytes exceed the 4 GiB I/O limit",
		           (unsigned long long)object_bytes);
		return -EINVAL;
	}
	if (layers == 0) {
		tt_log_err(e->log, "staging_bytes %llu is below one %llu-byte object",
		           (unsigned long long)c->staging_bytes, (unsigned long long)object_bytes);
		return -EINVAL;
	}
	e->unit_layers = (uint32_t)layers;
	e->unit_bytes = layers * object_bytes;
	units = c->staging_bytes / e->unit_bytes;
	/* Direct I/O needs no staging, so only staged I/O is bounded by the staging buffers. */
	e->nr_staging = (uint32_t)TT_MIN(units, (uint64_t)c->queue_depth);
	e->nr_units = c->queue_depth;
	e->staging = tt_aligned_alloc(e->nr_staging * e->unit_bytes);
	/* Enough vector entries for a unit of whole chunks with every segment of every block. */
	e->max_iov = (uint32_t)TT_MIN((uint64_t)IOV_MAX, (uint64_t)e->unit_layers *
	                                                     e->geo->blocks_per_chunk *
	                                                     TT_MAX_SEGS_PER_LAYER);
	e->unit_iovs = tt_calloc((size_t)e->nr_units * e->max_iov, sizeof(*e->unit_iovs));
	e->units = tt_calloc(e->nr_units, sizeof(*e->units));
	e->free_bufs = tt_calloc(e->nr_units, sizeof(*e->free_bufs));
	e->ios = tt_calloc(e->nr_units, sizeof(*e->ios));
	e->dones = tt_calloc(e->nr_units, sizeof(*e->dones));
	if (e->staging == NULL || e->units == NULL || e->free_bufs == NULL || e->ios == NULL ||
	    e->dones == NULL || e->unit_iovs == NULL) {
		return -ENOMEM;
	}
	return 0;
}

int
tt_engine_init(struct tt_engine *e, const struct tt_engine_ops *ops,
               const struct tt_engine_conf *conf, const struct tt_ioq_ops *ioq)
{
	e->ops = ops;
	e->conf = *conf;
	e->log = conf->log;
	e->geo = conf->geo;
	e->ioq_ops = ioq;
	e->cpu_kind = ioq == &tt_ioq_posix ? TUTTI_ENGINE_POSIX : TUTTI_ENGINE_URING;
	e->conf.opts = NULL; /* borrowed during open only */
	return plan_staging(e);
}

void
tt_engine_fini(struct tt_engine *e)
{
	/* The queues first: they wait for the kernel to finish with the staging memory (the lanes'
	 * threads stop before theirs go); then the GPU, which may still read it. */
	tt_lanes_destroy(e);
	tt_ioq_destroy(e->ioq);
	tt_list_mem_free(&e->lists);
	tt_list_mem_free(&e->twin_lists);
	if (e->stage != NULL) {
		e->stage_ops->stage_free(e->stage_ctx, e->stage);
	}
	tt_objmover_twin_close(e->twin);
	tt_gpu_close(e->gpu);
	if (e->staging_mapped) {
		tt_gpu_host_unregister(e->staging);
	}
	tt_aligned_free(e->staging);
	tt_free(e->units);
	tt_free(e->free_bufs);
	tt_free(e->ios);
	tt_free(e->dones);
	tt_free(e->unit_iovs);
}

int
tt_engine_gpu(struct tt_engine *e, int device, struct tt_gpu **out)
{
	struct tt_gpu_conf conf = {
	    .device = device,
	    .max_blocks = GPU_MAX_BLOCKS,
	    .log = e->log,
	    .high_priority = true, /* loads gate time to first token */
	};
	int rc;

	if (e->gpu != NULL) {
		if (tt_gpu_device(e->gpu) != device) {
			tt_log_err(e->log, "a store moves KV of one GPU: device %d, not %d",
			           tt_gpu_device(e->gpu), device);
			return -EINVAL;
		}
		*out = e->gpu;
		return 0;
	}
	rc = tt_gpu_open(&conf, &e->gpu);
	if (rc == 0 && !e->staging_mapped) {
		/* Kernels read and write the staging across PCIe, without a copy. */
		rc = tt_gpu_host_register(e->staging, e->nr_staging * e->unit_bytes);
		e->staging_mapped = rc == 0;
	}
	if (rc < 0) {
		tt_log_err(e->log, "GPU %d: %s", device, tutti_strerror(rc));
		tt_gpu_close(e->gpu);
		e->gpu = NULL;
		return rc;
	}
	*out = e->gpu;
	return 0;
}

/* ---- the calls every engine answers ---- */

int
tt_engine_open(uint32_t kind, const struct tt_engine_conf *conf, struct tt_engine **out)
{
	const struct tt_engine_ops *ops = tt_engine_ops_for(kind);
	struct tt_engine_conf c;
	int rc;

	*out = NULL;
	if (ops == NULL || conf == NULL || conf->geo == NULL || conf->queue_depth == 0) {
		return -EINVAL;
	}
	c = *conf;
	rc = tt_engine_opts_parse(ops, conf->opts, conf->log, c.opt);
	return rc < 0 ? rc : ops->open(&c, out);
}

/* Page-cache-backed store files: their reads are CPU copies, best spread over io-wq. */
static bool
on_tmpfs(int fd)
{
	struct statfs sfs;

	return fstatfs(fd, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC;
}

int
tt_engine_attach(struct tt_engine *e, const int *fds, uint32_t nr_fds)
{
	struct tt_ioq_conf qc = {
	    .fds = fds,
	    .nr_fds = nr_fds,
	    .reg_buf = e->staging,
	    .reg_bytes = e->nr_staging * e->unit_bytes,
	    .depth = e->nr_units,
	    .max_iov = e->max_iov,
	    .threads = e->ioq_threads,
	    .async_reads = on_tmpfs(fds[0]),
	    .log = e->log,
	};
	int rc;

	if (nr_fds == 0 || nr_fds > TT_ENGINE_MAX_FILES) {
		return -EINVAL;
	}
	e->fds = fds;
	e->nr_fds = nr_fds;
	e->page_cache = qc.async_reads;
	rc = tt_ioq_create(e->ioq_ops, &qc, &e->ioq);
	if (rc < 0 && e->ioq_ops == &tt_ioq_uring) {
		/* Refused (ENOSYS: blocked or absent; EPERM: seccomp or the sysctl): an engine that
		 * may fall back does, with one warning; anything else is an error. */
		if (!e->ioq_fallback || (rc != -ENOSYS && rc != -EPERM)) {
			tt_log_err(e->log, "io_uring setup failed: %s", tutti_strerror(rc));
			return rc;
		}
		tt_log_warn(e->log,
		            "engine %s: io_uring is refused here (%s): the posix engine's threads "
		            "issue the CPU's I/O",
		            e->ops->name, tutti_strerror(rc));
		e->ioq_ops = &tt_ioq_posix;
		e->cpu_kind = TUTTI_ENGINE_POSIX;
		rc = tt_ioq_create(e->ioq_ops, &qc, &e->ioq);
	}
	if (rc == 0 && e->ops->attach != NULL) {
		rc = e->ops->attach(e);
	}
	return rc;
}

void
tt_engine_close(struct tt_engine *e)
{
	if (e != NULL) {
		e->ops->close(e);
	}
}

const char *
tt_engine_name(const struct tt_engine *e)
{
	return e->ops->name;
}

/* Whether \p b goes to the engine's own transfer, not its CPU path. */
static bool
takes(const struct tt_engine *e, const struct tutti_kv *kv)
{
	return kv != NULL && (e->ops->kv_mems & TT_KV_MEM(kv->mem)) != 0;
}

int
tt_engine_transfer(struct tt_engine *e, struct tt_batch *b)
{
	return takes(e, b->kv) ? e->ops->transfer(e, b) : tt_cpu_transfer(e, b);
}

uint32_t
tt_engine_moved_by(struct tt_engine *e, const struct tutti_kv *kv)
{
	if (!takes(e, kv)) {
		return e->cpu_kind;
	}
	return e->ops->moved_by != NULL ? e->ops->moved_by(e, kv) : e->ops->kind;
}

int
tt_engine_prepare(struct tt_engine *e, const struct tutti_kv *kv)
{
	struct tt_gpu *g;
	uint32_t kind;
	int rc;

	if (kv->mem != TUTTI_MEM_CUDA) {
		return 0;
	}
	kind = tt_engine_moved_by(e, kv);
	rc = tt_engine_gpu(e, kv->device, &g);
	if (rc == 0) {
		rc = tt_gpu_prepare(g);
	}
	if (rc == 0 && (kind == TUTTI_ENGINE_URING || kind == TUTTI_ENGINE_POSIX) &&
	    tt_cpu_waves_take(e, &tt_mover_cuda)) {
		rc = tt_waves_prepare(e, &tt_objmover_cuda, g);
	}
	if (rc == 0 && e->ops->prepare != NULL) {
		rc = e->ops->prepare(e, kv, g);
	}
	if (rc == 0) {
		rc = tt_list_mem_reserve(&e->lists, kv);
	}
	if (rc < 0) {
		tt_log_err(e->log, "GPU %d: could not prepare for loads and saves: %s", kv->device,
		           tutti_strerror(rc));
	}
	return rc;
}

uint32_t
tt_engine_queue_depth(const struct tt_engine *e)
{
	return e->nr_units;
}

_Static_assert(TT_ENGINE_MAX_FILES <= 64, "a flush names its files in 64 bits");

int
tt_engine_flush(struct tt_engine *e, uint64_t files)
{
	return e->ops->flush(e, files);
}

void
tt_engine_stats(struct tt_engine *e, struct tt_engine_stats *out)
{
	memset(out, 0, sizeof(*out));
	e->ops->stats(e, out);
}

int
tt_engine_launch_open(struct tt_engine *e, struct tt_batch *b, struct tt_list_mem *mem,
                      struct tt_launch **out)
{
	*out = NULL;
	if (e->ops->launch_open == NULL || !takes(e, b->kv)) {
		return 0;
	}
	return e->ops->launch_open(e, b, mem, out);
}

int
tt_engine_launch_layer(struct tt_engine *e, struct tt_launch *l, uint32_t layer, uint32_t *word,
                       uint32_t value, uint64_t *done_ns)
{
	return e->ops->launch_layer(e, l, layer, word, value, done_ns);
}

int
tt_engine_launch_idle(struct tt_engine *e, struct tt_launch *l)
{
	return e->ops->launch_idle(e, l);
}

int
tt_engine_launch_finish(struct tt_engine *e, struct tt_launch *l)
{
	return e->ops->launch_finish(e, l);
}

void
tt_engine_quiesce(struct tt_engine *e)
{
	if (e->ops->quiesce != NULL) {
		e->ops->quiesce(e);
	}
}

/* ---- chunks ---- */

void
tt_chunk_fail(struct tt_chunk_op *c, int rc)
{
	if (c->status == 0) {
		c->status = rc;
	}
}

void
tt_batch_fail_all(struct tt_batch *b, int rc)
{
	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		tt_chunk_fail(&b->chunks[i], rc);
	}
}
