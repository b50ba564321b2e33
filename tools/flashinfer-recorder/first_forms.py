#!/usr/bin/env python3
"""Reads the first accumulate form of every single-token kernel in a recorder build from its
SASS and checks it against the crate's rule (csrc/ssu.cu: first_form_f1).

  python3 tools/flashinfer-recorder/first_forms.py [BUILD] [--json OUT] [-v]
      [--cuobjdump PATH] [--only SUBSTRING] [-j N]

BUILD is a recorder build directory (default target/flashinfer-recorder/0.7.2.post1) or its
dist/ directory; a group's code is read from dist/lib/groups/<group>.so, else from
obj/<group>.o. Each group is disassembled with cuobjdump (scripts/cuobjdump.sh finds or
installs it; --cuobjdump or $CUOBJDUMP overrides), and its simple, tiled simple, vertical and
horizontal single-token kernels are found by their mangled names.

The output y of a lane is a dot product over the lane's columns; lane 0 also adds D*x, through
sel = (lane == 0 ? 1 : 0), which the SASS computes as `FSEL Rs, RZ, 1, P` (or `1, RZ`). With
FMA contraction on, the compiler forms lane 0's first term (n0 the lane's first column) in one
of two ways:

  F0  acc = fma(sel, rn(D*x), rn(C[n0]*s'[n0]))   FFMA Racc, Rsel, Rxd, Rcs  with Rxd and Rcs
                                                  both results of FMULs;
  F1  acc = fma(C[n0], s'[n0], rn(sel*rn(D*x)))   FMUL Rp, Rsel, Rxd  (Rxd an FMUL's result),
                                                  and the next instruction touching Rp is an
                                                  FFMA that takes it as its addend only.

Each FFMA or FMUL reading a live sel register is one occurrence (a kernel may have several code
paths); an occurrence that matches neither pattern is `?`. A kernel's form is that of its
occurrences when all are classified and equal, `mixed` when they are classified but differ (a
disagreement: the rule gives one form), `?` when there is none or one is unclassified: the tool
does not guess. Registers are followed in program order (the last definition before a use), not
along the control-flow graph, which is why a pattern split across branches reads as `?`.

The horizontal kernel has no lane-0 select (each row's two partial sums are added after the
loop); what its compiler chose there is the state update's contraction and the epilogue's
(classify_horizontal, forms written `<update>/<epilogue>`): every FFMA that takes dA
(ex2 of a product by log2 e) as a multiplicand is the form S, s' = fma(dA, s, rn(x * dB)), every
FFMA whose addend is a product by dA is the form H, s' = fma(x, dB, rn(dA * s)); the epilogue
after the shuffle down by 16 is `fma` when the sum of the two partials is the addend of an
FFMA (y = fma(D, x, rn(acc_0 + acc_1))). The crate's horizontal kernel (csrc/ssu_hz.cuh)
implements H/fma for every state dtype (HORIZONTAL_FORM).

Groups with an int16 block-scaled state (single token: simple, tiled simple, vertical; multi
token: its simple kernel) are read by classify_int16, which follows values through the
dequantisation, the update, the output's sums and the quantisation, and writes a kernel's form
`<dequant>/<update>[/<first>]`: `rn` when s = rn(float(q) * scale) is an FMUL of its own
(`fused` when the scale goes into an FFMA), the update `S`, `H` or `S/H` (even columns S, odd
columns H, the multi-token kernels' split), lane 0's first form as above. It also checks the
accumulation chains (their columns' parities), the quantisation (row max by FMNMX of |s'| from
-FLT_MAX, shuffle-down tree and broadcast, the encode scale MUFU.RCP + FMUL by 32767 guarded by
m != 0 with 1.0 otherwise, FMNMX clamps to +-32767, F2I to nearest even, MUFU.RCP of the encode
scale as the decode scale) and, multi token, that no I2F lies in the update's step loop (the
state carried in fp32). These are checked against int16_rule, the forms docs/flashinfer-ssu.md
documents, which the crate's int16 kernels implement.

Output: one line per (group, kernel kind) with the form read and, for single-token groups whose
dstate the crate serves (64 to 256), the form the rule predicts (the first-form rule for the
simple and vertical kernels of fp16-, bf16- and fp32-state groups, HORIZONTAL_FORM for the horizontal kernel of
every state dtype, int16_rule for int16-state kernels, multi token included, and
mtp_update_rule for the multi-token kernels of the other states). Exit status: 0 when every classified form agrees with the
rule, 1 when one disagrees (`?` forms are listed separately and are not a failure), 2 when the
build or cuobjdump cannot be read.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys

TOOL = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(TOOL))
DEFAULT_BUILD = os.path.join(REPO, "target", "flashinfer-recorder", "0.7.2.post1")

KINDS = ("simple", "simple_tiled", "vertical")
HORIZONTAL = "horizontal"
SERVED_DSTATES = (64, 96, 128, 160, 192, 224, 256) + tuple(range(288, 513, 32))
# With an fp32 state the crate also serves the other multiples of 16 from 32 to 512 but 112
# (csrc/checks.h: check_dstate).
SERVED_DSTATES_F32 = SERVED_DSTATES + (32, 48, 80, 144, 176, 208, 240) + tuple(
    range(272, 513, 32))
# Above 256 FlashInfer's launcher refuses the vertical kernel (its TMA box: csrc/checks.h,
# check_vertical_dstate): its forms are read, not checked.
LONG_DSTATE = 256
# The update and epilogue forms of the crate's horizontal kernel (csrc/ssu_hz.cuh: every state
# dtype, every round count).
HORIZONTAL_FORM = "H/fma"


# --- the crate's rule ---------------------------------------------------------------------------

def first_form_f1(simple, below, rounds, dstate, f32=False, v074=False, f32_in=False):
    """Python copy of first_form_f1 in csrc/ssu.cu (FlashInfer's single-token kernels; v074:
    FlashInfer 0.7.4's build, else 0.7.2.post1's); it must be kept equal to it. `below`: the
    tiled simple kernel (FlashInfer runs it below the auto switch); `f32`: the state is fp32;
    `f32_in`: the inputs are fp32."""
    if dstate > 256:
        return not (f32 and dstate == 384)
    if f32_in and not f32 and simple and below and 128 < dstate < 256:
        return True
    if f32_in and not f32 and not simple and rounds == 1 and dstate in (128, 192):
        return True
    if f32 and dstate in (32, 48):
        return simple and below
    if f32 and dstate == 80:
        return not simple
    if f32 and dstate == 176:
        return simple
    if f32 and dstate in (144, 208, 240):
        return True
    if dstate == 96 and rounds == 0:
        return simple
    if dstate == 96:
        return rounds == 1 or not (simple and below)
    if 128 < dstate < 256 and not simple:
        return not f32 and not (dstate == 192 and rounds <= 1)
    if 128 < dstate < 256 and not below:
        return True
    if dstate == 160 and v074:
        return rounds < 2 or rounds > 6
    if dstate == 192 and v074:
        return rounds < 2 or rounds > 5
    if dstate == 224 and v074:
        return rounds < 1 or rounds > 2
    if dstate == 224:
        return True
    if 128 < dstate < 256:
        return rounds < 3 or rounds > 7
    if rounds <= 1 and f32 and dstate == 256:
        return not simple
    if rounds == 0:
        return simple and below
    if dstate == 64:
        return simple and below and rounds <= 2
    if dstate == 128 and rounds <= 1:
        return simple and below
    if dstate == 128:
        return not simple
    if v074:
        return rounds >= 5 or not simple
    if rounds >= 6:
        return True
    if rounds >= 4:
        return not simple
    return not simple or below


def is_v074(release):
    """Whether a FlashInfer release builds its kernels as 0.7.4 does (the crate's rules know
    0.7.2.post1 and 0.7.4)."""
    return not str(release).startswith("0.7.2")


def f32_input_form(simple, below, dstate, pad, f1):
    """Python copy of f32_input_form in csrc/ssu.cu (an fp32 state with fp32 inputs: 0 F0, 1 F1,
    2 F2 for a row, `pad` a pad row, `f1` first_form_f1's); it must be kept equal to it."""
    if not simple and pad:
        return 1
    if simple and below and dstate == 32:
        return 2
    if simple and not below and dstate == 48:
        return 1
    return 1 if f1 else 0


FORM_NAMES = ("F0", "F1", "F2")


def predicted_form(kind, rounds, dstate, state_dtype="float16", release="0.7.2.post1",
                   input_dtype=None):
    """The crate's form for a kernel kind: 'F0', 'F1' or 'F2', and 'S|pad P' where the vertical
    kernel's pad path takes another form P than its rows of a read slot (S)."""
    simple = kind in ("simple", "simple_tiled")
    below = kind == "simple_tiled"
    f32 = state_dtype == "float32"
    f1 = first_form_f1(simple, below, rounds, dstate, f32, is_v074(release), input_dtype == "float32")
    if not (f32 and input_dtype == "float32"):
        return "F1" if f1 else "F0"
    state = FORM_NAMES[f32_input_form(simple, below, dstate, False, f1)]
    pad = FORM_NAMES[f32_input_form(simple, below, dstate, True, f1)]
    return state if pad == state else f"{state}|pad {pad}"


def build_release(build):
    """The FlashInfer release of a recorder build (its build.json), else 0.7.2.post1."""
    for d in (build, os.path.join(build, "dist")):
        try:
            with open(os.path.join(d, "build.json")) as f:
                return json.load(f)["flashinfer"]
        except (OSError, ValueError, KeyError):
            continue
    return "0.7.2.post1"


# --- groups -------------------------------------------------------------------------------------

SHORT_DT = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "i16": "int16", "i32": "int32", "i64": "int64"}


