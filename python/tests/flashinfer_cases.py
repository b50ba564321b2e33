"""Loader of the FlashInfer 0.7.2 single-token SSU reference data, for the Python package tests.

The data lives in ``tests/data/flashinfer_ssu`` of the repository (``manifest.json`` +
``fixtures.bin``, kept there xz-compressed as ``manifest.json.xz`` and ``fixtures.bin.xz``;
format described in that directory's README and in the README it points to).
This module turns it into calls of ``mamba_ssu.selective_state_update`` the way the Rust
conformance test (``tests/ssu_conformance.rs`` with ``tests/common/mod.rs``) turns it into calls
of the Rust API, so both replay exactly the same problems:

* ``Manifest`` parses the JSON and reads the bins (whole-file SHA-256 checked).
* Every input block is produced either from the bin or, for the "hash-only" blocks
  (``"bin": null``), regenerated: floating-point tensors with the counter-based integer
  generator of the README (section 4), index tensors and seeds from their inline ``values``.
  Every input block, stored or regenerated, is checked against the manifest's SHA-256.
* ``build_call`` assembles one recorded algorithm run on a torch device: every tensor is a
  strided view (``torch.as_strided``) over a flat storage holding the *whole* recorded storage
  (padding and unreferenced slots included), with exactly the recorded shape and strides, so
  the kernel sees the same layout FlashInfer saw (``dt`` strides ``(s, 1, 0)``, ``A`` strides
  ``(1, 0, 0)``, ``D``/``dt_bias`` strides ``(1, 0)``, the state's slot stride). ``out`` is
  poisoned with 0xFF bytes like the reference rig. It returns the keyword arguments of
  ``mamba_ssu.selective_state_update`` (FlashInfer's signature) plus the storages to compare.
* ``compare_output`` / ``outside_blocks_changed`` compare the storages after the call with the
  recorded outputs: element by element (bit patterns) for stored blocks, by SHA-256 for
  hash-only blocks, and every state element outside the recorded blocks against the input.

Only torch and the standard library are used (no numpy).
"""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

#: The repository's copy of the reference data, relative to this file.
DATA_DIR = (Path(__file__).resolve().parent / ".." / ".." / "tests" / "data" / "flashinfer_ssu").resolve()
#: The manifest of that copy.
DEFAULT_MANIFEST = DATA_DIR / "manifest.json"
#: Environment variable naming another manifest for the GPU test (its bins are read from the
#: manifest's directory), as the Rust conformance test honours it.
MANIFEST_ENV = "MAMBA_SSU_FLASHINFER_MANIFEST"

#: The algorithms every case was recorded with.
ALGORITHMS = ("simple", "vertical", "auto")

_U64 = (1 << 64) - 1

# ---------------------------------------------------------------------------------------------
# dtypes and bytes
# ---------------------------------------------------------------------------------------------

#: Manifest dtype name -> (torch dtype, bytes per element, same-size integer dtype for bit compares).
DTYPES: Dict[str, Tuple[torch.dtype, int, torch.dtype]] = {
    "float16": (torch.float16, 2, torch.int16),
    "bfloat16": (torch.bfloat16, 2, torch.int16),
    "float32": (torch.float32, 4, torch.int32),
    "int16": (torch.int16, 2, torch.int16),
    "int32": (torch.int32, 4, torch.int32),
    "int64": (torch.int64, 8, torch.int64),
}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a manifest dtype name."""
    return DTYPES[name][0]


def elem_size(name: str) -> int:
    """Bytes per element of a manifest dtype name."""
    return DTYPES[name][1]


def bits_dtype(name: str) -> torch.dtype:
    """The integer dtype of the same width, used to compare bit patterns exactly."""
    return DTYPES[name][2]


def _byte_view(t: torch.Tensor):
    """The elements of a tensor as a flat uint8 NumPy array on the CPU (row-major, no copy
    beyond the move to the CPU; any size, also past 2 GiB)."""
    t = t.detach().to("cpu").contiguous().reshape(-1)
    return t.view(torch.uint8).numpy()


def tensor_bytes(t: torch.Tensor) -> bytes:
    """The raw little-endian bytes of a tensor's elements in row-major order (copied to the CPU)."""
    if t.numel() == 0:
        return b""
    return _byte_view(t).tobytes()


