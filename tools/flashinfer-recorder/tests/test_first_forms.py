"""Tests of first_forms.py, the reader of the first accumulate form of FlashInfer's single-token
kernels (no GPU needed).

  python3 -m unittest discover -s tools/flashinfer-recorder/tests -v

The classifier is checked on small synthetic SASS listings of both forms and of patterns it
must leave unclassified (and the horizontal kernel's classifier on listings of its update and
epilogue forms), the Python copy of the rule against csrc/ssu.cu's first_form_f1, and,
when a 0.7.2.post1 recorder build with group libraries and a cuobjdump are on this machine,
every classified instantiation of the build against the rule.
"""

import glob
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(TOOL))
sys.path.insert(0, TOOL)

import first_forms as ff  # noqa: E402

GROUP = "stp_sf16_ibf16_wbf16_af32_sii32_d128_ds128_pr0"


def listing(*insns):
    """cuobjdump -sass lines of one function body: address comment, instruction, encoding."""
    out = []
    for k, text in enumerate(insns):
        out.append(f"        /*{16 * k:04x}*/                   {text} ;        /* 0x000fe20000000000 */")
        out.append("                                                                  /* 0x000fc40000000000 */")
    return out


def forms(*insns):
    return [o["form"] for o in ff.classify(ff.parse_sass(listing(*insns)))]


# lane 0's first term, F0: FFMA sel, rn(x*D), rn(C*s').
F0 = (
    "FSEL R17, RZ, 1, P1",
    "SHF.L.U32 R7, R26, 0x10, RZ",
    "FMUL.FTZ R7, R7, R10",
    "FFMA.FTZ R8, R16, R27, R29",
    "SHF.L.U32 R27, R26, 0x10, RZ",
    "FMUL.FTZ R26, R27, R8",
    "FFMA.FTZ R26, R17, R7, R26",
    "FFMA.FTZ R7, R7, R25, R26",
)
# F1: FMUL sel, rn(x*D), then FFMA C, s', that product (the sel register reused meanwhile).
F1 = (
    "@P3 SHF.L.U32 R16, R6, 0x10, RZ",
    "SHF.L.U32 R19, R19, 0x10, RZ",
    "FMUL.FTZ R16, R19.reuse, R16",
    "FSEL R29, 1, RZ, !P1",
    "FMUL.FTZ R16, R29, R16",
    "FMUL.FTZ R29, R19, R26",
    "FFMA.FTZ R17, R17, R27, R16",
)


# The horizontal kernel's state update in the form H, s' = fma(x, rn(B dt'), rn(dA s)), its
# accumulation and its epilogue y = fma(D, x, rn(acc_0 + acc_1)), as FlashInfer 0.7.2.post1's
# sm_90 build has them (dA kept in a vector register).
HZ = (
    "FMUL.FTZ R3, R3, R6",
    "FMUL.FTZ R10, R3, 1.4426950216293334961",
    "MUFU.EX2 R3, R10",
    "HADD2.F32 R32, -RZ, R33.H0_H0",
    "FMUL.FTZ R32, R32, R3",
    "FMUL.FTZ R37, R37, R6",
    "FFMA.FTZ R32, R28, R37, R32",
    "FFMA.FTZ R27, R36, R32, R27",
    "SHFL.DOWN PT, R4, R27, 0x10, 0x1f",
    "FADD.FTZ R27, R4, R27",
    "FFMA.FTZ R7, R28, R7, R27",
)
# The same with dA moved into a uniform register first (0.7.4's build at dstate 64).
HZ_UNIFORM = HZ[:3] + ("R2UR UR7, R3", "HADD2.F32 R32, -RZ, R33.H0_H0", "FMUL.FTZ R32, R32, UR7") + HZ[5:]
# The form S, s' = fma(dA, s, rn(x dB)) (the simple and vertical kernels' form).
HZ_S = HZ[:4] + ("FMUL.FTZ R37, R37, R6", "FMUL.FTZ R37, R28, R37", "FFMA.FTZ R32, R32, R3, R37") + HZ[7:]
# An epilogue that adds rn(D x) to the sum.
HZ_ADD = HZ[:10] + ("FMUL.FTZ R8, R28, R7", "FADD.FTZ R7, R27, R8")

# An int16-state single-token row of two columns (one 32-bit word: column 0 in the low half, 1
# in the high half), as FlashInfer's sm_90 vertical kernel has it: s = rn(q * scale), the
# update S, lane 0's first term F0, then the row max, the encode scale and the quantisation.
I16 = (
    "LDS R27, [R20]",
    "LDS R11, [R21+0x3400]",
    "FMUL.FTZ R4, R4, R7",
    "FMUL.FTZ R14, R4, 1.4426950216293334961",
    "MUFU.EX2 R14, R14",
    "FSEL R4, RZ, 1, P1",
    "I2F.S16 R12, R27.H1",
    "I2F.S16 R26, R27",
    "FMUL.FTZ R13, R28, R7",
    "FMUL.FTZ R25, R25, R7",
    "FMUL.FTZ R13, R10, R13",
    "FMUL.FTZ R27, R10, R25",
    "FMUL.FTZ R25, R11, R12",
    "FFMA.FTZ R12, R14, R25, R27",
    "FMUL.FTZ R26, R26, R11",
    "FFMA.FTZ R13, R14, R26, R13",
    "FMUL.FTZ R27, R10, R5",
    "FMUL.FTZ R29, R22, R13",
    "FFMA.FTZ R27, R4, R27, R29",
    "FFMA.FTZ R11, R9, R12, R27",
    "SHFL.DOWN PT, R22, R11, 0x10, 0x1f",
    "FADD.FTZ R11, R11, R22",
    "FMNMX.FTZ R9, |R13|, -3.40282346638528859812e+38, !PT",
    "FMNMX.FTZ R29, |R12|, R9, !PT",
    "SHFL.DOWN PT, R26, R29, 0x10, 0x1f",
    "FMNMX.FTZ R29, R29, R26, !PT",
    "SHFL.IDX PT, R22, R29, RZ, 0x1f",
    "IMAD.MOV.U32 R8, RZ, RZ, 0x3f800000",
    "FSETP.NEU.FTZ.AND P0, PT, R22, RZ, PT",
    "@P0 MUFU.RCP R9, R22",
    "@P0 FMUL.FTZ R8, R9, 32767",
    "FMUL.FTZ R13, R13, R8.reuse",
    "FMUL.FTZ R12, R12, R8",
    "FMNMX.FTZ R13, R13, -32767, !PT",
    "FMNMX.FTZ R12, R12, -32767, !PT",
    "FMNMX.FTZ R9, R13, 32767, PT",
    "FMNMX.FTZ R12, R12, 32767, PT",
    "F2I.FTZ.NTZ R9, R9",
    "F2I.FTZ.NTZ R12, R12",
    "PRMT R9, R9, 0x5410, R12",
    "MUFU.RCP R8, R8",
)
# Column 1 in the form H instead: s1' = fma(x, dB1, rn(dA * s1)).
I16_H = I16[:11] + ("FMUL.FTZ R27, R11, R12", "FMUL.FTZ R27, R14, R27", "FFMA.FTZ R12, R10, R25, R27") + I16[14:]
# Column 1's scale contracted: fma(q1, rn(scale * dA), x dB1).
I16_FUSED = I16[:12] + ("FMUL.FTZ R25, R11, R14", "FFMA.FTZ R12, R12, R25, R27") + I16[14:]


