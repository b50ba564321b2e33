"""GPU tests of the multi-token path as vLLM 0.33 drives it: the speculative-decoding verify step.

Each layer's call is the vLLM verify form: varlen x (total_tokens, nheads, dim) with
``cu_seqlens``, a 2-D (N, 1 + num_spec) int32 index passed as both read and destination index
(in-place verify: token t of sequence b goes to slot idx[b, t], the read slot is
idx[b, max(num_accepted_tokens[b] - 1, 0)]), ``num_accepted_tokens``, ``cache_steps`` = the
index width, ``pad_slot_id`` 0 (vLLM's null block: a sequence whose indices are all 0 is a pad),
stochastic rounding with 5 Philox rounds. A forward is L such layers; three rounds (verify steps)
run with fresh inputs, sequence lengths and accepted counts each round, read slots following
the previous round's writes.

The same rounds run eagerly and as 3 replays of one ``torch.cuda.graph`` capture (inputs copied
into the captured tensors before each replay), for every seed form: explicit ``rand_seed``
tensors holding the stock draws' values (computed on the CPU), and the torch generator's draws
through ``mamba_ssu.vllm.MambaSSUBackend`` ("stock", "next_seed", "fused") and through a chained
fused forward. Required: every form byte-identical to every other and every replay to the eager
round with the same seeds (whole state storages, padding included, and out); only the expected
slots written (the padding between slots, the null block and every other slot keep their
bytes; out rows past the last sequence stay poisoned).
"""

import contextlib

import pytest
import torch

from engines import vllm_config
from reference import torch_seed

NHEADS, DIM, DSTATE, NGROUPS = 32, 64, 128, 2
NUM_SPEC = 3
STEPS = NUM_SPEC + 1  # cache_steps: the index width
SEQS = 5  # sequences per step; the last one is a pad (all its indices are the null block)
ROWS = SEQS * STEPS + 2  # token rows of x: room for the longest step plus 2 padded rows
LAYERS = 3
ROUNDS = 3
PHILOX = 5
SLOTS = 1 + (SEQS - 1) * STEPS  # slot 0 is the null block
SLOT_ELEMS = NHEADS * DIM * DSTATE
PAGE = SLOT_ELEMS + 256  # vLLM's page stride: larger than one slot
GEN_SEED, GEN_OFFSET = 2027, 4 * 301

# Per round: sequence lengths (the pad sequence included) and accepted counts (vLLM: 1..STEPS).
LENGTHS = ((4, 4, 2, 1, 3), (3, 4, 4, 2, 1), (4, 1, 4, 4, 4))
ACCEPTED = ((1, 1, 1, 1, 0), (4, 2, 1, 1, 1), (2, 4, 3, 1, 2))
MODES = ("rand_seed", "stock", "next_seed", "fused", "chained")


def _gen(device):
    return torch.cuda.default_generators[device.index]


def _set_generator(device, seed, offset):
    g = _gen(device)
    g.manual_seed(seed)
    g.set_offset(offset)


