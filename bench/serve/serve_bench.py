# SPDX-License-Identifier: Apache-2.0
"""Serving benchmark in vLLM: long-document QA (LEval-shaped) at a sweep of request rates, for
each system (systems.py) in the same vLLM on the same trace, each in a process of its own
(run_system.py), on emulated NVMe (/dev/shm) and on a disk.

The GPU prefix cache is capped (--gpu-blocks, vLLM's num_gpu_blocks_override) well below the
trace's documents, so reuse comes from the tier under test; it is emptied before every rate.
The systems that use no storage (recompute, offload-cpu) run once, with the first storage.
Every (system, storage, rate) is one JSON line in OUT/serve.jsonl, written as it is measured;
a system that runs past its share of the deadline is stopped and keeps what it wrote.
OUT/serve-summary.md is the table (table.py) of what ran.

Every system also answers a few probe requests one at a time after its warm-up, their prefix
served from its tier (run_system.probe_outputs); table.py compares their greedy outputs with vLLM
alone's, so that a system moving wrong KV shows in the results.

LMCache's in-process connector (lmcache, lmcache-min) moves the KV of vLLM 0.26 and later wrong
(LMCache issue #4463, systems.lmcache_v1_refusal): those systems are reported as not run there
unless --allow-lmcache-v1 is given; lmcache-mp is LMCache's multiprocess mode, which is not
affected.

Each rate replays the trace's first requests: about a window of arrivals (8 s emulated, 12 s
on the disk), at least 12 (8 on the disk), at most --requests. --repeats N sweeps the rates N
times in each system's vLLM (one line per rate and round); table.py reports each rate's median.

Usage: serve_bench.py --out DIR [--storage emulated,disk] [--systems S,...] [--rates R,...]
                      [--disk-rates R,...] [--requests N] [--docs D] [--repeats N]
                      [--deadline S] [--smoke]
                      [--allow-lmcache-v1]
--smoke: a tiny model on vLLM's CPU build, small documents, two rates (recompute and tutti;
the GPU-only and absent systems are reported as skipped).
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "python" / "tests" / "vllm"))
import local_model  # noqa: E402
import systems  # noqa: E402
import table  # noqa: E402
from workload import Trace  # noqa: E402

GPU = {
    # 64K tokens of GPU KV: room for the prefixes of three running requests, a quarter of the
    # trace's documents.
    "shape": "llama-3-8b", "block": 16, "gpu_blocks": 4096,
    "trace": {"docs_min": 8192, "docs_max": 32768, "docs": 12, "requests": 40,
              "output": "fixed:16"},
    "rates": {"emulated": [1, 2, 4, 8, 12], "disk": [0.5, 1, 2]},
    # Per rate: about `window` seconds of arrivals, at least `min_requests` requests.
    "window_s": {"emulated": 8, "disk": 12}, "min_requests": {"emulated": 12, "disk": 8},
    "disk_trace": {"docs": 6, "requests": 24, "docs_max": 16384},
    "reserve_s": 80,  # what a system needs at least: start, warm-up, a few rates
    "engine_args": dict(load_format="dummy", dtype="bfloat16", enforce_eager=True,
                        block_size=16, max_num_batched_tokens=8192, max_num_seqs=16,
                        gpu_memory_utilization=0.5, enable_prefix_caching=True,
                        disable_log_stats=False, seed=0),
    "stop_above": 4.0, "drain_s": 40,
    # Greedy outputs compared with vLLM alone's: prefixes of 1024 tokens from the tier.
    "probe": {"requests": 2, "prefix_tokens": 1024, "suffix_tokens": 64, "output_tokens": 8,
              "seed": 7, "vocab": (1000, 100000)},
}
CPU = {
    "shape": "tiny", "block": 32, "gpu_blocks": 96,  # 3K tokens
    "trace": {"docs_min": 8192, "docs_max": 32768, "docs": 4, "requests": 6,
              "output": "fixed:4", "scale": 1 / 32, "vocab": (1, 509)},
    "rates": {"emulated": [0.5, 1], "disk": [0.5]},
    "window_s": {"emulated": 8, "disk": 8}, "min_requests": {"emulated": 4, "disk": 4},
    "disk_trace": {},
    "reserve_s": 60,
    "engine_args": dict(dtype="float32", enforce_eager=True, block_size=32, max_num_seqs=4,
                        enable_prefix_caching=True, disable_log_stats=False, seed=0),
    "stop_above": 60.0, "drain_s": 120,
    "probe": {"requests": 2, "prefix_tokens": 256, "suffix_tokens": 16, "output_tokens": 4,
              "seed": 7, "vocab": (1, 509)},
}


def detect_device():
    try:
        import torch
        from vllm.platforms import current_platform
    except ImportError:
        return None
    if current_platform.is_cuda() and torch.cuda.is_available():
        return "cuda"
    return "cpu" if current_platform.is_cpu() else None


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None, help="model and specs (default OUT/work)")
    ap.add_argument("--storage", default="emulated,disk")
    ap.add_argument("--emulated-dir", default="/dev/shm/tutti-serve")
    ap.add_argument("--disk-dir", default=str(REPO / "build" / "serve-disk"))
    ap.add_argument("--systems", default="tutti,lmcache-mp,offload-cpu,recompute",
                    help="in the order they run (the most wanted first, for the deadline); "
                    f"of {','.join(systems.SYSTEMS)}")
    ap.add_argument("--rates", default=None, help="emulated rates, requests/s")
    ap.add_argument("--disk-rates", default=None)
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--docs", type=int, default=None)
    ap.add_argument("--docs-max", type=int, default=None)
    ap.add_argument("--output", default=None, help="fixed:N or reference")
    ap.add_argument("--gpu-blocks", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of the rate sweep in each system's vLLM (table.py reports "
                    "each rate's median over them)")
    ap.add_argument("--deadline", type=float, default=480, help="seconds for everything")
    ap.add_argument("--smoke", action="store_true", help="tiny model on vLLM's CPU build")
    ap.add_argument("--tutti-load-policy", choices=("auto", "always"), default=None,
                    help="the Tutti systems' load_policy (default: the connector's, auto)")
    ap.add_argument("--allow-lmcache-v1", action="store_true",
                    help="run lmcache and lmcache-min (LMCache's in-process connector) even on a "
                    "vLLM whose packed K/V layout it moves wrong (LMCache issue #4463)")
    a = ap.parse_args()
    if a.repeats < 1:
        raise SystemExit(f"serve_bench: --repeats must be at least 1, not {a.repeats}")

    device = "cpu" if a.smoke else detect_device()
    if device != "cuda" and not a.smoke:
        print("serve_bench: no GPU build of vLLM here (use --smoke on a CPU)")
        return 77
    P = CPU if device == "cpu" else GPU
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(a.work or out / "work")
    work.mkdir(parents=True, exist_ok=True)
    t_end = time.time() + a.deadline
    model = local_model.write_model_dir(work / "model", P["shape"], weights=device == "cpu")
    kvpt = local_model.kv_bytes_per_token(P["shape"])
    jsonl = out / "serve.jsonl"
    storages = [s for s in a.storage.split(",") if s]
    wanted = [s for s in a.systems.split(",") if s]
    for s in wanted:
        if s not in systems.SYSTEMS:
            raise SystemExit(f"serve_bench: unknown system {s} (one of {systems.SYSTEMS})")
    dirs = {"emulated": Path(a.emulated_dir), "disk": Path(a.disk_dir)}
    plan = []
    for i, storage in enumerate(storages):
        for s in wanted:
            if s in systems.USES_STORAGE or i == 0:
                plan.append((storage if s in systems.USES_STORAGE else "none", storage, s))
    for n, (label, storage, system) in enumerate(plan):
        trace_args = dict(P["trace"])
        if storage == "disk":
            trace_args.update(P["disk_trace"])
        for k in ("requests", "docs", "docs_max", "output"):
            if getattr(a, k) is not None:
                trace_args[k] = getattr(a, k)
        rates = P["rates"][storage]
        if storage == "emulated" and a.rates:
            rates = [float(x) for x in a.rates.split(",")]
        if storage == "disk" and a.disk_rates:
            rates = [float(x) for x in a.disk_rates.split(",")]
        record = {"system": system, "storage": label, "device": device,
                  "model": P["shape"], "phase": "skipped"}
        why = systems.unavailable(system, device, a.allow_lmcache_v1)
        if why:
            with open(jsonl, "a") as f:
                f.write(json.dumps(dict(record, skipped=why)) + "\n")
            print(f"serve_bench: {system} skipped: {why}", flush=True)
            continue
        # This system's share of what is left: all of it but what the systems after it need
        # at least (those that stop early leave their time to the later ones).
        left = t_end - time.time()
        later = sum(1 for (_, _, s) in plan[n + 1:]
                    if not systems.unavailable(s, device, a.allow_lmcache_v1))
        share = max(left - later * P["reserve_s"], min(left, P["reserve_s"]))
        if left < 60:
            with open(jsonl, "a") as f:
                f.write(json.dumps(dict(record, skipped="deadline")) + "\n")
            continue
        trace = Trace(**trace_args)
        summary = trace.summary(kvpt)
        sdir = dirs[storage] / system if system in systems.USES_STORAGE else None
        if sdir is not None:
            shutil.rmtree(sdir, ignore_errors=True)
            sdir.mkdir(parents=True)
        port = free_port(systems.LMCACHE_MP_HOST)
        kv, env, info = systems.config(system, sdir, work, summary, kvpt, port,
                                       a.tutti_load_policy)
        argv = systems.lmcache_server_args(system, sdir, summary, kvpt, port)
        server = {"argv": argv, "host": systems.LMCACHE_MP_HOST, "port": port} if argv else None
        max_len = summary["prompt_max"] + max(r["output_tokens"] for r in trace.requests) + 64
        engine_args = dict(P["engine_args"], model=str(model),
                           max_model_len=-(-max_len // 1024) * 1024,
                           num_gpu_blocks_override=a.gpu_blocks or P["gpu_blocks"],
                           **systems.engine_overrides(system))
        if device == "cuda":
            engine_args["kv_cache_memory_bytes"] = (engine_args["num_gpu_blocks_override"] + 64) \
                * P["block"] * kvpt
        spec = {"system": system, "storage": label, "storage_dir": str(sdir) if sdir else None,
                "device": device, "model_shape": P["shape"], "kv_bytes_per_token": kvpt,
                "trace": trace_args, "rates": rates, "repeats": a.repeats,
                "engine_args": engine_args,
                "kv_transfer_config": kv, "system_config": info, "server": server,
                "probe": P["probe"],
                "stop_above": P["stop_above"], "drain_s": P["drain_s"],
                "window_s": P["window_s"][storage], "min_requests": P["min_requests"][storage],
                "deadline": time.time() + share - 15, "out": str(jsonl)}
        spec_path = work / f"{label}-{system}.spec.json"
        spec_path.write_text(json.dumps(spec))
        log = out / f"serve-{label}-{system}.log"
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   PYTHONHASHSEED="0", VLLM_USE_FLASHINFER_SAMPLER="0", **env)
        if device == "cuda":
            # The weights' re-draw (a function sent to the engine core's worker) is pickled.
            env.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        if device == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            # vLLM's CPU build runs the worker in a process of its own (its "mp" executor)
            # unless V1 multiprocessing is off, and TuttiConnector at tensor parallelism 1
            # opens its store in the scheduler's process and again in the worker's: the second
            # open fails (EBUSY). With it off the worker runs in the engine core's process, as
            # it does on a GPU at tensor parallelism 1; AsyncLLM keeps its engine core in a
            # child process either way.
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        print(f"serve_bench: {system} on {label}: rates {rates}, {summary['requests']} requests "
              f"over {summary['documents']} documents ({summary['unique_kv_gib']} GiB of KV), "
              f"{share:.0f} s", flush=True)
        t0 = time.monotonic()
        with open(log, "w") as lf:
            try:
                rc = subprocess.run([sys.executable, str(HERE / "run_system.py"),
                                     str(spec_path)], env=env, stdout=lf,
                                    stderr=subprocess.STDOUT, timeout=share).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        print(f"serve_bench: {system} on {label}: exit {rc} after "
              f"{time.monotonic() - t0:.0f} s", flush=True)
        if rc != 0:
            with open(jsonl, "a") as f:
                f.write(json.dumps(dict(record, phase="exit", exit=rc, log=log.name)) + "\n")
        if sdir is not None:
            shutil.rmtree(sdir, ignore_errors=True)
    md = table.markdown(table.load([jsonl]))
    (out / "serve-summary.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