# A multi-token kernel's token step of one column pair as FlashInfer's sm_90 build has it with
# bf16 inputs: dA = ex2(rn(A dt') L2E), the even column S, s' = fma(dA, s, rn(B dtx)), the odd
# one H, s' = fma(B, dtx, rn(dA s)); MTP_H: both columns H (its fp16- and fp32-input builds).
MTP_SH = (
    "FMUL.FTZ R12, R24, R44",
    "FMUL.FTZ R12, R12, 1.4426950216293334961",
    "MUFU.EX2 R12, R12",
    "FMUL.FTZ R44, R44, R43",
    "FMUL.FTZ R15, R44, R15",
    "FFMA.FTZ R38, R12, R38, R15",
    "FMUL.FTZ R46, R12, R46",
    "FFMA.FTZ R46, R44, R17, R46",
)
MTP_H = MTP_SH[:4] + ("FMUL.FTZ R38, R12, R38", "FFMA.FTZ R38, R44, R15, R38") + MTP_SH[6:]


def i16_mtp():
    """A multi-token row, as FlashInfer's kernel has it: the int16 pair dequantised once before
    the step loop, then per step even column S, odd column H, two accumulators added, the
    8-lane shuffles, y = fma(D, x, partial), and the quantisation of the step's state."""
    before = (
        "LDS.128 R12, [R20+0xf00]",
        "LDS R42, [R3]",
        "I2F.S16 R31, R12.H1",
        "I2F.S16 R33, R12",
        "FMUL.FTZ R46, R42.reuse, R31",
        "FMUL.FTZ R38, R42, R33",
    )
    loop = MTP_SH + (
        "FFMA.FTZ R16, R18, R38, RZ",
        "FFMA.FTZ R17, R19, R46, RZ",
        "FADD.FTZ R17, R16, R17",
        "SHFL.DOWN PT, R12, R17, 0x4, 0x1f",
        "FADD.FTZ R14, R17, R12",
        "FFMA.FTZ R43, R43, R11, R14",
        "FMNMX.FTZ R14, |R46|, |R38|, !PT",
        "FMNMX.FTZ R14, R14, -3.40282346638528859812e+38, !PT",
        "SHFL.DOWN PT, R15, R14, 0x4, 0x1f",
        "FMNMX.FTZ R15, R14, R15, !PT",
        "SHFL.IDX PT, R17, R15, R20, 0x1f",
        "HFMA2.MMA R19, -RZ, RZ, 1.875, 0",
        "FSETP.NEU.FTZ.AND P1, PT, R17, RZ, PT",
        "@P1 MUFU.RCP R21, R17",
        "@P1 FMUL.FTZ R19, R21, 32767",
        "FMUL.FTZ R21, R38, R19.reuse",
        "FMUL.FTZ R22, R46, R19",
        "FMNMX.FTZ R21, R21, -32767, !PT",
        "FMNMX.FTZ R22, R22, -32767, !PT",
        "FMNMX.FTZ R21, R21, 32767, PT",
        "FMNMX.FTZ R22, R22, 32767, PT",
        "F2I.FTZ.NTZ R21, R21",
        "F2I.FTZ.NTZ R22, R22",
        "MUFU.RCP R19, R19",
    )
    top = 16 * len(before)
    return before + loop + (f"@!P2 BRA {top:#x}",)


def i16_mtp_function(body):
    mangled = ("_ZN10flashinfer5mamba3mtp40selective_state_update_kernel_simple_mtpI13__nv_bfloat16S3_fsif"
               "Li4ELi64ELi128ELi8ELi0ELi4ELi1EEEvNS1_23SelectiveStateMTPParamsE")
    return [f"\t\tFunction : {mangled}", '\t.headerflags\t@"EF_CUDA_SM90"'] + listing(*body) + ["\t\t.........."]


I16_GROUP = "stp_si16_ibf16_wbf16_af32_sii32_d64_ds64_scf32_pr0"
I16_MTP_GROUP = "mtp_si16_ibf16_wbf16_af32_sii32_d64_ds64_nt4_csi32_nai32_scf32_pr0"


