# SPDX-License-Identifier: Apache-2.0
"""TuttiConnector's worker side: the serving core's worker (tutti/serving/worker.py) under
vLLM's names, with what only vLLM knows: its paged KV tensors, registered with the library,
and the stream its forward runs on.

- ``register_kv_caches`` registers every layer's paged tensor with the library.
- ``start_load_kv``, ``wait_for_layer_load``, ``wait_for_save``, ``handle_preemptions``,
  ``get_finished`` and ``get_block_ids_with_load_errors`` are the core's step calls.
- A chunk that cannot be loaded (evicted, damaged, I/O error) is reported through
  ``get_block_ids_with_load_errors``: with ``kv_load_failure_policy="recompute"`` vLLM
  recomputes it, and no error reaches the user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tutti.serving.config import ServingContext
from tutti.serving.worker import WorkerCore
from tutti.store import KV
from tutti.vllm.data import TuttiConnectorMetadata, TuttiWorkerMetadata
from tutti.vllm.log import log
from tutti.vllm.metrics import TuttiConnectorStats

if TYPE_CHECKING:
    import torch


def dense_bytes(block: torch.Tensor) -> int | None:
    """The bytes of the one dense range a block's view covers, in whatever order its
    dimensions walk it; None where the view leaves gaps. A block is moved as its bytes: vLLM
    0.26's GPU runner hands FlashAttention's KV as a logical (heads, tokens, 2 x head size)
    view of (tokens, heads, 2 x head size) memory, dense but not a contiguous view."""
    expect = 1
    dims = zip(block.stride(), block.shape, strict=True)
    for stride, size in sorted((st, sz) for st, sz in dims if sz != 1):
        if stride != expect:
            return None
        expect *= size
    return expect * block.element_size()


def failed_load_hazard(ctx: ServingContext, kv_mem: str) -> str | None:
    """Why a load that fails inside a step may crash this vLLM (docs/vllm.md, "Known
    problems"), or None: GPU KV loaded inside the step (layer by layer, or before the forward),
    which only an explicit configuration chooses. vLLM 0.26 on the GPU crashed after
    recovering from a failed layerwise load, with and without its asynchronous scheduling
    (docs/results.md, V2 and V4): its model runner V2 does not rewind a recomputed request's
    GPU state (vLLM issue #49250), and asynchronous scheduling keeps the request's next step
    (#34484)."""
    if kv_mem != "cuda" or ctx.cfg.async_load:
        return None
    return ("loads into GPU KV inside the step (\"async_load\": false): a load that fails "
            "there (a damaged object, an I/O error) is likely to crash vLLM after it reports "
            "\"Recovered from KV load failure\" (vLLM issues #49250, #34484; docs/vllm.md, "
            "\"Known problems\"); the default, asynchronous loads, recomputes such a prefix "
            "instead")


def forward_stream() -> int:
    """The stream of vLLM's forward, which a layerwise step's loads are ordered with: a stream
    of vLLM's own, or the legacy default stream (vLLM 0.26's model runner), which the pipeline
    accepts since its loads run on non-blocking streams."""
    from vllm.utils.torch_utils import current_stream

    return int(current_stream().cuda_stream)


class TuttiWorker(WorkerCore):
    """The worker side of one connector (one per worker process, i.e. per rank)."""

    def __init__(self, ctx: ServingContext) -> None:
        super().__init__(ctx, stream=forward_stream)

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Each layer's paged tensor as segments: (B, ...) tensors are one segment per layer,
        K/V-first (2, B, ...) tensors two."""
        segs: list[tuple[int, int, int]] = []
        per_layer: int | None = None
        mem = "host"
        num_blocks = self.ctx.num_blocks
        if len(kv_caches) != self.geo.nr_layers:
            raise ValueError(f"TuttiConnector: {len(kv_caches)} KV tensors for "
                             f"{self.geo.nr_layers} layers")
        page = self.geo.layer_block_bytes
        for name, t in kv_caches.items():
            item = t.element_size()
            if t.shape[0] == num_blocks:
                layer = [(t.data_ptr(), t.stride(0) * item, page)]
            elif t.shape[0] == 2 and t.shape[1] == num_blocks:
                layer = [(t[i].data_ptr(), t.stride(1) * item, page // 2) for i in range(2)]
            else:
                raise ValueError(f"TuttiConnector: layer {name}: KV tensor of shape "
                                 f"{tuple(t.shape)} is neither (blocks, ...) nor (2, blocks, ...)"
                                 f" with {num_blocks} blocks")
            block = t[0] if len(layer) == 1 else t[0][0]
            if dense_bytes(block) != layer[0][2]:
                raise ValueError(f"TuttiConnector: layer {name}: a block of shape "
                                 f"{tuple(block.shape)} and strides {block.stride()} is not "
                                 "one dense page")
            if per_layer not in (None, len(layer)):
                raise ValueError("TuttiConnector: layers with different KV layouts")
            per_layer = len(layer)
            mem = "cuda" if t.is_cuda else "host"
            segs.extend(layer)
        assert per_layer is not None
        hazard = failed_load_hazard(self.ctx, mem)
        if hazard is not None:
            log.warning("tutti: %s", hazard)
        engine = self.attach_kv(KV(self.geo, segs, per_layer, num_blocks, mem=mem), mem,
                                list(kv_caches))
        log.info("tutti: registered %d layers, %d blocks of %d bytes (%s, %d segment%s/layer); "
                 "engine %s%s", self.geo.nr_layers, num_blocks, page, mem, per_layer,
                 "s" if per_layer > 1 else "", engine,
                 ", layerwise loads" if self.cfg.layerwise else
                 ", asynchronous loads" if self.cfg.async_load else "")

    def start_load_kv(self, meta: TuttiConnectorMetadata) -> None:
        self.start_loads(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        self.wait_layer(layer_name)

    def wait_for_save(self, meta: TuttiConnectorMetadata) -> None:
        self.end_step(meta)

    def handle_preemptions(self, meta: TuttiConnectorMetadata) -> None:
        self.fence(meta.new_blocks)

    def build_connector_worker_meta(self) -> TuttiWorkerMetadata | None:
        rep = self.report()
        return None if rep is None else TuttiWorkerMetadata(rep.reports, rep.rates)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.take_load_errors()

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None,
                                                               set[str] | None]:
        # Saves are written in the step (or waited for where their blocks are reused);
        # asynchronous loads finish here.
        return None, (self.take_finished_loads() or None)

    def take_stats(self) -> TuttiConnectorStats | None:
        counts = self.take_counts()
        return None if counts is None else TuttiConnectorStats(data=counts.data)

    def shutdown(self) -> None:
        self.close()
