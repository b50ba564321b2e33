"""CPU tests of the multi-token (speculative-decoding verify) path of the mamba_ssu package (no
GPU): the forms the C contract finds in FlashInfer's multi-token arguments (and the form
conflicts it refuses, with FlashInfer's classes), opcheck and torch.compile tracing of the one
SSU op through its fake implementation (meta tensors), out allocated like x, and vLLM's verify
call reaching the kernel's device check (on CPU tensors a call the contract accepts stops at
"state: expected a CUDA tensor")."""

import pytest
import torch

import mamba_ssu
from calls import check, op_args, outcome

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
# Forms, op, fake implementation
# ---------------------------------------------------------------------------------------------


def test_forms_the_contract_finds():
    """FlashInfer 0.7.2's rule, applied by the C check: cu_seqlens with a 3-D x is varlen (T =
    cache_steps); a 4-D x is fixed length (T = x.size(1)); cache_steps >= 1 makes a 3-D x one
    token per sequence; the intermediate buffer's size(1) is cache_steps."""
    p = check(**make_mtp())
    assert (p["form"], p["varlen"], p["batch"], p["ntokens"], p["total_tokens"]) == ("multi", False, BATCH, T, BATCH * T)
    p = check(**make_mtp(varlen=True))
    assert (p["form"], p["varlen"], p["batch"], p["ntokens"], p["total_tokens"]) == ("multi", True, BATCH, T, sum(LENGTHS))
    kw = make_mtp(t=1)
    for name in ("x", "dt", "B", "C"):
        kw[name] = kw[name][:, 0]
    kw["cache_steps"] = 1
    p = check(**kw)
    assert (p["form"], p["ntokens"]) == ("multi", 1)
    kw["cache_steps"] = 0
    kw["dst_state_batch_indices"] = kw["num_accepted_tokens"] = None
    assert check(**kw)["form"] == "single"
    p = check(**make_inter())
    assert (p["cache_steps"], p["intermediate_cache_size"]) == (T, BATCH)


@pytest.mark.parametrize(
    "base,changes,exc,argument",
    [
        # FlashInfer's C++ checks (RuntimeError): cache_steps in the varlen form, cu_seqlens with
        # a 4-D x, the multi-token launcher built for sm_90 taking AUTO and SIMPLE only.
        ("varlen", dict(cache_steps=0), RuntimeError, "cache_steps"),
        ("fixed", dict(cache_steps=-1), RuntimeError, "cache_steps"),
        ("fixed", dict(cu_seqlens=torch.tensor([0, 4, 5, 8], dtype=torch.int32)), RuntimeError, "cu_seqlens"),
        ("fixed", dict(algorithm="vertical"), RuntimeError, "algorithm"),
        ("fixed", dict(algorithm="horizontal"), RuntimeError, "algorithm"),
        # FlashInfer's Python check (ValueError).
        ("inter", dict(dst_state_batch_indices=torch.zeros(BATCH, T, dtype=torch.int32)), ValueError, "dst_state_batch_indices"),
        ("inter", dict(intermediate_state_indices=torch.zeros(BATCH + 1, dtype=torch.int32)), RuntimeError, "intermediate_state_indices"),
        ("inter", dict(intermediate_state_indices=torch.zeros(BATCH, dtype=torch.int64)), RuntimeError, "intermediate_state_indices"),
        ("fixed", dict(dst_state_batch_indices=torch.zeros(BATCH, T, dtype=torch.int64)), RuntimeError, "dst_state_batch_indices"),
        ("fixed", dict(state_batch_indices=torch.ones(BATCH - 1, T, dtype=torch.int32)), RuntimeError, "state_batch_indices"),
        ("fixed", dict(num_accepted_tokens=torch.ones(BATCH - 1, dtype=torch.int64)), RuntimeError, "num_accepted_tokens"),
        ("fixed", dict(dst_state_batch_indices=torch.zeros(BATCH, T - 1, dtype=torch.int32)), RuntimeError, "dst_state_batch_indices"),
    ],
)
def test_form_conflicts(base, changes, exc, argument):
    """Conflicts of the multi-token arguments, as the contract classes them (FlashInfer's Python
    refusals are ValueError, its C++ checks RuntimeError), through the front door."""
    kw = {"fixed": make_mtp, "varlen": lambda: make_mtp(varlen=True), "inter": make_inter}[base]()
    kw.update(changes)
    want = outcome(lambda: check(**kw))
    assert want[0] is exc and want[1].startswith(f"{argument}: "), want
    assert outcome(lambda: mamba_ssu.selective_state_update(**kw)) == want


