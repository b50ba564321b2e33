"""The front door adds no rule to the C contract and drops none (CPU, no GPU).

Random FlashInfer-shaped calls — every form (single token, one head fewer, fixed length, one
token per sequence by cache_steps, varlen, the intermediate buffer), vLLM's expanded layouts,
random dtypes, sizes, options and seeds — valid and mutated (ranks, sizes, dtypes, strides,
storage offsets, options, seeds, arguments added or removed): ``mamba_ssu.selective_state_update``
on CPU tensors raises exactly what the extension's C check (``_C.check``: mamba_ssu_check on the
same descriptors) raises, same class and message, the argument named first; and where the check
accepts, it fails only at the device check. On meta tensors (the op's fake implementation) it
raises what the check raises and returns out where the check accepts.
"""

import random
import re

import pytest
import torch

import mamba_ssu
from calls import TENSOR_ARGS, check, outcome, to_meta

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
I32, I64 = torch.int32, torch.int64
OTHER_DTYPES = (F32, F16, BF16, I32, I64, torch.float64, torch.int16, torch.uint8, torch.bool)
# What a rejection may name besides FlashInfer's tensors: its options and the seed's fields.
OPTIONS = ("philox_rounds", "sr_rule", "cache_steps", "algorithm", "seed.pointer")
FORMS = ("single", "single_2d", "fixed", "fixed_3d", "varlen", "inter")


def _expand(values, *sizes):
    """A per-head value expanded as vLLM passes it (stride 0 over the trailing sizes)."""
    v = values
    for _ in sizes:
        v = v[..., None]
    return v.expand(*values.shape, *sizes)


def base_call(rng):
    """A random call FlashInfer would take (and, with these sizes, the C contract too)."""
    form = rng.choice(FORMS)
    batch = rng.choice([1, 2, 3])
    nheads = 1 if form == "single_2d" else rng.choice([1, 2, 4])
    dim = rng.choice([8, 16, 64])
    dstate = rng.choice([64, 128])
    ngroups = rng.choice([g for g in (1, 2, 4) if nheads % g == 0])
    T = rng.choice([1, 2, 3])
    sdt = rng.choice([F16, F16, BF16, F32])
    idt = rng.choice([BF16, F16, F32])
    wdt = rng.choice([idt, F32])
    ix = rng.choice([I32, I64])
    slots = batch + rng.choice([0, 2])
    z = lambda *s, dtype=idt: torch.zeros(*s, dtype=dtype)  # noqa: E731

    # state, with vLLM's padded slot stride half of the time.
    pad = rng.choice([0, 64])
    store = z(slots, nheads * dim * dstate + pad, dtype=sdt)
    state = store[:, : nheads * dim * dstate].view(slots, nheads, dim, dstate)
    if form == "single_2d":
        state = state[:, 0]
    if form in ("single", "single_2d"):
        lead, cache_steps = (batch,), 0
    elif form in ("fixed", "inter"):
        lead, cache_steps = (batch, T), (T if form == "inter" else rng.choice([0, T]))
    elif form == "fixed_3d":
        lead, cache_steps, T = (batch,), 1, 1
    else:
        total = rng.choice([batch, batch * T])
        lead, cache_steps = (total,), T
    heads = () if form == "single_2d" else (nheads,)
    kw = dict(
        state=state,
        x=z(*lead, *heads, dim),
        dt=_expand(z(*lead, *heads, dtype=wdt), dim) if heads else _expand(z(*lead, dtype=wdt), dim),
        A=_expand(z(*heads, dtype=F32), dim, dstate) if heads else z(1, dtype=F32).expand(dim, dstate),
        B=z(*lead, *((ngroups,) if heads else ()), dstate),
        C=z(*lead, *((ngroups,) if heads else ()), dstate),
        D=rng.choice([None, _expand(z(*heads, dtype=wdt), dim) if heads else z(1, dtype=wdt).expand(dim)]),
        z=rng.choice([None, z(*lead, *heads, dim)]),
        dt_bias=rng.choice([None, _expand(z(*heads, dtype=wdt), dim) if heads else z(1, dtype=wdt).expand(dim)]),
        dt_softplus=rng.random() < 0.5,
        pad_slot_id=rng.choice([-1, 0, slots - 1]),
        disable_state_update=rng.random() < 0.2,
        cache_steps=cache_steps,
        algorithm=rng.choice(["auto", "simple", "async_horizontal"] + (["vertical"] if form.startswith("single") else [])),
        sr_rule=rng.choice(["0.7.2", "0.7.4"]),
    )
    if rng.random() < 0.5:
        kw["out"] = torch.empty_like(kw["x"])
    if sdt == F16 and rng.random() < 0.6:
        kw["rand_seed"] = torch.zeros(1, dtype=I64)
        kw["philox_rounds"] = rng.choice([rng.randint(1, 10), 12, 16])  # no upper bound
    # FlashInfer's index forms: padded rows (size(0) >= batch), num_accepted_tokens and
    # cu_seqlens with their own dtypes.
    rows = batch + rng.choice([0, 0, 2])
    own = lambda: rng.choice([I32, I64])  # noqa: E731
    if form in ("single", "single_2d"):
        if rng.random() < 0.7:
            kw["state_batch_indices"] = torch.zeros(rows, *rng.choice([(), (1,), (2,)]), dtype=ix)
        if rng.random() < 0.3:
            kw["dst_state_batch_indices"] = torch.zeros(rows, *rng.choice([(), (1,)]), dtype=ix)
    elif form == "inter":
        kw["state_batch_indices"] = torch.zeros(batch, dtype=ix)
        kw["intermediate_states_buffer"] = z(batch, T, nheads, dim, dstate, dtype=sdt)
        if rng.random() < 0.5:
            kw["intermediate_state_indices"] = torch.zeros(batch, dtype=ix)
    else:
        if rng.random() < 0.8:
            kw["state_batch_indices"] = torch.zeros(rows, T + rng.choice([0, 0, 1]), dtype=ix)
            if rng.random() < 0.5:
                kw["num_accepted_tokens"] = torch.ones(rows, dtype=own())
        if rng.random() < 0.5:
            kw["dst_state_batch_indices"] = torch.zeros(rows, *rng.choice([(T,), (T,), ()]), dtype=ix)
        if form == "varlen":
            kw["cu_seqlens"] = torch.zeros(batch + 1, dtype=own())
    return form, kw


