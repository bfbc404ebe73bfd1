/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object mover's CPU twin (mover.h): the CUDA object mover's steps on the host. Like the
 * GPU's two streams it keeps two queues, copies and objs, each run in order, and a step waits
 * for what its buffer had queued on the other queue before it (a copy for the buffer's earlier
 * objs, objs for its earlier copy). Steps run as late as that allows: only when a wait or sync
 * needs them, the latest schedule the GPU could take, so that a pipeline relying on a step
 * having run without waiting for it reads stale bytes here. A copy is a memcpy; objs checks each
 * object against its checksum with tt_csum and scatters it with the CPU mover (load), or gathers
 * it, zeroes its padding and hashes it (save): what the GPU's objects kernel does, byte for byte.
 */
#include <errno.h>
#include <string.h>

#include "format/format.h"
#include "mover/mover.h"

struct twin_step {
	uint64_t after; /* steps of the other queue that must have run first */
	void *dst;
	const void *src;
	size_t bytes;
	const struct tutti_kv *kv;
	uint32_t layer, per_layer, skip, nr; /* a run as in tt_gpu_objs */
	struct tt_gpu_obj *objs;
	const uint32_t *ids;
	uint64_t slot_bytes;
	bool write;
};

/* One queue: steps [head, nr) of steps are queued, run counts those ever run. */
struct twin_queue {
	struct twin_step *steps;
	uint32_t head, nr, cap;
	uint64_t queued, run;
};

struct tt_objmover_twin {
	struct twin_queue copies, objs;
	/* Per buffer: its latest copy's and objs' place in their queues (steps queued by then). */
	uint64_t copied[TT_OBJMOVER_BUFS], used[TT_OBJMOVER_BUFS];
};

int
tt_objmover_twin_open(struct tt_objmover_twin **out)
{
	*out = tt_calloc(1, sizeof(**out));
	return *out != NULL ? 0 : -ENOMEM;
}

static void
run_objs(const struct twin_step *s)
{
	uint64_t lbb = s->kv->geo.layer_block_bytes;

	for (uint32_t k = 0; k < s->nr; k++) {
		struct tt_gpu_obj *o = &s->objs[k];
		uint8_t *slot = (uint8_t *)s->dst + (uint64_t)k * s->slot_bytes;
		struct tt_move m = {.block_ids = s->ids + o->ids_off, .nr_blocks = o->nr_moved};
		uint32_t layer = s->layer + (s->skip + k) / s->per_layer;

		if (o->status != 0) {
			continue;
		}
		if (s->write) {
			uint64_t moved = (uint64_t)o->nr_moved * lbb;

			m.obj = slot;
			tt_mover_cpu.gather(NULL, s->kv, layer, &m, 1);
			memset(slot + moved, 0, s->slot_bytes - moved);
			o->csum = tt_csum(slot, moved);
			continue;
		}
		if (tt_csum(slot, (uint64_t)o->stored * lbb) != o->csum) {
			o->status = -EBADMSG; /* never scattered */
			continue;
		}
		m.obj = slot + (uint64_t)o->skip * lbb;
		tt_mover_cpu.scatter(NULL, s->kv, layer, &m, 1);
	}
}

static void run_objs_until(struct tt_objmover_twin *t, uint64_t upto);

/* Run copies until \p upto have run, each after the objs steps it waits for. */
static void
run_copies_until(struct tt_objmover_twin *t, uint64_t upto)
{
	struct twin_queue *q = &t->copies;

	while (q->run < upto && q->head < q->nr) {
		const struct twin_step s = q->steps[q->head++];

		run_objs_until(t, s.after);
		memcpy(s.dst, s.src, s.bytes);
		q->run++;
	}
}

static void
run_objs_until(struct tt_objmover_twin *t, uint64_t upto)
{
	struct twin_queue *q = &t->objs;

	while (q->run < upto && q->head < q->nr) {
		const struct twin_step s = q->steps[q->head++];

		run_copies_until(t, s.after);
		run_objs(&s);
		q->run++;
	}
}

