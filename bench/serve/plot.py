# SPDX-License-Identifier: Apache-2.0
"""TTFT against request rate per system, one panel per storage (needs matplotlib): p50 as a
solid line, p90 dashed, the SLOs (1 s and the fitted one, table.py) as grey lines. A rate
whose p90 is missing (requests unfinished at the end of the rate) is drawn at the panel's top.

Usage: python3 bench/serve/plot.py OUT.png SERVE.jsonl [SERVE.jsonl ...]
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table  # noqa: E402

COLORS = {"tutti": "tab:blue", "tutti-layerwise": "tab:cyan", "tutti-no-async-sched": "tab:olive",
          "tutti-gpu-uring": "tab:brown", "tutti-uring": "darkblue", "tutti-no-share": "olive",
          "offload-cpu": "tab:green", "lmcache-mp": "tab:purple", "lmcache-mp-large": "tab:pink",
          "lmcache": "tab:orange", "lmcache-min": "tab:red", "recompute": "tab:gray"}


def main(out, paths):
    data = table.load(paths)
    slo_fit = table.fitted_slo(data)
    storages = sorted({r["storage"] for r in data["rows"]} - {"none"}) or ["none"]
    fig, axes = plt.subplots(1, len(storages), figsize=(6 * len(storages), 4.5), squeeze=False)
    top = max([r["ttft_p90_s"] for r in data["rows"] if r.get("ttft_p90_s")] + [2.0]) * 1.5
    for ax, storage in zip(axes[0], storages, strict=True):
        for name in table.systems_of(data, storage):
            rows = sorted([r for r in data["rows"] if r["system"] == name and
                           r["storage"] in (storage, "none")], key=lambda r: r["rate"])
            if not rows:
                continue
            x = [r["rate"] for r in rows]
            c = COLORS.get(name)
            ax.plot(x, [r.get("ttft_p50_s") or top for r in rows], "-o", color=c, label=name,
                    markersize=4)
            ax.plot(x, [r.get("ttft_p90_s") or top for r in rows], "--x", color=c, alpha=0.7,
                    markersize=4)
        for slo in (1.0, slo_fit):
            if slo:
                ax.axhline(slo, color="0.6", linewidth=0.8)
                ax.text(ax.get_xlim()[0], slo, f" SLO {slo:.2f} s", va="bottom", fontsize=7,
                        color="0.4")
        ax.set_yscale("log")
        ax.set_ylim(top=top)
        ax.set_xlabel("request rate (requests/s)")
        ax.set_ylabel("TTFT (s): p50 solid, p90 dashed")
        ax.set_title("emulated NVMe (/dev/shm)" if storage == "emulated" else storage)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
