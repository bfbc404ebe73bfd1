# SPDX-License-Identifier: Apache-2.0
"""The store API in Python: ``Store``, ``KV`` and ``ChunkRequest``. Errors raise ``OSError``
with the library's errno and message; nothing here depends on torch."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

from tutti import _lib as L

_log = logging.getLogger("tutti")
_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def _check(rc: int, what: str) -> int:
    if rc < 0:
        msg = L.lib().tutti_strerror(int(rc)).decode()
        raise OSError(-int(rc), f"{what}: {msg}")
    return rc


def version() -> str:
    return L.lib().tutti_version().decode()


@dataclass(frozen=True)
class EngineOption:
    """One key of an engine's ``engine_opts`` (``struct tutti_engine_option``): a whole number
    from ``min`` to ``max``, or one of ``choices``."""

    name: str
    help: str
    default: int | str
    min: int = 0
    max: int = 0
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Engine:
    """An engine of the library (``struct tutti_engine_info``) and the options it takes."""

    name: str
    description: str
    options: tuple[EngineOption, ...]


def engines() -> dict[str, Engine]:
    """Every engine the library has, by name, in its order, with the options each takes: the
    library lists them (``tutti_engine_count/info/option``), so a new engine or option needs no
    change here."""
    out: dict[str, Engine] = {}
    for name, k in L.engines().items():
        info = L.engine_info(k)
        options = []
        for i in range(info.nr_options):
            o = L.engine_option(k, i)
            if o.kind == L.ENGINE_OPTION_CHOICE:
                choices = tuple(o.choices[c].decode() for c in range(o.nr_choices))
                options.append(EngineOption(o.name.decode(), o.help.decode(),
                                            choices[o.default], 0, o.nr_choices - 1, choices))
            else:
                options.append(EngineOption(o.name.decode(), o.help.decode(), int(o.default),
                                            int(o.min), int(o.max)))
        out[name] = Engine(name, info.description.decode(), tuple(options))
    return out


def engine_opts_text(opts: str | Mapping[str, int | str]) -> str:
    """``engine_opts`` as the library takes it: a string as it is, a mapping as key=value pairs
    separated by commas. The engine checks keys and values when the store opens; this only
    refuses what the string could not carry (a separator inside a key or value, a bool)."""
    if isinstance(opts, str):
        return opts
    pairs = []
    for key, value in opts.items():
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise OSError(errno.EINVAL, f"engine_opts: {key}={value!r} is not a number or a name")
        if any(c in f"{key}{value}" for c in ",="):
            raise OSError(errno.EINVAL, f"engine_opts: {key}={value!r} holds ',' or '='")
        pairs.append(f"{key}={value}")
    return ",".join(pairs)


@dataclass(frozen=True)
class Geometry:
    """KV geometry of one process's share of a model (see include/tutti/geometry.h)."""

    nr_layers: int
    nr_kv_heads: int
    head_dim: int
    elem_bytes: int = 2
    kv_planes: int = 2
    block_tokens: int = 16
    chunk_tokens: int = 256

    def c(self) -> L.Geometry:
        g = L.Geometry()
        L.lib().tutti_geometry_init(ctypes.byref(g))
        for name in ("nr_layers", "nr_kv_heads", "head_dim", "elem_bytes", "kv_planes",
                     "block_tokens", "chunk_tokens"):
            setattr(g, name, int(getattr(self, name)))
        _check(L.lib().tutti_geometry_check(ctypes.byref(g)), "geometry")
        return g

    @property
    def layer_block_bytes(self) -> int:
        return int(L.lib().tutti_geometry_layer_block_bytes(ctypes.byref(self.c())))

    @property
    def blocks_per_chunk(self) -> int:
        return self.chunk_tokens // self.block_tokens

    @property
    def slot_bytes(self) -> int:
        return int(L.lib().tutti_geometry_slot_bytes(ctypes.byref(self.c())))