def sha256_hex(data) -> str:
    """Lower-case hex SHA-256 of a bytes-like object or of a tensor's bytes (hashed from the
    tensor's memory in 256 MiB pieces: blocks past 2 GiB hash without a second copy)."""
    h = hashlib.sha256()
    if isinstance(data, torch.Tensor):
        if data.numel() > 0:
            view = memoryview(_byte_view(data))
            piece = 1 << 28
            for i in range(0, len(view), piece):
                h.update(view[i : i + piece])
        return h.hexdigest()
    h.update(data)
    return h.hexdigest()


def to_signed64(u: int) -> int:
    """An unsigned 64-bit value as the int64 with the same bits."""
    u &= _U64
    return u - (1 << 64) if u >= (1 << 63) else u


# ---------------------------------------------------------------------------------------------
# The input generator (README section 4), vectorised over int64 tensors with wrap-around
# ---------------------------------------------------------------------------------------------

#: Multiplier of the generator seed in a tensor's stream seed.
SEED_MUL = 0x632BE59BD9B4E019
#: Multiplier of the tensor tag in the stream seed.
TAG_MUL = 0xD1B54A32D192ED03
#: Per-element increment of the counter.
GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB

#: Tags of the generated tensors.
TAGS = {"state": 1, "x": 2, "dt": 3, "dt_bias": 4, "A": 5, "B": 6, "C": 7, "D": 8, "z": 9,
        "state_int16": 11, "state_scale": 12}
#: The ``kind`` string the manifest records for each tag.
KINDS = {
    1: "gauss_int*2^-16",
    2: "gauss_int*2^-15",
    3: "((r%97)-64)/32",
    4: "((r%33)-16)/64",
    5: "-(512+(r&511))*2^(((r>>9)%5)-2-9)",
    6: "gauss_int*2^-17",
    7: "gauss_int*2^-17",
    8: "1+((r%33)-16)/64",
    9: "gauss_int*2^-15",
    11: "(r%65535)-32767",
    12: "(1024+(r&1023))*2^(((r>>10)%6)-31)",
}


def mix64_int(z: int) -> int:
    """The SplitMix64 finaliser on a Python int (the scalar reference of ``mix64``)."""
    z &= _U64
    z ^= z >> 30
    z = (z * _MIX1) & _U64
    z ^= z >> 27
    z = (z * _MIX2) & _U64
    return z ^ (z >> 31)


