# SPDX-License-Identifier: Apache-2.0
"""Fetch bandwidth of the remote tier over loopback against the local store's load bandwidth.

A real Mooncake cluster (master + three nodes, python/tests/remote/cluster.py) on 127.0.0.x;
node 0 stores CHUNKS Llama-3-8B chunks (32 layers x 1 MiB objects: 32 MiB + 4 KiB records) in
its local store and publishes them; node 1 (another process, another Mooncake client) fetches
them REPEAT times: every record is checked (header and 32 checksums) and scattered into paged
KV, and compared bit for bit afterwards (outside the timing). The local figure is node 0 loading
the same chunks from its store (uring engine, O_DIRECT, checksums, scatter). Publishing is timed
from the first chunk queued until the queue drained; plain TCP between two threads over loopback
is the ceiling of a TCP transport here. Medians are printed and written as JSON.

Usage (inside the test environment, from the repository root):
    .venv-vllm/bin/python bench/remote_bw.py [OUT.json] [CHUNKS] [REPEAT]
"""

import json
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python" / "tests" / "remote"))

from cluster import Cluster  # noqa: E402
from conftest import NodeProc  # noqa: E402

LLAMA_3_8B = dict(nr_layers=32, nr_kv_heads=8, head_dim=128, elem_bytes=2, kv_planes=2,
                  block_tokens=16, chunk_tokens=256)


def tcp_loopback_gbps(total=1 << 30, piece=4 << 20):
    """Plain TCP over loopback between two threads of one process (the ceiling for a TCP
    transport on this machine): `total` bytes sent in `piece` writes into a reused buffer."""
    srv = socket.create_server(("127.0.0.2", 0))
    port = srv.getsockname()[1]
    done = {}

    def receive():
        conn, _ = srv.accept()
        buf = bytearray(piece)
        view, got = memoryview(buf), 0
        while got < total:
            n = conn.recv_into(view)
            if n == 0:
                break
            got += n
        done["bytes"] = got
        conn.close()

    t = threading.Thread(target=receive)
    t.start()
    out = socket.create_connection(("127.0.0.2", port))
    data = bytes(piece)
    t0 = time.perf_counter()
    for _ in range(total // piece):
        out.sendall(data)
    out.close()
    t.join()
    seconds = time.perf_counter() - t0
    srv.close()
    return done["bytes"] / seconds / 1e9


def main(out=None, chunks=16, repeat=5):
    chunks, repeat = int(chunks), int(repeat)
    with tempfile.TemporaryDirectory(prefix="tutti-remote-bw-") as tmp:
        tmp = Path(tmp)
        cluster = Cluster(tmp / "mooncake", segment_mb=1024).start()
        nodes = []
        try:
            common = dict(geometry=LLAMA_3_8B, nr_blocks=chunks * 16, master=cluster.master,
                          metadata=cluster.metadata, timeout_ms=10000, ring_mb=256)
            a = NodeProc(tmp, "publisher")
            nodes.append(a)
            a.call("open", host=Cluster.node_host(0), dir=str(tmp / "store-a"), engine="uring",
                   capacity_mb=chunks * 33 + 64, publish_mb=chunks * 33, timeout=120, **common)
            pub = a.call("save_publish", seed=1, chunks=chunks, timeout=600, flush_ms=300000)
            assert pub["flushed"] and pub["published"] == [0] * chunks, pub
            b = NodeProc(tmp, "fetcher")
            nodes.append(b)
            rec = b.call("open", host=Cluster.node_host(1), dir=str(tmp / "store-b"),
                         capacity_mb=64, publish_mb=0, timeout=120, **common)["record_bytes"]
            remote, local = [], []
            for _ in range(repeat):
                got = b.call("fetch", seed=1, chunks=chunks, timeout=600)
                assert got["loaded"] == chunks and all(got["exact"]), got["status"]
                remote.append(chunks * rec / got["seconds"] / 1e9)
                loc = a.call("load_local", seed=1, chunks=chunks, timeout=600)
                assert loc["loaded"] == chunks and all(loc["exact"])
                local.append(chunks * rec / loc["seconds"] / 1e9)
            tcp = [tcp_loopback_gbps() for _ in range(repeat)]
            result = {
                "what": "remote tier fetch (Mooncake Store over TCP loopback, Python provider) "
                        "vs local store load, Llama-3-8B chunks, records checked and scattered",
                "record_bytes": rec, "chunks": chunks, "repeat": repeat,
                "publish_GBps": round(chunks * rec / pub["publish_seconds"] / 1e9, 3),
                "remote_fetch_GBps": [round(x, 3) for x in remote],
                "local_load_GBps": [round(x, 3) for x in local],
                "remote_fetch_GBps_median": round(statistics.median(remote), 3),
                "local_load_GBps_median": round(statistics.median(local), 3),
                "tcp_loopback_GBps": [round(x, 3) for x in tcp],
                "tcp_loopback_GBps_median": round(statistics.median(tcp), 3),
                "machine": f"{platform.node()} {platform.machine()}, "
                           f"{len(__import__('os').sched_getaffinity(0))} CPUs",
            }
        finally:
            for n in nodes:
                n.stop()
            cluster.stop()
    print(json.dumps(result, indent=1))
    if out:
        Path(out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