@pytest.mark.parametrize(
    "base,changes,form",
    [
        # Index tensors longer than the batch, a 2-D index wider than T (engines' padding).
        ("fixed", dict(state_batch_indices=torch.ones(BATCH + 3, T + 2, dtype=torch.int32),
                       dst_state_batch_indices=torch.ones(BATCH + 1, T, dtype=torch.int32),
                       num_accepted_tokens=torch.ones(BATCH + 5, dtype=torch.int32)), "multi"),
        # num_accepted_tokens and cu_seqlens with their own dtypes (FlashInfer compiles them
        # independently of the slot indices').
        ("fixed", dict(num_accepted_tokens=torch.ones(BATCH, dtype=torch.int64)), "multi"),
        ("varlen", dict(cu_seqlens=torch.tensor([0, 3, 3, 8], dtype=torch.int64),
                        num_accepted_tokens=torch.ones(BATCH, dtype=torch.int64)), "multi"),
        # A 1-D dst index (every token to one slot), a 1-D read index with num_accepted_tokens,
        # intermediate_state_indices without a buffer (not read).
        ("fixed", dict(dst_state_batch_indices=torch.ones(BATCH, dtype=torch.int32),
                       state_batch_indices=torch.ones(BATCH, dtype=torch.int32)), "multi"),
        ("fixed", dict(intermediate_state_indices=torch.zeros(BATCH, dtype=torch.int32)), "multi"),
        # The single-token path ignores the multi-token arguments and a cache_steps below 1.
        ("single", dict(num_accepted_tokens=torch.ones(BATCH, 3), cache_steps=-2,
                        intermediate_state_indices=torch.zeros(7, dtype=torch.int64),
                        intermediate_state_scales=torch.ones(2, 2)), "single"),
    ],
)
def test_flashinfer_index_forms_are_accepted(base, changes, form):
    """Calls FlashInfer 0.7.x accepts: the C check accepts them, and the front door reaches the
    device check (CPU tensors)."""
    if base == "single":
        kw = make_mtp(t=1)
        for name in ("x", "dt", "B", "C"):
            kw[name] = kw[name][:, 0]
        kw["dst_state_batch_indices"] = kw["num_accepted_tokens"] = None
        kw["state_batch_indices"] = kw["state_batch_indices"][:, 0]
    else:
        kw = make_mtp(varlen=base == "varlen")
    kw.update(changes)
    assert check(**kw)["form"] == form
    got = outcome(lambda: mamba_ssu.selective_state_update(**kw))
    assert got == (RuntimeError, "state: expected a CUDA tensor, got one on cpu"), got


@pytest.mark.parametrize("form", ["varlen", "fixed", "intermediate"])
def test_opcheck_selective_state_update_multi_token(form):
    if form == "intermediate":
        kw = make_inter("meta")
        kw["rand_seed"] = torch.zeros(1, dtype=torch.int64, device="meta")
    else:
        kw = make_mtp("meta", varlen=form == "varlen")
    result = torch.library.opcheck(torch.ops.mamba_ssu.selective_state_update.default, op_args(**kw))
    assert all(v == "SUCCESS" for v in result.values()), result


def test_torch_compile_traces_the_multi_token_call():
    """A varlen verify step traced by torch.compile(fullgraph=True): one graph holding the op."""
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
    assert len(seen) == 1 and "mamba_ssu.selective_state_update" in seen[0], seen


def test_multi_token_out_on_meta():
    """out, when not given, is allocated like x as passed: (batch, T, nheads, dim) fixed length,
    (total_tokens, nheads, dim) varlen, and (batch, nheads, dim) for a 3-D x with cache_steps 1
    (FlashInfer's own would be (batch, 1, nheads, dim): the same values); a given out of either
    shape is taken and returned."""
    kw = make_mtp("meta")
    assert mamba_ssu.selective_state_update(**kw).shape == (BATCH, T, NHEADS, DIM)
    kw = make_mtp("meta", varlen=True)
    assert mamba_ssu.selective_state_update(**kw).shape == (sum(LENGTHS), NHEADS, DIM)
    kw = make_mtp("meta", t=1)
    for name in ("x", "dt", "B", "C"):
        kw[name] = kw[name][:, 0]
    kw["cache_steps"] = 1
    assert mamba_ssu.selective_state_update(**kw).shape == (BATCH, NHEADS, DIM)
    for shape in ((BATCH, NHEADS, DIM), (BATCH, 1, NHEADS, DIM)):
        given = torch.empty(*shape, dtype=torch.bfloat16, device="meta")
        assert mamba_ssu.selective_state_update(**kw, out=given) is given
    kw = make_inter("meta")
    kw["rand_seed"] = torch.zeros(1, dtype=torch.int64, device="meta")
    given = torch.empty(BATCH, T, NHEADS, DIM, dtype=torch.bfloat16, device="meta")
    assert mamba_ssu.selective_state_update(**kw, out=given) is given


@pytest.mark.parametrize("base", ["fixed", "varlen", "inter", "no_index"])
def test_well_formed_calls_reach_the_device_check(base):
    kw = {"fixed": make_mtp, "varlen": lambda: make_mtp(varlen=True), "inter": make_inter,
          "no_index": make_mtp}[base]()
    if base == "no_index":
        kw.update(state_batch_indices=None, dst_state_batch_indices=None, num_accepted_tokens=None)
    assert check(**kw)["form"] == "multi"
    got = outcome(lambda: mamba_ssu.selective_state_update(**kw))
    assert got == (RuntimeError, "state: expected a CUDA tensor, got one on cpu"), got


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
        # On CPU: no SR seed (torch.randint would make a CPU seed, refused at the device check).
        plain = MambaSSUBackend(vllm_config(sr=False))
        with pytest.raises(RuntimeError, match="state: expected a CUDA tensor"):
            plain(*args, **call)
        call["dst_state_batch_indices"] = kw["dst_state_batch_indices"][:, : T - 1]
        with pytest.raises(RuntimeError, match="^dst_state_batch_indices: "):
            plain(*args, **call)