class _InFlight:
    """The calls in flight on one handle. ctypes releases the GIL for the length of a C call,
    so another thread may close the handle while a call runs; close() waits for them."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.calls = 0
        self.closing = False
        self.closed = False


class _Handle:
    """A library handle in ``self._h``, released by the C function named ``_release`` on
    ``close()``, at the end of a ``with`` block, or when the object is collected.

    Every C call on the handle runs inside ``_call()``: ``close()`` marks the handle closing
    (new calls raise ``OSError(EBADF)``), closes the handles that depend on it (a pipeline over
    a store), waits until the calls in flight have returned, and only then releases it."""

    _release: str = ""
    _h: ctypes.c_void_p

    def _in_flight(self) -> _InFlight:
        return self.__dict__.setdefault("_flight", _InFlight())

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        f = self._in_flight()
        with f.cond:
            if f.closing or not getattr(self, "_h", None):
                raise OSError(errno.EBADF, f"{type(self).__name__} is closed")
            f.calls += 1
        try:
            yield
        finally:
            with f.cond:
                f.calls -= 1
                if f.calls == 0:
                    f.cond.notify_all()

    def _depends_on(self, *owners: _Handle) -> None:
        """Close this handle before any of ``owners`` is closed: it uses them in C."""
        for o in owners:
            o.__dict__.setdefault("_dependents", weakref.WeakSet()).add(self)

    def close(self) -> None:
        f = self._in_flight()
        with f.cond:
            if f.closing:
                f.cond.wait_for(lambda: f.closed)  # another thread is closing it
                return
            f.closing = True
        for d in list(self.__dict__.get("_dependents", ())):
            d.close()
        with f.cond:
            f.cond.wait_for(lambda: f.calls == 0)
        if getattr(self, "_h", None):
            getattr(L.lib(), self._release)(self._h)
            self._h = ctypes.c_void_p()
        with f.cond:
            f.closed = True
            f.cond.notify_all()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # also at interpreter exit
            self.close()


class KV(_Handle):
    """Registered paged KV memory: ``segments[l * segs_per_layer + s] = (base, stride, bytes)``.

    The memory must outlive this object; it is only read and written during load and save."""

    _release = "tutti_kv_destroy"

    def __init__(self, geometry: Geometry, segments: Sequence[tuple[int, int, int]],
                 segs_per_layer: int, nr_blocks: int, mem: str = "host") -> None:
        n = len(segments)
        arr = (L.Segment * n)(*[L.Segment(int(b), int(s), int(c)) for b, s, c in segments])
        self._h = ctypes.c_void_p()
        _check(
            L.lib().tutti_kv_create(ctypes.byref(geometry.c()), arr, segs_per_layer, nr_blocks,
                                    L.MEM_CUDA if mem == "cuda" else L.MEM_HOST,
                                    ctypes.byref(self._h)),
            "tutti_kv_create",
        )
        self.nr_blocks = nr_blocks


@dataclass
class ChunkRequest:
    """Chunks [first_chunk, len(keys)) of the key chain ``keys`` (root first), moved to or from
    ``block_ids``; a load may skip the first ``skip_blocks`` blocks of chunk ``first_chunk``."""

    keys: list[bytes]
    block_ids: list[int]
    first_chunk: int = 0
    skip_blocks: int = 0
    _keep: list[Any] = field(default_factory=list, repr=False)

    def c(self, key_bytes: int) -> L.Request:
        for k in self.keys:
            if len(k) != key_bytes:
                raise OSError(22, f"keys are {key_bytes} bytes, got one of {len(k)}")
        keys = ctypes.create_string_buffer(b"".join(self.keys), max(1, len(self.keys) * key_bytes))
        ids = (L.c_u32 * max(1, len(self.block_ids)))(*self.block_ids)
        self._keep = [keys, ids]
        return L.Request(ctypes.sizeof(L.Request), len(self.keys), ctypes.addressof(keys),
                         self.first_chunk, self.skip_blocks, len(self.block_ids), 0, ids)


class Store(_Handle):
    """An open store (``tutti_store_open``). Thread-safe, as the C handle is, close() included:
    it waits for calls in flight on other threads, and calls after it raise OSError(EBADF).

    ``engine`` is one of the library's engines (``engines()``): "uring" (the default), "posix",
    "gpu-uring", "gds" or "auto" (gpu-uring for KV in GPU memory where it can be set up, the
    CPU-driven engine otherwise; a fallback logs one warning saying why); ``engine_for(kv)`` says
    which moves a KV. ``engine_opts`` are that engine's options, a string of key=value pairs
    separated by commas ("workers=29,sms=5" for gpu-uring, "threads=8" for posix) or a mapping
    of them (``{"workers": 29, "sms": 5}``); ``engines()[engine].options`` lists the keys, and
    the engine refuses an unknown key or a value out of range (``OSError(EINVAL)`` naming
    them)."""

    _release = "tutti_store_close"

    def __init__(self, dirs: Sequence[str | PathLike[str]], geometry: Geometry,
                 capacity_bytes: int, ns: bytes = b"", engine: str = "uring",
                 durability: str = "fast", create: bool = True, key_bytes: int = 32,
                 staging_bytes: int = 0, queue_depth: int = 0, repair: bool = False,
                 engine_opts: str | Mapping[str, int | str] = "", replace: bool = False,
                 log: logging.Logger | None = None, log_level: int = 1,
                 data_files: int = 0) -> None:
        """``replace``: a store of another geometry, key size or namespace in ``dirs`` is
        replaced by an empty one (TUTTI_OPEN_REPLACE) instead of refused. ``data_files``: data
        files in each directory of a new store (``tutti_store_opts.data_files``, 1..16; 0, the
        default, for the library's: up to 16, fewer for a small store). The library's log
        lines up to ``log_level`` (0 errors, 1 warnings, 2 information) go to ``log`` (the
        ``tutti`` logger by default); an open that fails says in its exception what the
        library logged as errors."""
        lib = L.lib()
        self.geometry = geometry
        self.key_bytes = key_bytes
        o = L.StoreOpts()
        lib.tutti_store_opts_init(ctypes.byref(o))
        self._dirs = (ctypes.c_char_p * len(dirs))(*[str(d).encode() for d in dirs])
        self._ns = ctypes.create_string_buffer(bytes(ns), max(1, len(ns)))
        o.flags = (L.OPEN_CREATE if create else 0) | (L.OPEN_REPAIR if repair else 0) | \
            (L.OPEN_REPLACE if replace else 0)
        o.dirs = ctypes.cast(self._dirs, ctypes.POINTER(ctypes.c_char_p))
        o.nr_dirs = len(dirs)
        engines = L.engines()
        if engine not in engines:
            raise OSError(22, f"unknown engine {engine!r} (one of {', '.join(engines)})")
        if durability not in L.DURABILITY:
            raise OSError(22, f"unknown durability {durability!r} (fast or durable)")
        o.engine = engines[engine]
        self._engine_opts = engine_opts_text(engine_opts).encode()
        o.engine_opts = self._engine_opts
        o.capacity_bytes = int(capacity_bytes)
        o.ns = ctypes.addressof(self._ns)
        o.ns_bytes = len(ns)
        o.key_bytes = key_bytes
        if staging_bytes:
            o.staging_bytes = int(staging_bytes)
        if queue_depth:
            o.queue_depth = int(queue_depth)
        o.durability = L.DURABILITY[durability]
        o.data_files = int(data_files)
        # The library's log lines go to Python logging (kept referenced while the store lives);
        # the open's error lines are also kept for its exception. The callback holds no
        # reference to the store, which stays collectable without the cycle collector.
        logger = log or _log
        open_errors: list[str] = []
        opening = [True]

        def log_line(_arg: Any, level: int, msg: bytes) -> None:
            text = msg.decode(errors="replace")
            if level == 0 and opening[0]:
                open_errors.append(text)
            logger.log(_LEVELS.get(level, logging.DEBUG), text)

        self._log_fn = L.LOG_FN(log_line)
        o.log_fn = self._log_fn
        o.log_level = log_level
        self._h = ctypes.c_void_p()
        rc = lib.tutti_store_open(ctypes.byref(geometry.c()), ctypes.byref(o),
                                  ctypes.byref(self._h))
        opening[0] = False
        if rc < 0:
            why = lib.tutti_strerror(int(rc)).decode()
            raise OSError(-int(rc), "; ".join([f"tutti_store_open: {why}"] + open_errors))

    def lookup(self, keys: Sequence[bytes]) -> tuple[int, int]:
        """(leading chunks stored, paged blocks they hold) for the key chain ``keys``."""
        buf = ctypes.create_string_buffer(b"".join(keys), max(1, len(keys) * self.key_bytes))
        blocks = L.c_u64()
        with self._call():
            n = _check(L.lib().tutti_store_lookup(self._h, buf, len(keys),
                                                  ctypes.byref(blocks)), "tutti_store_lookup")
        return int(n), int(blocks.value)

    def keys(self, batch: int = 4096) -> dict[bytes, int]:
        """Every stored chunk: {key: paged blocks it holds} (``tutti_store_list``)."""
        out: dict[bytes, int] = {}
        cursor = L.c_u64(0)
        keys = ctypes.create_string_buffer(batch * self.key_bytes)
        blocks = (L.c_u32 * batch)()
        while True:
            with self._call():
                n = _check(L.lib().tutti_store_list(self._h, ctypes.byref(cursor), keys, blocks,
                                                    batch), "tutti_store_list")
            if n == 0:
                return out
            raw = keys.raw
            for i in range(n):
                out[raw[i * self.key_bytes:(i + 1) * self.key_bytes]] = int(blocks[i])

    def _chunks(self, reqs: Sequence[ChunkRequest]) -> int:
        total = 0
        for r in reqs:
            total += len(r.keys) - r.first_chunk
        return total

    def load(self, kv: KV, reqs: Sequence[ChunkRequest], layer_begin: int = 0,
             layer_end: int | None = None) -> tuple[int, list[int]]:
        """Load; returns (chunks loaded, per-chunk status list: 0 or a negative errno)."""
        if layer_end is None:
            layer_end = self.geometry.nr_layers
        creqs = (L.Request * len(reqs))(*[r.c(self.key_bytes) for r in reqs])
        status = (L.c_i32 * max(1, self._chunks(reqs)))()
        with self._call(), kv._call():
            n = _check(L.lib().tutti_store_load(self._h, kv._h, creqs, len(reqs), layer_begin,
                                                layer_end, status), "tutti_store_load")
        return int(n), list(status)[: self._chunks(reqs)]

    def save(self, kv: KV, reqs: Sequence[ChunkRequest]) -> tuple[int, list[int]]:
        """Save; returns (chunks written, per-chunk status: 0 stored, 1 present, or -errno)."""
        creqs = (L.Request * len(reqs))(*[r.c(self.key_bytes) for r in reqs])
        status = (L.c_i32 * max(1, self._chunks(reqs)))()
        with self._call(), kv._call():
            n = _check(L.lib().tutti_store_save(self._h, kv._h, creqs, len(reqs), status),
                       "tutti_store_save")
        return int(n), list(status)[: self._chunks(reqs)]

    def engine_for(self, kv: KV) -> str:
        """The engine that moves ``kv``'s KV (``tutti_store_engine``): the one the store was
        opened with, or what ``auto`` chose for it ("gpu-uring" for GPU KV where it could be
        set up, else "uring", or "posix" where io_uring is refused)."""
        with self._call(), kv._call():
            kind = _check(L.lib().tutti_store_engine(self._h, kv._h), "tutti_store_engine")
        return str(L.lib().tutti_engine_name(kind).decode())

    def stats(self) -> dict[str, int]:
        s = L.Stats()
        s.size = ctypes.sizeof(L.Stats)
        with self._call():
            _check(L.lib().tutti_store_get_stats(self._h, ctypes.byref(s)),
                   "tutti_store_get_stats")
        return {name: int(getattr(s, name)) for name in L.STATS_FIELDS}
