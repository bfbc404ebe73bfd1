# SPDX-License-Identifier: Apache-2.0
"""Layerwise prefix loading on a real transformer: time to first token (TTFT) with a cached
prefix, stall ("bubble") time against the cache hit rate, and staging memory against context
length. Runs on a GPU machine with PyTorch; builds nothing and downloads nothing.

The model is a Llama-3-8B-shaped decoder (32 layers, hidden 4096, 32 query heads, 8 KV heads,
head dim 128, MLP 14336, bf16) with random weights made on the GPU. Its KV lives in a vLLM-style
paged cache: per layer one tensor [2, blocks, 16, 8, 128] (K and V planes). A prompt of T tokens
whose first P are cached computes only the suffix: per layer, QKV of the suffix, its K/V written
into the paged cache, attention of the suffix queries over all T keys (PyTorch SDPA with a
lower-right causal mask), the output projection and the MLP; then the logits of the last token.
Before each layer's attention the prefix KV of that layer must be in the cache. How it gets there:

  compute   the prefix KV is already in HBM (the lower bound: suffix compute alone)
  recompute nothing cached: the whole prompt is computed
  dram      a DRAM tier: the prefix KV in pinned host memory, one async copy per layer and plane
            on a side stream, the compute stream waiting on the layer's event
  baseline  the per-block CPU-driven SSD path (bench/block_loader.c): 16 host threads, one pread
            and two cudaMemcpyAsync per paged block per layer, the host waiting per layer
  tutti     a Tutti store (engine gpu-uring) read through the layerwise pipeline: begin_step
            with the prefix chunks, wait_layer before each layer (a device-side wait on the
            compute stream), end_step

Storage: --disk-dir (a real disk) and --shm-dir (tmpfs, *emulated* fast NVMe). Each run checks
that the loaded prefix KV equals the reference bit for bit. The limit of each storage ("raw"
rows, read_gbps) is `tutti ceiling` in its directory (tools/common/ceiling.h), the one every
benchmark divides by: min(the best O_DIRECT read of a sweep over threads x I/O size x files,
the pinned host-to-device copy), measured in the same run. Results go to --out as CSV and JSON;
plot_layerwise.py draws them.
"""

import argparse
import csv
import ctypes
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
from tutti.pipeline import Pipeline  # noqa: E402
from tutti.store import KV, ChunkRequest, Geometry, Store  # noqa: E402

BLOCK = 16
CHUNK = 256
DEV = torch.device("cuda")
DT = torch.bfloat16


class Shape:
    def __init__(self, layers, hidden, heads, kv_heads, head_dim, inter, vocab):
        self.layers, self.hidden, self.heads = layers, hidden, heads
        self.kv_heads, self.head_dim, self.inter, self.vocab = kv_heads, head_dim, inter, vocab


LLAMA3_8B = Shape(32, 4096, 32, 8, 128, 14336, 128256)
GLM4_9B = Shape(40, 4096, 32, 2, 128, 13696, 151552)


def geometry(shape):
    return Geometry(nr_layers=shape.layers, nr_kv_heads=shape.kv_heads,
                    head_dim=shape.head_dim, elem_bytes=2, block_tokens=BLOCK,
                    chunk_tokens=CHUNK)


def chain_keys(n, salt=b"prompt"):
    """A chained key per chunk, as vLLM's block hashes chain in every earlier token."""
    keys, prev = [], b""
    for i in range(n):
        prev = hashlib.blake2b(prev + salt + i.to_bytes(8, "little"), digest_size=32).digest()
        keys.append(prev)
    return keys


