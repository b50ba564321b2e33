"""CPU tests of the mamba_ssu package (CI, no GPU): import, op schemas, opcheck and
torch.compile tracing through the fake implementations (meta tensors, whose fake implementation
runs the crate's C check), what the Python layer itself decides (names, the seed's kind, out),
and the exception class of each kind of rejection, through the front door, with the argument
named first (the rules themselves are the C contract's: src/contract_tests.rs tests them at the C
level; test_cpu_contract.py checks that the front door adds and drops none)."""

import inspect

import pytest
import torch

import mamba_ssu
from calls import check, op_args, outcome, to_meta

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
        # On CPU tensors no seed by default: the call then reaches the state's device check.
        rand_seed=torch.zeros(1, dtype=torch.int64, device="meta") if device == "meta" else None,
        philox_rounds=10,
    )


def test_import_and_version():
    assert mamba_ssu.__version__ == "0.1.0"
    assert mamba_ssu.MAX_SEEDS_PER_DRAW == 1 << 24
    for name in mamba_ssu.__all__:
        assert hasattr(mamba_ssu, name), name
    assert callable(mamba_ssu.selective_state_update) and callable(mamba_ssu.counter_seeds)


def test_op_schemas():
    """One SSU op with FlashInfer's whole argument list (both forms) plus sr_rule; it mutates
    state, out and the intermediate buffer."""
    s = str(torch.ops.mamba_ssu.selective_state_update.default._schema)
    assert s == (
        "mamba_ssu::selective_state_update(Tensor(a!) state, Tensor x, Tensor dt, Tensor A, "
        "Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? dt_bias, bool dt_softplus, "
        "Tensor? state_batch_indices, int pad_slot_id, Tensor? state_scale, Tensor(b!) out, "
        "bool disable_state_update, Tensor(c!)? intermediate_states_buffer, "
        "Tensor? intermediate_state_indices, Tensor? intermediate_state_scales, "
        "Tensor? rand_seed, int philox_rounds, int cache_steps, int algorithm, "
        "Tensor? dst_state_batch_indices, Tensor? cu_seqlens, Tensor? num_accepted_tokens, "
        "int sr_rule=0) -> ()"
    )
    assert not hasattr(torch.ops.mamba_ssu, "selective_state_update_mtp")
    assert str(torch.ops.mamba_ssu.draw_seeds.default._schema) == "mamba_ssu::draw_seeds(Tensor(a!) out) -> ()"
    assert (str(torch.ops.mamba_ssu.counter_seeds.default._schema)
            == "mamba_ssu::counter_seeds(Tensor(a!) counter, int n, Tensor(b!) out) -> ()")


def test_opcheck_selective_state_update():
    args = op_args(**make("meta"))
    for extra in ((), (1,)):  # sr_rule by its default and positionally
        result = torch.library.opcheck(torch.ops.mamba_ssu.selective_state_update.default, args[:-1] + extra)
        assert all(v == "SUCCESS" for v in result.values()), result


def test_opcheck_seed_ops():
    out = torch.empty(40, dtype=torch.int64, device="meta")
    result = torch.library.opcheck(torch.ops.mamba_ssu.draw_seeds.default, (out,))
    assert all(v == "SUCCESS" for v in result.values()), result
    counter = torch.zeros(1, dtype=torch.int64, device="meta")
    result = torch.library.opcheck(torch.ops.mamba_ssu.counter_seeds.default, (counter, 40, out))
    assert all(v == "SUCCESS" for v in result.values()), result


def _compile(fn):
    seen = []

    def backend(gm, example_inputs):
        seen.append(str(gm.graph))
        from torch._dynamo.backends.debugging import aot_eager

        return aot_eager(gm, example_inputs)

    return torch.compile(fn, backend=backend, fullgraph=True), seen


