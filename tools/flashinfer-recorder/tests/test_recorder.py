"""CPU tests of the FlashInfer reference recorder (no GPU, no FlashInfer build needed).

  python3 -m unittest discover -s tools/flashinfer-recorder/tests -v

The generator is checked against every recorded input block of the conformance data; the
write-pattern rules against the recorded outputs; the runner's plumbing and the manifest writer
through a host-memory driver (fake_device.py), whose output the project's Python readers
(python/tests/flashinfer_cases.py, when torch is installed) must load.
"""

import hashlib
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(TOOL))
sys.path.insert(0, os.path.join(TOOL, "runner"))
sys.path.insert(0, TOOL)
sys.path.insert(0, HERE)

import gen  # noqa: E402
import record  # noqa: E402
import spec as specmod  # noqa: E402
from fake_device import FakeDriver  # noqa: E402

STP = os.path.join(REPO, "tests", "data", "flashinfer_ssu")
MTP = os.path.join(REPO, "tests", "data", "flashinfer_ssu_mtp")
# The pure-Python generator makes ~0.3 M elements/s; without numpy the largest storages are
# left to the Rust test (tests/flashinfer_fixtures.rs) that checks them too.
PY_LIMIT = None if gen.have_numpy() else 400_000


def load(d):
    m = json.loads(record.read_maybe_xz(os.path.join(d, "manifest.json")))
    return m, record.read_maybe_xz(os.path.join(d, "fixtures.bin"))


def stored(bin_, b):
    if b.get("bin") is None:
        return None
    return bin_[b["byte_offset"] : b["byte_offset"] + b["nbytes"]]


class Generator(unittest.TestCase):
    def test_regenerates_every_recorded_input_block(self):
        checked = skipped = 0
        for d in (STP, MTP):
            m, _ = load(d)
            for c in m["cases"]:
                for t in c["inputs"]:
                    for b in t["blocks"]:
                        if t.get("generator"):
                            if PY_LIMIT and b["elems"] > PY_LIMIT:
                                skipped += 1
                                continue
                            g = t["generator"]
                            data = gen.block_bytes(g["gen_seed"], g["tag"], t["dtype"], b["elem_offset"], b["elems"])
                        else:
                            data = gen.values_bytes(t["values"], t["dtype"], b["elem_offset"], b["elems"])
                        self.assertEqual(hashlib.sha256(data).hexdigest(), b["sha256"], f"{c['name']} {t['name']}")
                        checked += 1
        self.assertGreater(checked, 200)
        print(f"\n  generator: {checked} recorded input blocks reproduced ({skipped} large ones left to numpy)")

    @unittest.skipUnless(gen.have_numpy(), "numpy not installed")
    def test_numpy_and_python_paths_agree(self):
        for tag, dtype in [(1, "float16"), (1, "float32"), (1, "bfloat16"), (2, "bfloat16"), (3, "float16"),
                           (4, "bfloat16"), (5, "float32"), (6, "bfloat16"), (8, "float32"), (9, "float16")]:
            a = gen.block_bytes(77, tag, dtype, 1000, 5000, use_numpy=True)
            b = gen.block_bytes(77, tag, dtype, 1000, 5000, use_numpy=False)
            self.assertEqual(a, b, (tag, dtype))

    def test_known_words(self):
        self.assertEqual(gen.mix64(0), 0)
        self.assertEqual(gen.stream_seed(1, 0), gen.SEED_MUL)
        self.assertEqual(gen.block_bytes(1, 10, "float16", 0, 3), b"\xff" * 6)