def _srl(z: torch.Tensor, k: int) -> torch.Tensor:
    """Logical (unsigned) right shift of the 64-bit patterns held in an int64 tensor."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """The SplitMix64 finaliser on int64 tensors (bits as unsigned, multiplication wraps)."""
    z = z ^ _srl(z, 30)
    z = z * to_signed64(_MIX1)
    z = z ^ _srl(z, 27)
    z = z * to_signed64(_MIX2)
    return z ^ _srl(z, 31)


def stream_seed(gen_seed: int, tag: int) -> int:
    """The stream seed of tensor ``tag`` under generator seed ``gen_seed`` (unsigned)."""
    return (gen_seed * SEED_MUL + tag * TAG_MUL) & _U64


def raw_words(gen_seed: int, tag: int, start: int, n: int) -> torch.Tensor:
    """The 64-bit words (as int64) of storage elements ``[start, start + n)`` of tensor ``tag``."""
    i = torch.arange(start + 1, start + 1 + n, dtype=torch.int64)
    return mix64(i * to_signed64(GOLDEN) + to_signed64(stream_seed(gen_seed, tag)))


def gauss_int(r: torch.Tensor) -> torch.Tensor:
    """Sum of the four 16-bit fields of each word, centred: integers in [-131070, 131070]."""
    m = 0xFFFF
    return (r & m) + (_srl(r, 16) & m) + (_srl(r, 32) & m) + _srl(r, 48) - 131070


def _umod(r: torch.Tensor, m: int) -> torch.Tensor:
    """Each word, read as an unsigned 64-bit integer, modulo the small positive ``m``."""
    hi = _srl(r, 32)
    lo = r & 0xFFFFFFFF
    return ((hi % m) * ((1 << 32) % m) + lo % m) % m


def values_from_words(tag: int, r: torch.Tensor) -> torch.Tensor:
    """The exact fp32 values the generator gives tensor ``tag`` for the words ``r``."""
    f32 = torch.float32
    if tag in (1, 2, 9, 6, 7):  # state, x/z, B/C: scaled four-uniform sums (exact in fp32)
        scale = {1: 2.0**-16, 2: 2.0**-15, 9: 2.0**-15, 6: 2.0**-17, 7: 2.0**-17}[tag]
        return gauss_int(r).to(f32) * scale
    if tag == 3:  # dt in [-2, 1]
        return (_umod(r, 97) - 64).to(f32) / 32.0
    if tag == 4:  # dt_bias in [-0.25, 0.25]
        return (_umod(r, 33) - 16).to(f32) / 64.0
    if tag == 8:  # D around 1
        return 1.0 + (_umod(r, 33) - 16).to(f32) / 64.0
    if tag == 5:  # A in (-8, -0.25]
        mant = (512 + (r & 511)).to(f32)
        pow2 = torch.tensor([2.0**e for e in range(-11, -6)], dtype=f32)
        return -mant * pow2[_srl(r, 9) % 5]
    if tag == 11:  # an int16 state element: every int16 but -32768 (exact in fp32)
        return (_umod(r, 65535) - 32767).to(f32)
    if tag == 12:  # a float32 decode scale in [2^-21, 2^-15)
        mant = (1024 + (r & 1023)).to(f32)
        pow2 = torch.tensor([2.0**e for e in range(-31, -25)], dtype=f32)
        return mant * pow2[_srl(r, 10) % 6]
    raise ValueError(f"unknown generator tag {tag}")


def values_f32(gen_seed: int, tag: int, start: int, n: int) -> torch.Tensor:
    """The fp32 values of storage elements ``[start, start + n)`` of tensor ``tag``."""
    return values_from_words(tag, raw_words(gen_seed, tag, start, n))


def generated_block(gen_seed: int, tag: int, dtype: str, start: int, n: int) -> torch.Tensor:
    """Storage elements ``[start, start + n)`` of tensor ``tag`` rounded to ``dtype``
    (round-to-nearest-even, fp16 subnormals kept), as a CPU tensor of that dtype."""
    if (dtype == "int16") != (tag == 11):
        raise ValueError(f"the generator makes int16 values with tag 11 only (tag {tag}, {dtype})")
    if dtype not in ("float16", "bfloat16", "float32", "int16"):
        raise ValueError(f"the generator makes no {dtype} values")
    return values_f32(gen_seed, tag, start, n).to(torch_dtype(dtype))


# ---------------------------------------------------------------------------------------------
# Manifest structures (README section 3)
# ---------------------------------------------------------------------------------------------


@dataclass
class Block:
    """One materialised piece of a storage: elements ``[elem_offset, elem_offset + elems)``."""

    elem_offset: int
    elems: int
    nbytes: int
    sha256: str
    bin: Optional[str]
    byte_offset: Optional[int]

    @property
    def hash_only(self) -> bool:
        """Whether the block's bytes are given by their SHA-256 only."""
        return self.bin is None


@dataclass
class TensorDesc:
    """A strided view over a flat storage of ``storage_elems`` elements of ``dtype``."""

    name: str
    dtype: str
    shape: List[int]
    strides: List[int]
    storage_elems: int
    generator: Optional[Tuple[int, int, str]]  # (gen_seed, tag, kind)
    values: Optional[List[int]]  # inline values of index tensors and seeds
    blocks: List[Block]

    @property
    def elem_size(self) -> int:
        return elem_size(self.dtype)

    @property
    def storage_bytes(self) -> int:
        return self.storage_elems * self.elem_size

    def view_span(self) -> int:
        """One past the largest storage element the view reaches."""
        if any(n == 0 for n in self.shape):
            return 0
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides))


