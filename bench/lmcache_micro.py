# SPDX-License-Identifier: Apache-2.0
"""LMCache's store and retrieve of one request's KV, beside tutti-gpu-store-bench.

The same workload as bench/gpu_store_bench.c: Llama-3-8B geometry (32 layers, 8 KV heads, head
dim 128, bf16), KV in GPU memory in vLLM's per-layer paged layout (blocks of 16 tokens, K and V
of a block together: FlashAttention's (blocks, 16, heads, 2 x 128) in vLLM 0.26), stored from
one shuffled block table and retrieved into another, poisoned before every retrieve and checked
bit for bit after the last; 256-token chunks; contexts 32K and 128K tokens.

LMCache runs its real in-process engine: LMCacheEngineBuilder with the GPU connector that
vLLM's integration creates (CreateGPUConnector with EngineType.VLLM), and its local disk back
end with O_DIRECT (extra_config use_odirect) in --dir, local_cpu off so every retrieve reads the
disk. The CPU buffer holds one request (LMCache allocates a request's chunks before it writes
them). A store is timed until every chunk is on the disk back end (its writes are
asynchronous); a retrieve until the KV is in GPU memory. Before each retrieve the page cache is
dropped (drop_caches, else posix_fadvise DONTNEED on LMCache's files).

With --tutti-json (the store bench's JSON lines of the same run, same directory), each line
also carries the raw O_DIRECT ceiling that bench measured for the same context and operation
and its engines' figures. GB = 1e9 bytes. Output: one JSON line per (context, operation).

Usage: lmcache_micro.py --dir DIR [--contexts 32768,131072] [--repeats 3] [--json FILE]
           [--tutti-json FILE] [--disk-io-threads N] [--device cuda|cpu]
Exit status 77: skipped (no CUDA, or LMCache cannot run here), with the reason on stderr.
"""
import argparse
import glob
import importlib.util
import json
import math
import os
import resource
import statistics
import sys
import time

LAYERS, KV_HEADS, HEAD_DIM, BLOCK_TOKENS, CHUNK_TOKENS = 32, 8, 128, 16, 256
ELEM_BYTES = 2  # bf16
TOKEN_BYTES = LAYERS * 2 * KV_HEADS * HEAD_DIM * ELEM_BYTES  # K and V of every layer
TMPFS_MAGIC = 0x01021994
SKIP = 77


def skip(why):
    print(f"lmcache_micro: skipped: {why}", file=sys.stderr)
    sys.exit(SKIP)