def _tensors(kw):
    return [k for k, v in kw.items() if isinstance(v, torch.Tensor)]


def mutate(rng, kw):
    """One random change; returns its description."""
    kind = rng.choice(["rank", "size", "dtype", "stride", "offset", "option", "seed", "argument"])
    names = _tensors(kw)
    name = rng.choice(names)
    t = kw[name]
    if kind == "rank":
        kw[name] = t.unsqueeze(0) if (t.dim() < 2 or rng.random() < 0.5) else t.select(0, 0)
    elif kind == "size":
        if t.dim() == 0:
            return "size (0-d: unchanged)"
        d = rng.randrange(t.dim())
        shape = list(t.shape)
        shape[d] = max(0, shape[d] + rng.choice([-1, 1]))
        kw[name] = torch.zeros(shape, dtype=t.dtype)
        return f"size {name}[{d}] -> {shape[d]}"
    elif kind == "dtype":
        dtype = rng.choice([d for d in OTHER_DTYPES if d != t.dtype])
        kw[name] = torch.empty_strided(t.shape, t.stride(), dtype=dtype)  # never read
        return f"dtype {name} -> {dtype}"
    elif kind == "stride":
        if t.dim() == 0 or t.shape[-1] < 2:
            kw[name] = t.contiguous()
            return f"stride {name}: contiguous"
        if 0 in t.stride():
            kw[name] = t.contiguous()  # an expanded tensor made dense
            return f"stride {name}: materialised"
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        kw[name] = wide[..., ::2]
        return f"stride {name}: last stride 2"
    elif kind == "offset":
        flat = torch.zeros(t.numel() + 1, dtype=t.dtype)
        kw[name] = flat[1:].view(t.shape) if t.numel() else t
        return f"offset {name}: one element"
    elif kind == "option":
        opt = rng.choice(["philox_rounds", "cache_steps", "algorithm", "pad_slot_id", "sr_rule"])
        kw[opt] = {
            "philox_rounds": lambda: rng.choice([-1, 0, 11, 2**33 + 5, 3, 12]),
            "cache_steps": lambda: rng.choice([-1, 0, 1, 2, 5, 17]),
            "algorithm": lambda: rng.choice(["auto", "simple", "vertical", "horizontal", "async_horizontal"]),
            "pad_slot_id": lambda: rng.choice([-(2**40), 0, 7]),
            "sr_rule": lambda: rng.choice(["0.7.2", "0.7.4"]),
        }[opt]()
        return f"option {opt} -> {kw[opt]!r}"
    elif kind == "seed":
        kw["rand_seed"] = rng.choice([
            None, torch.zeros(2, dtype=I64), torch.zeros(1, dtype=I32), torch.zeros((), dtype=I64),
            torch.zeros(1, 1, dtype=I64), torch.zeros(1, dtype=I64),
        ])
        kw["philox_rounds"] = rng.choice([0, 1, 5, 10, 11])
        return f"seed {kw['rand_seed']!r}"
    else:
        opt = rng.choice([
            "state_scale", "intermediate_state_scales", "num_accepted_tokens", "cu_seqlens",
            "intermediate_state_indices", "intermediate_states_buffer", "D", "z", "dt_bias",
            "state_batch_indices", "dst_state_batch_indices",
        ])
        if kw.get(opt) is not None and rng.random() < 0.6:
            kw[opt] = None
            return f"removed {opt}"
        b = kw["x"].shape[0]
        st = kw["state"]
        kw[opt] = rng.choice([
            torch.zeros(b, dtype=I32), torch.zeros(b + 1, dtype=I64), torch.zeros(b, 2, dtype=I32),
            torch.zeros((), dtype=F32), torch.ones(b, 4, 8, dtype=F16),
            # Decode scales shaped for the state (slots, nheads, dim): FlashInfer's state_scale.
            torch.ones(*st.shape[:-1], dtype=F32) if st.dim() >= 2 else torch.ones(b, dtype=F32),
        ])
        return f"added {opt} {tuple(kw[opt].shape)}"
    return f"{kind} {name}"