def parse_group(gid):
    """The fields of a group id (runner/spec.py: group_key) that decide coverage: path, state
    dtype, dim, dstate, rounds. None when the id does not have that form."""
    t = gid.split("_")
    if len(t) < 8 or t[0] not in ("stp", "mtp") or not t[1].startswith("s"):
        return None
    g = {"path": t[0], "state_dtype": SHORT_DT.get(t[1][1:], t[1][1:])}
    if t[2].startswith("i"):
        g["input_dtype"] = SHORT_DT.get(t[2][1:], t[2][1:])
    for tok in t[2:]:
        m = re.fullmatch(r"(ds|d|pr)(\d+)", tok)
        if m:
            g[{"d": "dim", "ds": "dstate", "pr": "philox_rounds"}[m.group(1)]] = int(m.group(2))
    if not all(k in g for k in ("dim", "dstate", "philox_rounds")):
        return None
    return g


def find_groups(build):
    """{group id: object file} of a build (or of its dist/ directory): a group's shared library
    when there is one, else its object file."""
    build = os.path.abspath(build)
    libdirs = [os.path.join(build, "dist", "lib", "groups"), os.path.join(build, "lib", "groups")]
    found = {}
    objdir = os.path.join(build, "obj")
    if os.path.isdir(objdir):
        for f in os.listdir(objdir):
            if f.endswith(".o") and parse_group(f[:-2]):
                found[f[:-2]] = os.path.join(objdir, f)
    for d in libdirs:
        if os.path.isdir(d):
            for f in os.listdir(d):
                if f.endswith(".so") and parse_group(f[:-3]):
                    found[f[:-3]] = os.path.join(d, f)
    return dict(sorted(found.items()))


# --- kernels ------------------------------------------------------------------------------------

def split_functions(sass):
    """[(arch, mangled name, [lines])] of cuobjdump -sass output."""
    out, arch, cur = [], None, None
    for line in sass.splitlines():
        m = re.search(r"code for (sm_\w+)", line)
        if m:
            arch, cur = m.group(1), None
            continue
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = (arch, m.group(1), [])
            out.append(cur)
            continue
        if cur is not None:
            cur[2].append(line)
    return out


def template_ints(name):
    """The integer template arguments of a mangled name, in order (`Li128E` -> 128)."""
    return [int(v.replace("n", "-")) for v in re.findall(r"Li(n?\d+)E", name)]


def kernel_kind(name, dim):
    """'simple', 'simple_tiled', 'vertical', 'horizontal' for FlashInfer's single-token kernels,
    else None.
    The simple kernel's integer arguments are <DIM, DSTATE, rows per block, warps, rounds>: the
    tiled one (a block per 4 rows) has fewer rows per block than DIM. 'simple?' when its
    arguments do not have that shape."""
    if "selective_state_update_kernel_simple" in name:
        ints = template_ints(name)
        if len(ints) >= 3 and ints[0] == dim:
            return "simple_tiled" if ints[2] < dim else "simple"
        return "simple?"
    if "selective_state_update_kernel_producer_consumer_vertical" in name:
        return "vertical"
    if "selective_state_update_kernel_producer_consumer_horizontal" in name:
        return HORIZONTAL
    return None


# --- SASS ---------------------------------------------------------------------------------------

INSN = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;")
REG = re.compile(r"\bR(\d+)\b")
PLAIN = re.compile(r"^R(\d+)(?:\.reuse)?$")
PRED = re.compile(r"^!?U?P(?:\d+|T|R)$")
# Opcodes without a general-register result (a leading register operand is read).
NO_DEST = re.compile(
    r"^(ST\w*|RED\w*|BRA|BRX|JMP|JMX|CALL|RET|EXIT|WARPSYNC|BSSY|BSYNC|BAR|BMOV|YIELD|NOP|MEMBAR"
    r"|ERRBAR|DEPBAR|FENCE|CCTL\w*|NANOSLEEP|PREEXIT|KILL|BPT|R2P|FCHK|\w*SETP\w*|PLOP3|UTMA\w*"
    r"|UBLKCP|SYNCS|ARRIVES)$"
)


class Insn:
    __slots__ = ("addr", "text", "op", "args")

    def __init__(self, addr, text):
        self.addr, self.text = addr, text
        body = re.sub(r"^@!?U?P\w+\s+", "", text)
        op, _, rest = body.partition(" ")
        self.op = op
        self.args = [a.strip() for a in rest.split(",")] if rest.strip() else []

    @property
    def base(self):
        return self.op.split(".")[0]

    def plain(self, k):
        """The register number of operand k when it is a plain register (no negation, absolute
        value or sub-word selector), else None."""
        if k >= len(self.args):
            return None
        m = PLAIN.match(self.args[k])
        return int(m.group(1)) if m else None

    def _dest(self):
        """(operand index, registers written) of the general-register result, or (None, [])."""
        if NO_DEST.match(self.base) or not self.args:
            return None, []
        k = 0
        while k < len(self.args) and PRED.match(self.args[k]):
            k += 1
        r = self.plain(k)
        if r is None:
            return None, []
        width = 1
        if ".128" in self.op:
            width = 4
        elif ".64" in self.op or ".WIDE" in self.op or (self.base == "CS2R" and ".32" not in self.op) \
                or self.base in ("DADD", "DMUL", "DFMA"):
            width = 2
        return k, [r + i for i in range(width)]

    def dests(self):
        return self._dest()[1]

    def reads(self):
        k, _ = self._dest()
        return {int(m) for j, a in enumerate(self.args) if j != k for m in REG.findall(a)}


