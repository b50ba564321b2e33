"""Helpers of the engine adapter tests: the engines' configurations and the SSU arguments their
Mamba-2 mixers pass, shaped and strided as they pass them (read from vLLM 0.33.0's
``mamba_mixer2.py`` and ``mamba_attn.py``, sglang 0.5.23's ``mamba.py`` and
``hybrid_linear_attn_backend.py``).

``engine(name)`` imports an engine module for a test, skipping the test where the engine is not
installed — or failing it where ``MAMBA_SSU_EXPECT_ENGINE`` names that engine
(``scripts/check-engine.sh`` sets it), so that a check against the engine cannot pass by
skipping.
"""

import importlib
import os
from types import SimpleNamespace

import pytest
import torch

# Nemotron-H's Mamba-2 layer at tensor parallel 4.
NHEADS, DIM, DSTATE, NGROUPS = 32, 64, 128, 2
NUM_SPEC = 3  # speculative tokens: the index width is 1 + NUM_SPEC
PAGE_PAD = 256  # a cache block's page is larger than one slot's state (elements)


def expected_engine(name: str) -> bool:
    return os.environ.get("MAMBA_SSU_EXPECT_ENGINE") == name


#: The engine releases the adapters are written against.
ENGINE_VERSIONS = {"vllm": "0.33.0", "sglang": "0.5.23"}


def engine(module: str):
    """Imports ``module`` of vLLM or sglang: skips the test without the engine or with another
    release than the adapters are written against, and fails it instead when
    MAMBA_SSU_EXPECT_ENGINE names that engine."""
    name = module.split(".")[0]
    try:
        top = importlib.import_module(name)
        mod = importlib.import_module(module)
    except ImportError as e:
        if expected_engine(name):
            pytest.fail(f"MAMBA_SSU_EXPECT_ENGINE={name} but {module} does not import: {e}")
        pytest.skip(f"{name} is not installed ({e})")
    version = getattr(top, "__version__", None)
    if version != ENGINE_VERSIONS[name]:
        if expected_engine(name):
            pytest.fail(f"MAMBA_SSU_EXPECT_ENGINE={name}: {name} {version} is installed, not "
                        f"{ENGINE_VERSIONS[name]}")
        pytest.skip(f"{name} {version} is installed; the adapter is written against {ENGINE_VERSIONS[name]}")
    return mod


def vllm_config(sr: bool, rounds: int = 0, algorithm=None):
    """vLLM's ``MambaConfig`` for ``--mamba-backend flashinfer`` (the real class where vLLM is
    importable; else an object with the three attributes the backend reads). Stochastic
    rounding and the rounds are set after construction, as vLLM's ``EngineArgs`` sets them
    (``MambaConfig``'s own check of them needs a CUDA platform)."""
    try:
        from vllm.config.mamba import MambaBackendEnum, MambaConfig
    except ImportError:
        if expected_engine("vllm"):
            raise
        return SimpleNamespace(backend="flashinfer", enable_stochastic_rounding=sr,
                               stochastic_rounding_philox_rounds=rounds, ssu_algorithm=algorithm)
    cfg = MambaConfig(backend=MambaBackendEnum.FLASHINFER, ssu_algorithm=algorithm)
    cfg.enable_stochastic_rounding = sr
    cfg.stochastic_rounding_philox_rounds = rounds
    return cfg


def _cache(slots, device, gen):
    """An fp16 SSM cache of ``slots`` blocks at a page stride larger than one slot, and its
    storage (the whole pages, for byte comparisons)."""
    elems = NHEADS * DIM * DSTATE
    store = torch.randn(slots, elems + PAGE_PAD, generator=gen, device=device).to(torch.float16)
    return store[:, :elems].view(slots, NHEADS, DIM, DSTATE), store


def _layer_params(device, gen):
    """A, D, dt_bias as the mixers expand them from per-head parameters."""
    a = -torch.rand(NHEADS, generator=gen, device=device) - 0.5
    A = a[:, None, None].expand(-1, DIM, DSTATE).to(torch.float32)  # strides (1, 0, 0)
    D = torch.randn(NHEADS, generator=gen, device=device).to(torch.bfloat16)[:, None].expand(-1, DIM)
    dt_bias = (torch.rand(NHEADS, generator=gen, device=device) * 0.1).to(torch.bfloat16)
    return A, D, dt_bias[:, None].expand(-1, DIM)


