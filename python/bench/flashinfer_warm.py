"""``mamba_ssu.selective_state_update`` timed the way the FlashInfer recorder times FlashInfer's
own kernel (``tools/flashinfer-recorder``: ``run.sh record`` writes ``timings.json`` beside
each case), for a same-run comparison at any recorded shape: per case and algorithm, the
recorded call (inputs regenerated from the manifest, ``python/tests/flashinfer_cases.py``),
3 warm-up calls, then CUDA events around 20 back-to-back calls on the same buffers (warm L2,
the state updated in place as FlashInfer's was), µs per call; next to it FlashInfer's µs from
the case's ``timings.json`` and the ratio. Single-token and multi-token cases (the multi-token
ones through ``python/tests/flashinfer_mtp_cases.py``).

    PYTHONPATH=python python3 python/bench/flashinfer_warm.py RECORDING_DIR... [--json OUT]

RECORDING_DIR: the per-case directories ``run.sh record`` wrote (manifest.json and
timings.json each). Run it on the host and in the same session that recorded them: the
comparison is meaningful only for the same GPU, clocks and driver.
"""

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import flashinfer_cases as fc  # noqa: E402
import flashinfer_mtp_cases as fmc  # noqa: E402


def time_calls(fn, warmup=3, iters=20):
    """The recorder's method: warm-up calls, then events around `iters` back-to-back calls."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--json")
    a = ap.parse_args()
    import mamba_ssu

    dev = torch.device("cuda", torch.cuda.current_device())
    rows = []
    print("| case | alg | FlashInfer µs | ours µs | FlashInfer / ours |")
    print("|---|---|---|---|---|")
    for d in sorted(a.cases):
        man, tim = os.path.join(d, "manifest.json"), os.path.join(d, "timings.json")
        if not (os.path.exists(man) and os.path.exists(tim)):
            continue
        with open(man) as f:
            paths = {c.get("path", "stp") for c in json.load(f)["cases"]}
        if len(paths) != 1:
            continue
        mtp = paths == {"mtp"}
        with open(tim) as f:
            fi = json.load(f)["us_per_call"]
        m = fmc.load(man) if mtp else fc.load(man)
        build = fmc.build_call if mtp else fc.build_call
        for case in m.cases:
            # One set of buffers per case (the runs of a case differ in the algorithm only).
            p = None
            for r in case.results:
                alg = r.algorithm_requested
                if alg not in fi:
                    continue
                if p is None:
                    p = build(m, case, r, dev)
                kwargs = dict(p.kwargs, algorithm=alg)
                try:
                    ours = time_calls(lambda: mamba_ssu.selective_state_update(**kwargs))
                except NotImplementedError as e:  # a mapping the crate does not serve
                    rows.append({"case": case.name, "algorithm": alg, "flashinfer_us": fi[alg],
                                 "ours_us": None, "not_served": str(e)})
                    print(f"| {case.name} | {alg} | {fi[alg]:.2f} | not served | - |", flush=True)
                    continue
                rows.append({"case": case.name, "algorithm": alg, "flashinfer_us": fi[alg], "ours_us": ours})
                print(f"| {case.name} | {alg} | {fi[alg]:.2f} | {ours:.2f} | {fi[alg] / ours:.2f} |", flush=True)
            del p
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"method": "recorder's: 3 warm-up calls, CUDA events around 20 back-to-back calls, "
                                 "warm L2", "gpu": torch.cuda.get_device_name(dev), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
