#!/usr/bin/env bash
# Builds the mamba_ssu torch extension and installs the package, idempotently:
#   bash python/build.sh
# 1. a Python environment with torch (default 2.11.0, the +cu130 build) in a cache outside the
#    repository ($MAMBA_SSU_PY_CACHE, default ~/.cache/mamba-ssu), for CPython 3.12 (the GPU
#    host's Python; found as python3.12 on PATH or under pyenv);
# 2. the crate's static library (cargo, through scripts/c-package.sh);
# 3. the extension python/mamba_ssu/_C*.so (built in place, so `PYTHONPATH=python` imports it
#    on a host that has torch already, e.g. the GPU host) and the package installed into (1).
# Prints as its LAST line the path of a Python interpreter that imports mamba_ssu.
#
# Another torch version: MAMBA_SSU_TORCH_VERSION=2.14.0 bash python/build.sh (its own
# environment; the extension is built per torch version, as torch's CUDA generator headers are
# not part of its stable ABI). MAMBA_SSU_PYTHON=/path/to/python picks the interpreter.
# `bash python/build.sh --env-only` stops after (1) and prints that environment's interpreter
# (python/wheel.sh builds wheels in it; the in-place module of (3) is left as it is).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

TORCH_VERSION=${MAMBA_SSU_TORCH_VERSION:-2.11.0}
CACHE=${MAMBA_SSU_PY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mamba-ssu}
log() { echo "python/build.sh: $*" >&2; }

# 1. The interpreter and the environment.
py=${MAMBA_SSU_PYTHON:-}
if [ -z "$py" ]; then
  for cand in "$(command -v python3.12 || true)" "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if [ -n "$cand" ] && [ -x "$cand" ] && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      py=$cand; break
    fi
  done
fi
[ -n "$py" ] || { log "no CPython 3.12 found (set MAMBA_SSU_PYTHON)"; exit 1; }
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
venv="$CACHE/torch-$TORCH_VERSION-$tag"
stamp="$venv/.complete-v1"
if [ -f "$stamp" ] && [ -x "$venv/bin/python" ]; then
  log "torch $TORCH_VERSION environment already at $venv"
else
  log "creating $venv with torch==$TORCH_VERSION (a few GB of wheels)"
  rm -rf "$venv"
  mkdir -p "$CACHE"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "torch==$TORCH_VERSION" numpy pytest setuptools wheel >&2
  touch "$stamp"
fi
vpy="$venv/bin/python"
"$vpy" -c 'import torch; print("python/build.sh: torch", torch.__version__, torch.version.git_version)' >&2
if [ "${1:-}" = "--env-only" ]; then
  echo "$vpy"
  exit 0
fi

# 2. The static library and the header.
bash scripts/c-package.sh target/c-package >&2
eval "$(bash scripts/setup.sh 2>/dev/null)"

# 3. The extension, against torch's CUDA runtime and headers.
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cu="$site/nvidia/cu13"
[ -d "$cu/lib" ] || { log "torch's CUDA runtime wheel not found under $cu"; exit 1; }
# CUDA headers: torch's runtime wheel has cuda_runtime_api.h but not crt/; the toolkit that
# builds the crate (scripts/setup.sh) has both, of the same CUDA 13.0.
cuda_include="$cu/include"
if [ ! -f "$cuda_include/crt/host_defines.h" ]; then
  root=${MAMBA_SSU_CUDA_ROOT:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
  cuda_include="$root/include"
fi
export MAMBA_SSU_LIB_DIR="$repo/target/c-package/lib"
export MAMBA_SSU_INCLUDE="$repo/target/c-package/include"
export MAMBA_SSU_CUDA_INCLUDE="$cuda_include"
export MAMBA_SSU_CUDART_DIR="$cu/lib"
# In place (incremental: rebuilt when the source, the header or the static library is newer),
# then installed into the environment as a path entry pointing at python/ (what an editable
# install does), so that the environment always imports this checkout's package.
(cd python && "$vpy" setup.py --quiet build_ext --inplace >&2)
rm -rf python/build python/*.egg-info
# Debug info is 90 % of the module's size (and nothing the kernels need).
strip --strip-debug python/mamba_ssu/_C*.so
echo "$repo/python" > "$site/mamba_ssu_checkout.pth"
(cd /tmp && "$vpy" -c 'import mamba_ssu, sys; print("python/build.sh: mamba_ssu", mamba_ssu.__version__, "imports", file=sys.stderr)')
echo "$vpy"