class Spec(unittest.TestCase):
    def test_new_cases_parse_and_fit_their_storages(self):
        cases = specmod.load_spec(os.path.join(TOOL, "cases", "new_cases.json"))
        self.assertGreater(len(cases), 40)
        for c in cases:
            for t in c["inputs"]:
                reach = sum((n - 1) * s for n, s in zip(t["shape"], t["strides"]))
                self.assertLess(reach, t["storage_elems"], f"{c['name']} {t['name']}")
                if "values" in t:
                    self.assertEqual(len(t["values"]), t["storage_elems"])
            specmod.group_key(c)
        names = {c["name"] for c in cases}
        for want in ("stp_d80_ds96_f16_pr5", "mtp_d128_ds256_bfloat16_pr0_varlen", "stp_d64_ds128_pr12",
                     "mtp_d64_ds128_pr10_padded_nat_int64", "mtp_d64_ds128_pr10_varlen_cu_int64"):
            self.assertIn(want, names)
        c = next(c for c in cases if c["name"] == "mtp_d64_ds128_pr10_padded_nat_int64")
        gid, key = specmod.group_key(c)
        self.assertEqual(key["num_accepted_tokens_dtype"], "int64")
        self.assertEqual(key["index_dtype"], "int32")
        self.assertIn("_nai64_", gid)

    def test_spec_errors(self):
        with self.assertRaises(specmod.SpecError):
            specmod.build_case({"name": "x", "gen_seed": 1, "dimm": 64})
        with self.assertRaises(specmod.SpecError):
            specmod.build_case({"name": "x", "gen_seed": 1, "nheads": 6, "ngroups": 4})
        with self.assertRaises(specmod.SpecError):
            specmod.build_case({"name": "x", "gen_seed": 1, "path": "mtp"})
        with self.assertRaises(specmod.SpecError):
            specmod.expand_cases({"cases": [{"name": "a", "gen_seed": 1}, {"name": "a", "gen_seed": 2}]})
        # A slot one sequence writes and another reads (a race between their blocks), or two
        # sequences write; a pad, and disjoint slots, are fine.
        racy = {"name": "x", "gen_seed": 1, "batch": 3, "state_batch_indices": [0, 3, 1],
                "dst_state_batch_indices": [1, 2, 3], "state_cache_size": 4}
        with self.assertRaises(specmod.SpecError):
            specmod.build_case(racy)
        with self.assertRaises(specmod.SpecError):
            specmod.build_case({**racy, "dst_state_batch_indices": [2, 2, 4], "state_cache_size": 5})
        with self.assertRaises(specmod.SpecError):
            specmod.build_case({**racy, "dst_state_batch_indices": None, "state_batch_indices": [1, 1, 2]})
        specmod.build_case({**racy, "dst_state_batch_indices": [2, 4, 5], "state_cache_size": 6})
        specmod.build_case({**racy, "state_batch_indices": [0, -1, -1], "dst_state_batch_indices": None})
        specmod.build_case({**racy, "state_batch_indices": [1, 1, 2], "dst_state_batch_indices": None,
                            "disable_state_update": True, "path": "mtp", "T": 2})

    def test_spec_rebuilds_a_recorded_case(self):
        # The spec form of pr10_h8_b3_dst_g1 gives the recorded input descriptors exactly.
        m, _ = load(STP)
        ref = next(c for c in m["cases"] if c["name"] == "pr10_h8_b3_dst_g1")
        c = specmod.build_case({"name": "pr10_h8_b3_dst_g1", "gen_seed": 104, "batch": 3, "ngroups": 1,
                                "seed": 0x80000001, "state_batch_indices": [4, 1, 3],
                                "dst_state_batch_indices": [0, 5, 2]})
        strip = lambda ts: [{k: v for k, v in t.items() if k != "blocks"} for t in ts]  # noqa: E731
        self.assertEqual(strip(c["inputs"]), strip(ref["inputs"]))
        self.assertEqual(specmod.group_key(c), specmod.group_key(ref))

    def test_reference_groups(self):
        ids = set()
        for d in (STP, MTP):
            _, cases = specmod.load_reference(os.path.join(d, "manifest.json"))
            ids |= {specmod.group_key(c)[0] for c in cases}
        self.assertEqual(len(ids), 9)
        self.assertIn("mtp_sf16_ibf16_wbf16_af32_sii32_d64_ds128_nt4_csi32_nai32_pr10", ids)
        self.assertIn("stp_sbf16_ibf16_wbf16_af32_sii32_d64_ds128_pr0", ids)


