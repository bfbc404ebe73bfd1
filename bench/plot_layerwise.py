# SPDX-License-Identifier: Apache-2.0
"""Plots of bench/layerwise_ttft.py's results (needs matplotlib).

Usage: python3 bench/plot_layerwise.py OUT_DIR RESULTS.jsonl [RESULTS.jsonl ...]
Writes OUT_DIR/layerwise-ttft.png (TTFT against the cached prefix, emulated NVMe and the real
disk, with the bound max(suffix compute, prefix bytes / raw read bandwidth)) and
OUT_DIR/layerwise-bubble.png (stall per request against the hit rate of a 32K-token prompt).
When several files hold the same (experiment, storage, method, prefix), the later file wins.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    rows = {}
    raw = {}
    for p in paths:
        for line in Path(p).read_text().splitlines():
            r = json.loads(line)
            if r["experiment"] == "raw":
                raw[r["storage"]] = r["read_gbps"]
            elif r["experiment"] in ("ttft", "bubble"):
                rows[(r["experiment"], r["storage"], r["method"], r["prefix"])] = r
    return list(rows.values()), raw


def series(rows, exp, storage, method, key="ttft_s"):
    pts = sorted((r["prefix"], r[key]) for r in rows
                 if r["experiment"] == exp and r["storage"] == storage and r["method"] == method)
    return [p / 1024 for p, _ in pts], [v for _, v in pts]


def main():
    out = Path(sys.argv[1])
    rows, raw = load(sys.argv[2:])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    compute_x, compute_y = series(rows, "ttft", "hbm", "compute")
    recompute = [r["ttft_s"] for r in rows if r["method"] == "recompute"]
    for ax, storage, title in ((axes[0], "emulated-nvme", "emulated fast NVMe (/dev/shm)"),
                               (axes[1], "disk", "real disk (virtio)")):
        ax.plot(compute_x, compute_y, "k--", label="suffix compute alone (KV in HBM)")
        if recompute:
            ax.axhline(recompute[0], color="grey", linestyle=":", label="recompute all 128K")
        ax.plot(*series(rows, "ttft", "dram", "dram"), "o-", label="DRAM tier (pinned host)")
        ax.plot(*series(rows, "ttft", storage, "baseline"), "s-",
                label="per-block CPU baseline")
        ax.plot(*series(rows, "ttft", storage, "tutti"), "^-", label="Tutti gpu-uring")
        if storage in raw and compute_x:
            gb = {r["prefix"] / 1024: r["prefix_gb"] for r in rows if r["experiment"] == "ttft"}
            bound = [max(c, gb[x] / raw[storage]) for x, c in zip(compute_x, compute_y)]
            ax.plot(compute_x, bound, color="tab:red", alpha=0.4, linewidth=4,
                    label=f"max(compute, bytes / raw {raw[storage]:.1f} GB/s)")
        ax.set_title(f"128K-token prompt, Llama-3-8B shape, H200: {title}", fontsize=9)
        ax.set_xlabel("cached prefix (K tokens)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("TTFT (s)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "layerwise-ttft.png", dpi=110)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for storage, label in (("emulated-nvme", "emulated fast NVMe"), ("disk", "real disk")):
        mine = [r for r in rows if r["experiment"] == "bubble" and r["storage"] == storage]
        pts = sorted((r["hit_rate"], r["stall_ms"]) for r in mine)
        runs = sorted({r.get("runs", 1) for r in mine})
        if pts:
            ax.plot([100 * h for h, _ in pts], [s for _, s in pts], "o-",
                    label=f"{label} (median of {'/'.join(map(str, runs))} runs)")
    ax.axhline(10, color="tab:red", linestyle=":", label="10 ms")
    ax.axvline(93.75, color="grey", linestyle=":")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("cache hit rate of a 32K-token prompt (%)")
    ax.set_ylabel("stall before compute, per request (ms, GPU-measured)")
    ax.set_title("Bubble against hit rate, Tutti gpu-uring, H200", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "layerwise-bubble.png", dpi=110)


if __name__ == "__main__":
    main()