class PagedCache:
    """Per layer [2, nr_blocks, 16, kv_heads, head_dim]; token t of the prompt in block t // 16
    (the prompt's blocks are contiguous, which gives the DRAM tier one copy per layer)."""

    def __init__(self, shape, nr_blocks):
        self.shape = shape
        self.nr_blocks = nr_blocks
        self.layers = [torch.zeros(2, nr_blocks, BLOCK, shape.kv_heads, shape.head_dim,
                                   dtype=DT, device=DEV) for _ in range(shape.layers)]
        self.block_bytes = BLOCK * shape.kv_heads * shape.head_dim * 2  # one plane

    def kv(self, geo):
        segs = []
        for t in self.layers:
            segs.append((t[0].data_ptr(), self.block_bytes, self.block_bytes))
            segs.append((t[1].data_ptr(), self.block_bytes, self.block_bytes))
        return KV(geo, segs, 2, self.nr_blocks, mem="cuda" if self.layers[0].is_cuda else "host")

    def tokens(self, layer, plane, n):
        return self.layers[layer][plane].view(-1, self.shape.kv_heads, self.shape.head_dim)[:n]


class Model:
    """``shape`` may be one rank's shard under tensor parallelism (its heads, KV heads and MLP
    width); ``reduce`` then sums a layer's partial outputs over the ranks (after the attention's
    output projection and after the MLP), as bench/tp_ttft.py sets it."""

    def __init__(self, shape, seed=0):
        g = torch.Generator(device=DEV)
        g.manual_seed(seed)
        s = shape
        self.shape = s
        self.reduce = None

        def w(*dims):
            return (torch.randn(*dims, generator=g, device=DEV, dtype=torch.float32) * 0.02).to(DT)

        qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.layers = [dict(wqkv=w(s.hidden, qkv), wo=w(s.heads * s.head_dim, s.hidden),
                            wgu=w(s.hidden, 2 * s.inter), wd=w(s.inter, s.hidden))
                       for _ in range(s.layers)]
        self.lm_head = w(s.hidden, s.vocab)

    def layer(self, layer, h, cache, start, total):
        """One decoder layer for the suffix tokens [start, total) of the prompt."""
        s, p = self.shape, self.layers[layer]
        n = total - start
        a = F.rms_norm(h, (s.hidden,))
        qkv = a @ p["wqkv"]
        q = qkv[:, : s.heads * s.head_dim].view(n, s.heads, s.head_dim)
        k = qkv[:, s.heads * s.head_dim: (s.heads + s.kv_heads) * s.head_dim]
        v = qkv[:, (s.heads + s.kv_heads) * s.head_dim:]
        cache.tokens(layer, 0, total)[start:] = k.view(n, s.kv_heads, s.head_dim)
        cache.tokens(layer, 1, total)[start:] = v.view(n, s.kv_heads, s.head_dim)
        return q

    def attend(self, layer, h, q, cache, start, total):
        s, p = self.shape, self.layers[layer]
        n = total - start
        rep = s.heads // s.kv_heads
        kk = cache.tokens(layer, 0, total).transpose(0, 1).repeat_interleave(rep, 0)
        vv = cache.tokens(layer, 1, total).transpose(0, 1).repeat_interleave(rep, 0)
        qq = q.transpose(0, 1).unsqueeze(0)
        if start == 0:
            o = F.scaled_dot_product_attention(qq, kk.unsqueeze(0), vv.unsqueeze(0),
                                               is_causal=True)
        else:
            o = F.scaled_dot_product_attention(qq, kk.unsqueeze(0), vv.unsqueeze(0),
                                               attn_mask=causal_lower_right(n, total))
        o = o.squeeze(0).transpose(0, 1).reshape(n, s.heads * s.head_dim)
        h = h + self.reduced(o @ p["wo"])
        gu = F.rms_norm(h, (s.hidden,)) @ p["wgu"]
        gate, up = gu[:, : s.inter], gu[:, s.inter:]
        return h + self.reduced((F.silu(gate) * up) @ p["wd"])

    def reduced(self, x):
        return x if self.reduce is None else self.reduce(x)

    def prefill(self, cache, start, total, before_attention=None, after_kv=None):
        """Compute the suffix; before_attention(l) makes layer l's prefix KV available,
        after_kv(l) is told layer l's new KV is in the cache. Returns the last token's logits."""
        g = torch.Generator(device=DEV)
        g.manual_seed(1234)
        h = torch.randn(total - start, self.shape.hidden, generator=g, device=DEV, dtype=DT)
        for layer in range(self.shape.layers):
            q = self.layer(layer, h, cache, start, total)
            if after_kv is not None:
                after_kv(layer)
            if before_attention is not None:
                before_attention(layer)
            h = self.attend(layer, h, q, cache, start, total)
        return F.rms_norm(h[-1:], (self.shape.hidden,)) @ self.lm_head


