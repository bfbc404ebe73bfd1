/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loads and saves of GPU KV through cuFile (engine gds), the NVIDIA GPUDirect Storage API: the
 * comparison point for machines with real GPUDirect Storage, and the way CPU-driven GPU tiers
 * reach the disk.
 *
 * A call's objects, layer by layer, go in waves of B through object-sized slots of a device
 * staging buffer split in two halves: while the GPU checks and scatters one wave (one kernel
 * launch per layer run of the wave), cuFile reads the next into the other half; saves gather
 * and hash a wave on the GPU while the previous wave is being written. I/O is submitted with
 * cuFile's batch API where the library has it (one submission per wave), one cuFileRead or
 * cuFileWrite per object otherwise. Host KV, and layer blocks too small for the GPU hash, go
 * through the uring pipeline instead.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "store/store_impl.h"

/* A wave's I/O that makes no progress for this long is given up on. */
#define GDS_TIMEOUT_S 30

struct gds_wave {
	uint32_t first, nr; /* objects [first, first + nr) of the layer-major list */
	uint32_t half;
	uint32_t submitted; /* batch entries in flight */
};

static uint8_t *
slot_of(const struct tutti_store *st, const struct gds_wave *w, uint32_t i)
{
	return st->gds_staging +
	       ((uint64_t)w->half * st->gds_batch_nr + (i - w->first)) * st->geo.object_bytes;
}

/* Start (or, without the batch API, do) the I/O of wave \p w. */
static int
wave_submit(struct tutti_store *st, struct tt_obj_lists *lists, struct gds_wave *w, bool write)
{
	struct tt_cufile *cf = st->cufile;
	struct tt_cufile_io_params *params = st->gds_params + (size_t)w->half * st->gds_batch_nr;
	struct tt_cufile_error e;
	uint32_t m = 0;

	w->submitted = 0;
	for (uint32_t i = w->first; i < w->first + w->nr; i++) {
		struct tt_gring_obj *o = &lists->objs[i];
		ssize_t r;

		if (o->status != 0) {
			continue;
		}
		if (st->gds_batch[w->half] != NULL) {
			params[m++] = (struct tt_cufile_io_params){
			    .mode = TT_CUFILE_BATCH,
			    .u.batch = {.dev_ptr_base = st->gds_staging,
			                .file_offset = (off_t)o->off,
			                .dev_ptr_offset = slot_of(st, w, i) - st->gds_staging,
			                .size = st->geo.object_bytes},
			    .fh = st->gds_fh[o->file],
			    .opcode = write ? TT_CUFILE_WRITE : TT_CUFILE_READ,
			    .cookie = (void *)(uintptr_t)i,
			};
			continue;
		}
		r = write ? cf->write(st->gds_fh[o->file], st->gds_staging, st->geo.object_bytes,
		                      (off_t)o->off, slot_of(st, w, i) - st->gds_staging)
		          : cf->read(st->gds_fh[o->file], st->gds_staging, st->geo.object_bytes,
		                     (off_t)o->off, slot_of(st, w, i) - st->gds_staging);
		st->gds_calls++;
		st->gds_ios++;
		if (r != (ssize_t)st->geo.object_bytes) {
			o->status = -EIO; /* an error, or short: the file ends inside the object */
		}
	}
	if (m == 0) {
		return 0;
	}
	e = cf->batch_submit(st->gds_batch[w->half], m, params, 0);
	st->gds_calls++;
	if (e.err != 0) {
		tt_log_err(&st->log, "engine gds: cuFileBatchIOSubmit failed (cuFile error %d)",
		           e.err);
		for (uint32_t k = 0; k < m; k++) {
			lists->objs[(uintptr_t)params[k].cookie].status = -EIO;
		}
		return 0;
	}
	st->gds_ios += m;
	w->submitted = m;
	return 0;
}

/* Wait for every I/O of wave \p w; failures become object statuses. -ETIMEDOUT breaks the
 * engine (I/O may still land in the staging). */
