#!/usr/bin/env bash
# conformance_bundle.sh — one GPU round that checks a case spec against FlashInfer's own kernels:
# builds here the FlashInfer recorder of the spec for 0.7.2.post1 and 0.7.4, the conformance
# test binaries (and any other test binaries named), optionally the torch extension for a
# timing spec, and lays them out in .gpu-conf/ with a runner for a GPU host without Rust,
# compilers or network.
#
#   bash scripts/conformance_bundle.sh SPEC [--group SUBSTR]... [--test 'BINARY FILTER']...
#        [--memcheck-test 'BINARY FILTER']... [--perf PERF_SPEC]          (here)
#   bash .gpu-conf/run.sh                                        (GPU host, repository root)
#
# SPEC, PERF_SPEC: case specs of tools/flashinfer-recorder/cases (paths). --group: build only
# the recorder groups whose id contains SUBSTR (build.py --group; default: every group the spec
# needs). --test: a test binary of this crate (e.g. ssu_numerics) and a name filter, run with
# --include-ignored; --memcheck-test: the same, also run under compute-sanitizer memcheck.
# Environment passes through to the builds (MAMBA_SSU_F16_INPUT_KERNELS=1 for a flagged
# library; MAMBA_SSU_CUDA_ARCHS, default here 90; CARGO_TARGET_DIR). The recorder builds go to
# ${CONF_RECORDER_PREFIX:-target/flashinfer-recorder/conf-}<release> (kept: a second bundle
# recompiles only new groups).
#
# The runner, for each release: `run.sh record SPEC` (FlashInfer's kernels, run-to-run checked),
# merge.py of the single- and multi-token cases (1 MiB cap), test-ssu_conformance /
# test-ssu_mtp_conformance on those manifests (MAMBA_SSU_FLASHINFER_MANIFEST /
# MAMBA_SSU_FLASHINFER_MTP_MANIFEST); compute-sanitizer memcheck of their manifest tests on
# 0.7.2.post1's; the --test / --memcheck-test binaries; with --perf, 0.7.2.post1's recording of
# PERF_SPEC and python/bench/flashinfer_warm.py on the bundled extension. It writes to $OUT (the device
# tool's output folder; else .gpu-conf/out): round.log (every step, with a PASS/FAIL line each
# and a summary), embed.tar.xz (the recordings merged with merge.py's default 64 KiB cap, per
# release and path, ready for tests/data/), perf.json. Exit status: 0 when every step passed.
# The recordings' checks, the named tests and the timing are three archives (.gpu-conf/
# checks.tar.xz, tests.tar.xz, perf.tar.xz; the test binaries stripped of debug information):
# the runner runs the parts whose archives it finds, so that a round over the device tool's
# 64 MiB carry limit goes in several calls, each carrying .gpu-conf/run.sh, .gpu-conf/info and
# some of the archives (the script prints a plan).
set -euo pipefail
usage() { sed -n '2,34p' "$0" >&2; exit 2; }
[ $# -ge 1 ] || usage
spec=$1; shift
groups=(); tests=(); memtests=(); perf=
while [ $# -gt 0 ]; do
  case "$1" in
    --group) groups+=(--group "$2"); shift 2 ;;
    --test) tests+=("$2"); shift 2 ;;
    --memcheck-test) memtests+=("$2"); shift 2 ;;
    --perf) perf=$2; shift 2 ;;
    *) usage ;;
  esac
