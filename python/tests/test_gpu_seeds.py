"""GPU tests of the seed paths: next_seed(), the fused SSU and the chained fused forward give
exactly the stock values and generator advance, eagerly and over CUDA-graph replays.

Stock = what vLLM runs today: ``torch.randint(0, 2**32, (1,), device=...)`` before every SSU
call, whose ``rand_seed`` is that tensor. Every comparison is of bytes (state and out) or of
exact integer values; the generator's offset after each run is compared as well.
"""

import contextlib
import random

import pytest
import torch

from engines import vllm_config
from reference import VllmLayer, torch_seed

N = 40  # SR layers per forward (Nemotron-H's Mamba-2 layers)


def _gen(device):
    return torch.cuda.default_generators[device.index]


def _set_state(device, seed, offset):
    g = _gen(device)
    g.manual_seed(seed)
    g.set_offset(offset)


def _stock_seed(device):
    return torch.randint(0, 2**32, (1,), device=device)


def test_next_seed_equals_randint_with_interleaved_rng(gpu):
    """(1) For random generator states: 40 next_seed() values equal 40 torch.randint calls, with
    other torch.rand / randint calls interleaved at random points; the generator ends at the
    same offset; every value equals the CPU formula."""
    import mamba_ssu

    rng = random.Random(1234)
    pf = mamba_ssu.SeedPrefetcher(N, gpu)
    for trial in range(12):
        seed = rng.choice([0, 42, 2**32 - 1, 2**63 + 5, rng.getrandbits(64)])
        offset = 4 * rng.choice([0, 1, 1000, 2**30, rng.getrandbits(40)])
        # Interleaved RNG use: before call k, some other draw (randint of a few elements or a
        # torch.rand large enough to move the offset by more than one batch).
        extra = {k: rng.choice(["randint3", "rand", "rand_big"]) for k in rng.sample(range(N), 5)}
        calls = N + rng.choice([0, 7, 45])  # more calls than N as well

        def run(seed_fn):
            _set_state(gpu, seed, offset)
            vals, others = [], []
            for k in range(calls):
                kind = extra.get(k % N) if k < N or trial % 2 else None
                if kind == "randint3":
                    others.append(torch.randint(0, 100, (3,), device=gpu))
                elif kind == "rand":
                    others.append(torch.rand(5, device=gpu))
                elif kind == "rand_big":
                    others.append(torch.rand(1 << 20, device=gpu))
                vals.append(seed_fn())
            torch.cuda.synchronize()
            return [int(v.item()) for v in vals], others, _gen(gpu).get_offset()

        want, want_others, want_off = run(lambda: _stock_seed(gpu))
        got, got_others, got_off = run(pf.next_seed)
        assert got == want, f"trial {trial}: seed {seed} offset {offset}"
        assert got_off == want_off
        for a, b in zip(got_others, want_others):
            assert torch.equal(a, b), "other RNG users must see the stock stream"
        # The formula, for the calls before the first interleaved RNG use (their offsets are
        # known without replaying torch's other kernels' increments).
        first = min(extra)
        assert got[:first] == [torch_seed(seed, offset + 4 * k) for k in range(first)]
    stats = pf.stats()
    assert stats["batches"] < stats["requested"], stats


