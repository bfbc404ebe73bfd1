/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine gds: loads and saves of GPU KV through cuFile, the NVIDIA GPUDirect Storage API: the
 * comparison point for machines with real GPUDirect Storage, and the way CPU-driven GPU tiers
 * reach the disk.
 *
 * A call's objects, layer by layer, go in waves of B through object-sized slots of a device
 * staging buffer split in two halves: while the GPU checks and scatters one wave (one kernel
 * launch per layer run of the wave), cuFile reads the next into the other half; saves gather
 * and hash a wave on the GPU while the previous wave is being written. I/O is submitted with
 * cuFile's batch API where the library has it (one submission per wave), one cuFileRead or
 * cuFileWrite per object otherwise. Host KV, and layer blocks too small for the GPU hash, go
 * through the CPU path (the uring queue) instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine_impl.h"
#include "engine/gds/cufile.h"
#include "format/format.h"
#include "tutti/engine.h"

/* Objects in a wave (a batch handle's entries), at most: half the staging's objects otherwise. */
#define GDS_MAX_BATCH 128u

/* libcufile, one cuFile handle per data file, a batch handle per staging half (NULL without the
 * batch API), and the device staging of 2 x batch_nr object slots (made on first use). */
struct gds_engine {
	struct tt_engine base;
	struct tt_cufile *cufile;
	int *fds; /* the data files reopened without O_NOFOLLOW, which cuFile refuses */
	void **fh;
	void *batch[2];
	uint32_t batch_nr;
	struct tt_cufile_io_params *params; /* 2 x batch_nr */
	struct tt_cufile_io_event *events;  /* batch_nr */
	uint8_t *staging;
	bool buf_registered;
	bool broken;
	uint64_t ios, calls;
};

static struct gds_engine *
to_gds(struct tt_engine *e)
{
	return (struct gds_engine *)e;
}

struct gds_wave {
	uint32_t first, nr; /* objects [first, first + nr) of the layer-major list */
	uint32_t half;
	uint32_t submitted; /* batch entries in flight */
};

static uint8_t *
slot_of(const struct gds_engine *gd, const struct gds_wave *w, uint32_t i)
{
	return gd->staging +
	       ((uint64_t)w->half * gd->batch_nr + (i - w->first)) * gd->base.geo->object_bytes;
}

/* Start (or, without the batch API, do) the I/O of wave \p w. */
static int
wave_submit(struct gds_engine *gd, struct tt_obj_lists *lists, struct gds_wave *w, bool write)
{
	struct tt_cufile *cf = gd->cufile;
	struct tt_cufile_io_params *params = gd->params + (size_t)w->half * gd->batch_nr;
	struct tt_cufile_error e;
	uint32_t m = 0;

	w->submitted = 0;
	for (uint32_t i = w->first; i < w->first + w->nr; i++) {
		struct tt_gpu_obj *o = &lists->objs[i];
		ssize_t r;

		if (o->status != 0) {
			continue;
		}
		if (gd->batch[w->half] != NULL) {
			params[m++] = (struct tt_cufile_io_params){
			    .mode = TT_CUFILE_BATCH,
			    .u.batch = {.dev_ptr_base = gd->staging,
			                .file_offset = (off_t)o->off,
			                .dev_ptr_offset = slot_of(gd, w, i) - gd->staging,
			                .size = gd->base.geo->object_bytes},
			    .fh = gd->fh[o->file],
			    .opcode = write ? TT_CUFILE_WRITE : TT_CUFILE_READ,
			    .cookie = (void *)(uintptr_t)i,
			};
			continue;
		}
		r = write ? cf->write(gd->fh[o->file], gd->staging, gd->base.geo->object_bytes,
		                      (off_t)o->off, slot_of(gd, w, i) - gd->staging)
		          : cf->read(gd->fh[o->file], gd->staging, gd->base.geo->object_bytes,
		                     (off_t)o->off, slot_of(gd, w, i) - gd->staging);
		gd->calls++;
		gd->ios++;
		if (r != (ssize_t)gd->base.geo->object_bytes) {
			o->status = -EIO; /* an error, or short: the file ends inside the object */
		}
	}
	if (m == 0) {
		return 0;
	}
	e = cf->batch_submit(gd->batch[w->half], m, params, 0);
	gd->calls++;
	if (e.err != 0) {
		tt_log_err(gd->base.log, "engine gds: cuFileBatchIOSubmit failed (cuFile error %d)",
		           e.err);
		for (uint32_t k = 0; k < m; k++) {
			lists->objs[(uintptr_t)params[k].cookie].status = -EIO;
		}
		return 0;
	}
	gd->ios += m;
	w->submitted = m;
	return 0;
}

