"""``mamba_ssu.selective_state_update`` timed the way the FlashInfer recorder times FlashInfer's
own kernel (``tools/flashinfer-recorder``: ``run.sh record`` writes ``timings.json`` beside
each case), for a same-run comparison at any recorded shape: per case and algorithm, the
recorded call (inputs regenerated from the manifest, ``python/tests/flashinfer_cases.py``),
3 warm-up calls, then CUDA events around 20 back-to-back calls on the same buffers (warm L2,
the state updated in place as FlashInfer's was), µs per call; next to it FlashInfer's µs from
the case's ``timings.json`` and the ratio. Where the recording has queued timings (the calls
enqueued behind a spin kernel, so that the host's per-call cost drops out: the crate's Python
front door costs the host more per call than the recorder's C loop does FlashInfer), the same
for the crate and that ratio too. Where it has cold timings (the queued calls with the state
rotated over ``cold_copies`` copies of it, together at least twice the L2 size, so that every
call reads its state from HBM as the layers of a decode step do, each with its own state), the
crate's calls rotated over as many copies of its state, and that ratio. Single-token and
multi-token cases (the multi-token ones through ``python/tests/flashinfer_mtp_cases.py``).

    PYTHONPATH=python python3 python/bench/flashinfer_warm.py RECORDING_DIR... [--json OUT]

RECORDING_DIR: the per-case directories ``run.sh record`` wrote (manifest.json and
timings.json each). Run it on the host and in the same session that recorded them: the
comparison is meaningful only for the same GPU, clocks and driver.
"""

import argparse
import itertools
import json
import os
import sys
import time

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


def time_calls_queued(fn, warmup=3, iters=20):
    """The recorder's queued method (firec_time_queued): the calls enqueued behind a spin kernel
    (``torch.cuda._sleep``), so that they run back to back on the GPU while the host is still
    enqueueing them; the spin doubles until the host finishes first. µs per call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    cycles = 1 << 21
    for _ in range(8):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        ev[0].record()
        torch.cuda._sleep(cycles)
        ev[1].record()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        host_us = (time.perf_counter() - t0) * 1e6
        ev[2].record()
        ev[2].synchronize()
        if host_us < ev[0].elapsed_time(ev[1]) * 1000.0:
            return ev[1].elapsed_time(ev[2]) * 1000.0 / iters
        cycles *= 2
    raise RuntimeError("queued timing: the host never finished enqueueing before the spin ended")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--json")
    a = ap.parse_args()
    import mamba_ssu

    dev = torch.device("cuda", torch.cuda.current_device())
    rows = []
    print("| case | alg | FlashInfer µs | ours µs | FlashInfer / ours | FlashInfer queued µs | ours queued µs "
          "| FlashInfer / ours queued | FlashInfer cold µs | ours cold µs | FlashInfer / ours cold |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
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
            t = json.load(f)
        fi, fiq, fic = t["us_per_call"], t.get("us_per_call_queued", {}), t.get("us_per_call_cold", {})
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
                def call():
                    mamba_ssu.selective_state_update(**kwargs)

                try:
                    ours = time_calls(call)
                except NotImplementedError as e:  # a mapping the crate does not serve
                    rows.append({"case": case.name, "algorithm": alg, "flashinfer_us": fi[alg],
                                 "ours_us": None, "not_served": str(e)})
                    print(f"| {case.name} | {alg} | {fi[alg]:.2f} | not served | - | | | | | | |", flush=True)
                    continue
                row = {"case": case.name, "algorithm": alg, "flashinfer_us": fi[alg], "ours_us": ours}
                line = f"| {case.name} | {alg} | {fi[alg]:.2f} | {ours:.2f} | {fi[alg] / ours:.2f} |"
                if alg in fiq:
                    oq = time_calls_queued(call)
                    row.update(flashinfer_queued_us=fiq[alg], ours_queued_us=oq)
                    line += f" {fiq[alg]:.2f} | {oq:.2f} | {fiq[alg] / oq:.2f} |"
                else:
                    line += " | | |"
                if alg in fic:
                    # FlashInfer's count of state copies; call k takes copy k mod n.
                    n = int(t.get("cold_copies") or 2)
                    state = kwargs["state"]
                    forms = [dict(kwargs, state=s) for s in [state] + [state.clone() for _ in range(n - 1)]]
                    turn = itertools.cycle(forms)

                    def cold_call():
                        mamba_ssu.selective_state_update(**next(turn))

                    oc = time_calls_queued(cold_call)
                    del forms, turn
                    row.update(flashinfer_cold_us=fic[alg], ours_cold_us=oc, cold_copies=n)
                    line += f" {fic[alg]:.2f} | {oc:.2f} | {fic[alg] / oc:.2f} |"
                else:
                    line += " | | |"
                rows.append(row)
                print(line, flush=True)
            del p
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"method": "recorder's: 3 warm-up calls, CUDA events around 20 back-to-back calls, "
                                 "warm L2", "method_queued": "the same calls enqueued behind a spin kernel "
                                 "(the GPU's time per call without the host's per-call cost)",
                       "method_cold": "the queued calls with the state rotated over cold_copies copies of it "
                                      "(as FlashInfer's recording: each call reads its state from HBM)",
                       "gpu": torch.cuda.get_device_name(dev), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
