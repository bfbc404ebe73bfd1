# SPDX-License-Identifier: Apache-2.0
"""The remote tier of a connector (docs/cluster.md): configuration, the process-wide handle,
and the rule that decides whether a remote hit is worth fetching.

``kv_connector_extra_config["remote"]`` turns it on::

    {"engine": "mooncake", "master": "10.0.0.1:27051",
     "metadata": "http://10.0.0.1:27080/metadata", "local_hostname": "10.0.0.2"}
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from tutti.remote import Remote, key_prefix
from tutti.store import Geometry

if TYPE_CHECKING:
    from tutti.mooncake import MooncakeProvider

log = logging.getLogger(__name__)

_PUBLISH = ("all", "none")
_KINDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}


@dataclass(frozen=True)
class RemoteConfig:
    master: str
    local_hostname: str
    metadata: str = "P2PHANDSHAKE"
    protocol: str = "tcp"
    device: str = ""
    timeout_ms: int = 500
    lookup_timeout_ms: int = 50
    rpc_timeout_ms: int = 2000
    connect_timeout_ms: int = 1000
    ring_mb: int = 64
    publish: str = "all"
    publish_mb: int = 64
    publish_mbps: float = 0.0
    breaker_faults: int = 3
    breaker_open_ms: int = 1000
    accept: str = "cost"
    fetch_gbps: float = 1.0
    prefill_tokens_per_s: float = 10000.0
    flush_on_exit_ms: int = 2000
    setup_timeout_ms: int = 5000

    @classmethod
    def from_extra(cls, extra: Any) -> RemoteConfig | None:
        if extra is None:
            return None
        if not isinstance(extra, dict):
            raise ValueError("TuttiConnector: \"remote\" must be an object")
        extra = dict(extra)
        engine = extra.pop("engine", "mooncake")
        if engine != "mooncake":
            raise ValueError(f"TuttiConnector: remote engine {engine!r} is not supported "
                             "(\"mooncake\")")
        defaults: dict[str, Any] = {f.name: f.default for f in fields(cls)}
        unknown = sorted(set(extra) - set(defaults))
        if unknown:
            raise ValueError(f"TuttiConnector: unknown remote keys {unknown}; known: "
                             f"{sorted(set(defaults) | {'engine'})}")
        for req in ("master", "local_hostname"):
            if not extra.get(req):
                raise ValueError(f"TuttiConnector: remote needs \"{req}\"")
        # Every value is converted to its default's type (master and local_hostname: text).
        values: dict[str, Any] = {}
        for k, v in extra.items():
            kind = str if k in ("master", "local_hostname") else type(defaults[k])
            try:
                if isinstance(v, bool) and kind is not bool:
                    raise ValueError
                values[k] = kind(v)
            except (TypeError, ValueError):
                raise ValueError(f"TuttiConnector: remote \"{k}\" must be "
                                 f"{_KINDS.get(kind, kind.__name__)}, not {v!r}") from None
        cfg = cls(**values)
        if cfg.publish not in _PUBLISH:
            raise ValueError(f"TuttiConnector: remote publish must be one of {_PUBLISH}")
        if cfg.accept not in ("cost", "always"):
            raise ValueError("TuttiConnector: remote accept must be \"cost\" or \"always\"")
        if cfg.timeout_ms <= 0 or cfg.lookup_timeout_ms <= 0 or cfg.ring_mb <= 0 or \
                cfg.fetch_gbps <= 0 or cfg.prefill_tokens_per_s <= 0:
            raise ValueError("TuttiConnector: remote timeout_ms, lookup_timeout_ms, ring_mb, "
                             "fetch_gbps and prefill_tokens_per_s must be positive")
        return cfg


# One handle per process and configuration, shared by the scheduler and the worker when they
# run in one process (as the store is): it is one Mooncake client.
HandleKey = tuple[RemoteConfig, Geometry, bytes, int, int]
_lock = threading.Lock()


@dataclass
class _Entry:
    remote: Remote
    provider: MooncakeProvider
    users: int = 0


_handles: dict[HandleKey, _Entry] = {}
# configuration -> when connecting last failed, and how (not retried for RETRY_S)
_failed: dict[RemoteConfig, tuple[float, Exception]] = {}
RETRY_S = 60


def _connect(cfg: RemoteConfig) -> MooncakeProvider:
    """A Mooncake client, or an error within setup_timeout_ms: Mooncake's own setup retries a
    missing master for about a minute and a half. A client that connects after we gave up is
    closed by its thread."""
    from tutti.mooncake import MooncakeProvider

    # Mooncake's setup holds the GIL while it retries: a master that does not even accept a
    # connection is found out here first, within the connect timeout.
    host, sep, port = cfg.master.rpartition(":")
    if sep and port.isdigit() and "://" not in cfg.master:
        try:
            socket.create_connection((host, int(port)),
                                     timeout=cfg.connect_timeout_ms / 1000).close()
        except OSError as e:
            raise ConnectionError(f"Mooncake master {cfg.master} unreachable: {e}") from None
    state: dict[str, Any] = {"gave_up": False}
    lock = threading.Lock()
    done = threading.Event()

    def setup() -> None:
        try:
            p = MooncakeProvider(cfg.local_hostname, cfg.master, cfg.metadata, cfg.protocol,
                                 cfg.device, rpc_timeout_ms=cfg.rpc_timeout_ms,
                                 connect_timeout_ms=cfg.connect_timeout_ms)
        except Exception as e:
            state["error"] = e
            p = None
        with lock:
            state["provider"] = p
            late = state["gave_up"]
            done.set()
        if late and p is not None:
            p.close()

    threading.Thread(target=setup, daemon=True, name="tutti-mooncake-setup").start()
    done.wait(cfg.setup_timeout_ms / 1000)
    with lock:
        if not done.is_set():
            state["gave_up"] = True
            raise TimeoutError(f"Mooncake master {cfg.master} not reached within "
                               f"{cfg.setup_timeout_ms} ms")
    provider: MooncakeProvider | None = state["provider"]
    if provider is None:
        raise state["error"]
    return provider


def acquire(cfg: RemoteConfig, geo: Geometry, ns: bytes, rank: int = 0, nr_ranks: int = 1,
            tp: int = 1, pp: int = 1) -> tuple[HandleKey, Remote]:
    key = (cfg, geo, ns, rank, nr_ranks)
    with _lock:
        entry = _handles.get(key)
        if entry is None:
            failed = _failed.get(cfg)
            if failed is not None and time.monotonic() - failed[0] < RETRY_S:
                raise failed[1]
            try:
                provider = _connect(cfg)
            except Exception as e:
                _failed[cfg] = (time.monotonic(), e)
                raise
            try:
                remote = Remote(geo, provider, key_prefix(ns, tp, pp), ns=ns, rank=rank,
                                nr_ranks=nr_ranks, timeout_ms=cfg.timeout_ms,
                                lookup_timeout_ms=cfg.lookup_timeout_ms,
                                ring_bytes=cfg.ring_mb << 20,
                                publish_bytes=(cfg.publish_mb << 20
                                               if cfg.publish != "none" else 0),
                                publish_rate=int(cfg.publish_mbps * 1e6),
                                breaker_faults=cfg.breaker_faults,
                                breaker_open_ms=cfg.breaker_open_ms, log=log)
            except Exception:
                provider.close()
                raise
            entry = _handles[key] = _Entry(remote, provider)
            log.info("tutti: remote tier on Mooncake master %s as %s (%s)", cfg.master,
                     cfg.local_hostname, key_prefix(ns, tp, pp))
        entry.users += 1
        return key, entry.remote


def release(key: HandleKey, flush_ms: int = 0) -> None:
    with _lock:
        entry = _handles.get(key)
        if entry is None:
            return
        entry.users -= 1
        if entry.users == 0:
            if flush_ms and entry.remote.publish_enabled:
                entry.remote.flush(flush_ms)
            entry.remote.close()
            entry.provider.close()
            del _handles[key]


def worth_fetching(cfg: RemoteConfig, remote: Remote, chunks: int, tokens: int,
                   record_bytes: int) -> bool:
    """Whether fetching ``chunks`` records is estimated faster than recomputing ``tokens``
    tokens: bytes over the measured fetch bandwidth (the configured one until a fetch ran), plus
    the measured lookup round trip, against tokens over the prefill rate."""
    if cfg.accept == "always":
        return True
    st = remote.stats()
    gbps = st["fetch_bytes"] / st["fetch_ns"] if st["fetch_ns"] else cfg.fetch_gbps
    rtt = st["lookup_ns"] / st["lookups"] / 1e9 if st["lookups"] else 0.001
    fetch_s = chunks * record_bytes / (gbps * 1e9) + rtt
    return fetch_s < tokens / cfg.prefill_tokens_per_s
