#!/usr/bin/env bash
# conformance_bundle.sh — one GPU round that checks a case spec against FlashInfer's own kernels:
# builds here the FlashInfer recorder of the spec for 0.7.2.post1 and 0.7.4, the conformance
# test binaries (and any other test binaries named), optionally the torch extension for a
# timing spec, and lays them out in .gpu-conf/ with a runner for a GPU host without Rust,
# compilers or network.
#
#   bash scripts/conformance_bundle.sh SPEC [--spec SPEC]... [--group SUBSTR]...
#        [--test 'BINARY FILTER']... [--memcheck-test 'BINARY FILTER']... [--perf PERF_SPEC] (here)
#   bash .gpu-conf/run.sh [.gpu-conf/call-N.tar.xz]...           (GPU host, repository root)
#
# SPEC, PERF_SPEC: case specs of tools/flashinfer-recorder/cases (paths); --spec adds another
# spec to the round (their cases checked together, each with its own file's defaults). --group: build only
# the recorder groups whose id contains SUBSTR (build.py --group; default: every group the spec
# needs). --test: a test binary of this crate (e.g. ssu_numerics) and a name filter, run with
# --include-ignored; --memcheck-test: the same, also run under compute-sanitizer memcheck.
# Environment passes through to the builds (MAMBA_SSU_F16_INPUT_KERNELS=0 for a library without
# the fp16-input kernels; MAMBA_SSU_CUDA_ARCHS, default here 90; CARGO_TARGET_DIR). The recorder builds go to
# ${CONF_RECORDER_PREFIX:-target/flashinfer-recorder/conf-}<release> (kept: a second bundle
# recompiles only new groups).
#
# The runner, for each path (single, multi token) and release: `run.sh record` of the spec's
# cases of that path (FlashInfer's kernels, run-to-run checked), merge.py (1 MiB cap), test-ssu_conformance /
# test-ssu_mtp_conformance on those manifests (MAMBA_SSU_FLASHINFER_MANIFEST /
# MAMBA_SSU_FLASHINFER_MTP_MANIFEST); compute-sanitizer memcheck of their manifest tests on
# 0.7.2.post1's; the --test / --memcheck-test binaries; with --perf, 0.7.2.post1's recording of
# PERF_SPEC and python/bench/flashinfer_warm.py on the bundled extension. It writes to $OUT
# (the device tool's output folder; else .gpu-conf/out): round.log (every step, with a
# PASS/FAIL line each and a summary), steps.log (every step's whole output, as it runs),
# embed.tar.xz (the recordings merged with merge.py's default 64 KiB cap and --xz, per release and path,
# ready for tests/data/), perf.json. Exit status: 0 when every step passed.
# The parts (the single-token and the multi-token checks of each release, the named tests, the timing) are
# packed into as few archives as fit the device tool's carry limit (64 MiB for the working tree
# that travels and the carried paths together): .gpu-conf/call-N.tar.xz, each compressed with
# one xz stream and a dictionary as large as the archive, so that the CUDA code every binary
# carries is stored once per archive. The runner runs the parts of the archives named (default:
# every one there); the script prints one device call per archive, each carrying .gpu-conf/run.sh,
# .gpu-conf/info and that archive. The runner's environment narrows a call to part of what its
# archives hold, so that a round too long for one device call can be split over calls on a warm
# host (an archive carried by an earlier call stays there): CONF_PATHS (default "stp mtp"),
# CONF_RELEASES (default "0.7.2.post1 0.7.4"), CONF_NO_TESTS=1 (skip the --test /
# --memcheck-test binaries), CONF_NO_PERF=1 (skip the timing).
set -euo pipefail
usage() { sed -n '2,42p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
specs=("$1"); shift
groups=(); tests=(); memtests=(); perf=
while [ $# -gt 0 ]; do
  case "$1" in
    --spec) specs+=("$2"); shift 2 ;;
    --group) groups+=(--group "$2"); shift 2 ;;
    --test) tests+=("$2"); shift 2 ;;
    --memcheck-test) memtests+=("$2"); shift 2 ;;
    --perf) perf=$2; shift 2 ;;
    *) usage ;;
  esac
done
root=$(git rev-parse --show-toplevel)
cd "$root"
for spec in "${specs[@]}"; do
  [ -f "$spec" ] || { echo "conformance_bundle: no spec $spec" >&2; exit 2; }
