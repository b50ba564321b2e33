"""Conformance of ``mamba_ssu.selective_state_update`` with FlashInfer 0.7.2's recorded outputs.

The recorded data (``tests/data/flashinfer_ssu``) holds single-token SSU problems run through
FlashInfer's own kernel on an H200 with each algorithm (simple, vertical, auto), with and
without stochastic rounding. ``flashinfer_cases`` turns each recorded run into a call of the
package's FlashInfer-compatible Python function, the same way the Rust conformance test
(``tests/ssu_conformance.rs``) does for the Rust API.

CPU tests (no GPU, no extension needed): the bins and every block are intact, the input
generator reproduces every generated block (including the hash-only blocks of the two
auto-rule cases), every case parses into a consistent description, the loader covers exactly
the cases and runs the Rust test covers, and the call builder produces tensors with exactly the
recorded storages, shapes, strides and flags; the output comparison itself is checked on
synthetic differences.

GPU test (``gpu`` fixture): every recorded run is replayed on the GPU and the whole state
storage and ``out`` must be byte-identical to FlashInfer's (SHA-256 for hash-only blocks); no
tolerance, exactly as the Rust test.
"""

from __future__ import annotations

import os
import random
import sys

import pytest
import torch

# The loader sits next to this file; make it importable under any pytest import mode.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashinfer_cases as fc  # noqa: E402

#: The cases of the repository's copy (README section 5); the Rust test replays each of them
#: with each of its recorded algorithms.
EXPECTED_CASES = (
    "pr10_h32_b1",
    "pr10_h8_b2_nullblock_noz",
    "pr10_h8_b3_dst_g1",
    "pr10_h8_b1_rawdt_nobias",
    "pr10_h8_b2_noupdate",
    "pr10_h1_b264_rule",
    "pr10_h1_b263_rule",
    "pr5_h32_b1",
    "pr0_f16_h32_b1",
    "pr0_f32_h32_b1",
    "pr0_bf16_h32_b1",
)
#: Cases whose inputs and outputs are given by hash only.
HASH_ONLY_CASES = ("pr10_h1_b264_rule", "pr10_h1_b263_rule")


@pytest.fixture(scope="module")
def manifest() -> fc.Manifest:
    """The repository's copy of the reference data (bins checked on load)."""
    return fc.load()


# ---------------------------------------------------------------------------------------------
# CPU: data integrity and the generator
# ---------------------------------------------------------------------------------------------


def test_bins_match_the_manifest(manifest):
    """Every bin has the size and SHA-256 the manifest records."""
    assert manifest.bins, "the manifest lists no bins"
    for file, nbytes, sha in manifest.bins:
        data = manifest.bin_data[file]
        assert len(data) == nbytes, file
        assert fc.sha256_hex(bytes(data)) == sha, file


def test_every_stored_block_matches_its_hash(manifest):
    """Every block stored in a bin (inputs and outputs) hashes to the manifest's SHA-256 and
    has ``nbytes == elems * element size``."""
    checked = 0
    for c in manifest.cases:
        tensors = list(c.inputs.values()) + [t for r in c.results for t in r.outputs.values()]
        for t in tensors:
            for b in t.blocks:
                assert b.nbytes == b.elems * t.elem_size, f"{c.name}/{t.name}"
                x = manifest.stored_block(t, b)
                if x is None:
                    continue
                assert fc.sha256_hex(x) == b.sha256, f"{c.name}/{t.name} block @{b.elem_offset}"
                checked += 1
    assert checked > 50, f"only {checked} stored blocks"


def test_generator_regenerates_every_generated_block(manifest):
    """The generator of the README (section 4) reproduces every generated input block bit for
    bit: stored blocks byte-equal, hash-only blocks (the two auto-rule cases) by SHA-256."""
    regenerated = hash_only = 0
    for c in manifest.cases:
        for t in c.inputs.values():
            if t.generator is None:
                continue
            gen_seed, tag, kind = t.generator
            assert gen_seed == c.gen_seed, f"{c.name}/{t.name}: gen_seed"
            assert fc.TAGS[t.name] == tag, f"{c.name}/{t.name}: tag"
            assert fc.KINDS[tag] == kind, f"{c.name}/{t.name}: kind of tag {tag}"
            for b in t.blocks:
                x = fc.generated_block(gen_seed, tag, t.dtype, b.elem_offset, b.elems)
                assert fc.sha256_hex(x) == b.sha256, f"{c.name}/{t.name} block @{b.elem_offset}"
                stored = manifest.stored_block(t, b)
                if stored is None:
                    hash_only += 1
                else:
                    assert fc.tensor_bytes(stored) == fc.tensor_bytes(x)
                regenerated += 1
    assert regenerated >= 80, f"only {regenerated} generated blocks"
    # 2 rule cases x 9 generated tensors (state, x, dt, dt_bias, A, B, C, D, z).
    assert hash_only >= 18, f"expected the hash-only rule-case blocks, got {hash_only}"