done
root=$(git rev-parse --show-toplevel)
cd "$root"
[ -f "$spec" ] || { echo "conformance_bundle: no spec $spec" >&2; exit 2; }
[ -z "$perf" ] || [ -f "$perf" ] || { echo "conformance_bundle: no spec $perf" >&2; exit 2; }
[ -n "${MAMBA_SSU_CUDA_ROOT:-}" ] || eval "$(bash scripts/setup.sh)"
export MAMBA_SSU_CUDA_ARCHS=${MAMBA_SSU_CUDA_ARCHS:-90}
out=.gpu-conf
grep -qx '/.gpu-conf/' .git/info/exclude 2>/dev/null || echo '/.gpu-conf/' >> .git/info/exclude
tmp=$(mktemp -d "${TMPDIR:-/tmp}/conf-bundle.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
stage=$tmp/checks
mkdir -p "$stage/bin" "$stage/specs" "$tmp/perf" "$tmp/tests/bin"
cp "$spec" "$stage/specs/spec.json"

recorder=${CONF_RECORDER_PREFIX:-target/flashinfer-recorder/conf-}
# 1. The recorder of each release (the perf spec only in 0.7.2.post1's: the timing anchor).
for rel in 0.7.2.post1 0.7.4; do
  extra=()
  [ -z "$perf" ] || [ "$rel" != 0.7.2.post1 ] || extra=(--spec "$perf")
  python3 tools/flashinfer-recorder/build.py --flashinfer "$rel" --spec "$spec" "${extra[@]}" \
    --out "$recorder$rel" -j "$(nproc)" "${groups[@]}" >&2
  cp -r "$recorder$rel/dist" "$stage/rec-$rel"
done
[ -z "$perf" ] || { cp -r "$stage/rec-0.7.2.post1" "$tmp/perf/"; cp "$perf" "$tmp/perf/perf.json"; }

# 2. The test binaries: the two conformance binaries and those of --test / --memcheck-test.
names=(ssu_conformance ssu_mtp_conformance)
for t in "${tests[@]}" "${memtests[@]}"; do names+=("${t%% *}"); done
json=$(mktemp)
targets=()
for n in $(printf '%s\n' "${names[@]}" | sort -u); do targets+=(--test "$n"); done
cargo test --release --locked --no-run "${targets[@]}" --message-format=json-render-diagnostics >"$json"
python3 - "$json" "$stage/bin" "$tmp/tests/bin" <<'PY'
import json, shutil, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'):
        continue
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['kind'] == ['test']:
        name = m['target']['name']
        dst = sys.argv[2] if name in ('ssu_conformance', 'ssu_mtp_conformance') else sys.argv[3]
        shutil.copy2(m['executable'], f"{dst}/test-{name}")
PY
rm -f "$json"
# A conformance binary named by --test / --memcheck-test goes into the tests archive too.
for n in ssu_conformance ssu_mtp_conformance; do
  for t in "${tests[@]}" "${memtests[@]}"; do
    [ "${t%% *}" != "$n" ] || { cp "$stage/bin/test-$n" "$tmp/tests/bin/"; break; }
  done
done
find "$stage/bin" "$tmp/tests/bin" -type f -exec strip --strip-debug {} +
printf '%s\n' "${tests[@]}" >"$tmp/tests/tests"
printf '%s\n' "${memtests[@]}" >"$tmp/tests/memcheck-tests"

# 3. With --perf: the torch extension of this tree (python/build.sh), and its package.
if [ -n "$perf" ]; then
  bash python/build.sh >&2
  mkdir -p "$tmp/perf/py"
  cp -r python/mamba_ssu "$tmp/perf/py/"
fi

rm -rf "$out"; mkdir -p "$out"
tar -C "$stage" -cf - . | xz -T0 -6 >"$out/checks.tar.xz"
[ ${#tests[@]} -eq 0 ] && [ ${#memtests[@]} -eq 0 ] || tar -C "$tmp/tests" -cf - . | xz -T0 -6 >"$out/tests.tar.xz"
[ -z "$perf" ] || tar -C "$tmp/perf" -cf - . | xz -T0 -6 >"$out/perf.tar.xz"
{
  echo "spec: $spec"; echo "perf: ${perf:-none}"; echo "tree: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  env | grep -E '^MAMBA_SSU_(F16_INPUT_KERNELS|CUDA_ARCHS|NVCC_FLAGS)=' || true
} >"$out/info"
cat >"$out/run.sh" <<'RUN'
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
for part in checks tests perf; do
  [ ! -f .gpu-conf/$part.tar.xz ] || { mkdir -p "$X/$part"; xz -dc .gpu-conf/$part.tar.xz | tar -C "$X/$part" -xf -; }
done
export MAMBA_SSU_REQUIRE_GPU=1
pass=0; failed=()
step() {  # step NAME COMMAND...: runs it, prints its tail and PASS/FAIL
  local name=$1; shift
  echo "=== $name"; date -u +%FT%T
  "$@" >"$L" 2>&1; local rc=$?
  grep -E 'test result|FAILED|panicked|ERROR SUMMARY|mismatch|identical|cases into|: [0-9]+ of [0-9]+' "$L" | tail -40
  [ $rc -eq 0 ] || tail -25 "$L"
  if [ $rc -eq 0 ]; then pass=$((pass + 1)); echo "PASS $name"; else failed+=("$name"); echo "FAIL $name (rc $rc)"; fi
  return $rc
}
cat .gpu-conf/info
mc="compute-sanitizer --tool memcheck --error-exitcode 1"
P=$X/perf
T=$X/tests
X=$X/checks
for rel in 0.7.2.post1 0.7.4; do
  [ -d "$X/rec-$rel" ] || continue
  step "record $rel" bash "$X/rec-$rel/run.sh" record "$X/specs/spec.json" --out "$X/r-$rel" --cap 1048576 || continue
  dirs=$(ls -d "$X/r-$rel"/*/ 2>/dev/null)
  for path in stp mtp; do
    # merge.py keeps the cases of --path and fails when there are none: a spec of one path.
    python3 tools/flashinfer-recorder/merge.py "$X/embed/$rel-$path" $dirs --path $path \
      >"$X/merge.log" 2>&1 || { grep -q "no $path cases" "$X/merge.log" && continue; }
    step "merge $rel $path" python3 tools/flashinfer-recorder/merge.py "$X/m-$rel-$path" $dirs --path $path --cap 1048576 || continue
    if [ $path = stp ]; then
      step "conformance $rel stp" env MAMBA_SSU_FLASHINFER_MANIFEST="$X/m-$rel-stp/manifest.json" "$X/bin/test-ssu_conformance" --include-ignored
      [ $rel != 0.7.2.post1 ] || step "memcheck conformance $rel stp" env MAMBA_SSU_FLASHINFER_MANIFEST="$X/m-$rel-stp/manifest.json" $mc "$X/bin/test-ssu_conformance" flashinfer_reference_bit_exact --include-ignored
    else
      step "conformance $rel mtp" env MAMBA_SSU_FLASHINFER_MTP_MANIFEST="$X/m-$rel-mtp/manifest.json" "$X/bin/test-ssu_mtp_conformance" --include-ignored
      [ $rel != 0.7.2.post1 ] || step "memcheck conformance $rel mtp" env MAMBA_SSU_FLASHINFER_MTP_MANIFEST="$X/m-$rel-mtp/manifest.json" $mc "$X/bin/test-ssu_mtp_conformance" flashinfer_mtp_reference_bit_exact --include-ignored
    fi
  done
done
while read -r bin filter; do
  [ -n "$bin" ] || continue
  step "test $bin $filter" "$T/bin/test-$bin" $filter --include-ignored
done < <(cat "$T/tests" 2>/dev/null)
while read -r bin filter; do
  [ -n "$bin" ] || continue
  step "test $bin $filter" "$T/bin/test-$bin" $filter --include-ignored &&
  step "memcheck $bin $filter" $mc "$T/bin/test-$bin" $filter --include-ignored
done < <(cat "$T/memcheck-tests" 2>/dev/null)
if [ -f "$P/perf.json" ]; then
  step "record perf 0.7.2.post1" bash "$P/rec-0.7.2.post1/run.sh" record "$P/perf.json" --out "$P/rec" &&
  step "flashinfer_warm" env PYTHONPATH="$P/py" python3 python/bench/flashinfer_warm.py "$P"/rec/*/ --json "$O/perf.json"
  grep -E '^\|' "$L"
fi
[ ! -d "$X/embed" ] || tar -C "$X/embed" -cf - . | xz -T0 -6 >"$O/embed.tar.xz"
echo "=== summary: $pass passed, ${#failed[@]} failed${failed:+: ${failed[*]}}"
date -u +%FT%T
[ ${#failed[@]} -eq 0 ]
RUN
chmod +x "$out/run.sh"
du -sh "$out"/* >&2
# The calls: the archives packed in order into carries of at most 64 MiB (with run.sh and info).
python3 - "$out" >&2 <<'PY'
import os, sys
out, limit = sys.argv[1], 64 << 20
calls, cur, size = [], [], 0
for part in ("checks", "tests", "perf"):
    path = os.path.join(out, part + ".tar.xz")
    if not os.path.exists(path):
        continue
    n = os.path.getsize(path)
    if cur and size + n > limit - (1 << 20):
        calls.append(cur); cur, size = [], 0
    cur.append(path); size += n
    if n > limit - (1 << 20):
        print(f"conformance_bundle: {path} alone is over the 64 MiB a call carries")
calls.append(cur)
for i, c in enumerate(calls, 1):
    carry = [os.path.join(out, "run.sh"), os.path.join(out, "info")] + c
    print(f"conformance_bundle: call {i} of {len(calls)}: carry {carry}; run bash {out}/run.sh")
PY
