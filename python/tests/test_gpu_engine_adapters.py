"""GPU tests of the engine adapters: the calls vLLM 0.33's and sglang 0.5.23's Mamba-2 mixers
make, through ``mamba_ssu.vllm.MambaSSUBackend`` and ``mamba_ssu.sglang.MambaSSUBackend`` with
each seed mode, against the stock path — ``torch.randint(0, 2**32, (1,))`` on the device before
every call (what the engines' FlashInfer backends do with stochastic rounding) and
``mamba_ssu.selective_state_update`` with the arguments those backends hand FlashInfer, written
out here from the engines' code — byte for byte.

The calls (``engines.py``): vLLM's decode step (a (padded batch, 1) int32 index sliced from a
block table, padded rows the null block, x/B/C/dt column slices of the projected rows) and
verify step (varlen x with padded rows, cu_seqlens and num_accepted_tokens of the padded batch,
an int32 (batch, 1 + num_spec) index as read and destination); sglang's decode (1-D int32
index, padded entries -1) and target verify (4-D x, the intermediate state buffer with
disable_state_update). A forward is LAYERS layers, each with its own cache; STEPS forwards run
eagerly, and for the default seed modes the same forwards as replays of one captured
``torch.cuda.graph``. Compared after every step: every layer's whole cache storage (the
padding between slots included), its out rows (NaN where nothing may be written) and the
intermediate buffer; and the generator's offset at the end (one draw per call with stochastic
rounding, none without).
"""

import pytest
import torch

from engines import NUM_SPEC, sglang_decode, sglang_verify, vllm_config, vllm_decode, vllm_verify

LAYERS = 6
STEPS = 3
GEN_SEED, GEN_OFFSET = 31337, 4 * 1009

# (stochastic rounding, the configured rounds, vLLM's --mamba-ssu-algorithm)
VLLM_CONFIGS = {"sr-r0": (True, 0, None), "sr-r5-simple": (True, 5, "simple"),
                "sr-r10-vertical": (True, 10, "vertical"), "nosr": (False, 0, None)}
SGLANG_CONFIGS = {"sr-r0": (True, 0), "sr-r5": (True, 5), "nosr": (False, 0)}
VLLM_SHAPES = {"decode": vllm_decode, "verify": vllm_verify}
SGLANG_SHAPES = {"decode": sglang_decode, "verify": sglang_verify}
MODES = ("stock", "next_seed", "fused")


def _gen(device):
    return torch.cuda.default_generators[device.index]


def _set_generator(device):
    g = _gen(device)
    g.manual_seed(GEN_SEED)
    g.set_offset(GEN_OFFSET)


def _layers(builder, device):
    """LAYERS layers' calls, the same tensors on every invocation (a fixed CUDA generator)."""
    g = torch.Generator(device=device)
    g.manual_seed(2718)
    return [builder(device, g) for _ in range(LAYERS)]


def _snapshot(layer):
    _, kwargs, store = layer
    snap = [store.view(torch.int16).clone(), kwargs["out"].view(torch.int16).clone()]
    if kwargs.get("intermediate_states_buffer") is not None:
        snap.append(kwargs["intermediate_states_buffer"].view(torch.int16).clone())
    return snap


def _vllm_stock_call(cfg):
    """vLLM 0.33's FlashInferSSUBackend.__call__ as the stock path: one torch.randint per call
    with SR; FlashInfer's arguments: pad_slot_id = null_block_id (0), cache_steps = the index
    width with cu_seqlens else 0, philox_rounds = rounds or 10, algorithm = the configured one
    or "auto"."""
    import mamba_ssu

    sr, rounds, algorithm = cfg

    def call(args, kw):
        state, x, dt, A, B, C, D, dt_bias = args
        seed = torch.randint(0, 2**32, (1,), device=state.device) if sr else None
        cu = kw["cu_seqlens"]
        mamba_ssu.selective_state_update(
            state, x, dt, A, B, C, D=D, z=None, dt_bias=dt_bias, dt_softplus=True,
            state_batch_indices=kw["state_batch_indices"],
            dst_state_batch_indices=kw["dst_state_batch_indices"], cu_seqlens=cu,
            num_accepted_tokens=kw["num_accepted_tokens"],
            cache_steps=1 + NUM_SPEC if cu is not None else 0, pad_slot_id=0, out=kw["out"],
            rand_seed=seed, philox_rounds=rounds or 10, algorithm=algorithm or "auto",
        )

    return call


