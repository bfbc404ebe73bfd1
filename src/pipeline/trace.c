/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pipeline's timeline: a ring of the newest events, written out as Chrome trace JSON
 * ("traceEvents" of complete events, times in microseconds), which Perfetto opens.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "pipeline/pipeline_impl.h"

static const char *const track_names[TT_TRACK_COUNT] = {
    [TT_TRACK_READS] = "storage reads (per layer)", [TT_TRACK_WAITS] = "compute stream: stalls",
    [TT_TRACK_COMPUTE] = "compute (per layer)",     [TT_TRACK_COPIES] = "new KV into save staging",
    [TT_TRACK_WRITES] = "writes in slack",
};

void
tt_pipe_trace(struct tutti_pipeline *p, uint32_t track, const char *name, int64_t step,
              uint32_t layer, uint64_t t0, uint64_t t1)
{
	struct tt_trace_event *e;

	if (p->trace == NULL) {
		return;
	}
	e = &p->trace[p->trace_next++ % p->opts.trace_events];
	*e = (struct tt_trace_event){.name = name,
	                             .step = step,
	                             .t0 = t0,
	                             .t1 = t1 < t0 ? t0 : t1,
	                             .layer = layer,
	                             .track = track};
}

int
tutti_pipeline_write_trace(struct tutti_pipeline *p, const char *path)
{
	uint64_t first, n, base = UINT64_MAX;
	FILE *f;
	int fd, rc = 0;

	if (p == NULL || path == NULL) {
		return -EINVAL;
	}
	pthread_mutex_lock(&p->lock);
	if (p->trace == NULL || p->trace_next == 0) {
		pthread_mutex_unlock(&p->lock);
		return -ENODATA;
	}
	/* Not through a symbolic link: a link planted at a trace path in a shared directory would
	 * otherwise have a file of its choosing truncated. Only a regular file: a FIFO would block
	 * the open until a reader came, and a device is no place for a trace. */
	fd = tt_open_kind(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644,
	                  TT_KIND_FILE, -EINVAL, path, &p->log);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (f == NULL) {
		rc = fd < 0 ? fd : -errno;
		if (fd >= 0) {
			close(fd);
		}
		pthread_mutex_unlock(&p->lock);
		return rc;
	}
	n = TT_MIN(p->trace_next, (uint64_t)p->opts.trace_events);
	first = p->trace_next - n;
	for (uint64_t i = first; i < p->trace_next; i++) {
		base = TT_MIN(base, p->trace[i % p->opts.trace_events].t0);
	}
	fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
	for (uint32_t t = 0; t < TT_TRACK_COUNT; t++) {
		fprintf(f,
		        "{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\","
		        "\"args\":{\"name\":\"%s\"}},\n",
		        t, track_names[t]);
	}
	for (uint64_t i = first; i < p->trace_next; i++) {
		const struct tt_trace_event *e = &p->trace[i % p->opts.trace_events];

		/* A write batch spans every layer of its chunks: its number is a chunk count. */
		bool chunks = e->track == TT_TRACK_WRITES;

		fprintf(f,
		        "{\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"name\":\"%s %s%u\",\"ts\":%.3f,"
		        "\"dur\":%.3f,\"args\":{\"step\":%" PRId64 ",\"%s\":%u}}%s\n",
		        e->track, e->name, chunks ? "x" : "L", e->layer,
		        (double)(e->t0 - base) / 1e3, (double)(e->t1 - e->t0) / 1e3, e->step,
		        chunks ? "chunks" : "layer", e->layer, i + 1 < p->trace_next ? "," : "");
	}
	fprintf(f, "]}\n");
	pthread_mutex_unlock(&p->lock);
	if (fflush(f) != 0 || ferror(f)) {
		rc = -EIO;
	}
	if (fclose(f) != 0 && rc == 0) {
		rc = -errno;
	}
	return rc;
}