def ttft(fn):
    """Wall time from the call until the last token's logits are on the host."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    out.float().cpu()
    return time.perf_counter() - t0


# ---- the prefix KV and its tiers ----

class Prefix:
    """The reference prefix KV (random, on the GPU) for up to max_tokens, and copies of it in
    every tier."""

    def __init__(self, shape, max_tokens, seed=7):
        g = torch.Generator(device=DEV)
        g.manual_seed(seed)
        nb = max_tokens // BLOCK
        self.shape, self.max_blocks = shape, nb
        self.ref = [torch.randn(2, nb, BLOCK, shape.kv_heads, shape.head_dim, generator=g,
                                device=DEV, dtype=torch.float32).to(DT)
                    for _ in range(shape.layers)]
        self.host = None

    def to_host(self):
        self.host = [t.cpu().pin_memory() for t in self.ref]

    def place(self, cache, blocks):
        for layer in range(self.shape.layers):
            cache.layers[layer][:, :blocks].copy_(self.ref[layer][:, :blocks])

    def check(self, cache, blocks):
        for layer in range(self.shape.layers):
            if not torch.equal(cache.layers[layer][:, :blocks], self.ref[layer][:, :blocks]):
                raise AssertionError(f"prefix KV of layer {layer} differs from the reference")

    def write_block_file(self, path):
        """The baseline's file: block i of layer l (K then V) at (l * max_blocks + i)."""
        with open(path, "wb") as f:
            for layer in range(self.shape.layers):
                t = self.ref[layer].transpose(0, 1).contiguous().cpu()  # [blocks, 2, ...]
                f.write(t.view(torch.uint8).numpy().data)
            f.flush()
            os.fsync(f.fileno())


def dram_loader(prefix, cache, blocks, stream):
    events = [torch.cuda.Event() for _ in range(prefix.shape.layers)]
    with torch.cuda.stream(stream):
        for layer in range(prefix.shape.layers):
            for plane in range(2):  # each plane's blocks are contiguous: one DMA each
                cache.layers[layer][plane, :blocks].copy_(prefix.host[layer][plane, :blocks],
                                                          non_blocking=True)
            events[layer].record(stream)

    def wait(layer):
        torch.cuda.current_stream().wait_event(events[layer])
    return wait