def test_torch_compile_traces_the_op():
    """torch.compile(backend="aot_eager", fullgraph=True) traces selective_state_update through
    its fake implementation: one graph, holding the mamba_ssu op."""

    def step(state, x, dt, A, B, C, D, idx, seed):
        out = mamba_ssu.selective_state_update(
            state, x, dt, A, B, C, D, dt_bias=D, dt_softplus=True, state_batch_indices=idx,
            pad_slot_id=0, rand_seed=seed, philox_rounds=5,
        )
        return out * 2

    kw = make("meta")
    compiled, seen = _compile(step)
    out = compiled(kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"],
                   kw["state_batch_indices"], kw["rand_seed"])
    assert out.shape == (BATCH, NHEADS, DIM) and out.device.type == "meta"
    assert len(seen) == 1 and "mamba_ssu.selective_state_update" in seen[0], seen


def test_torch_compile_with_dynamic_shapes():
    """With symbolic sizes (dynamic=True) the fake implementation cannot run the C check: it
    lets tracing through (the kernel checks every call), for every batch size."""

    def step(state, x, dt, A, B, C, D, idx, seed):
        out = mamba_ssu.selective_state_update(
            state, x, dt, A, B, C, D, dt_bias=D, dt_softplus=True, state_batch_indices=idx,
            pad_slot_id=0, rand_seed=seed, philox_rounds=5,
        )
        return out * 2

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True, dynamic=True)
    for batch in (3, 5):
        kw = make("meta", batch=batch)
        out = compiled(kw["state"], kw["x"], kw["dt"], kw["A"], kw["B"], kw["C"], kw["D"],
                       kw["state_batch_indices"], kw["rand_seed"])
        assert out.shape == (batch, NHEADS, DIM)


@pytest.mark.parametrize(
    "changes,exc,argument",
    [
        (dict(philox_rounds=0), ValueError, "philox_rounds"),
        (dict(B=torch.zeros(BATCH, NGROUPS, DSTATE, dtype=torch.float16, device="meta")), RuntimeError, "B"),
        (dict(make("meta", dim=80), algorithm="horizontal"), RuntimeError, "algorithm"),
    ],
)
def test_tracing_rejects_what_the_kernel_would(changes, exc, argument):
    """The fake implementation runs the C check: torch.compile's tracing of a call the contract
    rejects raises the class and message that check raises (wrapped in torch's tracing error,
    whose chain of causes holds it)."""
    kw = make("meta")
    kw.update(changes)
    want = outcome(lambda: check(**kw))
    assert want[0] is exc and want[1].startswith(f"{argument}: "), want

    def step(**kw):
        return mamba_ssu.selective_state_update(**kw) * 2

    compiled, _ = _compile(step)
    with pytest.raises(Exception) as info:
        compiled(**kw)
    chain, e = [], info.value
    while e is not None:
        chain.append((type(e), str(e)))
        e = e.__cause__ or e.__context__
    assert want in chain, chain


def test_out_is_allocated_like_x_on_meta():
    """out, when not given, is torch.empty_like(x) as passed (the C contract reads it with x's
    normalisation: a 2-D single-head x and its 2-D out); a given out is returned."""
    kw = make("meta", nheads=1)
    kw2 = dict(kw)
    kw2["state"] = kw["state"][:, 0]
    kw2["x"] = kw["x"][:, 0]
    kw2["dt"] = kw["dt"][:, 0]
    kw2["A"] = kw["A"][0]
    kw2["B"] = torch.zeros(BATCH, DSTATE, dtype=torch.bfloat16, device="meta")
    kw2["C"] = torch.zeros(BATCH, DSTATE, dtype=torch.bfloat16, device="meta")
    kw2["D"] = kw["D"][0]
    kw2["dt_bias"] = kw["dt_bias"][0]
    kw2["state_batch_indices"] = kw["state_batch_indices"][:, 0]
    out = mamba_ssu.selective_state_update(**kw2)
    assert out.shape == (BATCH, DIM) and out.dtype == torch.bfloat16
    given = torch.empty(BATCH, 1, DIM, dtype=torch.bfloat16, device="meta")
    assert mamba_ssu.selective_state_update(**kw2, out=given) is given
    assert check(**kw2)["form"] == "single" and check(**kw2)["nheads"] == 1


