"""CPU tests of the multi-token (speculative-decoding verify) path of the mamba_ssu package (no
GPU): FlashInfer's single/multi-token dispatch rule, the op schema (the intermediate buffer is a
mutated argument), opcheck and torch.compile tracing through the fake implementation (meta
tensors), FlashInfer's normalisation of the multi-token forms, and the argument checks of the
Python layer and of the extension: each malformed call raises before anything is launched, with
a message naming the argument (on CPU tensors the device check comes last, so a well-formed
call reaches "state: expected a CUDA tensor")."""

import pytest
import torch

import mamba_ssu

BATCH, T, NHEADS, DIM, DSTATE, NGROUPS, SLOTS = 3, 4, 4, 64, 128, 2, 16
LENGTHS = (4, 1, 3)  # varlen sequence lengths (sum 8)


def _expand_dt(lead, device):
    """dt as vLLM passes it: one value per (token, head), expanded over dim (stride 0)."""
    return torch.zeros(*lead, NHEADS, dtype=torch.bfloat16, device=device)[..., None].expand(*lead, NHEADS, DIM)


def make_mtp(device="cpu", varlen=False, batch=BATCH, t=T):
    """Multi-token keyword arguments of FlashInfer's signature, vLLM-shaped: 2-D read index used
    as the destination index too (in-place verify), num_accepted_tokens, pad slot 0.
    Fixed length: x (batch, T, nheads, dim); varlen: x (total_tokens, nheads, dim) with
    cu_seqlens and cache_steps = T."""
    f = dict(device=device)
    idx = (torch.arange(batch * t, dtype=torch.int32, **f) % (SLOTS - 1) + 1).reshape(batch, t)
    if varlen:
        total = sum(LENGTHS)
        lead = (total,)
        offsets = [0]
        for n in LENGTHS:
            offsets.append(offsets[-1] + n)
        extra = dict(cu_seqlens=torch.tensor(offsets, dtype=torch.int32, **f), cache_steps=t)
    else:
        lead = (batch, t)
        extra = dict(cache_steps=0)
    kw = dict(
        state=torch.zeros(SLOTS, NHEADS, DIM, DSTATE, dtype=torch.float16, **f),
        x=torch.zeros(*lead, NHEADS, DIM, dtype=torch.bfloat16, **f),
        dt=_expand_dt(lead, device),
        A=torch.zeros(NHEADS, dtype=torch.float32, **f)[:, None, None].expand(-1, DIM, DSTATE),
        B=torch.zeros(*lead, NGROUPS, DSTATE, dtype=torch.bfloat16, **f),
        C=torch.zeros(*lead, NGROUPS, DSTATE, dtype=torch.bfloat16, **f),
        D=torch.zeros(NHEADS, dtype=torch.bfloat16, **f)[:, None].expand(-1, DIM),
        dt_bias=torch.zeros(NHEADS, dtype=torch.bfloat16, **f)[:, None].expand(-1, DIM),
        dt_softplus=True,
        state_batch_indices=idx,
        dst_state_batch_indices=idx,
        num_accepted_tokens=torch.ones(batch, dtype=torch.int32, **f),
        pad_slot_id=0,
        rand_seed=torch.zeros(1, dtype=torch.int64, device="meta") if device == "meta" else None,
        philox_rounds=5,
    )
    kw.update(extra)
    return kw


def make_inter(device="cpu", t=T, entries=BATCH, dtype=torch.float16):
    """The intermediate-buffer write mode: (entries, cache_steps, nheads, dim, dstate)."""
    kw = make_mtp(device)
    kw["dst_state_batch_indices"] = None
    kw["num_accepted_tokens"] = None
    kw["state_batch_indices"] = torch.arange(BATCH, dtype=torch.int32, device=device) + 1
    kw["intermediate_states_buffer"] = torch.zeros(entries, t, NHEADS, DIM, DSTATE, dtype=dtype, device=device)
    kw["intermediate_state_indices"] = torch.arange(BATCH, dtype=torch.int32, device=device)
    kw["cache_steps"] = t
    return kw


