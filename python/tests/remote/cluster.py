# SPDX-License-Identifier: Apache-2.0
"""A real Mooncake Store cluster on one machine: one mooncake_master and N mooncake_client
"nodes" on loopback addresses 127.0.0.2, 127.0.0.3, ... (every 127.0.0.x address is local on
Linux), started from the pinned package's programs, each waited for a bounded time and stopped by
its process id."""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 20


def program(name):
    """A Mooncake program installed next to this Python (the test venv's bin/)."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} not found: install mooncake-transfer-engine-non-cuda "
                                "(scripts/setup-vllm-venv.sh does)")
    return found


def _port_free(host, port):
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_ports(n, host="127.0.0.1"):
    """n consecutive free ports below the ephemeral range (32768 and up)."""
    for _ in range(200):
        base = random.randrange(20000, 30000 - n)
        if all(_port_free(host, base + i) for i in range(n)):
            return base
    raise RuntimeError("no free ports")


def mooncake_env():
    env = dict(os.environ)
    env.setdefault("MC_RPC_TIMEOUT_MS", "2000")
    env.setdefault("MC_RPC_CONNECT_TIMEOUT_MS", "1000")
    env.setdefault("MC_YLT_LOG_LEVEL", "warn")
    env.setdefault("GLOG_minloglevel", "1")
    return env


class Cluster:
    def __init__(self, workdir, nr_nodes=3, segment_mb=64, client_ttl_s=2, lease_ms=2000):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.nr_nodes = nr_nodes
        self.segment_mb = segment_mb
        self.client_ttl_s = client_ttl_s
        self.lease_ms = lease_ms
        base = free_ports(3 + nr_nodes)
        self.rpc_port, self.http_port, self.metrics_port = base, base + 1, base + 2
        self.node_ports = [base + 3 + i for i in range(nr_nodes)]
        self.master_proc = None
        self.nodes = [None] * nr_nodes

    @property
    def master(self):
        return f"127.0.0.1:{self.rpc_port}"

    @property
    def metadata(self):
        return f"http://127.0.0.1:{self.http_port}/metadata"

    @staticmethod
    def node_host(i):
        return f"127.0.0.{i + 2}"

    def _spawn(self, name, args):
        out = open(self.dir / f"{name}.log", "ab")
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=mooncake_env(),
                             start_new_session=True)
        out.close()
        (self.dir / f"{name}.pid").write_text(str(p.pid))
        return p

    def summary(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics/summary"
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode(errors="replace")

    def metrics(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode(errors="replace")

    def _wait(self, what, ok):
        deadline = time.monotonic() + START_TIMEOUT_S
        last = None
        while time.monotonic() < deadline:
            try:
                if ok():
                    return
            except OSError as e:
                last = e
            time.sleep(0.1)
        logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.dir.glob("*.log")))
        raise TimeoutError(f"{what} not ready within {START_TIMEOUT_S} s ({last})\n{logs}")

    def start_master(self):
        self.master_proc = self._spawn("master", [
            program("mooncake_master"), "--rpc_address=127.0.0.1",
            f"--rpc_port={self.rpc_port}", "--rpc_thread_num=2",
            "--enable_http_metadata_server=true", "--http_metadata_server_host=127.0.0.1",
            f"--http_metadata_server_port={self.http_port}", f"--metrics_port={self.metrics_port}",
            f"--default_kv_lease_ttl={self.lease_ms}", f"--client_ttl={self.client_ttl_s}",
            "--eviction_high_watermark_ratio=0.9", "--eviction_ratio=0.1",
            "--allocation_strategy=random", f"--log_dir={self.dir}"])
        self._wait("mooncake_master", lambda: "service_ready=true" in self.summary())

    def start_node(self, i):
        self.nodes[i] = self._spawn(f"node{i}", [
            program("mooncake_client"), f"--host={self.node_host(i)}",
            f"--port={self.node_ports[i]}", f"--global_segment_size={self.segment_mb}MB",
            f"--master_server_address={self.master}", f"--metadata_server={self.metadata}",
            "--protocol=tcp", "--threads=1"])

    def clients(self):
        for part in self.summary().split("|"):
            part = part.strip()
            if part.startswith("Clients:"):
                return int(part.split()[1])
        return 0

    def start(self):
        self.start_master()
        for i in range(self.nr_nodes):
            self.start_node(i)
        self._wait(f"{self.nr_nodes} mooncake_client nodes",
                   lambda: self.clients() >= self.nr_nodes)
        return self

    @staticmethod
    def _kill(p, sig=signal.SIGKILL):
        if p is None or p.poll() is not None:
            return
        os.kill(p.pid, sig)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=5)

    def kill_node(self, i):
        self._kill(self.nodes[i])
        self.nodes[i] = None

    def kill_master(self):
        self._kill(self.master_proc)
        self.master_proc = None

    def stop(self):
        for i in range(self.nr_nodes):
            self._kill(self.nodes[i], signal.SIGTERM)
        self._kill(self.master_proc, signal.SIGTERM)
        self.nodes = [None] * self.nr_nodes
        self.master_proc = None
