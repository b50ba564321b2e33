#!/usr/bin/env bash
# ab_bundle.sh — a same-run A/B of the benchmarks between a base revision and the working tree,
# for a GPU host without Rust: builds `ssu_bench`, `mtp_bench` and `decode_step` of both here
# and lays them out in .gpu-ab/ with a runner.
#
#   bash scripts/ab_bundle.sh BASE_REV          (here; e.g. b3e9a41)
#   bash .gpu-ab/run.sh OUT [ROUNDS]            (on the GPU host, from the repository root)
#
# The runner runs each benchmark ROUNDS times (default 2) per build, interleaved (base, new,
# base, new, ...), each with the arguments in .gpu-ab/args (one line per run set, `name args`;
# default: the --quick grids and `decode_step --quick`, then `decode_step --quick --tokens 8`,
# the verify step), writes every run's JSON and log under OUT (`<name>.<set>_<side>_<round>`),
# and prints
# scripts/ab_compare.py's table (per timing base, new, new/base; range and geometric mean).
# Both builds use MAMBA_SSU_CUDA_ARCHS (default here: 90, the H200's, which keeps the binaries
# small); the base is built in a temporary git worktree with its own target dir
# (AB_TARGET_DIR/base, default target/ab-base, kept between runs).
set -euo pipefail
[ $# -eq 1 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
cd "$root"
base_sha=$(git rev-parse --verify --quiet "$1^{commit}") || { echo "ab_bundle: not a commit: $1" >&2; exit 2; }
[ -n "${MAMBA_SSU_CUDA_ROOT:-}" ] || eval "$(bash scripts/setup.sh)"
export MAMBA_SSU_CUDA_ARCHS=${MAMBA_SSU_CUDA_ARCHS:-90}
out=.gpu-ab
grep -qx '/.gpu-ab/' .git/info/exclude 2>/dev/null || echo '/.gpu-ab/' >> .git/info/exclude
rm -rf "$out"; mkdir -p "$out/base/bin" "$out/new/bin"
tree=$(mktemp -d "${TMPDIR:-/tmp}/ab-base.XXXXXX")
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
git worktree add --detach "$tree" "$base_sha" >/dev/null

# Builds the three benchmarks in tree $1 (target dir $2) and copies them to $3.
build() {
  local json
  json=$(mktemp)
  (cd "$1" && CARGO_TARGET_DIR=$2 cargo build --release --locked --bench ssu_bench \
     --bench mtp_bench --bench decode_step --message-format=json-render-diagnostics >"$json")
  python3 - "$json" "$3" <<'PY'
import json, shutil, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'):
        continue
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') \
            and m['target']['kind'][0] == 'bench':
        shutil.copy2(m['executable'], sys.argv[2] + '/' + m['target']['name'])
PY
  rm -f "$json"
  strip --strip-all "$3"/* 2>/dev/null || true
}
echo "ab_bundle: building $1 ($base_sha)" >&2
build "$tree" "${AB_TARGET_DIR:-$root/target/ab-base}/base" "$out/base/bin"
echo "ab_bundle: building the working tree" >&2
build "$root" "$root/target" "$out/new/bin"
cp scripts/ab_compare.py "$out/"
cat >"$out/args" <<'EOF'
ssu_bench --quick
mtp_bench --quick
decode_step --quick
decode_step --quick --tokens 8
EOF
cat >"$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Same-run A/B (written by scripts/ab_bundle.sh): bash .gpu-ab/run.sh OUT [ROUNDS]
set -u
out=${1:?usage: run.sh OUT [ROUNDS]}; rounds=${2:-2}
cd "$(dirname "$0")/.."
mkdir -p "$out"
k=0
while read -r bench args; do
  [ -n "$bench" ] || continue
  k=$((k + 1))
  for i in $(seq "$rounds"); do
    for side in base new; do
      name=$bench.${k}_${side}_$i
      t=$(date +%s)
      .gpu-ab/$side/bin/$bench $args --json "$out/$name.json" >"$out/$name.log" 2>&1
      echo "$bench [$args] $side $i: rc=$? $(( $(date +%s) - t )) s"
    done
  done
done < .gpu-ab/args
python3 .gpu-ab/ab_compare.py "$out"
EOF
chmod +x "$out/run.sh"
(cd "$out" && tar cJf bins.tar.xz base new && rm -rf base new)
sed -i 's#^cd "$(dirname "$0")/.."#cd "$(dirname "$0")/.."\n[ -d .gpu-ab/base ] || tar xJf .gpu-ab/bins.tar.xz -C .gpu-ab#' "$out/run.sh"
du -sh "$out" | awk '{print "ab_bundle: " $1 " in .gpu-ab/ (carry it as .gpu-ab)"}'
