"""A drop-in for vLLM 0.33's FlashInfer SSU backend, on mamba-ssu's kernel and seeds.

:class:`MambaSSUBackend` has the call signature of vLLM 0.33's ``FlashInferSSUBackend.__call__``
and does what that call does — with stochastic rounding on, one stock ``torch.randint(0, 2**32,
(1,))`` draw per call handed to the SSU as ``rand_seed``, ``pad_slot_id = null_block_id`` — with
the crate's SSU behind it and the draw served by a per-device :class:`mamba_ssu.SeedPrefetcher`
(``seed_mode="next_seed"``, the default: the same values, one batched draw per N calls) or
derived by the kernel itself (``seed_mode="fused"``). ``seed_mode="stock"`` keeps vLLM's own
``torch.randint``. The same call serves vLLM's speculative-decoding verify step: varlen x with
``cu_seqlens``, a 2-D (N, 1 + num_spec) index passed as both read and destination index,
``num_accepted_tokens``, and ``cache_steps`` = the index width, which this backend derives as
vLLM's does (one seed per call, as for a single-token call). Registering it (package README,
"vLLM"):

    from vllm.model_executor.layers.mamba.ops import ssu_dispatch
    ssu_dispatch._BACKEND_REGISTRY[<the FlashInfer backend's enum member>] = MambaSSUBackend

vLLM itself was not run with this class: the signature and the semantics follow vLLM 0.33's
source as described in this repository's docs/torch-binding.md.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import SeedPrefetcher, selective_state_update


class MambaSSUBackend:
    """vLLM-style SSU backend: ``backend(state, x, dt, A, B, C, D, dt_bias, ...)``.

    Args (all keyword-optional, so that a registry may construct it with no arguments):
        stochastic_rounding: round an fp16 state stochastically (vLLM's
            ``enable_stochastic_rounding``).
        philox_rounds: Philox rounds of the rounding (vLLM's configured value, default 10).
        algorithm: FlashInfer's random mapping ("auto", "simple", "vertical").
        seed_mode: "next_seed" (default), "fused" or "stock" (see the module docs).
        num_layers: N of the per-device prefetcher (the model's SR layers; default 64 — any N
            gives the stock values, a smaller one than the forward's layer count only draws
            more often).
    """

    def __init__(self, *args, stochastic_rounding: bool = True, philox_rounds: int = 10,
                 algorithm: str = "auto", seed_mode: str = "next_seed", num_layers: int = 64,
                 **kwargs):
        if seed_mode not in ("next_seed", "fused", "stock"):
            raise ValueError(f'seed_mode: expected "next_seed", "fused" or "stock", got {seed_mode!r}')
        self.stochastic_rounding = stochastic_rounding
        self.philox_rounds = philox_rounds
        self.algorithm = algorithm
        self.seed_mode = seed_mode
        self.num_layers = num_layers
        self._prefetchers: dict[int, SeedPrefetcher] = {}

    def _prefetcher(self, device: torch.device) -> SeedPrefetcher:
        p = self._prefetchers.get(device.index)
        if p is None:
            p = self._prefetchers[device.index] = SeedPrefetcher(self.num_layers, device)
        return p

    def __call__(
        self,
        state: torch.Tensor,
        x: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        D: torch.Tensor,
        dt_bias: torch.Tensor,
        z: Optional[torch.Tensor] = None,
        dt_softplus: bool = False,
        state_batch_indices: Optional[torch.Tensor] = None,
        dst_state_batch_indices: Optional[torch.Tensor] = None,
        null_block_id: int = 0,
        out: Optional[torch.Tensor] = None,
        num_accepted_tokens: Optional[torch.Tensor] = None,
        cu_seqlens: Optional[torch.Tensor] = None,
        is_blackwell: bool = False,
    ) -> torch.Tensor:
        rand_seed = None
        if self.stochastic_rounding and state.dtype == torch.float16:
            if self.seed_mode == "stock":
                rand_seed = torch.randint(0, 2**32, (1,), device=state.device)
            elif self.seed_mode == "next_seed":
                rand_seed = self._prefetcher(state.device).next_seed()
            else:
                rand_seed = self._prefetcher(state.device).fused
        # vLLM's rule: the varlen multi-token form's longest sequence is the index width.
        cache_steps = 0
        if cu_seqlens is not None and state_batch_indices is not None:
            cache_steps = state_batch_indices.size(-1)
        return selective_state_update(
            state, x, dt, A, B, C, D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
            state_batch_indices=state_batch_indices, pad_slot_id=null_block_id, out=out,
            rand_seed=rand_seed, philox_rounds=self.philox_rounds, cache_steps=cache_steps,
            algorithm=self.algorithm, dst_state_batch_indices=dst_state_batch_indices,
            cu_seqlens=cu_seqlens, num_accepted_tokens=num_accepted_tokens,
        )
