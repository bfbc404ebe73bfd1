# SPDX-License-Identifier: Apache-2.0
"""Layerwise loads (``layerwise``): a step's loads as one step of the library's pipeline
(include/tutti/pipeline.h), waited for layer by layer from the engine's attention hooks.

The worker's ``start_loads`` begins the step (the pipeline's thread starts reading, layer by
layer), the engine's attention hook calls ``wait_layer`` before each layer's attention (vLLM:
``wait_for_layer_load``), and ``end_step`` ends the step and collects the per-chunk statuses.
The pipeline needs every layer waited for, in order: a hook for layer l waits for every layer
up to l not waited for yet (so a skipped or early hook costs overlap, never correctness), and
the end of the step waits for the layers no hook asked for."""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tutti.pipeline import Pipeline
from tutti.serving.steps import LoadSpec
from tutti.store import KV, ChunkRequest, Store

log = logging.getLogger(__name__)

# How long the end of a step waits for the pipeline to finalise it.
STEP_RESULT_TIMEOUT_S = 120


@dataclass
class _Step:
    sid: int  # the pipeline's step id
    specs: list[LoadSpec]  # its loads, in the order of the chunk statuses
    t0: int
    next_layer: int = 0  # the first layer not waited for yet
    broken: bool = False  # a wait failed: the step's chunks count as failed


@dataclass
class StepLoads:
    """A finished step's loads: per chunk 0 or -errno, in the order of ``specs`` (None: the
    step failed as a whole), and the time the loads took."""

    specs: list[LoadSpec]
    status: list[int] | None
    load_ns: int


@dataclass
class _Counts:
    waits: int = 0  # layers waited for at their own hook
    waits_unhooked: int = 0  # layers waited for at another layer's hook or at the step's end
    seen: dict[str, int] = field(default_factory=dict)  # pipeline counters already reported