def test_inline_values_reproduce_index_and_seed_blocks(manifest):
    """Index tensors and seeds list their values inline; those values rebuild the stored (or
    hash-only) blocks exactly, and every regenerated block passes its hash check."""
    seen = 0
    for c in manifest.cases:
        for t in c.inputs.values():
            if t.generator is not None:
                continue
            assert t.values is not None, f"{c.name}/{t.name}: neither generator nor values"
            for b in t.blocks:
                x = fc.regenerate_block(t, b)
                assert x is not None and fc.sha256_hex(x) == b.sha256, f"{c.name}/{t.name}"
                seen += 1
    assert seen >= 11


def test_vectorised_generator_matches_scalar_reference():
    """The int64-tensor SplitMix64 (wrap-around multiply, logical shifts) equals the Python-int
    one on edge words and random words, and so do the unsigned modulo and the field sum."""
    rng = random.Random(1234)
    words = [0, 1, 2**63 - 1, 2**63, 2**64 - 1, fc.GOLDEN] + [rng.getrandbits(64) for _ in range(2000)]
    t = torch.tensor([fc.to_signed64(w) for w in words], dtype=torch.int64)
    got = [v & (2**64 - 1) for v in fc.mix64(t).tolist()]
    assert got == [fc.mix64_int(w) for w in words]
    for m in (5, 33, 97):
        assert fc._umod(t, m).tolist() == [w % m for w in words]
    want_g = [sum((w >> s) & 0xFFFF for s in (0, 16, 32, 48)) - 131070 for w in words]
    assert fc.gauss_int(t).tolist() == want_g
    # Counter words of a stream: mix64(s0 + (i + 1) * golden) for elements i.
    s0 = fc.stream_seed(101, 1)
    start = 2**33 - 3  # large element indices, as with a slot stride near 2^32
    want = [fc.mix64_int(s0 + (start + k + 1) * fc.GOLDEN) for k in range(8)]
    assert [v & (2**64 - 1) for v in fc.raw_words(101, 1, start, 8).tolist()] == want


def test_generator_known_values():
    """Hand-checked values of the generator's pieces: SplitMix64's first output for seed 0,
    the extremes of the field sum, each value formula on chosen words, and the rounding to
    fp16 (RNE with subnormals) and bf16 (RNE, ties to even)."""
    assert fc.mix64_int(fc.GOLDEN) == 0xE220A8397B1DCDAF
    assert fc.mix64_int(0) == 0
    assert fc.gauss_int(torch.tensor([0, -1], dtype=torch.int64)).tolist() == [-131070, 131070]

    def value(tag, r):
        return fc.values_from_words(tag, torch.tensor([r], dtype=torch.int64)).item()

    assert value(fc.TAGS["dt"], 0) == -2.0
    assert value(fc.TAGS["dt"], 64) == 0.0
    assert value(fc.TAGS["dt"], 96) == 1.0
    assert value(fc.TAGS["dt_bias"], 0) == -0.25
    assert value(fc.TAGS["dt_bias"], 32) == 0.25
    assert value(fc.TAGS["D"], 16) == 1.0
    assert value(fc.TAGS["D"], 32) == 1.25
    assert value(fc.TAGS["A"], 0) == -512 * 2.0**-11
    assert value(fc.TAGS["A"], 511 | (4 << 9)) == -1023 * 2.0**-7
    assert value(fc.TAGS["state"], 0xFFFF) == (0xFFFF - 131070) * 2.0**-16
    # The all-ones word: the modulo is on the unsigned value 2^64 - 1 (mod 97 = 60, mod 33 = 15).
    assert value(fc.TAGS["dt"], -1) == (60 - 64) / 32
    assert value(fc.TAGS["dt_bias"], -1) == (15 - 16) / 64
    f16 = torch.tensor([1.5 * 2.0**-24, 2.0**-25, 2.0**-24], dtype=torch.float32).to(torch.float16)
    assert fc.tensor_bytes(f16) == bytes([0x02, 0x00, 0x00, 0x00, 0x01, 0x00])
    bf = torch.tensor([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8], dtype=torch.float32).to(torch.bfloat16)
    assert fc.tensor_bytes(bf) == bytes([0x80, 0x3F, 0x82, 0x3F])