def test_sr_rule_is_one_keyword_only_argument_after_flashinfers():
    """The signature is FlashInfer 0.7.2's plus a keyword-only ``sr_rule`` at the end."""
    params = list(inspect.signature(mamba_ssu.selective_state_update).parameters.values())
    last = params[-1]
    assert last.name == "sr_rule" and last.kind is inspect.Parameter.KEYWORD_ONLY
    assert last.default == "0.7.2"
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params[:-1])
    assert [p.name for p in params[-4:-1]] == ["cu_seqlens", "num_accepted_tokens", "backend"]


def test_sr_rule_on_meta():
    """Both rules trace through the op, with and without a seed."""
    for rule in ("0.7.2", "0.7.4"):
        kw = make("meta")
        assert mamba_ssu.selective_state_update(**kw, sr_rule=rule).shape == (BATCH, NHEADS, DIM)
        kw["rand_seed"] = None
        assert mamba_ssu.selective_state_update(**kw, sr_rule=rule).shape == (BATCH, NHEADS, DIM)


# ---------------------------------------------------------------------------------------------
# What the Python layer decides: names, the seed's kind
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes,exc,fragment",
    [
        (dict(algorithm="fastest"), ValueError, "algorithm: expected"),
        (dict(algorithm=1), ValueError, "algorithm: expected"),
        (dict(backend="triton"), ValueError, "backend: expected"),
        (dict(sr_rule="0.7.3"), ValueError, "sr_rule: expected"),
        (dict(sr_rule=1), ValueError, "sr_rule: expected"),
        (dict(rand_seed=42), TypeError, "rand_seed: expected"),
    ],
)
def test_python_layer(changes, exc, fragment):
    kw = make()
    kw.update(changes)
    with pytest.raises(exc) as info:
        mamba_ssu.selective_state_update(**kw)
    assert str(info.value).startswith(fragment), str(info.value)


def test_every_flashinfer_backend_name_runs_the_crate():
    """FlashInfer's "cake" backend (opt-in, sm100) falls back to FlashInfer's kernels on every
    other GPU: like "auto" and "flashinfer", it runs the crate's kernels (CPU: the device check)."""
    for backend in ("auto", "flashinfer", "cake"):
        got = _front_door(dict(make(), backend=backend))
        assert got == (RuntimeError, "state: expected a CUDA tensor, got one on cpu"), (backend, got)


# ---------------------------------------------------------------------------------------------
# One rejection per exception class, through the front door: the class FlashInfer raises, the
# argument named first, and (for the C contract's rejections) exactly what its check says.
# ---------------------------------------------------------------------------------------------


def _front_door(kw):
    return outcome(lambda: mamba_ssu.selective_state_update(**kw))