class VerifyLayer:
    """One Mamba-2 layer's verify-step tensors (the captured, static ones) and its state cache
    (fp16, SLOTS slots at a page stride of PAGE elements; the padding poisoned with 0xFF)."""

    def __init__(self, device, gen):
        f = dict(device=device)
        self.store = torch.randn(SLOTS, PAGE, generator=gen, **f).to(torch.float16)
        self.store[:, SLOT_ELEMS:].view(torch.int16).fill_(-1)
        self.store[0].view(torch.int16).fill_(-1)  # the null block: never read, never written
        self.state = self.store[:, :SLOT_ELEMS].view(SLOTS, NHEADS, DIM, DSTATE)
        a = -torch.rand(NHEADS, generator=gen, **f) - 0.5
        self.A = a[:, None, None].expand(-1, DIM, DSTATE).float()
        self.D = torch.randn(NHEADS, generator=gen, **f).to(torch.bfloat16)[:, None].expand(-1, DIM)
        self.dt_bias = (torch.rand(NHEADS, generator=gen, **f) * 0.1).to(torch.bfloat16)[:, None].expand(-1, DIM)
        # Sequence b owns slots 1 + b*STEPS .. + STEPS - 1; the pad sequence's row is all 0.
        idx = torch.arange(1, SLOTS, dtype=torch.int32, **f).view(SEQS - 1, STEPS)
        self.indices = torch.cat([idx, torch.zeros(1, STEPS, dtype=torch.int32, **f)])
        # The captured inputs, refilled every round.
        self.x = torch.empty(ROWS, NHEADS, DIM, dtype=torch.bfloat16, **f)
        self.B = torch.empty(ROWS, NGROUPS, DSTATE, dtype=torch.bfloat16, **f)
        self.C = torch.empty(ROWS, NGROUPS, DSTATE, dtype=torch.bfloat16, **f)
        self.dt_rows = torch.empty(ROWS, NHEADS, dtype=torch.bfloat16, **f)
        self.dt = self.dt_rows[:, :, None].expand(-1, -1, DIM)  # strides (NHEADS, 1, 0)
        self.cu = torch.empty(SEQS + 1, dtype=torch.int32, **f)
        self.nat = torch.empty(SEQS, dtype=torch.int32, **f)
        self.seed = torch.empty(1, dtype=torch.int64, **f)
        self.out = torch.empty(ROWS, NHEADS, DIM, dtype=torch.bfloat16, **f)
        # Every round's inputs, made once.
        self.rounds = []
        for r in range(ROUNDS):
            self.rounds.append(dict(
                x=torch.randn(ROWS, NHEADS, DIM, generator=gen, **f).to(torch.bfloat16),
                B=torch.randn(ROWS, NGROUPS, DSTATE, generator=gen, **f).to(torch.bfloat16),
                C=torch.randn(ROWS, NGROUPS, DSTATE, generator=gen, **f).to(torch.bfloat16),
                dt=(torch.rand(ROWS, NHEADS, generator=gen, **f) * 0.5 - 1.0).to(torch.bfloat16),
            ))
        self.store0 = self.store.clone()

    def load(self, r, seed_value):
        """Round r's inputs into the captured tensors (outside any capture)."""
        src = self.rounds[r]
        self.x.copy_(src["x"])
        self.B.copy_(src["B"])
        self.C.copy_(src["C"])
        self.dt_rows.copy_(src["dt"])
        offsets = [0]
        for n in LENGTHS[r]:
            offsets.append(offsets[-1] + n)
        self.cu.copy_(torch.tensor(offsets, dtype=torch.int32))
        self.nat.copy_(torch.tensor(ACCEPTED[r], dtype=torch.int32))
        self.seed.fill_(seed_value)
        self.out.view(torch.int16).fill_(-1)

    def reset(self):
        self.store.copy_(self.store0)

    def call(self, mamba_ssu, mode, backend, prefetcher):
        if mode in ("stock", "next_seed", "fused"):
            # vLLM's backends return nothing: the SSU writes out and the state in place.
            ret = backend(self.state, self.x, self.dt, self.A, self.B, self.C, self.D, self.dt_bias,
                          dt_softplus=True, state_batch_indices=self.indices,
                          dst_state_batch_indices=self.indices, null_block_id=0, out=self.out,
                          num_accepted_tokens=self.nat, cu_seqlens=self.cu)
            assert ret is None
            return
        else:
            ret = mamba_ssu.selective_state_update(
                self.state, self.x, self.dt, self.A, self.B, self.C, self.D, dt_bias=self.dt_bias,
                dt_softplus=True, state_batch_indices=self.indices,
                dst_state_batch_indices=self.indices, pad_slot_id=0, out=self.out,
                rand_seed=self.seed if mode == "rand_seed" else prefetcher.fused,
                philox_rounds=PHILOX, cache_steps=STEPS, cu_seqlens=self.cu,
                num_accepted_tokens=self.nat,
            )
        assert ret is self.out

    def snapshot(self):
        return self.store.view(torch.int16).clone(), self.out.view(torch.int16).clone()


def _expected_writes(r):
    """Slots round r writes: idx[b, t] for the tokens t of every non-pad sequence."""
    slots = set()
    for b, n in enumerate(LENGTHS[r][: SEQS - 1]):
        slots.update(1 + b * STEPS + t for t in range(n))
    return slots


def _forward(mamba_ssu, layers, mode, backend, prefetcher):
    scope = prefetcher.fused_forward() if mode == "chained" else contextlib.nullcontext()
    with scope:
        for layer in layers:
            layer.call(mamba_ssu, mode, backend, prefetcher)


def _seed_value(r, layer):
    """The stock draw of call r * LAYERS + layer from (GEN_SEED, GEN_OFFSET), as an int64."""
    return torch_seed(GEN_SEED, GEN_OFFSET + 4 * (r * LAYERS + layer))