# ---------------------------------------------------------------------------------------------
# Dispatch rule, schema, fake implementation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x_dim,cu,cache_steps,mode",
    [
        (3, False, 0, "single"),
        (2, False, 0, "single"),
        (4, False, 0, "multi"),
        (4, False, 8, "multi"),
        (3, False, 1, "multi"),  # FlashInfer unsqueezes a token dimension of 1
        (2, False, 3, "multi"),
        (3, True, 4, "varlen"),
        (3, True, 0, "varlen"),  # then refused: the varlen form needs cache_steps
        (4, True, 4, "multi"),  # then refused: cu_seqlens needs a 3-D x
    ],
)
def test_dispatch_rule(x_dim, cu, cache_steps, mode):
    """FlashInfer 0.7.2's wrapper: varlen iff cu_seqlens with a 3-D x; else multi-token iff x is
    4-D or cache_steps >= 1; else single token."""
    assert mamba_ssu.ssu_mode(x_dim, cu, cache_steps) == mode


def test_mtp_op_schema():
    s = str(torch.ops.mamba_ssu.selective_state_update_mtp.default._schema)
    assert s.startswith("mamba_ssu::selective_state_update_mtp(Tensor(a!) state, Tensor x, Tensor dt")
    assert "Tensor(b!) out" in s
    assert "Tensor(c!)? intermediate_states_buffer" in s
    for name in ("intermediate_state_indices", "cu_seqlens", "num_accepted_tokens", "rand_seed"):
        assert f"Tensor? {name}" in s, name
    assert "int cache_steps" in s and "int philox_rounds" in s
    assert s.endswith("int philox_rounds, int sr_rule=0) -> ()")
    assert mamba_ssu.MTP_MAX_TOKENS == 16


def _mtp_op_args(kw):
    return (
        kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"], kw.get("z"),
        kw["dt_bias"], kw["dt_softplus"], kw["state_batch_indices"],
        kw.get("dst_state_batch_indices"), kw["pad_slot_id"], torch.empty_like(kw["x"]), False,
        kw.get("intermediate_states_buffer"), kw.get("intermediate_state_indices"),
        kw["cache_steps"], kw.get("cu_seqlens"), kw.get("num_accepted_tokens"), kw["rand_seed"],
        kw["philox_rounds"], 0,
    )


@pytest.mark.parametrize("form", ["varlen", "fixed", "intermediate"])
def test_opcheck_selective_state_update_mtp(form):
    if form == "intermediate":
        kw = make_inter("meta")
        kw["rand_seed"] = torch.zeros(1, dtype=torch.int64, device="meta")
    else:
        kw = make_mtp("meta", varlen=form == "varlen")
    result = torch.library.opcheck(torch.ops.mamba_ssu.selective_state_update_mtp.default, _mtp_op_args(kw))
    assert all(v == "SUCCESS" for v in result.values()), result


