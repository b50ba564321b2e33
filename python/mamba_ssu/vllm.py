"""vLLM 0.33's FlashInfer SSU backend on mamba-ssu's kernel and seeds.

:class:`MambaSSUBackend` is a vLLM SSU backend: where vLLM is importable it subclasses vLLM's
``MambaSSUBackend`` (``vllm/model_executor/layers/mamba/ops/ssu_dispatch.py``), it is built
from vLLM's ``MambaConfig`` (``backend_cls(mamba_config)``, as ``initialize_mamba_ssu_backend``
does), has a ``name``, and its ``__call__`` has the signature of vLLM's
``FlashInferSSUBackend.__call__``. Each call does what that backend does, with the crate's SSU
in FlashInfer's place:

- stochastic rounding exactly when ``mamba_config.enable_stochastic_rounding`` (vLLM requires an
  fp16 SSM cache for it): one stock draw per call — ``torch.randint(0, 2**32, (1,))`` on the
  state's device — handed to the SSU as ``rand_seed``; without it the state is rounded to
  nearest;
- ``philox_rounds = mamba_config.stochastic_rounding_philox_rounds or 10``;
- ``algorithm = mamba_config.ssu_algorithm or "auto"``;
- ``pad_slot_id = null_block_id``; ``cache_steps`` = the index width
  (``state_batch_indices.size(-1)``) when ``cu_seqlens`` and the index are given (the varlen
  verify step of speculative decoding), else 0; every other argument passed through; nothing
  returned (the SSU writes ``out`` and the state in place); ``is_blackwell`` unused.

The draw is served by ``seed_mode``: ``"next_seed"`` (the default) from a per-device
:class:`mamba_ssu.SeedPrefetcher` (the same values and generator advance as the stock draw, one
batched draw per ``num_layers`` calls), ``"fused"`` derived by the SSU kernel itself (no seed
kernel), or ``"stock"`` by vLLM's own ``torch.randint``.

:func:`register` puts the class in vLLM's registry under ``MambaBackendEnum.FLASHINFER``. Users
do not call it: the package's ``vllm.general_plugins`` entry point (``mamba_ssu_plugins``) does,
in every vLLM process that builds an SSU backend, when ``MAMBA_SSU_VLLM`` is set (package
README, "vLLM").
"""

import importlib
import logging
import os
from typing import Optional

import torch

import mamba_ssu
from mamba_ssu._seeds import SEED_MODES, EngineSeeds

try:  # vLLM's base class and null block id, where vLLM is installed.
    from vllm.model_executor.layers.mamba.ops.ssu_dispatch import (
        MambaSSUBackend as _VllmBackend,
    )
    from vllm.v1.attention.backends.utils import NULL_BLOCK_ID

    VLLM_IMPORTABLE = True
except ImportError:
    VLLM_IMPORTABLE = False
    #: vLLM's null block (slot 0), the default ``null_block_id``.
    NULL_BLOCK_ID = 0

    class _VllmBackend:
        """Stands in for vLLM's abstract ``MambaSSUBackend`` where vLLM is not installed: it
        keeps the configuration as vLLM's does."""

        def __init__(self, mamba_config):
            self._mamba_config = mamba_config


__all__ = ["MambaSSUBackend", "register", "SEED_MODES", "VLLM_IMPORTABLE", "NULL_BLOCK_ID"]


# A child of vLLM's logger namespace, so that vLLM's logging configuration shows it.
logger = logging.getLogger("vllm.mamba_ssu")


def _default_seed_mode() -> str:
    from mamba_ssu_plugins import VLLM_ENV, seed_mode_from_env

    return seed_mode_from_env(VLLM_ENV) or "next_seed"


