#!/usr/bin/env bash
# sass_diff.sh — proves that a source change left the GPU code alone: builds the crate's real
# static library at a base revision and in the current working tree (uncommitted changes
# included), disassembles every object of both with `cuobjdump -sass` and compares them kernel
# by kernel (function names and instruction text with encodings, runs of blanks compared as one;
# only the dump's header lines that carry file names or paths are dropped, and the path-derived
# module id that nvcc puts in the names of anonymous-namespace functions is masked), and each
# function's resource usage (`cuobjdump -res-usage`: registers, stack, shared, local and
# constant bytes).
#
# Usage:  bash scripts/sass_diff.sh BASE_REV
#   e.g.  bash scripts/sass_diff.sh 1ab3f9f
#         SASS_DIFF_BASE_RENAME='s/NS0_7MtpArgsE/NS0_4ArgsE/' bash scripts/sass_diff.sh 75eed3b
# Prints one line per object (functions compared, identical), one line per function that
# differs or exists on one side only (with a unified diff of the first few), and a summary.
# Exit status: 0 when every function of every object is identical, 1 on any difference,
# 2 on a usage or build error.
# A source change that renames a type or function changes the mangled names of the kernels
# that use it, and nothing else: SASS_DIFF_BASE_RENAME (below) maps the base side's names onto
# the current ones, so that the comparison still pairs the functions one by one.
#
# How it builds: `cargo build --release --locked --lib` in a temporary `git worktree` of
# BASE_REV and in this tree (each with its own target dir), so build.rs compiles csrc/ with
# exactly the nvcc flags (and MAMBA_SSU_CUDA_ARCHS / MAMBA_SSU_NVCC_FLAGS, if set) of a normal
# build; the objects compared are the members of the static library in the build script's
# OUT_DIR (every `<hash>-<name>.o` that cc compiled, matched by <name>, and mamba_ssu_dlink.o,
# the device-linked code).
#
# Environment:
#   SASS_DIFF_TARGET_DIR  where the two cargo target dirs go (DIR/base, DIR/current; default: a
#                         temporary dir, removed at exit; set it to keep the dependencies
#                         compiled between runs)
#   SASS_DIFF_KEEP        set to 1 to keep the temporary directory (the dumps, under sass/)
#   SASS_DIFF_BASE_RENAME a sed script (`sed -e` syntax, e.g. 's/NS0_7MtpArgsE/NS0_4ArgsE/')
#                         applied to every function name of the BASE side (SASS and resource
#                         dumps, after the module id is masked) before the comparison; the
#                         instructions are not touched. Each name is one input line. Names the
#                         script leaves alone are compared as they are; a rename onto a name
#                         that already exists is an error (exit 2). The summary says how many
#                         base names it changed.
#   SASS_DIFF_ARCH        the GPU target whose machine code is compared (default sm_90, the tuned
#                         one; the library carries several: build.rs, DEFAULT_ARCHS)
#   CUOBJDUMP             the cuobjdump binary (default: on PATH, else the cache below)
#   MAMBA_SSU_CUDA_ROOT   as for any build (default: what scripts/setup.sh prints)
#
# cuobjdump (and the nvdisasm it calls): scripts/cuobjdump.sh (PyPI, cached outside the
# repository). Needs python3, git, cargo and the CUDA compiler of scripts/setup.sh.
set -euo pipefail