def _run_mode(mode, device):
    """One seed form, eagerly and under a CUDA graph: (eager, replays, info), per round the
    snapshots (state storage and out) of every layer; info holds the generator offsets and, for
    the explicit-seed form, every layer's state storage before and after each eager round."""
    import mamba_ssu
    from mamba_ssu.vllm import MambaSSUBackend

    g = torch.Generator(device=device)
    g.manual_seed(4242)
    layers = [VerifyLayer(device, g) for _ in range(LAYERS)]
    backend = MambaSSUBackend(vllm_config(sr=True, rounds=PHILOX),
                              seed_mode=mode if mode in ("stock", "next_seed", "fused") else "stock",
                              num_layers=LAYERS)
    prefetcher = mamba_ssu.SeedPrefetcher(LAYERS, device)

    # Eager: ROUNDS verify steps from one generator state (one draw per layer call).
    _set_generator(device, GEN_SEED, GEN_OFFSET)
    eager, writes = [], []
    for r in range(ROUNDS):
        for k, layer in enumerate(layers):
            layer.load(r, _seed_value(r, k))
        before = [layer.store.view(torch.int16).clone() for layer in layers] if mode == "rand_seed" else None
        _forward(mamba_ssu, layers, mode, backend, prefetcher)
        torch.cuda.synchronize()
        eager.append([layer.snapshot() for layer in layers])
        if before is not None:
            writes.append([(b, layer.store.view(torch.int16).clone()) for b, layer in zip(before, layers)])
    eager_offset = _gen(device).get_offset()

    # Graph: capture one forward (capture runs nothing), reset the caches, replay ROUNDS times
    # from the eager run's initial generator state, each replay after loading that round.
    for layer in layers:
        layer.load(0, _seed_value(0, 0))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _forward(mamba_ssu, layers, mode, backend, prefetcher)
    for layer in layers:
        layer.reset()
    _set_generator(device, GEN_SEED, GEN_OFFSET)
    replays, offsets = [], [_gen(device).get_offset()]
    for r in range(ROUNDS):
        for k, layer in enumerate(layers):
            layer.load(r, _seed_value(r, k))
        graph.replay()
        torch.cuda.synchronize()
        replays.append([layer.snapshot() for layer in layers])
        offsets.append(_gen(device).get_offset())
    del graph
    return eager, replays, dict(writes=writes, eager_offset=eager_offset, replay_offsets=offsets)


@pytest.fixture(scope="module")
def verify_runs():
    """``verify_runs(mode)``: the runs of one seed form, made once per module."""
    cache = {}

    def get(mode):
        if mode not in cache:
            cache[mode] = _run_mode(mode, torch.device("cuda", torch.cuda.current_device()))
        return cache[mode]

    return get


@pytest.mark.parametrize("mode", MODES)
def test_vllm_verify_loop_eager_and_graph(gpu, verify_runs, mode):
    """For one seed form: every replay of the captured verify forward is byte-identical to the
    eager round with the same seeds (state storages with their padding, and out), and each
    replay advances the generator by one draw per layer (forms that draw from it)."""
    eager, replays, info = verify_runs(mode)
    for r in range(ROUNDS):
        for k in range(LAYERS):
            assert torch.equal(replays[r][k][0], eager[r][k][0]), f"{mode} round {r} layer {k}: state"
            assert torch.equal(replays[r][k][1], eager[r][k][1]), f"{mode} round {r} layer {k}: out"
    if mode != "rand_seed":
        steps = [b - a for a, b in zip(info["replay_offsets"], info["replay_offsets"][1:])]
        assert steps == [4 * LAYERS] * ROUNDS, steps


@pytest.mark.parametrize("mode", MODES[1:])
def test_vllm_verify_seed_forms_identical(gpu, verify_runs, mode):
    """Every seed form gives the bytes of explicit rand_seed tensors holding the stock draws'
    values: the backend's "stock" (torch.randint), "next_seed", "fused", and a chained fused
    forward, round after round."""
    want = verify_runs("rand_seed")[0]
    got = verify_runs(mode)[0]
    for r in range(ROUNDS):
        for k in range(LAYERS):
            assert torch.equal(got[r][k][0], want[r][k][0]), f"{mode} round {r} layer {k}: state"
            assert torch.equal(got[r][k][1], want[r][k][1]), f"{mode} round {r} layer {k}: out"
    # One draw per layer call, as stock.
    assert verify_runs(mode)[2]["eager_offset"] == GEN_OFFSET + 4 * ROUNDS * LAYERS


def test_vllm_verify_writes_only_the_expected_slots(gpu, verify_runs):
    """Each eager round writes exactly the slots of the tokens of its non-pad sequences: every
    one of them changes, every other slot (the null block, the pad sequence's, tokens past a
    sequence's length) and the padding between slots keep their bytes; out rows of the tokens
    are written, the rows past the last sequence keep their poison."""
    eager, _, info = verify_runs("rand_seed")
    for r in range(ROUNDS):
        expect = _expected_writes(r)
        total = sum(LENGTHS[r])
        for k in range(LAYERS):
            before, after = info["writes"][r][k]
            assert torch.equal(after[:, SLOT_ELEMS:], before[:, SLOT_ELEMS:]), f"round {r} layer {k}: padding"
            for s in range(SLOTS):
                changed = not torch.equal(after[s, :SLOT_ELEMS], before[s, :SLOT_ELEMS])
                assert changed == (s in expect), f"round {r} layer {k}: slot {s} changed={changed}"
            out = eager[r][k][1]
            assert bool((out[total:] == -1).all()), f"round {r} layer {k}: out rows past the tokens"
            assert not bool((out[:total] == -1).any()), f"round {r} layer {k}: out rows not written"
