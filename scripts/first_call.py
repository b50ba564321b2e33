"""first_call.py — the latency of the first calls in a fresh process (the kernels' module load,
and with CUDA_FORCE_PTX_JIT=1 the driver's JIT compilation of the library's PTX, or its cache):

    python3 scripts/first_call.py [--json PATH]

Run it with the package importable (PYTHONPATH=python). Times, in one process: import, the first
single-token call (fp16 state, SR, the hot kernel), the first multi-token call (T = 4) and a
generic-kernel call (fp32 state), each to completion (torch.cuda.synchronize), then the same
three calls again (warm). Prints one line per call and, with --json, writes them. The
environment decides the path: CUDA_FORCE_PTX_JIT=1 forces the PTX, CUDA_CACHE_PATH the JIT
cache (an empty directory: no cached compilation).
"""

import argparse
import json
import os
import time

t0 = time.perf_counter()
import torch  # noqa: E402

import mamba_ssu  # noqa: E402

t_import = time.perf_counter() - t0


def inputs(batch, heads, dim, dstate, state_dtype, tokens=None):
    dev = "cuda"
    g = torch.Generator(device="cpu").manual_seed(1)
    shape = (batch, heads, dim) if tokens is None else (batch, tokens, heads, dim)
    bc = (batch, 8, dstate) if tokens is None else (batch, tokens, 8, dstate)
    state = (torch.randn(batch, heads, dim, dstate, generator=g) * 0.1).to(dev, state_dtype)
    x = torch.randn(shape, generator=g).to(dev, torch.bfloat16)
    dt = torch.randn(shape[:-1], generator=g).to(dev, torch.bfloat16)[..., None].expand(shape)
    A = (-torch.rand(heads, generator=g)).to(dev, torch.float32)[:, None, None].expand(
        heads, dim, dstate)
    B = torch.randn(bc, generator=g).to(dev, torch.bfloat16)
    C = torch.randn(bc, generator=g).to(dev, torch.bfloat16)
    D = torch.randn(heads, generator=g).to(dev, torch.bfloat16)[:, None].expand(heads, dim)
    dt_bias = torch.randn(heads, generator=g).to(dev, torch.bfloat16)[:, None].expand(heads, dim)
    idx = torch.arange(batch, dtype=torch.int32, device=dev)
    return dict(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, dt_bias=dt_bias, dt_softplus=True,
                state_batch_indices=idx)


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the context, outside the timings
    seed = torch.tensor([1234], dtype=torch.int64, device="cuda")
    single = inputs(64, 128, 64, 128, torch.float16)
    multi = inputs(16, 128, 64, 128, torch.float16, tokens=4)
    generic = inputs(64, 128, 64, 128, torch.float32)
    calls = {
        "single-token hot (fp16 state, SR)": lambda: mamba_ssu.selective_state_update(
            **single, rand_seed=seed, philox_rounds=10),
        "multi-token T=4 (fp16 state, SR)": lambda: mamba_ssu.selective_state_update(
            **multi, rand_seed=seed, philox_rounds=10),
        "single-token generic (fp32 state)": lambda: mamba_ssu.selective_state_update(**generic),
    }
    rows = {"import_s": t_import, "env": {k: os.environ.get(k) for k in
                                          ("CUDA_FORCE_PTX_JIT", "CUDA_CACHE_PATH",
                                           "CUDA_MODULE_LOADING")}}
    print(f"import: {t_import * 1e3:.1f} ms  env: {rows['env']}")
    for phase in ("first", "warm"):
        for name, fn in calls.items():
            s = timed(fn)
            rows[f"{phase}: {name}"] = s
            print(f"{phase:5s} {name:38s} {s * 1e3:10.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
