# SPDX-License-Identifier: Apache-2.0
"""The handles a connector holds: one store handle per process and store, which the scheduler
side and the worker side of one engine share when they run in one process, and the remote tier's
(tutti/serving/remote_tier.py).

A store file admits one opener (it is locked at open), so when vLLM runs its scheduler and its
worker in one process both sides must use one handle. The table is process-wide because the
file lock is; it is keyed by what the store was opened with and counts its users."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from tutti.remote import Remote
from tutti.serving import remote_tier
from tutti.serving.config import ServingContext, TuttiConfig
from tutti.serving.keys import KEY_BYTES
from tutti.store import Geometry, Store

log = logging.getLogger(__name__)

# The library's log level the connector's stores use: information, so that what the store
# found at open (its size, engine, what recovery dropped) appears in the engine's log.
LOG_INFO = 2

StoreKey = tuple[tuple[str, ...], Geometry, bytes, str, str]
RemoteKey = remote_tier.HandleKey


@dataclass
class _Entry:
    store: Store
    users: int = 0


_lock = threading.Lock()
_stores: dict[StoreKey, _Entry] = {}


def acquire_store(cfg: TuttiConfig, dirs: list[str], geo: Geometry,
                  ns: bytes) -> tuple[StoreKey, Store]:
    """The process's handle of the store in ``dirs``, opened by the first user; give it back
    with ``release_store(key)``.

    Missing directories are created with their parents (mode 0700). A directory that holds a
    store of another namespace (another model, other weights, another layout) gets an empty
    store of this one: that KV can never be served again, and the library logs the
    replacement as a warning."""
    key = (tuple(dirs), geo, ns, cfg.engine, cfg.durability)
    with _lock:
        entry = _stores.get(key)
        if entry is None:
            for d in dirs:
                os.makedirs(d, mode=0o700, exist_ok=True)
            store = _open_store(cfg, dirs, geo, ns)
            entry = _stores[key] = _Entry(store)
            log.info("tutti: store %s opened (%s)", dirs, ns.decode())
        entry.users += 1
        return key, entry.store


def _open_store(cfg: TuttiConfig, dirs: list[str], geo: Geometry, ns: bytes) -> Store:
    # Engine "auto" falls back inside the store (to the CPU-driven engine where gpu-uring
    # cannot be set up, to posix where io_uring is refused), with one log line saying why.
    return Store(dirs, geo, capacity_bytes=cfg.capacity_bytes, ns=ns, engine=cfg.engine,
                 durability=cfg.durability, key_bytes=KEY_BYTES,
                 staging_bytes=cfg.staging_bytes, engine_opts=cfg.engine_opts, replace=True,
                 log=log, log_level=LOG_INFO)


def release_store(key: StoreKey) -> None:
    """One user fewer; the last one closes the store."""
    with _lock:
        entry = _stores.get(key)
        if entry is None:
            return
        entry.users -= 1
        if entry.users == 0:
            entry.store.close()
            del _stores[key]


def acquire_remote(ctx: ServingContext) -> tuple[RemoteKey | None, Remote | None]:
    """The process's handle of the remote tier when ``remote`` is configured, or (None, None)
    when it is not or cannot be reached: the cluster is a cache, the local store serves on."""
    rcfg = ctx.cfg.remote
    if rcfg is None:
        return None, None
    try:
        return remote_tier.acquire(rcfg, ctx.geo, ctx.namespace(with_rank=False),
                                   rank=ctx.global_rank, nr_ranks=ctx.tp * ctx.pp, tp=ctx.tp,
                                   pp=ctx.pp)
    except Exception as e:
        log.warning("tutti: remote tier unavailable (%s); serving from the local store only", e)
        return None, None


def release_remote(ctx: ServingContext, key: RemoteKey | None) -> None:
    if key is not None and ctx.cfg.remote is not None:
        remote_tier.release(key, ctx.cfg.remote.flush_on_exit_ms)
