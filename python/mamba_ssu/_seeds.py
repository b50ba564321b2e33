"""The seeds of an engine adapter (:mod:`mamba_ssu.vllm`, :mod:`mamba_ssu.sglang`): one place for
the seed modes both adapters offer."""

from __future__ import annotations

import torch

import mamba_ssu

#: "next_seed": :meth:`mamba_ssu.SeedPrefetcher.next_seed` (the stock values, one batched draw
#: per N calls); "fused": :attr:`mamba_ssu.SeedPrefetcher.fused` (the SSU derives the stock
#: value); "stock": the engine's own ``torch.randint(0, 2**32, (1,))`` per call.
SEED_MODES = ("next_seed", "fused", "stock")


class EngineSeeds:
    """One stochastic-rounding seed per SSU call in ``seed_mode``, from a
    :class:`mamba_ssu.SeedPrefetcher` of ``num_layers`` per device (made at the device's first
    call)."""

    def __init__(self, seed_mode: str, num_layers: int):
        if seed_mode not in SEED_MODES:
            raise ValueError(f'seed_mode: expected "next_seed", "fused" or "stock", got {seed_mode!r}')
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers: expected a positive int, got {num_layers!r}")
        self.seed_mode = seed_mode
        self.num_layers = num_layers
        self._prefetchers: dict = {}

    def __call__(self, device: torch.device):
        """The seed of one call on ``device``: a one-element int64 tensor, or a FusedSeed."""
        if self.seed_mode == "stock":
            return torch.randint(0, 2**32, (1,), device=device)
        p = self._prefetchers.get(device.index)
        if p is None:
            p = self._prefetchers[device.index] = mamba_ssu.SeedPrefetcher(self.num_layers, device)
        return p.next_seed() if self.seed_mode == "next_seed" else p.fused