/* Wait for every I/O of wave \p w; failures become object statuses. -ETIMEDOUT breaks the
 * engine (I/O may still land in the staging). */
static int
wave_wait(struct gds_engine *gd, struct tt_obj_lists *lists, struct gds_wave *w)
{
	struct tt_cufile *cf = gd->cufile;
	uint32_t left = w->submitted;

	while (left > 0) {
		struct timespec timeout = {TT_ENGINE_STALL_MS / 1000, 0};
		unsigned nr = left;
		struct tt_cufile_error e =
		    cf->batch_status(gd->batch[w->half], left, &nr, gd->events, &timeout);

		gd->calls++;
		if (e.err != 0 || nr == 0) {
			tt_log_err(
			    gd->base.log,
			    "engine gds: no completion for %u s (cuFile error %d); the engine "
			    "is out of service",
			    TT_ENGINE_STALL_MS / 1000, e.err);
			gd->broken = true;
			return -ETIMEDOUT;
		}
		for (unsigned k = 0; k < nr && k < left; k++) {
			const struct tt_cufile_io_event *ev = &gd->events[k];
			uintptr_t i = (uintptr_t)ev->cookie;

			if (i < w->first || i >= w->first + w->nr) {
				continue; /* not ours: cannot happen with one batch per half */
			}
			if (ev->status != TT_CUFILE_COMPLETE ||
			    ev->ret != gd->base.geo->object_bytes) {
				lists->objs[i].status = -EIO;
			}
		}
		left -= nr < left ? nr : left;
	}
	w->submitted = 0;
	return 0;
}

/* One launch per layer run of wave \p w. */
static int
wave_kernels(struct gds_engine *gd, const struct tt_batch *t, struct tt_gpu *g,
             struct tt_obj_lists *lists, const struct gds_wave *w)
{
	int rc = 0;

	for (uint32_t i = w->first; rc == 0 && i < w->first + w->nr;) {
		uint32_t l = i / lists->n, end = TT_MIN((l + 1) * lists->n, w->first + w->nr);

		rc = tt_gpu_objs(g, t->kv, t->layer_begin + l, lists->n, i - l * lists->n,
		                 lists->objs + i, end - i, lists->ids, slot_of(gd, w, i),
		                 gd->base.geo->object_bytes, t->kind == TT_BATCH_SAVE);
		i = end;
	}
	return rc;
}

/* The device staging and its registration, on first use. */
static int
gds_staging(struct gds_engine *gd, struct tt_gpu *g)
{
	uint64_t bytes = 2ull * gd->batch_nr * gd->base.geo->object_bytes;
	struct tt_cufile_error e;
	int rc;

	if (gd->staging != NULL) {
		return 0;
	}
	rc = tt_gpu_set_device(tt_gpu_device(g));
	if (rc == 0) {
		rc = tt_gpu_dev_alloc(bytes, (void **)&gd->staging);
	}
	if (rc < 0) {
		tt_log_err(gd->base.log, "engine gds: no device staging: %s", tutti_strerror(rc));
		return rc;
	}
	/* Registration lets cuFile map the buffer once; without it every I/O maps it again. */
	e = gd->cufile->buf_register(gd->staging, bytes, 0);
	gd->buf_registered = e.err == 0;
	if (e.err != 0) {
		tt_log_info(gd->base.log, "engine gds: cuFileBufRegister failed (cuFile error %d)",
		            e.err);
	}
	return 0;
}

