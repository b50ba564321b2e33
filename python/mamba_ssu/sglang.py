"""sglang 0.5.23's FlashInfer SSU backend on mamba-ssu's kernel and seeds.

:class:`MambaSSUBackend` is an sglang SSU backend: where sglang is importable it subclasses
sglang's ``MambaSSUBackend`` (``sglang/kernels/ops/mamba/triton_ops/ssu_dispatch.py``), it is
built as sglang builds its backends (``backend_cls(enable_stochastic_rounding=...,
cache_philox_rounds=...)``, from ``--enable-mamba-cache-stochastic-rounding`` and
``--mamba-cache-philox-rounds``), has a ``name``, and its ``__call__`` has the signature of
sglang's ``FlashInferSSUBackend.__call__``. Each call does what that backend does, with the
crate's SSU in FlashInfer's place:

- ``retrieve_parent_token`` (EAGLE tree verification) is refused with ValueError, as sglang's
  FlashInfer backend refuses it;
- stochastic rounding exactly when ``enable_stochastic_rounding`` (sglang requires an fp16 SSM
  cache for it): one stock draw per call — ``torch.randint(0, 2**32, (1,))`` on the state's
  device — handed to the SSU as ``rand_seed``;
- ``philox_rounds = cache_philox_rounds or 10``; ``cache_steps`` None becomes 0; no algorithm
  argument (FlashInfer's "auto"); every other argument passed through; nothing returned.

Seeds by ``seed_mode`` "next_seed" (default), "fused" or "stock", as :mod:`mamba_ssu.vllm`.

:func:`register` puts the class in sglang's registry under ``"flashinfer"`` (sglang's
``--mamba-backend`` accepts only "triton" and "flashinfer"). Users do not call it: the
package's ``sglang.srt.plugins`` entry point (``mamba_ssu_plugins``) does, when
``MAMBA_SSU_SGLANG`` is set (package README, "sglang").
"""

from __future__ import annotations

import importlib
import logging
import os

import torch

import mamba_ssu
from mamba_ssu._seeds import SEED_MODES, EngineSeeds

try:  # sglang's base class, where sglang is installed.
    from sglang.kernels.ops.mamba.triton_ops.ssu_dispatch import (
        MambaSSUBackend as _SglangBackend,
    )

    SGLANG_IMPORTABLE = True
except ImportError:
    SGLANG_IMPORTABLE = False

    class _SglangBackend:
        """Stands in for sglang's abstract ``MambaSSUBackend`` where sglang is not installed."""


__all__ = ["MambaSSUBackend", "register", "SEED_MODES", "SGLANG_IMPORTABLE"]


# sglang configures the root logger; a name under its namespace for filtering.
logger = logging.getLogger("sglang.mamba_ssu")


def _default_seed_mode() -> str:
    from mamba_ssu_plugins import SGLANG_ENV, seed_mode_from_env

    return seed_mode_from_env(SGLANG_ENV) or "next_seed"


class MambaSSUBackend(_SglangBackend):
    """An sglang SSU backend: ``MambaSSUBackend(enable_stochastic_rounding=...,
    cache_philox_rounds=...)``, then ``backend(state, x, dt, A, B, C, D, z=..., dt_bias=...,
    ...)`` as sglang's FlashInfer backend.

    Args:
        enable_stochastic_rounding: sglang's ``--enable-mamba-cache-stochastic-rounding``.
        cache_philox_rounds: sglang's ``--mamba-cache-philox-rounds`` (0: 10 rounds).
        seed_mode: "next_seed", "fused" or "stock"; default: the mode ``MAMBA_SSU_SGLANG``
            names, else "next_seed".
        num_layers: N of the per-device prefetcher of "next_seed" (default 64).

    Raises:
        ValueError: an unknown seed mode; and, by the crate's C check
            (:func:`mamba_ssu.check_options`), Philox rounds below 1.
    """

    def __init__(
        self,
        *,
        enable_stochastic_rounding: bool = False,
        cache_philox_rounds: int = 0,
        seed_mode: str | None = None,
        num_layers: int = 64,
    ) -> None:
        if seed_mode is None:
            seed_mode = _default_seed_mode()
        self._seed = EngineSeeds(seed_mode, num_layers)
        self.seed_mode = seed_mode
        self.num_layers = num_layers
        self.stochastic_rounding = bool(enable_stochastic_rounding)
        self.philox_rounds = cache_philox_rounds or 10
        # What the crate's kernels do not serve fails here, at start-up, by the kernels' own
        # rules (the C check); sglang passes FlashInfer's default algorithm.
        mamba_ssu.check_options(philox_rounds=self.philox_rounds if self.stochastic_rounding else None)
        #: The SSU this backend calls (FlashInfer's signature); tests may substitute it.
        self._kernel = mamba_ssu.selective_state_update

    @property
    def name(self) -> str:
        """What sglang logs when it builds the backend."""
        return "mamba-ssu"

    def __call__(
        self,
        state: torch.Tensor,
        x: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        D: torch.Tensor | None = None,
        z: torch.Tensor | None = None,
        dt_bias: torch.Tensor | None = None,
        dt_softplus: bool = False,
        state_batch_indices: torch.Tensor | None = None,
        pad_slot_id: int = -1,
        out: torch.Tensor | None = None,
        disable_state_update: bool = False,
        intermediate_states_buffer: torch.Tensor | None = None,
        cache_steps: int | None = None,
        retrieve_parent_token: torch.Tensor | None = None,
        intermediate_state_indices: torch.Tensor | None = None,
    ) -> None:
        if retrieve_parent_token is not None:
            raise ValueError(
                "retrieve_parent_token: the FlashInfer SSU (and mamba-ssu's) does not serve EAGLE "
                "tree verification; use --mamba-backend triton for it"
            )
        rand_seed = self._seed(state.device) if self.stochastic_rounding else None
        self._kernel(
            state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
            state_batch_indices=state_batch_indices, pad_slot_id=pad_slot_id, out=out,
            disable_state_update=disable_state_update,
            intermediate_states_buffer=intermediate_states_buffer,
            cache_steps=0 if cache_steps is None else cache_steps,
            intermediate_state_indices=intermediate_state_indices,
            rand_seed=rand_seed, philox_rounds=self.philox_rounds,
        )


def register() -> None:
    """Makes sglang's ``--mamba-backend flashinfer`` build :class:`MambaSSUBackend`: replaces
    ``_BACKEND_REGISTRY["flashinfer"]`` in sglang's ``ssu_dispatch`` (read when the scheduler
    builds its backend) and logs one line naming the seed mode. Idempotent. Raises ImportError
    without sglang, and ValueError for a ``MAMBA_SSU_SGLANG`` value that names no seed mode."""
    if not SGLANG_IMPORTABLE:
        raise ImportError("mamba_ssu.sglang.register: sglang is not importable in this environment")
    # By name: register may run right after sglang's import of this module.
    ssu_dispatch = importlib.import_module("sglang.kernels.ops.mamba.triton_ops.ssu_dispatch")

    mode = _default_seed_mode()
    registry = ssu_dispatch._BACKEND_REGISTRY
    if registry.get("flashinfer") is MambaSSUBackend:
        return
    registry["flashinfer"] = MambaSSUBackend
    logger.info(
        "mamba-ssu %s is active: --mamba-backend flashinfer runs mamba-ssu's SSU (seeds: %s; "
        "process %d)", getattr(mamba_ssu, "__version__", "?"), mode, os.getpid(),
    )