def test_int16_state_tags_match_the_recorder():
    """The int16 block-scaled state's tags (11 state, 12 decode scales) give the bytes of the
    recorder's Python generator (`block_bytes(611, tag, dtype, 5, 64)`: SHA-256 computed there;
    the same digests as the Rust test `generator_int16_tags_match_the_recorder`), and the value
    formulas' extremes."""
    import hashlib

    for tag, dtype, sha in (
        (11, "int16", "4c2d78c92d71aa8400e0fb2233c2a9795bf5d7c07f988d8bc6cbec7afd3788a2"),
        (12, "float32", "6333f9b211d94ec926c26be7242f5576b2931da7297a6b860df61eb60d9ec84f"),
    ):
        got = fc.tensor_bytes(fc.generated_block(611, tag, dtype, 5, 64))
        assert hashlib.sha256(got).hexdigest() == sha, tag

    def value(tag, r):
        return fc.values_from_words(tag, torch.tensor([r], dtype=torch.int64)).item()

    assert value(11, 0) == -32767.0 and value(11, 65534) == 32767.0
    assert value(12, 0) == 2.0**-21 and value(12, 1023 | (5 << 10)) == 2047 * 2.0**-26
    with pytest.raises(ValueError):
        fc.generated_block(611, 1, "int16", 0, 4)


# ---------------------------------------------------------------------------------------------
# CPU: cases
# ---------------------------------------------------------------------------------------------


def test_case_and_run_count_match_the_rust_test(manifest):
    """The loader yields every case of the manifest (the 11 of the README) and every recorded
    run of each (simple, vertical and auto): 33 runs, exactly what the Rust conformance test
    replays."""
    assert len(manifest.cases) == len(manifest.json["cases"])
    names = [c.name for c in manifest.cases]
    assert len(set(names)) == len(names), "duplicate case names"
    assert sorted(names) == sorted(EXPECTED_CASES)
    for c in manifest.cases:
        algs = sorted(r.algorithm_requested for r in c.results)
        assert algs == sorted(fc.ALGORITHMS), f"{c.name}: runs {algs}"
    assert len(manifest.runs()) == 3 * len(EXPECTED_CASES) == 33
    for name in HASH_ONLY_CASES:
        c = manifest.case(name)
        blocks = [b for t in c.inputs.values() for b in t.blocks]
        blocks += [b for r in c.results for t in r.outputs.values() for b in t.blocks]
        assert all(b.hash_only for b in blocks), name


def _check_layout(case_name, t):
    assert len(t.shape) == len(t.strides), f"{case_name}/{t.name}: rank"
    assert t.view_span() <= t.storage_elems, f"{case_name}/{t.name}: view past storage"
    end = 0
    for b in sorted(t.blocks, key=lambda b: b.elem_offset):
        assert b.elem_offset >= end, f"{case_name}/{t.name}: overlapping blocks"
        end = b.elem_offset + b.elems
        assert end <= t.storage_elems, f"{case_name}/{t.name}: block past storage"