def function(kind, rounds, body, dim=128, dstate=128, types="S2_f6__halfiv"):
    d, n = f"Li{dim}E", f"Li{dstate}E"
    args = {
        "simple": f"{d}{n}{d}Li4ELi{rounds}E",
        "simple_tiled": f"{d}{n}Li4ELi4ELi{rounds}E",
        "vertical": f"{d}{n}Li{rounds}ELi4ELi16ELi3E",
        "horizontal": f"{d}{n}Li{rounds}ELi64ELi8ELi32ELi4E",
    }[kind]
    name = {
        "simple": "36selective_state_update_kernel_simple",
        "simple_tiled": "36selective_state_update_kernel_simple",
        "vertical": "56selective_state_update_kernel_producer_consumer_vertical",
        "horizontal": "58selective_state_update_kernel_producer_consumer_horizontal",
    }[kind]
    mangled = f"_ZN10flashinfer5mamba{name}I13__nv_bfloat16{types}{args}EEvNS0_26SelectiveStateUpdateParamsE"
    return [f"\t\tFunction : {mangled}", '\t.headerflags\t@"EF_CUDA_SM90"'] + listing(*body) + ["\t\t.........."]


def dump(parts):
    lines = ["", "Fatbin elf code:", "================", "arch = sm_90a", "", "\tcode for sm_90a", "\t.target\tsm_90a", ""]
    for p in parts:
        lines += p
    return "\n".join(lines) + "\n"


class Classifier(unittest.TestCase):
    def test_f0(self):
        self.assertEqual(forms(*F0), ["F0"])

    def test_f1(self):
        self.assertEqual(forms(*F1), ["F1"])

    def test_f2(self):
        # rn(sel * rn(x*D)) and rn(C * s') added by an FADD (an fp32 state with fp32 inputs,
        # the tiled simple kernel at dstate 32)
        f2 = F1[:6] + ("FADD.FTZ R17, R16, R29",)
        self.assertEqual(forms(*f2), ["F2"])
        # the FADD's other operand not a product: not a form the tool knows
        self.assertEqual(forms(*(F1[:5] + ("FADD.FTZ R17, R16, R26",))), ["?"])

    def test_vertical_pad_path(self):
        # the rows of a read slot in F0, then the pad path (its zero state times dA) in F1
        body = F0 + ("FMUL.FTZ R15, RZ, R15", "FADD.FTZ R17, R1, R2") + F1
        gid = GROUP.replace("sf16_ibf16", "sf32_if32")
        rows = {r["kind"]: r for r in ff.analyse_group(gid, dump([function("vertical", 0, body)]))}
        self.assertEqual((rows["vertical"]["form"], rows["vertical"]["rule"], rows["vertical"]["status"]),
                         ("F0|pad F1", "F0|pad F1", "agrees"))
        rows = {r["kind"]: r for r in ff.analyse_group(GROUP, dump([function("vertical", 0, body)]))}
        self.assertEqual((rows["vertical"]["form"], rows["vertical"]["status"]), ("F0|pad F1", "DISAGREES"))
        # without the marker the two forms are one kernel's disagreement
        rows = {r["kind"]: r for r in ff.analyse_group(GROUP, dump([function("vertical", 0, body[:8] + body[9:])]))}
        self.assertEqual(rows["vertical"]["form"], "mixed")

    def test_f0_with_sel_second(self):
        body = list(F0)
        body[6] = "FFMA.FTZ R26, R7, R17, R26"
        self.assertEqual(forms(*body), ["F0"])

    def test_each_code_path_is_an_occurrence(self):
        self.assertEqual(forms(*F0, *F0[1:]), ["F0", "F0"])
        self.assertEqual(ff.kernel_form([{"form": "F0"}, {"form": "F0"}]), "F0")
        self.assertEqual(ff.kernel_form([{"form": "F0"}, {"form": "F1"}]), "mixed")
        self.assertEqual(ff.kernel_form([{"form": "F1"}, {"form": "?"}]), "?")
        self.assertEqual(ff.kernel_form([]), "?")

    def test_product_copied_before_use_is_followed(self):
        body = list(F1)
        body[-1:] = ["IMAD.MOV.U32 R31, RZ, RZ, R16", "FFMA.FTZ R17, R17, R27, R31"]
        self.assertEqual(forms(*body), ["F1"])
        # a copy overwritten before it is read, or cleared for a 16-bit load, is dropped
        body[-1:] = ["IMAD.MOV.U32 R31, RZ, RZ, R16", "PRMT R31, RZ, 0x7610, R31",
                     "MOV R30, R16", "IMAD.HI.U32 R30, R2, 0x5, RZ", "FFMA.FTZ R17, R17, R27, R16"]
        self.assertEqual(forms(*body), ["F1"])
        # a copy read as a multiplicand, or a predicated copy, is not followed
        body[-1:] = ["MOV R31, R16", "FFMA.FTZ R17, R31, R27, R17"]
        self.assertEqual(forms(*body), ["?"])
        body[-1:] = ["@P0 MOV R31, R16", "FFMA.FTZ R17, R17, R27, R31"]
        self.assertEqual(forms(*body), ["?"])

    def test_product_as_a_multiplicand_is_unclassified(self):
        body = list(F1)
        body[-1] = "FFMA.FTZ R17, R16, R27, R17"
        self.assertEqual(forms(*body), ["?"])

    def test_addend_not_a_product_is_unclassified(self):
        body = list(F0)
        body[5] = "FADD.FTZ R26, R27, R8"
        self.assertEqual(forms(*body), ["?"])

    def test_multiplicand_not_a_product_is_unclassified(self):
        body = list(F0)
        body[2] = "FADD.FTZ R7, R7, R10"
        self.assertEqual(forms(*body), ["?"])

    def test_overwritten_sel_is_not_read(self):
        body = list(F0)
        body.insert(6, "IMAD.U32 R17, R8, 0x10000, RZ")
        self.assertEqual(forms(*body), [])
        # a 64-bit load over it too
        body[6] = "LDG.E.64 R16, desc[UR4][R2.64]"
        self.assertEqual(forms(*body), [])

    def test_other_selects_are_not_sel(self):
        body = list(F0)
        body[0] = "FSEL R17, RZ, 2, P1"
        self.assertEqual(forms(*body), [])

    def test_operands(self):
        i = ff.Insn(0, "@!P2 FFMA.FTZ R26, -R17, R7.reuse, R26")
        self.assertEqual((i.base, i.plain(1), i.plain(2), i.dests()), ("FFMA", None, 7, [26]))
        self.assertEqual(ff.Insn(0, "SHFL.BFLY PT, R5, R4, 0x1, 0x1f").dests(), [5])
        self.assertEqual(ff.Insn(0, "ISETP.NE.AND P0, PT, R24, RZ, PT").dests(), [])
        self.assertEqual(ff.Insn(0, "STG.E desc[UR4][R2.64], R5").dests(), [])
        self.assertEqual(ff.Insn(0, "IMAD.WIDE.U32 R4, R4, -0x2daee0ad, RZ").dests(), [4, 5])
        self.assertEqual(ff.Insn(0, "IMAD.WIDE.U32 R4, R4, -0x2daee0ad, RZ").reads(), {4})


