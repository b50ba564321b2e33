"""The front door raises FlashInfer's exception class for every rejection (CPU, no GPU).

FlashInfer 0.7.2.post1 / 0.7.4 check some arguments in Python before any tensor rule and raise
``TypeError`` for a ``rand_seed`` that is not a tensor, ``ValueError`` for the seed tensor's
element count, dtype and device, a seed together with a ``state_scale``, ``philox_rounds <= 0``
with a seed, an intermediate buffer together with dst indices, and an unknown algorithm or
backend (in that order); everything else its C++ layer checks, as ``RuntimeError``. The crate
holds those Python rules in the C check (``MAMBA_SSU_ERROR_INVALID_VALUE``, checked first) and
in the front door (the seed tensor, the names).

``flashinfer_python_class`` below restates FlashInfer's Python checks (not its code: the list
above). For random calls — valid FlashInfer-shaped calls of every form with random mutations,
of the tensors and of exactly the arguments FlashInfer's Python checks — on CPU and on meta
tensors (the op's fake implementation, where a seed on the meta device stands for a CUDA one):
where FlashInfer's Python layer rejects, the front door raises its class; where it does not,
the front door raises no ``ValueError`` or ``TypeError`` (a ``RuntimeError``: FlashInfer's C++
class, or ``NotImplementedError``: not served by the crate, or nothing).
"""

import random

import torch

import mamba_ssu
from calls import outcome, to_meta
from test_cpu_contract import base_call, mutate

ALGORITHMS = ("auto", "simple", "vertical", "horizontal", "async_horizontal")
BACKENDS = ("auto", "flashinfer", "cake")


def flashinfer_python_class(kw, meta):
    """The class FlashInfer's Python layer raises for the call, or None (its checks pass)."""
    seed = kw.get("rand_seed")
    if seed is not None:
        if not isinstance(seed, torch.Tensor):
            return TypeError
        on_device = seed.device.type == "meta" if meta else seed.is_cuda
        if seed.numel() != 1 or seed.dtype != torch.int64 or not on_device:
            return ValueError
        if kw.get("state_scale") is not None:
            return ValueError
        if kw.get("philox_rounds", 10) <= 0:
            return ValueError
    if kw.get("intermediate_states_buffer") is not None and kw.get("dst_state_batch_indices") is not None:
        return ValueError
    if kw.get("algorithm", "auto") not in ALGORITHMS:
        return ValueError
    if kw.get("backend", "auto") not in BACKENDS:
        return ValueError
    return None


def python_mutation(rng, kw):
    """One change to an argument FlashInfer's Python layer checks."""
    kind = rng.choice(["seed", "seed", "rounds", "scale", "buffer", "algorithm", "backend"])
    if kind == "seed":
        kw["rand_seed"] = rng.choice([
            3, "seed", torch.zeros(2, dtype=torch.int64), torch.zeros(1, dtype=torch.int32),
            torch.zeros((), dtype=torch.int64), torch.zeros(1, dtype=torch.int64), None,
        ])
    elif kind == "rounds":
        kw["philox_rounds"] = rng.choice([-5, 0, 1, 12])
        if kw.get("rand_seed") is None:
            kw["rand_seed"] = torch.zeros(1, dtype=torch.int64)
    elif kind == "scale":
        s = kw["state"]
        kw["state_scale"] = torch.ones(s.shape[0], *(s.shape[1:-2] or (1,)), s.shape[-2])
    elif kind == "buffer":
        s = kw["state"]
        heads = s.shape[1] if s.dim() == 4 else 1
        b = kw["x"].shape[0]
        kw["intermediate_states_buffer"] = torch.zeros(b, 1, heads, s.shape[-2], s.shape[-1], dtype=s.dtype)
        if kw.get("dst_state_batch_indices") is None:
            kw["dst_state_batch_indices"] = torch.zeros(b, dtype=torch.int32)
    elif kind == "algorithm":
        kw["algorithm"] = rng.choice(["diagonal", "Simple", "auto", "horizontal"])
    else:
        kw["backend"] = rng.choice(["torch", "flashinfer", "cake"])
    return kind


def _calls(n, seed):
    rng = random.Random(seed)
    for i in range(n):
        form, kw = base_call(rng)
        what = []
        for _ in range(rng.choice([0, 1, 1, 2])):
            what.append(python_mutation(rng, kw))
        for _ in range(rng.choice([0, 0, 1])):
            what.append(mutate(rng, kw))
        yield i, form, what, kw


def _front_door(kw):
    return outcome(lambda: mamba_ssu.selective_state_update(**kw))


def test_front_door_raises_flashinfers_class():
    counts = {}
    for i, form, what, kw in _calls(800, seed=20261203):
        for meta in (False, True):
            call = {k: to_meta(v) for k, v in kw.items()} if meta else kw
            label = f"call {i} ({form}; {what}; {'meta' if meta else 'cpu'})"
            want = flashinfer_python_class(call, meta)
            got = _front_door(call)
            if want is not None:
                assert got[0] is want, f"{label}: FlashInfer raises {want.__name__}, got {got}"
                key = want.__name__
            else:
                assert got[0] not in (ValueError, TypeError), f"{label}: {got}"
                key = "past Python" if got[0] == "ok" else f"past Python, {got[0].__name__}"
            counts[key] = counts.get(key, 0) + 1
    # Not vacuous: both Python classes and calls past FlashInfer's Python layer occur, the
    # latter rejected by the C++-class checks, the crate's own limits, or accepted.
    assert counts.get("ValueError", 0) >= 200 and counts.get("TypeError", 0) >= 20, counts
    assert counts.get("past Python, RuntimeError", 0) >= 100, counts
    assert counts.get("past Python", 0) >= 20, counts