static int
gds_run(struct gds_engine *gd, struct tt_batch *t, struct tt_gpu *g)
{
	bool write = t->kind == TT_BATCH_SAVE;
	struct tt_obj_lists lists;
	struct gds_wave w[2] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
	uint32_t total, nr_waves, B = gd->batch_nr;
	int rc;

	rc = tt_obj_lists_make(t, &gd->base.lists, &lists);
	if (rc < 0 || lists.n == 0) {
		return rc;
	}
	rc = gds_staging(gd, g);
	if (rc < 0) {
		return rc;
	}
	total = lists.n * lists.nr_layers;
	nr_waves = (total + B - 1) / B;
#define WAVE(k) (&w[(k) % 2])
#define WAVE_INIT(k)                                                                               \
	(*WAVE(k) =                                                                                \
	     (struct gds_wave){.first = (k)*B, .nr = TT_MIN(B, total - (k)*B), .half = (k) % 2})
	if (!write) {
		WAVE_INIT(0);
		rc = wave_submit(gd, &lists, WAVE(0), false);
		for (uint32_t k = 0; rc == 0 && k < nr_waves; k++) {
			if (k + 1 < nr_waves) {
				/* The next wave's half was last read by the kernels of wave k - 1.
				 */
				if (k >= 1) {
					rc = tt_gpu_wait_mark(g, (k + 1) % 2);
				}
				WAVE_INIT(k + 1);
				if (rc == 0) {
					rc = wave_submit(gd, &lists, WAVE(k + 1), false);
				}
			}
			if (rc == 0) {
				rc = wave_wait(gd, &lists, WAVE(k));
			}
			if (rc == 0) {
				rc = wave_kernels(gd, t, g, &lists, WAVE(k));
			}
			if (rc == 0) {
				rc = tt_gpu_mark(g, k % 2);
			}
		}
	} else {
		WAVE_INIT(0);
		rc = wave_kernels(gd, t, g, &lists, WAVE(0));
		if (rc == 0) {
			rc = tt_gpu_mark(g, 0);
		}
		for (uint32_t k = 0; rc == 0 && k < nr_waves; k++) {
			rc = tt_gpu_wait_mark(g, k % 2); /* wave k gathered and hashed */
			if (rc == 0) {
				rc = wave_submit(gd, &lists, WAVE(k), true);
			}
			if (rc == 0 && k + 1 < nr_waves) {
				/* Its half was written by wave k - 1, already waited for. */
				WAVE_INIT(k + 1);
				rc = wave_kernels(gd, t, g, &lists, WAVE(k + 1));
				if (rc == 0) {
					rc = tt_gpu_mark(g, (k + 1) % 2);
				}
			}
			if (rc == 0) {
				rc = wave_wait(gd, &lists, WAVE(k));
			}
		}
	}
#undef WAVE_INIT
#undef WAVE
	/* Nothing may still run on the staging when the call returns. */
	if (rc == 0) {
		rc = tt_gpu_sync(g);
	} else if (!gd->broken) {
		tt_gpu_sync(g);
		for (uint32_t h = 0; h < 2; h++) {
			if (w[h].submitted > 0) {
				wave_wait(gd, &lists, &w[h]);
			}
		}
	}
	if (rc == 0) {
		tt_obj_lists_results(&gd->base, t, &lists, "gds");
	}
	return rc;
}

static int
gds_transfer(struct tt_engine *e, struct tt_batch *b)
{
	struct gds_engine *gd = to_gds(e);
	struct tt_xfer x;
	int rc;

	rc = tt_xfer_start(&x, e, b, gd->broken);
	if (rc < 0) {
		return rc;
	}
	if (e->geo->layer_block_bytes <= TT_XXH3_MIDSIZE_MAX) {
		return tt_cpu_transfer(e, b); /* blocks below the GPU hash's size */
	}
	for (uint32_t i = 0; i < b->nr_chunks; i++) {
		b->chunks[i].direct = false;
	}
	rc = gds_run(gd, b, x.mover_ctx);
	if (rc < 0) {
		tt_batch_fail_all(b, rc);
	}
	return rc;
}

/* ---- open and close ---- */

/* libcufile and its driver at open, so that a machine without them refuses the engine before
 * the store creates anything. */
static int
gds_open(const struct tt_engine_conf *conf, struct tt_engine **out)
{
	struct gds_engine *gd = tt_calloc(1, sizeof(*gd));
	int rc;

	if (gd == NULL) {
		return -ENOMEM;
	}
	rc = tt_cufile_open(conf->log, &gd->cufile);
	if (rc == 0) {
		/* The uring queue carries control I/O (recovery, headers, flushes), fsck and host
		 * KV. */
		rc = tt_engine_init(&gd->base, &tt_engine_gds, conf, &tt_ioq_uring);
	}
	if (rc < 0) {
		tt_cufile_close(gd->cufile);
		tt_engine_fini(&gd->base);
		tt_free(gd);
		return rc;
	}
	*out = &gd->base;
	return 0;
}

/* A handle per data file, and (with the batch API) a batch handle per staging half. The device
 * staging waits for the first GPU transfer. */