def test_next_seed_formula_and_one_batch(gpu):
    """Without interleaved RNG use, N calls are served by ONE batched draw, the values are the
    CPU formula and the offset advances by 4 per call; a new seed or a set_offset redraws."""
    import mamba_ssu

    pf = mamba_ssu.SeedPrefetcher(N, gpu)
    for seed, offset in [(7, 0), (2**64 - 1, 2**62), (123456789, 4 * 977)]:
        _set_state(gpu, seed, offset)
        before = pf.stats()["batches"]
        vals = [int(pf.next_seed().item()) for _ in range(N)]
        assert pf.stats()["batches"] == before + 1
        assert vals == [torch_seed(seed, offset + 4 * k) for k in range(N)]
        assert _gen(gpu).get_offset() == offset + 4 * N
    # The same seed at an offset inside the held batch: served without a draw, still exact.
    _set_state(gpu, 123456789, 4 * 977 + 8)
    before = pf.stats()["batches"]
    v = int(pf.next_seed().item())
    assert v == torch_seed(123456789, 4 * 977 + 8)
    assert pf.stats()["batches"] == before
    # Past the batch: a new draw.
    _set_state(gpu, 123456789, 4 * 977 + 4 * N)
    v = int(pf.next_seed().item())
    assert v == torch_seed(123456789, 4 * 977 + 4 * N)
    assert pf.stats()["batches"] == before + 1


def test_draw_seeds_op(gpu):
    """draw_seeds(out) == n consecutive torch.randint draws, generator advanced by 4n."""
    import mamba_ssu

    _set_state(gpu, 99, 40)
    want = torch.cat([_stock_seed(gpu) for _ in range(33)])
    off = _gen(gpu).get_offset()
    _set_state(gpu, 99, 40)
    got = mamba_ssu.draw_seeds(torch.empty(33, dtype=torch.int64, device=gpu))
    assert torch.equal(got, want) and _gen(gpu).get_offset() == off


def test_next_seed_under_cuda_graph(gpu):
    """Under torch.cuda.graph: 40 next_seed() calls with a torch.rand in between, captured once,
    replayed 3 times: each replay's values equal the stock graph's replay from the same state,
    are fresh (differ between replays), and equal the CPU formula at that replay's offset."""
    import mamba_ssu

    pf = mamba_ssu.SeedPrefetcher(N, gpu)

    def capture(seed_fn):
        sink = torch.zeros(N, dtype=torch.int64, device=gpu)
        noise = torch.zeros(4, device=gpu)
        g = torch.cuda.CUDAGraph()
        _set_state(gpu, 2024, 12)
        with torch.cuda.graph(g):
            for k in range(N):
                if k == 20:
                    noise.copy_(torch.rand(4, device=gpu))
                sink[k : k + 1].copy_(seed_fn())
        return g, sink, noise

    results = {}
    for name, fn in [("stock", lambda: _stock_seed(gpu)), ("next_seed", pf.next_seed)]:
        g, sink, noise = capture(fn)
        _set_state(gpu, 2024, 12)
        reps = []
        for _ in range(3):
            start = _gen(gpu).get_offset()
            g.replay()
            torch.cuda.synchronize()
            reps.append((start, sink.tolist(), noise.clone(), _gen(gpu).get_offset()))
        results[name] = reps
    for (s0, v0, n0, e0), (s1, v1, n1, e1) in zip(results["stock"], results["next_seed"]):
        assert (s0, e0) == (s1, e1)
        assert v0 == v1
        assert torch.equal(n0, n1)
    firsts = [r[1][0] for r in results["next_seed"]]
    assert len(set(firsts)) == 3, "each replay must draw fresh values"
    # Before the interleaved torch.rand the offsets are start + 4k: the CPU formula.
    for start, vals, _, _ in results["next_seed"]:
        assert vals[:20] == [torch_seed(2024, start + 4 * k) for k in range(20)]


MODES = ["stock", "next_seed", "fused", "fused_chained"]


def _forward(layers, mode, pf, rounds, ssu):

    ctx = pf.fused_forward() if mode == "fused_chained" else contextlib.nullcontext()
    with ctx:
        for layer in layers:
            if mode == "stock":
                seed = _stock_seed(layer.state.device)
            elif mode == "next_seed":
                seed = pf.next_seed()
            else:
                seed = pf.fused
            layer.call(ssu, seed, rounds)