def test_every_case_parses_consistently(manifest):
    """Each case is self-consistent: flags, seed iff SR, the always-passed inputs, optional
    inputs exactly as ``present`` says, the FlashInfer layouts (state slot stride and inner
    strides, x shape, A strides (1, 0, 0)), index values within the cache or the pad id, the
    auto rule, and output shapes and storages."""
    for c in manifest.cases:
        n = c.name
        assert 0 <= c.philox_rounds <= 10, n
        assert c.update_state == (not c.disable_state_update), n
        assert c.nheads % c.ngroups == 0, n
        assert (c.seed is not None) == (c.philox_rounds > 0), f"{n}: seed iff SR"
        for name in ("state", "x", "dt", "A", "B", "C", "D"):
            assert c.input(name) is not None, f"{n}: no {name}"
        for opt in ("z", "dt_bias", "state_batch_indices", "dst_state_batch_indices", "rand_seed"):
            assert (c.input(opt) is not None) == c.is_present(opt), f"{n}: present[{opt}]"
        unknown = set(c.inputs) - set(fc.TENSOR_ARGS)
        assert not unknown, f"{n}: inputs the Python call would not pass: {unknown}"
        st = c.input("state")
        assert st.dtype == c.state_dtype
        assert st.shape == [c.state_cache_size, c.nheads, c.dim, c.dstate], n
        assert st.strides == [c.state_stride_batch, c.dim * c.dstate, c.dstate, 1], n
        assert c.input("x").shape == [c.batch, c.nheads, c.dim], n
        assert c.input("x").dtype == c.input_dtype, n
        assert c.input("A").strides == [1, 0, 0], n
        assert c.input("A").dtype == c.a_dtype, n
        assert c.input("dt").strides[1:] == [1, 0], f"{n}: dt strides (s, 1, 0)"
        assert c.input("D").strides == [1, 0], n
        for name in ("B", "C"):
            assert c.input(name).shape == [c.batch, c.ngroups, c.dstate], f"{n}/{name}"
        if c.input("rand_seed") is not None:
            s = c.input("rand_seed")
            assert s.dtype == "int64" and s.shape == [1], n
            assert [fc.to_signed64(v) for v in s.values] == [c.seed], f"{n}: seed value"
        for t in c.inputs.values():
            _check_layout(n, t)
            if t.name.endswith("indices"):
                assert t.dtype == c.index_dtype, f"{n}/{t.name}"
                assert len(t.values) == c.batch, f"{n}/{t.name}"
                for slot in t.values:
                    assert slot == c.pad_slot_id or 0 <= slot < c.state_cache_size, f"{n}/{t.name}: {slot}"
        rule = fc.auto_rule(c.batch, c.nheads, c.num_sms)
        for r in c.results:
            if r.algorithm_requested == "auto":
                assert r.algorithm_used_by_rule == rule, f"{n}: auto rule"
            so, oo = r.output("state"), r.output("out")
            assert so.storage_elems == st.storage_elems, n
            assert so.dtype == st.dtype, n
            assert oo.shape == [c.batch, c.nheads, c.dim], n
            assert oo.dtype == c.input_dtype, n
            _check_layout(n, so)
            _check_layout(n, oo)


def test_bit_identical_runs_have_identical_blocks(manifest):
    """Where the manifest says two runs of a case are bit-identical, their recorded state and
    out blocks carry the same hashes (a check of the expected data the GPU test uses)."""
    for c in manifest.cases:
        by_alg = {r.algorithm_requested: r for r in c.results}
        for r in c.results:
            for other in r.bit_identical_to:
                for name in ("state", "out"):
                    a = [b.sha256 for b in r.output(name).blocks]
                    b = [b.sha256 for b in by_alg[other].output(name).blocks]
                    assert a == b, f"{c.name}: {r.algorithm_requested} vs {other} {name}"