def is_tmpfs(path):
    # os.statvfs has no f_type; /proc/self/mounts names the file system of the longest match.
    path = os.path.realpath(path)
    best, fstype = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, fs = line.split()[:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, fstype = mnt, fs
    return fstype == "tmpfs"


def odirect_works(directory):
    probe = os.path.join(directory, ".odirect-probe")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
        os.close(fd)
        return True
    except OSError:
        return False
    finally:
        if os.path.exists(probe):
            os.unlink(probe)


def drop_page_cache(directory):
    """Drop the page cache (all of it where allowed, else LMCache's files)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for path in glob.glob(os.path.join(directory, "**", "*"), recursive=True):
            if os.path.isfile(path):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
        return "fadvise"


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def load_native_ops():
    """LMCache silently falls back to slow torch ops when its compiled ops do not load (a torch
    ABI mismatch): load them by file so such a run stops here."""
    spec = importlib.util.find_spec("lmcache")
    if spec is None:
        skip("lmcache is not installed (source the payload's env.sh: "
             "scripts/vllm-gpu-payload.sh install)")
    names = []
    for so in sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "*ops*.so"))):
        name = os.path.basename(so).split(".")[0]
        s = importlib.util.spec_from_file_location("lmcache." + name, so)
        s.loader.exec_module(importlib.util.module_from_spec(s))
        names.append(name)
    if not names:
        raise RuntimeError("LMCache's compiled ops are missing")
    return names


def tutti_rows(path):
    rows = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    return rows


class Bench:
    def __init__(self, args, torch):
        self.a, self.torch = args, torch
        self.dev = torch.device("cuda", 0)
        self.max_tokens = max(args.contexts)
        self.storage = "emulated-tmpfs" if is_tmpfs(args.dir) else "disk"
        self.odirect = odirect_works(args.dir)
        self.lmcache_dir = os.path.join(args.dir, "lmcache")
        os.makedirs(self.lmcache_dir, exist_ok=True)
        self.engine = self.make_engine()

    def make_engine(self):
        import lmcache
        from lmcache.utils import EngineType
        from lmcache.v1.cache_engine import LMCacheEngineBuilder
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.gpu_connector import CreateGPUConnector
        from lmcache.v1.metadata import LMCacheMetadata

        torch = self.torch
        request_gb = self.max_tokens * TOKEN_BYTES / (1 << 30)
        extra = {"use_odirect": self.odirect}
        if self.a.disk_io_threads:
            extra["disk_io_threads"] = self.a.disk_io_threads
        cfg = LMCacheEngineConfig.from_defaults(
            chunk_size=CHUNK_TOKENS,
            local_cpu=False,
            max_local_cpu_size=math.ceil(request_gb) + 1,
            local_disk=self.lmcache_dir + "/",
            # An accounting limit, not space used: rounds are removed as they are replaced,
            # but LocalDiskBackend.remove() does not lower the size it counts, so the limit
            # covers every store of the run.
            max_local_disk_size=math.ceil(
                sum(c * TOKEN_BYTES for c in self.a.contexts) * self.a.repeats / (1 << 30)) + 1,
        )
        cfg.extra_config = extra
        meta = LMCacheMetadata(
            model_name="llama-3-8b", world_size=1, local_world_size=1, worker_id=0,
            local_worker_id=0, kv_dtype=torch.bfloat16,
            kv_shape=(LAYERS, 2, CHUNK_TOKENS, KV_HEADS, HEAD_DIM))
        # What vLLM's integration builds (lmcache.integration.vllm), with vLLM's default NHD.
        connector = CreateGPUConnector(cfg, meta, EngineType.VLLM,
                                       layout_hints={"kv_layout": "NHD"})
        engine = LMCacheEngineBuilder.get_or_create(
            "tutti-micro", cfg, meta, connector, lambda t, src: t, lambda o, src: o)
        engine.post_init()
        self.version = lmcache.__version__
        self.connector = type(connector).__name__
        from lmcache.v1.storage_backend import local_disk_backend

        self.threads = cfg.get_extra_config_value(
            "disk_io_threads", getattr(local_disk_backend, "_DEFAULT_THREAD_COUNT", None))
        return engine

    def kv(self, blocks):
        shape = (blocks, BLOCK_TOKENS, KV_HEADS, 2 * HEAD_DIM)
        return [self.torch.empty(shape, dtype=self.torch.bfloat16, device=self.dev)
                for _ in range(LAYERS)]

    def slots(self, ids):
        torch = self.torch
        offs = torch.arange(BLOCK_TOKENS, device=self.dev)
        return (ids.to(self.dev)[:, None] * BLOCK_TOKENS + offs[None, :]).reshape(-1).long()

    def wait_stored(self, tokens, timeout):
        deadline = time.monotonic() + timeout
        while self.engine.lookup(tokens, search_range=["LocalDiskBackend"]) < len(tokens):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"LMCache's disk back end did not hold all {len(tokens)} tokens after "
                    f"{timeout} s (see its log above)")
            # Each lookup hashes the whole request under the GIL that LMCache's writer
            # threads share: poll gently.
            time.sleep(0.005)

    def context(self, tokens):
        torch, R = self.torch, self.a.repeats
        blocks = tokens // BLOCK_TOKENS
        nbytes = tokens * TOKEN_BYTES
        gen = torch.Generator().manual_seed(0x7475747469 + tokens)
        gpu_gen = torch.Generator(device=self.dev).manual_seed(tokens)
        src, dst = self.kv(blocks), self.kv(blocks)
        for t in src:
            t.view(torch.int16).copy_(torch.randint(-32768, 32767, t.shape, dtype=torch.int16,
                                                    device=self.dev, generator=gpu_gen))
        src_ids = torch.randperm(blocks, generator=gen)
        dst_ids = torch.randperm(blocks, generator=gen)
        src_slots, dst_slots = self.slots(src_ids), self.slots(dst_ids)
        timeout = max(120.0, nbytes / 0.2e9)  # far above any sane store time

        store, store_cpu, prev = [], [], None
        for r in range(R):
            toks = torch.randint(0, 128000, (tokens,), generator=gen)
            if prev is not None:
                self.engine.clear(prev, locations=["LocalDiskBackend"])
            torch.cuda.synchronize()
            c0, t0 = cpu_seconds(), time.perf_counter()
            self.engine.store(toks, kvcaches=src, slot_mapping=src_slots)
            self.wait_stored(toks, timeout)
            dt = time.perf_counter() - t0
            store.append(nbytes / dt / 1e9)
            store_cpu.append((cpu_seconds() - c0) / (nbytes / 1e9))
            prev = toks

        retrieve, retrieve_cpu, cache = [], [], None
        for r in range(R):
            for t in dst:
                t.view(torch.uint8).fill_(0xA5)
            torch.cuda.synchronize()
            cache = drop_page_cache(self.lmcache_dir)
            c0, t0 = cpu_seconds(), time.perf_counter()
            mask = self.engine.retrieve(prev, kvcaches=dst, slot_mapping=dst_slots)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            got = int(mask.sum())
            if got != tokens:
                raise RuntimeError(f"LMCache retrieved {got} of {tokens} tokens")
            retrieve.append(nbytes / dt / 1e9)
            retrieve_cpu.append((cpu_seconds() - c0) / (nbytes / 1e9))

        mismatched = 0
        for s, d in zip(src, dst):
            a = s.view(torch.int16)[src_ids.to(self.dev)]
            b = d.view(torch.int16)[dst_ids.to(self.dev)]
            mismatched += int((a != b).reshape(blocks, -1).any(dim=1).sum())
        self.engine.clear(prev, locations=["LocalDiskBackend"])
        del src, dst
        torch.cuda.empty_cache()
        return [("store", store, store_cpu, None, mismatched),
                ("retrieve", retrieve, retrieve_cpu, cache, mismatched)]

    def report(self, tokens, op, rounds, cpu, cache, mismatched, tutti):
        gbps = statistics.median(rounds)
        row = {
            "storage": self.storage, "system": "lmcache", "lmcache_version": self.version,
            "model": "llama-3-8b", "context_tokens": tokens, "op": op,
            "bytes": tokens * TOKEN_BYTES, "repeats": len(rounds), "gbps": round(gbps, 3),
            "rounds_gbps": [round(x, 3) for x in rounds],
            "cpu_s_per_gb": round(statistics.median(cpu), 4), "bit_exact": mismatched == 0,
            "mismatched_layer_blocks": mismatched, "odirect": self.odirect,
            "page_cache": cache or "not read", "gpu_connector": self.connector,
            "disk_io_threads": self.threads,
        }
        same = [t for t in tutti if t.get("context_tokens") == tokens and t.get("op") == op
                and t.get("storage") == self.storage]
        if same:
            row["raw_gbps"] = statistics.median(t["raw_gbps"] for t in same)
            row["ratio_to_raw"] = round(gbps / row["raw_gbps"], 3)
            row["tutti_gbps"] = {t["path"]: t["gbps"] for t in same}
            row["tutti_over_lmcache"] = {t["path"]: round(t["gbps"] / gbps, 2) for t in same}
        line = (f"{self.storage:15s} {tokens:7d} tok {op:8s} lmcache {gbps:7.2f} GB/s "
                f"cpu {row['cpu_s_per_gb']:.3f} s/GB")
        if same:
            line += f"  raw {row['raw_gbps']:.2f}  " + "  ".join(
                f"{p} x{v}" for p, v in row["tutti_over_lmcache"].items())
        print(line + ("  bit-exact" if mismatched == 0 else "  MISMATCH"), flush=True)
        if self.a.json:
            with open(self.a.json, "a") as f:
                f.write(json.dumps(row) + "\n")
        return mismatched == 0


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--contexts", default="32768,131072")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--tutti-json")
    ap.add_argument("--disk-io-threads", type=int, default=0,
                    help="LMCache's disk_io_threads (default: LMCache's own)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a = ap.parse_args()
    try:
        a.contexts = [int(x) for x in a.contexts.split(",")]
    except ValueError:
        ap.error(f"--contexts: not a list of numbers: {a.contexts}")
    if any(c <= 0 or c % CHUNK_TOKENS for c in a.contexts):
        ap.error(f"--contexts are whole chunks of {CHUNK_TOKENS} tokens")
    if not 1 <= a.repeats <= 16:
        ap.error("--repeats is 1 to 16")
    if not os.path.isdir(a.dir):
        ap.error(f"--dir {a.dir}: not a directory")
    return a


def main():
    a = parse()
    if a.device == "cpu":
        # LMCache 0.5's GPU connectors for vLLM's paged KV are CUDA (and XPU, MUSA, HPU)
        # kernels; on a CPU its engine has no connector for vLLM's layout to measure.
        skip("--device cpu: LMCache has no CPU connector for vLLM's paged KV")
    try:
        import torch
    except ImportError:
        skip("no torch here")
    if not torch.cuda.is_available():
        skip("no CUDA device")
    try:
        ops = load_native_ops()
    except (ImportError, OSError, RuntimeError) as e:  # an ABI mismatch names the symbol
        print(f"lmcache_micro: LMCache's compiled ops do not load: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    b = Bench(a, torch)
    print(f"# LMCache {b.version} ({', '.join(ops)} loaded), {b.connector}, local disk in "
          f"{b.lmcache_dir} ({b.storage}{', O_DIRECT' if b.odirect else ', no O_DIRECT'}); "
          f"median of {a.repeats} rounds", flush=True)
    tutti = tutti_rows(a.tutti_json)
    ok = True
    for tokens in a.contexts:
        for op, rounds, cpu, cache, bad in b.context(tokens):
            ok &= b.report(tokens, op, rounds, cpu, cache, bad, tutti)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
