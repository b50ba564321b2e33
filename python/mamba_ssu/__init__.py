"""mamba_ssu: the Mamba-2 decode-step kernels of mamba-ssu for torch engines.

- :func:`selective_state_update` — FlashInfer 0.7.2's Python signature, the crate's kernels
  behind it: state and out bit-identical to FlashInfer's for the same ``rand_seed``, for the
  single-token decode step and for the multi-token (speculative-decoding verify) path.
- :class:`SeedPrefetcher` — one per device; :meth:`SeedPrefetcher.next_seed` replaces the
  per-layer ``torch.randint(0, 2**32, (1,), device=...)`` with identical values and identical
  generator advance, from one batched draw per N calls (eagerly and under
  ``torch.cuda.graph``); :attr:`SeedPrefetcher.fused` makes the SSU derive the stock seed itself
  (no seed kernel), and :meth:`SeedPrefetcher.fused_forward` chains a delimited forward's fused
  calls so that the seed derivation runs once per forward.
- :func:`draw_seeds` — n stock draws into an int64 tensor in one launch.
- :func:`counter_seeds` — TensorRT-LLM's device counter seeds: a forward's n increment-then-read
  steps in one launch.
- :mod:`mamba_ssu.vllm` — a backend with the call signature of vLLM 0.33's
  ``FlashInferSSUBackend`` (vLLM itself was not run).

Import torch before this package (``import mamba_ssu`` does it): the extension uses torch's
CUDA runtime.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch

from . import _C  # noqa: F401  (loads the extension and registers the ops)
from . import _ops  # noqa: F401  (fake implementations for torch.compile)

__version__ = "0.1.0"

__all__ = [
    "selective_state_update",
    "SeedPrefetcher",
    "FusedSeed",
    "draw_seeds",
    "counter_seeds",
    "check_options",
    "MAX_SEEDS_PER_DRAW",
    "MTP_MAX_TOKENS",
]

#: Most seeds one batched draw writes.
MAX_SEEDS_PER_DRAW = _C.MAX_SEEDS_PER_DRAW
#: Most tokens per sequence of one multi-token call (T, or cache_steps in the varlen form).
MTP_MAX_TOKENS = _C.MTP_MAX_TOKENS

# FlashInfer's algorithm names -> the crate's mamba_ssu_algorithm values (FlashInfer's own
# numbering). "async_horizontal" is served by FlashInfer's simple kernel, whose results it
# therefore has; "horizontal" is FlashInfer's horizontal kernel (single token, head dims that
# are a multiple of 64 up to 256: the C check refuses others with FlashInfer's RuntimeError).
_ALGORITHMS = {"auto": 0, "simple": 1, "vertical": 2, "horizontal": 3, "async_horizontal": 1}
# The stochastic-rounding conversion of a FlashInfer release -> mamba_ssu_sr_rule.
_SR_RULES = {"0.7.2": 0, "0.7.4": 1}
# FlashInfer's backend names, all run by the crate's kernels: "auto" and "flashinfer" run
# FlashInfer's kernels, and "cake" (an opt-in sm100 backend) falls back to them elsewhere.
_BACKENDS = ("auto", "flashinfer", "cake")


class FusedSeed:
    """Marker for ``rand_seed=``: the SSU kernel derives the stock seed itself.

    Obtained from :attr:`SeedPrefetcher.fused`; each call it is passed to advances the device's
    default CUDA generator exactly like one ``torch.randint(0, 2**32, (1,))`` and rounds with
    that draw's value, without any seed kernel.
    """

    __slots__ = ("_prefetcher",)

    def __init__(self, prefetcher: "SeedPrefetcher"):
        self._prefetcher = prefetcher

    def __repr__(self) -> str:
        return f"FusedSeed(device=cuda:{self._prefetcher.device})"


class SeedPrefetcher:
    """Torch-identical stochastic-rounding seeds for the SR layers of one device.

    Create one per device with ``num_layers`` = the number of SR layers of a forward (N).
    :meth:`next_seed` replaces ``torch.randint(0, 2**32, (1,), device=...)``: it advances the
    device's default CUDA generator exactly as that call would (every other torch RNG user sees
    the same stream) and returns a one-element int64 tensor holding the same value. Values come
    from one batched draw of N positions, made when no held position matches: the first call,
    other RNG use that moved the generator past the batch, a new seed, another stream, or a
    capture boundary. Under ``torch.cuda.graph`` the batched draw reads the generator's
    graph-safe device state, so each replay draws fresh values equal to stock's replays.

    :attr:`fused` is the fused path: pass it as ``rand_seed`` and the SSU kernel derives the
    stock value itself. Inside :meth:`fused_forward` the fused calls are chained (the first call
    derives its seed; every call stores the next call's seed from one extra thread block).

    A CUDA graph captured with it stays safe to replay after the prefetcher is gone: the
    buffers captured kernels point into are allocated from the graph's memory pool or kept for
    the rest of the process. The fused path needs the crate's C prefetcher of the device (a
    stream, two events and a few device buffers), created with the SeedPrefetcher; a capture does
    not allow that, so a SeedPrefetcher made under CUDA-graph capture creates it at the fused
    path's first use, which must then be outside capture (RuntimeError otherwise).
    ``next_seed`` never needs it and works anywhere.
    """

    def __init__(self, num_layers: int, device=None):
        if isinstance(num_layers, bool) or not isinstance(num_layers, int):
            raise TypeError(f"num_layers: expected an int, got {type(num_layers).__name__}")
        if not 1 <= num_layers <= MAX_SEEDS_PER_DRAW:
            raise ValueError(f"num_layers: expected 1..={MAX_SEEDS_PER_DRAW}, got {num_layers}")
        dev = _cuda_device(device)
        self._impl = _C.SeedPrefetcher(num_layers, dev.index)
        #: The device's ``torch.randint(0, 2**32, (1,), device=...)``, N positions per draw.
        self.next_seed = self._impl.next_seed
        self.fused = FusedSeed(self)

    @property
    def num_layers(self) -> int:
        """N: the positions one batched draw covers."""
        return self._impl.num_layers

    @property
    def device(self) -> int:
        """The CUDA device index this prefetcher serves."""
        return self._impl.device

    def stats(self) -> dict:
        """Counters: ``requested`` (seed requests), ``served`` (from a batch or a chain link),
        ``batches`` (batched draws made)."""
        return self._impl.stats()

    @contextlib.contextmanager
    def fused_forward(self):
        """Delimits a forward whose SR layers call the SSU with ``rand_seed=self.fused``.

        The forward is the crate's C prefetcher's fused forward on the stream current when the
        ``with`` block is entered. Inside it the first N fused calls are chained: only the first
        derives its seed in the kernel, each call also stores the next call's seed, and the next
        call reads it — the 10-round seed derivation leaves the critical path of every layer but
        the first. Values are the stock sequence whatever happens in between (other RNG use, a
        failed call: the next call derives its own seed again). Every fused call of the forward
        must run on that stream, captured or not as the forward began: a fused call on another
        stream, or across a capture boundary, raises RuntimeError (the C prefetcher's rule) after
        its draw was taken from the generator (as a stock ``torch.randint`` before a refused SSU
        call would have). Fused calls outside a forward take any stream. Works eagerly and
        inside a ``torch.cuda.graph`` capture (enter the ``with`` block inside the capture).
        """
        self._impl.begin_fused_forward()
        try:
            yield self
        finally:
            self._impl.end_fused_forward()


def _cuda_device(device) -> torch.device:
    if device is None:
        if not torch.cuda.is_available():
            raise RuntimeError("mamba_ssu: no CUDA device is available")
        return torch.device("cuda", torch.cuda.current_device())
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device: expected a CUDA device, got {dev}")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _traced(t) -> bool:
    """Whether a call goes through the torch op (traced by torch.compile, or on meta tensors,
    whose fake implementation runs) rather than the extension's direct entry point (eager and
    graph-captured calls: no dispatcher on the hot path)."""
    meta = isinstance(t, torch.Tensor) and t.device.type == "meta"
    return torch.compiler.is_compiling() or meta


def check_options(
    *,
    algorithm: str = "auto",
    philox_rounds: Optional[int] = 10,
    sr_rule: str = "0.7.2",
    multi_token: bool = False,
    head_dim: int = 64,
) -> None:
    """Raises what :func:`selective_state_update` raises for these options whatever the shapes:
    for engines that validate their configuration once, at start-up, instead of at the first
    decode step. ``philox_rounds=None``: no stochastic rounding (no seed); ``multi_token``: the
    multi-token (verify) form; ``head_dim``: the head dim of the calls (``algorithm="horizontal"``
    takes multiples of 64 up to 256). It runs the crate's C check on a small call of meta tensors
    (nothing is allocated on a device or launched), so its rules are the kernels' own: e.g.
    ``ValueError`` for rounds below 1 or an unknown name, ``RuntimeError`` for
    ``algorithm="horizontal"`` with a head dim it does not take or in the multi-token form."""
    m = dict(device="meta")
    batch, nheads, dim, dstate, T = 1, 1, int(head_dim), 128, 2
    lead = (batch, T) if multi_token else (batch,)
    x = torch.empty(*lead, nheads, dim, dtype=torch.bfloat16, **m)
    dt = torch.empty(*lead, nheads, 1, dtype=torch.bfloat16, **m).expand(*lead, nheads, dim)
    selective_state_update(
        torch.empty(1, nheads, dim, dstate, dtype=torch.float16, **m),
        x,
        dt,
        torch.empty(nheads, 1, 1, dtype=torch.float32, **m).expand(nheads, dim, dstate),
        torch.empty(*lead, 1, dstate, dtype=torch.bfloat16, **m),
        torch.empty(*lead, 1, dstate, dtype=torch.bfloat16, **m),
        None,
        rand_seed=None if philox_rounds is None else torch.empty(1, dtype=torch.int64, **m),
        philox_rounds=10 if philox_rounds is None else philox_rounds,
        algorithm=algorithm,
        sr_rule=sr_rule,
    )


def draw_seeds(out: torch.Tensor) -> torch.Tensor:
    """Fills the int64 CUDA tensor ``out`` (n,) with n consecutive stock draws of its device's
    default generator — ``out[k]`` equals the k-th of n ``torch.randint(0, 2**32, (1,))`` calls —
    in one launch, and advances the generator as those n calls would. Graph-safe. Returns out."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out: expected an int64 CUDA tensor, got {type(out).__name__}")
    if _traced(out):
        torch.ops.mamba_ssu.draw_seeds(out)
    else:
        _C.draw_seeds(out)
    return out