def _projected(tokens, device, gen):
    """vLLM's mixer input: one projected row per token (gate | x | B | C | dt, bf16), of which
    x, B, C and dt are column slices (row stride = the projected width)."""
    inner = NHEADS * DIM
    width = inner + inner + 2 * NGROUPS * DSTATE + NHEADS
    p = torch.randn(tokens, width, generator=gen, device=device).to(torch.bfloat16)
    xbc, dt = torch.split(p[:, inner:], [inner + 2 * NGROUPS * DSTATE, NHEADS], dim=-1)
    x, B, C = torch.split(xbc, [inner, NGROUPS * DSTATE, NGROUPS * DSTATE], dim=-1)
    return (x.view(-1, NHEADS, DIM), B.view(-1, NGROUPS, DSTATE), C.view(-1, NGROUPS, DSTATE),
            dt[:, :, None].expand(-1, -1, DIM))


def vllm_decode(device, gen, batch=6, pad_rows=2, block_table_width=5):
    """The arguments vLLM's Mamba-2 mixer passes at a decode step without speculative decoding:
    a (padded batch, 1) int32 slot index, a column of a wider block table, rows past the real
    requests the null block 0, as read and destination index; no cu_seqlens and no
    num_accepted_tokens; out a (tokens, nheads, dim) view of the layer's output."""
    slots = 1 + batch
    state, store = _cache(slots, device, gen)
    A, D, dt_bias = _layer_params(device, gen)
    rows = batch + pad_rows
    x, B, C, dt = _projected(rows, device, gen)
    table = torch.zeros(rows, block_table_width, dtype=torch.int32, device=device)
    table[:batch, 0] = torch.randperm(batch, generator=gen, device=device).to(torch.int32) + 1
    index = table[:, :1]  # (rows, 1), row stride block_table_width
    out = _poisoned(rows, device).view(rows, -1, DIM)
    args = (state, x, dt, A, B, C, D, dt_bias)
    kwargs = dict(dt_softplus=True, state_batch_indices=index, dst_state_batch_indices=index,
                  out=out, num_accepted_tokens=None, cu_seqlens=None, is_blackwell=False)
    return args, kwargs, store


def vllm_verify(device, gen, lengths=(4, 2, 4, 1), accepted=(1, 3, 4, 2), pad_seqs=2,
                pad_tokens=3, block_table_width=7):
    """The arguments vLLM's Mamba-2 mixer passes at a speculative-decoding verify step: varlen x
    of the decode tokens (with ``pad_tokens`` padded rows past the last sequence), cu_seqlens
    (query_start_loc) int32 of the padded batch (padded sequences empty), an int32 (padded
    batch, 1 + num_spec) slot index sliced from a wider block table (padded rows the null
    block 0) as read and destination index, int32 num_accepted_tokens (padded entries 1)."""
    steps = 1 + NUM_SPEC
    seqs = len(lengths)
    slots = 1 + seqs * steps
    state, store = _cache(slots, device, gen)
    A, D, dt_bias = _layer_params(device, gen)
    total = sum(lengths)
    rows = total + pad_tokens
    x, B, C, dt = _projected(rows, device, gen)
    batch = seqs + pad_seqs
    table = torch.zeros(batch, block_table_width, dtype=torch.int32, device=device)
    table[:seqs, :steps] = torch.arange(1, slots, dtype=torch.int32, device=device).view(seqs, steps)
    index = table[:, :steps]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    cu += [cu[-1]] * pad_seqs
    cu_seqlens = torch.tensor(cu, dtype=torch.int32, device=device)
    nat = torch.tensor(list(accepted) + [1] * pad_seqs, dtype=torch.int32, device=device)
    out = _poisoned(rows, device).view(rows, -1, DIM)
    args = (state, x, dt, A, B, C, D, dt_bias)
    kwargs = dict(dt_softplus=True, state_batch_indices=index, dst_state_batch_indices=index,
                  out=out, num_accepted_tokens=nat, cu_seqlens=cu_seqlens, is_blackwell=False)
    return args, kwargs, store


def _poisoned(rows, device):
    """A layer's output rows, NaN until written (rows the SSU must not write keep it)."""
    return torch.full((rows, NHEADS * DIM), float("nan"), dtype=torch.bfloat16, device=device)


