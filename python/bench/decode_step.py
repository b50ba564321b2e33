"""The vLLM-shaped 40-layer decode step in torch, captured in a torch.cuda.graph: seeds by stock
``torch.randint`` / ``next_seed()`` / per-call fused / chained fused / a fixed seed tensor, and
TensorRT-LLM's device counter: stock (``counter.add_(1)`` before every layer, the SSU reading the
counter) / ``mamba_ssu.counter_seeds`` once per step.

Each layer is one SSU call of vLLM 0.33's Nemotron-H decode shape at TP4 (32 heads, dim 64,
dstate 128, 2 groups; bf16 inputs, fp16 state with stochastic rounding; expanded A/dt/D/dt_bias;
2-D (N, 1) indices as read and destination; pad_slot_id 0) preceded by its seed. Per batch size
every mode is captured once (one graph per mode, 40 layers), then the graphs are replayed in
turn (interleaved, so that clock drift hits every mode alike); µs per step = median of CUDA-event
times over the replays, three ways: events around one ``replay()`` from an idle GPU (torch's
replay prologue — two fill kernels writing the generator state — and the graph launch
included), events recorded inside the graph (its body alone), and events around 10 replays
enqueued back to back (as a serving loop runs them; the prologue and launch of one replay
overlap the previous one). Ratios to stock and the share of stock's seed overhead removed,
(stock - mode) / (stock - fixed), come from one run; the counter row's share is
(trtllm_stock - trtllm_counter) / (trtllm_stock - fixed). Before timing, per batch size, one
eager step of every mode from the same state is checked bit-identical to its stock (states,
outputs, and the generator's offset or the final counter); a mismatch stops the run.

Eagerly (vLLM's piecewise graphs run the mixer eagerly) it also reports the host time per call
of ``next_seed()``, of one ``torch.randint(0, 2**32, (1,), device=...)`` and of the SSU call
(``mamba_ssu.selective_state_update`` with a seed tensor), of one ``counter.add_(1)`` and of one
``counter_seeds`` for the whole step, from loops of calls timed with the host clock (the GPU
work of each is shorter than its launch).

    PYTHONPATH=python python3 python/bench/decode_step.py --json out.json
"""

import argparse
import contextlib
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "tests"))
from calls import op_args  # noqa: E402
from reference import VllmLayer  # noqa: E402

import mamba_ssu  # noqa: E402

MODES = ["stock", "next_seed", "fused", "fused_chained", "fixed", "trtllm_stock", "trtllm_counter"]
# Each mode and the stock it must equal bit for bit (fixed: a timing floor, equal to nothing).
STOCK_OF = {"next_seed": "stock", "fused": "stock", "fused_chained": "stock",
            "trtllm_counter": "trtllm_stock"}
BURST = 10


def forward(layers, mode, pf, fixed, rounds, counter):
    ssu = mamba_ssu.selective_state_update
    if mode == "trtllm_counter":  # one launch for the step's seeds
        seeds = mamba_ssu.counter_seeds(counter, len(layers))
    ctx = pf.fused_forward() if mode == "fused_chained" else contextlib.nullcontext()
    with ctx:
        for k, layer in enumerate(layers):
            if mode == "stock":
                seed = torch.randint(0, 2**32, (1,), device=layer.state.device)
            elif mode == "next_seed":
                seed = pf.next_seed()
            elif mode == "fixed":
                seed = fixed
            elif mode == "trtllm_stock":  # TensorRT-LLM: increment, then the SSU reads the counter
                counter.add_(1)
                seed = counter
            elif mode == "trtllm_counter":
                seed = seeds[k : k + 1]
            else:
                seed = pf.fused
            layer.call(ssu, seed, rounds)


