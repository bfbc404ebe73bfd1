/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lookup: how many chunks of a chain the pool holds for every rank, with one exists call on the
 * read thread, waited for at most lookup_timeout_ns (the scheduler makes it between steps).
 */
#include <errno.h>
#include <inttypes.h>

#include "remote/remote_impl.h"

int64_t
tutti_remote_lookup(struct tutti_remote *r, const uint8_t *keys, uint32_t nr_keys, uint32_t first)
{
	uint64_t t0 = tt_now_ns(), n;
	struct tt_remote_job *j;
	int64_t hit = 0;
	int rc;

	if (r == NULL || (keys == NULL && nr_keys > 0) || first > nr_keys) {
		return -EINVAL;
	}
	n = (uint64_t)(nr_keys - first) * r->nr_ranks;
	if (n == 0) {
		return 0;
	}
	if (n > UINT32_MAX / 2) {
		return -EINVAL;
	}
	j = tt_remote_job_new(TT_REMOTE_JOB_EXISTS, (uint32_t)n);
	if (j == NULL) {
		return -ENOMEM;
	}
	for (uint32_t c = first, i = 0; c < nr_keys; c++) {
		for (uint32_t rk = 0; rk < r->nr_ranks; rk++, i++) {
			tt_remote_key_string(r, rk, keys + (size_t)c * r->key_bytes, j->keys[i]);
		}
	}
	pthread_mutex_lock(&r->mu);
	rc = tt_breaker_gate(r);
	if (rc < 0) {
		pthread_mutex_unlock(&r->mu);
		tt_free(j);
		return rc;
	}
	r->reads_active++;
	rc = tt_remote_run_job(r, j, r->lookup_timeout_ns);
	if (rc == -ETIMEDOUT) {
		tt_breaker_report(r, true);
		tt_remote_reads_end(r);
		pthread_mutex_unlock(&r->mu);
		tt_log_warn(&r->log, "remote lookup of %" PRIu64 " keys timed out", n);
		return rc;
	}
	if (rc == 0) {
		rc = j->rc;
		tt_breaker_report(r, rc < 0);
	}
	tt_remote_reads_end(r);
	if (rc == 0) {
		for (uint32_t c = first, i = 0; c < nr_keys; c++, hit++) {
			bool all = true;

			for (uint32_t rk = 0; rk < r->nr_ranks; rk++, i++) {
				all = all && j->present[i] == 1;
			}
			if (!all) {
				break;
			}
		}
		r->stats.lookups++;
		r->stats.lookup_hits += (uint64_t)hit;
		r->stats.lookup_ns += tt_now_ns() - t0;
	}
	pthread_mutex_unlock(&r->mu);
	tt_free(j);
	if (rc < 0) {
		tt_log_warn(&r->log, "remote lookup failed: %s", tutti_strerror(rc));
		return rc;
	}
	return hit;
}
