"""Entry points that let vLLM and sglang pick up mamba-ssu by installing it.

This module is what the engines' plugin loaders import in every process (vLLM: the
``vllm.general_plugins`` group, loaded by the API server, the engine core and every worker;
sglang: the ``sglang.srt.plugins`` group, loaded first in the scheduler process and in the
others). It imports nothing but the standard library: neither torch, nor the CUDA extension,
nor the engine.

Opt in with one environment variable per engine (unset, empty or ``0``: the plugin does
nothing):

- ``MAMBA_SSU_VLLM``: ``1`` (or ``next_seed``), ``fused`` or ``stock`` — vLLM's
  ``--mamba-backend flashinfer`` then runs :class:`mamba_ssu.vllm.MambaSSUBackend` with that
  seed mode;
- ``MAMBA_SSU_SGLANG``: the same values for sglang's ``--mamba-backend flashinfer``
  (:class:`mamba_ssu.sglang.MambaSSUBackend`).

When opted in, the engine's backend registry (a dict in its ``ssu_dispatch`` module, read when
the engine builds its SSU backend) gets the crate's class under the FlashInfer key. If that
module is already imported the entry is replaced at once; otherwise it is replaced right after
the module's own import, so that a process which never builds an SSU backend (vLLM's API
server, sglang's tokenizer) never loads the extension. The replacement logs one line through the
engine's logger namespace.
"""

from __future__ import annotations

import os
import sys

__all__ = ["register_vllm", "register_sglang", "seed_mode_from_env", "VLLM_ENV", "SGLANG_ENV"]

#: The variable that opts vLLM processes in.
VLLM_ENV = "MAMBA_SSU_VLLM"
#: The variable that opts sglang processes in.
SGLANG_ENV = "MAMBA_SSU_SGLANG"

VLLM_DISPATCH = "vllm.model_executor.layers.mamba.ops.ssu_dispatch"
SGLANG_DISPATCH = "sglang.kernels.ops.mamba.triton_ops.ssu_dispatch"

_MODES = {"1": "next_seed", "next_seed": "next_seed", "fused": "fused", "stock": "stock"}


def seed_mode_from_env(var: str):
    """The seed mode the variable ``var`` selects: None when it is unset, empty or ``0`` (not
    opted in); "next_seed" for ``1`` or ``next_seed``; "fused"; "stock". Any other value raises
    ValueError naming the variable (an opted-in process fails loudly rather than running the
    engine's own backend unnoticed)."""
    value = os.environ.get(var, "").strip()
    if value in ("", "0"):
        return None
    mode = _MODES.get(value.lower())
    if mode is None:
        raise ValueError(
            f'{var}={value!r}: expected "1" (or "next_seed"), "fused" or "stock"; unset or "0" '
            "leaves the engine's backend alone"
        )
    return mode


class _AfterImport:
    """A one-shot ``sys.meta_path`` finder: when ``name`` is imported, runs ``callback(module)``
    right after the module's own code, in the importing thread. The other finders locate the
    module; only its loader's ``exec_module`` is wrapped (on that loader instance), so the
    module's ``__loader__`` and ``__spec__`` stay the real ones."""

    def __init__(self, name: str, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot, and no recursion into this finder
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        callback = self.callback

        def exec_then_register(module):
            try:
                exec_module(module)
            finally:
                try:
                    del loader.exec_module
                except AttributeError:
                    pass
            callback(module)

        loader.exec_module = exec_then_register
        return spec


def _when_imported(name: str, callback) -> None:
    """Runs ``callback(module)`` now if ``name`` is imported, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    if not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))


def register_vllm() -> None:
    """The ``vllm.general_plugins`` entry point: with ``MAMBA_SSU_VLLM`` set, replaces vLLM's
    FlashInfer SSU backend by :class:`mamba_ssu.vllm.MambaSSUBackend` (see the module docs)."""
    if seed_mode_from_env(VLLM_ENV) is None:
        return

    def install(_module):
        from mamba_ssu import vllm as adapter

        adapter.register()

    _when_imported(VLLM_DISPATCH, install)


def register_sglang() -> None:
    """The ``sglang.srt.plugins`` entry point: with ``MAMBA_SSU_SGLANG`` set, replaces sglang's
    FlashInfer SSU backend by :class:`mamba_ssu.sglang.MambaSSUBackend` (see the module docs)."""
    if seed_mode_from_env(SGLANG_ENV) is None:
        return

    def install(_module):
        from mamba_ssu import sglang as adapter

        adapter.register()

    _when_imported(SGLANG_DISPATCH, install)