@pytest.mark.parametrize("rounds", [5, 10])
@pytest.mark.parametrize("batch", [3, 8, 64])
def test_vllm_loop_modes_identical(gpu, rounds, batch):
    """(2) A 40-layer vLLM-shaped loop (expanded A/dt/D/dt_bias, 2-D (N, 1) indices as read and
    destination, pad_slot_id 0, one padded entry): stock (torch.randint + ours with rand_seed)
    vs next_seed() vs fused vs chained fused give byte-identical states and outputs, eagerly
    (two consecutive forwards) and over 3 replays of one torch.cuda.graph capture per mode,
    whose replays are fresh and equal stock's replays; the generator ends at the same offset;
    the padding between state slots is never written."""
    import mamba_ssu

    ssu = mamba_ssu.selective_state_update
    g = torch.Generator(device=gpu)
    g.manual_seed(1000 * rounds + batch)
    base = [VllmLayer(batch, gpu, g) for _ in range(N)]
    pad0 = [b.state_bytes() for b in base]

    def eager(mode):
        pf = mamba_ssu.SeedPrefetcher(N, gpu)
        layers = [b.clone() for b in base]
        _set_state(gpu, 77, 4 * 1001)
        for _ in range(2):
            _forward(layers, mode, pf, rounds, ssu)
        torch.cuda.synchronize()
        return [l.state_bytes() for l in layers], [l.out.clone() for l in layers], _gen(gpu).get_offset()

    want = eager("stock")
    for mode in MODES[1:]:
        got = eager(mode)
        assert got[2] == want[2], mode
        for k in range(N):
            assert torch.equal(got[0][k], want[0][k]), f"{mode}: state of layer {k}"
            assert torch.equal(got[1][k].view(torch.int16), want[1][k].view(torch.int16)), f"{mode}: out {k}"
    # Padding between slots untouched (the state view excludes it; bytes after DSTATE*...).
    elems = base[0].state[0].numel()
    for k in range(N):
        assert torch.equal(want[0][k][:, elems:], pad0[k][:, elems:])

    def graphed(mode):
        pf = mamba_ssu.SeedPrefetcher(N, gpu)
        layers = [b.clone() for b in base]
        # Warm-up on a side stream (torch.cuda.graph's advice), then capture one forward.
        _set_state(gpu, 5, 0)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _forward(layers, mode, pf, rounds, ssu)
        # Capture ran nothing: reset the states, then replay 3 times from one generator state.
        for l, b in zip(layers, base):
            l.state.copy_(b.state)
        _set_state(gpu, 31337, 4 * 55)
        reps = []
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            reps.append(([l.state_bytes() for l in layers], [l.out.clone() for l in layers], _gen(gpu).get_offset()))
        return reps, pf

    want_g, _ = graphed("stock")
    for mode in MODES[1:]:
        got_g, pf = graphed(mode)
        for r in range(3):
            assert got_g[r][2] == want_g[r][2], f"{mode} replay {r}: offset"
            for k in range(N):
                assert torch.equal(got_g[r][0][k], want_g[r][0][k]), f"{mode} replay {r}: state {k}"
                assert torch.equal(got_g[r][1][k].view(torch.int16), want_g[r][1][k].view(torch.int16)), f"{mode} replay {r}: out {k}"
        if mode == "next_seed":
            assert pf.stats()["batches"] == 1, pf.stats()
    # Each replay advances the generator by the whole forward (fresh draws, as stock's).
    offsets = [4 * 55] + [r[2] for r in want_g]
    assert [b - a for a, b in zip(offsets, offsets[1:])] == [4 * N] * 3