class MambaSSUBackend(_VllmBackend):
    """A vLLM SSU backend: ``MambaSSUBackend(mamba_config)``, then
    ``backend(state, x, dt, A, B, C, D, dt_bias, ...)`` as vLLM's FlashInfer backend.

    Args:
        mamba_config: vLLM's ``MambaConfig`` (or any object with its three attributes
            ``enable_stochastic_rounding``, ``stochastic_rounding_philox_rounds`` and
            ``ssu_algorithm``), read once here.
        seed_mode: "next_seed", "fused" or "stock" (module docs); default: the mode
            ``MAMBA_SSU_VLLM`` names, else "next_seed".
        num_layers: N of the per-device prefetcher of "next_seed" (default 64; any N gives the
            stock values, one smaller than the forward's SR layer count only draws more often).

    Raises:
        ValueError: an unknown seed mode; and, by the crate's C check (:func:`mamba_ssu.check_options`),
            Philox rounds below 1 or an unknown algorithm; at construction rather than at the
            first decode step. ("horizontal" is served: FlashInfer's horizontal kernel, for head
            dims that are a multiple of 64 up to 256; another head dim raises FlashInfer's
            RuntimeError at the call, as vLLM's FlashInfer backend does.)
    """

    def __init__(self, mamba_config, *, seed_mode: Optional[str] = None, num_layers: int = 64):
        super().__init__(mamba_config)
        if seed_mode is None:
            seed_mode = _default_seed_mode()
        self._seed = EngineSeeds(seed_mode, num_layers)
        self.seed_mode = seed_mode
        self.num_layers = num_layers
        # vLLM's FlashInfer backend's reading of the configuration.
        self.stochastic_rounding = bool(mamba_config.enable_stochastic_rounding)
        self.philox_rounds = mamba_config.stochastic_rounding_philox_rounds or 10
        self.algorithm = mamba_config.ssu_algorithm or "auto"
        # What the crate's kernels do not serve fails here, at start-up, by the kernels' own
        # rules (the C check on the decode step's form), not at the first decode step. (The
        # verify step's form takes fewer algorithms, as FlashInfer's: whether speculative
        # decoding runs is not in mamba_config, so that one is checked at its call.)
        mamba_ssu.check_options(
            algorithm=self.algorithm,
            philox_rounds=self.philox_rounds if self.stochastic_rounding else None,
        )
        #: The SSU this backend calls (FlashInfer's signature); tests may substitute it.
        self._kernel = mamba_ssu.selective_state_update

    @property
    def name(self) -> str:
        """What vLLM logs when it builds the backend ("Using mamba-ssu Mamba SSU backend.")."""
        return "mamba-ssu"

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
        null_block_id: int = NULL_BLOCK_ID,
        out: Optional[torch.Tensor] = None,
        num_accepted_tokens: Optional[torch.Tensor] = None,
        cu_seqlens: Optional[torch.Tensor] = None,
        is_blackwell: bool = False,
    ) -> None:
        rand_seed = self._seed(state.device) if self.stochastic_rounding else None
        self._kernel(
            state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
            state_batch_indices=state_batch_indices,
            dst_state_batch_indices=dst_state_batch_indices,
            cu_seqlens=cu_seqlens, num_accepted_tokens=num_accepted_tokens,
            cache_steps=state_batch_indices.size(-1)
            if cu_seqlens is not None and state_batch_indices is not None else 0,
            pad_slot_id=null_block_id, out=out, rand_seed=rand_seed,
            philox_rounds=self.philox_rounds, algorithm=self.algorithm,
        )


def register() -> None:
    """Makes vLLM's ``--mamba-backend flashinfer`` build :class:`MambaSSUBackend`: replaces
    ``_BACKEND_REGISTRY[MambaBackendEnum.FLASHINFER]`` in vLLM's ``ssu_dispatch`` (read when
    vLLM builds its backend, in the model runner's ``initialize_kv_cache``) and logs one line
    naming the seed mode the backend will use. Idempotent. Raises ImportError without vLLM, and
    ValueError for a ``MAMBA_SSU_VLLM`` value that names no seed mode."""
    if not VLLM_IMPORTABLE:
        raise ImportError("mamba_ssu.vllm.register: vLLM is not importable in this environment")
    from vllm.config.mamba import MambaBackendEnum

    # By name: register runs right after vLLM's import of this module, before its package
    # attribute is set.
    ssu_dispatch = importlib.import_module("vllm.model_executor.layers.mamba.ops.ssu_dispatch")

    mode = _default_seed_mode()
    registry = ssu_dispatch._BACKEND_REGISTRY
    if registry.get(MambaBackendEnum.FLASHINFER) is MambaSSUBackend:
        return
    registry[MambaBackendEnum.FLASHINFER] = MambaSSUBackend
    logger.info(
        "mamba-ssu %s is active: --mamba-backend flashinfer runs mamba-ssu's SSU (seeds: %s; "
        "process %d)", _version(), mode, os.getpid(),
    )


def _version() -> str:
    return getattr(mamba_ssu, "__version__", "?")