class Horizontal(unittest.TestCase):
    def form(self, body):
        return ff.horizontal_form(ff.classify_horizontal(ff.parse_sass(listing(*body))))

    def test_forms(self):
        self.assertEqual(self.form(HZ), "H/fma")
        self.assertEqual(self.form(HZ_UNIFORM), "H/fma")
        self.assertEqual(self.form(HZ_S), "S/fma")
        self.assertEqual(self.form(HZ_ADD), "H/add")
        self.assertEqual(self.form(HZ + HZ_S[3:8]), "mixed/fma")
        self.assertEqual(self.form(F0), "?/?")

    def test_uniform_register_overwritten_is_not_dA(self):
        body = list(HZ_UNIFORM)
        body.insert(4, "ULDC UR7, c[0x0][0x208]")
        self.assertEqual(self.form(body), "?/fma")

    def test_rows_of_every_state_dtype(self):
        for state in ("sf16", "sbf16", "sf32"):
            gid = GROUP.replace("sf16", state)
            rows = {r["kind"]: r for r in ff.analyse_group(gid, dump([function("horizontal", 0, HZ)]))}
            self.assertEqual((rows["horizontal"]["form"], rows["horizontal"]["rule"],
                              rows["horizontal"]["status"]), ("H/fma", ff.HORIZONTAL_FORM, "agrees"), state)
        rows = {r["kind"]: r for r in ff.analyse_group(GROUP, dump([function("horizontal", 0, HZ_S)]))}
        self.assertEqual(rows["horizontal"]["status"], "DISAGREES")
        # a head dim FlashInfer 0.7.4 builds no horizontal kernel for: no row
        rows = {r["kind"] for r in ff.analyse_group(GROUP.replace("d128", "d80"), dump([]))}
        self.assertNotIn("horizontal", rows)

    def test_crate_implements_the_form(self):
        with open(os.path.join(REPO, "csrc", "ssu_hz.cuh")) as f:
            src = f.read()
        # s' = fma(x, rn(B dt'), rn(dA s)) and y = fma(D, x, rn(acc + other)), pinned.
        for pattern in (r"__fmaf_rn\(x, \w+\.x, __fmul_rn\(dA, E::lo\(s0\)\)\)",
                        r"__fmaf_rn\(x, \w+\.x, __fmul_rn\(dA, __uint_as_float\(s0\)\)\)",
                        r"__fmaf_rn\(D, x, __fadd_rn\(acc, other\)\)"):
            self.assertTrue(re.search(pattern, src), f"csrc/ssu_hz.cuh lacks {pattern}")