@dataclass
class ResultEntry:
    """One recorded algorithm run of a case."""

    algorithm_requested: str
    algorithm_used_by_rule: str
    bit_identical_to: List[str]
    outputs: Dict[str, TensorDesc]

    def output(self, name: str) -> TensorDesc:
        return self.outputs[name]


@dataclass
class Case:
    """One recorded problem (flags, sizes, inputs) with its runs."""

    name: str
    note: str
    philox_rounds: int
    state_dtype: str
    input_dtype: str
    weight_dtype: str
    a_dtype: str
    index_dtype: str
    batch: int
    nheads: int
    dim: int
    dstate: int
    ngroups: int
    state_cache_size: int
    state_stride_batch: int
    dt_softplus: bool
    update_state: bool
    disable_state_update: bool
    pad_slot_id: int
    seed: Optional[int]  # the int64 in rand_seed (signed), None when SR is off
    present: Dict[str, bool]
    gen_seed: int
    num_sms: int
    inputs: Dict[str, TensorDesc]
    results: List[ResultEntry] = field(default_factory=list)

    def input(self, name: str) -> Optional[TensorDesc]:
        return self.inputs.get(name)

    def is_present(self, name: str) -> bool:
        return bool(self.present.get(name, False))


def _parse_tensor(v: dict) -> TensorDesc:
    g = v.get("generator")
    generator = None if g is None else (int(g["gen_seed"]), int(g["tag"]), str(g.get("kind", "")))
    values = v.get("values")
    return TensorDesc(
        name=v["name"],
        dtype=v["dtype"],
        shape=[int(x) for x in v["shape"]],
        strides=[int(x) for x in v["strides"]],
        storage_elems=int(v["storage_elems"]),
        generator=generator,
        values=None if values is None else [int(x) for x in values],
        blocks=[
            Block(
                elem_offset=int(b["elem_offset"]),
                elems=int(b["elems"]),
                nbytes=int(b["nbytes"]),
                sha256=b["sha256"],
                bin=b.get("bin"),
                byte_offset=None if b.get("byte_offset") is None else int(b["byte_offset"]),
            )
            for b in v["blocks"]
        ],
    )


def _parse_seed(c: dict) -> Optional[int]:
    v = c.get("seed")
    if v is None:
        return None
    if isinstance(v, int):
        return to_signed64(v)
    hx = c.get("seed_hex")
    return None if hx is None else to_signed64(int(hx, 16))


def _parse_case(c: dict) -> Case:
    update = c.get("update_state")
    if update is None:
        update = not c["disable_state_update"]
    results = [
        ResultEntry(
            algorithm_requested=r["algorithm_requested"],
            algorithm_used_by_rule=r.get("algorithm_used_by_rule") or "",
            bit_identical_to=list(r.get("bit_identical_to") or []),
            outputs={t["name"]: _parse_tensor(t) for t in r["outputs"]},
        )
        for r in c["results"]
    ]
    inputs = [_parse_tensor(t) for t in c["inputs"]]
    names = [t.name for t in inputs]
    if len(set(names)) != len(names):
        raise ValueError(f"case {c['name']}: duplicate input names {names}")
    return Case(
        name=c["name"],
        note=c.get("note", ""),
        philox_rounds=int(c["philox_rounds"]),
        state_dtype=c["state_dtype"],
        input_dtype=c["input_dtype"],
        weight_dtype=c["weight_dtype"],
        a_dtype=c.get("A_dtype") or "float32",
        index_dtype=c.get("index_dtype") or "int32",
        batch=int(c["batch"]),
        nheads=int(c["nheads"]),
        dim=int(c["dim"]),
        dstate=int(c["dstate"]),
        ngroups=int(c["ngroups"]),
        state_cache_size=int(c["state_cache_size"]),
        state_stride_batch=int(c["state_stride_batch"]),
        dt_softplus=bool(c["dt_softplus"]),
        update_state=bool(update),
        disable_state_update=bool(c.get("disable_state_update", not update)),
        pad_slot_id=int(c["pad_slot_id"]),
        seed=_parse_seed(c),
        present={k: bool(v) for k, v in c["present"].items()},
        gen_seed=int(c["gen_seed"]),
        num_sms=int(c.get("num_sms") or 0),
        inputs={t.name: t for t in inputs},
        results=results,
    )