def test_torch_compile_traces_the_mtp_op():
    """A varlen verify step traced by torch.compile(fullgraph=True): one graph holding the
    multi-token op."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(str(gm.graph))
        from torch._dynamo.backends.debugging import aot_eager

        return aot_eager(gm, example_inputs)

    def step(state, x, dt, A, B, C, D, idx, nat, cu, seed):
        out = mamba_ssu.selective_state_update(
            state, x, dt, A, B, C, D, dt_bias=D, dt_softplus=True, state_batch_indices=idx,
            dst_state_batch_indices=idx, num_accepted_tokens=nat, cu_seqlens=cu, cache_steps=T,
            pad_slot_id=0, rand_seed=seed, philox_rounds=5,
        )
        return out * 2

    kw = make_mtp("meta", varlen=True)
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    out = compiled(kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"],
                   kw["state_batch_indices"], kw["num_accepted_tokens"], kw["cu_seqlens"],
                   kw["rand_seed"])
    assert out.shape == (sum(LENGTHS), NHEADS, DIM) and out.device.type == "meta"
    assert len(seen) == 1 and "mamba_ssu.selective_state_update_mtp" in seen[0], seen


def test_mtp_normalisation_on_meta():
    """FlashInfer's normalisation: with cache_steps >= 1 a 3-D x (and dt, B, C) becomes one
    token per sequence and out is (batch, 1, nheads, dim); a 4-D x keeps its shape; varlen out
    is shaped like x; a given out is returned (a 3-D one accepted for one token)."""
    kw = make_mtp("meta")
    out = mamba_ssu.selective_state_update(**kw)
    assert out.shape == (BATCH, T, NHEADS, DIM)
    kw = make_mtp("meta", varlen=True)
    assert mamba_ssu.selective_state_update(**kw).shape == (sum(LENGTHS), NHEADS, DIM)
    kw = make_mtp("meta", t=1)
    for name in ("x", "dt", "B", "C"):
        kw[name] = kw[name][:, 0]
    kw["cache_steps"] = 1
    out = mamba_ssu.selective_state_update(**kw)
    assert out.shape == (BATCH, 1, NHEADS, DIM)
    given = torch.empty(BATCH, NHEADS, DIM, dtype=torch.bfloat16, device="meta")
    assert mamba_ssu.selective_state_update(**kw, out=given) is given
    kw = make_inter("meta")
    kw["rand_seed"] = torch.zeros(1, dtype=torch.int64, device="meta")
    given = torch.empty(BATCH, T, NHEADS, DIM, dtype=torch.bfloat16, device="meta")
    assert mamba_ssu.selective_state_update(**kw, out=given) is given


# ---------------------------------------------------------------------------------------------
# Argument checks (CPU tensors: every check before the device check is exercised)
# ---------------------------------------------------------------------------------------------


def _bad_mtp_cases():
    i32, i64, bf16 = dict(dtype=torch.int32), dict(dtype=torch.int64), dict(dtype=torch.bfloat16)
    fx = make_mtp()
    vl = make_mtp(varlen=True)
    inter = make_inter()
    tot = sum(LENGTHS)
    seed = torch.zeros(1, dtype=torch.int64)
    fixed, varlen, inter_ = "fixed", "varlen", "inter"
    return [
        # Well-formed calls reach the last check (the device).
        (fixed, dict(), ValueError, "state: expected a CUDA tensor"),
        (varlen, dict(), ValueError, "state: expected a CUDA tensor"),
        (inter_, dict(), ValueError, "state: expected a CUDA tensor"),
        (fixed, dict(num_accepted_tokens=None, dst_state_batch_indices=None,
                     state_batch_indices=torch.tensor([1, 2, 3], **i32)), ValueError, "state: expected a CUDA tensor"),
        (fixed, dict(state_batch_indices=None, dst_state_batch_indices=None, num_accepted_tokens=None),
         ValueError, "state: expected a CUDA tensor"),
        # The dispatch rule's refusals and the Python layer.
        (varlen, dict(cache_steps=0), ValueError, "cache_steps: the varlen form"),
        (fixed, dict(cu_seqlens=vl["cu_seqlens"]), ValueError, "cu_seqlens: the varlen form needs a 3-D x"),
        (fixed, dict(algorithm="vertical"), ValueError, "algorithm: the multi-token path has one layout"),
        (fixed, dict(algorithm="horizontal"), NotImplementedError, "horizontal"),
        (fixed, dict(cache_steps=True), TypeError, "cache_steps"),
        (inter_, dict(dst_state_batch_indices=fx["state_batch_indices"]), ValueError, "mutually exclusive"),
        (inter_, dict(intermediate_state_scales=torch.zeros(1)), NotImplementedError, "intermediate_state_scales"),
        (fixed, dict(rand_seed=seed), ValueError, "rand_seed: expected a CUDA tensor"),
        (fixed, dict(rand_seed=seed, state=fx["state"].float()), ValueError, "float16 state"),
        (fixed, dict(rand_seed=seed, philox_rounds=0), ValueError, "philox_rounds"),
        # Tokens and sequences.
        (fixed, dict(x=torch.zeros(BATCH, 17, NHEADS, DIM, **bf16)), ValueError, "x: expected 1..=16 tokens"),
        (fixed, dict(x=torch.zeros(0, T, NHEADS, DIM, **bf16)), ValueError, "x: expected at least one sequence"),
        (varlen, dict(cache_steps=17), ValueError, "cache_steps: the varlen form needs the longest sequence in 1..=16"),
        (varlen, dict(cu_seqlens=torch.zeros(1, **i32)), ValueError, "cu_seqlens: expected at least 2 offsets"),
        (varlen, dict(cu_seqlens=torch.zeros(2, 2, **i32)), ValueError, "cu_seqlens: expected 1 dimensions"),
        (varlen, dict(cu_seqlens=torch.zeros(4)), TypeError, "cu_seqlens: expected int32 or int64"),
        (varlen, dict(cu_seqlens=vl["cu_seqlens"].long()), TypeError, "cu_seqlens: expected the dtype of state_batch_indices"),
        # Shapes of the token tensors.
        (fixed, dict(x=torch.zeros(BATCH, T, NHEADS + 1, DIM, **bf16)), ValueError, "x: expected size(2) == 4 (nheads of state)"),
        (fixed, dict(dt=_expand_dt((BATCH, T + 1), "cpu")), ValueError, "dt: expected size(1) == 4 (tokens per sequence of x)"),
        (fixed, dict(dt=_expand_dt((BATCH,), "cpu")), ValueError, "dt: expected 4 dimensions"),
        (fixed, dict(B=torch.zeros(BATCH, NGROUPS, DSTATE, **bf16)), ValueError, "B: expected 4 dimensions"),
        (fixed, dict(B=torch.zeros(BATCH + 1, T, NGROUPS, DSTATE, **bf16)), ValueError, "B: expected size(0) == 3 (batch of x)"),
        (fixed, dict(C=torch.zeros(BATCH, T, NGROUPS + 1, DSTATE, **bf16)), ValueError, "C: expected size(2)"),
        (fixed, dict(z=torch.zeros(BATCH, T, NHEADS, DIM + 1, **bf16)), ValueError, "z: expected size(3)"),
        (fixed, dict(out=torch.zeros(BATCH, T - 1, NHEADS, DIM, **bf16)), ValueError, "out: expected size(1)"),
        (varlen, dict(B=torch.zeros(tot + 1, NGROUPS, DSTATE, **bf16)), ValueError, "B: expected size(0) == 8 (total tokens of x)"),
        (varlen, dict(dt=_expand_dt((tot, 1), "cpu")), ValueError, "dt: expected 3 dimensions"),
        (fixed, dict(A=torch.zeros(NHEADS + 1, DIM, DSTATE)[:, :1, :1].expand(-1, DIM, DSTATE)), ValueError, "A: expected size(0)"),
        (fixed, dict(D=torch.zeros(NHEADS, DIM + 1, **bf16)), ValueError, "D: expected size(1)"),
        # Dtypes.
        (fixed, dict(out=torch.zeros(BATCH, T, NHEADS, DIM)), TypeError, "out: expected the dtype of x"),
        (fixed, dict(dt_bias=torch.zeros(NHEADS)[:, None].expand(-1, DIM)), TypeError, "dt_bias: expected the dtype of dt"),
        (fixed, dict(A=torch.zeros(NHEADS, **bf16)[:, None, None].expand(-1, DIM, DSTATE)), TypeError, "A: expected float32"),
        # Strides.
        (fixed, dict(dt=torch.zeros(BATCH, T, NHEADS, DIM, **bf16)), ValueError, "dt: expected stride(2) == 1"),
        (fixed, dict(x=torch.zeros(BATCH, T, DIM, NHEADS, **bf16).transpose(2, 3)), ValueError, "x: expected stride(3) == 1"),
        (fixed, dict(B=torch.zeros(BATCH, T, DSTATE, NGROUPS, **bf16).transpose(2, 3)), ValueError, "B: expected stride(3) == 1"),
        (varlen, dict(out=torch.zeros(tot, DIM, NHEADS, **bf16).transpose(1, 2)), ValueError, "out: expected stride(2) == 1"),
        (fixed, dict(state=torch.zeros(SLOTS, NHEADS, DSTATE, DIM, dtype=torch.float16).transpose(2, 3)), ValueError, "state: expected stride(3) == 1"),
        # Index tensors.
        (fixed, dict(state_batch_indices=torch.zeros(BATCH + 1, T, **i32)), ValueError, "state_batch_indices: expected size(0)"),
        (fixed, dict(state_batch_indices=torch.zeros(BATCH, T, 1, **i32)), ValueError, "state_batch_indices: expected 1 or 2"),
        (fixed, dict(state_batch_indices=torch.zeros(BATCH, 0, **i32)), ValueError, "state_batch_indices: a 2-D index needs at least one column"),
        (fixed, dict(state_batch_indices=torch.zeros(BATCH, T)), TypeError, "state_batch_indices: expected int32 or int64"),
        (fixed, dict(dst_state_batch_indices=torch.zeros(BATCH, **i32)), ValueError, "dst_state_batch_indices: the multi-token path expects a 2-D"),
        (fixed, dict(dst_state_batch_indices=torch.zeros(BATCH, T - 1, **i32)), ValueError, "dst_state_batch_indices: expected at least 4 columns"),
        (varlen, dict(dst_state_batch_indices=torch.zeros(BATCH, T - 1, **i32)), ValueError, "dst_state_batch_indices: expected at least 4 columns"),
        (fixed, dict(dst_state_batch_indices=fx["state_batch_indices"].long()), TypeError, "dst_state_batch_indices: expected the dtype of state_batch_indices"),
        (fixed, dict(num_accepted_tokens=torch.ones(BATCH + 1, **i32)), ValueError, "num_accepted_tokens: expected size(0)"),
        (fixed, dict(num_accepted_tokens=torch.ones(BATCH, 1, **i32)), ValueError, "num_accepted_tokens: expected 1 dimensions"),
        (fixed, dict(num_accepted_tokens=torch.ones(BATCH, **i64)), TypeError, "num_accepted_tokens: expected the dtype of state_batch_indices"),
        (fixed, dict(state_batch_indices=torch.tensor([1, 2, 3], **i32)), ValueError, "num_accepted_tokens: needs a 2-D state_batch_indices"),
        (fixed, dict(state_batch_indices=None, dst_state_batch_indices=None, num_accepted_tokens=None,
                     state=torch.zeros(BATCH - 1, NHEADS, DIM, DSTATE, dtype=torch.float16)), ValueError, "state: without state_batch_indices"),
        # The intermediate buffer.
        (inter_, dict(intermediate_states_buffer=torch.zeros(BATCH, T + 1, NHEADS, DIM, DSTATE, dtype=torch.float16)),
         ValueError, "intermediate_states_buffer: expected size(1) == cache_steps (4)"),
        (inter_, dict(cache_steps=T - 1, intermediate_states_buffer=torch.zeros(BATCH, T - 1, NHEADS, DIM, DSTATE, dtype=torch.float16)),
         ValueError, "cache_steps: expected >= the tokens per sequence"),
        (inter_, dict(intermediate_states_buffer=torch.zeros(BATCH, T, NHEADS + 1, DIM, DSTATE, dtype=torch.float16)),
         ValueError, "intermediate_states_buffer: expected size(2)"),
        (inter_, dict(intermediate_states_buffer=torch.zeros(BATCH, T, NHEADS, DIM, DSTATE, **bf16)),
         TypeError, "intermediate_states_buffer: expected the dtype of state"),
        (inter_, dict(intermediate_states_buffer=torch.zeros(BATCH, T, NHEADS, DSTATE, DIM, dtype=torch.float16).transpose(3, 4)),
         ValueError, "intermediate_states_buffer: expected stride(4) == 1"),
        (inter_, dict(intermediate_states_buffer=torch.zeros(T, BATCH, NHEADS, DIM, DSTATE, dtype=torch.float16).transpose(0, 1)),
         ValueError, "intermediate_states_buffer: expected stride(1)"),
        (inter_, dict(intermediate_states_buffer=torch.zeros(BATCH, T, NHEADS, DIM, dtype=torch.float16)),
         ValueError, "intermediate_states_buffer: expected 5 dimensions"),
        (inter_, dict(intermediate_states_buffer=None), ValueError, "intermediate_state_indices: given without an intermediate_states_buffer"),
        (inter_, dict(intermediate_state_indices=torch.zeros(BATCH + 1, **i32)), ValueError, "intermediate_state_indices: expected size(0)"),
        (inter_, dict(intermediate_state_indices=torch.zeros(BATCH, **i64)), TypeError, "intermediate_state_indices: expected the dtype of state_batch_indices"),
    ], {"fixed": fx, "varlen": vl, "inter": inter}


_CASES, _BASES = _bad_mtp_cases()


@pytest.mark.parametrize("base,changes,exc,fragment", _CASES, ids=lambda v: None)
def test_mtp_argument_checks(base, changes, exc, fragment):
    kw = dict(_BASES[base])
    kw.update(changes)
    with pytest.raises(exc) as info:
        mamba_ssu.selective_state_update(**kw)
    assert fragment in str(info.value), str(info.value)


def test_mtp_extension_checks_without_the_python_layer():
    """The extension's own entry point checks as well (a caller of `_C` directly gets the same
    errors): a well-formed call stops at the device check, a malformed one names the argument."""
    kw = make_mtp(varlen=True)
    args = list(_mtp_op_args(kw))
    with pytest.raises(ValueError, match="state: expected a CUDA tensor"):
        mamba_ssu._C.selective_state_update_mtp(*args)
    args[17] = 0  # cache_steps of the varlen form
    with pytest.raises(ValueError, match="cache_steps"):
        mamba_ssu._C.selective_state_update_mtp(*args)
    args[17] = T
    args[1] = kw["x"][:, None]  # a 4-D x with cu_seqlens
    with pytest.raises(ValueError, match="x: the varlen form"):
        mamba_ssu._C.selective_state_update_mtp(*args)


def test_vllm_backend_takes_the_verify_path():
    """vLLM's verify call through ``MambaSSUBackend`` (positional state..dt_bias, varlen x,
    cu_seqlens, 2-D index as read and destination, num_accepted_tokens, null_block_id 0) takes
    the varlen multi-token path with cache_steps = the index width: on meta tensors it goes
    through (returning nothing, as vLLM's backends), on CPU tensors it reaches the device check,
    and a destination index narrower than that width is refused by the multi-token check."""
    from engines import vllm_config
    from mamba_ssu.vllm import MambaSSUBackend

    backend = MambaSSUBackend(vllm_config(sr=True, rounds=5), seed_mode="stock")
    for device in ("meta", "cpu"):
        kw = make_mtp(device, varlen=True)
        args = [kw[n] for n in ("state", "x", "dt", "A", "B", "C", "D", "dt_bias")]
        call = dict(dt_softplus=True, state_batch_indices=kw["state_batch_indices"],
                    dst_state_batch_indices=kw["dst_state_batch_indices"], null_block_id=0,
                    num_accepted_tokens=kw["num_accepted_tokens"], cu_seqlens=kw["cu_seqlens"])
        if device == "meta":
            assert backend(*args, **call, out=torch.empty_like(kw["x"])) is None
            continue
        # On CPU: no SR seed (torch.randint would make a CPU seed, refused before the path).
        plain = MambaSSUBackend(vllm_config(sr=False))
        with pytest.raises(ValueError, match="state: expected a CUDA tensor"):
            plain(*args, **call)
        call["dst_state_batch_indices"] = kw["dst_state_batch_indices"][:, : T - 1]
        with pytest.raises(ValueError, match="dst_state_batch_indices: expected at least 4 columns"):
            plain(*args, **call)