class Int16(unittest.TestCase):
    def summary(self, body, first=True):
        insns = ff.parse_sass(listing(*body))
        c = ff.classify_int16(insns)
        return c, ff.int16_summary(c, ff.kernel_form(ff.classify(insns)) if first else None)

    def test_single_token(self):
        c, s = self.summary(I16)
        self.assertEqual(ff.int16_form(s), "rn/S/F0")
        self.assertEqual((s["acc"], s["quant"]), ("eo", "ok"))
        self.assertEqual(c["update"]["S"], {"even": 1, "odd": 1, "?": 0})
        self.assertEqual((c["max_shfl"], c["max_bcast"], c["enc_default_one"], c["dec"], c["quant"]),
                         (["0x10"], ["RZ"], 1, 1, 2))

    def test_update_h_and_split(self):
        c, s = self.summary(I16_H)
        self.assertEqual(s["update"], "S/H")  # column 0 (even) S, column 1 (odd) H
        self.assertEqual((c["update"]["H"]["odd"], s["quant"]), (1, "ok"))

    def test_contracted_scale(self):
        c, s = self.summary(I16_FUSED)
        self.assertEqual((s["dequant"], c["dequant_fused"], c["dequant_rn"]), ("mixed", 1, 1))

    def test_quantisation_checks(self):
        body = [i.replace("F2I.FTZ.NTZ R12", "F2I.FTZ.TRUNC.NTZ R12") for i in I16]
        self.assertEqual(self.summary(body)[1]["quant"], "missing F2I chain")
        body = [i for i in I16 if not i.startswith("IMAD.MOV.U32 R8")]  # no 1.0 for a zero row
        self.assertEqual(self.summary(body)[1]["quant"], "missing encode")
        body = [i for i in I16 if "-3.40282346638528859812e+38" not in i]
        self.assertIn("max", self.summary(body)[1]["quant"])
        body = [i for i in I16 if i != "MUFU.RCP R8, R8"]
        self.assertEqual(self.summary(body)[1]["quant"], "missing decode")

    def test_quantising_the_dequantised_value_is_not_the_chain(self):
        # the quantiser reading s instead of s': not a quantisation of the update's result
        body = list(I16)
        body[body.index("FMUL.FTZ R13, R13, R8.reuse")] = "FMUL.FTZ R13, R26, R8.reuse"
        self.assertEqual(self.summary(body)[1]["quant"], "missing F2I chain")

    def test_halves_through_prmt(self):
        # the high half of R9 moved into the low half of R30: column 1 (odd); R15's low half
        # moved into R35's high half: column 0 (even)
        body = ("LDG.E.64 R8, desc[UR6][R2.64]", "PRMT R30, R9, 0x7632, R30", "I2F.S16 R30, R30",
                "PRMT R35, R35, 0x5410, R8", "I2F.S16 R36, R35.H1", "FMUL.FTZ R30, R10, R30",
                "FMUL.FTZ R36, R10, R36", "FMUL.FTZ R14, R4, 1.4426950216293334961", "MUFU.EX2 R14, R14",
                "FFMA.FTZ R30, R14, R30, R5", "FFMA.FTZ R36, R14, R36, R5")
        c, _ = self.summary(body, first=False)
        self.assertEqual(c["update"]["S"], {"even": 1, "odd": 1, "?": 0})
        c, _ = self.summary(body[:3] + ("I2F.S16 R36, R35.H1",) + body[5:], first=False)
        self.assertEqual(c["update"]["S"], {"even": 0, "odd": 1, "?": 1})

    def test_multi_token(self):
        c, s = self.summary(i16_mtp(), first=False)
        self.assertEqual((ff.int16_form(s), s["acc"], s["quant"], s["carried"]), ("rn/S/H", "e,o", "ok", True))
        self.assertEqual((c["max_shfl"], c["max_bcast"], c["i2f"]), (["0x4"], ["R20"], 2))
        # the int16 re-read and dequantised inside the step loop: not carried in fp32
        body = i16_mtp()
        body = body[:6] + body[2:6] + body[6:]
        body = body[:-1] + (f"@!P2 BRA {16 * 6:#x}",)
        self.assertFalse(self.summary(body, first=False)[1]["carried"])

    def test_rule(self):
        self.assertEqual(ff.int16_rule("simple", 128), ("rn/S/F0", "eoeo"))
        self.assertEqual(ff.int16_rule("simple_tiled", 64, 80, "0.7.4"), ("rn/S/F1", "eo"))
        self.assertEqual(ff.int16_rule("vertical", 256), ("rn/S/F0", "eoeoeoeo"))
        self.assertEqual(ff.int16_rule("mtp", 128), ("rn/S/H", "eeeeeeee,oooooooo"))
        self.assertEqual(ff.int16_rule("mtp", 128, input_dtype="bfloat16"), ("rn/S/H", "eeeeeeee,oooooooo"))
        self.assertEqual(ff.int16_rule("mtp", 64, input_dtype="float16"), ("rn/H", "eeee,oooo"))
        self.assertEqual(ff.int16_rule("mtp", 64, input_dtype="float32")[0], "rn/H")
        self.assertEqual(ff.int16_rule("simple", 64, input_dtype="float16"), ("rn/S/F0", "eo"))
        # the uneven dstates: the multi-token tile of the next power of two, single-token chains
        # not compared (odd runs), VERTICAL served at 192 only
        self.assertEqual(ff.int16_rule("mtp", 96), ("rn/S/H", "eeeeeeee,oooooooo"))
        self.assertEqual(ff.int16_rule("mtp", 160, input_dtype="float16"), ("rn/H", "e" * 16 + "," + "o" * 16))
        self.assertEqual(ff.int16_rule("simple", 160, input_dtype="float32"), ("rn/S/F1", None))
        self.assertEqual(ff.int16_rule("simple_tiled", 96), ("rn/S/F1", None))
        self.assertEqual(ff.int16_rule("vertical", 192), ("rn/S/F0", "eoeoeo"))
        self.assertIsNone(ff.int16_rule("vertical", 224))
        # above 256: multi token at every dstate (the 512-column tile), single token at 512 only
        # (simple and tiled simple F0), never vertical
        self.assertEqual(ff.int16_rule("mtp", 288), ("rn/S/H", "e" * 24 + "," + "o" * 24))
        self.assertEqual(ff.int16_rule("mtp", 384), ("rn/S/H", "e" * 28 + "," + "o" * 28))
        self.assertEqual(ff.int16_rule("mtp", 416), ("rn/S/H", "e" * 32 + "," + "o" * 32))
        self.assertEqual(ff.int16_rule("mtp", 512, input_dtype="float16"), ("rn/H", "e" * 32 + "," + "o" * 32))
        self.assertEqual(ff.int16_rule("simple", 512), ("rn/S/F0", "eo" * 8))
        self.assertEqual(ff.int16_rule("simple_tiled", 512), ("rn/S/F0", "eo" * 8))
        self.assertIsNone(ff.int16_rule("vertical", 512))
        self.assertIsNone(ff.int16_rule("simple", 288))
        self.assertIsNone(ff.int16_rule("simple_tiled", 480))
        self.assertIsNone(ff.int16_rule("mtp", 544))

    def test_group_rows(self):
        types = "S2_fsif"
        sass = dump([function("simple", 0, I16, 64, 64, types), function("vertical", 0, I16, 64, 64, types),
                     function("simple_tiled", 0, I16_H, 64, 64, types), function("horizontal", 0, HZ, 64, 64, "S2_fsi")])
        rows = {r["kind"]: r for r in ff.analyse_group(I16_GROUP, sass)}
        self.assertEqual(sorted(rows), ["horizontal", "simple", "simple_tiled", "vertical"])
        self.assertEqual([rows[k]["status"] for k in ("simple", "vertical", "simple_tiled", "horizontal")],
                         ["agrees", "agrees", "DISAGREES", "agrees"])
        self.assertEqual((rows["simple_tiled"]["form"], rows["simple_tiled"]["rule"]), ("rn/S/H/F0", "rn/S/F1"))
        g = ff.parse_group(I16_MTP_GROUP)
        self.assertTrue(ff.covered(g))
        sass = "\n".join(["\tcode for sm_90a"] + i16_mtp_function(i16_mtp()))
        rows = ff.analyse_group(I16_MTP_GROUP, sass)
        # dstate 64 would hold 4 even and 4 odd columns per lane; the listing has one of each
        self.assertEqual([(r["kind"], r["form"], r["status"]) for r in rows], [("mtp", "rn/S/H", "DISAGREES")])
        rows = ff.analyse_group(I16_MTP_GROUP.replace("ds64", "ds16"), sass)
        self.assertEqual(rows[0]["status"], "not served")
        self.assertTrue(ff.covered(ff.parse_group(I16_MTP_GROUP.replace("si16", "sf16").replace("_scf32", ""))))
        # fp16 inputs: the rule is H on every column, which the S/H listing is not
        rows = ff.analyse_group(I16_MTP_GROUP.replace("ibf16", "if16"), sass)
        self.assertEqual([(r["form"], r["rule"]) for r in rows], [("rn/S/H", "rn/H")])


