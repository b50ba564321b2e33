#!/usr/bin/env bash
# check_fatbin.sh — checks what GPU code a built library (or torch extension) carries:
#   bash scripts/check_fatbin.sh LIB   (libmamba_ssu.a, or the extension's .so)
# - machine code (SASS) for every target of build.rs's default list and PTX for its PTX
#   target, nothing missing (ELF and PTX images listed by `cuobjdump -lelf -lptx`);
# - stochastic rounding on sm_100a and sm_103a by the hardware conversion: their code holds
#   F2FP.F16.F32.PACK_AB.RS (cvt.rs.f16x2.f32) and none of the software path's truncating
#   F2FP.F16.F32.PACK_AB.RZ; every other target the reverse (a linked program or library lists
#   the relocatable objects' images beside the linked one: `-all`);
# - the sm_80 code without the sm_86 instruction HMNMX2.NAN.XORSIGN, and no target below sm_90
#   with the bulk L2 prefetch UBLKPF (csrc/arch.h).
# Prints a table (target: conversions, max form, prefetches) and exits 1 on any violation.
# Expected targets: MAMBA_SSU_CUDA_ARCHS / MAMBA_SSU_CUDA_PTX as the build saw them (defaults:
# build.rs).
set -euo pipefail
[ $# -eq 1 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
lib=$1
root=$(cd "$(dirname "$0")/.." && pwd)
CUOBJDUMP=$(bash "$root/scripts/cuobjdump.sh")
export PATH="$(dirname "$CUOBJDUMP"):$PATH"
default_archs=$(sed -n 's/^const DEFAULT_ARCHS: &str = "\(.*\)";/\1/p' "$root/build.rs")
default_ptx=$(sed -n 's/^const DEFAULT_PTX: &str = "\(.*\)";/\1/p' "$root/build.rs")
archs=${MAMBA_SSU_CUDA_ARCHS:-$default_archs}
ptx=${MAMBA_SSU_CUDA_PTX:-$default_ptx}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$CUOBJDUMP" -all -lelf -lptx "$lib" >"$work/list" 2>/dev/null || true
bad=0
for a in ${archs//[;,]/ }; do
  a=${a#sm_}
  grep -q "\.sm_${a}\.cubin" "$work/list" || { echo "check_fatbin: no sm_$a machine code" >&2; bad=1; }
done
if [ "$ptx" != none ]; then
  for a in ${ptx//[;,]/ }; do
    grep -q "\.sm_${a#compute_}\.ptx" "$work/list" || { echo "check_fatbin: no compute_$a PTX" >&2; bad=1; }
  done
fi
# The counts of each target, the targets disassembled in parallel (one cuobjdump per target,
# about 460 MB of SASS each, counted as it streams): rs rz xs mx pf in $work/count.<arch>.
count() {
  "$CUOBJDUMP" -arch "sm_$1" -sass "$lib" 2>/dev/null | awk '
    /F2FP\.F16\.F32\.PACK_AB\.RS/ { rs++ }
    /F2FP(\.F16\.F32)?\.PACK_AB\.RZ/ { rz++ }
    /HMNMX2\.NAN\.XORSIGN/ { xs++ }
    /HMNMX2\.NAN( |;)/ { mx++ }
    /UBLKPF/ { pf++ }
    END { print rs + 0, rz + 0, xs + 0, mx + 0, pf + 0 }' >"$work/count.$1"
}
export -f count
export CUOBJDUMP lib work
for a in ${archs//[;,]/ }; do echo "${a#sm_}"; done | xargs -P "$(nproc)" -I{} bash -c 'count {}'
printf '%-8s %8s %8s %8s %8s %8s\n' target cvt.rs cvt.rz xorsign max.nan blk.pf
for a in ${archs//[;,]/ }; do
  a=${a#sm_}
  read -r rs rz xs mx pf <"$work/count.$a"
  printf '%-8s %8s %8s %8s %8s %8s\n' "sm_$a" "$rs" "$rz" "$xs" "$mx" "$pf"
  n=${a%[af]}
  case "$a" in
    100a|103a) [ "$rs" -gt 0 ] && [ "$rz" -eq 0 ] || { echo "check_fatbin: sm_$a: expected the hardware SR conversion only" >&2; bad=1; } ;;
    *) [ "$rs" -eq 0 ] && [ "$rz" -gt 0 ] || { echo "check_fatbin: sm_$a: expected the software SR conversion" >&2; bad=1; } ;;
  esac
  if [ "$n" -lt 86 ] && [ "$xs" -ne 0 ]; then echo "check_fatbin: sm_$a uses an sm_86 instruction" >&2; bad=1; fi
  if [ "$n" -lt 90 ] && [ "$pf" -ne 0 ]; then echo "check_fatbin: sm_$a uses the sm_90 bulk prefetch" >&2; bad=1; fi
done
[ "$bad" -eq 0 ] && echo "check_fatbin: $lib carries every target" || exit 1