def read_maybe_xz(path: Path) -> bytes:
    """The bytes of ``path``, or the decompressed bytes of ``<path>.xz`` when ``path`` does not
    exist (the form ``tests/data`` keeps)."""
    path = Path(path)
    xz = path.with_name(path.name + ".xz")
    if not path.exists() and xz.exists():
        return lzma.decompress(xz.read_bytes(), format=lzma.FORMAT_XZ)
    return path.read_bytes()


class Manifest:
    """A parsed manifest and its bins.

    ``bins`` lists ``(file, bytes, sha256)`` as recorded; ``bin_data`` holds each bin's
    contents (read from the manifest's directory; the whole-file size and SHA-256 are checked
    when ``verify_bins`` is true).
    """

    def __init__(self, path: Path, verify_bins: bool = True):
        self.path = Path(path)
        self.json = json.loads(read_maybe_xz(self.path))
        if self.json.get("format") != "flashinfer-ssu-golden":
            raise ValueError(f"{self.path}: not a flashinfer-ssu-golden manifest")
        if self.json.get("byte_order") != "little":
            raise ValueError(f"{self.path}: byte order {self.json.get('byte_order')!r}")
        self.bins = [(b["file"], int(b["bytes"]), b["sha256"]) for b in self.json["bins"]]
        self.bin_data: Dict[str, bytearray] = {}
        for file, nbytes, sha in self.bins:
            data = bytearray(read_maybe_xz(self.path.parent / file))
            if verify_bins:
                if len(data) != nbytes:
                    raise ValueError(f"{file}: {len(data)} bytes, manifest says {nbytes}")
                if hashlib.sha256(data).hexdigest() != sha:
                    raise ValueError(f"{file}: SHA-256 differs from the manifest's")
            self.bin_data[file] = data
        self.cases: List[Case] = [_parse_case(c) for c in self.json["cases"]]
        self._pieces: Dict[Tuple, List[Tuple[int, torch.Tensor]]] = {}
        self._verified: set = set()

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(name)

    def runs(self) -> List[Tuple[Case, ResultEntry]]:
        """Every (case, recorded algorithm run), in manifest order."""
        return [(c, r) for c in self.cases for r in c.results]

    # -- blocks --------------------------------------------------------------------------------

    def stored_block(self, t: TensorDesc, b: Block) -> Optional[torch.Tensor]:
        """The elements of a block stored in a bin, as a CPU tensor of the descriptor's dtype
        (a view into the bin: clone before writing), or None for a hash-only block."""
        if b.bin is None:
            return None
        data = self.bin_data.get(b.bin)
        if data is None:
            raise ValueError(f"{t.name}: block refers to unknown bin {b.bin}")
        if b.byte_offset is None or b.byte_offset + b.nbytes > len(data):
            raise ValueError(f"{t.name}: block @{b.elem_offset} lies outside {b.bin}")
        if b.nbytes != b.elems * t.elem_size:
            raise ValueError(f"{t.name}: block @{b.elem_offset}: nbytes/elems mismatch")
        if b.elems == 0:
            return torch.empty(0, dtype=torch_dtype(t.dtype))
        return torch.frombuffer(data, dtype=torch_dtype(t.dtype), count=b.elems, offset=b.byte_offset)

    def stored_block_verified(self, t: TensorDesc, b: Block) -> Optional[torch.Tensor]:
        """As ``stored_block``, after checking the block's SHA-256 (once per block)."""
        x = self.stored_block(t, b)
        if x is None:
            return None
        key = (b.bin, b.byte_offset, b.nbytes)
        if key not in self._verified:
            data = self.bin_data[b.bin]
            got = hashlib.sha256(memoryview(data)[b.byte_offset : b.byte_offset + b.nbytes]).hexdigest()
            if got != b.sha256:
                raise ValueError(f"{t.name}: stored block @{b.elem_offset} differs from its SHA-256")
            self._verified.add(key)
        return x

    def input_block(self, t: TensorDesc, b: Block) -> torch.Tensor:
        """The elements of an input block (CPU tensor): from the bin, else regenerated (see
        ``regenerate_block``); either way checked against the block's SHA-256."""
        x = self.stored_block_verified(t, b)
        if x is not None:
            return x
        x = regenerate_block(t, b)
        if x is None:
            raise ValueError(f"input {t.name} block @{b.elem_offset} has no bin and cannot be regenerated")
        if sha256_hex(x) != b.sha256:
            raise ValueError(f"regenerated block of {t.name} @{b.elem_offset} differs from the manifest's hash")
        return x

    def input_pieces(self, t: TensorDesc) -> List[Tuple[int, torch.Tensor]]:
        """The materialised pieces of an input storage: ``(elem_offset, CPU tensor)``, sorted
        (elements outside them are zero). Cached per storage."""
        key = (t.name, t.dtype, t.storage_elems, t.generator, tuple((b.elem_offset, b.elems, b.sha256) for b in t.blocks))
        if key not in self._pieces:
            pieces = sorted(((b.elem_offset, self.input_block(t, b)) for b in t.blocks), key=lambda p: p[0])
            self._pieces[key] = pieces
        return self._pieces[key]

    def expected_blocks(self, t: TensorDesc) -> List[Tuple[Block, Optional[torch.Tensor]]]:
        """The blocks of a recorded output with their stored elements (hash-checked), or
        None for hash-only blocks."""
        return [(b, self.stored_block_verified(t, b)) for b in t.blocks]


