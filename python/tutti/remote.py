# SPDX-License-Identifier: Apache-2.0
"""The remote tier in Python (include/tutti/remote.h): ``Remote`` over a provider object.

A provider is any object with these methods, each taking Python lists and returning a list of
per-object results (or raising, which the tier counts as a fault):

* ``exists(keys)`` -> 1 (present) or 0 per key;
* ``get_into(keys, addrs, lens)`` -> bytes read or a negative errno per key (-ENOENT: absent);
* ``put_from(keys, addrs, lens)`` -> 0 (written or already there) or a negative errno per key;
* ``register(addr, length)`` / ``unregister(addr, length)`` -> 0 or a negative errno.

``tutti.mooncake.MooncakeProvider`` is the Mooncake Store one. The library calls the provider
from its own threads, through ctypes callbacks (which take the GIL for the duration of a call).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tutti import _lib as L
from tutti.store import KV, ChunkRequest, Geometry, _check, _Handle

_log = logging.getLogger("tutti.remote")
_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}

KEY_FORMAT_VERSION = 1

# The C side of the remote tier (callback types, options, stats) is declared with the rest of
# the library in tutti._lib.
EXISTS_FN, GET_FN, PUT_FN, MEM_FN = L.EXISTS_FN, L.GET_FN, L.PUT_FN, L.MEM_FN
RemoteOps, RemoteOpts, RemoteStats = L.RemoteOps, L.RemoteOpts, L.RemoteStats
STATS_FIELDS = L.REMOTE_STATS_FIELDS


class Provider(Protocol):
    """What the remote tier calls (the module's docstring says what each returns)."""

    def exists(self, keys: list[str]) -> Sequence[int]: ...

    def get_into(self, keys: list[str], addrs: list[int], lens: list[int]) -> Sequence[int]: ...

    def put_from(self, keys: list[str], addrs: list[int], lens: list[int]) -> Sequence[int]: ...

    def register(self, addr: int, length: int) -> int: ...

    def unregister(self, addr: int, length: int) -> int: ...


def _lib() -> ctypes.CDLL:
    return L.lib()


def key_prefix(ns: bytes, tp_size: int = 1, pp_size: int = 1) -> str:
    """``tutti/1/<ns>/<tp>.<pp>/``: <ns> is 16 hex digits of SHA-256 of the store namespace
    (model, dtype, layout, block and chunk sizes, hash settings, user namespace), so chunks of
    different models, layouts or parallel shapes never share a key. The rank and the chunk key
    follow."""
    digest = hashlib.sha256(bytes(ns)).hexdigest()[:16]
    return f"tutti/{KEY_FORMAT_VERSION}/{digest}/{int(tp_size)}.{int(pp_size)}/"


def _errno_of(e: BaseException) -> int:
    return -(e.errno or errno.EIO) if isinstance(e, OSError) else -errno.EIO


class Remote(_Handle):
    """An open remote tier (``tutti_remote_open``) over ``provider``."""

    _release = "tutti_remote_close"

    def __init__(self, geometry: Geometry, provider: Provider, prefix: str, ns: bytes = b"",
                 rank: int = 0, nr_ranks: int = 1, key_bytes: int = 32, timeout_ms: int = 1000,
                 ring_bytes: int = 64 << 20, publish_bytes: int = 64 << 20,
                 publish_rate: int = 0, breaker_faults: int = 3, breaker_open_ms: int = 1000,
                 lookup_timeout_ms: int = 50, log: logging.Logger | None = None) -> None:
        lib = _lib()
        self.geometry = geometry
        self.key_bytes = key_bytes
        self.provider = provider
        self._ops = RemoteOps(ctypes.sizeof(RemoteOps), EXISTS_FN(self._exists),
                              GET_FN(self._get_into), PUT_FN(self._put_from),
                              MEM_FN(self._register), MEM_FN(self._unregister))
        o = RemoteOpts()
        lib.tutti_remote_opts_init(ctypes.byref(o))
        self._prefix = prefix.encode()
        self._ns = ctypes.create_string_buffer(bytes(ns), max(1, len(ns)))
        o.key_bytes = key_bytes
        o.key_prefix = self._prefix
        o.rank = rank
        o.nr_ranks = nr_ranks
        o.ns = ctypes.addressof(self._ns)
        o.ns_bytes = len(ns)
        o.timeout_ms = int(timeout_ms)
        o.lookup_timeout_ms = int(lookup_timeout_ms)
        o.ring_bytes = int(ring_bytes)
        o.publish_bytes = int(publish_bytes)
        o.publish_rate = int(publish_rate)
        o.breaker_faults = int(breaker_faults)
        o.breaker_open_ms = int(breaker_open_ms)
        # The library's log lines go to ``log`` (the ``tutti.remote`` logger by default).
        logger = self._logger = log or _log
        self._log_fn = L.LOG_FN(lambda _arg, level, msg: logger.log(_LEVELS.get(level, 10),
                                                                    msg.decode(errors="replace")))
        o.log_fn = self._log_fn
        o.log_level = 1
        self._h = ctypes.c_void_p()
        _check(lib.tutti_remote_open(ctypes.byref(geometry.c()), ctypes.byref(self._ops), None,
                                     ctypes.byref(o), ctypes.byref(self._h)),
               "tutti_remote_open")
        self.record_bytes = int(lib.tutti_remote_record_bytes(self._h))
        self.publish_enabled = publish_bytes > 0

    # -- provider callbacks (library threads; never raise into C) --

    def _exists(self, _ctx: Any, keys: Any, n: int, present: Any) -> int:
        try:
            res = self.provider.exists([keys[i].decode() for i in range(n)])
            for i in range(n):
                present[i] = 1 if res[i] == 1 else 0
            return 0
        except Exception as e:  # a fault of the tier, counted by the breaker
            self._logger.debug("remote exists failed: %s", e)
            return _errno_of(e)

    def _get_into(self, _ctx: Any, keys: Any, bufs: Any, lens: Any, n: int, got: Any) -> int:
        try:
            res = self.provider.get_into([keys[i].decode() for i in range(n)],
                                         [bufs[i] for i in range(n)],
                                         [lens[i] for i in range(n)])
            for i in range(n):
                got[i] = int(res[i])
            return 0
        except Exception as e:
            self._logger.debug("remote get failed: %s", e)
            return _errno_of(e)

    def _put_from(self, _ctx: Any, keys: Any, bufs: Any, lens: Any, n: int, out: Any) -> int:
        try:
            res = self.provider.put_from([keys[i].decode() for i in range(n)],
                                         [bufs[i] for i in range(n)],
                                         [lens[i] for i in range(n)])
            for i in range(n):
                out[i] = int(res[i])
            return 0
        except Exception as e:
            self._logger.debug("remote put failed: %s", e)
            return _errno_of(e)

    def _register(self, _ctx: Any, addr: int, length: int) -> int:
        try:
            return int(self.provider.register(addr, length))
        except Exception as e:
            self._logger.warning("remote tier: registering %d bytes failed: %s", length, e)
            return _errno_of(e)

    def _unregister(self, _ctx: Any, addr: int, length: int) -> int:
        try:
            return int(self.provider.unregister(addr, length))
        except Exception as e:
            self._logger.warning("remote tier: unregistering failed: %s", e)
            return _errno_of(e)

    # -- the API --

    def lookup(self, keys: Sequence[bytes], first: int = 0) -> int:
        """Chunks of the chain ``keys`` from ``first`` on that the pool holds for every rank."""
        buf = ctypes.create_string_buffer(b"".join(keys), max(1, len(keys) * self.key_bytes))
        with self._call():
            return int(_check(_lib().tutti_remote_lookup(self._h, buf, len(keys), first),
                              "tutti_remote_lookup"))

    def _transfer(self, fn: Callable[..., int], kv: KV, reqs: Sequence[ChunkRequest],
              what: str) -> tuple[int, list[int]]:
        creqs = (L.Request * len(reqs))(*[r.c(self.key_bytes) for r in reqs])
        total = sum(len(r.keys) - r.first_chunk for r in reqs)
        status = (L.c_i32 * max(1, total))()
        with self._call(), kv._call():
            n = _check(fn(self._h, kv._h, creqs, len(reqs), status), what)
        return int(n), list(status)[:total]

    def fetch(self, kv: KV, reqs: Sequence[ChunkRequest]) -> tuple[int, list[int]]:
        """Fetch, verify, scatter; (chunks loaded, per-chunk status: 0 or -errno)."""
        return self._transfer(_lib().tutti_remote_fetch, kv, reqs, "tutti_remote_fetch")

    def publish(self, kv: KV, reqs: Sequence[ChunkRequest]) -> tuple[int, list[int]]:
        """Queue for publishing; (chunks queued, per-chunk status: 0 queued, 1 known, -errno)."""
        return self._transfer(_lib().tutti_remote_publish, kv, reqs, "tutti_remote_publish")

    def flush(self, timeout_ms: int = 10000) -> bool:
        """Wait for the publish queue to drain; False when it did not within the timeout."""
        with self._call():
            rc = _lib().tutti_remote_flush(self._h, int(timeout_ms))
        if rc == -errno.ETIMEDOUT:
            return False
        _check(rc, "tutti_remote_flush")
        return True

    def stats(self) -> dict[str, int]:
        s = RemoteStats()
        s.size = ctypes.sizeof(RemoteStats)
        with self._call():
            _check(_lib().tutti_remote_get_stats(self._h, ctypes.byref(s)),
                   "tutti_remote_get_stats")
        out = {n: int(getattr(s, n)) for n in STATS_FIELDS}
        out["up"] = int(s.up)
        return out