def _sglang_stock_call(cfg):
    """sglang 0.5.23's FlashInferSSUBackend.__call__ as the stock path: one torch.randint per
    call with SR; FlashInfer's arguments: cache_steps None -> 0, philox_rounds = rounds or 10,
    FlashInfer's default algorithm."""
    import mamba_ssu

    sr, rounds = cfg

    def call(args, kw):
        seed = torch.randint(0, 2**32, (1,), device=args[0].device) if sr else None
        kw = dict(kw)
        assert kw.pop("retrieve_parent_token", None) is None
        steps = kw.pop("cache_steps", None)
        mamba_ssu.selective_state_update(*args, **kw, cache_steps=0 if steps is None else steps,
                                         rand_seed=seed, philox_rounds=rounds or 10)

    return call


def _vllm_adapter(cfg, mode):
    from mamba_ssu.vllm import MambaSSUBackend

    sr, rounds, algorithm = cfg
    b = MambaSSUBackend(vllm_config(sr=sr, rounds=rounds, algorithm=algorithm), seed_mode=mode)
    return lambda args, kw: _returns_none(b(*args, **kw))


def _sglang_adapter(cfg, mode):
    from mamba_ssu.sglang import MambaSSUBackend

    sr, rounds = cfg
    b = MambaSSUBackend(enable_stochastic_rounding=sr, cache_philox_rounds=rounds, seed_mode=mode)
    return lambda args, kw: _returns_none(b(*args, **kw))


def _returns_none(ret):
    assert ret is None


def _eager(builder, call, device):
    layers = _layers(builder, device)
    _set_generator(device)
    steps = []
    for _ in range(STEPS):
        for args, kw, _store in layers:
            call(args, kw)
        torch.cuda.synchronize()
        steps.append([_snapshot(layer) for layer in layers])
    return steps, _gen(device).get_offset()