def parse_sass(lines):
    out = []
    for line in lines:
        m = INSN.match(line)
        if m:
            out.append(Insn(int(m.group(1), 16), m.group(2)))
    return out


def is_sel(ins):
    """FSEL Rd, RZ, 1, P / FSEL Rd, 1, RZ, P: 1.0 on one lane, 0 on the others."""
    if ins.base != "FSEL" or len(ins.args) != 4 or ins.plain(0) is None:
        return False
    a, b = ins.args[1], ins.args[2]
    return {a, b} == {"RZ", "1"} and PRED.match(ins.args[3]) is not None


def classify(insns):
    """The occurrences of lane 0's first term in a function's instructions:
    [{'form': 'F0'|'F1'|'F2'|'?', 'addr', 'insn', 'why'}] (F2: lane 0's D*x term and its first
    product added by an FADD, no contraction)."""
    last_def = {}  # register -> index of the instruction that last wrote it
    occ = []

    def def_of(i, k):
        r = insns[i].plain(k)
        return None if r is None or r not in last_def else insns[last_def[r]]

    def fmul_result(i, k):
        d = def_of(i, k)
        return d is not None and d.base == "FMUL"

    for i, ins in enumerate(insns):
        if ins.base in ("FFMA", "FMUL"):
            srcs = range(1, len(ins.args))
            sel_at = [k for k in srcs if ins.plain(k) is not None and def_of(i, k) is not None
                      and is_sel(def_of(i, k))]
            if sel_at:
                occ.append(dict(_occurrence(insns, i, sel_at, fmul_result), addr=ins.addr, insn=ins.text))
        for r in ins.dests():
            last_def[r] = i
    return occ


def _occurrence(insns, i, sel_at, fmul_result):
    ins = insns[i]
    if len(sel_at) != 1:
        return {"form": "?", "why": f"sel read twice by {ins.base}"}
    if ins.base == "FFMA":
        if len(ins.args) != 4 or sel_at[0] == 3:
            return {"form": "?", "why": "sel is an FFMA's addend"}
        if not fmul_result(i, 3 - sel_at[0]):
            return {"form": "?", "why": "FFMA with sel: the other multiplicand is not an FMUL's result"}
        if not fmul_result(i, 3):
            return {"form": "?", "why": "FFMA with sel: the addend is not an FMUL's result"}
        return {"form": "F0", "why": "FFMA sel, rn(x*D), rn(C*s')"}
    # FMUL sel, rn(x*D): F1 when the product is next touched by an FFMA taking it as its addend.
    if len(ins.args) != 3 or not fmul_result(i, 3 - sel_at[0]):
        return {"form": "?", "why": "FMUL with sel: the other factor is not an FMUL's result"}
    # The product's registers: the FMUL's result and its unpredicated copies (is_copy), followed
    # until one of them is read (a register written before it is read is dropped).
    held = {ins.plain(0)}
    for j, nxt in enumerate(insns[i + 1:], i + 1):
        if not held & nxt.reads():
            held -= set(nxt.dests())  # a copy overwritten before it is read
            if not held:
                break
            continue
        if is_copy(nxt) and nxt.plain(len(nxt.args) - 1) in held:
            held.add(nxt.plain(0))
            continue
        if is_half_clear(nxt) and nxt.plain(0) in held and nxt.plain(0) != ins.plain(0):
            held.discard(nxt.plain(0))  # a copy's register taken over for a 16-bit load
            continue
        if nxt.base == "FFMA" and len(nxt.args) == 4 and nxt.plain(3) in held \
                and not any(int(r) in held for a in nxt.args[1:3] for r in REG.findall(a)):
            return {"form": "F1", "why": f"FMUL sel, rn(x*D); then {nxt.text}"}
        if nxt.base == "FADD" and len(nxt.args) == 3 and not nxt.text.startswith("@"):
            other = [k for k in (1, 2) if nxt.plain(k) not in held]
            if len(other) == 1 and _last_writer_base(insns, j, nxt.plain(other[0])) == "FMUL":
                return {"form": "F2", "why": f"FMUL sel, rn(x*D); then {nxt.text} (no contraction)"}
        return {"form": "?", "why": f"FMUL with sel: its product is next touched by {nxt.text}"}
    return {"form": "?", "why": "FMUL with sel: its product is not used"}


def _last_writer_base(insns, j, reg):
    """The base opcode of the last instruction before insns[j] that writes register `reg`."""
    if reg is None:
        return None
    for k in range(j - 1, -1, -1):
        if reg in insns[k].dests():
            return insns[k].base
    return None


def is_half_clear(ins):
    """PRMT Rd, RZ, imm, Rd: Rd with bytes replaced by zeros (the compiler's preparation of a
    register for a 16-bit load into it), not a use of its value as a float."""
    return ins.base == "PRMT" and len(ins.args) == 4 and ins.args[1] == "RZ" \
        and ins.plain(0) is not None and ins.plain(3) == ins.plain(0) and not ins.text.startswith("@")


def is_copy(ins):
    """An unpredicated register copy: MOV Rd, Rs or IMAD.MOV.U32 Rd, RZ, RZ, Rs."""
    if ins.text.startswith("@") or ins.plain(0) is None:
        return False
    if ins.base == "MOV" and len(ins.args) == 2:
        return ins.plain(1) is not None
    return ins.op == "IMAD.MOV.U32" and len(ins.args) == 4 and ins.args[1] == "RZ" \
        and ins.args[2] == "RZ" and ins.plain(3) is not None


L2E = "1.4426950216293334961"  # log2(e) as cuobjdump prints the fp32 immediate
UREG = re.compile(r"^UR(\d+)(?:\.reuse)?$")


def classify_horizontal(insns):
    """The state update's and the epilogue's forms in a horizontal kernel: {'update': {'H': n,
    'S': n}, 'epilogue': 'fma' | 'add' | '?', 'examples': [instruction texts]}. Values are
    tagged in program order (a register's tag is set when it is written): a product by log2 e
    ('l2e'), MUFU.EX2 of one ('dA'), a product by a 'dA' ('dA*'), any other product ('mul'),
    followed through moves and into uniform registers (R2UR); an FFMA reading a 'dA'
    multiplicand with a 'mul' addend is S, one whose addend is a 'dA*' is H (an FFMA that only
    seems to read dA, its register reused on a path the program order does not see, has a sum
    as its addend: y = fma(D, x, partial) after a shuffle tree). The epilogue: the sum FADD of a
    SHFL.DOWN by 0x10 and the register it shuffled, then the next instruction reading the sum:
    an FFMA taking it as its addend is 'fma', an FADD is 'add'."""
    tag, utag = {}, {}
    update = {"H": 0, "S": 0}
    examples = []

    def t(ins, k):
        if k >= len(ins.args):
            return None
        a = ins.args[k]
        if a == "RZ":
            return "zero"
        u = UREG.match(a)
        if u:
            return utag.get(int(u.group(1)))
        r = ins.plain(k)
        return tag.get(r) if r is not None else None

    epilogue = "?"
    for i, ins in enumerate(insns):
        new = None
        if ins.base == "FMUL" and L2E in ins.args:
            new = "l2e"
        elif ins.base == "MUFU" and ".EX2" in ins.op and t(ins, 1) == "l2e":
            new = "dA"
        elif ins.base == "MOV":
            new = t(ins, 1)
        elif ins.base == "FMUL" and "dA" in (t(ins, 1), t(ins, 2)):
            new = "dA*"
        elif ins.base == "FMUL":
            new = "mul"
        elif ins.base == "FFMA" and len(ins.args) == 4:
            if "dA" in (t(ins, 1), t(ins, 2)) and t(ins, 3) == "mul":
                update["S"] += 1
                examples.append(ins.text)
            elif t(ins, 3) == "dA*":
                update["H"] += 1
                examples.append(ins.text)
        if ins.base == "SHFL" and ".DOWN" in ins.op and "0x10" in ins.args and epilogue == "?":
            epilogue = _horizontal_epilogue(insns, i)
        for r in ins.dests():
            tag.pop(r, None)
        d = ins.dests()
        if d and new is not None and not ins.text.startswith("@"):
            tag[d[0]] = new
        u = UREG.match(ins.args[0]) if ins.args else None
        if u:  # a uniform register written (R2UR carries its source's tag)
            ud = int(u.group(1))
            utag.pop(ud, None)
            if ins.base == "R2UR" and not ins.text.startswith("@") and t(ins, 1) is not None:
                utag[ud] = t(ins, 1)
    return {"update": update, "epilogue": epilogue, "examples": examples[:4]}