MTP_GROUP = "mtp_sf16_ibf16_wbf16_af32_sii32_d64_ds128_nt4_csi32_nai32_pr0"


class MultiToken(unittest.TestCase):
    def test_update_forms(self):
        self.assertEqual(ff.mtp_update_form({"S": 8, "H": 8}), "S/H")
        self.assertEqual(ff.mtp_update_form({"S": 0, "H": 16}), "H")
        self.assertEqual(ff.mtp_update_form({"S": 16, "H": 0}), "S")
        self.assertEqual(ff.mtp_update_form({"S": 3, "H": 8}), "mixed")
        self.assertEqual(ff.mtp_update_form({"S": 0, "H": 0}), "?")
        self.assertEqual(ff.mtp_update_rule("bfloat16"), "S/H")
        self.assertEqual(ff.mtp_update_rule("float16"), "H")
        self.assertEqual(ff.mtp_update_rule("float32"), "H")

    def test_group_rows(self):
        sh = "\n".join(["\tcode for sm_90a"] + i16_mtp_function(MTP_SH))
        h = "\n".join(["\tcode for sm_90a"] + i16_mtp_function(MTP_H))
        row = lambda gid, sass: [(r["kind"], r["form"], r["rule"], r["status"]) for r in ff.analyse_group(gid, sass)]
        self.assertEqual(row(MTP_GROUP, sh), [("mtp", "S/H", "S/H", "agrees")])
        self.assertEqual(row(MTP_GROUP, h), [("mtp", "H", "S/H", "DISAGREES")])
        for other in ("if16_wf16", "if32_wbf16"):
            gid = MTP_GROUP.replace("ibf16_wbf16", other)
            self.assertEqual(row(gid, h), [("mtp", "H", "H", "agrees")])
            self.assertEqual(row(gid, sh), [("mtp", "S/H", "H", "DISAGREES")])
        self.assertEqual(row(MTP_GROUP.replace("sf16", "sf32").replace("ds128", "ds112"), sh),
                         [("mtp", "S/H", None, "not served")])
        self.assertEqual(row(MTP_GROUP, dump([function("simple", 0, F0)])),
                         [("mtp", "?", None, "kernel not found")])


