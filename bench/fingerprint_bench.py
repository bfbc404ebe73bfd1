# SPDX-License-Identifier: Apache-2.0
"""Start-up cost of the weights' fingerprint (python/tutti/serving/fingerprint.py), against the
raw read rate of the same files.

For each model it writes a synthetic checkpoint with the file layout of a real one (the
tensors' names, shapes and order, bf16, sharded as Hugging Face shards at 5 GB, with
``config.json`` and the weight index; random bytes) into a temporary directory under ``--dir``,
then times, each ``--repeats`` times (medians reported):

* ``read-warm`` / ``read-cold``: every byte read with the fingerprint's own reader (the same
  pieces, reads and threads) and no hash: the ceiling the hash is a ratio of;
* ``full-warm``: the full fingerprint with the files in the page cache, as after vLLM's load;
* ``full-cold``: the same after ``posix_fadvise(POSIX_FADV_DONTNEED)`` on every file;
* ``restart``: the full fingerprint with the cache of digests written by an earlier one, the
  files dropped from the page cache (as after a reboot);
* ``sampled-warm`` / ``sampled-cold``: the sampled fingerprint (the default before the full one).

Each row gives the least share of the files' pages that was in the page cache before a timed
call (``resident``, by mincore) and the machine's load average after them (``loadavg``: the
machine may be shared), and the process's CPU time (``cpu_s``, all threads), which moves less
than the wall time when other work shares the CPUs. Then, on the first checkpoint, the full
fingerprint's warm time per thread count and per read size (``--read-sizes``), in turn within
each round; the hashes of hashlib on one buffer per thread (``--hashes``), per wall and per
CPU second; and a restart over many small files (``--restart-files``): a restart
costs a stat per file, whatever the files' sizes. Each checkpoint is deleted after its rows.

Usage (from the repository root; DIR on the disk to measure, with room for 17 GB):
    PYTHONPATH=python .venv-vllm/bin/python bench/fingerprint_bench.py --dir DIR \\
        --out bench/results/fingerprint-vm.jsonl
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import mmap
import os
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:  # the engine-neutral modules may live in tutti.serving
    from tutti.serving import fingerprint as fp  # type: ignore[import-not-found, unused-ignore]
except ImportError:
    from tutti.vllm import fingerprint as fp

# Real layouts (Hugging Face configs): Llama-3.2-1B (2.47 GB, one file), Llama-3.2-3B (6.43 GB,
# two files), Llama-3-8B (16.06 GB, four files).
MODELS = {
    "llama-3.2-1b": {"hidden": 2048, "inter": 8192, "layers": 16, "heads": 32, "kv_heads": 8,
                     "head_dim": 64, "vocab": 128256, "tied": True},
    "llama-3.2-3b": {"hidden": 3072, "inter": 8192, "layers": 28, "heads": 24, "kv_heads": 8,
                     "head_dim": 128, "vocab": 128256, "tied": True},
    "llama-3-8b": {"hidden": 4096, "inter": 14336, "layers": 32, "heads": 32, "kv_heads": 8,
                   "head_dim": 128, "vocab": 128256, "tied": False},
}
SHARD_BYTES = 5_000_000_000  # transformers' save_pretrained default, max_shard_size="5GB"
BF16 = 2


def tensors_of(m: dict) -> list[tuple[str, list[int]]]:
    """The model's tensors, in the order transformers writes them."""
    h, i, kv = m["hidden"], m["inter"], m["kv_heads"] * m["head_dim"]
    q = m["heads"] * m["head_dim"]
    out = [("model.embed_tokens.weight", [m["vocab"], h])]
    for n in range(m["layers"]):
        p = f"model.layers.{n}."
        out += [(p + "self_attn.q_proj.weight", [q, h]), (p + "self_attn.k_proj.weight", [kv, h]),
                (p + "self_attn.v_proj.weight", [kv, h]), (p + "self_attn.o_proj.weight", [h, q]),
                (p + "mlp.gate_proj.weight", [i, h]), (p + "mlp.up_proj.weight", [i, h]),
                (p + "mlp.down_proj.weight", [h, i]), (p + "input_layernorm.weight", [h]),
                (p + "post_attention_layernorm.weight", [h])]
    out.append(("model.norm.weight", [h]))
    if not m["tied"]:
        out.append(("lm_head.weight", [m["vocab"], h]))
    return out


