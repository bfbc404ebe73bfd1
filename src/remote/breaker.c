/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The breaker: after breaker_faults consecutive faults (timeouts, provider errors) the tier is
 * down and calls fail at once; after the open time one call goes through as a probe, and the
 * open time doubles (up to TT_REMOTE_BREAKER_MAX_OPEN_NS) while probes fail. A success closes it
 * and restores the first open time. Everything here runs under mu.
 */
#include <errno.h>

#include "remote/remote_impl.h"

int
tt_breaker_gate(struct tutti_remote *r)
{
	if (!r->down) {
		return 0;
	}
	if (r->probing || tt_now_ns() < r->retry_at) {
		return -EHOSTDOWN;
	}
	r->probing = true;
	return 0;
}

void
tt_breaker_report(struct tutti_remote *r, bool fault)
{
	if (!fault) {
		r->consecutive = 0;
		if (r->down) {
			r->down = false;
			r->open_ns = r->first_open_ns;
		}
		r->probing = false;
		return;
	}
	r->stats.faults++;
	r->consecutive++;
	if (r->down) {
		r->open_ns = TT_MIN(2 * r->open_ns, TT_REMOTE_BREAKER_MAX_OPEN_NS);
		r->retry_at = tt_now_ns() + r->open_ns;
		r->probing = false;
	} else if (r->consecutive >= r->breaker_faults) {
		r->down = true;
		r->probing = false;
		r->retry_at = tt_now_ns() + r->open_ns;
		r->stats.breaker_trips++;
		/* The publish thread drops its queue while the tier is down. */
		pthread_cond_broadcast(&r->pub_cv);
	}
}