class Kernels(unittest.TestCase):
    def test_kinds_from_mangled_names(self):
        names = {k: function(k, 0, [])[0].split(": ")[1] for k in ("simple", "simple_tiled", "vertical", "horizontal")}
        self.assertEqual(ff.kernel_kind(names["simple"], 128), "simple")
        self.assertEqual(ff.kernel_kind(names["simple_tiled"], 128), "simple_tiled")
        self.assertEqual(ff.kernel_kind(names["vertical"], 128), "vertical")
        self.assertEqual(ff.kernel_kind(names["horizontal"], 128), "horizontal")
        self.assertEqual(ff.kernel_kind(names["simple"], 64), "simple?")

    def test_group_ids(self):
        g = ff.parse_group(GROUP)
        self.assertEqual((g["path"], g["state_dtype"], g["dim"], g["dstate"], g["philox_rounds"]),
                         ("stp", "float16", 128, 128, 0))
        g = ff.parse_group("mtp_sbf16_if32_wbf16_af32_sii32_d128_ds96_nt8_csi32_nai32_pr0")
        self.assertEqual((g["path"], g["state_dtype"], g["input_dtype"], g["dstate"]),
                         ("mtp", "bfloat16", "float32", 96))
        self.assertTrue(ff.covered(g))
        self.assertTrue(ff.covered(ff.parse_group(GROUP.replace("sf16", "sf32"))))
        self.assertIsNone(ff.parse_group("common"))

    def test_group_rows(self):
        sass = dump([function("horizontal", 0, F1), function("vertical", 0, F0),
                     function("simple", 0, F0), function("simple_tiled", 0, F0)])
        rows = {r["kind"]: r for r in ff.analyse_group(GROUP, sass)}
        self.assertEqual(sorted(rows), ["horizontal", "simple", "simple_tiled", "vertical"])
        self.assertEqual([rows[k]["status"] for k in ("simple", "simple_tiled", "vertical", "horizontal")],
                         ["agrees", "DISAGREES", "agrees", "unclassified"])
        self.assertEqual(rows["simple_tiled"]["rule"], "F1")
        self.assertEqual(rows["vertical"]["functions"][0]["arch"], "sm_90a")

    def test_unserved_dstate_and_missing_kernel(self):
        gid = GROUP.replace("ds128", "ds544")  # FlashInfer builds above 512; the crate stops there
        rows = {r["kind"]: r for r in ff.analyse_group(gid, dump([function("simple", 0, F1)]))}
        self.assertEqual((rows["simple"]["form"], rows["simple"]["status"], rows["simple"]["rule"]),
                         ("F1", "not served", None))
        self.assertEqual(rows["vertical"]["status"], "kernel not found")

    def test_command_and_exit_status(self):
        """The command on a fake build whose `cuobjdump` prints prepared listings."""
        with tempfile.TemporaryDirectory() as tmp:
            libs = os.path.join(tmp, "dist", "lib", "groups")
            os.makedirs(libs)
            tool = os.path.join(tmp, "cuobjdump")
            with open(tool, "w") as f:
                f.write('#!/bin/sh\ncat "$2"\n')
            os.chmod(tool, os.stat(tool).st_mode | stat.S_IXUSR)
            good = dump([function("simple", 0, F0), function("simple_tiled", 0, F1), function("vertical", 0, F0)])
            with open(os.path.join(libs, GROUP + ".so"), "w") as f:
                f.write(good)
            with open(os.path.join(libs, "stp_sf32_ibf16_wbf16_af32_sii32_d128_ds128_pr0.so"), "w") as f:
                f.write(good)
            with open(os.path.join(libs, "mtp_sf16_ibf16_wbf16_af32_sii32_d64_ds128_nt8_csi32_nai32_pr0.so"), "w") as f:
                f.write("\n".join(["\tcode for sm_90a"] + i16_mtp_function(MTP_SH)))
            out = io.StringIO()
            with redirect_stdout(out):
                rc = ff.main([tmp, "--cuobjdump", tool, "--json", os.path.join(tmp, "t.json")])
            self.assertEqual(rc, 0, out.getvalue())
            # both groups' simple and vertical kernels and the multi-token kernel; the
            # single-token groups' horizontal kernels are not there
            self.assertIn("7 agree with the rule, 0 disagree, 2 unclassified", out.getvalue())
            self.assertNotIn("not covered", out.getvalue())
            self.assertTrue(os.path.exists(os.path.join(tmp, "t.json")))

            # an unclassified kernel is listed, not a failure
            moved = list(F1)
            moved[-1] = "FFMA.FTZ R17, R16, R27, R17"
            with open(os.path.join(libs, GROUP + ".so"), "w") as f:
                f.write(dump([function("simple", 0, F0), function("simple_tiled", 0, moved),
                              function("vertical", 0, F0)]))
            out = io.StringIO()
            with redirect_stdout(out):
                rc = ff.main([tmp, "--cuobjdump", tool])
            self.assertEqual(rc, 0, out.getvalue())
            self.assertIn("3 unclassified", out.getvalue())

            # a disagreement fails
            with open(os.path.join(libs, GROUP + ".so"), "w") as f:
                f.write(dump([function("simple", 0, F1), function("simple_tiled", 0, F1),
                              function("vertical", 0, F0)]))
            out = io.StringIO()
            with redirect_stdout(out):
                rc = ff.main([tmp, "--cuobjdump", tool])
            self.assertEqual(rc, 1, out.getvalue())


def c_rule(name="first_form_f1", ret="bool"):
    """A function of csrc/ssu.cu (first_form_f1, f32_input_form) as a Python function (its body
    is a few `if (c) return e;` statements and a final `return e;`)."""
    with open(os.path.join(REPO, "csrc", "ssu.cu")) as f:
        src = f.read()
    m = re.search(ret + r" " + name + r"\(([^)]*)\)\s*\{(.*?)\n\}", src, re.S)
    assert m, f"{name} not found in csrc/ssu.cu"
    params = [p.split()[-1] for p in m.group(1).split(",")]

    def expr(c):
        c = c.replace("&&", " and ").replace("||", " or ")
        c = re.sub(r"!(?!=)", " not ", c)
        c = re.sub(r"(\w+) \? (\w+) : (\w+)", r"(\2 if \1 else \3)", c)
        return c.replace("true", "True").replace("false", "False")

    lines = [f"def rule({', '.join(params)}):"]
    for stmt in filter(None, (s.strip() for s in re.sub(r"//[^\n]*", "", m.group(2)).split(";"))):
        s = re.fullmatch(r"if\s*\((.*)\)\s*return\s+(.*)", stmt, re.S)
        r = re.fullmatch(r"return\s+(.*)", stmt, re.S)
        if s:
            lines.append(f"    if {expr(s.group(1))}: return {expr(s.group(2))}")
        elif r:
            lines.append(f"    return {expr(r.group(1))}")
        else:
            raise AssertionError(f"{name} has a statement this test cannot read: {stmt!r}")
    ns = {}
    exec("\n".join(lines), ns)
    return ns["rule"]