class WritePattern(unittest.TestCase):
    def test_mtp_prediction_matches_the_recorded_expectation(self):
        m, _ = load(MTP)
        for c in m["cases"]:
            ins = {t["name"]: t for t in c["inputs"]}
            self.assertEqual(record.expected_mtp(c, ins, c["batch"]), c["expected"], c["name"])
            self.assertEqual(record.write_mode(ins), c["state_write_mode"], c["name"])

    def test_rules_hold_on_recorded_outputs(self):
        n = 0
        for d, mtp in ((STP, False), (MTP, True)):
            m, bin_ = load(d)
            for c in m["cases"]:
                ins = {t["name"]: t for t in c["inputs"]}
                st = ins["state"]
                before = stored(bin_, st["blocks"][0])
                if before is None or len(st["blocks"]) != 1:
                    continue
                head = st["shape"][1] * st["shape"][2] * st["shape"][3]
                es = gen.ELEM_SIZE[st["dtype"]]
                slots = (record.expected_mtp(c, ins, c["batch"])["state_slots_written"] if mtp
                         else record.expected_stp(c, ins, c["batch"]))
                for r in c["results"]:
                    after = stored(bin_, next(t for t in r["outputs"] if t["name"] == "state")["blocks"][0])
                    if after is None:
                        continue
                    ok = record.unchanged_outside(before, after, record.slot_ranges(slots, st["strides"][0], head, es))
                    self.assertTrue(ok, f"{c['name']} {r['algorithm_requested']}")
                    changed = record.changed_slots(before, after, st["shape"][0], st["strides"][0], head, es)
                    self.assertTrue(set(changed) <= set(slots))
                    if mtp:
                        self.assertEqual(changed, r["state_slots_changed"])
                    out = next(t for t in r["outputs"] if t["name"] == "out")
                    ob = stored(bin_, out["blocks"][0])
                    if ob is not None:
                        self.assertTrue(record.fully_written(ob, out))
                    n += 1
        self.assertGreater(n, 10)

    def test_unchanged_outside_detects_a_stray_write(self):
        before = bytes(64)
        after = bytearray(before)
        after[40] = 1
        self.assertFalse(record.unchanged_outside(before, bytes(after), [(0, 32)]))
        self.assertTrue(record.unchanged_outside(before, bytes(after), [(32, 48)]))


def fake_build(cases, failed=()):
    groups, failed_groups = {}, {}
    for c in cases:
        gid, key = specmod.group_key(c)
        if gid in failed:
            failed_groups[gid] = {"error": "static assertion failed", "cases": [c["name"]], **key}
        else:
            groups[gid] = {"symbol": "firec_" + gid, **key}
    return {"flashinfer": "0.0.0", "wheel": "fake.whl", "nvcc": "fake", "host_cxx": "fake", "nvcc_flags": [],
            "groups": groups, "failed_groups": failed_groups, "references": []}


