/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store module's interface to the rest of the library (the layerwise pipeline): what a
 * store is, and loads issued one layer at a time. The public API is include/tutti/store.h; the
 * handle's insides stay in store_impl.h. (A call's requests are checked and cut into chunks by
 * src/plan, which the pipeline uses directly.)
 */
#ifndef TT_STORE_H
#define TT_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/common.h"
#include "kv/kv.h"
#include "tutti/store.h"

const struct tt_geo *tt_store_geo(const struct tutti_store *st);
uint32_t tt_store_key_bytes(const struct tutti_store *st);
const struct tt_log *tt_store_log(const struct tutti_store *st);
/* Have the engine make now what moving \p kv needs (tt_engine_prepare). Returns 0 or -errno. */
int tt_store_prepare(struct tutti_store *st, const struct tutti_kv *kv);

/*
 * A load issued one layer at a time, for the layerwise pipeline. Open finds and pins every
 * chunk; each tt_load_op_layer moves the next layer; close drops damaged chunks, unpins and
 * reports per-chunk statuses (a chunk that failed in any layer failed). Other calls on the
 * store may run between these calls.
 *
 * Where the engine can launch layers on the GPU (gpu-uring with GPU KV), a layer is launched,
 * not waited for: consecutive layers run back to back with no host round trip between them.
 * Otherwise each layer runs to completion in the call. Either way \p word receives \p value (a
 * release store) once the layer is in the KV (or has failed), and *done_ns when that happened
 * (launched: the GPU's %globaltimer, or 0 for a layer that failed in the call; otherwise
 * CLOCK_MONOTONIC).
 */
struct tt_load_op;
/*
 * Memory for the object lists of launched layers, which the caller of tt_load_op_open owns and
 * passes to one op at a time. Created for \p kv: for GPU KV it is grown now to the largest op
 * \p kv is likely to see, since growing it during an op allocates pinned memory, which may wait
 * for the very compute stream that waits for the op's layers. Returns 0 or -ENOMEM. Destroy
 * takes NULL.
 */
struct tt_load_mem;
int tt_load_mem_create(const struct tutti_kv *kv, struct tt_load_mem **out);
void tt_load_mem_destroy(struct tt_load_mem *m);
/* \p mem must stay untouched until close. Returns 0 or -EINVAL / -ENOMEM (nothing to close
 * then). */
int tt_load_op_open(struct tutti_store *st, const struct tutti_kv *kv,
                    const struct tutti_request *reqs, uint32_t nr_reqs, struct tt_load_mem *mem,
                    struct tt_load_op **out);
/* Issue the next layer (every layer is issued, in order). Returns 0 or the op's failure. */
int tt_load_op_layer(struct tt_load_op *op, uint32_t *word, uint32_t value, uint64_t *done_ns);
/* 1 once every issued layer is done, 0 while not, or a negative errno. Never blocks. */
int tt_load_op_done(struct tt_load_op *op);
/* Whether the op's layers run launched on the GPU (their done times are GPU times). */
bool tt_load_op_launched(const struct tt_load_op *op);
/* Wait for the issued layers, fold their results, unpin; status[i] per chunk. Frees \p op.
 * Returns the chunks loaded. */
int64_t tt_load_op_close(struct tt_load_op *op, int32_t *status);

#endif /* TT_STORE_H */