def regenerate_block(t: TensorDesc, b: Block) -> Optional[torch.Tensor]:
    """Rebuilds an input block without the bin: with the generator when the descriptor names
    one, else from the inline ``values`` (index tensors and seeds, which list the whole
    storage). None when neither applies."""
    if t.generator is not None:
        gen_seed, tag, _kind = t.generator
        return generated_block(gen_seed, tag, t.dtype, b.elem_offset, b.elems)
    if t.values is None or len(t.values) != t.storage_elems:
        return None
    if t.dtype not in ("int32", "int64"):
        return None
    vals = t.values[b.elem_offset : b.elem_offset + b.elems]
    if t.dtype == "int64":
        vals = [to_signed64(v) for v in vals]
    return torch.tensor(vals, dtype=torch_dtype(t.dtype))


@functools.lru_cache(maxsize=None)
def load(path: Optional[str] = None) -> Manifest:
    """The manifest at ``path`` (default: the repository's copy), parsed once per process."""
    return Manifest(Path(path) if path else DEFAULT_MANIFEST)


def manifest_path_from_env() -> Optional[str]:
    """The manifest named by ``MAMBA_SSU_FLASHINFER_MANIFEST``, or None for the default copy."""
    p = os.environ.get(MANIFEST_ENV, "").strip()
    return p or None


def load_from_env_or_default() -> Manifest:
    """The manifest named by ``MAMBA_SSU_FLASHINFER_MANIFEST`` when set, else the default copy."""
    return load(manifest_path_from_env())


# ---------------------------------------------------------------------------------------------
# Building a call
# ---------------------------------------------------------------------------------------------


def auto_rule(batch: int, nheads: int, num_sms: int) -> str:
    """FlashInfer's ``auto`` choice on sm90: simple below ``2 * num_sms`` (batch x heads)."""
    return "simple" if batch * nheads < 2 * num_sms else "vertical"


def device_storage(m: Manifest, t: TensorDesc, device) -> torch.Tensor:
    """A flat tensor of ``t.storage_elems`` elements on ``device`` holding the input storage
    (materialised pieces copied in, zero elsewhere)."""
    s = torch.zeros(t.storage_elems, dtype=torch_dtype(t.dtype), device=device)
    for off, piece in m.input_pieces(t):
        s[off : off + piece.numel()].copy_(piece)
    return s


def strided_view(storage: torch.Tensor, t: TensorDesc) -> torch.Tensor:
    """The descriptor's view (shape, strides in elements, offset 0) over a flat storage."""
    if t.view_span() > storage.numel():
        raise ValueError(f"{t.name}: view reaches {t.view_span()} > storage {storage.numel()}")
    return torch.as_strided(storage, t.shape, t.strides, 0)