@pytest.mark.parametrize(
    "changes,exc,argument",
    [
        # INVALID_ARGUMENT (FlashInfer's C++ checks): RuntimeError.
        (dict(B=torch.zeros(BATCH, NGROUPS, DSTATE, dtype=torch.float16)), RuntimeError, "B"),
        (dict(A=torch.zeros(NHEADS, DIM, DSTATE)), RuntimeError, "A"),
        # INVALID_VALUE (FlashInfer's Python checks, before any tensor rule): ValueError.
        (dict(rand_seed=torch.zeros(1, dtype=torch.int64), philox_rounds=0), ValueError, "philox_rounds"),
        (dict(rand_seed=torch.zeros(1, dtype=torch.int64), philox_rounds=-3,
              x=torch.zeros(BATCH, NHEADS + 1, DIM, dtype=torch.bfloat16)), ValueError, "philox_rounds"),
        (dict(rand_seed=torch.zeros(1, dtype=torch.int64), state_scale=torch.ones(SLOTS, NHEADS, DIM)),
         ValueError, "state_scale"),
        (dict(intermediate_states_buffer=torch.zeros(BATCH, 1, NHEADS, DIM, DSTATE, dtype=torch.float16),
              dst_state_batch_indices=torch.zeros(BATCH, dtype=torch.int32)), ValueError, "dst_state_batch_indices"),
        # UNSUPPORTED: NotImplementedError.
        (dict(state_scale=torch.ones(SLOTS, NHEADS, DIM)), NotImplementedError, "state_scale"),
        # HORIZONTAL: FlashInfer's horizontal launcher refuses a block-scaled state and head dims
        # that are not a multiple of 64 up to 256 (RuntimeError).
        (dict(algorithm="horizontal", state_scale=torch.ones(SLOTS, NHEADS, DIM)), RuntimeError,
         "algorithm"),
        (dict(make(dim=80), algorithm="horizontal"), RuntimeError, "algorithm"),
        # SR of a state that is not fp16: FlashInfer's build fails (RuntimeError).
        (dict(rand_seed=torch.zeros(1, dtype=torch.int64), state=torch.zeros(SLOTS, NHEADS, DIM, DSTATE)),
         RuntimeError, "philox_rounds"),
    ],
)
def test_each_c_status_raises_its_class(changes, exc, argument):
    """Through the front door: on CPU tensors where the call has no seed (a CPU seed is refused
    first, as FlashInfer's Python checks its device before its rounds), and on meta tensors (the
    op's fake implementation, which takes a seed on any device) always."""
    kw = make()
    kw.update(changes)
    want = outcome(lambda: check(**kw))
    assert want[0] is exc and want[1].startswith(f"{argument}: "), want
    if kw.get("rand_seed") is None:
        assert _front_door(kw) == want
    meta = {k: to_meta(v) for k, v in kw.items()}
    assert _front_door(meta) == want


def test_the_status_table():
    """The one table from a C status to its Python class (the extension's; every C failure and
    every check of the extension's own raises through it): each status raises its class, and an
    unknown status is a RuntimeError."""
    table = mamba_ssu._C.status_classes()
    assert table == {
        1: RuntimeError,  # MAMBA_SSU_ERROR_INVALID_ARGUMENT: FlashInfer's C++ checks
        2: NotImplementedError,  # MAMBA_SSU_ERROR_UNSUPPORTED: not served by the crate
        3: RuntimeError,  # MAMBA_SSU_ERROR_CUDA
        4: RuntimeError,  # MAMBA_SSU_ERROR_SCOPE
        5: ValueError,  # MAMBA_SSU_ERROR_INVALID_VALUE: FlashInfer's Python checks
    }
    for status, cls in list(table.items()) + [(99, RuntimeError)]:
        with pytest.raises(Exception) as info:
            mamba_ssu._C.raise_status(status, f"x: status {status}")
        assert type(info.value) is cls and str(info.value).startswith(f"x: status {status}"), info.value


@pytest.mark.parametrize(
    "changes,exc,message",
    [
        # Devices (FlashInfer's C++ checks): RuntimeError.
        (dict(), RuntimeError, "state: expected a CUDA tensor, got one on cpu"),
        # The seed tensor (FlashInfer's Python checks): ValueError.
        (dict(rand_seed=torch.zeros(1, dtype=torch.int64)), ValueError, "rand_seed: expected a CUDA tensor, got one on cpu"),
        (dict(rand_seed=torch.zeros(2, dtype=torch.int64)), ValueError, "rand_seed: expected a single-element tensor, got numel=2"),
        (dict(rand_seed=torch.zeros(1, dtype=torch.int32)), ValueError, "rand_seed: expected dtype int64, got Int"),
        # A 0-dimensional tensor cannot be passed (rank 0 means absent in the contract).
        (dict(D=torch.zeros(())), RuntimeError, "D: got a 0-dimensional tensor"),
    ],
)
def test_torch_side_checks(changes, exc, message):
    """What only torch sees: the devices (after the C check: a call the contract accepts), the
    seed tensor's element count and dtype (before it, as FlashInfer's Python checks them)."""
    kw = make()
    kw.update(changes)
    got = _front_door(kw)
    assert got[0] is exc and got[1].startswith(message), got