def test_fused_chain_recovers_from_interleaved_rng(gpu):
    """Inside a fused forward, another torch RNG call between two layers breaks the chain; the
    next layer derives its own seed and the results stay byte-identical to stock."""
    import mamba_ssu

    ssu = mamba_ssu.selective_state_update
    g = torch.Generator(device=gpu)
    g.manual_seed(5)
    base = [VllmLayer(4, gpu, g) for _ in range(8)]

    def run(mode):
        pf = mamba_ssu.SeedPrefetcher(8, gpu)
        layers = [b.clone() for b in base]
        _set_state(gpu, 3, 400)
        with pf.fused_forward() if mode == "chained" else contextlib.nullcontext():
            for i, l in enumerate(layers):
                if i in (3, 6):
                    torch.rand(7, device=gpu)
                l.call(ssu, _stock_seed(gpu) if mode == "stock" else pf.fused, 10)
        torch.cuda.synchronize()
        return [l.state_bytes() for l in layers], pf.stats()

    want, _ = run("stock")
    got, stats = run("chained")
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    # 8 calls: layers 1, 2, 4, 5, 7 read a chain link; 0, 3, 6 derive their own seed.
    assert stats["served"] == 5, stats


def test_vllm_backend_seed_modes_identical(gpu):
    """The vLLM-signature backend: seed_mode "stock" (torch.randint, as vLLM), "next_seed" and
    "fused" give byte-identical states and outputs over a 40-layer forward, called exactly as
    vLLM's mixer calls FlashInferSSUBackend (positional state..dt_bias, null_block_id=0)."""
    from mamba_ssu.vllm import MambaSSUBackend

    g = torch.Generator(device=gpu)
    g.manual_seed(9)
    base = [VllmLayer(6, gpu, g) for _ in range(N)]

    def run(mode):
        backend = MambaSSUBackend(vllm_config(sr=True, rounds=5), seed_mode=mode, num_layers=N)
        layers = [b.clone() for b in base]
        _set_state(gpu, 11, 4 * 8)
        for l in layers:
            ret = backend(l.state, l.x, l.dt, l.A, l.B, l.C, l.D, l.dt_bias, dt_softplus=True,
                          state_batch_indices=l.indices, dst_state_batch_indices=l.indices,
                          null_block_id=0, out=l.out)
            assert ret is None  # vLLM's backends write out in place
        torch.cuda.synchronize()
        return [l.state_bytes() for l in layers], [l.out.view(torch.int16).clone() for l in layers], _gen(gpu).get_offset()

    want = run("stock")
    for mode in ("next_seed", "fused"):
        got = run(mode)
        assert got[2] == want[2]
        assert all(torch.equal(a, b) for a, b in zip(got[0], want[0])), mode
        assert all(torch.equal(a, b) for a, b in zip(got[1], want[1])), mode


def _kwargs(layer, rand_seed, rounds):
    return dict(state=layer.state, x=layer.x, dt=layer.dt, A=layer.A, B=layer.B, C=layer.C,
                D=layer.D, dt_bias=layer.dt_bias, dt_softplus=True,
                state_batch_indices=layer.indices, dst_state_batch_indices=layer.indices,
                pad_slot_id=0, out=layer.out, rand_seed=rand_seed, philox_rounds=rounds)


def test_fused_forward_stream_rule(gpu):
    """Inside a fused forward every fused call runs on the stream the forward began on: one on
    another stream raises RuntimeError (the C prefetcher's rule, naming the stream) after its
    draw was taken, as a stock torch.randint before a refused SSU call would have; a call whose
    arguments the contract rejects draws nothing; the forward goes on, and its values stay
    stock's. Outside a forward a fused call takes any stream."""
    import mamba_ssu

    ssu = mamba_ssu.selective_state_update
    g = torch.Generator(device=gpu)
    g.manual_seed(8)
    base = [VllmLayer(4, gpu, g) for _ in range(3)]
    side = torch.cuda.Stream()

    def run(fused):
        layers = [b.clone() for b in base]
        pf = mamba_ssu.SeedPrefetcher(4, gpu)
        _set_state(gpu, 17, 40)
        seed = (lambda: pf.fused) if fused else (lambda: _stock_seed(gpu))
        with pf.fused_forward() if fused else contextlib.nullcontext():
            layers[0].call(ssu, seed(), 10)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                before = _gen(gpu).get_offset()
                if fused:
                    with pytest.raises(RuntimeError, match="^stream: "):
                        layers[1].call(ssu, seed(), 10)
                else:
                    _stock_seed(gpu)  # stock: the draw, then the refused call
                assert _gen(gpu).get_offset() == before + 4
            torch.cuda.current_stream().wait_stream(side)
            before = _gen(gpu).get_offset()
            with pytest.raises(ValueError, match="^philox_rounds: "):
                ssu(**_kwargs(layers[1], pf.fused, 0))
            assert _gen(gpu).get_offset() == before  # a rejected fused call draws nothing
            layers[1].call(ssu, seed(), 10)
        with torch.cuda.stream(side):
            layers[2].call(ssu, seed(), 10)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        return [l.state_bytes() for l in layers], _gen(gpu).get_offset()

    want, got = run(False), run(True)
    assert got[1] == want[1]
    assert all(torch.equal(a, b) for a, b in zip(got[0], want[0]))


