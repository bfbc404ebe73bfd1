# SPDX-License-Identifier: Apache-2.0
"""Markdown tables of the serving benchmark's results (serve.jsonl from serve_bench.py), for
docs/results.md: per storage, a headline table (the highest rate whose p90 TTFT meets each SLO,
and the figures at those rates) and a table of every measured rate.

SLOs: 1 s, and one fitted to the model and the GPU: the median TTFT of computing a document of
the trace from scratch on an idle engine (measured in every system's warm-up; recompute's when
it ran). A tier that cannot beat recomputation on an idle GPU is no use under load.

Systems that use no storage (recompute, offload-cpu) ran once and appear under every storage.
When several lines hold the same (system, storage, rate, round), the later one wins. A rate
measured in several rounds (serve_bench.py --repeats) is reported by the median of each figure
over its rounds (a TTFT percentile that a round could not give, requests left unfinished,
counts as infinitely slow); the table of rates then gives the rounds and the range of the p50.

"outputs vs vLLM alone": each system's greedy outputs for the probe requests (prefixes served
from its tier, run_system.probe_outputs) against recompute's (vLLM's own prefix cache): "same"
when every probe the tier served gave vLLM alone's tokens, "DIFFERENT" when one did not (the
system moved wrong KV); a probe whose prefix did not come from the tier is counted apart. The
probes share their suffix, so vLLM alone's outputs must differ from one probe to the next for
the check to mean anything ("weak" otherwise).

Usage: table.py SERVE.jsonl [SERVE.jsonl ...] > table.md
"""

import json
import math
import statistics
import sys
from pathlib import Path

LMCACHE_SYSTEMS = ("lmcache-mp", "lmcache-mp-large", "lmcache", "lmcache-min")
ORDER = ("tutti", "tutti-layerwise", "tutti-no-async-sched", "tutti-gpu-uring", "tutti-uring",
         "tutti-no-share",
         "offload-cpu", "lmcache-mp", "lmcache-mp-large", "lmcache", "lmcache-min", "recompute")


def load(paths):
    rows, warm, skipped, probes = {}, {}, {}, {}
    for p in paths:
        for line in Path(p).read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            key = (r["system"], r["storage"])
            if r.get("phase") == "warmup":
                warm[key] = r
            elif r.get("phase") == "probe":
                probes[key] = r
            elif r.get("phase") == "rate" and not r.get("skipped"):
                rows[key + (r["rate"], r.get("round", 0))] = r
            elif r.get("skipped") or r.get("phase") == "exit":
                skipped[key] = r.get("skipped") or f"exit {r.get('exit')}"
    rounds: dict[tuple, list] = {}
    for k, r in rows.items():
        rounds.setdefault(k[:3], []).append(r)
    return {"rows": [median_row(g) for g in rounds.values()], "warm": warm, "skipped": skipped,
            "probes": probes}


def median_row(rounds):
    """One rate's rounds as one row: the median of every number, the rest from the last round;
    ``rounds`` and ``ttft_p50_range_s`` (min, max) say what the median was taken over."""
    if len(rounds) == 1:
        return rounds[0]
    out = dict(rounds[-1], rounds=len(rounds))
    keys = {k for r in rounds for k, v in r.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)} - {"rate", "round"}
    for k in keys:
        vals = [r.get(k) for r in rounds]
        if k.startswith("ttft_p"):
            vals = [math.inf if v is None else v for v in vals]
            m = statistics.median(vals)
            out[k] = None if math.isinf(m) else m
        else:
            vals = [v for v in vals if v is not None]
            out[k] = statistics.median(vals) if vals else None
    p50 = [r["ttft_p50_s"] for r in rounds if r.get("ttft_p50_s") is not None]
    out["ttft_p50_range_s"] = (min(p50), max(p50)) if p50 else None
    return out