@dataclass
class PreparedCall:
    """One algorithm run ready to be launched.

    ``kwargs`` are the keyword arguments of ``mamba_ssu.selective_state_update`` (FlashInfer
    0.7.2's signature); ``storages`` maps every tensor name to the flat storage it views
    (``state`` and ``out`` are the ones compared after the call).
    """

    case: Case
    result: ResultEntry
    kwargs: Dict[str, object]
    storages: Dict[str, torch.Tensor]

    @property
    def label(self) -> str:
        return f"{self.case.name}/{self.result.algorithm_requested}"


#: Tensor arguments in FlashInfer's order; the first seven are always passed.
TENSOR_ARGS = ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias",
               "state_batch_indices", "dst_state_batch_indices", "rand_seed", "state_scale")


def build_call(m: Manifest, case: Case, result: ResultEntry, device) -> PreparedCall:
    """The tensors and flags of one recorded run on ``device``, as the Rust test passes them:

    * every input tensor is a view with the recorded shape and strides over its whole recorded
      storage; optional tensors (z, dt_bias, index tensors) only when the case passed them;
    * ``rand_seed`` (one int64) and ``philox_rounds`` only when stochastic rounding is on
      (FlashInfer turns SR off, i.e. forces 0 rounds, when ``rand_seed`` is None);
    * ``out`` is a fresh storage filled with 0xFF bytes, viewed with the recorded strides;
    * ``disable_state_update``, ``dt_softplus``, ``pad_slot_id`` and ``algorithm`` as recorded.
    """
    storages: Dict[str, torch.Tensor] = {}
    kwargs: Dict[str, object] = {}
    for name in TENSOR_ARGS:
        t = case.input(name)
        if t is None:
            continue
        if name == "rand_seed" and case.philox_rounds == 0:
            continue
        s = device_storage(m, t, device)
        storages[name] = s
        kwargs[name] = strided_view(s, t)
    for name in ("state", "x", "dt", "A", "B", "C", "D"):
        if name not in kwargs:
            raise ValueError(f"{case.name}: no input {name}")
    out_desc = result.output("out")
    out_storage = torch.empty(out_desc.storage_elems, dtype=torch_dtype(out_desc.dtype), device=device)
    out_storage.view(torch.uint8).fill_(0xFF)
    storages["out"] = out_storage
    kwargs["out"] = strided_view(out_storage, out_desc)
    kwargs["dt_softplus"] = case.dt_softplus
    kwargs["pad_slot_id"] = case.pad_slot_id
    kwargs["disable_state_update"] = case.disable_state_update
    if case.philox_rounds > 0:
        kwargs["philox_rounds"] = case.philox_rounds
    kwargs["algorithm"] = result.algorithm_requested
    return PreparedCall(case=case, result=result, kwargs=kwargs, storages=storages)


# ---------------------------------------------------------------------------------------------
# Comparing outputs
# ---------------------------------------------------------------------------------------------


def ulp_distance(dtype: str, got_bits: torch.Tensor, want_bits: torch.Tensor) -> float:
    """The largest distance in units in the last place between two equally long tensors of
    bit patterns (integer dtype of the element width): monotone sign-magnitude order, +0 and -0
    equal; inf when a NaN differs; absolute difference for integer dtypes."""
    g = got_bits.to(torch.int64)
    w = want_bits.to(torch.int64)
    if dtype in ("int32", "int64"):
        return float((g - w).abs().max().item()) if g.numel() else 0.0
    if dtype in ("float16", "bfloat16"):
        g, w = g & 0xFFFF, w & 0xFFFF
        sign, mag = 0x8000, 0x7FFF
        exp, man = (0x7F80, 0x7F) if dtype == "bfloat16" else (0x7C00, 0x3FF)
    else:
        g, w = g & 0xFFFFFFFF, w & 0xFFFFFFFF
        sign, mag, exp, man = 0x80000000, 0x7FFFFFFF, 0x7F800000, 0x7FFFFF

    def key(x):
        m_ = x & mag
        return torch.where((x & sign) != 0, -m_, m_)

    def nan(x):
        return ((x & exp) == exp) & ((x & man) != 0)

    if g.numel() == 0:
        return 0.0
    if bool((nan(g) | nan(w)).any()):
        return float("inf")
    return float((key(g) - key(w)).abs().max().item())


