# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the cluster tests: a real Mooncake cluster (master + three nodes) and node
processes driven over pipes, every wait bounded."""

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import Cluster, mooncake_env

HERE = Path(__file__).resolve().parent
TINY = dict(nr_layers=4, nr_kv_heads=2, head_dim=64, elem_bytes=2, kv_planes=2,
            block_tokens=16, chunk_tokens=64)


class NodeProc:
    """A node.py process; call(op, **args) sends one command and waits for its answer."""

    def __init__(self, workdir, name, env=None):
        self.name = name
        self.log = open(Path(workdir) / f"{name}.stderr", "wb")
        e = mooncake_env()
        e.update(env or {})
        self.p = subprocess.Popen([sys.executable, str(HERE / "node.py")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.log, env=e, cwd=HERE)

    def call(self, op, timeout=30, **args):
        self.p.stdin.write((json.dumps(dict(args, op=op)) + "\n").encode())
        self.p.stdin.flush()
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                raise TimeoutError(f"{self.name}: {op} did not answer within {timeout} s")
            chunk = os.read(self.p.stdout.fileno(), 1 << 16)
            if not chunk:
                raise RuntimeError(f"{self.name} exited during {op} (rc {self.p.poll()})")
            line += chunk
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"{self.name}: {op}: {out['error']}\n{out.get('trace', '')}")
        return out

    def stop(self):
        if self.p.poll() is None:
            try:
                self.call("close", timeout=15)
                self.p.wait(timeout=10)
            except Exception:
                os.kill(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=10)
        self.log.close()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "mooncake").start()
    yield c
    c.stop()


@pytest.fixture
def nodes(tmp_path, cluster):
    started = []

    def start(i, **args):
        n = NodeProc(tmp_path, f"tutti{i}-{len(started)}")
        started.append(n)
        args.setdefault("geometry", TINY)
        args.setdefault("dir", str(tmp_path / f"store{i}-{len(started)}"))
        n.call("open", host=Cluster.node_host(i), master=cluster.master,
               metadata=cluster.metadata, **args)
        return n

    yield start
    for n in started:
        n.stop()
