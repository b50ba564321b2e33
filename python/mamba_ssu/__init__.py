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
    "ssu_mode",
    "SeedPrefetcher",
    "FusedSeed",
    "draw_seeds",
    "MAX_SEEDS_PER_DRAW",
    "MTP_MAX_TOKENS",
]

#: Most seeds one batched draw writes.
MAX_SEEDS_PER_DRAW = _C.MAX_SEEDS_PER_DRAW
#: Most tokens per sequence of one multi-token call (T, or cache_steps in the varlen form).
MTP_MAX_TOKENS = _C.MTP_MAX_TOKENS

# FlashInfer's algorithm names -> the crate's mamba_ssu_algorithm values. "async_horizontal" is
# served by FlashInfer's simple kernel, whose results it therefore has.
_ALGORITHMS = {"auto": 0, "simple": 1, "vertical": 2, "async_horizontal": 1}
# The stochastic-rounding conversion of a FlashInfer release -> mamba_ssu_sr_rule.
_SR_RULES = {"0.7.2": 0, "0.7.4": 1}


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
    the rest of the process.
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

        Inside it the first N fused calls are chained: only the first derives its seed in the
        kernel, each call also stores the next call's seed, and the next call reads it — the
        10-round seed derivation leaves the critical path of every layer but the first. Values
        are the stock sequence whatever happens in between (other RNG use, another stream, a
        failed call: the next call derives its own seed again). All fused calls of the forward
        must run on one stream, each consumed by its SSU before the next is requested (the SSU
        call does both). Works eagerly and inside a ``torch.cuda.graph`` capture.
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


