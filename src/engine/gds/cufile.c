/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libcufile, loaded at run time (see cufile.h for why).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "engine/gds/cufile.h"

/* Resolve \p name into \p fn; false when absent. */
static bool
resolve(void *lib, const char *name, void *fn)
{
	void *p = dlsym(lib, name);

	/* dlsym hands back an object pointer; function pointers have the same representation on
	 * every platform with dlopen. */
	memcpy(fn, &p, sizeof(p));
	return p != NULL;
}

int
tt_cufile_open(const struct tt_log *log, struct tt_cufile **out)
{
	static const char *const libs[] = {"libcufile.so.0", "libcufile.so"};
	struct tt_cufile *cf;
	struct tt_cufile_error e;
	bool ok;

	*out = NULL;
	cf = tt_calloc(1, sizeof(*cf));
	if (cf == NULL) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < TT_ARRAY_SIZE(libs) && cf->lib == NULL; i++) {
		cf->lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
	}
	if (cf->lib == NULL) {
		tt_log_err(log, "engine gds: libcufile is not installed (%s)", dlerror());
		tt_free(cf);
		return -EOPNOTSUPP;
	}
	ok = resolve(cf->lib, "cuFileDriverOpen", &cf->driver_open) &&
	     (resolve(cf->lib, "cuFileDriverClose_v2", &cf->driver_close) ||
	      resolve(cf->lib, "cuFileDriverClose", &cf->driver_close)) &&
	     resolve(cf->lib, "cuFileHandleRegister", &cf->handle_register) &&
	     resolve(cf->lib, "cuFileHandleDeregister", &cf->handle_deregister) &&
	     resolve(cf->lib, "cuFileBufRegister", &cf->buf_register) &&
	     resolve(cf->lib, "cuFileBufDeregister", &cf->buf_deregister) &&
	     resolve(cf->lib, "cuFileRead", &cf->read) &&
	     resolve(cf->lib, "cuFileWrite", &cf->write);
	if (!ok) {
		tt_log_err(log, "engine gds: libcufile lacks the cuFile entry points");
		dlclose(cf->lib);
		tt_free(cf);
		return -EOPNOTSUPP;
	}
	/* The batch API (cuFile 1.6 on) is optional: without it, I/Os are issued one by one. */
	if (!(resolve(cf->lib, "cuFileBatchIOSetUp", &cf->batch_setup) &&
	      resolve(cf->lib, "cuFileBatchIOSubmit", &cf->batch_submit) &&
	      resolve(cf->lib, "cuFileBatchIOGetStatus", &cf->batch_status) &&
	      resolve(cf->lib, "cuFileBatchIODestroy", &cf->batch_destroy))) {
		cf->batch_setup = NULL;
		tt_log_info(log, "engine gds: libcufile without the batch API");
	}
	e = cf->driver_open();
	if (e.err != 0) {
		tt_log_err(log, "engine gds: cuFileDriverOpen failed (cuFile error %d, CUDA %d)",
		           e.err, e.cu_err);
		dlclose(cf->lib);
		tt_free(cf);
		return -EIO;
	}
	*out = cf;
	return 0;
}

void
tt_cufile_close(struct tt_cufile *cf)
{
	if (cf == NULL) {
		return;
	}
	cf->driver_close();
	dlclose(cf->lib);
	tt_free(cf);
}
