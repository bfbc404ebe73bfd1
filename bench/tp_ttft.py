# SPDX-License-Identifier: Apache-2.0
"""Tensor-parallel TTFT with a cached prefix: one process per GPU, each loading its own KV shard
from its own Tutti store through the layerwise pipeline, with real all-reduces between ranks.

The model is GLM-4-9B-shaped (40 layers, hidden 4096, 32 query heads, 2 KV heads, head dim 128,
MLP 13696, bf16) with random weights, split at TP=N the Megatron way: rank r holds 32/N query
heads, 2/N KV heads, 13696/N of the MLP and 1/N of the vocabulary; after the attention's output
projection and after the MLP the ranks sum their partial outputs (torch.distributed all_reduce:
NCCL on GPUs, gloo on the CPU). The decoder layer, the paged KV cache ([2, blocks, 16, KV heads,
128] per layer) and the key chains are those of bench/layerwise_ttft.py, imported.

Each rank owns a store of its own over --dirs-per-rank directories (striped, one data file each)
under <storage>/rank<r>/, with a namespace of its own (model, dtype, TP degree, rank), and fills it
once with its shard of the prefix KV for the longest prefix (random, deterministic per rank and
layer). Then, for each engine and each prefix length P: the cache's prefix blocks are wiped, and
a prompt of P cached tokens plus --suffix new tokens is computed, loading the prefix layer by
layer through the pipeline (begin_step, wait_layer before each layer's attention, end_step), the
suffix attending over the whole context; TTFT runs until the last token's logits are on the
host. After each run the loaded prefix KV is hashed on its device and compared with the hash
taken right after the fill (bit-exact or not). A "compute" row per length gives the TTFT with
the prefix already in memory (the lower bound).

Per rank and per (storage, engine, length): TTFT, the step's load time, bytes and bandwidth, its
stall, and the staging memory (the pipeline's and the store's, from the binding's stats; the
rank's GPU memory in use). Storage: --shm-dir (tmpfs: *emulated* fast NVMe) and --disk-dir (a
real disk); a length whose stores would not fit the free space is skipped and says so.

Output (--out): tp-ttft.jsonl (one JSON object per rank and run), tp-ttft-summary.txt (one line
per storage, engine and length). Smoke test without GPUs:
  python3 bench/tp_ttft.py --device cpu --backend gloo --model tiny --lengths 1024,2048 \\
      --suffix 64 --engines uring,gpu-uring --shm-dir /dev/shm/tp --disk-dir '' --out build/tp-out
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import layerwise_ttft as lw  # noqa: E402
from tutti.pipeline import Pipeline  # noqa: E402  (the path is set by layerwise_ttft)
from tutti.store import ChunkRequest, Store  # noqa: E402

MODELS = {
    "glm-4-9b": lw.GLM4_9B,
    # A few small layers for smoke tests on the CPU (KV heads divisible by 2 and 4).
    "tiny": lw.Shape(4, 256, 8, 4, 64, 512, 1024),
}
SPARE_CHUNKS = 8


def shard(shape, tp):
    for name, v in (("query heads", shape.heads), ("KV heads", shape.kv_heads),
                    ("MLP width", shape.inter), ("vocabulary", shape.vocab)):
        if v % tp:
            raise SystemExit(f"tp_ttft: {name} ({v}) do not split over {tp} ranks")
    return lw.Shape(shape.layers, shape.hidden, shape.heads // tp, shape.kv_heads // tp,
                    shape.head_dim, shape.inter // tp, shape.vocab // tp)


def kv_hash(cache, blocks):
    """A hash of the prefix KV (blocks [0, blocks) of every layer and plane), computed where the
    KV lives: the bytes as int64 words times fixed odd weights, summed modulo 2^64 per row and
    then across rows with weights of their own. Any change to one word changes it; equal KV
    gives equal hashes on any device (int64 products and sums wrap around on both)."""
    out = []
    for t in cache.layers:
        words = t[:, :blocks].contiguous().view(torch.int64).view(2 * blocks, -1)  # block rows
        g = torch.Generator(device="cpu")
        g.manual_seed(len(out))
        w_col = (torch.randint(0, 2**62, (words.shape[1],), generator=g) * 2 + 1).to(
            words.device)
        w_row = (torch.randint(0, 2**62, (words.shape[0],), generator=g) * 2 + 1).to(
            words.device)
        out.append(int(((words * w_col).sum(1) * w_row).sum()))
    return out


def fill_cache(cache, blocks, rank):
    """Random prefix KV, deterministic per rank and layer."""
    for layer, t in enumerate(cache.layers):
        g = torch.Generator(device=t.device)
        g.manual_seed(1_000_003 * (rank + 1) + layer)
        t[:, :blocks].copy_(torch.randn(t[:, :blocks].shape, generator=g, device=t.device,
                                        dtype=torch.float32).to(t.dtype))


class RankStore:
    """This rank's store over its directories, its registered KV and its pipeline."""

    def __init__(self, dirs, shape, chunks, kv, engine, ns, staging_bytes):
        self.geo = lw.geometry(shape)
        self.kv = kv
        self.store = Store(dirs, self.geo, capacity_bytes=(chunks + SPARE_CHUNKS) *
                           self.geo.slot_bytes, ns=ns, engine=engine,
                           staging_bytes=staging_bytes)
        self.pipe = Pipeline(self.store, self.kv, save_staging_bytes=0)

    def close(self):
        self.pipe.close()
        self.store.close()


