#!/usr/bin/env bash
# hz_ab.sh — builds scripts/hz_ab.cu into .gpu/hz_ab: the working tree's horizontal kernel
# (csrc/ssu_hz.cuh) against BASE_REV's, bit for bit and timed in the same run (hz_ab.cu says how).
#
#   bash scripts/hz_ab.sh BASE_REV      (here)
#   .gpu/hz_ab [--check-only] [--time-only] [--reps N] [--ncu] [--only TEXT]   (on the GPU host)
# HZ_AB_NVCC_FLAGS: more nvcc flags (e.g. -DNAME=VALUE for a macro of csrc/: the working tree's side
# only, the base header has its own constants); HZ_AB_OUT: the program's path (default .gpu/hz_ab).
set -euo pipefail
[ $# -eq 1 ] || { sed -n '2,8p' "$0" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
cd "$root"
[ -n "${MAMBA_SSU_CUDA_ROOT:-}" ] || eval "$(bash scripts/setup.sh)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hz_ab.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The base's header, its namespace renamed (hz -> hz_base) so that both sides link into one program.
git show "$1:csrc/ssu_hz.cuh" | sed -e 's/^namespace hz {/namespace hz_base {/' >"$tmp/ssu_hz_base.cuh"
# The base's launcher rules (hz_ab.cu: HZ_BASE_*), found in its sources, so that its side plans
# and dispatches as that revision's launcher did.
base_flags=()
base_launch=$(git show "$1:csrc/ssu_single_hz.cu" 2>/dev/null || true)
base_uneven=$(git show "$1:csrc/ssu_uneven.cu" 2>/dev/null || true)
grep -q 'hz_kernel_grouped' "$tmp/ssu_hz_base.cuh" && base_flags+=(-DHZ_BASE_GROUPED=1)
grep -q 'kLargeSrCallStateBytes' <<<"$base_launch" && base_flags+=(-DHZ_BASE_SR_GROUPED=1)
grep -q 'kWideRowStages' <<<"$base_launch" && base_flags+=(-DHZ_BASE_WIDE_ROWS=1)
grep -q 'bool compiled, unsigned nblocks' <<<"$base_uneven" && base_flags+=(-DHZ_BASE_ANY_COMPILED=1)
mkdir -p .gpu
out=${HZ_AB_OUT:-.gpu/hz_ab}
"$MAMBA_SSU_CUDA_ROOT/bin/nvcc" -std=c++17 -O3 -ftz=true -fmad=false \
  -gencode=arch=compute_90,code=sm_90 -lineinfo -DMAMBA_SSU_NO_DEPRECATION_WARNINGS -Icsrc -I"$tmp" \
  -DHZ_BASE_HEADER='"ssu_hz_base.cuh"' "${base_flags[@]}" ${HZ_AB_NVCC_FLAGS:-} scripts/hz_ab.cu \
  -o "$out"
echo "built $out (base $(git rev-parse --short "$1"); its launcher rules: ${base_flags[*]:-none})"