def counter_seeds(
    counter: torch.Tensor, n: int, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """TensorRT-LLM's counter seeds, a forward's worth in one launch: ``out[k] = counter + k + 1``
    for k < n, then ``counter += n`` (int64, wrapping around as torch's ``add_``). Returns out
    (allocated as n int64 elements on the counter's device when not given).

    TensorRT-LLM's Mamba-2 mixer keeps one int64 CUDA tensor as its seed counter and, before
    every stochastic-rounding layer, runs ``rand_seed.add_(1)`` and passes ``rand_seed`` to the
    SSU: one tiny kernel per layer. Instead, once per forward::

        seeds = mamba_ssu.counter_seeds(rand_seed, num_layers)
        ...  # layer k:
        mamba_ssu.selective_state_update(..., rand_seed=seeds[k : k + 1], philox_rounds=...)

    gives every layer the value it had (and leaves the counter where the per-layer increments
    left it). The counter is read when the kernel runs, so a launch captured in a CUDA graph
    continues from the counter's value at each replay (the captured ``out`` must live as long
    as the graph: one allocated inside the capture lives in the graph's memory pool).

    ``counter``: one int64 element on a CUDA device; ``out``: n contiguous int64 elements on the
    same device, not holding the counter. n: 1..MAX_SEEDS_PER_DRAW (the crate's C launcher
    decides, as for every rule on n, alignment and overlap).
    """
    if not isinstance(counter, torch.Tensor):
        raise TypeError(f"counter: expected an int64 CUDA tensor, got {type(counter).__name__}")
    if out is None:
        out = torch.empty(n, dtype=torch.int64, device=counter.device)
    if _traced(counter):
        torch.ops.mamba_ssu.counter_seeds(counter, n, out)
    else:
        _C.counter_seeds(counter, n, out)
    return out


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    state_batch_indices: Optional[torch.Tensor] = None,
    pad_slot_id: int = -1,
    state_scale: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    disable_state_update: bool = False,
    intermediate_states_buffer: Optional[torch.Tensor] = None,
    intermediate_state_indices: Optional[torch.Tensor] = None,
    intermediate_state_scales: Optional[torch.Tensor] = None,
    rand_seed=None,
    philox_rounds: int = 10,
    cache_steps: int = 0,
    algorithm: str = "auto",
    dst_state_batch_indices: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    num_accepted_tokens: Optional[torch.Tensor] = None,
    backend: str = "auto",
    *,
    sr_rule: str = "0.7.2",
) -> torch.Tensor:
    """One Mamba-2 selective-state update, FlashInfer 0.7.2's Python contract: the single-token
    decode step, or the multi-token (speculative-decoding verify) path.

    The arguments go as given to the crate's C contract (``mamba_ssu_check`` /
    ``mamba_ssu_launch``, ``csrc/include/mamba_ssu.h``), which applies FlashInfer's rules: which
    path (``cu_seqlens`` with a 3-D x is the varlen multi-token form; else a 4-D x, or
    ``cache_steps >= 1``, the fixed-length multi-token form; anything else single token), its
    normalisation of the forms with one dimension fewer, and every rule on shapes, dtypes,
    strides, write modes and option values; ``docs/torch-binding.md`` lists them.

    Single-token shapes (FlashInfer's): state (slots, nheads, dim, dstate) with the inner three
    dims contiguous; x, z, out (batch, nheads, dim); dt (batch, nheads, dim) with strides (any,
    1, 0); A (nheads, dim, dstate) float32 with strides (1, 0, 0); B, C (batch, ngroups,
    dstate); D, dt_bias (nheads, dim) with strides (1, 0); state_batch_indices /
    dst_state_batch_indices int32 or int64 (dst: the read index's dtype), (>= batch,) or
    (>= batch, >= 1) (column 0 of the first batch rows is used: padded index tensors are taken, as
    FlashInfer takes them); the multi-token arguments (``intermediate_*``,
    ``num_accepted_tokens``, a ``cache_steps`` below 1) are ignored there, as FlashInfer ignores
    them. ``state``
    is updated in place (unless ``disable_state_update``; slots equal to ``pad_slot_id`` are
    read as zeros and not written) and ``out`` is returned. An int16 ``state`` is FlashInfer's
    block-scaled state: with ``state_scale`` (float32 (slots, nheads, dim), or with a trailing
    1, strides (>= nheads * dim, dim, 1)) it is read as ``q * scale`` of the read slot, and each
    written row is quantised with the encode factor 32767 / max |row| (FlashInfer's approximate
    reciprocal) and its decode scale written at the write slot (multi token: at every written
    step, the state carried in fp32 between them; an int16 intermediate buffer's scales go to
    ``intermediate_state_scales`` (batch, cache_steps, nheads, dim)); without ``state_scale`` it
    is read as its integers and written rounded and clamped to +-32767.

    Multi-token shapes: fixed length x, z, out (batch, T, nheads, dim), dt the same with strides
    (any, any, 1, 0), B, C (batch, T, ngroups, dstate); varlen x, z, out (total_tokens, nheads,
    dim), dt with strides (any, 1, 0), B, C (total_tokens, ngroups, dstate), ``cu_seqlens``
    (batch + 1,) and ``cache_steps`` = the longest sequence (1..=16). Read slot of sequence b:
    ``state_batch_indices[b]``, or with a 2-D index and ``num_accepted_tokens``
    ``state_batch_indices[b, max(num_accepted_tokens[b] - 1, 0)]``. One write mode:
    ``intermediate_states_buffer`` (entries, cache_steps, nheads, dim, dstate) (token t of
    sequence b to entry ``intermediate_state_indices[b]``, or the read slot, step t; the state
    is not written), a ``dst_state_batch_indices`` (>= batch, >= T) (token t to slot
    ``dst[b, t]``; a 1-D one sends every token to ``dst[b]``), or neither (the last token's state
    to the read slot unless ``disable_state_update``). Index dtypes, FlashInfer's rule: int32 or
    int64; ``dst_state_batch_indices`` has the read index's dtype, and so has
    ``intermediate_state_indices`` when both are given; ``num_accepted_tokens`` (>= batch,) and
    ``cu_seqlens`` each have their own. Index tensors may be longer (and a 2-D one wider) than
    the call reads.

    ``out``: when not given, allocated like x as passed (``torch.empty_like(x)``), which the
    contract then reads with x's normalisation. FlashInfer allocates it like its normalised x,
    so for a 2-D x, or a 2-D / 3-D x with ``cache_steps >= 1``, its returned tensor has the
    size-1 head or token dimensions that normalisation inserted and this one has x's shape (the
    same values).

    Stochastic rounding of an fp16 state: ``rand_seed`` a one-element int64 tensor on the
    state's device (read by the kernel, never by the host) with any ``philox_rounds`` >= 1
    (FlashInfer has no upper bound; 5 and 10 run the compiled-in kernels), or a
    :class:`FusedSeed` (the kernel derives the stock seed itself; chained inside
    :meth:`SeedPrefetcher.fused_forward`); without ``rand_seed`` the state is rounded to nearest.
    ``algorithm``: "auto", "simple", "vertical", "horizontal" (FlashInfer's kernels: their
    random mappings, summation orders and operation forms; "async_horizontal" is served as
    "simple"). "horizontal" takes head dims that are a multiple of 64 up to 256 and no
    ``state_scale`` (else ``RuntimeError``, as FlashInfer's horizontal launcher raises).
    "auto" is FlashInfer's rule for the GPU: "simple" below sm_90 and for small grids
    (batch * nheads < 2 * SMs) or at a head dim FlashInfer's vertical kernel does not take (not a
    multiple of 16, or below 48), else "vertical" on the sm_90 family and, from sm_100 on,
    "horizontal" for an fp16 or bf16 state whose head dim it takes ("vertical" otherwise). The
    multi-token path has one layout, served for "auto", "simple" and "async_horizontal"
    ("vertical" and "horizontal" there are a ``RuntimeError``, as FlashInfer's multi-token
    launcher built for sm_90 raises).

    ``sr_rule`` (keyword-only, not one of FlashInfer's arguments): the fp32 -> fp16 conversion
    of stochastic rounding, "0.7.2" (the default: FlashInfer 0.7.2's, what engines pin) or
    "0.7.4" (FlashInfer 0.7.4's: Inf stays Inf, NaN stays NaN, finite values past 65504
    saturate to Inf, values below 2^-14 round stochastically onto fp16 subnormals). The random
    bits are the same; the two agree for every finite result of magnitude at least 2^-14.
    "0.7.4" runs the crate's generic kernel (slower than the compiled-in kernels of the hot
    shapes); without ``rand_seed`` it changes nothing.

    Errors, each naming the argument first, with the class FlashInfer raises for that kind of
    problem: ``RuntimeError`` for shapes, dtypes, strides and devices (FlashInfer's C++ checks),
    ``ValueError`` for option values and conflicts and for the ``rand_seed`` tensor's element
    count, dtype and device (FlashInfer's Python checks), ``TypeError`` for a ``rand_seed`` that
    is neither a tensor nor a :class:`FusedSeed`. Not served (``NotImplementedError`` naming
    it): ``state_scale`` with a float state, decode scales of another dtype than float32,
    ``intermediate_state_scales`` without ``state_scale``, "horizontal" with an int16 state
    without scales. Nothing is launched when a check fails.

    ``backend``: "auto", "flashinfer" and "cake" all run the crate's kernels (FlashInfer's "cake"
    is an opt-in sm100 backend that falls back to FlashInfer's kernels on every other GPU, and
    there its results are FlashInfer's).
    """
    # What Python must do before the extension can take the call, in FlashInfer's order: the
    # seed's kind, then names -> the C ABI's enumerations (an unknown name: ValueError, as
    # FlashInfer's).
    fused = None
    if isinstance(rand_seed, FusedSeed):
        fused, rand_seed = rand_seed._prefetcher, None
    elif rand_seed is not None and not isinstance(rand_seed, torch.Tensor):
        raise TypeError(
            f"rand_seed: expected a one-element int64 CUDA tensor or a FusedSeed, got "
            f"{type(rand_seed).__name__}"
        )
    try:
        algo = _ALGORITHMS[algorithm]
    except (KeyError, TypeError):
        raise ValueError(
            f'algorithm: expected "auto", "simple", "vertical", "horizontal" or '
            f'"async_horizontal", got {algorithm!r}'
        ) from None
    if backend not in _BACKENDS:
        raise ValueError(f'backend: expected "auto", "flashinfer" or "cake", got {backend!r}')
    try:
        rule = _SR_RULES[sr_rule]
    except (KeyError, TypeError):
        raise ValueError(f'sr_rule: expected "0.7.2" or "0.7.4", got {sr_rule!r}') from None
    if out is None:
        out = torch.empty_like(x)

    args = (
        state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus), state_batch_indices, pad_slot_id,
        state_scale, out, bool(disable_state_update), intermediate_states_buffer,
        intermediate_state_indices, intermediate_state_scales, rand_seed, philox_rounds,
        cache_steps, algo, dst_state_batch_indices, cu_seqlens, num_accepted_tokens, rule,
    )
    if fused is not None:
        fused._impl.ssu_fused(*args)
    elif _traced(state):
        torch.ops.mamba_ssu.selective_state_update(*args)
    else:
        _C.selective_state_update(*args)
    return out