def storages(args):
    out = []
    if args.shm_dir:
        out.append(("emulated-nvme", Path(args.shm_dir)))
    if args.disk_dir:
        out.append(("disk", Path(args.disk_dir)))
    return out


def fitting_lengths(args, base, slot_bytes):
    """The lengths whose stores (every rank's, sized for that length) fit in 90% of the free
    space of base's filesystem, and the others."""
    base.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(base).free
    fit = [n for n in args.lengths
           if args.tp * (n // lw.CHUNK + SPARE_CHUNKS) * slot_bytes <= 0.9 * free]
    return fit, [n for n in args.lengths if n not in fit], free


def run_once(args, model, cache, rs, blocks, suffix, rank):
    """One TTFT run: prefix of `blocks` paged blocks loaded through the pipeline (rs), or
    already in place (rs None)."""
    sync(args)
    dist.barrier()
    t0 = time.perf_counter()
    sid = None
    if rs is not None:
        stream = torch.cuda.current_stream().cuda_stream if args.device == "cuda" else None
        req = ChunkRequest(rs.keys[: blocks * lw.BLOCK // lw.CHUNK], list(range(blocks)))
        sid = rs.pipe.begin_step(loads=[req], compute_tokens=suffix, stream=stream)
    p = blocks * lw.BLOCK
    logits = model.prefill(cache, p, p + suffix,
                           before_attention=rs.pipe.wait_layer if rs is not None else None)
    if rs is not None:
        rs.pipe.end_step()
    logits.float().cpu()
    t = time.perf_counter() - t0
    res = None
    if rs is not None:
        for _ in range(400000):
            res = rs.pipe.result(sid)
            if res is not None:
                break
            time.sleep(50e-6)
        if res is None:
            raise TimeoutError(f"rank {rank}: no result for step {sid}")
    return t, res


def sync(args):
    if args.device == "cuda":
        torch.cuda.synchronize()


def gpu_mem_in_use(args):
    if args.device != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info()
    return total - free


class Rank:
    """What one rank keeps across storages and engines."""

    def __init__(self, rank, args):
        self.rank, self.args = rank, args
        self.shape = shard(MODELS[args.model], args.tp)
        self.geo = lw.geometry(self.shape)
        max_len = max(args.lengths)
        self.max_blocks = max_len // lw.BLOCK
        self.cache = lw.PagedCache(self.shape, (max_len + args.suffix + lw.BLOCK - 1) // lw.BLOCK)
        self.model = lw.Model(self.shape, seed=100 + rank)
        self.model.reduce = self.all_reduce
        self.kv = self.cache.kv(self.geo)
        self.ns = f"{args.model}|bf16|tp{args.tp}|rank{rank}".encode()
        self.keys = lw.chain_keys(max_len // lw.CHUNK, salt=f"tp{args.tp}-rank{rank}".encode())
        self.rows = []
        self.compute_done = set()

    def all_reduce(self, x):
        # gloo does not sum bfloat16 everywhere: it sums in float32 on the CPU.
        y = x.float() if self.args.backend == "gloo" else x
        dist.all_reduce(y)
        return y.to(x.dtype) if y is not x else y

    def row(self, **kw):
        self.rows.append(dict(rank=self.rank, **kw))
        return self.rows[-1]

    def open(self, dirs, chunks, engine):
        """This rank's store with engine, or None when any rank cannot open one (recorded):
        the ranks go on together or not at all, as their collectives require."""
        err, rs = None, None
        try:
            rs = RankStore(dirs, self.shape, chunks, self.kv, engine, self.ns,
                           self.args.staging_mib << 20)
        except OSError as e:
            err = str(e)
        errs = [None] * self.args.tp
        dist.all_gather_object(errs, err)
        if any(errs):
            if rs is not None:
                rs.close()
            return None, "; ".join(f"rank {i}: {e}" for i, e in enumerate(errs) if e)
        rs.keys = self.keys
        return rs, None

    def fill(self, rs, storage, engine, chunks):
        """Save this rank's shard of the longest prefix that fits (the cache holds it again
        first: loads of earlier storages wrote over parts of it)."""
        fill_cache(self.cache, self.max_blocks, self.rank)
        sync(self.args)
        t0 = time.perf_counter()
        n, status = rs.store.save(self.kv, [ChunkRequest(self.keys[:chunks], list(
            range(chunks * lw.CHUNK // lw.BLOCK)))])
        dt = time.perf_counter() - t0
        if n != chunks or any(x < 0 for x in status):
            raise OSError(5, f"rank {self.rank}: filled {n} of {chunks} chunks")
        self.row(storage=storage, engine=engine, fill=True, tokens=chunks * lw.CHUNK, fill_s=dt,
                 fill_gbps=rs.store.stats()["save_bytes"] / dt / 1e9)

    def raw(self, storage, dirs, n_tok):
        """The bound the loads are held to: O_DIRECT reads of the bytes the longest prefix's load
        reads, from this rank's own data files, every rank at once (the ranks share the
        machine's storage as their loads do); --repeats rounds."""
        # Every data file of each directory (tutti.data, tutti.data.1, ...): a directory's
        # chunks are spread over them.
        files = [str(f) for d in dirs for f in sorted(d.glob("tutti.data*"))]
        per_file = max(1, n_tok // lw.CHUNK // len(files)) * self.geo.slot_bytes
        for rep in range(self.args.repeats):
            dist.barrier()
            try:
                gbps, err = lw.raw_read_gbps(files, [per_file] * len(files)), None
            except OSError as e:
                gbps, err = None, str(e)
            self.row(storage=storage, engine="raw-read", prefix=n_tok, repeat=rep,
                     raw_bytes=per_file * len(files), raw_gbps=gbps, error=err)

    def measure(self, rs, storage, engine, n_tok, ref):
        args, blocks = self.args, n_tok // lw.BLOCK
        for rep in range(args.repeats):
            lw.cache_wipe(self.cache, blocks)
            sync(args)
            mem0 = gpu_mem_in_use(args)
            t, res = run_once(args, self.model, self.cache, rs, blocks, args.suffix, self.rank)
            sync(args)
            got = kv_hash(self.cache, blocks)
            st = rs.pipe.stats()
            r = self.row(storage=storage, engine=engine, prefix=n_tok, suffix=args.suffix,
                         prompt=n_tok + args.suffix, repeat=rep, ttft_s=t,
                         load_s=res["load_ns"] / 1e9, load_bytes=res["load_bytes"],
                         load_gbps=res["load_bytes"] / max(res["load_ns"], 1),
                         stall_ms=res["stall_ns"] / 1e6, load_errors=res["load_errors"],
                         readahead=res["readahead"],
                         pipeline_staging_bytes=st["staging_bytes"],
                         store_staging_bytes=st["store_staging_bytes"],
                         gpu_mem_in_use_bytes=mem0, bit_exact=got == ref[n_tok],
                         kv_hash=f"{hash(tuple(got)) & (2**64 - 1):016x}")
            print(json.dumps(r), flush=True)
        if n_tok not in self.compute_done:
            # The prefix is in place now: the same prompt without loads (every rank decides
            # alike, since it all-reduces).
            t, _ = run_once(args, self.model, self.cache, None, blocks, args.suffix, self.rank)
            self.row(storage="in-memory", engine="compute", prefix=n_tok, suffix=args.suffix,
                     prompt=n_tok + args.suffix, ttft_s=t)
            self.compute_done.add(n_tok)

    def storage(self, storage, base, ref):
        args = self.args
        fit, skipped, free = fitting_lengths(args, base, self.geo.slot_bytes)
        box = [(fit, skipped, free)]
        dist.broadcast_object_list(box, src=0)  # rank 0's view of the space decides for all
        fit, skipped, free = box[0]
        for n in skipped:
            self.row(storage=storage, prefix=n, skipped=True,
                     reason=f"{args.tp} stores of {n} tokens do not fit the "
                            f"{free / 2**30:.1f} GiB free in {base}")
        if not fit:
            return
        home = base / f"rank{self.rank}"
        dirs = [home / f"d{i}" for i in range(args.dirs_per_rank)]
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        chunks, filled = max(fit) // lw.CHUNK, False
        for engine in args.engines:
            rs, why = self.open(dirs, chunks, engine)
            if rs is None:
                self.row(storage=storage, engine=engine, skipped=True, reason=why)
                continue
            if not filled:
                self.fill(rs, storage, engine, chunks)
                filled = True
            for n_tok in fit:
                self.measure(rs, storage, engine, n_tok, ref)
            rs.close()
        if filled:
            self.raw(storage, dirs, max(fit))
        shutil.rmtree(home, ignore_errors=True)
        dist.barrier()
        if self.rank == 0:
            try:
                base.rmdir()  # only if empty: nothing of anyone else's is removed
            except OSError:
                pass


def worker(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group(args.backend, rank=rank, world_size=args.tp)
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        lw.DEV = torch.device("cuda", rank)
        # A compute stream of its own, as vLLM's later model runners use.
        torch.cuda.set_stream(torch.cuda.Stream())
    else:
        lw.DEV = torch.device("cpu")
    me = Rank(rank, args)
    # Warm-up: kernels, cuBLAS and the communicator once, before anything is timed.
    fill_cache(me.cache, me.cache.nr_blocks, rank)
    run_once(args, me.model, me.cache, None, min(args.lengths) // lw.BLOCK, args.suffix, rank)
    fill_cache(me.cache, me.max_blocks, rank)
    sync(args)
    ref = {n: kv_hash(me.cache, n // lw.BLOCK) for n in args.lengths}
    for storage, base in storages(args):
        me.storage(storage, base, ref)
    me.kv.close()
    everyone = [None] * args.tp
    dist.all_gather_object(everyone, me.rows)
    if rank == 0:
        write_results(args, [r for rows in everyone for r in rows])
    dist.destroy_process_group()


def write_results(args, rows):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "tp-ttft.jsonl", "a") as f:
        for r in rows:
            f.write(json.dumps(dict(r, model=args.model, tp=args.tp, device=args.device)) + "\n")
    lines = []
    for r in rows:
        if r.get("skipped") and r["rank"] == 0:
            what = f"{r['prefix']} tokens" if "prefix" in r else r["engine"]
            lines.append(f"tp{args.tp} {r['storage']}: {what} skipped: {r['reason']}")
    # Raw reads: per storage, each rank's median round; the bound of a run on that storage is
    # max(compute alone, its slowest rank's bytes / that rank's raw bandwidth).
    raw, compute = {}, {}
    for r in rows:
        if r.get("engine") == "raw-read":
            raw.setdefault(r["storage"], {}).setdefault(r["rank"], []).append(r)
        elif r.get("engine") == "compute":
            compute[r["prefix"]] = max(compute.get(r["prefix"], 0), r["ttft_s"])
    raw_gbps = {}
    for storage, ranks in raw.items():
        failed = [r for rs in ranks.values() for r in rs if r["raw_gbps"] is None]
        if failed:
            lines.append(f"tp{args.tp} {storage}: raw O_DIRECT reads failed: {failed[0]['error']}")
            continue
        raw_gbps[storage] = {k: statistics.median(r["raw_gbps"] for r in rs)
                             for k, rs in sorted(ranks.items())}
        any_rank = next(iter(ranks.values()))
        lines.append(f"tp{args.tp} {storage}: raw O_DIRECT read per rank, every rank at once "
                     f"({any_rank[0]['raw_bytes'] / 1e9:.2f} GB from its "
                     f"{args.dirs_per_rank} data files, 16 threads x 4 MiB, median of "
                     f"{len(any_rank)}): " + " ".join(f"{g:.2f}" for g in
                                                     raw_gbps[storage].values()) + " GB/s")
    runs = {}
    for r in rows:
        if "ttft_s" in r:
            runs.setdefault((r["storage"], r["engine"], r["prefix"]), {}).setdefault(
                r.get("repeat", 0), []).append(r)
    for (storage, engine, prefix), reps in runs.items():
        # A repeat's TTFT is its slowest rank's; the line shows the median repeat (the lower
        # one of an even count) and how many there were.
        order = sorted(reps.values(), key=lambda rs: max(r["ttft_s"] for r in rs))
        rs = order[(len(order) - 1) // 2]
        ttft = max(r["ttft_s"] for r in rs)
        line = (f"tp{args.tp} {args.model} {storage} {engine} prefix {prefix} + {args.suffix}: "
                f"TTFT {ttft:.3f} s (ranks " +
                " ".join(f"{r['ttft_s']:.3f}" for r in rs) + ")")
        if len(order) > 1:
            line += (f", median of {len(order)} runs (" +
                     " ".join(f"{max(r['ttft_s'] for r in x):.3f}" for x in order) + ")")
        if engine != "compute":
            line += (", load " + " ".join(f"{r['load_s']:.3f} s {r['load_bytes'] / 1e9:.2f} GB "
                                         f"{r['load_gbps']:.2f} GB/s" for r in rs) +
                     ", staging per rank (pipeline + store) " +
                     " ".join(f"{size(r['pipeline_staging_bytes'])} + "
                              f"{size(r['store_staging_bytes'])}" for r in rs))
            if storage in raw_gbps and prefix in compute:
                io = max(r["load_bytes"] / 1e9 / raw_gbps[storage][r["rank"]] for r in rs)
                bound = max(compute[prefix], io)
                line += (f", bound max(compute {compute[prefix]:.3f}, reads at raw {io:.3f}) s,"
                         f" TTFT x bound {ttft / bound:.2f}")
            every = [r for x in order for r in x]
            line += (", bit-exact on every rank and run" if all(r["bit_exact"] for r in every)
                     else ", MISMATCH: " + " ".join(f"rank {r['rank']} run {r.get('repeat', 0)}"
                                                    for r in every if not r["bit_exact"]))
        lines.append(line)
    with open(out / "tp-ttft-summary.txt", "a") as f:
        for line in lines:
            f.write(line + "\n")
    print("\n".join(lines), flush=True)


def size(n):
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--model", choices=sorted(MODELS), default="glm-4-9b")
    ap.add_argument("--lengths", default="131072,262144,524288,655360",
                    help="cached prefix lengths in tokens, whole chunks of 256")
    ap.add_argument("--suffix", type=int, default=512, help="new tokens computed per prompt")
    ap.add_argument("--engines", default="gpu-uring,gds")
    ap.add_argument("--dirs-per-rank", type=int, default=2)
    ap.add_argument("--shm-dir", default="/dev/shm/tutti-tp")
    ap.add_argument("--disk-dir", default="", help="a directory on a real disk ('' to skip)")
    ap.add_argument("--staging-mib", type=int, default=64, help="each store's staging memory")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--backend", choices=["nccl", "gloo"], default=None,
                    help="default: nccl on cuda, gloo on cpu")
    args = ap.parse_args()
    args.lengths = sorted(int(x) for x in args.lengths.split(","))
    args.engines = args.engines.split(",")
    args.backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    if any(n <= 0 or n % lw.CHUNK for n in args.lengths) or args.suffix <= 0:
        raise SystemExit("tp_ttft: lengths are whole chunks of 256 tokens, the suffix > 0")
    if args.device == "cuda" and torch.cuda.device_count() < args.tp:
        raise SystemExit(f"tp_ttft: {args.tp} ranks need {args.tp} GPUs, "
                         f"{torch.cuda.device_count()} visible (--device cpu for a smoke test)")
    args.port = free_port()
    # No NVLink multicast (NVLS) in NCCL: a two-rank all-reduce of a few MB gains nothing from
    # it, and it holds fabric resources that other jobs on a shared host may need.
    for var, val in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")):
        os.environ.setdefault(var, val)
    mp.spawn(worker, args=(args,), nprocs=args.tp, join=True)


if __name__ == "__main__":
    main()