done
spec_args=()
for spec in "${specs[@]}"; do spec_args+=(--spec "$spec"); done
[ -z "$perf" ] || [ -f "$perf" ] || { echo "conformance_bundle: no spec $perf" >&2; exit 2; }
[ -n "${MAMBA_SSU_CUDA_ROOT:-}" ] || eval "$(bash scripts/setup.sh)"
export MAMBA_SSU_CUDA_ARCHS=${MAMBA_SSU_CUDA_ARCHS:-90}
out=.gpu-conf
grep -qx '/.gpu-conf/' .git/info/exclude 2>/dev/null || echo '/.gpu-conf/' >> .git/info/exclude
tmp=$(mktemp -d "${TMPDIR:-/tmp}/conf-bundle.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The stage holds every part; an archive holds the paths of the parts packed into it:
#   rec-<release>/ (the recorders), specs/spec-<path>.json and bin/test-ssu_[mtp_]conformance
#   (the checks of one path), tests/ (--test / --memcheck-test), perf/ (--perf).
stage=$tmp/stage
mkdir -p "$stage/bin" "$stage/specs" "$stage/tests/bin"
# The specs' cases split by path (a case without "path" is single token, as in the recorder),
# each case with its own file's defaults written into it.
python3 - "$stage/specs" "${specs[@]}" <<'PY'
import json, sys
cases = []
for name in sys.argv[2:]:
    spec = json.load(open(name))
    cases += [dict(spec.get("defaults", {}), **c) for c in spec["cases"]]
for path in ("stp", "mtp"):
    mine = [c for c in cases if c.get("path", "stp") == path]
    if mine:
        json.dump({"defaults": {}, "cases": mine}, open(f"{sys.argv[1]}/spec-{path}.json", "w"), indent=1)
PY

recorder=${CONF_RECORDER_PREFIX:-target/flashinfer-recorder/conf-}
# 1. The recorder of each release (the perf spec only in 0.7.2.post1's: the timing anchor).
for rel in 0.7.2.post1 0.7.4; do
  extra=()
  [ -z "$perf" ] || [ "$rel" != 0.7.2.post1 ] || extra=(--spec "$perf")
  python3 tools/flashinfer-recorder/build.py --flashinfer "$rel" "${spec_args[@]}" "${extra[@]}" \
    --out "$recorder$rel" -j "$(nproc)" "${groups[@]}" >&2
  cp -r "$recorder$rel/dist" "$stage/rec-$rel"
done

# 2. The test binaries: the two conformance binaries and those of --test / --memcheck-test.
names=(ssu_conformance ssu_mtp_conformance)
for t in "${tests[@]}" "${memtests[@]}"; do names+=("${t%% *}"); done
json=$(mktemp)
targets=()
for n in $(printf '%s\n' "${names[@]}" | sort -u); do targets+=(--test "$n"); done
cargo test --release --locked --no-run "${targets[@]}" --message-format=json-render-diagnostics >"$json"
python3 - "$json" "$stage/bin" <<'PY'
import json, shutil, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'):
        continue
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['kind'] == ['test']:
        shutil.copy2(m['executable'], f"{sys.argv[2]}/test-{m['target']['name']}")
PY
rm -f "$json"
for t in "${tests[@]}" "${memtests[@]}"; do cp "$stage/bin/test-${t%% *}" "$stage/tests/bin/"; done
for n in "${names[@]}"; do
  case $n in ssu_conformance | ssu_mtp_conformance) ;; *) rm -f "$stage/bin/test-$n" ;; esac
done
find "$stage/bin" "$stage/tests/bin" -type f -exec strip --strip-debug {} +
printf '%s\n' "${tests[@]}" >"$stage/tests/tests"
printf '%s\n' "${memtests[@]}" >"$stage/tests/memcheck-tests"

# 3. With --perf: the torch extension of this tree (python/build.sh), and its package.
if [ -n "$perf" ]; then
  bash python/build.sh >&2
  mkdir -p "$stage/perf/py"
  cp "$perf" "$stage/perf/perf.json"
  cp -r python/mamba_ssu "$stage/perf/py/"
fi