def draw_seeds(out: torch.Tensor) -> torch.Tensor:
    """Fills the int64 CUDA tensor ``out`` (n,) with n consecutive stock draws of its device's
    default generator — ``out[k]`` equals the k-th of n ``torch.randint(0, 2**32, (1,))`` calls —
    in one launch, and advances the generator as those n calls would. Graph-safe. Returns out."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out: expected an int64 CUDA tensor, got {type(out).__name__}")
    if out.dtype != torch.int64:
        raise TypeError(f"out: expected int64, got {out.dtype}")
    if out.dim() != 1:
        raise ValueError(f"out: expected 1 dimensions, got shape {tuple(out.shape)}")
    if out.device.type not in ("cuda", "meta"):
        raise ValueError(f"out: expected a CUDA tensor, got one on {out.device}")
    torch.ops.mamba_ssu.draw_seeds(out)
    return out


def _unsupported(name: str, why: str):
    raise NotImplementedError(f"{name}: {why}")


def ssu_mode(x_dim: int, cu_seqlens_given: bool, cache_steps: int) -> str:
    """Which path FlashInfer 0.7.2's Python wrapper takes for an ``x`` of ``x_dim`` dimensions
    (as passed, before any unsqueeze): ``"varlen"`` when ``cu_seqlens`` is given and x is 3-D
    (total_tokens, nheads, dim); else ``"multi"`` (fixed length) when x is 4-D (batch, T,
    nheads, dim) or when ``cache_steps >= 1`` (a 3-D x is then one token per sequence, a 2-D x
    one token of one head); else ``"single"``."""
    if cu_seqlens_given and x_dim == 3:
        return "varlen"
    if x_dim == 4 or (cache_steps >= 1 and x_dim in (2, 3)):
        return "multi"
    return "single"


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

    Which path (FlashInfer's rule, :func:`ssu_mode`): ``cu_seqlens`` given with a 3-D x is the
    varlen multi-token form; else a 4-D x, or ``cache_steps >= 1`` (a 3-D x gets a token
    dimension of 1), is the fixed-length multi-token form; anything else is single token.

    Single-token shapes (FlashInfer's; 2-D/1-D forms are unsqueezed to one head as FlashInfer
    does): state (slots, nheads, dim, dstate) with the inner three dims contiguous; x, z, out
    (batch, nheads, dim); dt (batch, nheads, dim) with strides (any, 1, 0); A (nheads, dim,
    dstate) float32 with strides (1, 0, 0); B, C (batch, ngroups, dstate); D, dt_bias (nheads,
    dim) with strides (1, 0); state_batch_indices / dst_state_batch_indices int32 or int64,
    (batch,) or (batch, T) (column 0 is used). ``state`` is updated in place (unless
    ``disable_state_update``; slots equal to ``pad_slot_id`` are read as zeros and not written)
    and ``out`` is returned (allocated like x when not given).

    Multi-token shapes: fixed length x, z, out (batch, T, nheads, dim), dt the same with strides
    (any, any, 1, 0), B, C (batch, T, ngroups, dstate); varlen x, z, out (total_tokens, nheads,
    dim), dt with strides (any, 1, 0), B, C (total_tokens, ngroups, dstate), ``cu_seqlens``
    (batch + 1,) and ``cache_steps`` = the longest sequence (1..=16). Read slot of sequence b:
    ``state_batch_indices[b]``, or with a 2-D index and ``num_accepted_tokens``
    ``state_batch_indices[b, max(num_accepted_tokens[b] - 1, 0)]``. One write mode:
    ``intermediate_states_buffer`` (entries, cache_steps, nheads, dim, dstate) (token t of
    sequence b to entry ``intermediate_state_indices[b]``, or the read slot, step t; the state
    is not written), a 2-D ``dst_state_batch_indices`` (batch, >= T) (token t to slot
    ``dst[b, t]``), or neither (the last token's state to the read slot unless
    ``disable_state_update``). Every index tensor has one integer dtype (int32 or int64).

    Stochastic rounding of an fp16 state: ``rand_seed`` a one-element int64 tensor on the
    state's device (read by the kernel, never by the host) with ``philox_rounds`` 1..10, or a
    :class:`FusedSeed` (the kernel derives the stock seed itself; chained inside
    :meth:`SeedPrefetcher.fused_forward`); without ``rand_seed`` the state is rounded to nearest.
    ``algorithm``: "auto", "simple", "vertical" (FlashInfer's random mappings;
    "async_horizontal" is served as "simple"); the multi-token path has one layout, served for
    "auto", "simple" and "async_horizontal".

    ``sr_rule`` (keyword-only, not one of FlashInfer's arguments): the fp32 -> fp16 conversion
    of stochastic rounding, "0.7.2" (the default: FlashInfer 0.7.2's, what engines pin) or
    "0.7.4" (FlashInfer 0.7.4's: Inf stays Inf, NaN stays NaN, finite values past 65504
    saturate to Inf, values below 2^-14 round stochastically onto fp16 subnormals). The random
    bits are the same; the two agree for every finite result of magnitude at least 2^-14.
    "0.7.4" runs the crate's generic kernel (slower than the compiled-in kernels of the hot
    shapes); without ``rand_seed`` it changes nothing.

    Not served (each raises NotImplementedError naming it): ``state_scale`` / int16 state,
    ``intermediate_state_scales``, ``algorithm="horizontal"``, ``backend="cake"``.
    """
    # Arguments this package does not serve: never silently ignored.
    if state_scale is not None:
        _unsupported("state_scale", "int16 state with block scaling is not supported")
    if state.dtype == torch.int16:
        _unsupported("state", "int16 state is not supported")
    if intermediate_state_scales is not None:
        _unsupported("intermediate_state_scales", "an int16 intermediate buffer with block scaling is not supported")
    if backend not in ("auto", "flashinfer"):
        if backend == "cake":
            _unsupported("backend", '"cake" (an sm100 backend) is not supported')
        raise ValueError(f'backend: expected "auto", "flashinfer" or "cake", got {backend!r}')
    try:
        algo = _ALGORITHMS[algorithm]
    except (KeyError, TypeError):
        if algorithm == "horizontal":
            _unsupported("algorithm", '"horizontal" is not supported (use "auto", "simple" or "vertical")')
        raise ValueError(
            f'algorithm: expected "auto", "simple", "vertical", "horizontal" or '
            f'"async_horizontal", got {algorithm!r}'
        ) from None
    try:
        rule = _SR_RULES[sr_rule]
    except (KeyError, TypeError):
        raise ValueError(f'sr_rule: expected "0.7.2" or "0.7.4", got {sr_rule!r}') from None
    if intermediate_states_buffer is not None and dst_state_batch_indices is not None:
        raise ValueError("intermediate_states_buffer and dst_state_batch_indices are mutually exclusive")
    if isinstance(cache_steps, bool) or not isinstance(cache_steps, int):
        raise TypeError(f"cache_steps: expected an int, got {type(cache_steps).__name__}")
    if cache_steps < 0:
        raise ValueError(f"cache_steps: expected >= 0, got {cache_steps}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a tensor, got {type(x).__name__}")

    mode = ssu_mode(x.dim(), cu_seqlens is not None, cache_steps)
    multi = mode != "single"
    if not multi:
        # Multi-token arguments on the single-token path: refused, never ignored.
        for name, value in (
            ("intermediate_states_buffer", intermediate_states_buffer),
            ("intermediate_state_indices", intermediate_state_indices),
            ("num_accepted_tokens", num_accepted_tokens),
        ):
            if value is not None:
                raise ValueError(
                    f"{name}: only the multi-token path takes it (a 4-D x, cache_steps >= 1, or "
                    f"cu_seqlens with a 3-D x), got a {x.dim()}-D x with cache_steps {cache_steps}"
                )
        if cu_seqlens is not None:
            raise ValueError(
                f"cu_seqlens: the varlen form needs a 3-D x (total_tokens, nheads, dim), got "
                f"shape {tuple(x.shape)}"
            )
    elif mode == "multi" and cu_seqlens is not None:
        raise ValueError(
            f"cu_seqlens: the varlen form needs a 3-D x (total_tokens, nheads, dim), got shape "
            f"{tuple(x.shape)}"
        )
    if mode == "varlen" and cache_steps < 1:
        raise ValueError(
            "cache_steps: the varlen form (cu_seqlens) needs cache_steps >= 1, the longest "
            f"sequence, got {cache_steps}"
        )
    if multi and algo == 2:
        raise ValueError(
            f'algorithm: the multi-token path has one layout ("auto" or "simple"), got {algorithm!r}'
        )

    # FlashInfer's normalisation: one head fewer dimension is unsqueezed; with cache_steps >= 1
    # (outside the varlen form) a (batch, nheads, dim) x, dt, B, C or z gets a token dimension
    # of 1 (each tensor on its own: with a 4-D x and cache_steps 0 nothing else is unsqueezed).
    if state.dim() == 3:
        state = state.unsqueeze(1)
    if A.dim() == 2:
        A = A.unsqueeze(0)
    if D is not None and D.dim() == 1:
        D = D.unsqueeze(0)
    if dt_bias is not None and dt_bias.dim() == 1:
        dt_bias = dt_bias.unsqueeze(0)
    if mode != "varlen":
        per_token = cache_steps >= 1

        def norm(t):
            if t is None:
                return None
            if t.dim() == 2:
                t = t.unsqueeze(1)
            if per_token and t.dim() == 3:
                t = t.unsqueeze(1)
            return t

        x, dt, B, C, z = norm(x), norm(dt), norm(B), norm(C), norm(z)

    fused = None
    if rand_seed is not None:
        if isinstance(rand_seed, FusedSeed):
            fused = rand_seed._prefetcher
        elif not isinstance(rand_seed, torch.Tensor):
            raise TypeError(
                f"rand_seed: expected a one-element int64 CUDA tensor or a FusedSeed, got "
                f"{type(rand_seed).__name__}"
            )
        else:
            if rand_seed.numel() != 1:
                raise ValueError(f"rand_seed: expected a single-element tensor, got numel={rand_seed.numel()}")
            if rand_seed.dtype != torch.int64:
                raise ValueError(f"rand_seed: expected dtype int64, got {rand_seed.dtype}")
        if isinstance(philox_rounds, bool) or not isinstance(philox_rounds, int):
            raise TypeError(f"philox_rounds: expected an int, got {type(philox_rounds).__name__}")
        if not 1 <= philox_rounds <= 10:
            raise ValueError(f"philox_rounds: expected 1..=10 when rand_seed is given, got {philox_rounds}")
        if state.dtype != torch.float16:
            raise ValueError(f"rand_seed: stochastic rounding needs a float16 state, got {state.dtype}")
        if fused is None and rand_seed.device.type not in ("cuda", "meta"):
            raise ValueError(f"rand_seed: expected a CUDA tensor, got one on {rand_seed.device}")
    else:
        philox_rounds = 0
    if not isinstance(pad_slot_id, int) or isinstance(pad_slot_id, bool):
        raise TypeError(f"pad_slot_id: expected an int, got {type(pad_slot_id).__name__}")

    result = out
    if out is None:
        out = result = torch.empty_like(x)
    elif out.dim() == x.dim() - 1 and (out.dim() == 2 or mode == "multi"):
        # The caller's out without the unsqueezed dimension (single head, or one token).
        out = out.unsqueeze(1)

    if multi:
        args = (
            state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus), state_batch_indices,
            dst_state_batch_indices, pad_slot_id, out, bool(disable_state_update),
            intermediate_states_buffer, intermediate_state_indices, cache_steps, cu_seqlens,
            num_accepted_tokens,
        )
        if fused is not None:
            fused._impl.ssu_fused_mtp(*args, philox_rounds, rule)
        elif torch.compiler.is_compiling() or state.device.type == "meta":
            torch.ops.mamba_ssu.selective_state_update_mtp(*args, rand_seed, philox_rounds, rule)
        else:
            _C.selective_state_update_mtp(*args, rand_seed, philox_rounds, rule)
        return result

    if fused is not None:
        fused._impl.ssu_fused(
            state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus), state_batch_indices,
            dst_state_batch_indices, pad_slot_id, out, bool(disable_state_update),
            philox_rounds, algo, rule,
        )
    elif torch.compiler.is_compiling() or state.device.type == "meta":
        torch.ops.mamba_ssu.selective_state_update(
            state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus), state_batch_indices,
            dst_state_batch_indices, pad_slot_id, out, bool(disable_state_update), rand_seed,
            philox_rounds, algo, rule,
        )
    else:
        _C.selective_state_update(
            state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus), state_batch_indices,
            dst_state_batch_indices, pad_slot_id, out, bool(disable_state_update), rand_seed,
            philox_rounds, algo, rule,
        )
    return result