def _horizontal_epilogue(insns, i):
    sh = insns[i]
    got, src = sh.plain(1), sh.plain(2)
    total = None
    for nxt in insns[i + 1:]:
        if total is None:
            if nxt.base == "FADD" and {nxt.plain(1), nxt.plain(2)} == {got, src}:
                total = nxt.plain(0)
            elif got in nxt.reads():
                return "?"
            continue
        if total in nxt.reads():
            if nxt.base == "FFMA" and nxt.plain(3) == total and total not in (nxt.plain(1), nxt.plain(2)):
                return "fma"
            if nxt.base == "FADD":
                return "add"
            return "?"
    return "?"


def horizontal_form(c):
    """A horizontal kernel's form from classify_horizontal: '<update>/<epilogue>', the update
    'H' or 'S' when all its FFMAs agree ('mixed' when they differ, '?' when there are none)."""
    h, s = c["update"]["H"], c["update"]["S"]
    upd = "?" if h == s == 0 else "mixed" if h and s else "H" if h else "S"
    return f"{upd}/{c['epilogue']}"


def kernel_form(occurrences):
    forms = [o["form"] for o in occurrences]
    if not forms or "?" in forms:
        return "?"
    return forms[0] if len(set(forms)) == 1 else "mixed"


# --- int16 block-scaled state -------------------------------------------------------------------

INT16_KINDS = ("simple", "simple_tiled", "vertical", "mtp")
FLT_LOWEST = "-3.40282346638528859812e+38"  # -FLT_MAX as cuobjdump prints the fp32 immediate
ONE_BITS = "0x3f800000"
STATE_TAGS = ("sdec", "snew")


def int16_kernel_kind(name, dim):
    """kernel_kind, plus 'mtp' for FlashInfer's multi-token simple kernel."""
    if "selective_state_update_kernel_simple_mtp" in name:
        return "mtp"
    if "_mtp" in name:
        return None
    return kernel_kind(name, dim)


def _backward_loops(insns):
    """[(first address, last address)] of every backward branch's range."""
    out = []
    for ins in insns:
        if ins.base in ("BRA", "BRX", "JMP"):
            m = re.search(r"0x([0-9a-fA-F]+)\s*$", ins.args[-1] if ins.args else "")
            if m and int(m.group(1), 16) <= ins.addr:
                out.append((int(m.group(1), 16), ins.addr))
    return out