usage() { sed -n '2,19p' "$0" >&2; exit 2; }
[ $# -eq 1 ] || usage
BASE_REV=$1

REPO=$(git rev-parse --show-toplevel)
cd "$REPO"
BASE_SHA=$(git rev-parse --verify --quiet "$BASE_REV^{commit}") || {
  echo "sass_diff: not a commit: $BASE_REV" >&2
  exit 2
}

log() { echo "sass_diff: $*" >&2; }
SASS_DIFF_ARCH=${SASS_DIFF_ARCH:-sm_90}

# --- tools -------------------------------------------------------------------------------
if [ -z "${MAMBA_SSU_CUDA_ROOT:-}" ]; then
  eval "$(bash "$REPO/scripts/setup.sh")"
fi
CUOBJDUMP=$(bash "$REPO/scripts/cuobjdump.sh")
# cuobjdump -sass runs nvdisasm from PATH.
export PATH="$(dirname "$CUOBJDUMP"):$PATH"

# --- builds ------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sass-diff.XXXXXX")
BASE_TREE=$WORK/base
cleanup() {
  git -C "$REPO" worktree remove --force "$BASE_TREE" >/dev/null 2>&1 || true
  if [ "${SASS_DIFF_KEEP:-0}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
TARGET=${SASS_DIFF_TARGET_DIR:-$WORK/target}

git worktree add --quiet --detach "$BASE_TREE" "$BASE_SHA"

# Builds the library in tree $1 into the target dir $TARGET/$2; prints the build script's
# OUT_DIR. Each tree has its own target dir: cargo's hashes and fingerprints of a path package
# do not depend on where it lies, so with one target dir the second build would reuse the
# first one's objects.
build() {
  local tree=$1 json
  json=$WORK/$(basename "$tree").json
  # No object cache (build.rs, MAMBA_SSU_NVCC_CACHE): the dumps read the objects in OUT_DIR.
  (cd "$tree" && env -u MAMBA_SSU_NVCC_CACHE CARGO_TARGET_DIR=$TARGET/$2 cargo build --release --locked --lib \
     --message-format=json >"$json") || { log "build failed in $tree"; exit 2; }
  python3 - "$json" "$tree" <<'EOF'
import json, os, sys
tree = os.path.realpath(sys.argv[2])
dirs = []
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "build-script-executed" and m["package_id"].find("mamba-ssu") >= 0 \
            and tree in m["package_id"]:
        dirs.append(m["out_dir"])
if len(dirs) != 1:
    sys.exit("sass_diff: expected one mamba-ssu build script run, found %d" % len(dirs))
print(dirs[0])
EOF
}

log "building $BASE_REV ($BASE_SHA) in $BASE_TREE"
BASE_OUT=$(build "$BASE_TREE" base)
log "building the current tree $REPO"
CUR_OUT=$(build "$REPO" current)
[ "$BASE_OUT" != "$CUR_OUT" ] || { log "both builds in $CUR_OUT"; exit 2; }

# --- dumps and comparison ----------------------------------------------------------------
# One dump per object, keyed by the object's name without cc's hash prefix.
# Only the members of the build's static library: a reused OUT_DIR keeps the objects of units
# since deleted, which the library no longer holds.
dump_all() {
  local out=$1 dest=$2 o name
  mkdir -p "$dest"
  [ -f "$out/libmamba_ssu.a" ] || { log "no libmamba_ssu.a in $out"; exit 2; }
  for o in $(ar t "$out/libmamba_ssu.a" | sed "s|^|$out/|"); do
    [ -f "$o" ] || { log "$o: a member of libmamba_ssu.a that is not in $out"; exit 2; }
    name=$(basename "$o" | sed -E 's/^[0-9a-f]{16}-//')
    "$CUOBJDUMP" -arch "$SASS_DIFF_ARCH" -sass "$o" >"$dest/$name.sass"
    "$CUOBJDUMP" -arch "$SASS_DIFF_ARCH" -res-usage "$o" >"$dest/$name.res"
  done
}
dump_all "$BASE_OUT" "$WORK/sass/base"
dump_all "$CUR_OUT" "$WORK/sass/current"

python3 - "$WORK/sass/base" "$WORK/sass/current" <<'EOF'
import difflib, os, re, subprocess, sys

base_dir, cur_dir = sys.argv[1], sys.argv[2]
RENAME = os.environ.get("SASS_DIFF_BASE_RENAME", "")
renamed = 0

def rename_base(names):
    """{name: new name} of the base side's function names under SASS_DIFF_BASE_RENAME."""
    global renamed
    names = sorted(n for n in names if n)
    if not RENAME or not names:
        return {n: n for n in names}
    r = subprocess.run(["sed", "-e", RENAME], input="".join(n + "\n" for n in names),
                       capture_output=True, text=True)
    new = r.stdout.split("\n")
    if new and new[-1] == "":
        new.pop()
    if r.returncode != 0 or len(new) != len(names):
        print("sass_diff: SASS_DIFF_BASE_RENAME: sed failed or did not print one line per name: "
              + r.stderr.strip(), file=sys.stderr)
        sys.exit(2)
    if len(set(new)) != len(new):
        print("sass_diff: SASS_DIFF_BASE_RENAME maps two base functions onto one name",
              file=sys.stderr)
        sys.exit(2)
    renamed += sum(1 for a, b in zip(names, new) if a != b)
    return dict(zip(names, new))
# Header lines of the dump that carry file names or paths (nothing else is dropped).
PATH_LINE = re.compile(r"^\s*(identifier\s*=|member\s)")
# nvcc names the entities of an anonymous namespace (and static ones, under relocatable device
# code) after a module id that it derives from the source file's path; the two trees lie at
# different paths, so that id (8 hex digits) is the one part of a name that is not compared.
MODULE_ID = re.compile(r"(__nv_static_\d+__|_GLOBAL__N__)[0-9a-f]{8}_")

def functions(path):
    """{(arch, function name): [lines]} of one cuobjdump -sass dump."""
    funcs, arch, name = {}, None, None
    for line in open(path):
        line = MODULE_ID.sub(r"\1<module-id>_", line.rstrip("\n"))
        if PATH_LINE.match(line):
            continue
        m = re.match(r"^\s*code for (sm_\w+)", line)
        if m:
            arch, name = m.group(1), None
            continue
        m = re.match(r"^\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            key = (arch, name)
            if key in funcs:
                sys.exit("sass_diff: %s: function %s twice" % (path, name))
            funcs[key] = []
            continue
        if name is not None:
            # Runs of blanks as one: cuobjdump pads its columns to the widest instruction text
            # of the whole object, so adding a kernel can shift every line of the others.
            funcs[(arch, name)].append(" ".join(line.split()))
    return funcs

def resources(path):
    """{(arch, function name): resource line} of one cuobjdump -res-usage dump (registers,
    stack, shared, local and constant bytes), and the object's common line under (arch, "")."""
    res, arch, name = {}, None, None
    for line in open(path):
        line = MODULE_ID.sub(r"\1<module-id>_", line.strip())
        m = re.match(r"^arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"^Function (\S+):$", line)
        if m:
            name = m.group(1)
            continue
        if line == "Common:":
            name = ""
            continue
        if name is not None and line:
            res[(arch, name)] = line
            name = None
    return res

objs = sorted(o for o in set(os.listdir(base_dir)) | set(os.listdir(cur_dir))
              if o.endswith(".sass"))
total = same = 0
bad = []
shown = 0
for obj in objs:
    bp, cp = os.path.join(base_dir, obj), os.path.join(cur_dir, obj)
    if not os.path.exists(bp) or not os.path.exists(cp):
        # An object on one side only (a source file added or removed) is a difference when it
        # holds device functions; a host-only one changes no GPU code.
        side = "current" if os.path.exists(cp) else "base"
        n = len(functions(cp if side == "current" else bp))
        print("%-24s %3d functions, only in %s" % (obj[:-5], n, side))
        if n:
            bad.append("%s: object only in %s, with %d functions" % (obj, side, n))
        continue
    bf, cf = functions(bp), functions(cp)
    br, cr = resources(bp[:-5] + ".res"), resources(cp[:-5] + ".res")
    names = rename_base({k[1] for k in bf} | {k[1] for k in br})
    bf = {(k[0], names[k[1]]): v for k, v in bf.items()}
    br = {(k[0], names.get(k[1], k[1])): v for k, v in br.items()}
    keys = sorted(set(bf) | set(cf))
    n_same = 0
    for key in keys:
        total += 1
        label = "%s %s %s" % (obj[:-5], key[0], key[1])
        if key not in bf or key not in cf:
            bad.append("%s: only in %s" % (label, "current" if key in cf else "base"))
        elif bf[key] != cf[key]:
            bad.append("%s: SASS differs (%d vs %d lines)" % (label, len(bf[key]), len(cf[key])))
            if shown < 3:
                shown += 1
                sys.stdout.writelines(
                    l + "\n" for l in list(difflib.unified_diff(
                        bf[key], cf[key], "base", "current", lineterm="", n=2))[:60])
        elif br.get(key) != cr.get(key):
            bad.append("%s: resource usage differs (%s vs %s)" % (label, br.get(key), cr.get(key)))
        else:
            n_same += 1
    for key in sorted(k for k in set(br) | set(cr) if k[1] == ""):
        if br.get(key) != cr.get(key):
            bad.append("%s %s: common resources differ (%s vs %s)"
                       % (obj[:-5], key[0], br.get(key), cr.get(key)))
    same += n_same
    print("%-24s %3d functions, %3d identical" % (obj[:-5], len(keys), n_same))
for line in bad:
    print("DIFF " + line)
if RENAME:
    print("sass_diff: SASS_DIFF_BASE_RENAME %r renamed %d base function names"
          % (RENAME, renamed))
print("sass_diff: %d functions compared, %d identical, %d differ" % (total, same, total - same))
sys.exit(1 if bad or total == 0 else 0)
EOF