def test_the_c_rejection_comes_before_the_device_check():
    """A CPU call the contract rejects raises the contract's error, not the device's."""
    kw = make()
    kw["x"] = torch.zeros(BATCH, NHEADS + 1, DIM, dtype=torch.bfloat16)
    got = _front_door(kw)
    assert got[0] is RuntimeError and got[1].startswith("x: expected size(1) == nheads (4), got 5"), got
    assert got == outcome(lambda: check(**kw))


def test_a_seed_of_any_shape_with_one_element():
    """FlashInfer counts the seed tensor's elements: a 0-dimensional or (1, 1) int64 seed is one
    seed (the call reaches the device check)."""
    for seed in (torch.zeros((), dtype=torch.int64), torch.zeros(1, 1, dtype=torch.int64)):
        kw = make()
        kw.update(rand_seed=seed)
        assert check(**kw)["stochastic_rounding"] is True
        got = _front_door(kw)
        assert got[0] is ValueError and got[1].startswith("rand_seed: expected a CUDA tensor"), got


def test_check_reports_the_problem():
    p = check(**make())
    assert p == dict(form="single", varlen=False, batch=BATCH, ntokens=1, total_tokens=BATCH,
                     nheads=NHEADS, dim=DIM, dstate=DSTATE, ngroups=NGROUPS,
                     state_cache_size=SLOTS, cache_steps=0, intermediate_cache_size=0,
                     stochastic_rounding=False)
    meta = {k: to_meta(v) for k, v in make().items()}
    assert check(**meta) == p