def classify_int16(insns):
    """The fp32 operation forms of a kernel with an int16 block-scaled state, from its
    instructions, values tagged in program order (a register's tag is set by its last
    definition, predicated or not; followed through MOV):

      q      I2F.S16 of the stored int16, with its column's parity: each register holding
             int16 pairs tracks where its two halves came from (a 32-bit or wider load: low
             half even, high half odd; PRMT's byte selectors and SHF.R.U32.HI by 16 move
             them), the I2F reads the low half, or the high one with .H1;
      sdec   FMUL of a q by the decode scale: the dequantised s, rounded on its own (an FFMA
             taking a q as a multiplicand is counted as a scale contracted into the update);
      dA     MUFU.EX2 of a product by log2 e; dAs: FMUL of dA by a state (sdec or snew);
      snew   the update's result: S = FFMA with multiplicands dA and a state (s' = fma(dA, s,
             p)), H = FFMA whose addend is a dAs (s' = fma(a, b, rn(dA*s))); an FMUL of dA by
             RZ (the zero state of a pad path) and the FFMA that uses it, or an FFMA of dA by
             an untagged value, are counted as `zero_state` (their result, snew0, is followed
             into the quantisation but not into the update forms or the output's sums);
      acc    the output's sums: FFMA with a snew multiplicand (its parities in order), FMUL of
             a snew by C (rn(C*s')); a chain is recorded where a non-FFMA reads it (FADD,
             SHFL, a store);
      max    FMNMX of |snew| values (and of -FLT_MAX, `lowest`), SHFL.DOWN offsets, SHFL.IDX
             broadcast ('mbc');
      enc    FMUL of MUFU.RCP(mbc) by 32767 (`default_one` when the register held 1.0 (MOV of
             0x3f800000, HFMA2.MMA -RZ, RZ, 1.875, 0) or an FSEL picks 1.0 otherwise);
             MUFU.RCP of enc is the decode scale;
      quant  F2I (round to nearest even: no TRUNC/FLOOR/CEIL) of FMNMX(FMNMX(rn(snew*enc),
             -32767) (max), 32767) (min).

    Returns a dict of counts and flags (see int16_summary for the forms read from it)."""
    tag = {}
    utag = {}
    r = {
        "i2f": 0, "dequant_rn": 0, "dequant_fused": 0,
        "update": {"S": {"even": 0, "odd": 0, "?": 0}, "H": {"even": 0, "odd": 0, "?": 0}},
        "update_addr": [], "i2f_addr": [], "zero_state": 0, "chains": [],
        "max_abs": 0, "max_lowest": 0, "max_shfl": [], "max_bcast": [], "enc": 0, "enc_default_one": 0,
        "enc_guard": 0, "dec": 0, "quant": 0, "quant_other_f2i": 0, "quant_bad": [],
    }

    def t(ins, k):
        if k >= len(ins.args):
            return None
        a = ins.args[k]
        if a == "RZ":
            return ("zero",)
        u = UREG.match(a)
        if u:
            return utag.get(int(u.group(1)))
        p = ins.plain(k)
        return tag.get(p) if p is not None else None

    def kind(v):
        return v[0] if v else None

    def halves(a):
        """(low half's parity, high half's parity) of the 32-bit operand a."""
        if a == "RZ":
            return ("zero", "zero")
        m = REG.search(a)
        v = tag.get(int(m.group(1))) if m else None
        return v[1:] if v and v[0] == "halves" else ("?", "?")

    def prmt_half(ins, n_lo, n_hi):
        pair = {(0, 1): (1, 0), (2, 3): (1, 1), (4, 5): (3, 0), (6, 7): (3, 1)}.get((n_lo, n_hi))
        if pair is None:
            return "?"
        return halves(ins.args[pair[0]])[pair[1]]

    for i, ins in enumerate(insns):
        new = None
        op, b = ins.op, ins.base
        if b in ("LDS", "LDG", "LD", "LDSM") and not re.search(r"\.(U16|S16|U8|S8)\b", op):
            new = ("halves", "even", "odd")  # 32-bit words of int16 pairs: low half even
        elif b == "PRMT" and len(ins.args) == 4 and re.fullmatch(r"0x[0-7]{4}", ins.args[2]):
            n = [int(ch) for ch in ins.args[2][2:][::-1]]  # byte selectors, byte 0 first
            new = ("halves", prmt_half(ins, n[0], n[1]), prmt_half(ins, n[2], n[3]))
        elif b == "SHF" and ".R." in op and ".HI" in op and ins.args[1] == "RZ" and ins.args[2] == "0x10":
            new = ("halves", halves(ins.args[3])[1], "zero")
        elif b == "I2F" and ".S16" in op:
            r["i2f"] += 1
            r["i2f_addr"].append(ins.addr)
            a = ins.args[1] if len(ins.args) > 1 else ""
            new = ("q", halves(a)[1 if a.endswith(".H1") else 0])
        elif b == "HFMA2" and ins.args[1:] == ["-RZ", "RZ", "1.875", "0"]:
            new = ("one",)  # the usual way of loading 0x3f800000
        elif b in ("MOV", "IMAD") and (b == "MOV" or op.startswith("IMAD.MOV")):
            src = ins.args[-1]
            if src.lower() == ONE_BITS:
                new = ("one",)
            elif ins.plain(len(ins.args) - 1) is not None:
                new = t(ins, len(ins.args) - 1)
        elif b == "FMUL" and len(ins.args) == 3:
            a1, a2 = t(ins, 1), t(ins, 2)
            k1, k2 = kind(a1), kind(a2)
            if L2E in ins.args:
                new = ("l2e",)
            elif "q" in (k1, k2) and not (k1 == "q" and k2 == "q"):
                qv = a1 if k1 == "q" else a2
                r["dequant_rn"] += 1
                new = ("sdec", qv[1])
            elif "dA" in (k1, k2):
                other = a2 if k1 == "dA" else a1
                if kind(other) in STATE_TAGS:
                    new = ("dAs", other[1])
                else:  # RZ or a register not holding a state: a pad path's zero state
                    new = ("dA0",)
            elif kind(a1) == "rcpm" or kind(a2) == "rcpm":
                if "32767" in ins.args:
                    prev = tag.get(ins.plain(0))
                    one = ins.text.startswith("@") and prev is not None and prev[0] == "one"
                    new = ("enc", one)
                    r["enc"] += 1
                    r["enc_default_one"] += one
            elif "enc" in (k1, k2):
                other = a2 if k1 == "enc" else a1
                if kind(other) == "snew":
                    new = ("qs", other[1])
                elif kind(other) == "snew0":
                    new = ("qs", "zero")
            elif k1 == "snew" or k2 == "snew":
                new = ("acc", ((a1 if k1 == "snew" else a2)[1],))
        elif b == "MUFU" and ".EX2" in op and kind(t(ins, 1)) == "l2e":
            new = ("dA",)
        elif b == "MUFU" and ".RCP" in op:
            k1 = kind(t(ins, 1))
            if k1 == "mbc":
                new = ("rcpm",)
            elif k1 == "enc":
                r["dec"] += 1
        elif b == "FFMA" and len(ins.args) == 4:
            a1, a2, a3 = t(ins, 1), t(ins, 2), t(ins, 3)
            k1, k2, k3 = kind(a1), kind(a2), kind(a3)
            if "q" in (k1, k2):
                r["dequant_fused"] += 1
            if "dA" in (k1, k2) and (k1 in STATE_TAGS or k2 in STATE_TAGS):
                st = a1 if k1 in STATE_TAGS else a2
                r["update"]["S"][st[1]] += 1
                r["update_addr"].append(ins.addr)
                new = ("snew", st[1])
            elif k3 == "dAs":
                r["update"]["H"][a3[1]] += 1
                r["update_addr"].append(ins.addr)
                new = ("snew", a3[1])
            elif k3 == "dA0" or ("dA" in (k1, k2) and k3 != "acc"):
                r["zero_state"] += 1
                new = ("snew0",)
            elif k1 == "snew" or k2 == "snew":
                s = a1 if k1 == "snew" else a2
                prev = a3[1] if k3 == "acc" else ()
                new = ("acc", prev + (s[1],))
            elif k3 == "acc":  # F0: fma(sel, rn(D*x), rn(C*s'))
                new = a3
        elif b == "FMNMX" and len(ins.args) >= 4:
            a1, a2 = ins.args[1], ins.args[2]
            absd = [a for a in (a1, a2) if a.startswith("|") and a.endswith("|")]
            snew_abs = 0
            for a in absd:
                p = REG.search(a)
                if p and kind(tag.get(int(p.group(1)))) in ("snew", "snew0"):
                    snew_abs += 1
            lowest = FLT_LOWEST in (a1, a2)
            kk = (kind(t(ins, 1)), kind(t(ins, 2)))
            if snew_abs or lowest and "max" in kk:
                r["max_abs"] += snew_abs
                r["max_lowest"] += lowest
                new = ("max",)
            elif "max" in kk and ("maxsh" in kk or kk == ("max", "max")):
                new = ("max",)
            elif kind(t(ins, 1)) == "qs" and ins.args[2] == "-32767" and ins.args[3] == "!PT":
                new = ("qlo", t(ins, 1)[1])
            elif kind(t(ins, 1)) == "qlo" and ins.args[2] == "32767" and ins.args[3] == "PT":
                new = ("qcl", t(ins, 1)[1])
        elif b == "SHFL" and len(ins.args) >= 4 and kind(t(ins, 2)) == "max":
            if ".DOWN" in op:
                r["max_shfl"].append(ins.args[3])
                new = ("maxsh",)
            elif ".IDX" in op:
                r["max_bcast"].append(ins.args[3])
                new = ("mbc",)
        elif b == "FSETP" and ".NEU" in op and kind(t(ins, 2)) == "mbc" and ins.args[3] == "RZ":
            r["enc_guard"] += 1
        elif b == "FSEL" and len(ins.args) == 4 and "enc" in (kind(t(ins, 1)), kind(t(ins, 2))) \
                and "1" in ins.args[1:3]:
            new = ("enc", True)
            r["enc_default_one"] += 1
        elif b == "F2I":
            src = t(ins, 1)
            if kind(src) == "qcl":
                if re.search(r"\.(TRUNC|FLOOR|CEIL)\b", op):
                    r["quant_bad"].append(ins.text)
                else:
                    r["quant"] += 1
            elif not re.search(r"\.U32|\.TRUNC", op):
                r["quant_other_f2i"] += 1
        # an accumulator read by anything but an FFMA that extends it ends a chain
        dk, d = ins._dest()
        if b != "FFMA":
            for k in range(len(ins.args)):
                v = t(ins, k) if k != dk else None
                if v and v[0] == "acc":
                    r["chains"].append(v[1])
        for x in d:
            tag.pop(x, None)
        if d and new is not None:
            for x in (d if new[0] == "halves" else d[:1]):
                tag[x] = new
        u = UREG.match(ins.args[0]) if ins.args else None
        if u:
            ud = int(u.group(1))
            utag.pop(ud, None)
            if ins.base == "R2UR" and t(ins, 1) is not None:
                utag[ud] = t(ins, 1)
    # dequantisation inside the innermost loop that holds the update (the multi-token step loop)
    loops = _backward_loops(insns)
    inner = set()
    for a in r["update_addr"]:
        around = [lp for lp in loops if lp[0] <= a <= lp[1]]
        if around:
            inner.add(min(around, key=lambda lp: lp[1] - lp[0]))
    r["update_loops"] = sorted(inner)
    r["dequant_in_update_loop"] = any(lo <= a <= hi for lo, hi in inner for a in r["i2f_addr"])
    del r["update_addr"], r["i2f_addr"]
    return r


