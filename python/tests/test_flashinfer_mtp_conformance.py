"""Conformance of ``mamba_ssu.selective_state_update``'s multi-token path with FlashInfer 0.7.2's
recorded outputs.

The recorded data (``tests/data/flashinfer_ssu_mtp``) holds multi-token (speculative-decoding
verify) problems run through FlashInfer's own kernel on an H200 with ``algorithm`` "auto" and
"simple": fixed-length and varlen sequences (a pad, a zero-length sequence), the three write
modes (intermediate buffer, 2-D per-token destination index, final state only),
``num_accepted_tokens`` with a 2-D read index, in-place verify, ``disable_state_update``,
10, 5 and 0 Philox rounds, and a 4-token build. ``flashinfer_mtp_cases`` turns each recorded
run into a call of the package's FlashInfer-compatible function with exactly the arguments
FlashInfer's wrapper received.

CPU tests (no GPU): the bins and every block are intact, every input block regenerates
(the generator of the single-token data, the intermediate buffer's 0xFF poison, the inline
index values), the cases are the README's, each one takes the path FlashInfer's dispatch rule
gives it, the recorded write patterns agree with the documented rules, and the call builder
reproduces the recorded storages, shapes, strides and flags.

GPU test (``gpu`` fixture): every recorded run is replayed and the whole state storage, ``out``
and the intermediate buffer must be byte-identical to FlashInfer's (SHA-256 for hash-only
blocks).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashinfer_cases as fc  # noqa: E402
import flashinfer_mtp_cases as mc  # noqa: E402

#: The cases of the repository's copy.
EXPECTED_CASES = (
    "pr10_h8_b1_inter",
    "pr10_h8_b1_inter_noupdate",
    "pr10_h8_b2_final",
    "pr10_h8_b5_nat_sbi2d",
    "pr10_h8_b5_varlen_final_pad",
    "pr10_h8_b3_varlen_dst_nat",
    "pr10_h8_b2_dst2d",
    "pr5_h8_b1_inter",
    "pr0_h8_b1_inter",
    "pr0_h8_b5_varlen_final_pad",
    "T4_pr10_h8_b1_inter_prefix",
)


@pytest.fixture(scope="module")
def manifest() -> mc.MtpManifest:
    return mc.load()


# ---------------------------------------------------------------------------------------------
# CPU: data integrity
# ---------------------------------------------------------------------------------------------


def test_bins_match_the_manifest(manifest):
    assert manifest.bins, "the manifest lists no bins"
    for file, nbytes, sha in manifest.bins:
        data = manifest.bin_data[file]
        assert len(data) == nbytes, file
        assert fc.sha256_hex(bytes(data)) == sha, file


def test_every_input_block_regenerates(manifest):
    """Every input block, stored or hash-only, is rebuilt bit for bit without the bin: floating
    tensors by the generator (tags 1..9), the intermediate buffer as 0xFF poison (tag 10),
    index tensors and the seed from their inline values; each rebuilt block hashes to the
    manifest's SHA-256 and equals the stored bytes where stored."""
    poison = generated = inline = 0
    for c in manifest.cases:
        for t in c.inputs.values():
            if t.generator is not None:
                gen_seed, tag, kind = t.generator
                assert gen_seed == c.gen_seed, f"{c.name}/{t.name}"
                if tag == mc.POISON_TAG:
                    assert t.name == "intermediate_states_buffer" and kind == mc.POISON_KIND, f"{c.name}/{t.name}"
                else:
                    assert fc.TAGS[t.name] == tag and fc.KINDS[tag] == kind, f"{c.name}/{t.name}"
            else:
                assert t.values is not None, f"{c.name}/{t.name}: neither generator nor values"
            for b in t.blocks:
                x = mc.regenerate_block(t, b)
                assert x is not None and fc.sha256_hex(x) == b.sha256, f"{c.name}/{t.name} @{b.elem_offset}"
                stored = manifest.stored_block(t, b)
                if stored is not None:
                    assert fc.tensor_bytes(stored) == fc.tensor_bytes(x), f"{c.name}/{t.name}"
                if t.generator is None:
                    inline += 1
                elif t.generator[1] == mc.POISON_TAG:
                    poison += 1
                else:
                    generated += 1
    assert poison >= 5 and generated >= 80 and inline >= 20, (poison, generated, inline)