static int
wave_wait(struct tutti_store *st, struct tt_obj_lists *lists, struct gds_wave *w)
{
	struct tt_cufile *cf = st->cufile;
	uint32_t left = w->submitted;

	while (left > 0) {
		struct timespec timeout = {GDS_TIMEOUT_S, 0};
		unsigned nr = left;
		struct tt_cufile_error e =
		    cf->batch_status(st->gds_batch[w->half], left, &nr, st->gds_events, &timeout);

		st->gds_calls++;
		if (e.err != 0 || nr == 0) {
			tt_log_err(
			    &st->log,
			    "engine gds: no completion for %d s (cuFile error %d); the engine "
			    "is out of service",
			    GDS_TIMEOUT_S, e.err);
			st->gds_broken = true;
			return -ETIMEDOUT;
		}
		for (unsigned k = 0; k < nr && k < left; k++) {
			const struct tt_cufile_io_event *ev = &st->gds_events[k];
			uintptr_t i = (uintptr_t)ev->cookie;

			if (i < w->first || i >= w->first + w->nr) {
				continue; /* not ours: cannot happen with one batch per half */
			}
			if (ev->status != TT_CUFILE_COMPLETE || ev->ret != st->geo.object_bytes) {
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
wave_kernels(struct tt_transfer *t, struct tt_gpu *g, struct tt_obj_lists *lists,
             const struct gds_wave *w)
{
	struct tutti_store *st = t->st;
	int rc = 0;

	for (uint32_t i = w->first; rc == 0 && i < w->first + w->nr;) {
		uint32_t l = i / lists->n, end = TT_MIN((l + 1) * lists->n, w->first + w->nr);

		rc = tt_gpu_objs(g, t->kv, t->layer_begin + l, lists->objs + i, end - i, lists->ids,
		                 slot_of(st, w, i), st->geo.object_bytes,
		                 t->kind == TT_TRANSFER_SAVE);
		i = end;
	}
	return rc;
}

/* The device staging and its registration, on first use. */
static int
gds_staging(struct tutti_store *st, struct tt_gpu *g)
{
	uint64_t bytes = 2ull * st->gds_batch_nr * st->geo.object_bytes;
	struct tt_cufile_error e;
	int rc;

	if (st->gds_staging != NULL) {
		return 0;
	}
	rc = tt_gpu_set_device(tt_gpu_device(g));
	if (rc == 0) {
		rc = tt_gpu_dev_alloc(bytes, (void **)&st->gds_staging);
	}
	if (rc < 0) {
		tt_log_err(&st->log, "engine gds: no device staging: %s", tutti_strerror(rc));
		return rc;
	}
	/* Registration lets cuFile map the buffer once; without it every I/O maps it again. */
	e = st->cufile->buf_register(st->gds_staging, bytes, 0);
	st->gds_buf_registered = e.err == 0;
	if (e.err != 0) {
		tt_log_info(&st->log, "engine gds: cuFileBufRegister failed (cuFile error %d)",
		            e.err);
	}
	return 0;
}

static int
gds_run(struct tt_transfer *t, struct tt_gpu *g)
{
	struct tutti_store *st = t->st;
	bool write = t->kind == TT_TRANSFER_SAVE;
	struct tt_obj_lists lists;
	struct gds_wave w[2] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
	uint32_t total, nr_waves, B = st->gds_batch_nr;
	int rc;

	rc = tt_obj_lists_make(t, &st->lists, &lists);
	if (rc < 0 || lists.n == 0) {
		return rc;
	}
	rc = gds_staging(st, g);
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
		rc = wave_submit(st, &lists, WAVE(0), false);
		for (uint32_t k = 0; rc == 0 && k < nr_waves; k++) {
			if (k + 1 < nr_waves) {
				/* The next wave's half was last read by the kernels of wave k - 1.
				 */
				if (k >= 1) {
					rc = tt_gpu_wait_mark(g, (k + 1) % 2);
				}
				WAVE_INIT(k + 1);
				if (rc == 0) {
					rc = wave_submit(st, &lists, WAVE(k + 1), false);
				}
			}
			if (rc == 0) {
				rc = wave_wait(st, &lists, WAVE(k));
			}
			if (rc == 0) {
				rc = wave_kernels(t, g, &lists, WAVE(k));
			}
			if (rc == 0) {
				rc = tt_gpu_mark(g, k % 2);
			}
		}
	} else {
		WAVE_INIT(0);
		rc = wave_kernels(t, g, &lists, WAVE(0));
		if (rc == 0) {
			rc = tt_gpu_mark(g, 0);
		}
		for (uint32_t k = 0; rc == 0 && k < nr_waves; k++) {
			rc = tt_gpu_wait_mark(g, k % 2); /* wave k gathered and hashed */
			if (rc == 0) {
				rc = wave_submit(st, &lists, WAVE(k), true);
			}
			if (rc == 0 && k + 1 < nr_waves) {
				/* Its half was written by wave k - 1, already waited for. */
				WAVE_INIT(k + 1);
				rc = wave_kernels(t, g, &lists, WAVE(k + 1));
				if (rc == 0) {
					rc = tt_gpu_mark(g, (k + 1) % 2);
				}
			}
			if (rc == 0) {
				rc = wave_wait(st, &lists, WAVE(k));
			}
		}
	}
#undef WAVE_INIT
#undef WAVE
	/* Nothing may still run on the staging when the call returns. */
	if (rc == 0) {
		rc = tt_gpu_sync(g);
	} else if (!st->gds_broken) {
		tt_gpu_sync(g);
		for (uint32_t h = 0; h < 2; h++) {
			if (w[h].submitted > 0) {
				wave_wait(st, &lists, &w[h]);
			}
		}
	}
	if (rc == 0) {
		tt_obj_lists_results(t, &lists, "gds");
	}
	return rc;
}

int
tt_gds_transfer(struct tt_transfer *t)
{
	struct tutti_store *st = t->st;
	int rc;

	rc = tt_transfer_prepare(t, st->gds_broken);
	if (rc < 0) {
		return rc;
	}
	if (t->mover != &tt_mover_cuda || st->geo.layer_block_bytes <= 240) {
		return tt_transfer_run(t); /* host KV, or blocks below the GPU hash's size */
	}
	for (uint32_t i = 0; i < t->nr_chunks; i++) {
		t->chunks[i].direct = false;
	}
	rc = gds_run(t, t->mover_ctx);
	if (rc < 0) {
		tt_transfer_fail_all(t, rc);
	}
	return rc;
}
