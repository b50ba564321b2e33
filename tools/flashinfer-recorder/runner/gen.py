"""The integer input generator of the conformance data (tests/data/flashinfer_ssu/README.md §4).

Every floating-point input of a case is a pure function of (gen_seed, tag, storage element), so
a block stored by hash only can be rebuilt bit for bit. The same generator is
`tests/common/mod.rs` (`gen`) in Rust. numpy is used when it is installed; the pure-Python
path gives the same bytes (tests/test_gen.py checks both against the recorded blocks).
"""

import struct

try:  # numpy is optional: the pure-Python path below is the fallback.
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the host
    _np = None

MASK = (1 << 64) - 1
SEED_MUL = 0x632BE59BD9B4E019
TAG_MUL = 0xD1B54A32D192ED03
GOLDEN = 0x9E3779B97F4A7C15

TAGS = {
    "state": 1,
    "x": 2,
    "dt": 3,
    "dt_bias": 4,
    "A": 5,
    "B": 6,
    "C": 7,
    "D": 8,
    "z": 9,
    "intermediate_states_buffer": 10,
    # The int16 block-scaled state (FlashInfer's `state_scale`): a state of dtype int16 takes
    # tag 11 instead of 1, its decode scales tag 12; the multi-token `intermediate_state_scales`
    # are poison like the intermediate buffer (every byte 0xFF: a float32 NaN).
    "state_int16": 11,
    "state_scale": 12,
    "intermediate_state_scales": 13,
}
#: Tags whose storages are poison (every byte 0xFF), not values.
POISON_TAGS = (10, 13)
KINDS = {
    1: "gauss_int*2^-16",
    2: "gauss_int*2^-15",
    9: "gauss_int*2^-15",
    6: "gauss_int*2^-17",
    7: "gauss_int*2^-17",
    3: "((r%97)-64)/32",
    4: "((r%33)-16)/64",
    8: "1+((r%33)-16)/64",
    5: "-(512+(r&511))*2^(((r>>9)%5)-2-9)",
    10: "const_bits_0xFFFF",
    11: "(r%65535)-32767",
    12: "(1024+(r&1023))*2^(((r>>10)%6)-31)",
    13: "const_bits_0xFF",
}
ELEM_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "int16": 2, "int32": 4, "int64": 8}


def mix64(z):
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def stream_seed(gen_seed, tag):
    return (gen_seed * SEED_MUL + tag * TAG_MUL) & MASK


def value(tag, r):
    """The exact value (a Python float, exact in fp32) of element word r for tensor tag."""
    g = (r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48) - 131070
    if tag == 1:
        return g * 2.0**-16
    if tag in (2, 9):
        return g * 2.0**-15
    if tag in (6, 7):
        return g * 2.0**-17
    if tag == 3:
        return ((r % 97) - 64) / 32.0
    if tag == 4:
        return ((r % 33) - 16) / 64.0
    if tag == 8:
        return 1.0 + ((r % 33) - 16) / 64.0
    if tag == 5:
        return -float(512 + (r & 511)) * 2.0 ** (((r >> 9) % 5) - 2 - 9)
    if tag == 11:  # an int16 state element: every value but -32768 (FlashInfer writes none)
        return float((r % 65535) - 32767)
    if tag == 12:  # a positive decode scale in [2^-21, 2^-15): 11 significant bits
        return float(1024 + (r & 1023)) * 2.0 ** (((r >> 10) % 6) - 31)
    raise ValueError(f"unknown generator tag {tag}")


def _bf16_bits(f32_bits):
    # Round to nearest even on the fp32 bits (no NaN or infinity is generated).
    return ((f32_bits + 0x7FFF + ((f32_bits >> 16) & 1)) >> 16) & 0xFFFF