class Rule(unittest.TestCase):
    def test_python_copy_equals_the_crate(self):
        rule = c_rule()
        for simple in (False, True):
            for below in (False, True):
                for rounds in range(0, 20):
                    for dstate in (32, 48, 64, 80, 96, 128, 144, 160, 176, 192, 208, 224, 240, 256,
                                   272, 288, 384, 400, 512):
                        for f32 in (False, True):
                            for v074 in (False, True):
                                for f32_in in (False, True):
                                    args = (simple, below, rounds, dstate, f32, v074, f32_in)
                                    self.assertEqual(bool(rule(*args)), ff.first_form_f1(*args), args)

    def test_python_copy_of_the_fp32_input_forms_equals_the_crate(self):
        rule = c_rule("f32_input_form", "int")
        for simple in (False, True):
            for below in (False, True):
                for dstate in (32, 48, 64, 80, 96, 128, 144, 160, 176, 192, 208, 224, 240, 256):
                    for pad in (False, True):
                        for f1 in (False, True):
                            args = (simple, below, dstate, pad, f1)
                            self.assertEqual(rule(*args), ff.f32_input_form(*args), args)

    def test_forms_of_an_fp32_state_with_fp32_inputs(self):
        p = lambda k, ds: ff.predicted_form(k, 0, ds, "float32", "0.7.4", "float32")
        self.assertEqual([p(k, 128) for k in ff.KINDS], ["F0", "F1", "F0|pad F1"])
        self.assertEqual([p(k, 32) for k in ff.KINDS], ["F0", "F2", "F0|pad F1"])
        self.assertEqual([p(k, 48) for k in ff.KINDS], ["F1", "F1", "F0|pad F1"])
        self.assertEqual([p(k, 256) for k in ff.KINDS], ["F0", "F0", "F1"])
        # bf16 inputs: first_form_f1 alone
        self.assertEqual([ff.predicted_form(k, 0, 48, "float32", "0.7.4", "bfloat16") for k in ff.KINDS],
                         ["F0", "F1", "F0"])

    def test_forms_of_0_7_2_post1(self):
        p = ff.predicted_form
        self.assertEqual([p(k, 0, 128) for k in ff.KINDS], ["F0", "F1", "F0"])
        self.assertEqual([p(k, 1, 128) for k in ff.KINDS], ["F0", "F1", "F0"])
        self.assertEqual([p(k, 5, 128) for k in ff.KINDS], ["F0", "F0", "F1"])
        self.assertEqual([p(k, 10, 256) for k in ff.KINDS], ["F1", "F1", "F1"])
        self.assertEqual([p(k, 10, 64) for k in ff.KINDS], ["F0", "F0", "F0"])
        self.assertEqual([p(k, 0, 256, "float32") for k in ff.KINDS], ["F0", "F0", "F1"])
        self.assertEqual([p(k, 0, 128, "float32") for k in ff.KINDS], ["F0", "F1", "F0"])
        self.assertEqual([p(k, 0, 256, "bfloat16") for k in ff.KINDS], ["F0", "F1", "F0"])
        # Read from the SASS of both releases' builds (head dim 64, 0 to 12 and 16 rounds).
        self.assertEqual([p(k, 2, 64) for k in ff.KINDS], ["F0", "F1", "F0"])
        self.assertEqual([p(k, 3, 64) for k in ff.KINDS], ["F0", "F0", "F0"])
        self.assertEqual([p(k, 2, 128) for k in ff.KINDS], ["F0", "F0", "F1"])
        self.assertEqual([p(k, 1, 256) for k in ff.KINDS], ["F0", "F1", "F1"])
        self.assertEqual([p(k, 4, 256) for k in ff.KINDS], ["F0", "F0", "F1"])
        self.assertEqual([p(k, 5, 256) for k in ff.KINDS], ["F0", "F0", "F1"])
        self.assertEqual([p(k, 6, 256) for k in ff.KINDS], ["F1", "F1", "F1"])

    def test_forms_of_0_7_4(self):
        def p(kind, rounds, dstate):
            return ff.predicted_form(kind, rounds, dstate, "float16", "0.7.4")
        self.assertEqual([p(k, 0, 256) for k in ff.KINDS], ["F0", "F1", "F0"])
        self.assertEqual([p(k, 1, 256) for k in ff.KINDS], ["F0", "F0", "F1"])
        self.assertEqual([p(k, 4, 256) for k in ff.KINDS], ["F0", "F0", "F1"])
        self.assertEqual([p(k, 5, 256) for k in ff.KINDS], ["F1", "F1", "F1"])
        self.assertEqual([p(k, 10, 128) for k in ff.KINDS], ["F0", "F0", "F1"])
        self.assertEqual([p(k, 2, 64) for k in ff.KINDS], ["F0", "F1", "F0"])
        self.assertTrue(ff.is_v074("0.7.4") and not ff.is_v074("0.7.2.post1"))


def local_cuobjdump():
    """A cuobjdump that is here without installing one."""
    cached = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                          "mamba-ssu", "cuobjdump-13.2", "nvidia", "cu13", "bin", "cuobjdump")
    for c in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), cached):
        if c and os.access(c, os.X_OK):
            return c
    return None


class Build(unittest.TestCase):
    def test_built_kernels_agree_with_the_rule(self):
        build = os.path.join(REPO, "target", "flashinfer-recorder", "0.7.2.post1")
        libs = glob.glob(os.path.join(build, "dist", "lib", "groups", "stp_sf16_*.so"))
        exe = local_cuobjdump()
        if not libs or not exe:
            self.skipTest("no 0.7.2.post1 recorder build with fp16-state groups (build.py), or no cuobjdump here")
        rows, _ = ff.run(build, cuobjdump=exe, jobs=2)
        bad = [(r["group"], r["kind"], r["form"], r["rule"]) for r in rows if r["status"] == "DISAGREES"]
        self.assertEqual(bad, [])
        self.assertGreater(sum(r["status"] == "agrees" for r in rows), 0)
        print(f"\n  first forms: {sum(r['status'] == 'agrees' for r in rows)} kernels agree with the rule, "
              f"{sum(r['status'] == 'unclassified' for r in rows)} unclassified")

    def test_built_int16_kernels_agree_with_the_documented_forms(self):
        exe = local_cuobjdump()
        seen = 0
        for release in ("0.7.2.post1", "0.7.4"):
            build = os.path.join(REPO, "target", "flashinfer-recorder", release)
            if not glob.glob(os.path.join(build, "dist", "lib", "groups", "*_si16_*.so")) or not exe:
                continue
            rows, _ = ff.run(build, cuobjdump=exe, only="_si16_ibf16_", jobs=2)
            bad = [(r["group"], r["kind"], r["form"], r["rule"], r.get("int16")) for r in rows
                   if r["status"] not in ("agrees", "not served")]
            self.assertEqual(bad, [], release)
            seen += len(rows)
        if not seen:
            self.skipTest("no recorder build with int16-state groups (build.py --spec cases/int16_forms_cases.json), "
                          "or no cuobjdump here")
