# SPDX-License-Identifier: Apache-2.0
"""ctypes declarations of libtutti's public C API (include/tutti/*.h) and the library loader.

The structures mirror the C ones field for field; the library checks the ``size`` field of each
versioned structure, and ``check_abi`` compares the sizes the library writes with ours.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_i32 = ctypes.c_int32
c_i64 = ctypes.c_int64


class Geometry(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("nr_layers", c_u32),
        ("nr_kv_heads", c_u32),
        ("head_dim", c_u32),
        ("elem_bytes", c_u32),
        ("kv_planes", c_u32),
        ("block_tokens", c_u32),
        ("chunk_tokens", c_u32),
    ]


LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


class StoreOpts(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("flags", c_u32),
        ("dirs", ctypes.POINTER(ctypes.c_char_p)),
        ("nr_dirs", c_u32),
        ("engine", c_u32),
        ("engine_opts", ctypes.c_char_p),
        ("capacity_bytes", c_u64),
        ("ns", ctypes.c_void_p),
        ("ns_bytes", c_u32),
        ("key_bytes", c_u32),
        ("staging_bytes", c_u64),
        ("max_io_bytes", c_u64),
        ("queue_depth", c_u32),
        ("log_fn", LOG_FN),
        ("log_arg", ctypes.c_void_p),
        ("log_level", c_u32),
        ("durability", c_u32),
        ("data_files", c_u32),
    ]


class EngineInfo(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("engine", c_u32),
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("nr_options", c_u32),
        ("reserved", c_u32),
    ]


ENGINE_OPTION_INT = 0
ENGINE_OPTION_CHOICE = 1


class EngineOption(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("kind", c_u32),
        ("name", ctypes.c_char_p),
        ("help", ctypes.c_char_p),
        ("min", c_u64),
        ("max", c_u64),
        ("default", c_u64),  # the C field is def
        ("choices", ctypes.POINTER(ctypes.c_char_p)),
        ("nr_choices", c_u32),
        ("reserved", c_u32),
    ]


class Segment(ctypes.Structure):
    _fields_ = [("base", c_u64), ("block_stride", c_u64), ("bytes", c_u64)]


class Request(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("nr_keys", c_u32),
        ("keys", ctypes.c_void_p),
        ("first_chunk", c_u32),
        ("skip_blocks", c_u32),
        ("nr_blocks", c_u32),
        ("reserved", c_u32),
        ("block_ids", ctypes.POINTER(c_u32)),
    ]


STATS_FIELDS = [
    "nr_dirs",
    "slot_bytes",
    "capacity_slots",
    "used_slots",
    "lookups",
    "lookup_keys",
    "lookup_hits",
    "load_chunks",
    "load_bytes",
    "load_errors",
    "load_ns",
    "save_chunks",
    "save_bytes",
    "save_present",
    "save_orphans",
    "save_no_space",
    "save_errors",
    "save_ns",
    "evictions",
    "io_ops",
    "io_submits",
    "staging_bytes",
    "load_corrupt",
    "flushes",
    "recovered_chunks",
    "recovery_dropped",
    "recovery_orphans",
    "recovery_duplicates",
    "recovery_ns",
    "gpu_io_kernel_ns",
    "gpu_io_block_ns",
    "wave_io_wait_ns",
    "wave_copy_wait_ns",
]


class Stats(ctypes.Structure):
    _fields_ = [("size", c_u32), ("nr_dirs", c_u32)] + [
        (name, c_u64) for name in STATS_FIELDS[1:]
    ]


class PipelineOpts(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("readahead_layers", c_u32),
        ("save_staging_bytes", c_u64),
        ("profile_path", ctypes.c_char_p),
        ("trace_events", c_u32),
        ("write_batch_chunks", c_u32),
        ("wait_timeout_ms", c_u32),
        ("reserved", c_u32),
    ]


class Step(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("nr_loads", c_u32),
        ("loads", ctypes.POINTER(Request)),
        ("nr_saves", c_u32),
        ("saves", ctypes.POINTER(Request)),
        ("compute_tokens", c_u32),
        ("reserved", c_u32),
        ("stream", ctypes.c_void_p),
    ]


STEP_RESULT_FIELDS = ["load_chunks", "load_errors", "load_bytes", "load_ns", "stall_ns",
                      "saves_staged", "saves_skipped"]


class StepResult(ctypes.Structure):
    _fields_ = [("size", c_u32), ("nr_loads", c_u32)] + [
        (name, c_u64) for name in STEP_RESULT_FIELDS] + [("readahead", c_u32),
                                                         ("timed_out", c_u32),
                                                         ("host_wait_ns", c_u64)]


PIPELINE_STATS_U64 = ["steps", "steps_stalled", "stall_ns", "stall_max_ns", "request_loads",
                      "request_stall_ns", "layers_loaded", "load_chunks", "load_errors",
                      "load_bytes", "saves_staged", "saves_skipped", "saves_written",
                      "saves_present", "save_errors", "save_bytes", "writes_in_slack",
                      "staging_bytes", "store_staging_bytes"]
PIPELINE_STATS_F64 = ["read_bytes_per_s", "write_bytes_per_s", "compute_ns_per_token"]


class PipelineStats(ctypes.Structure):
    _fields_ = [("size", c_u32), ("readahead", c_u32)] + [
        (name, c_u64) for name in PIPELINE_STATS_U64] + [
        (name, ctypes.c_double) for name in PIPELINE_STATS_F64] + [("host_wait_ns", c_u64)]


class Profile(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("nr_layers", c_u32),
        ("read_bytes_per_s", ctypes.c_double),
        ("write_bytes_per_s", ctypes.c_double),
        ("layer_ns_per_token", ctypes.POINTER(ctypes.c_double)),
    ]


OPEN_CREATE = 0x1
OPEN_EXISTING = 0x2
OPEN_REPAIR = 0x4
OPEN_READ_ONLY = 0x8
OPEN_REPLACE = 0x10
MEM_HOST = 0
MEM_CUDA = 1
DURABILITY = {"fast": 0, "durable": 1}


def engine_info(engine: int) -> EngineInfo:
    """tutti_engine_info() of enum tutti_engine ``engine``."""
    info = EngineInfo(size=ctypes.sizeof(EngineInfo))
    rc = lib().tutti_engine_info(engine, ctypes.byref(info))
    if rc < 0:
        raise OSError(-rc, f"tutti_engine_info({engine}): {lib().tutti_strerror(rc).decode()}")
    return info


def engine_option(engine: int, index: int) -> EngineOption:
    """tutti_engine_option() of enum tutti_engine ``engine``."""
    opt = EngineOption(size=ctypes.sizeof(EngineOption))
    rc = lib().tutti_engine_option(engine, index, ctypes.byref(opt))
    if rc < 0:
        raise OSError(-rc, f"tutti_engine_option({engine}, {index}): "
                      f"{lib().tutti_strerror(rc).decode()}")
    return opt


def engines() -> dict[str, int]:
    """enum tutti_engine by name, as the library lists them (tutti_engine_count/info)."""
    return {engine_info(k).name.decode(): k for k in range(lib().tutti_engine_count())}


# ---- the remote tier (include/tutti/remote.h) ----

_p = ctypes.POINTER
EXISTS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _p(ctypes.c_char_p), c_u32,
                             _p(c_i32))
GET_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _p(ctypes.c_char_p),
                          _p(ctypes.c_void_p), _p(c_u64), c_u32, _p(c_i64))
PUT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _p(ctypes.c_char_p),
                          _p(ctypes.c_void_p), _p(c_u64), c_u32, _p(c_i32))
MEM_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, c_u64)


class RemoteOps(ctypes.Structure):
    _fields_ = [("size", c_u32), ("exists", EXISTS_FN), ("get_into", GET_FN),
                ("put_from", PUT_FN), ("register_mem", MEM_FN), ("unregister_mem", MEM_FN)]


class RemoteOpts(ctypes.Structure):
    _fields_ = [
        ("size", c_u32),
        ("key_bytes", c_u32),
        ("key_prefix", ctypes.c_char_p),
        ("rank", c_u32),
        ("nr_ranks", c_u32),
        ("ns", ctypes.c_void_p),
        ("ns_bytes", c_u32),
        ("timeout_ms", c_u32),
        ("ring_bytes", c_u64),
        ("publish_bytes", c_u64),
        ("publish_rate", c_u64),
        ("breaker_faults", c_u32),
        ("breaker_open_ms", c_u32),
        ("lookup_timeout_ms", c_u32),
        ("log_fn", LOG_FN),
        ("log_arg", ctypes.c_void_p),
        ("log_level", c_u32),
    ]


REMOTE_STATS_FIELDS = ["lookups", "lookup_hits", "lookup_ns", "fetch_chunks", "fetch_bytes",
                       "fetch_ns", "fetch_errors", "verify_failures", "timeouts", "faults",
                       "breaker_trips", "publish_queued", "publish_chunks", "publish_bytes",
                       "publish_present", "publish_dropped", "publish_ns"]


class RemoteStats(ctypes.Structure):
    _fields_ = [("size", c_u32), ("up", c_u32)] + [(n, c_u64) for n in REMOTE_STATS_FIELDS]


def _candidates() -> Iterator[Path]:
    """Where libtutti may be, in order: the one an installed wheel carries (lib/ beside this
    file), $TUTTI_LIBRARY, the repository's builds (a source tree), the system's (ldconfig)."""
    here = Path(__file__).resolve().parent
    own = here / "lib" / "libtutti.so"
    env = os.environ.get("TUTTI_LIBRARY")
    if own.exists():
        if env and Path(env).resolve() != own:
            warnings.warn(f"TUTTI_LIBRARY={env} is ignored: this installed package loads its own "
                          f"library ({own})", stacklevel=3)
        yield own
        return
    if env:
        yield Path(env)
        return
    repo = here.parent.parent
    for build in ("build/release", "build/gpu", "build/asan"):
        yield from sorted((repo / build).glob("libtutti.so*"))
    found = ctypes.util.find_library("tutti")  # e.g. installed by `cmake --install`
    if found:
        yield Path(found)


def _declare(lib: ctypes.CDLL) -> None:
    p = ctypes.POINTER
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "tutti_version": (ctypes.c_char_p, []),
        "tutti_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "tutti_geometry_init": (None, [p(Geometry)]),
        "tutti_geometry_preset": (ctypes.c_int, [ctypes.c_char_p, p(Geometry)]),
        "tutti_geometry_check": (ctypes.c_int, [p(Geometry)]),
        "tutti_geometry_layer_block_bytes": (c_u64, [p(Geometry)]),
        "tutti_geometry_blocks_per_chunk": (c_u32, [p(Geometry)]),
        "tutti_geometry_object_bytes": (c_u64, [p(Geometry)]),
        "tutti_geometry_slot_bytes": (c_u64, [p(Geometry)]),
        "tutti_engine_parse": (ctypes.c_int, [ctypes.c_char_p]),
        "tutti_engine_name": (ctypes.c_char_p, [c_u32]),
        "tutti_engine_count": (c_u32, []),
        "tutti_engine_info": (ctypes.c_int, [c_u32, p(EngineInfo)]),
        "tutti_engine_option": (ctypes.c_int, [c_u32, c_u32, p(EngineOption)]),
        "tutti_store_opts_init": (None, [ctypes.c_void_p]),
        "tutti_store_open": (ctypes.c_int, [p(Geometry), p(StoreOpts), p(ctypes.c_void_p)]),
        "tutti_store_close": (None, [ctypes.c_void_p]),
        "tutti_kv_create": (
            ctypes.c_int,
            [p(Geometry), p(Segment), c_u32, c_u32, c_u32, p(ctypes.c_void_p)],
        ),
        "tutti_kv_destroy": (None, [ctypes.c_void_p]),
        "tutti_store_lookup": (c_i64, [ctypes.c_void_p, ctypes.c_void_p, c_u32, p(c_u64)]),
        "tutti_store_list": (c_i64, [ctypes.c_void_p, p(c_u64), ctypes.c_void_p, p(c_u32),
                                     c_u32]),
        "tutti_store_load": (
            c_i64,
            [ctypes.c_void_p, ctypes.c_void_p, p(Request), c_u32, c_u32, c_u32, p(c_i32)],
        ),
        "tutti_store_save": (
            c_i64,
            [ctypes.c_void_p, ctypes.c_void_p, p(Request), c_u32, p(c_i32)],
        ),
        "tutti_store_get_stats": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
        "tutti_store_engine": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
        "tutti_pipeline_opts_init": (None, [p(PipelineOpts)]),
        "tutti_pipeline_create": (
            ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, p(PipelineOpts), p(ctypes.c_void_p)]),
        "tutti_pipeline_destroy": (None, [ctypes.c_void_p]),
        "tutti_pipeline_begin_step": (c_i64, [ctypes.c_void_p, p(Step)]),
        "tutti_pipeline_wait_layer": (ctypes.c_int, [ctypes.c_void_p, c_u32]),
        "tutti_pipeline_save_layer": (ctypes.c_int, [ctypes.c_void_p, c_u32]),
        "tutti_pipeline_end_step": (ctypes.c_int, [ctypes.c_void_p]),
        "tutti_pipeline_step_result": (
            ctypes.c_int, [ctypes.c_void_p, c_i64, p(StepResult), p(c_i32), p(c_u64)]),
        "tutti_pipeline_flush": (ctypes.c_int, [ctypes.c_void_p]),
        "tutti_pipeline_get_stats": (ctypes.c_int, [ctypes.c_void_p, p(PipelineStats)]),
        "tutti_pipeline_write_trace": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
        "tutti_pipeline_get_profile": (ctypes.c_int, [ctypes.c_void_p, p(Profile)]),
        "tutti_profile_read": (ctypes.c_int, [ctypes.c_char_p, p(Profile)]),
        "tutti_profile_write": (ctypes.c_int, [ctypes.c_char_p, p(Profile)]),
        "tutti_remote_opts_init": (None, [ctypes.c_void_p]),
        "tutti_remote_open": (ctypes.c_int, [p(Geometry), p(RemoteOps), ctypes.c_void_p,
                                             p(RemoteOpts), p(ctypes.c_void_p)]),
        "tutti_remote_close": (None, [ctypes.c_void_p]),
        "tutti_remote_record_bytes": (c_u64, [ctypes.c_void_p]),
        "tutti_remote_lookup": (c_i64, [ctypes.c_void_p, ctypes.c_void_p, c_u32, c_u32]),
        "tutti_remote_fetch": (c_i64, [ctypes.c_void_p, ctypes.c_void_p, p(Request), c_u32,
                                       p(c_i32)]),
        "tutti_remote_publish": (c_i64, [ctypes.c_void_p, ctypes.c_void_p, p(Request), c_u32,
                                         p(c_i32)]),
        "tutti_remote_flush": (ctypes.c_int, [ctypes.c_void_p, c_u32]),
        "tutti_remote_get_stats": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def check_abi(lib: ctypes.CDLL) -> None:
    """Our structure sizes against the library's (it writes its own sizeof into ``size``)."""
    buf = (ctypes.c_uint8 * (4 * ctypes.sizeof(StoreOpts)))()
    lib.tutti_store_opts_init(buf)
    theirs = ctypes.cast(buf, ctypes.POINTER(c_u32))[0]
    if theirs != ctypes.sizeof(StoreOpts):
        raise OSError(errno.EPROTO, f"libtutti's store options are {theirs} bytes, ours "
                      f"{ctypes.sizeof(StoreOpts)}: the binding does not match the library")
    popts = PipelineOpts()
    lib.tutti_pipeline_opts_init(ctypes.byref(popts))
    if popts.size != ctypes.sizeof(PipelineOpts):
        raise OSError(errno.EPROTO, "libtutti's pipeline options do not match the binding")
    geo = Geometry()
    lib.tutti_geometry_init(ctypes.byref(geo))
    if geo.size != ctypes.sizeof(Geometry):
        raise OSError(errno.EPROTO, "libtutti's geometry does not match the binding")
    # The engines' structures: the library refuses a size that is not its own (-EINVAL). Engine
    # posix has an option (0).
    info = EngineInfo(size=ctypes.sizeof(EngineInfo))
    opt = EngineOption(size=ctypes.sizeof(EngineOption))
    if lib.tutti_engine_info(1, ctypes.byref(info)) == -errno.EINVAL or \
            lib.tutti_engine_option(1, 0, ctypes.byref(opt)) == -errno.EINVAL:
        raise OSError(errno.EPROTO, "libtutti's engine descriptions do not match the binding")
    buf = (ctypes.c_uint8 * (4 * ctypes.sizeof(RemoteOpts)))()
    lib.tutti_remote_opts_init(buf)
    theirs = ctypes.cast(buf, ctypes.POINTER(c_u32))[0]
    if theirs != ctypes.sizeof(RemoteOpts):
        raise OSError(errno.EPROTO, f"libtutti's remote options are {theirs} bytes, ours "
                      f"{ctypes.sizeof(RemoteOpts)}: the binding does not match the library")


_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """The loaded library (once per process)."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        # find_library gives a bare name (libtutti.so.N), which the loader resolves itself.
        if len(path.parts) > 1 and not path.exists():
            tried.append(str(path))
            continue
        handle = ctypes.CDLL(str(path))
        _declare(handle)
        check_abi(handle)
        _lib = handle
        return _lib
    raise OSError(errno.ENOENT, "libtutti not found (install the package with pip, build it with "
                  "`make build`, or set TUTTI_LIBRARY to its path); looked at: "
                  + ", ".join(tried or ["nothing"]))