# ---------------------------------------------------------------------------------------------
# Seeds: prefetcher arguments, draw_seeds, counter_seeds
# ---------------------------------------------------------------------------------------------


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
    with pytest.raises(ValueError, match="1 dimensions"):
        mamba_ssu.draw_seeds(torch.empty(2, 2, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="elements"):
        mamba_ssu.draw_seeds(torch.empty(0, dtype=torch.int64, device="meta"))
    with pytest.raises(RuntimeError, match="out: expected a CUDA tensor"):
        mamba_ssu.draw_seeds(torch.empty(4, dtype=torch.int64))
    with pytest.raises(TypeError, match="out"):
        mamba_ssu.draw_seeds([0, 0])
    # Traced through the fake implementation.
    out = torch.empty(40, dtype=torch.int64, device="meta")
    assert mamba_ssu.draw_seeds(out) is out


def test_counter_seeds_checks():
    i64 = dict(dtype=torch.int64)
    meta = dict(device="meta", **i64)
    out = mamba_ssu.counter_seeds(torch.zeros(1, **meta), 40)
    assert out.shape == (40,) and out.dtype == torch.int64 and out.device.type == "meta"
    given = torch.empty(8, **meta)
    assert mamba_ssu.counter_seeds(torch.zeros(1, **meta), 8, out=given) is given
    cases = [
        ((torch.zeros(2, **meta), 4), ValueError, "counter: expected a single-element tensor"),
        ((torch.zeros(1, dtype=torch.int32, device="meta"), 4), ValueError, "counter: expected dtype int64"),
        ((torch.zeros(1, **meta), 4, torch.empty(5, **meta)), ValueError, "out: expected n = 4 contiguous elements, got numel=5"),
        ((torch.zeros(1, **meta), 4, torch.empty(4, 2, **meta)[:, 0]), ValueError, "(not contiguous)"),
        ((torch.zeros(1, **meta), 4, torch.empty(4, dtype=torch.int32, device="meta")), ValueError, "out: expected dtype int64"),
        ((torch.zeros(1, **i64), 4), RuntimeError, "counter: expected a CUDA tensor"),
        (("counter", 4), TypeError, "counter"),
    ]
    for args, exc, fragment in cases:
        with pytest.raises(exc) as info:
            mamba_ssu.counter_seeds(*args)
        assert fragment in str(info.value), (args, str(info.value))


def test_check_options_runs_the_c_check_on_options_alone():
    """check_options: the verdict of the C check for options whatever the shapes (meta tensors,
    nothing launched), with the classes selective_state_update raises."""
    mamba_ssu.check_options()
    mamba_ssu.check_options(algorithm="vertical", philox_rounds=5, sr_rule="0.7.4")
    mamba_ssu.check_options(philox_rounds=None, multi_token=True)
    for dim in (64, 128, 192, 256):
        mamba_ssu.check_options(algorithm="horizontal", head_dim=dim)
    for dim in (80, 96, 320):
        with pytest.raises(RuntimeError, match="^algorithm: HORIZONTAL needs a head dim"):
            mamba_ssu.check_options(algorithm="horizontal", head_dim=dim)
    with pytest.raises(RuntimeError, match="^algorithm: "):
        mamba_ssu.check_options(algorithm="horizontal", multi_token=True)
    with pytest.raises(ValueError, match="^philox_rounds: "):
        mamba_ssu.check_options(philox_rounds=0)
    with pytest.raises(RuntimeError, match="^algorithm: "):
        mamba_ssu.check_options(algorithm="vertical", multi_token=True)
    # Any count >= 1 (FlashInfer has no upper bound).
    for rounds in (1, 3, 7, 11, 12, 64):
        mamba_ssu.check_options(philox_rounds=rounds)
        mamba_ssu.check_options(philox_rounds=rounds, multi_token=True)
    with pytest.raises(ValueError, match="^sr_rule: "):
        mamba_ssu.check_options(sr_rule="0.7.3")


# ---------------------------------------------------------------------------------------------
# Shapes FlashInfer's sm_90 module takes (docs/flashinfer-ssu.md, "Shapes FlashInfer takes on
# sm_90"): a dstate it takes but the crate does not serve yet is NotImplementedError naming
# `dstate`; one its build refuses (a RuntimeError there, "Ninja build failed") is RuntimeError;
# heads per group outside 1, 2, 4, ..., 64 on the multi-token path (FlashInfer's RuntimeError)
# are served.
# ---------------------------------------------------------------------------------------------


def _flashinfer_takes_dstate(dstate, state_dtype):
    """The dstate rule of FlashInfer 0.7.2.post1's and 0.7.4's sm_90 module (restated)."""
    if state_dtype == torch.float32:
        return dstate >= 32 and dstate % 16 == 0
    return dstate >= 64 and dstate % 32 == 0


def _with_dstate(kw, dstate, multi):
    """kw (single token or multi token) with every dstate-sized tensor resized."""
    kw = dict(kw)
    s = kw["state"]
    kw["state"] = torch.zeros(*s.shape[:-1], dstate, dtype=s.dtype, device=s.device)
    nh, dim = s.shape[1], s.shape[2]
    kw["A"] = torch.zeros(nh, dtype=torch.float32, device=s.device)[:, None, None].expand(-1, dim, dstate)
    for name in ("B", "C"):
        t = kw[name]
        kw[name] = torch.zeros(*t.shape[:-1], dstate, dtype=t.dtype, device=t.device)
    return kw


@pytest.mark.parametrize("state_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dstate", [16, 32, 48, 80, 96, 100, 112, 160, 192, 224, 272, 288, 512, 528, 544])
@pytest.mark.parametrize("multi", [False, True])
def test_dstates_flashinfer_takes_are_not_implemented_and_others_runtime_errors(state_dtype, dstate, multi):
    """Every dstate FlashInfer's sm_90 module takes that the crate does not serve raises
    NotImplementedError, every other RuntimeError; the multiples of 32 from 64 to 512 (96, 160,
    192, 224 and 288 among them) are served on both paths, with an fp32 state also the multiples
    of 16 from 32 to 512 but 112."""
    from test_cpu_mtp import make_mtp

    kw = make_mtp() if multi else make()
    s = kw["state"]
    kw["state"] = s.to(state_dtype)
    kw = _with_dstate(kw, dstate, multi)
    kw["rand_seed"] = None  # no SR: every state dtype reaches the dstate rule alike
    if (64 <= dstate <= 512 and dstate % 32 == 0) or (
        state_dtype == torch.float32 and 32 <= dstate <= 512 and dstate % 16 == 0 and dstate != 112
    ):
        # Served (single token: the simple and horizontal mappings, vertical up to 256; multi
        # token: the run-time kernel).
        assert outcome(lambda: check(**kw))[0] == "ok"
        return
    want = NotImplementedError if _flashinfer_takes_dstate(dstate, state_dtype) else RuntimeError
    got = outcome(lambda: check(**kw))
    assert got[0] is want and got[1].startswith(("dstate: ", "state: dstate: ")), (dstate, state_dtype, got)
    assert _front_door(kw) == got
    if want is NotImplementedError and dstate == 112:
        assert "112 with an fp32 state is not served" in got[1], got
    elif want is NotImplementedError:
        assert "FlashInfer's sm_90 kernels take it" in got[1], got


@pytest.mark.parametrize("state_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dstate", [288, 512])
def test_vertical_above_dstate_256_raises_flashinfers_runtime_error(state_dtype, dstate):
    """Above dstate 256 FlashInfer's launcher refuses the vertical mapping (its kernel's TMA box
    holds at most 256 elements: RuntimeError, recorded on an H100) and runs the simple and
    horizontal ones, as the crate does."""
    kw = _with_dstate(make(), dstate, False)
    kw["state"] = kw["state"].to(state_dtype)
    kw["rand_seed"] = None
    for algorithm, want in (("vertical", RuntimeError), ("simple", "ok"), ("horizontal", "ok")):
        kw["algorithm"] = algorithm
        got = outcome(lambda: check(**kw))
        if want == "ok":
            assert got[0] == "ok", (algorithm, got)
            continue
        assert got[0] is want and got[1].startswith(("dstate: ", "state: dstate: ")), (algorithm, got)
        assert _front_door(kw) == got
        assert "VERTICAL takes at most 256" in got[1], got


@pytest.mark.parametrize("multi", [False, True])
@pytest.mark.parametrize("state_dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fp32_inputs_above_dstate_256_are_taken(multi, state_dtype):
    """Above dstate 256 fp32 inputs are served over every 2-byte and fp32 state, single and
    multi token, as FlashInfer's module takes them (the int16 state there:
    test_int16_state_above_dstate_256)."""
    from test_cpu_mtp import make_mtp

    kw = _with_dstate(make_mtp() if multi else make(), 288, multi)
    kw["rand_seed"] = None
    kw["state"] = kw["state"].to(state_dtype)
    if kw.get("intermediate_states_buffer") is not None:
        kw["intermediate_states_buffer"] = kw["intermediate_states_buffer"].to(state_dtype)
    for name in ("x", "B", "C", "z", "out"):
        if kw.get(name) is not None:
            kw[name] = kw[name].float()
    got = outcome(lambda: check(**kw))
    assert got[0] == "ok", got


@pytest.mark.parametrize("dstate", [288, 384, 480, 512])
@pytest.mark.parametrize("multi", [False, True])
def test_int16_state_above_dstate_256(dstate, multi):
    """An int16 state with its decode scales above dstate 256: multi token at every dstate up
    to 512 (FlashInfer's 512-column tile), single token at 512 only; at 288 to 480 FlashInfer's
    simple kernel writes past its lanes' register array (an undefined result), so the
    single-token call is NotImplementedError naming the state (its dstate), through the op as
    through the check."""
    from test_cpu_mtp import make_mtp

    kw = _with_dstate(make_mtp() if multi else make(), dstate, multi)
    kw["rand_seed"] = None
    s = kw["state"]
    kw["state"] = s.to(torch.int16)
    kw["state_scale"] = torch.ones(s.shape[:3], dtype=torch.float32)
    got = outcome(lambda: check(**kw))
    if multi or dstate == 512:
        assert got[0] == "ok", got
        return
    assert got[0] is NotImplementedError, got
    assert got[1].startswith("state: dstate: a single-token I16 state above 256 is served at 512 only"), got
    assert _front_door(kw) == got


def test_multi_token_heads_per_group_outside_flashinfers_set_is_served():
    """FlashInfer's multi-token kernel is instantiated for 1, 2, 4, ..., 64 heads per group
    (its launcher raises for others); the crate serves every divisor (e.g. Nemotron 3 Nano 4B's
    12 heads per group): a superset of FlashInfer's calls, documented in docs/flashinfer-ssu.md."""
    from test_cpu_mtp import make_mtp

    def with_groups(kw, ngroups):
        kw = dict(kw)
        for name in ("B", "C"):
            t = kw[name]
            kw[name] = torch.zeros(*t.shape[:-2], ngroups, t.shape[-1], dtype=t.dtype)
        kw["rand_seed"] = None
        return kw

    assert outcome(lambda: check(**with_groups(make_mtp(), 1)))[0] == "ok"
    kw = make_mtp()
    nh, dim, ds = 12, kw["state"].shape[2], kw["state"].shape[3]
    kw["state"] = torch.zeros(kw["state"].shape[0], nh, dim, ds, dtype=kw["state"].dtype)
    kw["x"] = torch.zeros(*kw["x"].shape[:2], nh, dim, dtype=kw["x"].dtype)
    kw["dt"] = torch.zeros(*kw["x"].shape[:2], nh, dtype=kw["x"].dtype)[..., None].expand(-1, -1, -1, dim)
    kw["A"] = torch.zeros(nh)[:, None, None].expand(-1, dim, ds)
    kw["D"] = torch.zeros(nh, dtype=torch.bfloat16)[:, None].expand(-1, dim)
    kw["dt_bias"] = torch.zeros(nh, dtype=torch.bfloat16)[:, None].expand(-1, dim)
    kw = with_groups(kw, 4)
    assert outcome(lambda: check(**kw))[0] == "ok"


@pytest.mark.parametrize("scale_shape", [(SLOTS, NHEADS, DIM), (SLOTS, NHEADS, DIM, 1), None])
def test_int16_state_is_taken_on_the_single_token_path(scale_shape):
    """FlashInfer's int16 state: with decode scales (3-D, or 4-D with the trailing 1 its Python
    layer squeezes) or without, the single-token and the multi-token call pass the check (on
    meta tensors through the op's fake implementation too); a scale of another dtype and
    "horizontal" with an unscaled int16 state are NotImplementedError, a mis-shaped scale and
    "horizontal" with scales a RuntimeError, a seed with scales a ValueError, all naming the
    argument."""
    kw = make(device="meta")
    kw["rand_seed"] = None
    kw["state"] = torch.zeros(SLOTS, NHEADS, DIM, DSTATE, dtype=torch.int16, device="meta")
    if scale_shape is not None:
        kw["state_scale"] = torch.ones(scale_shape, dtype=torch.float32, device="meta")
    assert outcome(lambda: check(**kw))[0] == "ok"
    got = outcome(lambda: mamba_ssu.selective_state_update(**kw))
    assert got[0] == "ok" and got[1].device.type == "meta", got
    multi = dict(kw, cache_steps=2)
    assert outcome(lambda: check(**multi))[0] == "ok"
    cases = [
        (dict(algorithm="horizontal"), RuntimeError if scale_shape else NotImplementedError,
         "algorithm"),
    ]
    if scale_shape is not None:
        cases += [
            (dict(state_scale=kw["state_scale"].to(torch.bfloat16)), NotImplementedError,
             "state_scale"),
            (dict(state_scale=torch.ones(SLOTS, NHEADS, DIM + 1, device="meta")), RuntimeError,
             "state_scale"),
            (dict(rand_seed=torch.zeros(1, dtype=torch.int64, device="meta")), ValueError,
             "state_scale"),
        ]
    for changes, exc, argument in cases:
        bad = dict(kw, **changes)
        want = outcome(lambda: check(**bad))
        assert want[0] is exc and want[1].startswith(f"{argument}: "), (changes, want)
        assert outcome(lambda: mamba_ssu.selective_state_update(**bad)) == want, changes