def test_every_stored_output_block_matches_its_hash(manifest):
    checked = 0
    for c in manifest.cases:
        for r in c.results:
            for t in r.outputs.values():
                for b in t.blocks:
                    x = manifest.stored_block(t, b)
                    if x is not None:
                        assert fc.sha256_hex(x) == b.sha256, f"{c.name}/{t.name}"
                        checked += 1
    assert checked >= 10


# ---------------------------------------------------------------------------------------------
# CPU: cases
# ---------------------------------------------------------------------------------------------


def test_cases_and_runs(manifest):
    """The README's 11 cases, each recorded with "auto" and "simple" (22 runs)."""
    names = [c.name for c in manifest.cases]
    assert sorted(names) == sorted(EXPECTED_CASES)
    for c in manifest.cases:
        assert sorted(r.algorithm_requested for r in c.results) == sorted(mc.ALGORITHMS), c.name
        for r in c.results:
            assert sorted(r.outputs) == sorted(n for n in mc.OUTPUTS if n in r.outputs), c.name
            assert "state" in r.outputs and "out" in r.outputs, c.name
            assert ("intermediate_states_buffer" in r.outputs) == (c.input("intermediate_states_buffer") is not None), c.name
    assert len(manifest.runs()) == 22


def test_the_contract_finds_the_recorded_path(manifest):
    """The C contract's form rule (FlashInfer's wrapper rule, ``_C.check`` on each run's
    arguments built on the CPU) gives the recorded path: varlen for the cu_seqlens cases,
    fixed-length multi-token for the others — never the single-token kernel."""
    from calls import check

    for c, r in manifest.runs():
        x = c.input("x")
        varlen = manifest.varlen(c)
        assert (c.input("cu_seqlens") is not None) == varlen, c.name
        assert len(x.shape) == (3 if varlen else 4), c.name
        p = mc.build_call(manifest, c, r, "cpu")
        problem = check(**p.kwargs)
        assert problem["form"] == "multi" and problem["varlen"] == varlen, p.label


def test_recorded_write_patterns_follow_the_rules(manifest):
    """Each run changed exactly the state slots (and intermediate steps) the documented rules
    predict (the manifest's ``expected``), and says its outputs were fully written."""
    for c in manifest.cases:
        cj = manifest.case_json[c.name]
        exp = cj["expected"]
        for r in cj["results"]:
            assert r["status"] == "ok", c.name
            assert sorted(r["state_slots_changed"]) == sorted(exp["state_slots_written"]), c.name
            if "intermediate_slots_written" in r:
                assert sorted(r["intermediate_slots_written"]) == sorted(exp["intermediate_slots_written"]), c.name
            assert r["out_fully_written"] and r["state_outside_expected_writes_unchanged"], c.name


def test_build_call_reproduces_the_recorded_layouts(manifest):
    """For every run the call builder (on the CPU) passes exactly the recorded tensors (dtype,
    shape, strides, the whole storage behind each view), ``out`` poisoned with 0xFF, the
    recorded ``cache_steps``, flags and algorithm, and the seed only with SR."""
    for c, r in manifest.runs():
        p = mc.build_call(manifest, c, r, "cpu")
        kw, label = p.kwargs, p.label
        expected = {k for k in c.inputs if not (k == "rand_seed" and c.philox_rounds == 0)}
        assert {k for k in kw if k in mc.TENSOR_ARGS} == expected, label
        for name in expected:
            t, v, s = c.input(name), kw[name], p.storages[name]
            assert v.dtype == fc.torch_dtype(t.dtype) and list(v.shape) == t.shape, f"{label}/{name}"
            assert list(v.stride()) == t.strides and v.storage_offset() == 0, f"{label}/{name}"
            assert s.numel() == t.storage_elems, f"{label}/{name}"
            for b in t.blocks:
                assert fc.sha256_hex(s[b.elem_offset : b.elem_offset + b.elems]) == b.sha256, f"{label}/{name}"
        if "intermediate_states_buffer" in kw:
            assert bool((p.storages["intermediate_states_buffer"].view(torch.uint8) == 0xFF).all()), label
        od = r.output("out")
        assert list(kw["out"].shape) == od.shape and list(kw["out"].stride()) == od.strides, label
        assert bool((p.storages["out"].view(torch.uint8) == 0xFF).all()), f"{label}: out poison"
        assert kw["cache_steps"] == manifest.cache_steps(c), label
        assert kw["disable_state_update"] is c.disable_state_update, label
        assert kw["pad_slot_id"] == c.pad_slot_id and kw["algorithm"] == r.algorithm_requested, label
        if c.philox_rounds > 0:
            assert kw["philox_rounds"] == c.philox_rounds and kw["rand_seed"].tolist() == [c.seed], label
        else:
            assert "rand_seed" not in kw and "philox_rounds" not in kw, label