{
  echo "spec: ${specs[*]}"; echo "perf: ${perf:-none}"; echo "tree: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  env | grep -E '^MAMBA_SSU_(F16_INPUT_KERNELS|CUDA_ARCHS|NVCC_FLAGS)=' || true
} >"$tmp/info"
cat >"$tmp/run.sh" <<'RUN'
#!/usr/bin/env bash
# The runner of scripts/conformance_bundle.sh (from the repository root of the GPU host).
set -uo pipefail
cd "$(dirname "$0")/.."
X=$(mktemp -d "${TMPDIR:-/tmp}/conf.XXXXXX")
L=$X/step.log
O=${OUT:-.gpu-conf/out}
mkdir -p "$O"
log=$O/round.log
exec > >(tee "$log") 2>&1
# The archives named (a warm host may keep an earlier call's), else every one there.
[ $# -gt 0 ] || set -- .gpu-conf/call-*.tar.xz
for a in "$@"; do
  [ ! -f "$a" ] || xz -dc "$a" | tar -C "$X" -xf -
done
export MAMBA_SSU_REQUIRE_GPU=1
pass=0; failed=()
step() {  # step NAME COMMAND...: runs it, prints its tail and PASS/FAIL; steps.log: all of it
  local name=$1; shift
  echo "=== $name"; date -u +%FT%T
  echo "=== $name" >>"$O/steps.log"
  "$@" 2>&1 | tee -a "$O/steps.log" >"$L"; local rc=${PIPESTATUS[0]}
  grep -E 'test result|FAILED|panicked|ERROR SUMMARY|mismatch|identical|cases into|: [0-9]+ of [0-9]+' "$L" | tail -40
  [ $rc -eq 0 ] || tail -25 "$L"
  if [ $rc -eq 0 ]; then pass=$((pass + 1)); echo "PASS $name"; else failed+=("$name"); echo "FAIL $name (rc $rc)"; fi
  return $rc
}
cat .gpu-conf/info
ls "$X" "$X/bin" "$X/specs" 2>/dev/null | tr '\n' ' '; echo
mc="compute-sanitizer --tool memcheck --error-exitcode 1"
declare -A bin=([stp]=ssu_conformance [mtp]=ssu_mtp_conformance)
declare -A var=([stp]=MAMBA_SSU_FLASHINFER_MANIFEST [mtp]=MAMBA_SSU_FLASHINFER_MTP_MANIFEST)
declare -A test=([stp]=flashinfer_reference_bit_exact [mtp]=flashinfer_mtp_reference_bit_exact)
for path in ${CONF_PATHS:-stp mtp}; do
  # The checks of a path: its spec's cases and its conformance binary, both in this call.
  [ -f "$X/specs/spec-$path.json" ] && [ -x "$X/bin/test-${bin[$path]}" ] || continue
  for rel in ${CONF_RELEASES:-0.7.2.post1 0.7.4}; do
    [ -d "$X/rec-$rel" ] || continue
    r=$X/r-$rel-$path
    # A failed recording (a case FlashInfer's kernel gave different bytes on two calls, say)
    # still checks the cases it recorded.
    step "record $rel $path" bash "$X/rec-$rel/run.sh" record "$X/specs/spec-$path.json" --out "$r" --cap 1048576
    dirs=$(ls -d "$r"/*/ 2>/dev/null)
    [ -n "$dirs" ] || continue
    python3 tools/flashinfer-recorder/merge.py "$X/embed/$rel-$path" $dirs --path $path --xz >"$X/merge.log" 2>&1 ||
      { cat "$X/merge.log"; continue; }
    step "merge $rel $path" python3 tools/flashinfer-recorder/merge.py "$X/m-$rel-$path" $dirs --path $path --cap 1048576 || continue
    m=$X/m-$rel-$path/manifest.json
    step "conformance $rel $path" env "${var[$path]}=$m" "$X/bin/test-${bin[$path]}" --include-ignored
    [ $rel != 0.7.2.post1 ] || step "memcheck conformance $rel $path" env "${var[$path]}=$m" $mc "$X/bin/test-${bin[$path]}" "${test[$path]}" --include-ignored
  done
done
T=$X/tests
while read -r b filter; do
  [ -n "$b" ] || continue
  step "test $b $filter" "$T/bin/test-$b" $filter --include-ignored
done < <([ -n "${CONF_NO_TESTS:-}" ] || cat "$T/tests" 2>/dev/null)
while read -r b filter; do
  [ -n "$b" ] || continue
  step "test $b $filter" "$T/bin/test-$b" $filter --include-ignored &&
  step "memcheck $b $filter" $mc "$T/bin/test-$b" $filter --include-ignored
done < <([ -n "${CONF_NO_TESTS:-}" ] || cat "$T/memcheck-tests" 2>/dev/null)
P=$X/perf
if [ -z "${CONF_NO_PERF:-}" ] && [ -f "$P/perf.json" ]; then
  step "record perf 0.7.2.post1" bash "$X/rec-0.7.2.post1/run.sh" record "$P/perf.json" --out "$P/rec" &&
  step "flashinfer_warm" env PYTHONPATH="$P/py" python3 python/bench/flashinfer_warm.py "$P"/rec/*/ --json "$O/perf.json"
  grep -E '^\|' "$L"
fi
[ ! -d "$X/embed" ] || tar -C "$X/embed" -cf - . | xz -T0 -6 >"$O/embed.tar.xz"
echo "=== summary: $pass passed, ${#failed[@]} failed${failed:+: ${failed[*]}}"
date -u +%FT%T
[ ${#failed[@]} -eq 0 ]
RUN
chmod +x "$tmp/run.sh"

# 4. The archives: the parts packed in order, each archive as large as the carry limit leaves
# beside the working tree that travels (tracked and untracked, not ignored, files).
rm -rf "$out"; mkdir -p "$out"
cp "$tmp/run.sh" "$tmp/info" "$out/"
tree_bytes=$( { git ls-files -z; git ls-files -z -o --exclude-standard; } | du -cb --files0-from=- | tail -1 | cut -f1)
parts=()
# A path's checks split by release (the runner checks the releases whose recorder it has); the
# packing below puts them back into one call where they fit.
for rel in 0.7.2.post1 0.7.4; do
  [ ! -f "$stage/specs/spec-stp.json" ] || parts+=("stp-$rel rec-$rel specs/spec-stp.json bin/test-ssu_conformance")
done
for rel in 0.7.2.post1 0.7.4; do
  [ ! -f "$stage/specs/spec-mtp.json" ] || parts+=("mtp-$rel rec-$rel specs/spec-mtp.json bin/test-ssu_mtp_conformance")
done
[ ${#tests[@]} -eq 0 ] && [ ${#memtests[@]} -eq 0 ] || parts+=("tests tests")
[ -z "$perf" ] || parts+=("perf rec-0.7.2.post1 perf")
python3 - "$stage" "$out" "$tree_bytes" "${parts[@]}" >&2 <<'PY'
import os, subprocess, sys
stage, out, tree = sys.argv[1], sys.argv[2], int(sys.argv[3])
parts = [p.split() for p in sys.argv[4:]]
fixed = sum(os.path.getsize(os.path.join(out, f)) for f in ("run.sh", "info"))
room = (64 << 20) - tree - fixed - (1 << 20)   # a MiB of margin

def pack(paths, dst):
    tar = subprocess.Popen(["tar", "-C", stage, "-cf", "-", *sorted(set(paths))], stdout=subprocess.PIPE)
    with open(dst, "wb") as f:
        subprocess.run(["xz", "-T1", "--lzma2=preset=6,dict=192MiB"], stdin=tar.stdout, stdout=f, check=True)
    tar.wait()
    return os.path.getsize(dst)

# Greedy, in order: a part joins the last call when the archive of both fits (that trial archive
# becomes the call's), else it starts a call of its own.
calls = []   # [parts, archive, size]
trial = os.path.join(out, "trial.tar.xz")
for name, *paths in parts:
    if calls:
        cur, dst, _ = calls[-1]
        n = pack([p for _, ps in cur + [(name, paths)] for p in ps], trial)
        if n <= room:
            os.replace(trial, dst)
            calls[-1] = [cur + [(name, paths)], dst, n]
            continue
    dst = os.path.join(out, f"call-{len(calls) + 1}.tar.xz")
    calls.append([[(name, paths)], dst, pack(paths, dst)])
os.remove(trial) if os.path.exists(trial) else None
print(f"conformance_bundle: working tree {tree / 2**20:.1f} MiB, room for {room / 2**20:.1f} MiB a call")
for i, (c, dst, n) in enumerate(calls, 1):
    names = " + ".join(name for name, _ in c)
    warn = "" if n <= room else "  OVER THE LIMIT"
    print(f"conformance_bundle: call {i} of {len(calls)} ({names}, {n / 2**20:.1f} MiB){warn}: "
          f"carry ['{out}/run.sh', '{out}/info', '{dst}']; run bash {out}/run.sh {dst}")
PY