class BlockLoader:
    def __init__(self, path, prefix, threads=16):
        lib = ctypes.CDLL(str(find_build_file("libtutti_block_loader.so")))
        lib.bl_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32,
                                  ctypes.c_uint64, ctypes.c_uint64,
                                  ctypes.POINTER(ctypes.c_void_p)]
        lib.bl_start.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32,
                                 ctypes.POINTER(ctypes.c_uint64),
                                 ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint64]
        lib.bl_done.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        lib.bl_done.restype = ctypes.c_uint32
        lib.bl_error.argtypes = [ctypes.c_void_p]
        lib.bl_finish.argtypes = [ctypes.c_void_p]
        lib.bl_destroy.argtypes = [ctypes.c_void_p]
        self.lib, self.h = lib, ctypes.c_void_p()
        s = prefix.shape
        self.block_bytes = 2 * BLOCK * s.kv_heads * s.head_dim * 2
        rc = lib.bl_create(str(path).encode(), torch.cuda.current_device(), threads,
                           self.block_bytes, prefix.max_blocks, ctypes.byref(self.h))
        if rc != 0:
            raise OSError(-rc, "bl_create")

    def start(self, cache, blocks):
        n = cache.shape.layers
        kb = (ctypes.c_uint64 * n)(*[t[0].data_ptr() for t in cache.layers])
        vb = (ctypes.c_uint64 * n)(*[t[1].data_ptr() for t in cache.layers])
        torch.cuda.synchronize()
        rc = self.lib.bl_start(self.h, n, blocks, kb, vb, cache.block_bytes)
        if rc != 0:
            raise OSError(-rc, "bl_start")

        def wait(layer):
            while self.lib.bl_done(self.h, layer) < blocks:
                if self.lib.bl_error(self.h) != 0:
                    raise OSError(-self.lib.bl_error(self.h), "baseline load")
                time.sleep(20e-6)
        return wait

    def finish(self):
        rc = self.lib.bl_finish(self.h)
        if rc != 0:
            raise OSError(-rc, "baseline load")


def find_build_file(name):
    for build in ("build/gpu", "build/release"):
        p = REPO / build / name
        if p.exists():
            return p
    raise FileNotFoundError(name)


def gpu_uring_opts(args):
    """--gpu-io-workers and --gpu-io-sms as engine gpu-uring's options workers and sms (0 and
    unset: its defaults)."""
    opts = {}
    if args.gpu_io_workers:
        opts["workers"] = args.gpu_io_workers
    if args.gpu_io_sms is not None:
        opts["sms"] = args.gpu_io_sms
    return opts