def fitted_slo(data):
    warm = data["warm"]
    rec = [w["prefill_ttft_p50_s"] for (s, _), w in warm.items() if s == "recompute"]
    vals = rec or [w["prefill_ttft_p50_s"] for w in warm.values()]
    vals = [v for v in vals if v]
    return round(statistics.median(vals), 3) if vals else None


def max_rate(rows, slo):
    ok = [r["rate"] for r in rows if r.get("ttft_p90_s") is not None and r["ttft_p90_s"] <= slo
          and not r.get("unfinished")]
    return max(ok) if ok else None


def output_check(data, system, storage):
    """A system's probe outputs against vLLM alone's (see the module's docstring)."""
    probes = data.get("probes", {})
    mine = probes.get((system, storage)) or probes.get((system, "none"))
    if mine is None:
        return "-"
    if system == "recompute":
        return "reference"
    ref = probes.get(("recompute", "none"))
    if ref is None or any(ref.get(k) != mine.get(k) for k in ("probe", "weights", "model")):
        return "no reference"
    same = diff = missed = 0
    for a, b in zip(mine["probes"], ref["probes"], strict=False):
        if (a.get("cached") or 0) < a["prefix_tokens"]:
            missed += 1
        elif a["tokens"] == b["tokens"]:
            same += 1
        else:
            diff += 1
    n = len(mine["probes"])
    out = f"DIFFERENT in {diff} of {n}" if diff else f"same ({same} of {n})"
    if missed:
        out += f", {missed} not from the tier"
    if (mine.get("weights") or "").startswith("dummy"):
        out += " (dummy weights: weak)"
    elif len({tuple(p["tokens"]) for p in ref["probes"]}) < len(ref["probes"]):
        # The probes share their suffix: the same tokens after other prefixes would mean
        # outputs that do not depend on the KV.
        out += " (vLLM alone's outputs do not depend on the prefix: weak)"
    return out


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def rate(v):
    return "none" if v is None else f"{v:g}"


def share(r, key):
    p = r.get("prompt_tokens")
    return f"{100 * r[key] / p:.0f}%" if p and r.get(key) is not None else "-"


def gpu_hit_tokens(r):
    """Prompt tokens vLLM's GPU prefix cache served: what the requests report cached
    (num_cached_tokens, counted once, when a request is scheduled) less what came from the tier.
    vLLM's own prefix_cache_hits counter counts a lookup each time the scheduler asks about a
    request, and a request that a connector delays ("ask again") is asked several times; it
    stands in only for rows without cached_tokens."""
    if r.get("cached_tokens") is not None:
        return r["cached_tokens"] - (r.get("tier_hit_tokens") or 0)
    return r.get("gpu_hit_tokens")


def pinned(r):
    m = r.get("host_memory") or {}
    vals = [m.get(k) for k in ("vmpin_gib", "vmlck_gib", "driver_mapped_gib")]
    return sum(v for v in vals if v) if any(vals) else None


def systems_of(data, storage):
    seen = {s for (s, st) in list(data["warm"]) + list(data["skipped"])
            if st in (storage, "none")}
    seen |= {r["system"] for r in data["rows"] if r["storage"] in (storage, "none")}
    return [s for s in ORDER if s in seen] + sorted(seen - set(ORDER))


