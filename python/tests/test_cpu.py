"""CPU tests of the mamba_ssu package (CI, no GPU): import, op schemas, opcheck and
torch.compile tracing through the fake implementations (meta tensors), and every argument check
of the Python layer and of the extension (each malformed call raises before anything is
launched, with a message naming the argument)."""

import pytest
import torch

import mamba_ssu

BATCH, NHEADS, DIM, DSTATE, NGROUPS, SLOTS = 3, 4, 64, 128, 2, 5


def make(device="cpu", batch=BATCH, nheads=NHEADS, dim=DIM, dstate=DSTATE, ngroups=NGROUPS):
    """FlashInfer-shaped keyword arguments as vLLM passes them (expanded A/dt/D/dt_bias)."""
    f = dict(device=device)
    return dict(
        state=torch.zeros(SLOTS, nheads, dim, dstate, dtype=torch.float16, **f),
        x=torch.zeros(batch, nheads, dim, dtype=torch.bfloat16, **f),
        dt=torch.zeros(batch, nheads, dtype=torch.bfloat16, **f)[:, :, None].expand(-1, -1, dim),
        A=torch.zeros(nheads, dtype=torch.float32, **f)[:, None, None].expand(-1, dim, dstate),
        B=torch.zeros(batch, ngroups, dstate, dtype=torch.bfloat16, **f),
        C=torch.zeros(batch, ngroups, dstate, dtype=torch.bfloat16, **f),
        D=torch.zeros(nheads, dtype=torch.bfloat16, **f)[:, None].expand(-1, dim),
        dt_bias=torch.zeros(nheads, dtype=torch.bfloat16, **f)[:, None].expand(-1, dim),
        dt_softplus=True,
        state_batch_indices=torch.zeros(batch, 1, dtype=torch.int32, **f),
        pad_slot_id=0,
        # On CPU tensors no seed by default: the extension's checks run up to its device check.
        rand_seed=torch.zeros(1, dtype=torch.int64, device="meta") if device == "meta" else None,
        philox_rounds=10,
    )


def test_import_and_version():
    assert mamba_ssu.__version__ == "0.1.0"
    assert mamba_ssu.MAX_SEEDS_PER_DRAW == 1 << 24
    assert callable(mamba_ssu.selective_state_update)


def test_op_schemas():
    s = str(torch.ops.mamba_ssu.selective_state_update.default._schema)
    assert s.startswith("mamba_ssu::selective_state_update(Tensor(a!) state, Tensor x, Tensor dt")
    assert "Tensor(b!) out" in s and s.endswith("int algorithm, int sr_rule=0) -> ()")
    assert "Tensor(c!)" not in s  # the single-token op mutates state and out only
    assert str(torch.ops.mamba_ssu.draw_seeds.default._schema) == "mamba_ssu::draw_seeds(Tensor(a!) out) -> ()"


def _op_args(kw):
    return (
        kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"], None, kw["dt_bias"],
        kw["dt_softplus"], kw["state_batch_indices"], None, kw["pad_slot_id"],
        torch.empty_like(kw["x"]), False, kw["rand_seed"], kw["philox_rounds"], 0,
    )


def test_opcheck_selective_state_update():
    result = torch.library.opcheck(torch.ops.mamba_ssu.selective_state_update.default, _op_args(make("meta")))
    assert all(v == "SUCCESS" for v in result.values()), result


def test_opcheck_draw_seeds():
    out = torch.empty(40, dtype=torch.int64, device="meta")
    result = torch.library.opcheck(torch.ops.mamba_ssu.draw_seeds.default, (out,))
    assert all(v == "SUCCESS" for v in result.values()), result


def test_torch_compile_traces_the_op():
    """torch.compile(backend="aot_eager", fullgraph=True) traces selective_state_update through
    its fake implementation: one graph, holding the mamba_ssu op."""
    seen = []

    def backend(gm, example_inputs):
        seen.append(str(gm.graph))
        from torch._dynamo.backends.debugging import aot_eager

        return aot_eager(gm, example_inputs)

    def step(state, x, dt, A, B, C, D, idx, seed):
        out = mamba_ssu.selective_state_update(
            state, x, dt, A, B, C, D, dt_bias=D, dt_softplus=True, state_batch_indices=idx,
            pad_slot_id=0, rand_seed=seed, philox_rounds=5,
        )
        return out * 2

    kw = make("meta")
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    out = compiled(kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"],
                   kw["state_batch_indices"], kw["rand_seed"])
    assert out.shape == (BATCH, NHEADS, DIM) and out.device.type == "meta"
    assert len(seen) == 1 and "mamba_ssu.selective_state_update" in seen[0], seen