def test_every_recorded_call_passes_the_argument_checks(manifest):
    """Every recorded run's arguments, built on the CPU, pass the C contract's check and every
    check of the front door but the last, the device check: the package accepts each layout
    FlashInfer was recorded with (padded token strides, 2-D indices, the buffer)."""
    import mamba_ssu
    from calls import check, outcome

    for c, r in manifest.runs():
        p = mc.build_call(manifest, c, r, "cpu")
        kw = dict(p.kwargs)
        check(**kw)
        got = outcome(lambda: mamba_ssu.selective_state_update(**kw))
        want = ((ValueError, "rand_seed: expected a CUDA tensor, got one on cpu") if "rand_seed" in kw
                else (RuntimeError, "state: expected a CUDA tensor, got one on cpu"))
        assert got == want, f"{p.label}: {got}"


# ---------------------------------------------------------------------------------------------
# GPU: replay every recorded run through mamba_ssu.selective_state_update
# ---------------------------------------------------------------------------------------------


def _gpu_case_names():
    try:
        return [c.name for c in mc.load_from_env_or_default().cases]
    except Exception:  # reported by the test itself
        return ["<manifest failed to load>"]


def _run_one(mamba_ssu, m, case, result, device):
    """Runs one recorded run on the GPU; returns (line, failed)."""
    label = f"{case.name:<30} {result.algorithm_requested:<7}"
    p = mc.build_call(m, case, result, device)
    try:
        ret = mamba_ssu.selective_state_update(**p.kwargs)
        torch.cuda.synchronize(device)
    except Exception as e:  # a launch or validation error fails this run
        return f"{label} ERROR: {type(e).__name__}: {e}", True
    problems = []
    out = p.kwargs["out"]
    if not isinstance(ret, torch.Tensor) or ret.data_ptr() != out.data_ptr() or ret.shape != out.shape:
        problems.append("the returned tensor is not `out`")
    cols, failed = [], bool(problems)
    for name in mc.OUTPUTS:
        if name not in result.outputs:
            continue
        cmp = fc.compare_output(m, result.output(name), p.storages[name])
        col = cmp.describe()
        failed |= not cmp.ok
        if name in ("state", "intermediate_states_buffer"):
            outside = fc.outside_blocks_changed(m, result.output(name), p.storages[name], case.input(name))
            if outside:
                col += f"; {outside} elements outside the recorded blocks changed"
                failed = True
        cols.append(f"{name}: {col}")
    line = f"{label} " + " | ".join(cols + problems)
    del p
    return line, failed


@pytest.mark.parametrize("case_name", _gpu_case_names())
def test_flashinfer_mtp_reference_bit_exact(gpu, case_name):
    """Replays every recorded run ("auto" and "simple") of one multi-token case on the GPU
    through ``mamba_ssu.selective_state_update`` and requires the whole state storage, ``out``
    and the intermediate buffer to be byte-identical to FlashInfer's (by SHA-256 for hash-only
    blocks), with nothing changed outside the recorded blocks. No tolerance."""
    import mamba_ssu  # imported here so the CPU tests run without the extension

    m = mc.load_from_env_or_default()
    case = m.case(case_name)
    lines, failed = [], []
    for r in case.results:
        line, bad = _run_one(mamba_ssu, m, case, r, gpu)
        lines.append(line)
        print(line)
        if bad:
            failed.append(r.algorithm_requested)
    assert case.results, f"{case_name}: no recorded runs"
    if failed:
        pytest.fail(f"{case_name}: {len(failed)} of {len(case.results)} runs differ from FlashInfer "
                    f"({', '.join(failed)}):\n" + "\n".join(lines), pytrace=False)