def _block_bytes_py(gen_seed, tag, dtype, start, n):
    s0 = stream_seed(gen_seed, tag)
    out = bytearray()
    for i in range(start, start + n):
        v = value(tag, mix64((s0 + (i + 1) * GOLDEN) & MASK))
        if dtype == "float32":
            out += struct.pack("<f", v)
        elif dtype == "float16":
            out += struct.pack("<e", v)  # IEEE round-to-nearest-even, subnormals kept
        elif dtype == "bfloat16":
            (b,) = struct.unpack("<I", struct.pack("<f", v))
            out += struct.pack("<H", _bf16_bits(b))
        elif dtype == "int16" and tag == 11:
            out += struct.pack("<h", int(v))
        else:
            raise ValueError(f"the generator makes no {dtype} values")
    return bytes(out)


def _block_bytes_np(gen_seed, tag, dtype, start, n):
    np = _np
    with np.errstate(over="ignore"):
        i = np.arange(start + 1, start + n + 1, dtype=np.uint64)
        z = np.uint64(stream_seed(gen_seed, tag)) + i * np.uint64(GOLDEN)
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        r = z ^ (z >> np.uint64(31))
    m16 = np.uint64(0xFFFF)
    g = (
        (r & m16) + ((r >> np.uint64(16)) & m16) + ((r >> np.uint64(32)) & m16) + (r >> np.uint64(48))
    ).astype(np.int64) - 131070
    if tag == 1:
        v = g.astype(np.float64) * 2.0**-16
    elif tag in (2, 9):
        v = g.astype(np.float64) * 2.0**-15
    elif tag in (6, 7):
        v = g.astype(np.float64) * 2.0**-17
    elif tag == 3:
        v = ((r % np.uint64(97)).astype(np.float64) - 64.0) / 32.0
    elif tag == 4:
        v = ((r % np.uint64(33)).astype(np.float64) - 16.0) / 64.0
    elif tag == 8:
        v = 1.0 + ((r % np.uint64(33)).astype(np.float64) - 16.0) / 64.0
    elif tag == 5:
        m = (np.uint64(512) + (r & np.uint64(511))).astype(np.float64)
        e = ((r >> np.uint64(9)) % np.uint64(5)).astype(np.int64) - 11
        v = -np.ldexp(m, e)
    elif tag == 11:
        q = (r % np.uint64(65535)).astype(np.int64) - 32767
        return q.astype("<i2").tobytes()  # block_bytes asks for dtype int16 only
    elif tag == 12:
        m = (np.uint64(1024) + (r & np.uint64(1023))).astype(np.float64)
        e = ((r >> np.uint64(10)) % np.uint64(6)).astype(np.int64) - 31
        v = np.ldexp(m, e)
    else:
        raise ValueError(f"unknown generator tag {tag}")
    f32 = v.astype(np.float32)  # exact: every value fits fp32
    if dtype == "float32":
        return f32.astype("<f4").tobytes()
    if dtype == "float16":
        return f32.astype("<f2").tobytes()
    if dtype == "bfloat16":
        b = f32.view(np.uint32).astype(np.uint64)
        h = ((b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16))
        return h.astype("<u2").tobytes()
    raise ValueError(f"the generator makes no {dtype} values")


def block_bytes(gen_seed, tag, dtype, start, n, use_numpy=None):
    """Storage elements [start, start + n) of tensor `tag` as little-endian bytes of dtype."""
    if tag in POISON_TAGS:
        return b"\xff" * (n * ELEM_SIZE[dtype])
    if (dtype == "int16") != (tag == 11):
        raise ValueError(f"the generator makes int16 values with tag 11 only (tag {tag}, dtype {dtype})")
    if use_numpy is None:
        use_numpy = _np is not None
    if use_numpy:
        return _block_bytes_np(gen_seed, tag, dtype, start, n)
    return _block_bytes_py(gen_seed, tag, dtype, start, n)


def values_bytes(values, dtype, start=0, n=None):
    """Inline integer values (index tensors, seeds) as little-endian bytes."""
    vals = values[start : len(values) if n is None else start + n]
    fmt = {"int32": "<i", "int64": "<q"}[dtype]
    bits = 32 if dtype == "int32" else 64
    # Values may be written unsigned (a seed above 2^63): keep the low bits, as a cast does.
    wrap = [((int(v) + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1)) for v in vals]
    return b"".join(struct.pack(fmt, v) for v in wrap)


def have_numpy():
    return _np is not None