class FakeRuns(unittest.TestCase):
    def test_verify_mode_end_to_end(self):
        """main.verify over the real reference manifests with the host-memory driver: every
        case is re-recorded and compared; the inputs all match, the fake outputs do not, and
        the mismatches are counted (a real run exits non-zero on them)."""
        import shutil

        from main import verify

        if PY_LIMIT:
            self.skipTest("numpy not installed (the reference's largest inputs take minutes in pure Python)")
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "reference"))
            refs, cases = [], []
            for d in (STP, MTP):
                name = os.path.basename(d)
                with open(os.path.join(tmp, "reference", name + ".json"), "wb") as f:
                    f.write(record.read_maybe_xz(os.path.join(d, "manifest.json")))
                refs.append(name)
                cases += specmod.load_reference(os.path.join(d, "manifest.json"))[1]
            build = fake_build(cases)
            build["references"] = refs
            lines = []
            ncases, nblocks, failures = verify(FakeDriver(), FakeDriver().info(), build, tmp, os.path.join(tmp, "out"),
                                               log=lines.append)
            self.assertEqual(ncases, 22)
            want = sum(len(t["blocks"]) for c in cases for t in c["inputs"])
            want += sum(len(t["blocks"]) for c in cases for r in c["results"] for t in r["outputs"])
            self.assertEqual(nblocks, want)
            self.assertGreater(failures, 0)
            text = "\n".join(lines)
            self.assertNotIn("input", text)  # every input block reproduced
            self.assertIn("primitive_checks (FlashInfer's Philox and SR conversion): 19 values, MISMATCH", text)
            self.assertIn("MISMATCH", text)
            self.assertTrue(os.path.exists(os.path.join(tmp, "out", "verify", "flashinfer_ssu_mtp",
                                                        "pr10_h8_b2_dst2d", "manifest.json")))

    def test_record_mode_skips_groups_that_did_not_compile(self):
        from main import record_cases

        cases = [c for c in specmod.load_spec(os.path.join(TOOL, "cases", "new_cases.json"))
                 if c["name"] in ("mtp_d80_ds64_f16_pr10_inter", "mtp_d128_ds64_f16_pr10_inter")]
        bad = specmod.group_key(cases[0])[0]
        build = fake_build(cases, failed={bad})
        lines = []
        with tempfile.TemporaryDirectory() as tmp:
            rows = record_cases(FakeDriver(), FakeDriver().info(), build, cases, tmp, 1 << 20, log=lines.append)
            self.assertEqual([r[0] for r in rows], ["mtp_d128_ds64_f16_pr10_inter"])
            self.assertTrue(any("skipped" in ln for ln in lines))
            self.assertTrue(os.path.exists(os.path.join(tmp, "mtp_d128_ds64_f16_pr10_inter", "fixtures.bin")))
            with open(os.path.join(tmp, "mtp_d128_ds64_f16_pr10_inter", "timings.json")) as f:
                t = json.load(f)
                self.assertEqual(sorted(t["us_per_call"]), ["auto", "simple"])
                self.assertEqual(t["us_per_call_queued"], {"auto": 0.5, "simple": 0.5})
                # The cold timing: the state rotated over copies (the fake's L2 is 0 bytes: 2).
                self.assertEqual(t["us_per_call_cold"], {"auto": 0.75, "simple": 0.75})
                self.assertEqual(t["cold_copies"], 2)

    def test_cold_copies_cover_twice_the_l2(self):
        """The cold timing's copies of a state: at least 2, together at least twice the L2."""
        import record

        l2 = 50 << 20
        self.assertEqual(record.cold_copies(256 << 20, l2), 2)
        self.assertEqual(record.cold_copies(16 << 20, l2), 7)
        self.assertEqual(record.cold_copies(50 << 20, l2), 2)
        self.assertEqual(record.cold_copies(1, 0), 2)
        for sb in (1, 1000, 3 << 20, 33 << 20, 100 << 20):
            n = record.cold_copies(sb, l2)
            self.assertGreaterEqual(n * sb, 2 * l2)
            self.assertLess((n - 1) * sb, 2 * l2 if n > 2 else 10 ** 18)

    def test_verify_reproduces_every_input_block(self):
        """Re-recording the reference cases rebuilds every input block (same SHA-256): the
        runner uploads exactly the recorded inputs; only the fake kernel's outputs differ."""
        from main import compare

        for d in (STP, MTP):
            ref_m, cases = specmod.load_reference(os.path.join(d, "manifest.json"))
            for c in cases:
                if PY_LIMIT and any(t["storage_elems"] > PY_LIMIT and t.get("generator", {}).get("tag") != 10
                                    for t in c["inputs"]):
                    continue
                ref = next(x for x in ref_m["cases"] if x["name"] == c["name"])
                drv = FakeDriver()
                rec, data, _ = record.run_case(drv, c, "firec_fake", 132, ref_case=ref)
                n, bad = compare(rec, ref)
                self.assertGreater(n, 0)
                self.assertFalse([b for b in bad if b.startswith("input")], c["name"])
                self.assertEqual(len(rec["results"]), len(ref["results"]))
                for r in rec["results"]:
                    self.assertTrue(r["run_to_run_identical"])
                    self.assertTrue(r["out_fully_written"])
                    self.assertEqual([t["name"] for t in r["outputs"]],
                                     [t["name"] for t in ref["results"][0]["outputs"]])
                self.assertEqual(drv.mem, {}, "device buffers freed")

    def test_record_mode_reports_a_cuda_error(self):
        from main import record_cases

        cases = [c for c in specmod.load_spec(os.path.join(TOOL, "cases", "new_cases.json"))
                 if c["name"] == "stp_d64_ds128_pr3"]
        lines = []
        with tempfile.TemporaryDirectory() as tmp:
            rows = record_cases(FakeDriver(cuda_error={3}), FakeDriver().info(), fake_build(cases), cases, tmp,
                                1 << 20, log=lines.append)
            self.assertEqual(rows, [("stp_d64_ds128_pr3", 3, 1, False)])
            self.assertTrue(any("CUDA error with horizontal" in ln for ln in lines))
            m, _ = load(os.path.join(tmp, "stp_d64_ds128_pr3"))
            self.assertEqual(m["cases"][0]["rejected_algorithms"][0]["status"], "cuda_error")

    def test_record_mode_stops_at_a_lost_context_and_names_the_case(self):
        from main import record_cases

        by_name = {c["name"]: c for c in specmod.load_spec(os.path.join(TOOL, "cases", "new_cases.json"))}
        cases = [by_name["stp_d64_ds128_pr3"], by_name["stp_d64_ds128_pr7"]]
        lines, lost = [], []
        with tempfile.TemporaryDirectory() as tmp:
            rows = record_cases(FakeDriver(lose_context={3}), FakeDriver().info(), fake_build(cases), cases, tmp,
                                1 << 20, log=lines.append, lost=lost)
        # The first case's horizontal call loses the context: the case is reported, the second
        # one is left for a fresh process (main() continues with --skip of the handled cases).
        self.assertEqual([r[0] for r in rows], ["stp_d64_ds128_pr3"])
        self.assertFalse(rows[0][3])
        self.assertEqual(lost[0], "stp_d64_ds128_pr3")
        self.assertIn("illegal memory access", lost[1])
        self.assertTrue(any("unusable after stp_d64_ds128_pr3" in ln for ln in lines))

    def _sample(self, tmp, names, reject=()):
        by_name = {c["name"]: c for c in specmod.load_spec(os.path.join(TOOL, "cases", "new_cases.json"))}
        cases = [by_name[n] for n in names]
        dirs = []
        for c in cases:
            drv = FakeDriver(reject=reject)
            rec, data, store = record.run_case(drv, c, "firec_fake", 132)
            hdr = {"format": "flashinfer-ssu-golden", "format_version": 1, "reference": "fake", "byte_order": "little",
                   "environment": {"gpu": "fake"}}
            d = os.path.join(tmp, c["name"])
            record.write_manifest(d, hdr, [rec], data, [store], 1 << 16)
            dirs.append(d)
        return dirs

    def test_writer_output_is_consistent(self):
        with tempfile.TemporaryDirectory() as tmp:
            names = ["stp_d64_ds128_pr10_padded_indices", "mtp_d64_ds128_pr10_varlen_cu_int64",
                     "mtp_d64_ds128_pr3_dst2d"]
            dirs = self._sample(tmp, names, reject={3})
            for d in dirs:
                m, bin_ = load(d)
                self.assertEqual(m["bins"][0]["sha256"], hashlib.sha256(bin_).hexdigest())
                self.assertEqual(m["bins"][0]["bytes"], len(bin_))
                (c,) = m["cases"]
                blocks = [b for t in c["inputs"] for b in t["blocks"]]
                blocks += [b for r in c["results"] for t in r["outputs"] for b in t["blocks"]]
                for b in blocks:
                    s = stored(bin_, b)
                    if s is None:
                        self.assertGreater(b["nbytes"], 1 << 16)
                    else:
                        self.assertEqual(b["byte_offset"] % 64, 0)
                        self.assertEqual(hashlib.sha256(s).hexdigest(), b["sha256"])
            m, _ = load(dirs[0])
            c = m["cases"][0]
            self.assertEqual([r["algorithm_requested"] for r in c["results"]], ["simple", "vertical", "auto"])
            self.assertEqual(c["rejected_algorithms"][0]["algorithm"], "horizontal")
            self.assertEqual(c["rejected_algorithms"][0]["status"], "rejected")
            self.assertEqual(c["results"][0]["algorithm_used_by_rule"], "simple")
            m, _ = load(dirs[2])
            c = m["cases"][0]
            self.assertEqual(c["state_write_mode"], "dst_per_step")
            self.assertEqual(c["expected"]["state_slots_written"], [0, 1, 2, 3, 4, 5, 7])

    def test_python_readers_load_the_writer_output(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("torch not installed (the project's Python readers need it)")
        sys.path.insert(0, os.path.join(REPO, "python", "tests"))
        import flashinfer_cases as fc
        import flashinfer_mtp_cases as fmc

        with tempfile.TemporaryDirectory() as tmp:
            names = ["stp_d80_ds96_f16_pr5", "stp_d64_ds128_pr10_horizontal_rule_264",
                     "mtp_d64_ds128_pr10_padded_nat_int64", "mtp_d80_ds64_f16_pr10_inter"]
            dirs = self._sample(tmp, names)
            for d in dirs:
                path = os.path.join(d, "manifest.json")
                mtp = "mtp" in os.path.basename(d)
                m = (fmc.MtpManifest if mtp else fc.Manifest)(path)
                (c,) = m.cases
                self.assertEqual(c.name, os.path.basename(d))
                for t in c.inputs.values():
                    m.input_pieces(t)  # stored or regenerated, SHA-256 checked
                self.assertTrue(c.results)
                for r in c.results:
                    for t in r.outputs.values():
                        m.expected_blocks(t)
                if mtp:
                    self.assertEqual(m.cache_steps(c), m.case_json[c.name]["cache_steps"])


INT16 = os.path.join(TOOL, "cases", "int16_cases.json")


class Int16(unittest.TestCase):
    """The int16 block-scaled state: generator tags 11-13, the spec's state_scale and
    intermediate_state_scales blocks, the runner's scale outputs and merge's --store-always."""

    def test_generator_tags(self):
        import struct

        q = struct.unpack("<4000h", gen.block_bytes(9, 11, "int16", 0, 4000, use_numpy=False))
        # Never -32768 (FlashInfer's saturation bound is +-32767), the whole range covered.
        self.assertTrue(all(-32767 <= v <= 32767 for v in q))
        self.assertLess(min(q), -32000)
        self.assertGreater(max(q), 32000)
        self.assertEqual(gen.value(11, 0), -32767.0)
        self.assertEqual(gen.value(11, 65534), 32767.0)
        s = struct.unpack("<4000f", gen.block_bytes(9, 12, "float32", 0, 4000, use_numpy=False))
        self.assertTrue(all(2.0**-21 <= v < 2.0**-15 for v in s))
        # 11 significant bits: exact in fp32, bf16-free; both ends of the exponent range occur.
        self.assertTrue(all((v * 2.0**31) % 1 == 0 and 1024 <= v / 2.0 ** (int(__import__("math").frexp(v)[1]) - 11) < 2048
                            for v in s[:200]))
        self.assertEqual({int(__import__("math").frexp(v)[1]) for v in s}, set(range(-20, -14)))
        self.assertEqual(gen.block_bytes(9, 13, "float32", 5, 3), b"\xff" * 12)
        self.assertEqual(gen.block_bytes(9, 10, "int16", 5, 3), b"\xff" * 6)
        with self.assertRaises(ValueError):
            gen.block_bytes(9, 11, "float32", 0, 4)
        with self.assertRaises(ValueError):
            gen.block_bytes(9, 1, "int16", 0, 4)
        # Known words: element 0 of stream (gen_seed 9, tag 11), from the formula by hand.
        r = gen.mix64((gen.stream_seed(9, 11) + gen.GOLDEN) & gen.MASK)
        self.assertEqual(q[0], (r % 65535) - 32767)
        r = gen.mix64((gen.stream_seed(9, 12) + gen.GOLDEN) & gen.MASK)
        self.assertEqual(s[0], (1024 + (r & 1023)) * 2.0 ** (((r >> 10) % 6) - 31))

    @unittest.skipUnless(gen.have_numpy(), "numpy not installed")
    def test_numpy_and_python_paths_agree_int16(self):
        for tag, dtype in [(11, "int16"), (12, "float32"), (12, "float16"), (12, "bfloat16"), (13, "float32")]:
            a = gen.block_bytes(77, tag, dtype, 1000, 5000, use_numpy=True)
            b = gen.block_bytes(77, tag, dtype, 1000, 5000, use_numpy=False)
            self.assertEqual(a, b, (tag, dtype))

    def _check_int16_case(self, c):
        """The facts every case of an int16 spec holds (the storage reaches, the generator tags,
        the scales' shape and strides, no SR, the intermediate scales with a buffer); its group id."""
        ins = {t["name"]: t for t in c["inputs"]}
        for t in c["inputs"]:
            reach = sum((n - 1) * s for n, s in zip(t["shape"], t["strides"]))
            self.assertLess(reach, t["storage_elems"], f"{c['name']} {t['name']}")
        self.assertEqual(ins["state"]["dtype"], "int16")
        self.assertEqual(ins["state"]["generator"]["tag"], 11)
        sc = ins["state_scale"]
        self.assertEqual((sc["dtype"], sc["generator"]["tag"]), ("float32", 12))
        self.assertEqual(sc["shape"], ins["state"]["shape"][:3])
        self.assertEqual(sc["strides"][1:], [c["dim"], 1])
        self.assertEqual(c["philox_rounds"], 0)
        self.assertNotIn("rand_seed", ins)
        self.assertTrue(c["present"]["state_scale"])
        gid, _ = specmod.group_key(c)
        self.assertIn("_si16_", gid)
        self.assertIn("_scf32_pr0", gid)
        if "intermediate_states_buffer" in ins:
            ib, isc = ins["intermediate_states_buffer"], ins["intermediate_state_scales"]
            self.assertEqual(ib["dtype"], "int16")
            self.assertEqual(isc["shape"], [c["batch"], c["cache_steps"], c["nheads"], c["dim"]])
            self.assertEqual((isc["dtype"], isc["generator"]["tag"]), ("float32", 13))
            self.assertTrue(c["present"]["intermediate_state_scales"])
        elif c.get("path") == "mtp":
            self.assertFalse(c["present"]["intermediate_state_scales"])
        return gid

    def test_spec_parses_and_fits(self):
        cases = specmod.load_spec(INT16)
        self.assertEqual(len(cases), 42)
        groups = {self._check_int16_case(c) for c in cases}
        self.assertEqual(len(groups), 16)
        c = next(c for c in cases if c["name"] == "i16_stp_d64_ds128_strided")
        sc = next(t for t in c["inputs"] if t["name"] == "state_scale")
        self.assertEqual((sc["strides"], sc["storage_elems"]), ([528, 64, 1], 5 * 528 + 512))

    def test_int16_dsbig_spec_parses_and_fits(self):
        """cases/int16_dsbig_cases.json: an int16 state with its scales above dstate 256, single
        token at 512 only (FlashInfer's result at 288 to 480 is undefined), multi token at 288,
        384 and 512."""
        cases = specmod.load_spec(os.path.join(TOOL, "cases", "int16_dsbig_cases.json"))
        self.assertEqual(len(cases), 14)
        groups = {self._check_int16_case(c) for c in cases}
        self.assertEqual(len(groups), 8)
        for c in cases:
            if c.get("path") == "mtp":
                self.assertIn(c["dstate"], (288, 384, 512))
            else:
                self.assertEqual(c["dstate"], 512)

    def test_spec_errors(self):
        base = {"name": "x", "gen_seed": 1, "state_dtype": "int16", "state_scale_dtype": "float32", "philox_rounds": 0}
        specmod.build_case(base)
        for bad in ({"state_dtype": "float16"}, {"philox_rounds": 10}, {"state_scale_dtype": "float16"},
                    {"batch": 2, "state_batch_indices": [1, -1]},  # the pad slot -1 is outside the state
                    {"path": "mtp", "T": 4, "batch": 2, "intermediate": {"cache_size": 3, "indices": [2, 0]}}):
            with self.assertRaises(specmod.SpecError, msg=str(bad)):
                specmod.build_case({**base, **bad})
        with self.assertRaises(specmod.SpecError):
            specmod.build_case({"name": "x", "gen_seed": 1, "state_scale_stride_batch": 600, "philox_rounds": 0})
        with self.assertRaises(specmod.SpecError):
            specmod.build_case({"name": "x", "gen_seed": 1, "state_dtype": "int16", "philox_rounds": 5})
        # Unscaled int16 (FlashInfer's plain clamp-and-round store) and a multi-token pad read
        # slot outside the state (the multi-token kernel reads no pad scale) are taken.
        specmod.build_case({"name": "x", "gen_seed": 1, "state_dtype": "int16", "philox_rounds": 0})
        specmod.build_case({**base, "path": "mtp", "T": 2, "batch": 2, "state_batch_indices": [1, -1]})

    def test_runner_records_the_scale_blocks(self):
        by_name = {c["name"]: c for c in specmod.load_spec(INT16)}
        hdr = {"format": "flashinfer-ssu-golden", "format_version": 1, "reference": "fake", "byte_order": "little",
               "environment": {"gpu": "fake"}}
        with tempfile.TemporaryDirectory() as tmp:
            for name, mtp in (("i16_stp_d64_ds64_dst", False), ("i16_mtp_d64_ds64_T4_inter", True)):
                c = by_name[name]
                rec, data, store = record.run_case(FakeDriver(reject={3}), c, "firec_fake", 132)
                d = os.path.join(tmp, name)
                record.write_manifest(d, hdr, [rec], data, [store], 1 << 16)
                m, bin_ = load(d)
                (mc,) = m["cases"]
                for r in mc["results"]:
                    outs = {t["name"]: t for t in r["outputs"]}
                    want = {"state", "out", "state_scale"} | (
                        {"intermediate_states_buffer", "intermediate_state_scales"} if mtp else set())
                    self.assertEqual(set(outs), want)
                    # The fake kernel writes neither state nor scales.
                    self.assertTrue(r["state_scale_outside_written_slots_unchanged"])
                    self.assertEqual(r["state_scale_slots_changed"], [])
                    sc_in = next(t for t in mc["inputs"] if t["name"] == "state_scale")
                    self.assertEqual(outs["state_scale"]["blocks"][0]["sha256"], sc_in["blocks"][0]["sha256"])
                    self.assertIsNotNone(stored(bin_, outs["state_scale"]["blocks"][0]))
                    if mtp:
                        self.assertEqual(r["intermediate_scales_slots_written"], [])
                        self.assertFalse(r["intermediate_scales_written_exactly_expected"])
                        self.assertEqual(mc["expected"]["intermediate_slots_written"],
                                         [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
                if not mtp:
                    self.assertEqual(mc["results"][0]["algorithm_requested"], "simple")

    def test_merge_stores_named_tensors_past_the_cap(self):
        c = next(c for c in specmod.load_spec(INT16) if c["name"] == "i16_stp_d64_ds64")
        rec, data, store = record.run_case(FakeDriver(reject={3}), c, "firec_fake", 132)
        hdr = {"format": "flashinfer-ssu-golden", "format_version": 1, "reference": "fake", "byte_order": "little"}
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "rec", c["name"])
            record.write_manifest(src, hdr, [rec], data, [store], 1 << 30)
            import subprocess

            for extra, scale_stored in (([], False), (["--store-always", "state_scale"], True)):
                out = os.path.join(tmp, "merged" + str(len(extra)))
                subprocess.run([sys.executable, os.path.join(TOOL, "merge.py"), out, src, "--path", "stp",
                                "--cap", "1024"] + extra, check=True, capture_output=True)
                m, bin_ = load(out)
                (mc,) = m["cases"]
                scales = [t for r in mc["results"] for t in r["outputs"] if t["name"] == "state_scale"]
                scales.append(next(t for t in mc["inputs"] if t["name"] == "state_scale"))
                for t in scales:
                    self.assertGreater(t["blocks"][0]["nbytes"], 1024)
                    self.assertEqual(stored(bin_, t["blocks"][0]) is not None, scale_stored)
                st = next(t for t in mc["inputs"] if t["name"] == "state")
                self.assertIsNone(stored(bin_, st["blocks"][0]))


CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                     "mamba-ssu", "flashinfer", "0.7.2.post1", "extract", "flashinfer")


class Build(unittest.TestCase):
    @unittest.skipUnless(os.path.isdir(CACHE), "the 0.7.2.post1 wheel is not extracted (build.py does it)")
    def test_flags_read_from_the_wheel_are_those_of_the_recorded_data(self):
        import extract_flags

        flags, prov = extract_flags.extract(CACHE)
        m, _ = load(STP)
        recorded = [f for f in m["environment"]["nvcc_flags"] if not f.startswith("--threads")]
        self.assertEqual(sorted(flags), sorted(recorded))
        self.assertIn("-gencode=arch=compute_90a,code=sm_90a", flags)

    def test_group_source_defines_the_constants_before_the_header(self):
        import build as buildmod

        c = specmod.load_spec(os.path.join(TOOL, "cases", "new_cases.json"))[0]
        gid, key = specmod.group_key(c)
        src = buildmod.group_source(gid, key, {"FIREC_HAS_STATE_SCALE": 1})
        head = src.index("#include <flashinfer/mamba/selective_state_update.cuh>")
        for want in ("constexpr int DIM = 80;", "constexpr int DSTATE = 64;", "using state_t = half;",
                     "constexpr int PHILOX_ROUNDS = 0;", "using numAcceptedIndex_t = int32_t;"):
            self.assertLess(src.index(want), head, want)
        self.assertIn(f"#define FIREC_ENTRY firec_{gid}", src)

    def test_built_library_abi(self):
        """The built libfirec.so (when build.py has run): its argument block has the runner's
        layout, and a call without a GPU comes back as a CUDA error, not a crash."""
        import glob
        import shutil
        import subprocess

        libs = glob.glob(os.path.join(REPO, "target", "flashinfer-recorder", "*", "dist", "lib", "libfirec.so"))
        if not libs or not shutil.which("cc"):
            self.skipTest("libfirec.so not built (build.py) or no C compiler for the libcuda stand-in")
        dist = os.path.dirname(os.path.dirname(libs[0]))
        with tempfile.TemporaryDirectory() as tmp:
            # A stand-in for the driver library: resolves the driver-API symbols FlashInfer's
            # headers use, and has no device.
            with open(os.path.join(tmp, "stub.c"), "w") as f:
                f.write("int cuTensorMapEncodeTiled(void) { return 999; }\n"
                        "int cuGetErrorString(int e, const char** s) { *s = \"stub\"; return 0; }\n")
            subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(tmp, "libcuda.so.1"),
                            os.path.join(tmp, "stub.c")], check=True)
            code = f"""
import ctypes, json, sys
ctypes.CDLL({os.path.join(tmp, "libcuda.so.1")!r}, mode=ctypes.RTLD_GLOBAL)
sys.path.insert(0, {os.path.join(TOOL, "runner")!r})
import device
d = device.Driver({libs[0]!r})
b = json.load(open({os.path.join(dist, "build.json")!r}))
g = next(iter(b["groups"].values()))
a = device.FirecArgs(batch=1, nheads=8, ngroups=2, dim=g["dim"], dstate=g["dstate"], state_cache_size=1,
                     ntokens_mtp=g["ntokens_mtp"], algorithm=1)
st, msg = d.call(d.entry(g["symbol"]), a)
print(st, msg)
"""
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith("2 "), r.stdout)


if __name__ == "__main__":
    unittest.main()