class LayerwiseLoads:
    """The pipeline of one worker over its store and registered KV, and the step in flight
    between the worker's ``start_loads`` and ``end_step``. ``stream``: the raw CUDA stream
    of the engine's forward, asked at each step with KV in GPU memory (None: torch's current
    stream)."""

    def __init__(self, store: Store, kv: KV, names: list[str], config_layers: list[str],
                 kv_mem: str, stream: Callable[[], int] | None = None) -> None:
        if names != config_layers:
            # Correct either way (a layer waited for early or late is still loaded before it
            # is read), but loads then overlap less with compute.
            log.warning("tutti: the engine registered the KV of layers %s in another order "
                        "than its configuration lists them (%s); layerwise loads follow the "
                        "registration order", names, config_layers)
        # No save staging (saves stay in the worker's end_step) and no timeline: the pipeline
        # only loads.
        self.pipe = Pipeline(store, kv, save_staging_bytes=0, trace_events=0)
        # The store's layer l is the l-th tensor registered; the pipeline's layers are the
        # store's.
        self.layer_index = {name: i for i, name in enumerate(names)}
        self.nr_layers = len(names)
        self.kv_mem = kv_mem
        self._stream = stream
        self.step: _Step | None = None
        self.broken = False  # a wait failed: the pipeline is not used again
        self._counts = _Counts()
        log.info("tutti: layerwise loads over %d layers (%s KV)", len(names), kv_mem)

    def begin(self, loads: list[LoadSpec], compute_tokens: int) -> bool:
        """Begin a step loading ``loads`` (no step may be in flight); False when the pipeline
        refused it, and the caller loads them before the forward pass instead."""
        assert self.step is None
        stream = None
        if self.kv_mem == "cuda":
            stream = self._stream() if self._stream is not None else _torch_stream()
        try:
            sid = self.pipe.begin_step(
                loads=[ChunkRequest(s.keys, s.block_ids, s.first_chunk, s.skip_blocks)
                       for s in loads],
                compute_tokens=compute_tokens, stream=stream)
        except OSError as e:
            log.warning("tutti: layerwise step refused (%s); loading before the forward "
                        "pass", e)
            return False
        self.step = _Step(sid, loads, time.perf_counter_ns())
        return True

    def wait(self, layer_name: str) -> None:
        """The engine's hook before the attention of ``layer_name``."""
        if self.step is None:
            return
        layer = self.layer_index.get(layer_name)
        if layer is None:
            return  # not a layer whose KV was registered (nothing of it is loaded)
        self._wait_through(self.step, layer, hooked=True)

    def _wait_through(self, st: _Step, layer: int, hooked: bool = False) -> None:
        """Wait for the step's layers up to ``layer``, in order."""
        if layer < st.next_layer:
            return  # waited for already (an earlier hook, or a repeated one)
        self._counts.waits += 1 if hooked else 0
        self._counts.waits_unhooked += layer - st.next_layer + (0 if hooked else 1)
        while st.next_layer <= layer:
            if not st.broken:
                try:
                    self.pipe.wait_layer(st.next_layer)
                except OSError as e:
                    # The pipeline cannot take this step's later layers any more (it takes
                    # them in order only), nor another step: load before the forward from
                    # now on.
                    log.error("tutti: layerwise wait for layer %d failed (%s); the step's "
                              "chunks are recomputed, and later loads complete before the "
                              "forward pass", st.next_layer, e)
                    st.broken = True
                    self.broken = True
            st.next_layer += 1

    def finish(self) -> StepLoads | None:
        """End the step in flight, if any: wait for the layers no hook asked for, and return
        its loads with their statuses."""
        st = self.step
        if st is None:
            return None
        self._wait_through(st, self.nr_layers - 1)
        self.step = None
        res = None
        if not st.broken:
            try:
                self.pipe.end_step()
                res = self._step_result(st.sid)
            except OSError as e:
                log.error("tutti: layerwise step %d failed (%s); its chunks are recomputed, "
                          "and later loads complete before the forward pass", st.sid, e)
                self.broken = True
        if res is None:
            return StepLoads(st.specs, None, time.perf_counter_ns() - st.t0)
        return StepLoads(st.specs, list(res["status"]), int(res["load_ns"]))

    def _step_result(self, sid: int) -> dict[str, Any]:
        """The step's result once the pipeline finalised it (right after the last layer in
        CPU mode; in GPU mode once the stream passed the last wait)."""
        deadline = time.monotonic() + STEP_RESULT_TIMEOUT_S
        delay = 20e-6
        while True:
            res = self.pipe.result(sid)
            if res is not None:
                return res
            if time.monotonic() > deadline:
                raise OSError(errno.ETIMEDOUT,
                              f"step {sid} not final after {STEP_RESULT_TIMEOUT_S} s")
            time.sleep(delay)
            delay = min(delay * 2, 1e-3)

    def read_bytes_per_s(self) -> float:
        """The store's read rate as the pipeline measures it (each layer's read from its issue,
        or the previous layer's end, to its landing; refined every step): a step's own load
        time follows the compute that paces its reads, not the store. 0: not measured yet."""
        return float(self.pipe.stats()["read_bytes_per_s"])

    def take_counts(self) -> dict[str, int]:
        """The pipeline counters (metrics.PIPELINE_COUNTERS) since the last call."""
        out = {"pipeline_waits": self._counts.waits,
               "pipeline_waits_unhooked": self._counts.waits_unhooked}
        self._counts.waits = self._counts.waits_unhooked = 0
        st = self.pipe.stats()
        seen = self._counts.seen
        for name, src in (("pipeline_steps", "steps"),
                          ("pipeline_layers_loaded", "layers_loaded"),
                          ("pipeline_stall_ns", "stall_ns"),
                          ("pipeline_host_wait_ns", "host_wait_ns")):
            delta = int(st[src]) - seen.get(src, 0)
            out[name] = max(delta, 0)
            if delta > 0:
                seen[src] = int(st[src])
        return out

    def close(self) -> None:
        self.finish()
        self.pipe.close()  # before the KV and the store it uses


def _torch_stream() -> int:
    """The raw handle of torch's current CUDA stream (the forward's, unless the engine keeps
    its own)."""
    import torch

    return int(torch.cuda.current_stream().cuda_stream)