def _sglang_inputs(tokens, device, gen):
    x = torch.randn(tokens, NHEADS, DIM, generator=gen, device=device).to(torch.bfloat16)
    B = torch.randn(tokens, NGROUPS, DSTATE, generator=gen, device=device).to(torch.bfloat16)
    C = torch.randn(tokens, NGROUPS, DSTATE, generator=gen, device=device).to(torch.bfloat16)
    dt = (torch.rand(tokens, NHEADS, generator=gen, device=device) * 0.5 - 1.0).to(torch.bfloat16)
    return x, B, C, dt[:, :, None].expand(-1, -1, DIM)


def sglang_decode(device, gen, batch=6, pad_rows=2):
    """The arguments sglang's Mamba-2 mixer passes at decode: x (tokens, nheads, dim), a 1-D
    int32 slot index (CUDA-graph padded rows hold pad_slot_id -1), D positional, z None, the
    default pad_slot_id (-1), out a view of the layer's output."""
    slots = batch + 1
    state, store = _cache(slots, device, gen)
    A, D, dt_bias = _layer_params(device, gen)
    rows = batch + pad_rows
    x, B, C, dt = _sglang_inputs(rows, device, gen)
    index = torch.full((rows,), -1, dtype=torch.int32, device=device)
    index[:batch] = torch.randperm(slots, generator=gen, device=device)[:batch].to(torch.int32)
    out = _poisoned(rows, device).view(rows, -1, DIM)
    args = (state, x, dt, A, B, C, D)
    kwargs = dict(z=None, dt_bias=dt_bias, dt_softplus=True, state_batch_indices=index, out=out)
    return args, kwargs, store


def sglang_verify(device, gen, batch=5, entries=8):
    """The arguments sglang's Mamba-2 mixer passes at target verify: 4-D x (batch, draft tokens,
    nheads, dim) and the same for dt, B, C, out; a 1-D int32 slot index; disable_state_update;
    the layer's intermediate state buffer (entries, draft tokens, nheads, dim, dstate) with
    int32 intermediate_state_indices = arange(batch); cache_steps = draft tokens;
    retrieve_parent_token None (linear drafts)."""
    steps = 1 + NUM_SPEC
    slots = batch + 1
    state, store = _cache(slots, device, gen)
    A, D, dt_bias = _layer_params(device, gen)
    x, B, C, dt = _sglang_inputs(batch * steps, device, gen)
    view4 = lambda t: t.view(batch, steps, *t.shape[1:])  # noqa: E731
    index = torch.randperm(slots, generator=gen, device=device)[:batch].to(torch.int32)
    buf = torch.zeros(entries, steps, NHEADS, DIM, DSTATE, dtype=torch.float16, device=device)
    out = _poisoned(batch * steps, device)
    args = (state, view4(x), dt.view(batch, steps, NHEADS, DIM), A, view4(B), view4(C), D)
    kwargs = dict(z=None, dt_bias=dt_bias, dt_softplus=True, state_batch_indices=index,
                  out=out.view(batch, steps, NHEADS, DIM), disable_state_update=True,
                  intermediate_states_buffer=buf, cache_steps=steps, retrieve_parent_token=None,
                  intermediate_state_indices=torch.arange(batch, dtype=torch.int32, device=device))
    return args, kwargs, store


class Recorder:
    """Stands in for the SSU kernel: records each call's arguments, bound to FlashInfer's
    signature (that of ``mamba_ssu.selective_state_update`` without its keyword-only
    extension), so that two callers' calls compare argument by argument."""

    def __init__(self):
        import inspect

        import mamba_ssu

        sig = inspect.signature(mamba_ssu.selective_state_update)
        self.signature = sig.replace(parameters=[
            p for p in sig.parameters.values() if p.kind is not p.KEYWORD_ONLY
        ])
        self.calls = []

    def __call__(self, *args, **kwargs):
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        self.calls.append(dict(bound.arguments))
        return kwargs.get("out")


def same_call(got: dict, want: dict):
    """Asserts two recorded calls pass the same arguments: the same tensor objects (the engine's
    own tensors reach the kernel, no copy), except rand_seed, compared by value."""
    assert got.keys() == want.keys()
    for name in want:
        a, b = got[name], want[name]
        if name == "rand_seed" and isinstance(b, torch.Tensor):
            assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, name
            assert a.device == b.device and torch.equal(a, b), name
        elif isinstance(b, torch.Tensor):
            assert a is b, f"{name}: not the caller's tensor"
        else:
            assert type(a) is type(b) and a == b, f"{name}: {a!r} != {b!r}"
