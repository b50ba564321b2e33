#!/usr/bin/env bash
# Installs what building mamba-ssu needs on a machine without CUDA, idempotently:
#   - the CUDA 13.0 compiler from pinned PyPI wheels, into a cache outside the repository
#     ($MAMBA_SSU_CUDA_CACHE, default ~/.cache/mamba-ssu/cuda-13.0);
#   - libclang-dev (for bindgen), through apt, when no libclang is found.
# Prints `export ...` lines on stdout for the caller to eval; progress goes to stderr.
# A second run installs nothing.
set -euo pipefail

CACHE=${MAMBA_SSU_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mamba-ssu/cuda-13.0}
ROOT="$CACHE/site/nvidia/cu13"
STAMP="$CACHE/.complete-v1"
PINS=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
)

log() { echo "setup: $*" >&2; }

# 1. nvcc: an existing toolkit wins (explicit override, CUDA_PATH/CUDA_HOME, PATH, /usr/local/cuda).
existing=""
for cand in "${MAMBA_SSU_CUDA_ROOT:-}" "${CUDA_PATH:-}" "${CUDA_HOME:-}" /usr/local/cuda; do
  if [ -n "$cand" ] && [ -x "$cand/bin/nvcc" ]; then existing="$cand"; break; fi
done
if [ -z "$existing" ] && command -v nvcc >/dev/null 2>&1; then
  existing=$(dirname "$(dirname "$(command -v nvcc)")")
fi

if [ -n "$existing" ]; then
  log "using the CUDA toolkit at $existing"
elif [ -f "$STAMP" ] && [ -x "$ROOT/bin/nvcc" ]; then
  log "CUDA 13.0 compiler already installed at $ROOT"
else
  log "installing the CUDA 13.0 compiler wheels into $CACHE (about 300 MB)"
  rm -rf "$CACHE/site"
  mkdir -p "$CACHE"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --no-deps --target "$CACHE/site" "${PINS[@]}" >&2
  # Some wheels ship the binaries without their execute bits.
  chmod +x "$ROOT"/bin/* "$ROOT"/nvvm/bin/* 2>/dev/null || true
  # nvcc looks for libcudart under lib64 in some layouts.
  [ -e "$ROOT/lib64" ] || ln -s lib "$ROOT/lib64"
  "$ROOT/bin/nvcc" --version >&2
  touch "$STAMP"
fi

# 2. libclang for bindgen.
have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  # bindgen loads libclang.so (not libclang-cpp.so).
  ls /usr/lib/llvm-*/lib/libclang.so /usr/lib/llvm-*/lib/libclang-*.so* \
     /usr/lib/x86_64-linux-gnu/libclang-[0-9]*.so* >/dev/null 2>&1
}
if have_libclang; then
  log "libclang found"
else
  log "installing libclang-dev (for bindgen)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq libclang-dev >&2
fi

if [ -z "$existing" ]; then
  echo "export MAMBA_SSU_CUDA_ROOT='$ROOT'"
fi
