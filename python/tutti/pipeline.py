# SPDX-License-Identifier: Apache-2.0
"""The layerwise pipeline in Python (include/tutti/pipeline.h): what a serving engine calls at
every step and layer. ``stream`` is a raw CUDA stream handle (``torch.cuda.Stream.cuda_stream``)
in GPU mode; nothing here imports torch."""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Sequence
from os import PathLike
from typing import Any

from tutti import _lib as L
from tutti.store import KV, ChunkRequest, Store, _check, _Handle


class Profile:
    """Storage bandwidths and per-layer compute (ns per token) the scheduler plans with."""

    def __init__(self, nr_layers: int, read_bytes_per_s: float = 0.0,
                 write_bytes_per_s: float = 0.0,
                 layer_ns_per_token: Sequence[float] | None = None) -> None:
        self.nr_layers = nr_layers
        self.read_bytes_per_s = float(read_bytes_per_s)
        self.write_bytes_per_s = float(write_bytes_per_s)
        self.layer_ns_per_token = list(layer_ns_per_token or [0.0] * nr_layers)
        if len(self.layer_ns_per_token) != nr_layers:
            raise OSError(22, f"{len(self.layer_ns_per_token)} layer entries for {nr_layers}")

    def _c(self) -> tuple[L.Profile, ctypes.Array[ctypes.c_double]]:
        arr = (ctypes.c_double * self.nr_layers)(*self.layer_ns_per_token)
        c = L.Profile(ctypes.sizeof(L.Profile), self.nr_layers, self.read_bytes_per_s,
                      self.write_bytes_per_s, arr)
        return c, arr

    def write(self, path: str | PathLike[str]) -> None:
        c, _arr = self._c()
        _check(L.lib().tutti_profile_write(str(path).encode(), ctypes.byref(c)),
               "tutti_profile_write")

    @classmethod
    def read(cls, path: str | PathLike[str], nr_layers: int) -> Profile:
        prof = cls(nr_layers)
        c, arr = prof._c()
        _check(L.lib().tutti_profile_read(str(path).encode(), ctypes.byref(c)),
               "tutti_profile_read")
        return cls(nr_layers, c.read_bytes_per_s, c.write_bytes_per_s, list(arr))


class Pipeline(_Handle):
    """``tutti_pipeline`` over a store and a registered KV. Calls are not thread-safe against
    each other (one engine thread drives it), as in C."""

    _release = "tutti_pipeline_destroy"

    def __init__(self, store: Store, kv: KV, readahead_layers: int = 0,
                 save_staging_bytes: int | None = None,
                 profile: str | PathLike[str] | None = None, trace_events: int | None = None,
                 write_batch_chunks: int = 0, wait_timeout_ms: int | None = None) -> None:
        lib = L.lib()
        self.store, self.kv = store, kv
        o = L.PipelineOpts()
        lib.tutti_pipeline_opts_init(ctypes.byref(o))
        o.readahead_layers = readahead_layers
        if save_staging_bytes is not None:
            o.save_staging_bytes = int(save_staging_bytes)
        self._profile = str(profile).encode() if profile else None
        o.profile_path = self._profile
        if trace_events is not None:
            o.trace_events = trace_events
        o.write_batch_chunks = write_batch_chunks
        if wait_timeout_ms is not None:
            o.wait_timeout_ms = wait_timeout_ms
        self._h = ctypes.c_void_p()
        with store._call(), kv._call():
            _check(lib.tutti_pipeline_create(store._h, kv._h, ctypes.byref(o),
                                             ctypes.byref(self._h)), "tutti_pipeline_create")
        # The pipeline calls the store and reads the KV in C: closing either closes it first.
        self._depends_on(store, kv)
        self._nr_loads: dict[int, int] = {}

    def begin_step(self, loads: Sequence[ChunkRequest] = (), saves: Sequence[ChunkRequest] = (),
                   compute_tokens: int = 0, stream: int | None = None) -> int:
        """Declare a step (``ChunkRequest`` lists) and start its reads; returns the step id."""
        kb = self.store.key_bytes
        cl = (L.Request * max(1, len(loads)))(*[r.c(kb) for r in loads])
        cs = (L.Request * max(1, len(saves)))(*[r.c(kb) for r in saves])
        step = L.Step(ctypes.sizeof(L.Step), len(loads), cl, len(saves), cs, compute_tokens, 0,
                      stream or None)
        with self._call():
            sid = _check(L.lib().tutti_pipeline_begin_step(self._h, ctypes.byref(step)),
                         "tutti_pipeline_begin_step")
        self._nr_loads[int(sid)] = sum(len(r.keys) - r.first_chunk for r in loads)
        return int(sid)

    def wait_layer(self, layer: int) -> None:
        with self._call():
            _check(L.lib().tutti_pipeline_wait_layer(self._h, layer), "tutti_pipeline_wait_layer")

    def save_layer(self, layer: int) -> None:
        with self._call():
            _check(L.lib().tutti_pipeline_save_layer(self._h, layer), "tutti_pipeline_save_layer")

    def end_step(self) -> None:
        with self._call():
            _check(L.lib().tutti_pipeline_end_step(self._h), "tutti_pipeline_end_step")

    def result(self, step: int) -> dict[str, Any] | None:
        """The step's result as a dict (with 'status' per chunk and 'layer_stall_ns'), or None
        while it is not final."""
        res = L.StepResult()
        res.size = ctypes.sizeof(L.StepResult)
        n = self._nr_loads.get(step, 0)
        status = (L.c_i32 * max(1, n))()
        stall = (L.c_u64 * self.store.geometry.nr_layers)()
        with self._call():
            rc = L.lib().tutti_pipeline_step_result(self._h, step, ctypes.byref(res), status, stall)
        if rc == -errno.EAGAIN:
            return None
        _check(rc, "tutti_pipeline_step_result")
        out: dict[str, Any] = {name: int(getattr(res, name)) for name in L.STEP_RESULT_FIELDS}
        out.update(readahead=int(res.readahead), timed_out=int(res.timed_out),
                   host_wait_ns=int(res.host_wait_ns), status=list(status)[:n],
                   layer_stall_ns=list(stall))
        return out

    def flush(self) -> None:
        with self._call():
            _check(L.lib().tutti_pipeline_flush(self._h), "tutti_pipeline_flush")

    def stats(self) -> dict[str, int | float]:
        s = L.PipelineStats()
        s.size = ctypes.sizeof(L.PipelineStats)
        with self._call():
            _check(L.lib().tutti_pipeline_get_stats(self._h, ctypes.byref(s)),
                   "tutti_pipeline_get_stats")
        out: dict[str, int | float] = {"readahead": int(s.readahead)}
        out.update({name: int(getattr(s, name)) for name in L.PIPELINE_STATS_U64})
        out.update({name: float(getattr(s, name)) for name in L.PIPELINE_STATS_F64})
        out["host_wait_ns"] = int(s.host_wait_ns)
        return out

    def write_trace(self, path: str | PathLike[str]) -> None:
        with self._call():
            _check(L.lib().tutti_pipeline_write_trace(self._h, str(path).encode()),
                   "tutti_pipeline_write_trace")

    def profile(self) -> Profile:
        """The profile as refined online (a ``Profile``)."""
        nl = self.store.geometry.nr_layers
        prof = Profile(nl)
        c, arr = prof._c()
        with self._call():
            _check(L.lib().tutti_pipeline_get_profile(self._h, ctypes.byref(c)),
                   "tutti_pipeline_get_profile")
        return Profile(nl, c.read_bytes_per_s, c.write_bytes_per_s, list(arr))
