#!/usr/bin/env python3
"""Plots decode-step time against batch per seed mode from decode_step's JSON.

usage: python3 scripts/plot_decode_step.py decode_step.json decode_step.png
(the file of `decode_step --json decode_step.json`: benches/decode_step.rs, format in
benches/decode_step/json.rs)
Needs matplotlib (present on the GPU host; `pip install matplotlib` elsewhere).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    data = json.load(open(src))
    rows = data["rows"]
    batches = [r["batch"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for ax, key, title in ((axes[0], "graph_us", "CUDA graph"), (axes[1], "eager_us", "eager")):
        for mode, style in (
            ("stock", "o-"),
            ("prefetch", "s-"),
            ("prefetch-branch", "s:"),
            ("fused", "^-"),
            ("fused-per-call", "^:"),
            ("fixed", "x--"),
        ):
            if mode in rows[0][key]:  # older files have fewer modes
                ax.plot(batches, [r[key][mode] for r in rows], style, label=mode)
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.set_xlabel("batch (sequences, one token each)")
        ax.set_ylabel("step time (us, median)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle(
        f"Decode step on {data['device']}: {data['layers']} layers x (filler + SSU "
        f"{data['nheads']}x{data['dim']}x{data['dstate']}, fp16 SR, {data['philox_rounds']} rounds)"
    )
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main()