def test_flashinfer_normalisation_on_meta():
    """2-D / 1-D single-head forms are unsqueezed as FlashInfer does; out is returned."""
    kw = make("meta", nheads=1)
    kw2 = dict(kw)
    kw2["state"] = kw["state"][:, 0]
    kw2["x"] = kw["x"][:, 0]
    kw2["dt"] = kw["dt"][:, 0]
    kw2["A"] = kw["A"][0]
    kw2["B"] = kw["B"][:, 0]
    kw2["C"] = kw["C"][:, 0]
    kw2["D"] = kw["D"][0]
    kw2["dt_bias"] = kw["dt_bias"][0]
    kw2["state_batch_indices"] = kw["state_batch_indices"][:, 0]
    kw2["B"] = torch.zeros(BATCH, DSTATE, dtype=torch.bfloat16, device="meta")
    kw2["C"] = torch.zeros(BATCH, DSTATE, dtype=torch.bfloat16, device="meta")
    out = mamba_ssu.selective_state_update(**kw2)
    assert out.shape == (BATCH, 1, DIM)
    given = torch.empty(BATCH, DIM, dtype=torch.bfloat16, device="meta")
    assert mamba_ssu.selective_state_update(**kw2, out=given) is given


def call(**changes):
    kw = make()
    kw.update(changes)
    return mamba_ssu.selective_state_update(**kw)


