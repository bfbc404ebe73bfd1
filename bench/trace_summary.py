#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summarise a layerwise pipeline trace (tutti_pipeline_write_trace, Chrome trace JSON) per step:
when its reads began and ended, how long the reads were busy, its stall and its compute, so that
one can see whether a step was bound by storage or by compute without opening Perfetto.

Usage: python3 bench/trace_summary.py TRACE.json [--last N]
"""
import argparse
import json
from collections import defaultdict


def summarise(events):
    tracks = {}
    for e in events:
        if e.get("ph") == "M":
            tracks[e["tid"]] = e["args"]["name"]
    steps = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e.get("ph") != "X":
            continue
        kind = tracks.get(e["tid"], str(e["tid"])).split(":")[-1].split("(")[0].strip()
        steps[e["args"]["step"]][kind].append((e["ts"], e["ts"] + e["dur"]))
    rows = []
    for step in sorted(steps):
        k = steps[step]
        reads, stalls, comp = k.get("storage reads", []), k.get("stalls", []), k.get("compute", [])
        row = {"step": step, "layers_read": len(reads)}
        if reads:
            row.update(read_begin_ms=min(a for a, _ in reads) / 1e3,
                       read_end_ms=max(b for _, b in reads) / 1e3,
                       read_busy_ms=sum(b - a for a, b in reads) / 1e3)
        if stalls:
            row.update(first_wait_ms=min(a for a, _ in stalls) / 1e3,
                       stall_ms=sum(b - a for a, b in stalls) / 1e3,
                       stall_layer0_ms=(stalls[0][1] - stalls[0][0]) / 1e3)
        if comp:
            row.update(compute_ms=sum(b - a for a, b in comp) / 1e3,
                       compute_end_ms=max(b for _, b in comp) / 1e3)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--last", type=int, default=0, help="only the last N steps")
    args = ap.parse_args()
    with open(args.trace) as f:
        rows = summarise(json.load(f)["traceEvents"])
    for r in rows[-args.last:] if args.last else rows:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}))


if __name__ == "__main__":
    main()