def _calls(n, seed):
    rng = random.Random(seed)
    for i in range(n):
        form, kw = base_call(rng)
        what = []
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            what.append(mutate(rng, kw))
        yield i, form, what, kw


NAMED = re.compile(r"^([A-Za-z_][A-Za-z_.]*): ")


def _cpu_seed(kw):
    """Whether the call has a CPU seed tensor of one int64 element: the front door refuses its
    device before the C check (FlashInfer's Python checks the seed's device before its rounds
    and its state_scale), so such a call never reaches the check on CPU."""
    s = kw.get("rand_seed")
    return isinstance(s, torch.Tensor) and s.numel() == 1 and s.dtype == I64


def test_front_door_raises_exactly_what_the_c_check_raises():
    counts = {}
    seed_device = (ValueError, "rand_seed: expected a CUDA tensor, got one on cpu")
    for i, form, what, kw in _calls(600, seed=20261202):
        label = f"call {i} ({form}; {what})"
        want = outcome(lambda: check(**kw))
        got = outcome(lambda: mamba_ssu.selective_state_update(**kw))
        if _cpu_seed(kw):
            assert got == seed_device, f"{label}: {got}"
            key = "seed device"
        elif want[0] == "ok":
            assert got == (RuntimeError, "state: expected a CUDA tensor, got one on cpu"), f"{label}: {got}"
            key = "accepted"
        else:
            assert got == want, f"{label}: front door {got}, check {want}"
            m = NAMED.match(want[1])
            assert m and m.group(1) in TENSOR_ARGS + OPTIONS, f"{label}: {want}"
            key = want[0].__name__
        counts[key] = counts.get(key, 0) + 1
    # Not vacuous: accepted calls and every class of rejection occur.
    assert counts.get("accepted", 0) >= 60, counts
    # (A CPU seed is refused before the check: most rejections of seeded calls, and so of the
    # NotImplementedError class, are compared on meta tensors, below.)
    for cls, n in (("RuntimeError", 10), ("ValueError", 10), ("NotImplementedError", 3)):
        assert counts.get(cls, 0) >= n, counts


def test_fake_implementation_raises_exactly_what_the_c_check_raises():
    """The same random calls on meta tensors (same dtypes, sizes, strides, storage offsets) go
    through the op's fake implementation: the check's outcome, and out where it accepts."""
    accepted = 0
    for i, form, what, kw in _calls(200, seed=7):
        meta = {k: to_meta(v) for k, v in kw.items()}
        if isinstance(meta.get("rand_seed"), torch.Tensor):
            meta["rand_seed"] = to_meta(kw["rand_seed"])
        label = f"call {i} ({form}; {what})"
        want = outcome(lambda: check(**kw))
        assert outcome(lambda: check(**meta)) == want, label
        got = outcome(lambda: mamba_ssu.selective_state_update(**meta))
        if want[0] == "ok":
            accepted += 1
            assert isinstance(got[1], torch.Tensor) and got[1].device.type == "meta", f"{label}: {got}"
        else:
            assert got == want, f"{label}: fake {got}, check {want}"
    assert accepted >= 20


@pytest.mark.parametrize("form", FORMS)
def test_every_form_is_generated_valid(form):
    """The generator's unmutated calls of each form pass the C check (so that a mutation is
    what a rejection comes from)."""
    rng = random.Random(FORMS.index(form))
    seen = 0
    for _ in range(300):
        f, kw = base_call(rng)
        if f != form:
            continue
        seen += 1
        assert outcome(lambda: check(**kw))[0] == "ok", (form, outcome(lambda: check(**kw)))
    assert seen > 0