def markdown(data):
    slo_fit = fitted_slo(data)
    storages = sorted(({r["storage"] for r in data["rows"]} |
                       {st for (_, st) in data["warm"]}) - {"none"}) or ["none"]
    out = []
    desc = next(iter(data["warm"].values()), None) or next(iter(data["rows"]), None)
    if desc:
        t, s = desc["trace"], desc["trace_summary"]
        out += [f"Trace: {t['dataset']}/{t['preset']}, {s['requests']} requests over "
                f"{s['documents']} documents of {t['docs_min']}-{t['docs_max']} tokens "
                f"(prompts {s['prompt_mean']} tokens on average, at most {s['prompt_max']}; "
                f"{s['unique_kv_gib']} GiB of KV), output {t['output']}, seed {t['seed']}; "
                f"{desc['model']}-shaped model on {desc['device']}, GPU prefix cache capped at "
                f"{desc.get('gpu_blocks')} blocks. SLOs: 1 s and "
                f"{fmt(slo_fit)} s (a document computed from scratch on an idle engine).", ""]
        vers = {k: v for w in data["warm"].values() for k, v in (w.get("versions") or {}).items()}
        if vers:
            out[-2] += " Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(vers.items())) + "."
    for storage in storages:
        names = systems_of(data, storage)
        per = {n: sorted([r for r in data["rows"] if r["system"] == n and
                          r["storage"] in (storage, "none")], key=lambda r: r["rate"])
               for n in names}
        out += [f"### {'emulated NVMe (/dev/shm)' if storage == 'emulated' else storage}", "",
                "| system | max rate, p90 TTFT <= 1 s | max rate, p90 TTFT <= "
                f"{fmt(slo_fit)} s | TTFT p50 at LMCache's max rate (1 s) | host CPU cores "
                "| host RSS GiB | pinned GiB | GPU GiB | outputs vs vLLM alone | config |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        # LMCache's best configuration: the highest rate any of its systems sustained.
        lm = max((r for r in (max_rate(per.get(n, []), 1.0) for n in LMCACHE_SYSTEMS)
                  if r is not None), default=None)
        for n in names:
            rows = per[n]
            if not rows:
                why = (data["skipped"].get((n, storage)) or data["skipped"].get((n, "none"))
                       or "no result")
                out.append(f"| {n} | not run: {why} | | | | | | | | |")
                continue
            at_lm = next((r for r in rows if r["rate"] == lm), None)
            last = rows[-1]
            m = last.get("host_memory") or {}
            out.append("| " + " | ".join([
                n, rate(max_rate(rows, 1.0)), rate(max_rate(rows, slo_fit)) if slo_fit else "-",
                fmt(at_lm.get("ttft_p50_s")) if at_lm else "-",
                fmt(statistics.median([r["cpu_cores"] for r in rows]), 2),
                fmt(m.get("rss_gib"), 1), fmt(pinned(last), 2),
                fmt(last.get("gpu_memory_gib"), 1), output_check(data, n, storage),
                json.dumps(last.get("system_config") or {}).replace("|", "/")]) + " |")
        rounds = any(r.get("rounds", 1) > 1 for n in names for r in per[n])
        out += ["", "| system | rate | " + ("rounds | " if rounds else "") + "done | TTFT p50 | "
                "p90 | p99 | ITL mean | ITL p99 | req/s | GPU hits | tier hits | stall s "
                "| CPU cores |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if rounds
                                                                         else "")]
        for n in names:
            for r in per[n]:
                p50 = fmt(r.get("ttft_p50_s"))
                if r.get("ttft_p50_range_s"):
                    lo, hi = r["ttft_p50_range_s"]
                    p50 += f" ({lo:.3f}-{hi:.3f})"
                out.append("| " + " | ".join([
                    n, f"{r['rate']:g}"] + ([str(r.get("rounds", 1))] if rounds else []) + [
                    f"{fmt(r['completed'], 1)}/{fmt(r['requests'], 1)}",
                    p50, fmt(r.get("ttft_p90_s")),
                    fmt(r.get("ttft_p99_s")), fmt(r.get("itl_mean_s"), 4),
                    fmt(r.get("itl_p99_s"), 4), fmt(r.get("throughput_rps"), 2),
                    share(dict(r, gpu_hit_tokens=gpu_hit_tokens(r)), "gpu_hit_tokens"),
                    share(r, "tier_hit_tokens"),
                    fmt(r.get("gpu_stall_s")), fmt(r.get("cpu_cores"), 2)]) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(markdown(load(sys.argv[1:])))