# (changes, exception type, message fragment): each reaches the check it names on CPU tensors
# (the device check comes last, so everything before it is exercised without a GPU).
def _bad_cases():
    k = make()
    f16 = dict(dtype=torch.float16)
    seed = torch.zeros(1, dtype=torch.int64)
    cases = [
        # Unsupported arguments: never silently ignored.
        (dict(state_scale=torch.ones(SLOTS, NHEADS, DIM)), NotImplementedError, "state_scale"),
        (dict(state=k["state"].to(torch.int16)), NotImplementedError, "int16"),
        (dict(intermediate_state_scales=torch.zeros(1)), NotImplementedError, "intermediate_state_scales"),
        # Multi-token arguments on the single-token path (3-D x, cache_steps 0): refused.
        (dict(intermediate_states_buffer=torch.zeros(1)), ValueError, "intermediate_states_buffer: only the multi-token path"),
        (dict(intermediate_state_indices=torch.zeros(1)), ValueError, "intermediate_state_indices: only the multi-token path"),
        (dict(num_accepted_tokens=torch.zeros(3, dtype=torch.int32)), ValueError, "num_accepted_tokens: only the multi-token path"),
        # cu_seqlens with a 3-D x is the varlen form, which needs cache_steps (the longest sequence).
        (dict(cu_seqlens=torch.zeros(2, dtype=torch.int32)), ValueError, "cache_steps: the varlen form"),
        (dict(cache_steps=-1), ValueError, "cache_steps"),
        (dict(cache_steps=1.0), TypeError, "cache_steps"),
        (dict(backend="cake"), NotImplementedError, "backend"),
        (dict(backend="triton"), ValueError, "backend"),
        (dict(algorithm="horizontal"), NotImplementedError, "horizontal"),
        (dict(algorithm="fastest"), ValueError, "algorithm"),
        (dict(algorithm=1), ValueError, "algorithm"),
        (dict(sr_rule="0.7.3"), ValueError, "sr_rule"),
        (dict(sr_rule=1), ValueError, "sr_rule"),
        (dict(sr_rule=None), ValueError, "sr_rule"),
        # rand_seed / philox_rounds.
        (dict(rand_seed=torch.zeros(2, dtype=torch.int64)), ValueError, "single-element"),
        (dict(rand_seed=torch.zeros(1, dtype=torch.int32)), ValueError, "int64"),
        (dict(rand_seed=42), TypeError, "rand_seed"),
        (dict(rand_seed=seed, philox_rounds=0), ValueError, "philox_rounds"),
        (dict(rand_seed=seed, philox_rounds=11), ValueError, "philox_rounds"),
        (dict(rand_seed=seed, philox_rounds=5.0), TypeError, "philox_rounds"),
        (dict(rand_seed=seed, state=k["state"].float()), ValueError, "float16 state"),
        (dict(rand_seed=seed), ValueError, "rand_seed: expected a CUDA tensor"),
        (dict(pad_slot_id=0.5), TypeError, "pad_slot_id"),
        # Shapes.
        (dict(x=torch.zeros(BATCH, NHEADS + 1, DIM, dtype=torch.bfloat16)), ValueError, "x: expected size(1)"),
        (dict(x=torch.zeros(BATCH, 1, NHEADS, DIM, 1, dtype=torch.bfloat16)), ValueError, "x: expected 3 dimensions"),
        # A 4-D x is the multi-token form (FlashInfer's rule): checked as (batch, T, nheads, dim).
        (dict(x=torch.zeros(BATCH, NHEADS, DIM, 1, dtype=torch.bfloat16)), ValueError, "x: expected size(2) == 4 (nheads of state)"),
        (dict(dt=torch.zeros(BATCH + 1, NHEADS, dtype=torch.bfloat16)[:, :, None].expand(-1, -1, DIM)), ValueError, "dt: expected size(0)"),
        (dict(A=torch.zeros(NHEADS, DIM, DSTATE // 2)[:, :1, :1].expand(-1, DIM, DSTATE // 2)), ValueError, "A: expected size(2)"),
        (dict(B=torch.zeros(BATCH, NGROUPS, 64, dtype=torch.bfloat16)), ValueError, "B: expected size(2)"),
        (dict(C=torch.zeros(BATCH, NGROUPS + 1, DSTATE, dtype=torch.bfloat16)), ValueError, "C: expected size(1)"),
        (dict(D=torch.zeros(NHEADS + 1, DIM, dtype=torch.bfloat16)), ValueError, "D: expected size(0)"),
        (dict(z=torch.zeros(BATCH, NHEADS, DIM + 1, dtype=torch.bfloat16)), ValueError, "z: expected size(2)"),
        (dict(out=torch.zeros(BATCH, NHEADS, DIM - 1, dtype=torch.bfloat16)), ValueError, "out: expected size(2)"),
        (dict(state_batch_indices=torch.zeros(BATCH, 1, 1, dtype=torch.int32)), ValueError, "state_batch_indices: expected 1 or 2"),
        (dict(state_batch_indices=torch.zeros(BATCH + 1, dtype=torch.int32)), ValueError, "state_batch_indices: expected size(0)"),
        (dict(dst_state_batch_indices=torch.zeros(BATCH, 0, dtype=torch.int32)), ValueError, "at least one column"),
        # Dtypes.
        (dict(x=torch.zeros(BATCH, NHEADS, DIM)), TypeError, "expected the dtype of x"),
        (dict(B=torch.zeros(BATCH, NGROUPS, DSTATE, **f16)), TypeError, "B: expected the dtype of x"),
        (dict(D=torch.zeros(NHEADS, **f16)[:, None].expand(-1, DIM)), TypeError, "D: expected the dtype of dt"),
        (dict(A=torch.zeros(NHEADS, **f16)[:, None, None].expand(-1, DIM, DSTATE)), TypeError, "A: expected float32"),
        (dict(x=torch.zeros(BATCH, NHEADS, DIM, dtype=torch.float64)), TypeError, "x: expected float32, float16 or bfloat16"),
        (dict(state_batch_indices=torch.zeros(BATCH, dtype=torch.float32)), TypeError, "int32 or int64"),
        (dict(dst_state_batch_indices=torch.zeros(BATCH, dtype=torch.int64)), TypeError, "dst_state_batch_indices: expected the dtype"),
        # Strides (the layout contract).
        (dict(A=torch.zeros(NHEADS, DIM, DSTATE)), ValueError, "A: expected stride(0) == 1"),
        (dict(dt=torch.zeros(BATCH, NHEADS, DIM, dtype=torch.bfloat16)), ValueError, "dt: expected stride(1) == 1"),
        (dict(D=torch.zeros(NHEADS, DIM, dtype=torch.bfloat16)), ValueError, "D: expected stride(0) == 1"),
        (dict(state=torch.zeros(SLOTS, NHEADS, DSTATE, DIM, dtype=torch.float16).transpose(2, 3)), ValueError, "state: expected stride(3) == 1"),
        (dict(x=torch.zeros(BATCH, DIM, NHEADS, dtype=torch.bfloat16).transpose(1, 2)), ValueError, "x: expected stride(2) == 1"),
        (dict(B=torch.zeros(BATCH, DSTATE, NGROUPS, dtype=torch.bfloat16).transpose(1, 2)), ValueError, "B: expected stride(2) == 1"),
        # Devices: CPU tensors are refused (last check).
        (dict(), ValueError, "state: expected a CUDA tensor"),
    ]
    return cases


@pytest.mark.parametrize("changes,exc,fragment", _bad_cases(), ids=lambda v: None)
def test_argument_checks(changes, exc, fragment):
    with pytest.raises(exc) as info:
        call(**changes)
    assert fragment in str(info.value), str(info.value)


def test_sr_rule_is_one_keyword_only_argument_after_flashinfers():
    """The signature is FlashInfer 0.7.2's plus a keyword-only ``sr_rule`` at the end."""
    import inspect

    params = list(inspect.signature(mamba_ssu.selective_state_update).parameters.values())
    last = params[-1]
    assert last.name == "sr_rule" and last.kind is inspect.Parameter.KEYWORD_ONLY
    assert last.default == "0.7.2"
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params[:-1])
    assert [p.name for p in params[-4:-1]] == ["cu_seqlens", "num_accepted_tokens", "backend"]


def test_sr_rule_on_meta():
    """Both rules trace through the op (its schema's sr_rule), with and without a seed; the op
    takes sr_rule positionally and by its default."""
    for rule in ("0.7.2", "0.7.4"):
        kw = make("meta")
        assert mamba_ssu.selective_state_update(**kw, sr_rule=rule).shape == (BATCH, NHEADS, DIM)
        kw["rand_seed"] = None
        assert mamba_ssu.selective_state_update(**kw, sr_rule=rule).shape == (BATCH, NHEADS, DIM)
    args = _op_args(make("meta"))
    for extra in ((), (0,), (1,)):
        result = torch.library.opcheck(torch.ops.mamba_ssu.selective_state_update.default, args + extra)
        assert all(v == "SUCCESS" for v in result.values()), result


def test_rand_seed_on_cpu_refused_with_meta_state():
    kw = make("meta")
    kw["rand_seed"] = torch.zeros(1, dtype=torch.int64)
    with pytest.raises(ValueError, match="rand_seed: expected a CUDA tensor"):
        mamba_ssu.selective_state_update(**kw)


def test_exclusive_write_modes():
    kw = make()
    kw["dst_state_batch_indices"] = kw["state_batch_indices"]
    kw["intermediate_states_buffer"] = torch.zeros(1)
    with pytest.raises((ValueError, NotImplementedError), match="intermediate_states_buffer"):
        mamba_ssu.selective_state_update(**kw)


def test_seed_prefetcher_arguments():
    with pytest.raises(ValueError, match="num_layers"):
        mamba_ssu.SeedPrefetcher(0)
    with pytest.raises(ValueError, match="num_layers"):
        mamba_ssu.SeedPrefetcher(mamba_ssu.MAX_SEEDS_PER_DRAW + 1)
    with pytest.raises(TypeError, match="num_layers"):
        mamba_ssu.SeedPrefetcher(True)
    with pytest.raises(TypeError, match="num_layers"):
        mamba_ssu.SeedPrefetcher("40")
    with pytest.raises(ValueError, match="CUDA device"):
        mamba_ssu.SeedPrefetcher(40, "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_no_gpu_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no CUDA device"):
        mamba_ssu.SeedPrefetcher(40)
    with pytest.raises(ValueError, match="device"):
        mamba_ssu._C.SeedPrefetcher(40, 0)


def test_draw_seeds_checks():
    with pytest.raises(TypeError, match="int64"):
        mamba_ssu.draw_seeds(torch.empty(4, dtype=torch.int32, device="meta"))
    with pytest.raises(ValueError, match="CUDA tensor"):
        mamba_ssu._C.draw_seeds(torch.empty(4, dtype=torch.int64))
    with pytest.raises(ValueError, match="1 dimensions"):
        mamba_ssu._C.draw_seeds(torch.empty(2, 2, dtype=torch.int64))
    # Traced through the fake implementation.
    mamba_ssu.draw_seeds(torch.empty(40, dtype=torch.int64, device="meta"))
