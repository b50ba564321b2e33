#!/usr/bin/env python3
"""Merges recorded cases (`run.sh record` output: one directory per case, each with its
manifest.json and fixtures.bin) into one manifest.json and one fixtures.bin, the form the
conformance tests embed (tests/data/*/).

  python3 tools/flashinfer-recorder/merge.py OUT_DIR CASE_DIR... --path stp|mtp [--cap BYTES]

Only the cases of one path (single token or multi token: their manifests name different
kernels) go into one output. Blocks longer than --cap bytes (default 65536), and blocks that
are hash-only in the recording, are listed by hash only: the tests regenerate such inputs from
the manifest's generator and compare such outputs by hash. Identical blocks are stored once.
Every stored block is checked against its SHA-256. Runs on any host (no GPU).
"""
import argparse
import hashlib
import json
import os


def sha256(b):
    return hashlib.sha256(b).hexdigest()


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
    a = ap.parse_args()
    header, cases, data = None, [], {}
    for d in sorted(a.cases):
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        picked = [c for c in m["cases"] if c.get("path", "stp") == a.path]
        if not picked:
            continue
        bins = {}
        for b in m["bins"]:
            with open(os.path.join(d, b["file"]), "rb") as f:
                bins[b["file"]] = f.read()
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
    os.makedirs(a.out, exist_ok=True)
    placed, chunks, size = {}, [], 0
    for c in cases:
        for _, b in blocks_of(c):
            keep = b["sha256"] in data and b["nbytes"] <= a.cap
            if keep and b["sha256"] not in placed:
                pad = (-size) % 64
                chunks.append(b"\0" * pad)
                size += pad
                placed[b["sha256"]] = size
                chunks.append(data[b["sha256"]])
                size += b["nbytes"]
            b["bin"] = "fixtures.bin" if keep else None
            b["byte_offset"] = placed[b["sha256"]] if keep else None
    blob = b"".join(chunks)
    with open(os.path.join(a.out, "fixtures.bin"), "wb") as f:
        f.write(blob)
    m = dict(header)
    m["bins"] = [{"file": "fixtures.bin", "bytes": len(blob), "sha256": sha256(blob)}]
    m["cases"] = cases
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(m, f, indent=1)
        f.write("\n")
    print(f"merge: {len(cases)} {a.path} cases into {a.out} (fixtures.bin {len(blob)} bytes)")


if __name__ == "__main__":
    main()