def nbytes(shape: list[int]) -> int:
    n = BF16
    for d in shape:
        n *= d
    return n


def write_checkpoint(path: Path, m: dict) -> list[Path]:
    """Shards of at most SHARD_BYTES, the index and config.json; random bytes (a random block
    written at a stride that shifts per write, so no two blocks of a file are equal)."""
    shards: list[list[tuple[str, list[int]]]] = [[]]
    size = 0
    for name, shape in tensors_of(m):
        if shards[-1] and size + nbytes(shape) > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes(shape)
    block = os.urandom(16 << 20)
    files, weight_map = [], {}
    for k, shard in enumerate(shards):
        name = (f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1
                else "model.safetensors")
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for t, shape in shard:
            header[t] = {"dtype": "BF16", "shape": shape,
                         "data_offsets": [off, off + nbytes(shape)]}
            off += nbytes(shape)
            weight_map[t] = name
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(path / name, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            left, turn = off, 0
            while left > 0:
                n = min(left, len(block))
                shift = (turn * 4099) % len(block)
                f.write((block[shift:] + block[:shift])[:n])
                left -= n
                turn += 1
        files.append(path / name)
    total = sum(f.stat().st_size for f in files)
    (path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}))
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                  "hidden_size": m["hidden"]}))
    return files


# ---- the page cache ----


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
MAP_FAILED = ctypes.c_void_p(-1).value


def resident(files: list[Path]) -> float:
    """The share of the files' pages in the page cache (mincore over a read-only map, which
    touches no page)."""
    page = mmap.PAGESIZE
    have = total = 0
    for f in files:
        size = f.stat().st_size
        if size == 0:
            continue
        fd = os.open(f, os.O_RDONLY)
        try:
            addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, MAP_FAILED):
                raise OSError(ctypes.get_errno(), "mmap")
            pages = (size + page - 1) // page
            vec = ctypes.create_string_buffer(pages)
            try:
                if _libc.mincore(addr, size, vec) != 0:
                    raise OSError(ctypes.get_errno(), "mincore")
            finally:
                _libc.munmap(addr, size)
            have += sum(b & 1 for b in vec.raw)
            total += pages
        finally:
            os.close(fd)
    return have / total if total else 1.0


def drop(files: list[Path]) -> None:
    """Ask the kernel to drop the files' clean pages from the page cache."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(files: list[Path]) -> None:
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(16 << 20):
                pass


# ---- what is timed ----


def read_all(files: list[Path], threads: int) -> None:
    """Every byte, through the fingerprint's pieces and reads, with no hash."""
    fds = [os.open(f, os.O_RDONLY) for f in files]
    try:
        sizes = [os.fstat(fd).st_size for fd in fds]
        tasks = [(i, off, min(fp.PIECE_BYTES, s - off)) for i, s in enumerate(sizes)
                 for off in range(0, s, fp.PIECE_BYTES)]
        local = threading.local()

        def piece(task: tuple[int, int, int]) -> int:
            i, off, n = task
            buf = getattr(local, "buf", None)
            if buf is None:
                buf = local.buf = bytearray(fp.READ_BYTES)
            view, end = memoryview(buf), off + n
            while off < end:
                got = os.preadv(fds[i], [view[:min(fp.READ_BYTES, end - off)]], off)
                if got <= 0:
                    break
                off += got
            return n

        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(piece, tasks))
    finally:
        for fd in fds:
            os.close(fd)


