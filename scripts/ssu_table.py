#!/usr/bin/env python3
"""Renders ssu_bench's JSON as the BENCHMARKS.md table and checks it against issue 3's goals.

usage: python3 scripts/ssu_table.py ssu_bench.json
(the file of `ssu_bench --json ssu_bench.json`: benches/ssu_bench.rs, format in
benches/ssu_bench/json.rs)
Cells: ours µs (ours % of copy bandwidth) / FlashInfer µs · FlashInfer time ÷ ours.
One table per (dim, dstate) when the run measured several (`--dim`, `--dstate`) or another than
FlashInfer's recorded dim 64 / dstate 128, where its figures are absent ("none recorded").
Files written before the records carried dim and dstate are at 64 and 128.
"""
import json
import sys


RECORDED = (64, 128)  # FlashInfer's timings' dim and dstate


def shape(r):
    """A record's (dim, dstate); older files have neither field and are at 64 and 128."""
    return r.get("dim", RECORDED[0]), r.get("dstate", RECORDED[1])


def main() -> None:
    data = json.load(open(sys.argv[1]))
    recs = data["records"]
    variants = [(0, "auto"), (5, "simple"), (5, "vertical"), (10, "simple"), (10, "vertical")]
    shapes = sorted({shape(r) for r in recs})
    print(f"copy bandwidth in the same run: {data['copy_bandwidth_GBps']:.1f} GB/s\n")
    full = {(*shape(r), r["nheads"], r["philox_rounds"], r["algorithm"], r["batch"]): r
            for r in recs}
    for dim, dstate in shapes:
        batches = sorted({r["batch"] for r in recs if shape(r) == (dim, dstate)})
        if shapes != [RECORDED]:
            note = "" if (dim, dstate) == RECORDED else (
                " (FlashInfer's timings are recorded at dim 64 and dstate 128 only: none here)")
            print(f"dim {dim}, dstate {dstate}{note}:\n")
        print("| nheads | SR | alg | " + " | ".join(f"b={b}" for b in batches) + " |")
        print("|---|---|---|" + "---|" * len(batches))
        for nh in sorted({r["nheads"] for r in recs if shape(r) == (dim, dstate)}):
            for rounds, alg in variants:
                cells = []
                for b in batches:
                    r = full.get((dim, dstate, nh, rounds, alg, b))
                    if r is None:
                        cells.append("-")
                        continue
                    fi = r["fi_us_median"]
                    cell = f"{r['us_median']:.2f} ({r['pct_of_copy_bw']:.0f}%)"
                    if fi is not None:
                        cell += f" / {fi:.2f} · {fi / r['us_median']:.2f}x"
                    cells.append(cell)
                sr = "off" if rounds == 0 else f"R={rounds}"
                print(f"| {nh} | {sr} | {alg} | " + " | ".join(cells) + " |")
        if (dim, dstate) != shapes[-1]:
            print()

    # The goals are issue 3's, at FlashInfer's recorded shape (the other shapes have no
    # FlashInfer figures).
    by = {k[2:]: r for k, r in full.items() if k[:2] == RECORDED}
    if not by:
        return

    print("\nGoals:")
    slower_nosr = [(k[0], k[3], r["fi_us_median"] / r["us_median"]) for k, r in by.items()
                   if k[1] == 0 and r["fi_us_median"] and r["us_median"] > r["fi_us_median"]]
    print(f"- no SR slower than FlashInfer at {len(slower_nosr)} of "
          f"{sum(1 for k in by if k[1] == 0)} sizes: "
          + ", ".join(f"{h}h b={b} {x:.2f}x" for h, b, x in sorted(slower_nosr)))
    slower_sr = [(k, r["fi_us_median"] / r["us_median"]) for k, r in by.items()
                 if k[1] > 0 and r["fi_us_median"] and r["us_median"] > r["fi_us_median"]]
    print(f"- SR slower than FlashInfer at {len(slower_sr)} sizes: "
          + ", ".join(f"{k[0]}h R{k[1]} {k[2]} b={k[3]} {x:.2f}x" for k, x in sorted(slower_sr)))
    big = [(k, r["fi_us_median"] / r["us_median"]) for k, r in by.items()
           if k[1] > 0 and r["fi_us_median"] and r["fi_us_median"] > 10]
    below = [(k, x) for k, x in big if x < 1.5]
    print(f"- >= 1.5x where FlashInfer > 10 us: {len(big) - len(below)} of {len(big)}; below: "
          + ", ".join(f"{k[0]}h R{k[1]} {k[2]} b={k[3]} {x:.2f}x" for k, x in sorted(below)))
    for k, r in sorted(by.items()):
        state_mib = k[0] * k[3] * RECORDED[0] * RECORDED[1] * 2 / 2**20
        if k[1] > 0 and state_mib > 256:
            print(f"- state {state_mib:.0f} MiB, {k[0]}h R{k[1]} {k[2]} b={k[3]}: "
                  f"{r['pct_of_copy_bw']:.1f}% of copy bandwidth")
    for rounds, alg in variants[1:]:
        for b in (1, 2, 4, 8):
            sr = by.get((32, rounds, alg, b))
            off = by.get((32, 0, "auto", b))
            if sr and off:
                x = sr["us_median"] / off["us_median"]
                if x > 1.5:
                    print(f"- 32h R{rounds} {alg} b={b}: {x:.2f}x our no-SR time (limit 1.5x)")


if __name__ == "__main__":
    main()
