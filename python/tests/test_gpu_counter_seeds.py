"""GPU tests of ``mamba_ssu.counter_seeds`` (TensorRT-LLM's device counter seeds).

Stock = what TensorRT-LLM's Mamba-2 mixer runs today: ``rand_seed.add_(1)`` before every
stochastic-rounding layer, whose SSU reads ``rand_seed``. ``counter_seeds(rand_seed, L)`` once
per forward must give layer k the value stock gives it (``seeds[k]``), leave the counter where
stock leaves it, eagerly, across the int64 wrap-around, and on every replay of a CUDA graph; and
an SSU fed either way must write byte-identical states and outputs.
"""

import pytest
import torch

from reference import VllmLayer

L = 12  # stochastic-rounding layers of a forward


def _stock_values(counter, n):
    """n stock increment-then-read steps of the counter (torch's add_), as host integers."""
    vals = []
    for _ in range(n):
        counter.add_(1)
        vals.append(int(counter.item()))
    return vals


def _wrap(v):
    return (v + 2**63) % 2**64 - 2**63


@pytest.mark.parametrize("start", [0, 41, -5, 2**62, 2**63 - 3, -(2**63)])
@pytest.mark.parametrize("n", [1, 7, L, 1000])
def test_values_eager(gpu, start, n):
    import mamba_ssu

    want_counter = torch.full((1,), start, dtype=torch.int64, device=gpu)
    want = _stock_values(want_counter, n)
    counter = torch.full((1,), start, dtype=torch.int64, device=gpu)
    seeds = mamba_ssu.counter_seeds(counter, n)
    torch.cuda.synchronize()
    assert seeds.tolist() == want == [_wrap(start + k + 1) for k in range(n)]
    assert counter.item() == want_counter.item() == _wrap(start + n)
    # A given out: written in place and returned.
    out = torch.full((n,), -1, dtype=torch.int64, device=gpu)
    assert mamba_ssu.counter_seeds(counter, n, out=out) is out
    torch.cuda.synchronize()
    assert out.tolist() == [_wrap(start + n + k + 1) for k in range(n)]
    assert counter.item() == _wrap(start + 2 * n)


def test_launcher_rules(gpu):
    """The C launcher's rules (n, overlap) raise RuntimeError naming the argument; the counter
    is not touched."""
    import mamba_ssu

    counter = torch.full((1,), 9, dtype=torch.int64, device=gpu)
    with pytest.raises(RuntimeError, match="^n: expected 1..="):
        mamba_ssu.counter_seeds(counter, 0)
    buf = torch.zeros(4, dtype=torch.int64, device=gpu)
    with pytest.raises(RuntimeError, match="^counter: inside out"):
        mamba_ssu.counter_seeds(buf[2:3], 4, out=buf)
    other = torch.zeros(4, dtype=torch.int64, device="cpu")
    with pytest.raises(RuntimeError, match="^out: expected a tensor on cuda"):
        mamba_ssu.counter_seeds(counter, 4, out=other)
    assert counter.item() == 9


def test_values_under_cuda_graph(gpu):
    """One counter_seeds captured in a graph, replayed 3 times: each replay continues from the
    counter's value (stock's captured add_ sequence gives the same values and final counter)."""
    import mamba_ssu

    def capture(step):
        counter = torch.full((1,), 2**63 - 2 * L, dtype=torch.int64, device=gpu)
        sink = torch.zeros(L, dtype=torch.int64, device=gpu)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step(counter, sink)
        return g, counter, sink

    def stock(counter, sink):
        for k in range(L):
            counter.add_(1)
            sink[k : k + 1].copy_(counter)

    def ours(counter, sink):
        sink.copy_(mamba_ssu.counter_seeds(counter, L))

    results = {}
    for name, step in (("stock", stock), ("counter_seeds", ours)):
        g, counter, sink = capture(step)
        reps = []
        for _ in range(3):
            start = counter.item()
            g.replay()
            torch.cuda.synchronize()
            reps.append((start, sink.tolist(), counter.item()))
        results[name] = reps
    assert results["counter_seeds"] == results["stock"]
    for start, vals, end in results["counter_seeds"]:
        assert vals == [_wrap(start + k + 1) for k in range(L)] and end == _wrap(start + L)
    # The second replay crosses the int64 wrap-around.
    assert results["counter_seeds"][0][2] > 0 > results["counter_seeds"][1][2]


@pytest.mark.parametrize("rounds", [5, 10])
def test_ssu_states_identical(gpu, rounds):
    """An L-layer vLLM-shaped forward (fp16 state, SR) fed by stock's per-layer add_ and by one
    counter_seeds: byte-identical states and outputs and the same final counter, eagerly (two
    forwards) and over 3 replays of one captured forward per way."""
    import mamba_ssu

    ssu = mamba_ssu.selective_state_update
    g = torch.Generator(device=gpu)
    g.manual_seed(77 + rounds)
    base = [VllmLayer(5, gpu, g) for _ in range(L)]

    def forward(layers, counter, way):
        if way == "stock":
            for layer in layers:
                counter.add_(1)
                layer.call(ssu, counter, rounds)
        else:
            seeds = mamba_ssu.counter_seeds(counter, len(layers))
            for k, layer in enumerate(layers):
                layer.call(ssu, seeds[k : k + 1], rounds)

    def eager(way):
        layers = [b.clone() for b in base]
        counter = torch.full((1,), 2**63 - 7, dtype=torch.int64, device=gpu)
        for _ in range(2):
            forward(layers, counter, way)
        torch.cuda.synchronize()
        return [l.state_bytes() for l in layers], [l.out.view(torch.int16).clone() for l in layers], counter.item()

    def graphed(way):
        layers = [b.clone() for b in base]
        counter = torch.full((1,), 1000, dtype=torch.int64, device=gpu)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward(layers, counter, way)
        for l, b in zip(layers, base):
            l.state.copy_(b.state)
        counter.fill_(123456789)
        reps = []
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            reps.append(([l.state_bytes() for l in layers], [l.out.view(torch.int16).clone() for l in layers], counter.item()))
        return reps

    want, got = eager("stock"), eager("counter_seeds")
    assert got[2] == want[2] == _wrap(2**63 - 7 + 2 * L)
    for k in range(L):
        assert torch.equal(got[0][k], want[0][k]), f"state of layer {k}"
        assert torch.equal(got[1][k], want[1][k]), f"out of layer {k}"
    want_g, got_g = graphed("stock"), graphed("counter_seeds")
    for r in range(3):
        assert got_g[r][2] == want_g[r][2] == 123456789 + L * (r + 1), f"replay {r}: counter"
        for k in range(L):
            assert torch.equal(got_g[r][0][k], want_g[r][0][k]), f"replay {r}: state {k}"
            assert torch.equal(got_g[r][1][k], want_g[r][1][k]), f"replay {r}: out {k}"