def test_device_and_seed_errors(gpu):
    """On the GPU: a tensor off the state's device is a RuntimeError naming it (FlashInfer's
    C++ checks), a seed tensor off it a ValueError (its Python checks), a seed with a non-fp16
    state NotImplementedError (the C contract), a FusedSeed of another device's prefetcher a
    ValueError; nothing is launched and the generator does not move."""
    import mamba_ssu

    ssu = mamba_ssu.selective_state_update
    g = torch.Generator(device=gpu)
    g.manual_seed(3)
    layer = VllmLayer(2, gpu, g)
    seed = torch.zeros(1, dtype=torch.int64, device=gpu)
    pf = mamba_ssu.SeedPrefetcher(4, gpu)
    before = _gen(gpu).get_offset()
    cases = [
        (dict(x=layer.x.cpu()), RuntimeError, f"x: expected a tensor on {gpu} (the device of state), got one on cpu"),
        (dict(state_batch_indices=layer.indices.cpu()), RuntimeError, "state_batch_indices: expected a tensor on"),
        (dict(rand_seed=seed.cpu()), ValueError, "rand_seed: expected a CUDA tensor, got one on cpu"),
        (dict(state=layer.state.float()), RuntimeError, "philox_rounds: "),
        (dict(state=layer.state.float(), rand_seed=pf.fused), RuntimeError, "philox_rounds: "),
        (dict(rand_seed=pf.fused, B=layer.B.half()), RuntimeError, "B: expected dtype BF16"),
    ]
    if torch.cuda.device_count() > 1:
        other = torch.device("cuda", (gpu.index + 1) % torch.cuda.device_count())
        cases.append((dict(rand_seed=mamba_ssu.SeedPrefetcher(4, other).fused), ValueError,
                      f"rand_seed: the FusedSeed's prefetcher serves {other}"))
    for changes, exc, fragment in cases:
        kw = _kwargs(layer, seed, 10)
        kw.update(changes)
        with pytest.raises(exc) as info:
            ssu(**kw)
        assert str(info.value).startswith(fragment), str(info.value)
    assert _gen(gpu).get_offset() == before


def test_fused_path_is_first_used_outside_capture(gpu):
    """A SeedPrefetcher made under CUDA-graph capture serves next_seed there (it allocates
    nothing outside torch's allocator) and defers its C prefetcher (a stream, events, buffers) to
    the fused path's first use: under capture that is refused with a RuntimeError before any CUDA
    call could invalidate the capture (which then ends normally), and works after an eager use.
    (A SeedPrefetcher made outside capture has it from the start: test_vllm_loop_modes_identical
    captures its first fused forward.)"""
    import mamba_ssu

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        p = mamba_ssu.SeedPrefetcher(4, gpu)
        seed = p.next_seed()
    graph.replay()
    assert int(seed.numel()) == 1
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="outside CUDA-graph capture"):
        with torch.cuda.graph(graph):
            with p.fused_forward():
                pass
    with p.fused_forward():  # eager: creates it
        pass
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with p.fused_forward():
            pass
    graph.replay()