@dataclass
class Comparison:
    """Outcome of comparing one output storage with its recorded blocks."""

    name: str
    differing: int = 0  # differing elements of stored blocks
    max_ulp: float = 0.0
    hash_differs: int = 0  # hash-only blocks whose SHA-256 differs
    first: str = ""  # description of the first difference

    @property
    def ok(self) -> bool:
        return self.differing == 0 and self.hash_differs == 0

    def describe(self) -> str:
        if self.ok:
            return "ok"
        parts = []
        if self.differing:
            parts.append(f"{self.differing} differing elements (max {self.max_ulp:g} ulp)")
        if self.hash_differs:
            parts.append(f"{self.hash_differs} hash-only blocks differ")
        if self.first:
            parts.append(f"first: {self.first}")
        return "; ".join(parts)


def compare_output(m: Manifest, t: TensorDesc, got: torch.Tensor) -> Comparison:
    """Compares a flat storage after the call (any device) with the recorded output ``t``:
    stored blocks element by element on their bit patterns, hash-only blocks by SHA-256."""
    bd = bits_dtype(t.dtype)
    if got.numel() != t.storage_elems:
        raise ValueError(f"{t.name}: storage has {got.numel()} elements, recorded {t.storage_elems}")
    got_bits = got.view(bd)
    c = Comparison(name=t.name)
    for b, want in m.expected_blocks(t):
        have = got_bits[b.elem_offset : b.elem_offset + b.elems].to("cpu")
        if want is None:
            if sha256_hex(have) != b.sha256:
                c.hash_differs += 1
                if not c.first:
                    c.first = f"{t.name} block @{b.elem_offset} (hash only) differs"
            continue
        want_bits = want.view(bd)
        diff = have != want_bits
        n = int(diff.sum().item())
        if n:
            idx = diff.nonzero()
            if not c.first:
                i = int(idx[0].item())
                c.first = f"{t.name} storage element {b.elem_offset + i}"
            c.differing += n
            c.max_ulp = max(c.max_ulp, ulp_distance(t.dtype, have[diff], want_bits[diff]))
    return c


def _gaps(blocks: List[Block], n: int) -> List[Tuple[int, int]]:
    """The element ranges of ``[0, n)`` covered by no block."""
    out, pos = [], 0
    for lo, hi in sorted((b.elem_offset, b.elem_offset + b.elems) for b in blocks):
        if lo > pos:
            out.append((pos, lo))
        pos = max(pos, hi)
    if pos < n:
        out.append((pos, n))
    return out


_CHUNK = 1 << 28  # elements per reduction over long zero ranges


def outside_blocks_changed(m: Manifest, out_desc: TensorDesc, got: torch.Tensor, in_desc: TensorDesc) -> int:
    """Elements of a state storage after the call that lie outside every recorded output block
    and differ from the input storage (the recorded output leaves them unchanged by
    construction). Compared on the storage's own device."""
    bd = bits_dtype(out_desc.dtype)
    got_bits = got.view(bd)
    pieces = [(off, p.view(bd)) for off, p in m.input_pieces(in_desc)]
    changed = 0
    for lo, hi in _gaps(out_desc.blocks, out_desc.storage_elems):
        pos = lo
        for off, p in pieces:
            a, b = max(pos, off), min(hi, off + p.numel())
            if a >= b:
                continue
            for z0 in range(pos, a, _CHUNK):  # zero part before this piece
                changed += int(torch.count_nonzero(got_bits[z0 : min(a, z0 + _CHUNK)]).item())
            want = p[a - off : b - off].to(got.device)
            changed += int((got_bits[a:b] != want).sum().item())
            pos = b
        for z0 in range(pos, hi, _CHUNK):
            changed += int(torch.count_nonzero(got_bits[z0 : min(hi, z0 + _CHUNK)]).item())
    return changed
