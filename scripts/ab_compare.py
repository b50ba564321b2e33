"""ab_compare.py — pairs the timings of two builds' benchmark runs made in one session (a same-run
A/B) and prints, per benchmark, every pair and the range and geometric mean of new/base.

    python3 scripts/ab_compare.py DIR

DIR holds `<bench>[.<set>]_<side>_<k>.json` (side `base` or `new`, k = 1, 2, ...; a set
tells apart runs of one benchmark with other arguments), the `--json` output of `ssu_bench`,
`mtp_bench` or `decode_step` (scripts/ab_bundle.sh's runner writes them). Each
side's value of a timing is the minimum over its runs. Timings: `us_median` of each record
(ssu_bench, mtp_bench; keyed by the record's shape and variant fields) and every mode of
`graph_us` and `eager_us` of each row (decode_step; keyed by batch and mode). Exit status 1 when
there is no JSON or a benchmark has no paired timing.
"""

import glob
import json
import math
import os
import re
import sys

SHAPE_KEYS = ("nheads", "batch", "dim", "dstate", "philox_rounds", "algorithm", "T", "form")


def timings(bench, data):
    """{key: microseconds} of one run."""
    out = {}
    if bench in ("ssu_bench", "mtp_bench"):
        for r in data.get("records", []):
            key = tuple((k, r[k]) for k in SHAPE_KEYS if k in r)
            if isinstance(r.get("us_median"), (int, float)):
                out[key] = float(r["us_median"])
    else:
        for r in data.get("rows", []):
            for kind in ("graph_us", "eager_us"):
                for mode, v in (r.get(kind) or {}).items():
                    if isinstance(v, (int, float)):
                        out[(("batch", r.get("batch")), ("kind", kind), ("mode", mode))] = float(v)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    missing = False
    labels = sorted({m.group(1) for m in (re.match(r"(.+)_(base|new)_[^_]+\.json$",
                                                      os.path.basename(f))
                                             for f in glob.glob(os.path.join(root, "*.json")))
                     if m})
    if not labels:
        print(f"ab_compare: no benchmark JSON in {root}")
        sys.exit(1)
    for label in labels:
        bench = label.split(".")[0]
        if bench not in ("ssu_bench", "mtp_bench", "decode_step"):
            continue
        sides = {}
        for side in ("base", "new"):
            for f in sorted(glob.glob(os.path.join(root, f"{label}_{side}_*.json"))):
                with open(f) as fh:
                    for key, us in timings(bench, json.load(fh)).items():
                        cur = sides.setdefault(side, {}).get(key)
                        sides[side][key] = us if cur is None else min(cur, us)
        if not sides:
            continue
        base, new = sides.get("base", {}), sides.get("new", {})
        pairs = [(k, base[k], new[k]) for k in base if k in new and base[k] > 0]
        if not pairs:
            print(f"{label}: no paired timings")
            missing = True
            continue
        for k, b, n in pairs:
            text = " ".join(f"{a}={v}" for a, v in k)
            print(f"{label:14s} {text:60s} base {b:10.3f} us  new {n:10.3f} us  {n / b:7.4f}")
        ratios = [n / b for _, b, n in pairs]
        g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"{label}: {len(pairs)} timings, new/base {min(ratios):.4f}..{max(ratios):.4f}, "
              f"geometric mean {g:.4f}")
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
