# SPDX-License-Identifier: Apache-2.0
"""One serving "node" of the cluster tests, in a process of its own: a local Tutti store, a
remote tier over a Mooncake client, and synthetic paged KV whose bytes are a function of
(seed, chunk, layer), so another process can check them bit for bit.

Commands arrive as JSON lines on stdin; each answer is one JSON line on stdout."""

import ctypes
import hashlib
import json
import sys
import time
import traceback

import numpy as np

from tutti.mooncake import MooncakeProvider
from tutti.remote import Remote, key_prefix
from tutti.store import KV, ChunkRequest, Geometry, Store


def chain(seed, n):
    keys, prev = [], b"root"
    for i in range(n):
        prev = hashlib.blake2b(prev + f"{seed}/{i}".encode(), digest_size=32).digest()
        keys.append(prev)
    return keys


class Node:
    def __init__(self, a):
        self.geo = Geometry(**a["geometry"])
        self.bpc = self.geo.blocks_per_chunk
        self.lbb = self.geo.layer_block_bytes
        self.nr_blocks = a.get("nr_blocks", 64)
        ns = a.get("ns", "test").encode()
        self.store = Store([a["dir"]], self.geo, capacity_bytes=a.get("capacity_mb", 64) << 20,
                           ns=ns, engine=a.get("engine", "posix"))
        self.provider = MooncakeProvider(a["host"], a["master"], a["metadata"])
        self.remote = Remote(self.geo, self.provider,
                             key_prefix(ns, a.get("nr_ranks", 1)), ns=ns,
                             rank=a.get("rank", 0), nr_ranks=a.get("nr_ranks", 1),
                             timeout_ms=a.get("timeout_ms", 1000),
                             lookup_timeout_ms=a.get("lookup_timeout_ms", 200),
                             ring_bytes=int(a.get("ring_mb", 8) * 2**20),
                             publish_bytes=int(a.get("publish_mb", 8) * 2**20),
                             publish_rate=a.get("publish_rate", 0),
                             breaker_faults=a.get("breaker_faults", 3),
                             breaker_open_ms=a.get("breaker_open_ms", 1000))
        self.rank = a.get("rank", 0)
        # paged KV: layer-major, one segment per layer
        self.mem = np.zeros(self.geo.nr_layers * self.nr_blocks * self.lbb, dtype=np.uint8)
        base = self.mem.ctypes.data
        segs = [(base + layer * self.nr_blocks * self.lbb, self.lbb, self.lbb)
                for layer in range(self.geo.nr_layers)]
        self.kv = KV(self.geo, segs, 1, self.nr_blocks)

    def expected(self, seed, chunk):
        """(layers, bpc * lbb) bytes of a chunk: this rank's share of the prefix's KV."""
        rng = np.random.default_rng([seed, chunk, self.rank])
        return rng.integers(0, 256, size=(self.geo.nr_layers, self.bpc * self.lbb),
                            dtype=np.uint8)

    def _view(self):
        return self.mem.reshape(self.geo.nr_layers, self.nr_blocks, self.lbb)

    def fill(self, seed, chunks, blocks):
        v = self._view()
        for i, c in enumerate(chunks):
            e = self.expected(seed, c).reshape(self.geo.nr_layers, self.bpc, self.lbb)
            v[:, blocks[i * self.bpc:(i + 1) * self.bpc], :] = e

    def check(self, seed, chunks, blocks):
        v = self._view()
        out = []
        for i, c in enumerate(chunks):
            e = self.expected(seed, c).reshape(self.geo.nr_layers, self.bpc, self.lbb)
            out.append(bool(np.array_equal(v[:, blocks[i * self.bpc:(i + 1) * self.bpc], :], e)))
        return out

    def blocks(self, n, reverse=False):
        ids = list(range(n * self.bpc))
        return ids[::-1] if reverse else ids

    # -- commands --

    def save_publish(self, a):
        n, seed = a["chunks"], a["seed"]
        keys = chain(seed, n)
        blocks = self.blocks(n)
        self.fill(seed, range(n), blocks)
        _, saved = self.store.save(self.kv, [ChunkRequest(keys, blocks)])
        skip = set(a.get("skip", []))
        published = []
        t_publish = time.monotonic()
        for c in range(n):
            if saved[c] < 0 or c in skip:
                published.append(None)
                continue
            _, st = self.remote.publish(self.kv, [ChunkRequest(
                keys[:c + 1], blocks[c * self.bpc:(c + 1) * self.bpc], c)])
            published.append(st[0])
        t0 = time.monotonic()
        flushed = self.remote.flush(a.get("flush_ms", 20000)) if a.get("flush", True) else None
        return {"saved": saved, "published": published, "flushed": flushed,
                "flush_seconds": time.monotonic() - t0,
                "publish_seconds": time.monotonic() - t_publish}

    def lookup(self, a):
        keys = chain(a["seed"], a["chunks"])
        local, _ = self.store.lookup(keys)
        t0 = time.monotonic()
        try:
            remote = self.remote.lookup(keys, a.get("first", local))
        except OSError as e:
            remote = -e.errno
        return {"local": local, "remote": remote, "seconds": time.monotonic() - t0}

    def fetch(self, a):
        n, seed, first = a["chunks"], a["seed"], a.get("first", 0)
        keys = chain(seed, n)
        blocks = self.blocks(n - first, reverse=True)
        self.mem[:] = 0
        t0 = time.monotonic()
        loaded, status = self.remote.fetch(self.kv, [ChunkRequest(keys, blocks, first)])
        seconds = time.monotonic() - t0
        exact = self.check(seed, range(first, n), blocks)
        untouched = [bool(not self._view()[:, blocks[i * self.bpc:(i + 1) * self.bpc], :].any())
                     for i in range(n - first)]
        promoted = None
        if a.get("promote") and loaded:
            ok = first + loaded
            _, promoted = self.store.save(self.kv, [ChunkRequest(
                keys[:ok], blocks[:loaded * self.bpc], first)])
        return {"loaded": loaded, "status": status, "exact": exact, "untouched": untouched,
                "seconds": seconds, "promoted": promoted}

    def load_local(self, a):
        n, seed = a["chunks"], a["seed"]
        keys = chain(seed, n)
        blocks = self.blocks(n, reverse=True)
        self.mem[:] = 0
        t0 = time.monotonic()
        loaded, status = self.store.load(self.kv, [ChunkRequest(keys, blocks)])
        seconds = time.monotonic() - t0
        return {"loaded": loaded, "status": status, "exact": self.check(seed, range(n), blocks),
                "seconds": seconds}

    def forge(self, a):
        """Rewrite the object at key a["key"] (of chain seed/chunk) with one byte flipped, or
        copy another namespace's record there."""
        keys = chain(a["seed"], a["chunks"])
        key = self.remote_key(keys[a["chunk"]])
        src = self.remote_key(keys[a["chunk"]], a["src_ns"]) if "src_ns" in a else key
        size = self.remote.record_bytes
        buf = ctypes.create_string_buffer(size)
        addr = ctypes.addressof(buf)
        assert self.provider.register(addr, size) == 0
        try:
            got = self.provider.get_into([src], [addr], [size])[0]
            if got != size:
                return {"error": f"get {src}: {got}"}
            if "flip" in a:
                buf[a["flip"]] = bytes([buf.raw[a["flip"]] ^ 0xFF])
            self.provider._store.remove(key, True)
            length = a.get("length", size)
            res = self.provider.put_from([key], [addr], [length])
            return {"put": res[0]}
        finally:
            self.provider.unregister(addr, size)

    def remote_key(self, key, ns=None):
        ns = (ns or self.ns_name).encode()
        return f"{key_prefix(ns, self.nr_ranks)}{self.rank}/{key.hex()}"

    def stats(self, a):
        return {"remote": self.remote.stats(), "store": self.store.stats()}

    def close(self, a):
        self.remote.close()
        self.provider.close()
        self.store.close()
        return {}


def main():
    node = None
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "open":
                node = Node(cmd)
                node.ns_name = cmd.get("ns", "test")
                node.nr_ranks = cmd.get("nr_ranks", 1)
                out = {"record_bytes": node.remote.record_bytes}
            else:
                out = getattr(node, cmd["op"])(cmd)
        except Exception as e:
            out = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        print(json.dumps(out), flush=True)
        if cmd["op"] == "close":
            break


if __name__ == "__main__":
    main()