def mtp_update_rule(input_dtype):
    """The multi-token kernel's update contraction, by the input dtype (every state dtype):
    'S/H' (even columns S, s' = fma(dA, s, rn(B * dtx)); odd columns H, s' = fma(B, dtx,
    rn(dA * s))) with bf16 inputs, 'H' on every column with fp16 or fp32 inputs (read from
    FlashInfer 0.7.2.post1's and 0.7.4's sm_90 builds of cases/dtype_forms_cases.json, every
    state, input and weight dtype, and of cases/f16in_cases.json and f16in_states_cases.json at
    head dims 64 and 128, dstates 64/128/256; the crate: mtp::uniform_pairs in
    csrc/ssu_mtp.cuh)."""
    return "S/H" if input_dtype in (None, "bfloat16") else "H"


def int16_rule(kind, dstate, dim=None, release="0.7.2.post1", input_dtype=None):
    """The documented forms of an int16-state kernel (docs/flashinfer-ssu.md, 'int16
    block-scaled state'), as read from FlashInfer 0.7.2.post1's and 0.7.4's sm_90 builds (bf16
    inputs and weights, fp32 scales, head dims 64, 80 and 128, dstate 64, 128 and 256: the same
    in every one of them; fp16 and fp32 inputs from cases/dtype_forms_cases.json and
    f16in_states_cases.json): (form, accumulation) or None for a dstate not read. The form is
    dequant/update[/first]: the dequantised s rounded on its own (rn), the update S in the
    single-token kernels, in the multi-token kernel mtp_update_rule's (S on even columns and H
    on odd ones with bf16 inputs, H on every column otherwise), lane 0's first term F0 in the
    simple and vertical kernels and F1 in the tiled simple one (the fp16 state's forms without
    SR). The accumulation: single token one chain per lane over its columns in order (even, odd
    alternating); multi token one chain of the even and one of the odd columns (the uneven
    dstates over the next power of two's tile). At the uneven dstates 96, 160, 192 and 224
    (`i16_uneven_forms` in csrc/ssu.cu; fp16 and fp32 inputs from cases/forms_gaps_cases.json):
    simple and tiled simple F1, vertical F0 at 192 and not served at 96, 160 and 224 (the crate
    refuses VERTICAL there); the single-token chains are not compared where a lane's run is
    odd (None: the tool reads runs of even length only). Above 256 (cases/int16_dsbig_cases.json,
    both releases' builds): multi token at every dstate up to 512 over the 512-column tile;
    single token at 512 only (at 288 to 480 FlashInfer's simple kernels overrun a register
    array, checks.h: check_long_dstate), simple and tiled simple F0 (not the fp16 state's F1
    there), vertical not served (its launcher refuses every dstate above 256). input_dtype None:
    bf16."""
    if dstate not in SERVED_DSTATES:
        return None
    if kind == "mtp":
        # The SASS keeps 4 links of each chain (the column pairs of a lane's 8 columns) per
        # 64-column tile of the next power of two's tile that may hold columns of the row as
        # the compiler sees a lane's member index, a signed remainder (lane % 8, -7 to 7): the
        # tiles t with 64 t - 56 < dstate. Up to 256 every tile; at 288 six of eight, at 384
        # seven (both releases' builds of cases/int16_dsbig_cases.json).
        tiles = (1 << (dstate - 1).bit_length()) // 64
        n = 4 * sum(1 for t in range(tiles) if 64 * t - 56 < dstate)
        return f"rn/{mtp_update_rule(input_dtype)}", ",".join(("e" * n, "o" * n))
    if dstate > LONG_DSTATE:
        first = {"simple": "F0", "simple_tiled": "F0"}.get(kind) if dstate == 512 else None
        return None if first is None else (f"rn/S/{first}", "eo" * (dstate // 64))
    if dstate in (64, 128, 256):
        first = {"simple": "F0", "simple_tiled": "F1", "vertical": "F0"}.get(kind)
    elif kind == "vertical":
        first = "F0" if dstate == 192 else None
    else:
        first = {"simple": "F1", "simple_tiled": "F1"}.get(kind)
    if first is None:
        return None
    return f"rn/S/{first}", "eo" * (dstate // 64) if dstate % 64 == 0 else None


def int16_update_form(u):
    """'S', 'H', 'S/H' (even columns S, odd columns H), 'H/S', 'mixed' or '?' from the update
    counts of classify_int16."""
    s, h = u["S"], u["H"]
    ns, nh = sum(s.values()), sum(h.values())
    if ns == nh == 0:
        return "?"
    if nh == 0:
        return "S"
    if ns == 0:
        return "H"
    if s["odd"] == s["?"] == 0 and h["even"] == h["?"] == 0:
        return "S/H"
    if s["even"] == s["?"] == 0 and h["odd"] == h["?"] == 0:
        return "H/S"
    return "mixed"


def int16_summary(c, first=None):
    """A kernel's int16 forms from classify_int16 (and, single token, lane 0's first form):
    {'dequant': 'rn' | 'fused' | 'mixed' | '?', 'update', 'first', 'acc', 'quant', 'carried'}.
    `quant` is 'ok' when every quantising F2I has the documented chain and the encode and
    decode scales and the row max are as documented (`lowest` start, |s'| operands, a
    shuffle-down tree and a broadcast, the zero guard with 1.0), else what is missing."""
    deq = "?" if c["dequant_rn"] == c["dequant_fused"] == 0 else \
        "mixed" if c["dequant_rn"] and c["dequant_fused"] else "rn" if c["dequant_rn"] else "fused"
    missing = []
    if not c["quant"] or c["quant_bad"] or c["quant_other_f2i"]:
        missing.append("F2I chain")
    if not c["max_abs"] or not c["max_lowest"]:
        missing.append("max")
    if not c["max_shfl"] or not c["max_bcast"]:
        missing.append("max shuffles")
    if not c["enc"] or not c["enc_guard"] or c["enc_default_one"] < c["enc"]:
        missing.append("encode")
    if not c["dec"]:
        missing.append("decode")
    chains = sorted(set(c["chains"]))
    acc = ",".join("".join({"even": "e", "odd": "o", "?": "?"}[p] for p in ch) for ch in chains) or "?"
    return {"dequant": deq, "update": int16_update_form(c["update"]), "first": first or "-",
            "acc": acc, "quant": "ok" if not missing else "missing " + ", ".join(missing),
            "carried": not c["dequant_in_update_loop"]}


def int16_form(s):
    """The one-word form of a summary: dequant/update/first (first only for single token)."""
    return "/".join(x for x in (s["dequant"], s["update"], s["first"]) if x != "-")


# --- driving it ---------------------------------------------------------------------------------

def find_cuobjdump(explicit=None):
    if explicit:
        return explicit
    r = subprocess.run(["bash", os.path.join(REPO, "scripts", "cuobjdump.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"scripts/cuobjdump.sh failed: {r.stderr.strip()}")
    return r.stdout.strip()


def disassemble(cuobjdump, path):
    r = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{cuobjdump} -sass {path}: {r.stderr.strip()}")
    return r.stdout


def analyse_int16_group(gid, sass, release="0.7.2.post1"):
    """Rows of an int16-state group (single token: simple, tiled simple, vertical; multi token:
    its simple kernel), one per kernel kind, each kind's summary the field-wise agreement of
    its functions' summaries ('mixed' where they differ), checked against int16_rule."""
    g = parse_group(gid)
    found = {}
    for arch, name, lines in split_functions(sass):
        kind = int16_kernel_kind(name, g["dim"])
        if kind not in INT16_KINDS or (kind == "mtp") != (g["path"] == "mtp"):
            continue
        insns = parse_sass(lines)
        c = classify_int16(insns)
        occ = classify(insns) if kind != "mtp" else []
        summ = int16_summary(c, kernel_form(occ) if kind != "mtp" else None)
        e = found.setdefault(kind, {"functions": [], "summaries": [], "occurrences": []})
        e["functions"].append({"arch": arch, "name": name, "summary": summ,
                               "counts": {k: v for k, v in c.items() if k != "chains"}})
        e["summaries"].append(summ)
        e["occurrences"] += occ
    rows = []
    for kind in [k for k in INT16_KINDS if k in found]:
        e = found[kind]
        summ = {}
        for k in e["summaries"][0]:
            vals = {json.dumps(s[k]) for s in e["summaries"]}
            summ[k] = e["summaries"][0][k] if len(vals) == 1 else "mixed"
        form = int16_form(summ)
        expected = int16_rule(kind, g["dstate"], g["dim"], release, g.get("input_dtype"))
        rule = expected[0] if expected else None
        if "?" in form.split("/") or summ["quant"] != "ok":
            status = "unclassified"
        elif expected is None:
            status = "not served"
        else:
            # the multi-token kernel must also carry the state in fp32 (no I2F in its step loop)
            ok = form == expected[0] and expected[1] in (None, summ["acc"]) and (
                kind != "mtp" or summ["carried"] is True)
            status = "agrees" if ok else "DISAGREES"
        rows.append({"group": gid, "kind": kind, "form": form, "rule": rule, "status": status,
                     "dim": g["dim"], "dstate": g["dstate"], "philox_rounds": g["philox_rounds"],
                     "int16": summ, "functions": e["functions"],
                     "occurrences": e["occurrences"] or [{"form": form, "addr": 0, "insn": "",
                                                          "why": json.dumps(summ)}]})
    expect = ("mtp",) if g["path"] == "mtp" else KINDS
    for kind in expect:
        if kind not in found:
            rows.append(_row(gid, g, kind, "?", None, [], [], "kernel not found"))
    return rows


def analyse_group(gid, sass, release="0.7.2.post1"):
    """Rows of one covered group from its SASS: one per kernel kind found (the simple and
    vertical kinds for fp16-, bf16- and fp32-state groups, the horizontal kind for every state
    dtype; an int16-state group's simple and vertical kinds, or its multi-token kernel, from
    analyse_int16_group)."""
    g = parse_group(gid)
    if g["state_dtype"] == "int16":
        rows = analyse_int16_group(gid, sass, release)
        if g["path"] == "mtp":
            return rows
        return rows + [r for r in _analyse_group(gid, sass, release) if r["kind"] == HORIZONTAL]
    if g["path"] == "mtp":
        return analyse_mtp_group(gid, sass)
    return _analyse_group(gid, sass, release)


def mtp_update_form(u):
    """A multi-token kernel's update form from classify_horizontal's counts (FFMAs taking dA as
    a multiplicand: S; FFMAs whose addend is a product by dA: H): 'S/H' when both occur equally
    often (FlashInfer's pair update, even column S and odd column H; the columns' parities are
    not followed here, as classify_int16 does for an int16 state), 'H' or 'S' when only one
    occurs, 'mixed' otherwise, '?' when neither."""
    ns, nh = u["S"], u["H"]
    if ns == nh == 0:
        return "?"
    if ns == nh:
        return "S/H"
    if ns == 0:
        return "H"
    if nh == 0:
        return "S"
    return "mixed"


def analyse_mtp_group(gid, sass):
    """The row of a multi-token group of an fp16, bf16 or fp32 state: the update form of its
    simple kernel's functions (mtp_update_form; 'mixed' where they differ), checked against
    mtp_update_rule at the dstates the crate serves."""
    g = parse_group(gid)
    forms, functions, occurrences = set(), [], []
    for arch, name, lines in split_functions(sass):
        if int16_kernel_kind(name, g["dim"]) != "mtp":
            continue
        c = classify_horizontal(parse_sass(lines))
        f = mtp_update_form(c["update"])
        forms.add(f)
        functions.append({"arch": arch, "name": name})
        occurrences.append({"form": f, "addr": 0, "insn": "; ".join(c["examples"]),
                            "why": f"update {c['update']}"})
    if not functions:
        return [_row(gid, g, "mtp", "?", None, [], [], "kernel not found")]
    form = forms.pop() if len(forms) == 1 else "mixed"
    served = g["dstate"] in (SERVED_DSTATES_F32 if g["state_dtype"] == "float32" else SERVED_DSTATES)
    rule = mtp_update_rule(g.get("input_dtype")) if served else None
    return [_row(gid, g, "mtp", form, rule, functions, occurrences)]


def _row(gid, g, kind, form, rule, functions, occurrences, status=None):
    """A table row: the form read against the rule's (status 'not served' without a rule,
    'unclassified' for a form '?', else 'agrees' or 'DISAGREES', unless given)."""
    if status is None:
        status = ("not served" if rule is None else "unclassified" if form == "?"
                  else "agrees" if form == rule else "DISAGREES")
    return {"group": gid, "kind": kind, "form": form, "rule": rule, "status": status,
            "dim": g["dim"], "dstate": g["dstate"], "philox_rounds": g["philox_rounds"],
            "functions": functions, "occurrences": occurrences}


def stp_update_rule(kind, state_dtype, input_dtype):
    """The crate's state-update form of a single-token simple or vertical kernel (csrc/ssu.cuh,
    ssu_kernel): 'H', s' = fma(x, dB, rn(dA * s)), in the vertical kernel of an fp32 state with
    fp32 inputs (the RowForms configs); 'S', s' = fma(dA, s, rn(x * dB)), in every other."""
    vertical_f32 = kind == "vertical" and state_dtype == "float32" and input_dtype == "float32"
    return "H" if vertical_f32 else "S"


def update_form(insns, end=None):
    """The update form (mtp_update_form of classify_horizontal's counts) of the instructions
    before address `end`: a vertical kernel's pad path is left out, its zero state's product by
    dA making every pad row's update read as H whatever the other rows take."""
    return mtp_update_form(classify_horizontal([i for i in insns if end is None or i.addr < end])["update"])


def pad_path_start(insns):
    """The address where a vertical kernel's pad path begins: its one product of the zero state by
    dA, `FMUL Rd, RZ, Rs` (FlashInfer's vertical kernel runs a row whose read slot is the pad slot
    from state 0 in code of its own, placed after the other path's: every lane-0 first term
    after it is the pad path's); None when there is not exactly one."""
    found = [ins.addr for ins in insns if ins.base == "FMUL" and len(ins.args) == 3
             and ins.args[1] == "RZ" and re.fullmatch(r"R\d+", ins.args[2])]
    return found[0] if len(found) == 1 else None


def _analyse_group(gid, sass, release):
    g = parse_group(gid)
    simple_vertical = g["state_dtype"] in ("float16", "bfloat16", "float32")
    found = {}
    for arch, name, lines in split_functions(sass):
        kind = kernel_kind(name, g["dim"])
        if kind is None or (kind != HORIZONTAL and not simple_vertical):
            continue
        e = found.setdefault(kind, {"functions": [], "occurrences": [], "forms": []})
        e["functions"].append({"arch": arch, "name": name})
        if kind == HORIZONTAL:
            c = classify_horizontal(parse_sass(lines))
            e["forms"].append(horizontal_form(c))
            e["occurrences"].append({"form": horizontal_form(c), "addr": 0,
                                     "insn": "; ".join(c["examples"]),
                                     "why": f"update {c['update']}, epilogue {c['epilogue']}"})
        else:
            insns = parse_sass(lines)
            occ = classify(insns)
            marker = None
            if kind == "vertical":
                marker = pad_path_start(insns)
                for o in occ:
                    o["path"] = "pad" if marker is not None and o["addr"] > marker else "state"
            e["occurrences"] += occ
            e.setdefault("updates", []).append(update_form(insns, marker))
    rows = []
    order = KINDS + (HORIZONTAL,)
    for kind in sorted(found, key=lambda k: (order.index(k) if k in order else len(order), k)):
        e = found[kind]
        if kind == HORIZONTAL:
            forms = set(e["forms"])
            form = forms.pop() if len(forms) == 1 else "mixed"
            if "?" in form:
                form = "?"
        else:
            form = kernel_form(e["occurrences"])
            pad = [o for o in e["occurrences"] if o.get("path") == "pad"]
            if form == "mixed" and pad:
                state = kernel_form([o for o in e["occurrences"] if o.get("path") != "pad"])
                pad_form = kernel_form(pad)
                if "mixed" not in (state, pad_form):
                    form = "?" if "?" in (state, pad_form) else f"{state}|pad {pad_form}"
        served = (kind in KINDS or kind == HORIZONTAL) and g["dstate"] in (
            SERVED_DSTATES_F32 if g["state_dtype"] == "float32" else SERVED_DSTATES)
        if g["dstate"] > LONG_DSTATE and kind == "vertical":
            served = False
        if not served:
            rule = None
        elif kind == HORIZONTAL:
            rule = HORIZONTAL_FORM
        else:
            rule = predicted_form(kind, g["philox_rounds"], g["dstate"], g["state_dtype"], release,
                                  g.get("input_dtype"))
        row = _row(gid, g, kind, form, rule, e["functions"], e["occurrences"])
        if kind != HORIZONTAL:
            # The state update's form beside the first form: a classified one the crate's rule
            # does not take is a disagreement ('mixed', 'S/H' and '?' are reported, not checked).
            updates = set(e["updates"])
            row["update"] = updates.pop() if len(updates) == 1 else "mixed"
            row["update_rule"] = stp_update_rule(kind, g["state_dtype"], g.get("input_dtype")) if served else None
            if (row["status"] == "agrees" and row["update"] in ("S", "H")
                    and row["update"] != row["update_rule"]):
                row["status"] = "DISAGREES"
        rows.append(row)
    # FlashInfer 0.7.4 instantiates its horizontal kernel only for the head dims it takes.
    hz_dim = g["dim"] % 64 == 0 and g["dim"] <= 256
    for kind in (KINDS if simple_vertical else ()) + ((HORIZONTAL,) if hz_dim else ()):
        if kind not in found:
            rows.append(_row(gid, g, kind, "?", None, [], [], "kernel not found"))
    return rows


def covered(g):
    return g is not None


def run(build, cuobjdump=None, only=None, jobs=2):
    """(rows, not covered group ids) of a build."""
    groups = find_groups(build)
    if only:
        groups = {k: v for k, v in groups.items() if only in k}
    todo = {k: v for k, v in groups.items() if covered(parse_group(k))}
    skipped = [k for k in groups if k not in todo]
    exe = find_cuobjdump(cuobjdump) if todo else None
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        sass = dict(zip(todo, pool.map(lambda p: disassemble(exe, p), todo.values())))
    release = build_release(build)
    rows = [r for gid in todo for r in analyse_group(gid, sass[gid], release)]
    return rows, skipped


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default=DEFAULT_BUILD,
                    help="recorder build directory (default target/flashinfer-recorder/0.7.2.post1) or its dist/")
    ap.add_argument("--json", metavar="OUT", help="write the table (with the matched instructions) as JSON")
    ap.add_argument("--cuobjdump", default=os.environ.get("CUOBJDUMP"), help="cuobjdump to use")
    ap.add_argument("--only", help="only groups whose id contains this")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="parallel disassemblies (default 2)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each occurrence's instruction")
    a = ap.parse_args(argv)

    if not find_groups(a.build):
        print(f"first_forms: no group libraries or objects under {a.build}", file=sys.stderr)
        return 2
    try:
        rows, skipped = run(a.build, a.cuobjdump, a.only, a.jobs)
    except (RuntimeError, OSError) as e:
        print(f"first_forms: {e}", file=sys.stderr)
        return 2

    width = max([len(r["group"]) for r in rows] + [5])
    print(f"{'group':<{width}}  {'kernel':<12}  {'form':<7}  {'rule':<5}  {'update':<6}  {'rule':<4}  status")
    for r in rows:
        print(f"{r['group']:<{width}}  {r['kind']:<12}  {r['form']:<7}  {r['rule'] or '-':<5}  "
              f"{r.get('update', '-'):<6}  {r.get('update_rule') or '-':<4}  {r['status']}")
        if a.verbose and "int16" in r:
            i = r["int16"]
            print(f"      accumulation {i['acc']}, quantisation {i['quant']}"
                  + (f", state carried in fp32: {i['carried']}" if r["kind"] == "mtp" else ""))
        if a.verbose:
            for o in r["occurrences"]:
                print(f"      {o['form']:<2} /*{o['addr']:04x}*/ {o['insn']}  ({o['why']})")
    bad = [r for r in rows if r["status"] == "DISAGREES"]
    unclassified = [r for r in rows if r["status"] in ("unclassified", "kernel not found")]
    agree = sum(r["status"] == "agrees" for r in rows)
    not_served = [r for r in rows if r["status"] == "not served"]
    print()
    print(f"{len(rows)} kernels in {len({r['group'] for r in rows})} groups: {agree} agree with "
          f"the rule, {len(bad)} disagree, {len(unclassified)} unclassified, {len(not_served)} not served "
          f"by the crate (read, not checked)")
    if bad:
        print("disagree:")
        for r in bad:
            print(f"  {r['group']} {r['kind']}: {r['form']}, rule {r['rule']}"
                  + (f"; update {r['update']}, rule {r['update_rule']}" if "update" in r else ""))
    if unclassified:
        print("unclassified (not a failure):")
        for r in unclassified:
            why = "; ".join(sorted({o["why"] for o in r["occurrences"] if o["form"] == "?"})) or r["status"]
            print(f"  {r['group']} {r['kind']}: {why}")
    if skipped:
        print(f"not covered (group ids of another form): {len(skipped)} groups")
        for gid in skipped:
            print(f"  {gid}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"build": os.path.abspath(a.build), "rows": rows, "not_covered": skipped}, f, indent=1)
            f.write("\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