def _graph(builder, call, device):
    """One step captured (after an eager warm-up step), the caches reset, STEPS replays from
    the eager runs' generator state."""
    layers = _layers(builder, device)
    initial = [[t.clone() for t in _snapshot(layer)] for layer in layers]

    def reset():
        for (_, kw, store), snap in zip(layers, initial):
            store.view(torch.int16).copy_(snap[0])
            kw["out"].view(torch.int16).copy_(snap[1])
            if len(snap) > 2:
                kw["intermediate_states_buffer"].view(torch.int16).copy_(snap[2])

    _set_generator(device)
    for args, kw, _store in layers:  # warm-up (allocations outside the capture)
        call(args, kw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args, kw, _store in layers:
            call(args, kw)
    reset()
    _set_generator(device)
    steps = []
    for _ in range(STEPS):
        graph.replay()
        torch.cuda.synchronize()
        steps.append([_snapshot(layer) for layer in layers])
    offset = _gen(device).get_offset()
    del graph
    return steps, offset


def _assert_same(got, want, what):
    (got_steps, got_offset), (want_steps, want_offset) = got, want
    for s in range(STEPS):
        for k in range(LAYERS):
            for i, name in enumerate(("cache", "out", "intermediate buffer")[: len(want_steps[s][k])]):
                assert torch.equal(got_steps[s][k][i], want_steps[s][k][i]), f"{what}: step {s} layer {k} {name}"
    assert got_offset == want_offset, f"{what}: generator offset {got_offset} != {want_offset}"


@pytest.fixture(scope="module")
def stock_runs():
    cache = {}

    def get(engine, shape, cfg_name):
        key = (engine, shape, cfg_name)
        if key not in cache:
            device = torch.device("cuda", torch.cuda.current_device())
            if engine == "vllm":
                call = _vllm_stock_call(VLLM_CONFIGS[cfg_name])
                cache[key] = _eager(VLLM_SHAPES[shape], call, device)
            else:
                call = _sglang_stock_call(SGLANG_CONFIGS[cfg_name])
                cache[key] = _eager(SGLANG_SHAPES[shape], call, device)
        return cache[key]

    return get


def _vllm_cases():
    for shape in VLLM_SHAPES:
        for cfg in VLLM_CONFIGS:
            if shape == "verify" and cfg == "sr-r10-vertical":
                continue  # FlashInfer's multi-token path has one layout below sm_100 (tested on CPU)
            yield shape, cfg


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,cfg", list(_vllm_cases()))
def test_vllm_adapter_equals_stock(gpu, stock_runs, shape, cfg, mode):
    want = stock_runs("vllm", shape, cfg)
    got = _eager(VLLM_SHAPES[shape], _vllm_adapter(VLLM_CONFIGS[cfg], mode), gpu)
    _assert_same(got, want, f"vllm {shape} {cfg} {mode}")
    sr = VLLM_CONFIGS[cfg][0]
    assert want[1] == GEN_OFFSET + (4 * LAYERS * STEPS if sr else 0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", list(SGLANG_SHAPES))
@pytest.mark.parametrize("cfg", list(SGLANG_CONFIGS))
def test_sglang_adapter_equals_stock(gpu, stock_runs, shape, cfg, mode):
    want = stock_runs("sglang", shape, cfg)
    got = _eager(SGLANG_SHAPES[shape], _sglang_adapter(SGLANG_CONFIGS[cfg], mode), gpu)
    _assert_same(got, want, f"sglang {shape} {cfg} {mode}")
    sr = SGLANG_CONFIGS[cfg][0]
    assert want[1] == GEN_OFFSET + (4 * LAYERS * STEPS if sr else 0)


@pytest.mark.parametrize("mode", ("next_seed", "fused"))
@pytest.mark.parametrize("shape", list(VLLM_SHAPES))
def test_vllm_adapter_graph_replays_equal_stock(gpu, stock_runs, shape, mode):
    """vLLM's full decode CUDA graphs: the adapter's calls captured once, each replay equal to
    the eager stock step with the same generator state."""
    want = stock_runs("vllm", shape, "sr-r0")
    got = _graph(VLLM_SHAPES[shape], _vllm_adapter(VLLM_CONFIGS["sr-r0"], mode), gpu)
    _assert_same(got, want, f"vllm graph {shape} {mode}")


@pytest.mark.parametrize("mode", ("next_seed", "fused"))
@pytest.mark.parametrize("shape", list(SGLANG_SHAPES))
def test_sglang_adapter_graph_replays_equal_stock(gpu, stock_runs, shape, mode):
    want = stock_runs("sglang", shape, "sr-r5")
    got = _graph(SGLANG_SHAPES[shape], _sglang_adapter(SGLANG_CONFIGS["sr-r5"], mode), gpu)
    _assert_same(got, want, f"sglang graph {shape} {mode}")


def test_stock_path_is_not_trivial(gpu, stock_runs):
    """The comparisons above can fail: stochastic rounding changes the cache against rounding
    to nearest, the configured rounds and algorithm change it, and every step writes the
    caches (so a backend that dropped the seed, the rounds or the algorithm, or wrote nothing,
    would differ)."""
    sr = stock_runs("vllm", "decode", "sr-r0")[0]
    rn = stock_runs("vllm", "decode", "nosr")[0]
    simple = stock_runs("vllm", "decode", "sr-r5-simple")[0]
    vertical = stock_runs("vllm", "decode", "sr-r10-vertical")[0]
    for a, b in ((sr, rn), (sr, simple), (sr, vertical), (simple, vertical)):
        assert not torch.equal(a[-1][0][0], b[-1][0][0])
    for steps in (sr, stock_runs("vllm", "verify", "sr-r0")[0], stock_runs("sglang", "decode", "sr-r5")[0]):
        assert not torch.equal(steps[0][0][0], steps[1][0][0])
    buf = stock_runs("sglang", "verify", "sr-r5")[0][0][0][2]
    assert buf.any()
