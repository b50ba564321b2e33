#!/usr/bin/env python3
"""Merges recorded cases (`run.sh record` output: one directory per case, each with its
manifest.json and fixtures.bin) into one manifest.json and one fixtures.bin, the form the
conformance tests embed (tests/data/*/).

  python3 tools/flashinfer-recorder/merge.py OUT_DIR CASE_DIR... --path stp|mtp [--cap BYTES]
      [--algorithms A,B,..] [--exclude SUBSTRING]... [--store-always TENSOR]... [--xz]

Only the cases of one path (single token or multi token: their manifests name different
kernels) go into one output. Blocks longer than --cap bytes (default 65536), and blocks that
are hash-only in the recording, are listed by hash only: the tests regenerate such inputs from
the manifest's generator and compare such outputs by hash. Identical blocks are stored once.
Every stored block is checked against its SHA-256. --algorithms keeps only the runs of those
algorithms (a case left without runs is dropped), --exclude drops the cases whose name contains
the substring: a subset for a test of what a build serves. --store-always keeps every stored
block of the named tensor whatever --cap says (e.g. `state_scale` and
`intermediate_state_scales` of the int16 block-scaled state: small, and what a CPU check of the
quantisation reads beside a hash-only state). --xz writes the output xz-compressed
(manifest.json.xz, fixtures.bin.xz), the form tests/data keeps. A CASE_DIR may be a merged
output, in either form.
Runs on any host (no GPU).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner"))
from record import compress_xz, read_maybe_xz, sha256, write_manifest  # noqa: E402  (the recorder's own writer)


def blocks_of(case):
    for t in list(case["inputs"]) + [t for r in case["results"] for t in r["outputs"]]:
        for b in t["blocks"]:
            yield t, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--path", choices=["stp", "mtp"], required=True)
    ap.add_argument("--cap", type=int, default=65536)
    ap.add_argument("--algorithms", help="comma-separated: keep only these algorithms' runs")
    ap.add_argument("--exclude", action="append", default=[], help="drop cases whose name contains this")
    ap.add_argument("--xz", action="store_true",
                    help="write manifest.json.xz and fixtures.bin.xz (the form tests/data keeps)")
    ap.add_argument("--store-always", action="append", default=[], metavar="TENSOR",
                    help="store this tensor's blocks whatever --cap says (repeatable)")
    a = ap.parse_args()
    keep = set(a.algorithms.split(",")) if a.algorithms else None
    header, cases, data = None, [], {}
    for d in sorted(a.cases):
        m = json.loads(read_maybe_xz(os.path.join(d, "manifest.json")))
        picked = []
        for c in m["cases"]:
            if c.get("path", "stp") != a.path or any(x in c["name"] for x in a.exclude):
                continue
            if keep is not None:
                c["results"] = [r for r in c["results"] if r["algorithm_requested"] in keep]
                if not c["results"]:
                    continue
            picked.append(c)
        if not picked:
            continue
        bins = {}
        for b in m["bins"]:
            bins[b["file"]] = read_maybe_xz(os.path.join(d, b["file"]))
            if sha256(bins[b["file"]]) != b["sha256"]:
                raise SystemExit(f"merge: {d}: {b['file']} does not match its manifest's hash")
        h = {k: v for k, v in m.items() if k not in ("bins", "cases")}
        if header is None:
            header = h
        elif (h.get("reference"), h.get("format"), h.get("format_version")) != (
                header.get("reference"), header.get("format"), header.get("format_version")):
            raise SystemExit(f"merge: {d} was recorded from another kernel, release or format")
        for c in picked:
            for t, b in blocks_of(c):
                if b.get("bin"):
                    raw = bins[b["bin"]][b["byte_offset"]:b["byte_offset"] + b["nbytes"]]
                    if sha256(raw) != b["sha256"]:
                        raise SystemExit(f"merge: {d}: a block of {t['name']} does not match its hash")
                    data[b["sha256"]] = raw
            cases.append(c)
    if not cases:
        raise SystemExit(f"merge: no {a.path} cases")
    m = write_manifest(a.out, header, cases, data, [True] * len(cases), a.cap, always=set(a.store_always))
    blob_bytes = m["bins"][0]["bytes"]
    if a.xz:
        compress_xz(a.out)
    print(f"merge: {len(cases)} {a.path} cases into {a.out} (fixtures.bin {blob_bytes} bytes"
          f"{', xz-compressed' if a.xz else ''})")


if __name__ == "__main__":
    main()