static void
run_all(struct tt_objmover_twin *t)
{
	run_copies_until(t, t->copies.queued);
	run_objs_until(t, t->objs.queued);
}

void
tt_objmover_twin_close(struct tt_objmover_twin *t)
{
	if (t != NULL) {
		run_all(t);
		tt_free(t->copies.steps);
		tt_free(t->objs.steps);
		tt_free(t);
	}
}

static int
queue(struct twin_queue *q, const struct twin_step *s)
{
	if (q->head == q->nr) {
		q->head = q->nr = 0; /* all run: start over */
	}
	if (q->nr == q->cap) {
		uint32_t live = q->nr - q->head, cap = live * 2 > 64 ? live * 2 : 64;
		struct twin_step *steps = tt_calloc(cap, sizeof(*steps));

		if (steps == NULL) {
			return -ENOMEM;
		}
		if (live > 0) {
			memcpy(steps, q->steps + q->head, live * sizeof(*steps));
		}
		tt_free(q->steps);
		q->steps = steps;
		q->nr = live;
		q->head = 0;
		q->cap = cap;
	}
	q->steps[q->nr++] = *s;
	q->queued++;
	return 0;
}

static int
twin_stage_alloc(void *ctx, size_t bytes, void **out)
{
	*out = tt_aligned_alloc(bytes);
	return *out != NULL ? 0 : -ENOMEM;
}

static void
twin_stage_free(void *ctx, void *p)
{
	tt_aligned_free(p);
}

static int
twin_copy(void *ctx, unsigned buf, void *dst, const void *src, size_t bytes)
{
	struct tt_objmover_twin *t = ctx;
	struct twin_step s = {.dst = dst, .src = src, .bytes = bytes};
	int rc;

	if (buf >= TT_OBJMOVER_BUFS || dst == NULL || src == NULL) {
		return -EINVAL;
	}
	s.after = t->used[buf];
	rc = queue(&t->copies, &s);
	if (rc == 0) {
		t->copied[buf] = t->copies.queued;
	}
	return rc;
}

static int
twin_objs(void *ctx, unsigned buf, const struct tutti_kv *kv, uint32_t layer, uint32_t per_layer,
          uint32_t skip, struct tt_gpu_obj *objs, uint32_t nr, const uint32_t *ids, uint8_t *mem,
          uint64_t slot_bytes, bool write)
{
	struct tt_objmover_twin *t = ctx;
	struct twin_step s = {.dst = mem,
	                      .kv = kv,
	                      .layer = layer,
	                      .per_layer = per_layer,
	                      .skip = skip,
	                      .nr = nr,
	                      .objs = objs,
	                      .ids = ids,
	                      .slot_bytes = slot_bytes,
	                      .write = write};
	int rc;

	if (buf >= TT_OBJMOVER_BUFS || kv == NULL ||
	    !tt_kv_run_fits(kv, layer, per_layer, skip, nr) ||
	    (nr > 0 && (objs == NULL || mem == NULL))) {
		return -EINVAL;
	}
	if (nr == 0) {
		return 0;
	}
	s.after = t->copied[buf];
	rc = queue(&t->objs, &s);
	if (rc == 0) {
		t->used[buf] = t->objs.queued;
	}
	return rc;
}

static int
twin_wait(void *ctx, unsigned buf)
{
	struct tt_objmover_twin *t = ctx;

	if (buf >= TT_OBJMOVER_BUFS) {
		return -EINVAL;
	}
	run_copies_until(t, t->copied[buf]);
	return 0;
}

static int
twin_sync(void *ctx)
{
	run_all(ctx);
	return 0;
}

const struct tt_objmover_ops tt_objmover_twin = {
    .name = "twin",
    .stage_alloc = twin_stage_alloc,
    .stage_free = twin_stage_free,
    .copy = twin_copy,
    .objs = twin_objs,
    .wait = twin_wait,
    .sync = twin_sync,
};
