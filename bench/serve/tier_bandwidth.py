#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How fast each tier read during a serving run, from what the run recorded.

- Tutti: its connector's counters in serve.jsonl, per system, storage and rate: the tokens it
  loaded into vLLM's KV and the seconds its loads took (``tutti_load_tokens``,
  ``tutti_load_s``), times the model's KV bytes per token.
- LMCache's multiprocess server: its log lines "Prefetch request completed (L1+L2): ... (A L1,
  B L2) in T ms". A prefetch with A = 0 read its B chunks from the disk tier (L2) into the CPU
  tier (L1) in T ms: B chunks of LMCACHE_CHUNK tokens. That excludes LMCache's copy from L1 into
  vLLM's KV, which Tutti's figure includes.

Usage: tier_bandwidth.py SERVE.jsonl [LMCACHE_LOG ...]   (GB = 1e9 bytes)
"""

import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "python" / "tests" / "vllm"))
import local_model  # noqa: E402
from systems import LMCACHE_CHUNK  # noqa: E402

PREFETCH = re.compile(r"Prefetch request completed \(L1\+L2\): \d+/\d+ retained keys "
                      r"\((\d+) L1, (\d+) L2\) in ([0-9.]+) ms")


def tutti_rows(jsonl_lines):
    """(system, storage, rate, GB loaded, seconds, GB/s) per rate of every Tutti system."""
    out = []
    for line in jsonl_lines:
        r = json.loads(line)
        tokens, secs = r.get("tutti_load_tokens"), r.get("tutti_load_s")
        if not r.get("system", "").startswith("tutti") or not tokens or not secs:
            continue
        gb = tokens * local_model.kv_bytes_per_token(r["model"]) / 1e9
        out.append((r["system"], r["storage"], r["rate"], gb, secs, gb / secs))
    return out


def lmcache_prefetches(text, kv_bytes_per_token):
    """GB/s of every prefetch that read from L2 alone, and (GB, seconds) over all of them."""
    chunk = LMCACHE_CHUNK * kv_bytes_per_token
    rates, gb, secs = [], 0.0, 0.0
    for l1, l2, ms in PREFETCH.findall(text):
        if int(l1) != 0 or int(l2) == 0 or float(ms) <= 0:
            continue
        b = int(l2) * chunk / 1e9
        rates.append(b / (float(ms) / 1e3))
        gb += b
        secs += float(ms) / 1e3
    return rates, gb, secs


def main(argv):
    if not argv:
        sys.exit(__doc__)
    lines = Path(argv[0]).read_text().splitlines()
    model = next(json.loads(ln)["model"] for ln in lines)
    for system, storage, rate, gb, secs, gbps in tutti_rows(lines):
        print(f"{system} {storage} rate {rate}: {gb:.2f} GB loaded into vLLM's KV in "
              f"{secs:.3f} s of loads: {gbps:.2f} GB/s")
    for log in argv[1:]:
        rates, gb, secs = lmcache_prefetches(Path(log).read_text(errors="replace"),
                                             local_model.kv_bytes_per_token(model))
        if not rates:
            print(f"{log}: no prefetch read from L2 alone")
            continue
        print(f"{Path(log).name}: {len(rates)} prefetches from L2 alone, {gb:.2f} GB in "
              f"{secs:.3f} s: {gb / secs:.2f} GB/s in all, median {statistics.median(rates):.2f}"
              f" (range {min(rates):.2f}-{max(rates):.2f}) GB/s")


if __name__ == "__main__":
    main(sys.argv[1:])