def hash_rates(seconds: float, rounds: int, threads: int, names: list[str]) -> list[dict]:
    """Each hashlib hash over one READ_BYTES buffer per thread, ``seconds`` a round, the hashes
    taken in turn in each of ``rounds``: GB per second of wall time and per CPU second of the
    hashing threads (the latter barely moves when other work shares the CPUs); medians."""
    runs: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for name in names:
            for t in sorted({1, threads}):
                counts, cpu = [0] * t, [0.0] * t
                stop = time.perf_counter() + seconds
                t0 = time.perf_counter()
                ts = [threading.Thread(target=hash_for, args=(name, stop, counts, cpu, k))
                      for k in range(t)]
                for th in ts:
                    th.start()
                for th in ts:
                    th.join()
                wall = time.perf_counter() - t0
                runs.setdefault((name, t), []).append((sum(counts) / wall / 1e9,
                                                       sum(counts) / sum(cpu) / 1e9))
    rows = []
    for (name, t), r in runs.items():
        rows.append({"kind": "hash", "hash": name, "threads": t,
                     "gb_per_s": round(statistics.median(x for x, _ in r), 3),
                     "gb_per_cpu_s": round(statistics.median(y for _, y in r), 3),
                     "rounds": len(r), "loadavg": round(os.getloadavg()[0], 2)})
        print(rows[-1], flush=True)
    return rows


def hash_for(name: str, stop: float, counts: list[int], cpu: list[float], k: int) -> None:
    buf = memoryview(os.urandom(fp.READ_BYTES))
    h = hashlib.new(name)
    c0 = time.thread_time()
    while time.perf_counter() < stop:
        h.update(buf)
        counts[k] += len(buf)
    cpu[k] = time.thread_time() - c0