class TuttiTier:
    def __init__(self, directory, shape, prefix_tokens, cache, engine="gpu-uring",
                 save_staging=0, profile=None, wait_timeout_ms=30000, engine_opts="",
                 readahead=0, staging_mib=64):
        self.geo = geometry(shape)
        self.dir = Path(directory)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        chunks = prefix_tokens // CHUNK
        self.store = Store([self.dir], self.geo,
                           capacity_bytes=(chunks + 64) * self.geo.slot_bytes, engine=engine,
                           staging_bytes=staging_mib << 20, engine_opts=engine_opts)
        self.kv = cache.kv(self.geo)
        self.keys = chain_keys(chunks)
        self.pipe = Pipeline(self.store, self.kv, readahead_layers=readahead,
                             save_staging_bytes=save_staging,
                             profile=profile, wait_timeout_ms=wait_timeout_ms)

    def fill(self, cache, blocks):
        """Store the prefix KV (already placed in the cache's blocks [0, blocks))."""
        n, status = self.store.save(self.kv, [ChunkRequest(self.keys[: blocks * BLOCK // CHUNK],
                                                           list(range(blocks)))])
        if any(x < 0 for x in status):
            raise OSError(-min(status), "filling the store")
        return n

    def request(self, blocks):
        return ChunkRequest(self.keys[: blocks * BLOCK // CHUNK], list(range(blocks)))

    def step(self, blocks, compute_tokens, saves=()):
        stream = torch.cuda.current_stream().cuda_stream
        loads = [self.request(blocks)] if blocks else []
        sid = self.pipe.begin_step(loads=loads, saves=list(saves),
                                   compute_tokens=compute_tokens, stream=stream)
        return sid

    def prefill(self, model, cache, blocks, p_tokens, total):
        """One prompt of ``total`` tokens whose first ``p_tokens`` (``blocks``) load through
        the pipeline behind the prefill of the rest: its TTFT and the step's result."""
        sid = [None]

        def go():
            sid[0] = self.step(blocks, total - p_tokens)
            out = model.prefill(cache, p_tokens, total, before_attention=self.pipe.wait_layer)
            self.pipe.end_step()
            return out
        t = ttft(go)
        return t, self.result(sid[0])

    def result(self, sid):
        for _ in range(200000):
            r = self.pipe.result(sid)
            if r is not None:
                return r
            time.sleep(50e-6)
        raise TimeoutError("step result")

    def close(self):
        self.pipe.close()
        self.kv.close()
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- the experiments ----

def run_ttft(args, model, cache, prefix, tiers, loaders, rows):
    total = args.prompt
    for p_tokens in args.prefixes:
        blocks = p_tokens // BLOCK
        for method in args.ttft_methods or args.methods:
            def once():
                cache_wipe(cache, blocks)
                torch.cuda.synchronize()
                extra = {}
                if method == "compute":
                    prefix.place(cache, blocks)
                    t = ttft(lambda: model.prefill(cache, p_tokens, total))
                elif method == "recompute":
                    t = ttft(lambda: model.prefill(cache, 0, total))
                elif method == "dram":
                    side = torch.cuda.Stream()
                    t = ttft(lambda: model.prefill(
                        cache, p_tokens, total,
                        before_attention=dram_loader(prefix, cache, blocks, side)))
                elif method.startswith("baseline-"):
                    bl = loaders[method]

                    def go():
                        wait = bl.start(cache, blocks)
                        return model.prefill(cache, p_tokens, total, before_attention=wait)
                    t = ttft(go)
                    bl.finish()
                else:  # tutti-<storage>
                    tier = tiers[method]
                    t, r = tier.prefill(model, cache, blocks, p_tokens, total)
                    if r["load_errors"]:
                        raise AssertionError(f"{method}: {r['load_errors']} load errors")
                    extra = dict(stall_ms=r["stall_ns"] / 1e6, load_ms=r["load_ns"] / 1e6,
                                 readahead=r["readahead"])
                if method != "recompute":
                    prefix.check(cache, blocks)
                return t, extra

            if method == "recompute" and p_tokens != args.prefixes[0]:
                continue
            times, extra = [], {}
            for _ in range(args.repeats):
                t, extra = once()
                times.append(t)
            row = dict(experiment="ttft", storage=storage_of(method), method=method_name(method),
                       prompt=total, prefix=0 if method == "recompute" else p_tokens,
                       ttft_s=statistics.median(times), runs=len(times),
                       prefix_gb=blocks * cache.block_bytes * 2 * cache.shape.layers / 1e9,
                       **extra)
            rows.append(row)
            print(json.dumps(row), flush=True)


def storage_of(method):
    if method.endswith("-disk"):
        return "disk"
    if method.endswith("-shm"):
        return "emulated-nvme"
    return "hbm" if method in ("compute", "recompute") else "dram"


def method_name(method):
    return method.rsplit("-", 1)[0] if method.endswith(("-disk", "-shm")) else method


def cache_wipe(cache, blocks):
    for t in cache.layers:
        t[:, :blocks].fill_(0)


def stall_floor_s(prefix_gb, layers, raw_gbps, compute_s):
    """The stall no loader avoids on storage that reads raw_gbps: layer 0's share of the prefix
    must land before the first attention, and the whole prefix cannot land sooner than its
    bytes at raw speed, so whatever of that exceeds the compute is stalled."""
    return max(prefix_gb / layers / raw_gbps, prefix_gb / raw_gbps - compute_s)


def run_bubble(args, model, cache, prefix, tiers, rows, raws):
    total = args.bubble_prompt
    for rate in args.hit_rates:
        p_tokens = min(int(total * rate) // CHUNK * CHUNK, total - CHUNK)
        blocks = p_tokens // BLOCK
        for method in [m for m in args.methods if m.startswith("tutti-")]:
            tier = tiers[method]
            stalls, times, layers = [], [], []
            for _ in range(args.repeats):
                cache_wipe(cache, blocks)
                t, r = tier.prefill(model, cache, blocks, p_tokens, total)
                times.append(t)
                stalls.append(r["stall_ns"] / 1e6)
                layers.append([round(x / 1e6, 3) for x in r["layer_stall_ns"]])
                prefix.check(cache, blocks)
            cache_wipe(cache, blocks)
            prefix.place(cache, blocks)
            compute = statistics.median(
                [ttft(lambda: model.prefill(cache, p_tokens, total)) for _ in range(args.repeats)])
            row = dict(experiment="bubble", storage=storage_of(method), method="tutti",
                       prompt=total, prefix=p_tokens, hit_rate=p_tokens / total,
                       stall_ms=statistics.median(stalls), ttft_s=statistics.median(times),
                       compute_s=compute, runs=args.repeats,
                       layer_stall_ms=layers[stalls.index(statistics.median_low(stalls))],
                       readahead=r["readahead"],
                       gpu_io_workers=args.gpu_io_workers, gpu_io_sms=args.gpu_io_sms,
                       staging_mib=args.staging_mib,
                       prefix_gb=blocks * cache.block_bytes * 2 * cache.shape.layers / 1e9)
            if method in raws and blocks:
                row.update(limit_gbps=raws[method], stall_floor_ms=1e3 * stall_floor_s(
                    row["prefix_gb"], cache.shape.layers, raws[method], compute))
            rows.append(row)
            print(json.dumps(row), flush=True)


def raw_read_gbps(path, nbytes, block=4 << 20, threads=16):
    """O_DIRECT read bandwidth of the first nbytes of an existing file, or of several files
    read at once (path and nbytes lists, the 4 MiB reads dealt round-robin over the files),
    with 16 threads of 4 MiB reads (the other benches' quick reference; this one's limit is
    measure_limit's)."""
    import mmap
    from concurrent.futures import ThreadPoolExecutor
    paths = path if isinstance(path, (list, tuple)) else [path]
    sizes = nbytes if isinstance(nbytes, (list, tuple)) else [nbytes]
    # Files smaller than a block are read in blocks of their size (4 KiB multiples, O_DIRECT).
    block = min([block] + [n // 4096 * 4096 for n in sizes])
    if block <= 0:
        raise ValueError(f"raw_read_gbps: {sizes} bytes are less than one 4 KiB read")
    fds = [os.open(p, os.O_RDONLY | os.O_DIRECT) for p in paths]
    # Block b of every file before block b + 1 of any, so that the files are read at once.
    units = [(fd, b * block) for b in range(max(sizes) // block)
             for fd, size in zip(fds, sizes) if (b + 1) * block <= size]

    def reader(k):
        buf = mmap.mmap(-1, block)
        done = 0
        for fd, off in units[k::threads]:
            done += os.preadv(fd, [buf], off)
        return done

    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(threads) as ex:
            done = sum(ex.map(reader, range(threads)))
    finally:
        for fd in fds:
            os.close(fd)
    return done / (time.perf_counter() - t0) / 1e9


def ceiling(directory, budget_s):
    """`tutti ceiling` of directory with this process's GPU, as the dict of its JSON: the
    best O_DIRECT read and write of a sweep over threads x I/O size x files, the pinned copies,
    and the limits (tools/common/ceiling.h)."""
    cmd = [str(find_build_file("tutti")), "ceiling", "--dir", str(directory), "--gpu",
           str(torch.cuda.current_device()), "--budget-s", str(budget_s), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def measure_limit(rows, method, directory, budget_s, **extra):
    """The limit of loads from directory into HBM, min(read ceiling, pinned host-to-device),
    as a "raw" row of method's storage (read_gbps, printed as it is added); returns it."""
    c = ceiling(directory, budget_s)
    limit = c["gpu_read_limit_gbps"] or c["host_read_limit_gbps"]
    rows.append(dict(experiment="raw", storage=storage_of(method), method="ceiling",
                     read_gbps=limit, ceiling_read_gbps=c["read"]["gbps"],
                     h2d_gbps=c["h2d_gbps"], copies=c["copies"], ceiling=c, **extra))
    print(json.dumps(rows[-1]), flush=True)
    return limit


def run_staging(args, rows):
    """GLM-4-9B-shaped KV: the pipeline's and the store's staging at 32K and 512K tokens."""
    shape = GLM4_9B
    geo = geometry(shape)
    for tokens in args.staging_contexts:
        blocks = tokens // BLOCK
        cache = PagedCache(shape, blocks)
        g = torch.Generator(device=DEV)
        g.manual_seed(tokens)
        for t in cache.layers:
            t.copy_(torch.randn(t.shape, generator=g, device=DEV, dtype=torch.float32).to(DT))
        ref = [t.clone() for t in cache.layers]
        tier = TuttiTier(Path(args.shm_dir) / "glm", shape, tokens, cache)
        tier.fill(cache, blocks)
        cache_wipe(cache, blocks)
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info()[0]
        t0 = time.perf_counter()
        sid = tier.step(blocks, 0)
        for layer in range(shape.layers):
            tier.pipe.wait_layer(layer)
        tier.pipe.end_step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        r = tier.result(sid)
        st = tier.pipe.stats()
        for a, b in zip(cache.layers, ref):
            if not torch.equal(a, b):
                raise AssertionError("GLM KV differs after the load")
        row = dict(experiment="staging", storage="emulated-nvme", method="tutti",
                   model="glm-4-9b", prompt=tokens, prefix=tokens,
                   kv_gb=blocks * cache.block_bytes * 2 * shape.layers / 1e9,
                   load_s=dt, load_gbps=r["load_bytes"] / dt / 1e9,
                   pipeline_staging_mib=st["staging_bytes"] / 2**20,
                   store_staging_mib=st["store_staging_bytes"] / 2**20,
                   gpu_free_delta_mib=(free0 - torch.cuda.mem_get_info()[0]) / 2**20,
                   load_errors=r["load_errors"])
        rows.append(row)
        print(json.dumps(row), flush=True)
        tier.close()
        del cache, ref
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--experiments", default="ttft,bubble,staging")
    ap.add_argument("--methods", default="compute,recompute,dram,tutti-shm,baseline-shm")
    ap.add_argument("--ttft-methods", default="",
                    help="the methods of the TTFT sweep, if not all of --methods")
    ap.add_argument("--prompt", type=int, default=131072)
    ap.add_argument("--prefixes", default="16384,32768,49152,65536,81920,98304,114688")
    ap.add_argument("--bubble-prompt", type=int, default=32768)
    ap.add_argument("--hit-rates", default="0,0.25,0.5,0.75,0.875,0.9375,1")
    ap.add_argument("--staging-contexts", default="32768,524288")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--disk-dir", default="")
    ap.add_argument("--shm-dir", default="/dev/shm/tutti-layerwise")
    ap.add_argument("--tag", default="")
    ap.add_argument("--ceiling-s", type=float, default=8.0,
                    help="time budget of each storage's ceiling sweep (tutti ceiling)")
    ap.add_argument("--wait-timeout-ms", type=int, default=30000)
    ap.add_argument("--gpu-io-workers", type=int, default=0,
                    help="workers of a gpu-uring layer kernel (its option workers; 0: its "
                         "default)")
    ap.add_argument("--gpu-io-sms", type=int, default=None,
                    help="SMs the workers are packed into (its option sms; default: its own)")
    ap.add_argument("--staging-mib", type=int, default=64,
                    help="the store's staging (its bounce slots: reads in flight), MiB")
    ap.add_argument("--readahead", type=int, default=0,
                    help="layers read ahead of compute (0: the pipeline's own window)")
    ap.add_argument("--compute-stream", choices=["default", "side"], default="side",
                    help="run the model on the default stream or on a stream of its own")
    ap.add_argument("--watchdog", type=float, default=0,
                    help="every N seconds, print the pipelines' counters (diagnosis)")
    args = ap.parse_args()
    args.prefixes = [int(x) for x in args.prefixes.split(",")]
    args.hit_rates = [float(x) for x in args.hit_rates.split(",")]
    args.staging_contexts = [int(x) for x in args.staging_contexts.split(",")]
    args.methods = args.methods.split(",")
    args.ttft_methods = [m for m in args.ttft_methods.split(",") if m]
    exps = args.experiments.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    torch.backends.cuda.matmul.allow_tf32 = True
    if args.compute_stream == "side":
        torch.cuda.set_stream(torch.cuda.Stream())
    watched = {}
    if args.watchdog > 0:
        import faulthandler
        import threading
        faulthandler.dump_traceback_later(args.watchdog * 6, repeat=True)

        def watch():
            while True:
                time.sleep(args.watchdog)
                for name, tier in list(watched.items()):
                    st = tier.pipe.stats()
                    print(f"watchdog {name}: layers_loaded {st['layers_loaded']} steps "
                          f"{st['steps']} load_chunks {st['load_chunks']} store "
                          f"{tier.store.stats()['load_chunks']}", flush=True)
        threading.Thread(target=watch, daemon=True).start()

    if "ttft" in exps or "bubble" in exps:
        shape = LLAMA3_8B
        max_prefix = max(args.prefixes + [args.bubble_prompt - CHUNK])
        cache = PagedCache(shape, max(args.prompt, args.bubble_prompt) // BLOCK)
        model = Model(shape)
        prefix = Prefix(shape, max_prefix)
        dirs = {"shm": args.shm_dir, "disk": args.disk_dir}
        tiers, loaders, raws = {}, {}, {}
        prefix.place(cache, prefix.max_blocks)
        for m in args.methods:
            storage = m.rsplit("-", 1)[-1]
            if m.startswith("tutti-"):
                tiers[m] = TuttiTier(Path(dirs[storage]) / "tutti", shape, max_prefix, cache,
                                     wait_timeout_ms=args.wait_timeout_ms,
                                     engine_opts=gpu_uring_opts(args),
                                     readahead=args.readahead, staging_mib=args.staging_mib)
                tiers[m].fill(cache, prefix.max_blocks)
                # The storage's limit in this run, in the store's directory.
                raws[m] = measure_limit(rows, m, tiers[m].dir, args.ceiling_s,
                                        source="store directory")
            elif m.startswith("baseline-"):
                Path(dirs[storage]).mkdir(parents=True, exist_ok=True)
                f = Path(dirs[storage]) / "baseline.blocks"
                prefix.write_block_file(f)
                loaders[m] = BlockLoader(f, prefix)
                measure_limit(rows, m, f.parent, args.ceiling_s, source="baseline directory")
            elif m == "dram":
                prefix.to_host()
        watched.update(tiers)
        # Warm up the kernels and the pipeline once.
        cache_wipe(cache, prefix.max_blocks)
        ttft(lambda: model.prefill(cache, args.prompt - 4096, args.prompt))
        for e in exps:  # in the order asked for
            if e == "ttft":
                run_ttft(args, model, cache, prefix, tiers, loaders, rows)
            elif e == "bubble":
                run_bubble(args, model, cache, prefix, tiers, rows, raws)
        for name, tier in tiers.items():
            st = tier.pipe.stats()
            rows.append(dict(experiment="pipeline-stats", method=name, **{
                k: v for k, v in st.items() if isinstance(v, (int, float))}))
            tier.pipe.write_trace(out / f"trace-{name}{args.tag}.json")
            tier.close()
        del cache, model, prefix, tiers, loaders
        torch.cuda.empty_cache()
    if "staging" in exps:
        run_staging(args, rows)

    with open(out / f"layerwise{args.tag}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    keys = sorted({k for r in rows for k in r})
    with open(out / f"layerwise{args.tag}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}/layerwise{args.tag}.csv", flush=True)


if __name__ == "__main__":
    main()
