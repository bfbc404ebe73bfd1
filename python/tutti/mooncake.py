# SPDX-License-Identifier: Apache-2.0
"""The Mooncake Store provider of the remote tier (docs/cluster.md).

It drives Mooncake's own Python client, ``mooncake.store.MooncakeDistributedStore``, from the
package ``mooncake-transfer-engine-non-cuda`` (pinned in scripts/setup-vllm-venv.sh). That
package ships the client as a Python extension only, not the C API of ``store_c.h`` as a
library, so the library's ops table is filled from Python (tutti.remote). The client releases
the GIL while data moves.

The client is a "pure" one by default (global_segment_size 0): it contributes no memory to the
pool; a node's ``mooncake_client`` process does, and outlives serving processes.
"""

from __future__ import annotations

import errno
import os
from typing import Any

# Mooncake's error codes (mooncake-store types.h) and what they mean to the tier.
_NOT_FOUND = -704
_ALREADY_EXISTS = -705
_NO_AVAILABLE_HANDLE = -200
_LEASE_EXPIRED = -707


def _errno(code: int) -> int:
    return {_NOT_FOUND: -errno.ENOENT, _NO_AVAILABLE_HANDLE: -errno.ENOSPC,
            _LEASE_EXPIRED: -errno.ESTALE}.get(code, -errno.EIO)


class MooncakeProvider:
    """One Mooncake Store client: ``setup`` against a master, then the provider methods of
    tutti.remote over its batch calls.

    rpc_timeout_ms and connect_timeout_ms bound every Mooncake RPC (Mooncake's defaults are 30 s);
    they are process-wide environment settings that Mooncake reads once, so the first provider
    of a process sets them unless the environment already does.
    """

    def __init__(self, local_hostname: str, master: str, metadata: str = "P2PHANDSHAKE",
                 protocol: str = "tcp", device: str = "", global_segment_bytes: int = 0,
                 local_buffer_bytes: int = 16 << 20, rpc_timeout_ms: int = 2000,
                 connect_timeout_ms: int = 1000) -> None:
        os.environ.setdefault("MC_RPC_TIMEOUT_MS", str(int(rpc_timeout_ms)))
        os.environ.setdefault("MC_RPC_CONNECT_TIMEOUT_MS", str(int(connect_timeout_ms)))
        from mooncake.store import MooncakeDistributedStore

        self._store: Any = MooncakeDistributedStore()
        rc = self._store.setup(str(local_hostname), str(metadata), int(global_segment_bytes),
                               int(local_buffer_bytes), str(protocol), str(device), str(master))
        if rc != 0:
            raise OSError(errno.ECONNREFUSED, f"Mooncake client setup against master {master} "
                          f"(metadata {metadata}, host {local_hostname}) failed: {rc}")

    def exists(self, keys: list[str]) -> list[int]:
        res = self._store.batch_is_exist(keys)
        if any(r < 0 for r in res):
            raise OSError(errno.EIO, "Mooncake batch_is_exist failed")
        return res

    def get_into(self, keys: list[str], addrs: list[int], lens: list[int]) -> list[int]:
        res = self._store.batch_get_into(keys, addrs, lens)
        return [r if r >= 0 else _errno(r) for r in res]

    def put_from(self, keys: list[str], addrs: list[int], lens: list[int]) -> list[int]:
        res = self._store.batch_put_from(keys, addrs, lens)
        return [0 if r in (0, _ALREADY_EXISTS) else _errno(r) for r in res]

    def register(self, addr: int, length: int) -> int:
        rc = self._store.register_buffer(addr, length)
        return 0 if rc == 0 else -errno.EIO

    def unregister(self, addr: int, length: int) -> int:
        rc = self._store.unregister_buffer(addr)
        return 0 if rc == 0 else -errno.EIO

    def remove_prefix(self, prefix: str) -> int:
        """Remove every object whose key starts with ``prefix`` (an administrator's purge)."""
        import re

        return self._store.remove_by_regex("^" + re.escape(prefix))

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