class Model:
    """One synthetic checkpoint and the rows measured on it."""

    def __init__(self, name: str, work: Path, repeats: int, rows: list[dict]) -> None:
        self.work, self.repeats, self.rows = work, repeats, rows
        t0 = time.perf_counter()
        self.files = write_checkpoint(work, MODELS[name])
        drop(self.files)
        self.size = sum(f.stat().st_size for f in self.files)
        self.base = {"model": name, "files": len(self.files), "bytes": self.size}
        print(f"{name}: {len(self.files)} files, {self.size / 1e9:.2f} GB written in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)

    def run(self, kind: str, fn: Callable[[], object], cold: bool, **kw: object) -> None:
        """``repeats`` timed calls of ``fn``, each after the files were dropped from the page
        cache (``cold``) or read into it."""
        times, cpu, res = [], [], []
        for _ in range(self.repeats):
            if cold:
                drop(self.files)
            else:
                warm(self.files)
            res.append(resident(self.files))
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        self.add(kind, times, cpu, min(res), **kw)

    def add(self, kind: str, times: list[float], cpu: list[float], res: float,
            **kw: object) -> None:
        med = statistics.median(times)
        self.rows.append(dict(self.base, kind=kind, median_s=round(med, 4),
                              runs_s=[round(x, 4) for x in times],
                              gb_per_s=round(self.size / med / 1e9, 3),
                              cpu_s=round(statistics.median(cpu), 4),
                              resident=round(res, 3),
                              loadavg=round(os.getloadavg()[0], 2), **kw))
        print(self.rows[-1], flush=True)

    def measure(self, th: int) -> None:
        work, files, cache = self.work, self.files, self.work / "store"
        self.run("read-cold", lambda: read_all(files, th), True, threads=th)
        self.run("read-warm", lambda: read_all(files, th), False, threads=th)
        self.run("full-cold", lambda: fp.fingerprint_dir(work, threads=th), True, threads=th)
        self.run("full-warm", lambda: fp.fingerprint_dir(work, threads=th), False, threads=th)
        fp.fingerprint_dir(work, cache_dir=cache, threads=th)  # writes the cache
        self.run("restart", lambda: fp.fingerprint_dir(work, cache_dir=cache, threads=th),
                 True, threads=th)
        self.run("sampled-cold", lambda: fp.fingerprint_dir(work, mode="sampled"), True)
        self.run("sampled-warm", lambda: fp.fingerprint_dir(work, mode="sampled"), False)

    def sweep(self, th: int, read_sizes: list[int]) -> None:
        """The full fingerprint, warm, per thread count and per read size, the variants taken
        in turn within each round so that a shared machine's drift falls on all of them."""
        work = self.work
        variants = [("full-warm-threads", t, fp.READ_BYTES) for t in sorted({1, th})]
        variants += [("full-warm-read-size", th, rs) for rs in read_sizes]
        times: dict[int, list[float]] = {k: [] for k in range(len(variants))}
        cpu: dict[int, list[float]] = {k: [] for k in range(len(variants))}
        res: dict[int, list[float]] = {k: [] for k in range(len(variants))}
        real = fp.READ_BYTES
        try:
            for _ in range(self.repeats):
                for k, (_, t, rs) in enumerate(variants):
                    fp.READ_BYTES = rs
                    warm(self.files)
                    res[k].append(resident(self.files))
                    t0, c0 = time.perf_counter(), time.process_time()
                    fp.fingerprint_dir(work, threads=t)
                    times[k].append(time.perf_counter() - t0)
                    cpu[k].append(time.process_time() - c0)
        finally:
            fp.READ_BYTES = real
        for k, (kind, t, rs) in enumerate(variants):
            self.add(kind, times[k], cpu[k], min(res[k]), threads=t, read_bytes=rs)


def restart_files(n: int, where: str, repeats: int) -> dict:
    """A restart over ``n`` weight files of 1 MiB: its cost is per file."""
    work = Path(tempfile.mkdtemp(prefix="tutti-fp-", dir=where))
    try:
        block = os.urandom(1 << 20)
        for k in range(n):
            (work / f"model-{k + 1:05d}-of-{n:05d}.safetensors").write_bytes(block)
        time.sleep(fp.RACY_NS / 1e9 + 0.5)  # settled, so that their digests are kept
        fp.fingerprint_dir(work, cache_dir=work / "store")
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fp.fingerprint_dir(work, cache_dir=work / "store")
            times.append(time.perf_counter() - t0)
        return {"kind": "restart-files", "files": n,
                "median_s": round(statistics.median(times), 4),
                "runs_s": [round(x, 4) for x in times]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=tempfile.gettempdir(),
                    help="where the checkpoints are written (a real disk; deleted after)")
    ap.add_argument("--out", required=True, help="JSON lines, one per measurement")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=fp.default_threads())
    ap.add_argument("--read-sizes", default="262144,1048576,4194304,16777216")
    ap.add_argument("--hashes", default="sha256,blake2b,blake2s,sha1,md5,sha512,sha3_256")
    ap.add_argument("--restart-files", default="30,191")
    args = ap.parse_args()
    rows: list[dict] = []
    info = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")),
               platform.processor())
    flags = next((ln for ln in info if ln.startswith("flags")), "")
    rows.append({"kind": "machine", "cpu": cpu, "cpus": os.cpu_count(),
                 "threads": args.threads, "sha_ni": " sha_ni" in flags,
                 "python": platform.python_version(), "openssl": __import__("ssl").OPENSSL_VERSION,
                 "piece_bytes": fp.PIECE_BYTES, "read_bytes": fp.READ_BYTES,
                 "page_cache_drop": "posix_fadvise(POSIX_FADV_DONTNEED) per file",
                 "dir": "the machine's disk" if not args.dir.startswith("/dev/shm") else "tmpfs"})
    print(rows[-1], flush=True)
    for k, name in enumerate(args.models.split(",")):
        work = Path(tempfile.mkdtemp(prefix="tutti-fp-", dir=args.dir))
        try:
            m = Model(name, work, args.repeats, rows)
            m.measure(args.threads)
            if k == 0:
                m.sweep(args.threads, [int(x) for x in args.read_sizes.split(",") if x])
        finally:
            shutil.rmtree(work, ignore_errors=True)
    rows += hash_rates(0.5, 5, args.threads, [h for h in args.hashes.split(",") if h])
    for n in (int(x) for x in args.restart_files.split(",") if x):
        rows.append(restart_files(n, args.dir, args.repeats))
        print(rows[-1], flush=True)
    with open(args.out, "w") as out:
        out.writelines(json.dumps(r) + "\n" for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
