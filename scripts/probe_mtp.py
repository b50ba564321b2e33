"""Where the torch extension's multi-token call differs from FlashInfer's recorded one: runs
``mamba_ssu.selective_state_update`` on every recorded run of the given recordings (``run.sh
record`` case directories or merged manifests; their stored blocks only) and prints, per output,
how many elements differ and how they spread along each axis, with the first few values; a
varlen run also once more with ``cu_seqlens`` as int64 (index dtypes that differ send the call
to the run-time kernel instead of a compiled-in one). The differing blocks (ours, FlashInfer's)
go to OUT_DIR as ``.pt`` files. A GPU host with the extension built (``python/build.sh``):

    PYTHONPATH=python python3 scripts/probe_mtp.py CASE_DIR... OUT_DIR
"""
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
import flashinfer_cases as fc  # noqa: E402
import flashinfer_mtp_cases as fmc  # noqa: E402
import mamba_ssu  # noqa: E402

VARIANTS = ("as recorded", "cu_seqlens int64 (run-time kernel)")


def report(name, t, got, m, case, r, variant, out_dir):
    """Prints how ``got`` (the call's storage of output ``name``) differs from the recording."""
    g = got.detach().cpu().reshape(-1)
    bits = fc.bits_dtype(t.dtype)
    for b, want in m.expected_blocks(t):
        if want is None:
            print(f"  {name}: block @{b.elem_offset} hash only")
            continue
        gb = g[b.elem_offset : b.elem_offset + b.elems]
        diff = (gb.view(bits) != want.view(bits)).nonzero().flatten() + b.elem_offset
        print(f"  {name} {t.shape} strides {t.strides}: {diff.numel()} of {b.elems} differ")
        if diff.numel() == 0:
            continue
        for i, (n, s) in enumerate(zip(t.shape, t.strides)):
            c = collections.Counter(((diff // max(s, 1)) % max(n, 1)).tolist())
            print(f"    axis {i} (n={n}): {sorted(c.items())[:40]}")
        k = diff[:8].tolist()
        print(f"    first: {k}; ours {[float(g[j]) for j in k]}; "
              f"FlashInfer's {[float(want[j - b.elem_offset]) for j in k]}")
        tag = f"{case.name}-{r.algorithm_requested}-{VARIANTS.index(variant)}-{name}"
        torch.save({"ours": gb.clone(), "flashinfer": want.clone()}, os.path.join(out_dir, tag + ".pt"))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out_dir = sys.argv[-1]
    os.makedirs(out_dir, exist_ok=True)
    for d in sys.argv[1:-1]:
        m = fmc.load(os.path.join(d, "manifest.json"))
        for case, r in m.runs():
            for variant in VARIANTS:
                call = fmc.build_call(m, case, r, "cuda")
                label = f"== {case.name}/{r.algorithm_requested} {variant}"
                if variant != VARIANTS[0]:
                    if "cu_seqlens" not in call.kwargs:
                        continue
                    call.kwargs["cu_seqlens"] = call.kwargs["cu_seqlens"].to(torch.int64)
                try:
                    mamba_ssu.selective_state_update(**call.kwargs)
                    torch.cuda.synchronize()
                except Exception as e:  # the crate's refusal is a finding too
                    print(f"{label}: {type(e).__name__}: {e}")
                    continue
                print(f"{label}: dim {case.dim} dstate {case.dstate} batch {case.batch} nheads {case.nheads}")
                for name, t in r.outputs.items():
                    got = call.storages.get(name)
                    if got is None:
                        print(f"  {name}: not among the call's tensors ({sorted(call.storages)})")
                        continue
                    report(name, t, got, m, case, r, variant, out_dir)


if __name__ == "__main__":
    main()