def test_build_call_reproduces_the_recorded_layouts(manifest):
    """For every run, the call builder (on the CPU) passes exactly the recorded tensors:
    dtype, shape and strides of each view, the whole recorded storage behind it (hash of each
    block), optional tensors only when recorded, ``rand_seed``/``philox_rounds`` only with SR,
    ``out`` poisoned with 0xFF, and the recorded flags and algorithm."""
    for c, r in manifest.runs():
        p = fc.build_call(manifest, c, r, "cpu")
        kw = p.kwargs
        label = p.label
        expected_tensors = {k for k in c.inputs if not (k == "rand_seed" and c.philox_rounds == 0)}
        assert {k for k in kw if k in fc.TENSOR_ARGS} == expected_tensors, label
        for name in expected_tensors:
            t = c.input(name)
            v = kw[name]
            assert v.dtype == fc.torch_dtype(t.dtype), f"{label}/{name}"
            assert list(v.shape) == t.shape, f"{label}/{name}"
            assert list(v.stride()) == t.strides, f"{label}/{name}"
            assert v.storage_offset() == 0, f"{label}/{name}"
            s = p.storages[name]
            assert s.numel() == t.storage_elems, f"{label}/{name}"
            assert v.untyped_storage().data_ptr() == s.untyped_storage().data_ptr(), f"{label}/{name}"
            for b in t.blocks:
                assert fc.sha256_hex(s[b.elem_offset : b.elem_offset + b.elems]) == b.sha256, f"{label}/{name}"
        if c.philox_rounds > 0:
            assert kw["philox_rounds"] == c.philox_rounds, label
            assert kw["rand_seed"].tolist() == [c.seed], label
        else:
            assert "philox_rounds" not in kw and "rand_seed" not in kw, label
        od = r.output("out")
        out = kw["out"]
        assert out.dtype == fc.torch_dtype(od.dtype) and list(out.shape) == od.shape, label
        assert list(out.stride()) == od.strides, label
        assert bool((p.storages["out"].view(torch.uint8) == 0xFF).all()), f"{label}: out poison"
        assert kw["dt_softplus"] is c.dt_softplus, label
        assert kw["disable_state_update"] is c.disable_state_update, label
        assert kw["pad_slot_id"] == c.pad_slot_id, label
        assert kw["algorithm"] == r.algorithm_requested, label
        for name in ("state_batch_indices", "dst_state_batch_indices"):
            if name in kw:
                assert kw[name].dtype == torch.int32 and kw[name].tolist() == c.input(name).values, label


def test_every_recorded_call_passes_the_argument_checks(manifest):
    """Every recorded run's arguments, built on the CPU, pass the C contract's check as a
    single-token call and every check of the front door but the last, the device check: the
    package accepts each layout FlashInfer was recorded with."""
    import mamba_ssu
    from calls import check, outcome

    for c, r in manifest.runs():
        p = fc.build_call(manifest, c, r, "cpu")
        kw = dict(p.kwargs)
        assert check(**kw)["form"] == "single", p.label
        got = outcome(lambda: mamba_ssu.selective_state_update(**kw))
        want = ((ValueError, "rand_seed: expected a CUDA tensor, got one on cpu") if "rand_seed" in kw
                else (RuntimeError, "state: expected a CUDA tensor, got one on cpu"))
        assert got == want, f"{p.label}: {got}"


def test_comparison_counts_differences(manifest):
    """The output comparison the GPU test relies on: the recorded bytes compare equal; one
    changed element is counted once (with its ulp distance) and located; an element changed
    outside every recorded block is caught; a hash-only block with wrong bytes is reported."""
    c = manifest.case("pr10_h8_b3_dst_g1")
    r = next(x for x in c.results if x.algorithm_requested == "simple")
    for name in ("state", "out"):
        t = r.output(name)
        got = torch.zeros(t.storage_elems, dtype=fc.torch_dtype(t.dtype))
        for b, want in manifest.expected_blocks(t):
            got[b.elem_offset : b.elem_offset + b.elems] = want
        assert fc.compare_output(manifest, t, got).ok, name
        bits = got.view(torch.int16)
        bits[1000] ^= 1  # one ulp (same sign, magnitude bit 0)
        cmp = fc.compare_output(manifest, t, got)
        assert (cmp.differing, cmp.max_ulp, cmp.hash_differs) == (1, 1.0, 0), name
        assert "element 1000" in cmp.first, cmp.first
    # Elements outside the recorded blocks must equal the input: shrink the recorded state
    # blocks to leave a gap and change an element inside it.
    st_out = r.output("state")
    st_in = c.input("state")
    got = fc.device_storage(manifest, st_in, "cpu")
    b0 = st_out.blocks[0]
    shrunk = fc.TensorDesc(st_out.name, st_out.dtype, st_out.shape, st_out.strides, st_out.storage_elems, None, None,
                           [fc.Block(b0.elem_offset + 10, b0.elems - 10, (b0.elems - 10) * 2, "", None, None)])
    assert fc.outside_blocks_changed(manifest, shrunk, got, st_in) == 0
    got.view(torch.int16)[3] ^= 0x100
    assert fc.outside_blocks_changed(manifest, shrunk, got, st_in) == 1
    # Hash-only outputs: wrong bytes are reported by hash.
    rc = manifest.case("pr10_h1_b263_rule")
    ot = rc.results[0].output("out")
    cmp = fc.compare_output(manifest, ot, torch.zeros(ot.storage_elems, dtype=torch.bfloat16))
    assert not cmp.ok and cmp.hash_differs == len(ot.blocks) and cmp.differing == 0


