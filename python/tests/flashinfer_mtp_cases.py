"""Loader of the FlashInfer 0.7.2 multi-token SSU reference data, for the Python package tests.

The data lives in ``tests/data/flashinfer_ssu_mtp`` of the repository, in the format of the
single-token data (``flashinfer_cases`` reads that format; this module adds what the
multi-token cases need):

* the intermediate buffer's initial content, generator tag 10, is all ``0xFF`` bytes (the
  poison FlashInfer's recording rig filled it with) and is regenerated as such;
* each case's multi-token fields (``cache_steps``, ``varlen``, ``T``, the write mode and the
  write pattern the documented rules predict) are kept from the JSON;
* ``build_call`` assembles one recorded run as keyword arguments of
  ``mamba_ssu.selective_state_update`` exactly as FlashInfer's Python wrapper received them:
  fixed-length 4-D or varlen 3-D token tensors with their recorded strides, ``cu_seqlens``,
  the index tensors (1-D or 2-D as recorded), ``num_accepted_tokens``, the intermediate buffer
  and its indices, ``cache_steps``, ``disable_state_update``, ``pad_slot_id``, the seed.

The outputs compared after the call are the whole state storage, ``out`` and, where recorded,
the intermediate buffer (bit patterns for stored blocks, SHA-256 for hash-only ones).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Dict, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashinfer_cases as fc  # noqa: E402

#: The repository's copy of the multi-token reference data, relative to this file.
DATA_DIR = (Path(__file__).resolve().parent / ".." / ".." / "tests" / "data" / "flashinfer_ssu_mtp").resolve()
DEFAULT_MANIFEST = DATA_DIR / "manifest.json"
#: Environment variable naming another multi-token manifest for the GPU test.
MANIFEST_ENV = "MAMBA_SSU_FLASHINFER_MTP_MANIFEST"

#: Generator tag of the intermediate buffer's initial content, and the kind the manifest gives it.
POISON_TAG = 10
POISON_KIND = "const_bits_0xFFFF"
#: Generator tag of ``intermediate_state_scales``' initial content (an int16 buffer's scales):
#: every byte 0xFF as well.
SCALE_POISON_TAG = 13

#: The algorithms every multi-token case was recorded with (one kernel layout serves both).
ALGORITHMS = ("auto", "simple")

#: Tensor arguments of a multi-token call, FlashInfer's names.
TENSOR_ARGS = (
    "state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "state_batch_indices",
    "dst_state_batch_indices", "num_accepted_tokens", "cu_seqlens", "intermediate_states_buffer",
    "intermediate_state_indices", "rand_seed", "state_scale", "intermediate_state_scales",
)

#: The outputs a run records (the intermediate buffer only in the intermediate write mode).
OUTPUTS = ("state", "out", "intermediate_states_buffer", "state_scale", "intermediate_state_scales")


def poison_block(dtype: str, elems: int) -> torch.Tensor:
    """``elems`` elements of ``dtype`` whose bytes are all 0xFF (CPU tensor)."""
    n = elems * fc.elem_size(dtype)
    return torch.full((n,), 0xFF, dtype=torch.uint8).view(fc.torch_dtype(dtype))


def regenerate_block(t: fc.TensorDesc, b: fc.Block) -> Optional[torch.Tensor]:
    """An input block rebuilt without the bin: the poison for tags 10 and 13, else as single
    token."""
    if t.generator is not None and t.generator[1] in (POISON_TAG, SCALE_POISON_TAG):
        return poison_block(t.dtype, b.elems)
    return fc.regenerate_block(t, b)


class MtpManifest(fc.Manifest):
    """A multi-token manifest: the single-token reader plus the poison tag and the raw JSON of
    each case (``case_json``)."""

    def __init__(self, path: Path, verify_bins: bool = True):
        super().__init__(path, verify_bins)
        self.case_json: Dict[str, dict] = {c["name"]: c for c in self.json["cases"]}

    def input_block(self, t: fc.TensorDesc, b: fc.Block) -> torch.Tensor:
        x = self.stored_block_verified(t, b)
        if x is not None:
            return x
        x = regenerate_block(t, b)
        if x is None:
            raise ValueError(f"input {t.name} block @{b.elem_offset} has no bin and cannot be regenerated")
        if fc.sha256_hex(x) != b.sha256:
            raise ValueError(f"regenerated block of {t.name} @{b.elem_offset} differs from the manifest's hash")
        return x

    def cache_steps(self, case: fc.Case) -> int:
        return int(self.case_json[case.name]["cache_steps"])

    def varlen(self, case: fc.Case) -> bool:
        return bool(self.case_json[case.name]["varlen"])


@functools.lru_cache(maxsize=None)
def load(path: Optional[str] = None) -> MtpManifest:
    """The multi-token manifest at ``path`` (default: the repository's copy), parsed once."""
    return MtpManifest(Path(path) if path else DEFAULT_MANIFEST)


def load_from_env_or_default() -> MtpManifest:
    p = os.environ.get(MANIFEST_ENV, "").strip()
    return load(p or None)


def build_call(m: MtpManifest, case: fc.Case, result: fc.ResultEntry, device) -> fc.PreparedCall:
    """The tensors and flags of one recorded multi-token run on ``device``: every input a view
    with the recorded shape and strides over its whole recorded storage (optional tensors only
    when recorded; ``rand_seed`` and ``philox_rounds`` only with stochastic rounding), the
    intermediate buffer's storage poisoned as recorded, ``out`` a fresh storage of 0xFF bytes,
    ``cache_steps``, ``disable_state_update``, ``dt_softplus``, ``pad_slot_id`` and the
    algorithm as recorded."""
    storages: Dict[str, torch.Tensor] = {}
    kwargs: Dict[str, object] = {}
    for name in TENSOR_ARGS:
        t = case.input(name)
        if t is None:
            continue
        if name == "rand_seed" and case.philox_rounds == 0:
            continue
        s = fc.device_storage(m, t, device)
        storages[name] = s
        kwargs[name] = fc.strided_view(s, t)
    for name in ("state", "x", "dt", "A", "B", "C", "D"):
        if name not in kwargs:
            raise ValueError(f"{case.name}: no input {name}")
    out_desc = result.output("out")
    out_storage = torch.empty(out_desc.storage_elems, dtype=fc.torch_dtype(out_desc.dtype), device=device)
    out_storage.view(torch.uint8).fill_(0xFF)
    storages["out"] = out_storage
    kwargs["out"] = fc.strided_view(out_storage, out_desc)
    kwargs["cache_steps"] = m.cache_steps(case)
    kwargs["dt_softplus"] = case.dt_softplus
    kwargs["pad_slot_id"] = case.pad_slot_id
    kwargs["disable_state_update"] = case.disable_state_update
    if case.philox_rounds > 0:
        kwargs["philox_rounds"] = case.philox_rounds
    kwargs["algorithm"] = result.algorithm_requested
    return fc.PreparedCall(case=case, result=result, kwargs=kwargs, storages=storages)