static int
gds_attach(struct tt_engine *e)
{
	struct gds_engine *gd = to_gds(e);
	uint32_t nr = e->nr_fds;
	uint64_t objs = (uint64_t)e->nr_staging * e->unit_bytes / e->geo->object_bytes / 2;

	gd->batch_nr = (uint32_t)TT_MAX(1, TT_MIN(objs, (uint64_t)GDS_MAX_BATCH));
	gd->fh = tt_calloc(nr, sizeof(*gd->fh));
	gd->fds = tt_calloc(nr, sizeof(*gd->fds));
	for (uint32_t i = 0; gd->fds != NULL && i < nr; i++) {
		gd->fds[i] = -1;
	}
	gd->params = tt_calloc(2 * (size_t)gd->batch_nr, sizeof(*gd->params));
	gd->events = tt_calloc(gd->batch_nr, sizeof(*gd->events));
	if (gd->fh == NULL || gd->fds == NULL || gd->params == NULL || gd->events == NULL) {
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < nr; i++) {
		struct tt_cufile_descr d = {.type = TT_CUFILE_HANDLE_TYPE_OPAQUE_FD};
		struct tt_cufile_error err;
		char path[64];

		/* cuFile refuses descriptors opened with O_NOFOLLOW, as the pool's are: reopen the
		 * same file through its /proc link (the inode the pool holds, no path lookup), with
		 * the pool's access mode (read-only for a store opened so). */
		int mode = fcntl(e->fds[i], F_GETFL);

		snprintf(path, sizeof(path), "/proc/self/fd/%d", e->fds[i]);
		gd->fds[i] = mode < 0 ? -1 : open(path, (mode & O_ACCMODE) | O_DIRECT | O_CLOEXEC);
		if (gd->fds[i] < 0) {
			int rc = -errno;

			tt_log_err(e->log, "engine gds: reopening data file %u: %s", i,
			           tutti_strerror(rc));
			return rc;
		}
		d.handle.fd = gd->fds[i];
		err = gd->cufile->handle_register(&gd->fh[i], &d);
		if (err.err != 0) {
			/* Typically the platform: cuFile could not classify the file's volume (its
			 * cufile.log says why), so it cannot do I/O on it, even in compat mode. */
			gd->fh[i] = NULL;
			tt_log_err(e->log,
			           "engine gds: cuFile refuses data file %u (cuFileHandleRegister: "
			           "cuFile error %d; cufile.log has the reason)",
			           i, err.err);
			return -EOPNOTSUPP;
		}
	}
	for (uint32_t h = 0; gd->cufile->batch_setup != NULL && h < 2; h++) {
		struct tt_cufile_error err = gd->cufile->batch_setup(&gd->batch[h], gd->batch_nr);

		if (err.err != 0) {
			tt_log_info(e->log,
			            "engine gds: cuFileBatchIOSetUp failed (cuFile error %d); one "
			            "I/O per call",
			            err.err);
			gd->batch[h] = NULL;
		}
	}
	if (gd->batch[0] == NULL || gd->batch[1] == NULL) {
		for (uint32_t h = 0; h < 2; h++) {
			if (gd->batch[h] != NULL) {
				gd->cufile->batch_destroy(gd->batch[h]);
				gd->batch[h] = NULL;
			}
		}
	}
	return 0;
}

static void
gds_close(struct tt_engine *e)
{
	struct gds_engine *gd = to_gds(e);

	for (uint32_t h = 0; h < 2; h++) {
		if (gd->batch[h] != NULL) {
			gd->cufile->batch_destroy(gd->batch[h]);
		}
	}
	if (gd->buf_registered) {
		gd->cufile->buf_deregister(gd->staging);
	}
	tt_gpu_dev_free(gd->staging);
	for (uint32_t i = 0; gd->fh != NULL && gd->fds != NULL && i < e->nr_fds; i++) {
		if (gd->fh[i] != NULL) {
			gd->cufile->handle_deregister(gd->fh[i]);
		}
		if (gd->fds[i] >= 0) {
			close(gd->fds[i]);
		}
	}
	tt_cufile_close(gd->cufile);
	tt_free(gd->fh);
	tt_free(gd->fds);
	tt_free(gd->params);
	tt_free(gd->events);
	tt_engine_fini(e);
	tt_free(gd);
}

static void
gds_stats(struct tt_engine *e, struct tt_engine_stats *out)
{
	struct gds_engine *gd = to_gds(e);

	tt_cpu_stats(e, out);
	/* For gds the system calls are the cuFile calls. */
	out->io_ops += gd->ios;
	out->io_submits += gd->calls;
}

const struct tt_engine_ops tt_engine_gds = {
    .name = "gds",
    .kind = TUTTI_ENGINE_GDS,
    .description = "NVIDIA cuFile (GPUDirect Storage), loaded at run time, for GPU KV; host "
                   "KV moves by the CPU path on io_uring",
    .kv_mems = TT_KV_MEM(TUTTI_MEM_CUDA),
    .open = gds_open,
    .attach = gds_attach,
    .close = gds_close,
    .transfer = gds_transfer,
    .flush = tt_cpu_flush,
    .stats = gds_stats,
};
