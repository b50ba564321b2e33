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

Output: one line per (group, kernel kind) with the form read and, for single-token groups whose
dstate the crate serves (64, 128, 256), the form the rule predicts (the first-form rule for the
simple and vertical kernels of fp16-, bf16- and fp32-state groups, HORIZONTAL_FORM for the horizontal kernel of
every state dtype). Multi-token groups are listed as not covered. Exit status: 0 when every
classified form agrees with the rule, 1 when one disagrees (`?` forms are listed separately and
are not a failure), 2 when the build or cuobjdump cannot be read.
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
SERVED_DSTATES = (64, 128, 256)
# The update and epilogue forms of the crate's horizontal kernel (csrc/ssu_hz.cuh: every state
# dtype, every round count).
HORIZONTAL_FORM = "H/fma"


# --- the crate's rule ---------------------------------------------------------------------------

def first_form_f1(simple, below, rounds, dstate, f32=False, v074=False):
    """Python copy of first_form_f1 in csrc/ssu.cu (FlashInfer's single-token kernels; v074:
    FlashInfer 0.7.4's build, else 0.7.2.post1's); it must be kept equal to it. `below`: the
    tiled simple kernel (FlashInfer runs it below the auto switch); `f32`: the state is fp32."""
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


def predicted_form(kind, rounds, dstate, state_dtype="float16", release="0.7.2.post1"):
    simple = kind in ("simple", "simple_tiled")
    f32 = state_dtype == "float32"
    f1 = first_form_f1(simple, kind == "simple_tiled", rounds, dstate, f32, is_v074(release))
    return "F1" if f1 else "F0"


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
    [{'form': 'F0'|'F1'|'?', 'addr', 'insn', 'why'}]."""
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
    p = ins.plain(0)
    for nxt in insns[i + 1:]:
        if p in nxt.reads() or p in nxt.dests():
            if nxt.base == "FFMA" and len(nxt.args) == 4 and nxt.plain(3) == p \
                    and not any(p == int(r) for a in nxt.args[1:3] for r in REG.findall(a)):
                return {"form": "F1", "why": f"FMUL sel, rn(x*D); then {nxt.text}"}
            return {"form": "?", "why": f"FMUL with sel: its product is next touched by {nxt.text}"}
    return {"form": "?", "why": "FMUL with sel: its product is not used"}


L2E = "1.4426950216293334961"  # log2(e) as cuobjdump prints the fp32 immediate
UREG = re.compile(r"^UR(\d+)(?:\.reuse)?$")


def classify_horizontal(insns):
    """The state update's and the epilogue's forms in a horizontal kernel: {'update': {'H': n,
    'S': n}, 'epilogue': 'fma' | 'add' | '?', 'examples': [instruction texts]}. Values are
    tagged in program order (a register's tag is set when it is written): a product by log2 e
    ('l2e'), MUFU.EX2 of one ('dA'), a product by a 'dA' ('dA*'), followed through moves and
    into uniform registers (R2UR); an FFMA reading a 'dA' multiplicand is S, one whose addend is
    a 'dA*' is H. The epilogue: the sum FADD of a
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
        elif ins.base == "FFMA" and len(ins.args) == 4:
            if "dA" in (t(ins, 1), t(ins, 2)):
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


def analyse_group(gid, sass, release="0.7.2.post1"):
    """Rows of one covered group from its SASS: one per kernel kind found (the simple and
    vertical kinds for fp16-, bf16- and fp32-state groups, the horizontal kind for every state
    dtype)."""
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
            e["occurrences"] += classify(parse_sass(lines))
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
        served = (kind in KINDS or kind == HORIZONTAL) and g["dstate"] in SERVED_DSTATES
        if not served:
            rule = None
        elif kind == HORIZONTAL:
            rule = HORIZONTAL_FORM
        else:
            rule = predicted_form(kind, g["philox_rounds"], g["dstate"], g["state_dtype"], release)
        if rule is None:
            status = "not served"
        elif form == "?":
            status = "unclassified"
        else:
            status = "agrees" if form == rule else "DISAGREES"
        rows.append({"group": gid, "kind": kind, "form": form, "rule": rule, "status": status,
                     "dim": g["dim"], "dstate": g["dstate"], "philox_rounds": g["philox_rounds"],
                     "functions": e["functions"], "occurrences": e["occurrences"]})
    # FlashInfer 0.7.4 instantiates its horizontal kernel only for the head dims it takes.
    hz_dim = g["dim"] % 64 == 0 and g["dim"] <= 256
    for kind in (KINDS if simple_vertical else ()) + ((HORIZONTAL,) if hz_dim else ()):
        if kind not in found:
            rows.append({"group": gid, "kind": kind, "form": "?", "rule": None, "status": "kernel not found",
                         "dim": g["dim"], "dstate": g["dstate"], "philox_rounds": g["philox_rounds"],
                         "functions": [], "occurrences": []})
    return rows


def covered(g):
    return g["path"] == "stp"


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
    print(f"{'group':<{width}}  {'kernel':<12}  {'form':<7}  {'rule':<5}  status")
    for r in rows:
        print(f"{r['group']:<{width}}  {r['kind']:<12}  {r['form']:<7}  {r['rule'] or '-':<5}  {r['status']}")
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
            print(f"  {r['group']} {r['kind']}: {r['form']}, rule {r['rule']}")
    if unclassified:
        print("unclassified (not a failure):")
        for r in unclassified:
            why = "; ".join(sorted({o["why"] for o in r["occurrences"] if o["form"] == "?"})) or r["status"]
            print(f"  {r['group']} {r['kind']}: {why}")
    if skipped:
        print(f"not covered (multi-token): {len(skipped)} groups")
        for gid in skipped:
            print(f"  {gid}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"build": os.path.abspath(a.build), "rows": rows, "not_covered": skipped}, f, indent=1)
            f.write("\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