# ---------------------------------------------------------------------------------------------
# GPU: replay every recorded run through mamba_ssu.selective_state_update
# ---------------------------------------------------------------------------------------------


def _gpu_case_names():
    """Case names of the manifest the GPU test replays (``MAMBA_SSU_FLASHINFER_MANIFEST`` or
    the repository's copy); a manifest that does not load yields one case that fails."""
    try:
        return [c.name for c in fc.load_from_env_or_default().cases]
    except Exception:  # reported by the test itself
        return ["<manifest failed to load>"]


def _run_one(mamba_ssu, m, case, result, device, device_sms):
    """Runs one recorded algorithm run on the GPU; returns (line, failed)."""
    alg = result.algorithm_requested
    label = f"{case.name:<28} {alg:<8}"
    if alg == "auto" and fc.auto_rule(case.batch, case.nheads, device_sms) != result.algorithm_used_by_rule:
        return (f"{label} skipped: this device has {device_sms} SMs, auto would not pick "
                f"{result.algorithm_used_by_rule}", False)
    need = sum(t.storage_bytes for t in case.inputs.values()) + result.output("out").storage_bytes
    free, _total = torch.cuda.mem_get_info(device)
    if need > free:
        return (f"{label} NOT RUN: the dense storages need {need / 2**30:.1f} GiB, "
                f"{free / 2**30:.1f} GiB free", True)
    p = fc.build_call(m, case, result, device)
    try:
        ret = mamba_ssu.selective_state_update(**p.kwargs)
        torch.cuda.synchronize(device)
    except Exception as e:  # a launch or validation error fails this run
        return f"{label} ERROR: {type(e).__name__}: {e}", True
    problems = []
    out = p.kwargs["out"]
    if not isinstance(ret, torch.Tensor) or ret.data_ptr() != out.data_ptr() or ret.shape != out.shape:
        problems.append("the returned tensor is not `out`")
    st = fc.compare_output(m, result.output("state"), p.storages["state"])
    outside = fc.outside_blocks_changed(m, result.output("state"), p.storages["state"], case.input("state"))
    ot = fc.compare_output(m, result.output("out"), p.storages["out"])
    state_col = st.describe() + (f"; {outside} elements outside the recorded blocks changed" if outside else "")
    line = f"{label} state: {state_col} | out: {ot.describe()}"
    failed = not st.ok or outside != 0 or not ot.ok or bool(problems)
    if "state_scale" in result.outputs:  # an int16 state's decode scales
        sc = fc.compare_output(m, result.output("state_scale"), p.storages["state_scale"])
        line += f" | state_scale: {sc.describe()}"
        failed |= not sc.ok
    if problems:
        line += " | " + "; ".join(problems)
    del p
    return line, failed


@pytest.mark.parametrize("case_name", _gpu_case_names())
def test_flashinfer_reference_bit_exact(gpu, case_name):
    """Replays every recorded run (simple, vertical, auto) of one case on the GPU through
    ``mamba_ssu.selective_state_update`` and requires the whole state storage (padding and
    unreferenced slots included) and ``out`` to be byte-identical to FlashInfer's — by
    SHA-256 for hash-only blocks — with every state element outside the recorded blocks
    unchanged. No tolerance on any output (as the Rust test). An ``auto`` run is skipped only
    where this device's SM count makes FlashInfer's rule pick another algorithm than on the
    recording H200 (132 SMs); the explicit runs always run."""
    import mamba_ssu  # imported here so the CPU tests run without the extension

    m = fc.load_from_env_or_default()
    case = m.case(case_name)
    device_sms = torch.cuda.get_device_properties(gpu).multi_processor_count
    lines, failed = [], []
    for r in case.results:
        line, bad = _run_one(mamba_ssu, m, case, r, gpu, device_sms)
        lines.append(line)
        print(line)
        if bad:
            failed.append(r.algorithm_requested)
    assert case.results, f"{case_name}: no recorded runs"
    if failed:
        pytest.fail(f"{case_name}: {len(failed)} of {len(case.results)} runs differ from FlashInfer "
                    f"({', '.join(failed)}):\n" + "\n".join(lines), pytrace=False)