def check_identical(batch, layers_n, rounds, device):
    """One eager step of every mode from the same layers, generator state and counter: each
    mode's states and outputs equal its stock's byte for byte, and so do the generator's offset
    (torch-generator modes) or the final counter (counter modes)."""
    g = torch.Generator(device=device)
    g.manual_seed(10_000 + batch)
    base = [VllmLayer(batch, device, g) for _ in range(layers_n)]
    fixed = torch.full((1,), 12345, dtype=torch.int64, device=device)
    gen = torch.cuda.default_generators[device.index]
    results = {}
    for mode in MODES:
        layers = [b.clone() for b in base]
        pf = mamba_ssu.SeedPrefetcher(layers_n, device)
        counter = torch.full((1,), 2**63 - layers_n // 2, dtype=torch.int64, device=device)
        gen.manual_seed(99)
        gen.set_offset(4 * 1000)
        forward(layers, mode, pf, fixed, rounds, counter)
        torch.cuda.synchronize()
        results[mode] = ([l.state_bytes() for l in layers], [l.out.view(torch.int16).clone() for l in layers],
                         gen.get_offset(), counter.item())
    for mode, stock in STOCK_OF.items():
        got, want = results[mode], results[stock]
        same = (got[2:] == want[2:] and all(torch.equal(a, b) for a, b in zip(got[0], want[0]))
                and all(torch.equal(a, b) for a, b in zip(got[1], want[1])))
        if not same:
            raise SystemExit(f"decode_step: batch {batch}: {mode} differs from {stock}; not timed")


def bench_graphs(batch, layers_n, rounds, replays, device):
    g = torch.Generator(device=device)
    g.manual_seed(batch)
    layers = [VllmLayer(batch, device, g) for _ in range(layers_n)]
    fixed = torch.full((1,), 12345, dtype=torch.int64, device=device)
    graphs = {}
    for mode in MODES:
        pf = mamba_ssu.SeedPrefetcher(layers_n, device)
        counter = torch.zeros(1, dtype=torch.int64, device=device)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up outside capture
            forward(layers, mode, pf, fixed, rounds, counter)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        # Events recorded inside the graph time its body alone; those around replay() also
        # take torch's replay prologue (two fill kernels writing the generator's seed and
        # offset to device memory, run before every replay of a graph that uses torch's
        # generator: stock and every torch-identical mode pay it, fixed does not).
        inner = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(2)]
        with torch.cuda.graph(graph):
            inner[0].record()
            forward(layers, mode, pf, fixed, rounds, counter)
            inner[1].record()
        graphs[mode] = (graph, (pf, counter), inner)
    times = {m: [] for m in MODES}
    body = {m: [] for m in MODES}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for mode in MODES:  # warm-up replays
        for _ in range(3):
            graphs[mode][0].replay()
    torch.cuda.synchronize()
    for _ in range(replays):
        for mode in MODES:
            graph, _, inner = graphs[mode]
            ev[0].record()
            graph.replay()
            ev[1].record()
            ev[1].synchronize()
            times[mode].append(ev[0].elapsed_time(ev[1]) * 1000.0)
            body[mode].append(inner[0].elapsed_time(inner[1]) * 1000.0)
    # Back to back: BURST replays enqueued in a row between two events (the GPU never idles
    # between them, as in a serving loop), per replay.
    burst = {m: [] for m in MODES}
    for _ in range(max(replays // 5, 3)):
        for mode in MODES:
            graph = graphs[mode][0]
            ev[0].record()
            for _ in range(BURST):
                graph.replay()
            ev[1].record()
            ev[1].synchronize()
            burst[mode].append(ev[0].elapsed_time(ev[1]) * 1000.0 / BURST)
    med = lambda d: {m: statistics.median(v) for m, v in d.items()}  # noqa: E731
    return med(times), med(body), med(burst)


def host_time_us(fn, calls=2000, reps=7):
    best = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        best.append((t1 - t0) / calls * 1e6)
    return statistics.median(best)


def bench_host(device, rounds):
    pf = mamba_ssu.SeedPrefetcher(40, device)
    g = torch.Generator(device=device)
    g.manual_seed(1)
    layer = VllmLayer(8, device, g)
    seed = torch.zeros(1, dtype=torch.int64, device=device)
    counter = torch.zeros(1, dtype=torch.int64, device=device)
    ssu = mamba_ssu.selective_state_update
    op = op_args(state=layer.state, x=layer.x, dt=layer.dt, A=layer.A, B=layer.B, C=layer.C,
                 D=layer.D, dt_bias=layer.dt_bias, dt_softplus=True,
                 state_batch_indices=layer.indices, dst_state_batch_indices=layer.indices,
                 pad_slot_id=0, out=layer.out, rand_seed=seed, philox_rounds=rounds)
    res = {
        "torch.randint": host_time_us(lambda: torch.randint(0, 2**32, (1,), device=device)),
        "next_seed": host_time_us(pf.next_seed),
        "ssu (rand_seed tensor)": host_time_us(lambda: layer.call(ssu, seed, rounds), calls=1000),
        "ssu (fused seed)": host_time_us(lambda: layer.call(ssu, pf.fused, rounds), calls=1000),
        "torch.ops.mamba_ssu.selective_state_update": host_time_us(
            lambda: torch.ops.mamba_ssu.selective_state_update(*op), calls=1000),
        "counter.add_(1)": host_time_us(lambda: counter.add_(1)),
        "counter_seeds(counter, 40)": host_time_us(lambda: mamba_ssu.counter_seeds(counter, 40)),
    }
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--json")
    a = ap.parse_args()
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    meta = {
        "gpu": props.name, "torch": torch.__version__, "git_version": torch.version.git_version,
        "layers": a.layers, "rounds": a.rounds, "replays": a.replays,
        "date": time.strftime("%Y-%m-%d"),
    }
    print(f"# {props.name}, torch {torch.__version__}, {a.layers} layers, {a.rounds} Philox rounds, "
          f"median of {a.replays} replays")
    rows = []
    head = (f"{'batch':>5} " + " ".join(f"{m:>14}" for m in MODES) +
            "   removed: next_seed  fused  chained  counter")
    tables = {"replay": [], "body": [], "burst": []}

    def share(t, stock, m):
        over = t[stock] - t["fixed"]
        return (t[stock] - t[m]) / over if over > 0 else float("nan")

    for b in [int(v) for v in a.batches.split(",")]:
        check_identical(b, a.layers, a.rounds, device)
        whole, inner, burst = bench_graphs(b, a.layers, a.rounds, a.replays, device)
        row = {"batch": b}
        for name, t in (("replay", whole), ("body", inner), ("burst", burst)):
            removed = {m: share(t, STOCK_OF[m], m) for m in STOCK_OF}
            row[name] = {"us": t, "removed": removed}
            tables[name].append(f"{b:>5} " + " ".join(f"{t[m]:>14.1f}" for m in MODES) +
                                f"   {removed['next_seed']*100:7.1f}% {removed['fused']*100:6.1f}% "
                                f"{removed['fused_chained']*100:6.1f}% {removed['trtllm_counter']*100:7.1f}%")
        rows.append(row)
    print("## whole replay (events around graph.replay(): torch's replay prologue included), us per step")
    print(head)
    print("\n".join(tables["replay"]))
    print("## graph body (events recorded inside the graph), us per step")
    print(head)
    print("\n".join(tables["body"]))
    print(f"## back to back ({BURST} replays between two events: prologue and launch overlap the previous replay), us per step")
    print(head)
    print("\n".join(tables["burst"]))
    host = bench_host(device, a.rounds)
    print("# eager host time per call (us):")
    for k, v in host.items():
        print(f"  {k:45s} {v:7.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "graph": rows, "host_us": host}, f, indent=1)


if __name__ == "__main__":
    main()
