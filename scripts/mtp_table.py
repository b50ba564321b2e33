#!/usr/bin/env python3
"""Renders mtp_bench's JSON as the BENCHMARKS.md multi-token tables and checks the goals.

usage: python3 scripts/mtp_table.py mtp_bench.json
(the file of `mtp_bench --json mtp_bench.json`: benches/mtp_bench.rs)
Cells: ours µs (% of memset) / FlashInfer µs · FlashInfer time ÷ ours; with SR, after the
semicolon, our SR time ÷ our no-SR time. % of memset = all the call's bytes (state read once,
8 state writes, the small tensors) per second over the same-run memset's, which is how
FlashInfer's recorded pct_of_memset_bw is defined. One pair of tables per (dim, dstate) when the
run measured several (`--dim`, `--dstate`) or another than FlashInfer's recorded dim 64 /
dstate 128, where its figures are absent ("none recorded"). Files written before the records
carried dim and dstate are at 64 and 128.
"""
import json
import sys


def pct(r, memset):
    """% of memset; for JSON written before the field existed, the same quantity from TBps."""
    return r.get("pct_of_memset", 100.0 * r["TBps"] * 1e3 / memset)


RECORDED = (64, 128)  # FlashInfer's timings' dim and dstate


def shape(r):
    """A record's (dim, dstate); older files have neither field and are at 64 and 128."""
    return r.get("dim", RECORDED[0]), r.get("dstate", RECORDED[1])


def span(xs, unit=""):
    """min-max of xs (2 decimals, then unit), or "none" for an empty list."""
    return f"{min(xs):.2f}-{max(xs):.2f}{unit}" if xs else "none"


def main() -> None:
    data = json.load(open(sys.argv[1]))
    recs = data["records"]
    memset = data["memset_GBps"]
    by = {(r["form"], *shape(r), r["nheads"], r["philox_rounds"], r["batch"]): r for r in recs}
    shapes = sorted({shape(r) for r in recs})
    print(f"memset in the same run: {memset:.0f} GB/s\n")
    for dim, dstate in shapes:
        here = [r for r in recs if shape(r) == (dim, dstate)]
        batches = sorted({r["batch"] for r in here})
        fi_title = "next to FlashInfer"
        if shapes != [RECORDED]:
            print(f"dim {dim}, dstate {dstate}:\n")
            if (dim, dstate) != RECORDED:
                fi_title = ("FlashInfer's timings are recorded at dim 64 and dstate 128 only: "
                            "none here")
        for form, title in (("dense", f"Dense form (intermediate buffer), {fi_title}:"),
                            ("varlen", "vLLM's varlen in-place form:")):
            print(title + "\n")
            print("| nheads | SR | " + " | ".join(f"b={b}" for b in batches) + " |")
            print("|---|---|" + "---|" * len(batches))
            for nh in sorted({r["nheads"] for r in here}):
                for rounds in (0, 5, 10):
                    cells = []
                    for b in batches:
                        r = by.get((form, dim, dstate, nh, rounds, b))
                        if r is None:
                            cells.append("-")
                            continue
                        c = f"{r['us_median']:.2f} ({pct(r, memset):.1f}%)"
                        fi = r.get("flashinfer_us")
                        if fi:
                            c += f" / {fi:.2f} · {fi / r['us_median']:.2f}x"
                        if r.get("sr_over_off"):
                            c += f"; {r['sr_over_off']:.2f}"
                        cells.append(c)
                    sr = "off" if rounds == 0 else f"R={rounds}"
                    print(f"| {nh} | {sr} | " + " | ".join(cells) + " |")
            print()

    # The goals (issue: multi-token SSU, performance).
    off = [r for r in recs if r["philox_rounds"] == 0]
    sr = [r for r in recs if r["philox_rounds"] > 0 and r.get("sr_over_off")]
    r10 = [r for r in recs if r["philox_rounds"] == 10 and (r.get("flashinfer_us") or 0) > 20]
    r5 = [r for r in recs if r["philox_rounds"] == 5 and r.get("flashinfer_us")]
    fi_off = [r for r in off if r.get("flashinfer_us")]
    big = [r for r in off if r["state_write_bytes"] > 256 << 20]
    ratios = [r["sr_over_off"] for r in sr]
    print("Goals:")
    print(f"- SR / no SR <= 1.25: {sum(x <= 1.25 for x in ratios)} of {len(ratios)} cells "
          f"({span(ratios)})")
    # FlashInfer's figures exist at its recorded dim and dstate only.
    x10 = [r["flashinfer_us"] / r["us_median"] for r in r10]
    print(f"- R10 >= 2x FlashInfer where it takes > 20 us: {sum(x >= 2 for x in x10)} of "
          f"{len(x10)} ({span(x10, 'x')})")
    x5 = [r["flashinfer_us"] / r["us_median"] for r in r5]
    print(f"- R5 vs FlashInfer: {span(x5, 'x')}")
    x0 = [r["flashinfer_us"] / r["us_median"] for r in fi_off]
    print(f"- no SR >= FlashInfer's speed: {sum(x >= 1 for x in x0)} of {len(x0)} "
          f"({span(x0, 'x')})")
    for r in big:
        at = "" if shape(r) == RECORDED else f" (dim {shape(r)[0]}, dstate {shape(r)[1]})"
        print(f"- > 256 MiB written, {r['form']} {r['nheads']} x {r['batch']}{at}: "
              f"{pct(r, memset):.1f} % of memset (writes alone {r['write_pct_of_memset']:.1f} %)"
              f"{'' if pct(r, memset) > 80 else ' -- NOT over 80 %'}")


if __name__ == "__main__":
    main()
