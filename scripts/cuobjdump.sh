#!/usr/bin/env bash
# cuobjdump.sh — prints the path of a cuobjdump (with its nvdisasm beside it): the one on PATH,
# else the project's cached install from PyPI, installed on first use into
# ~/.cache/mamba-ssu/cuobjdump-13.2 (nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm 13.2.86;
# PyPI has no 13.0 series of these, and any 13.x reads the cubins nvcc 13.0 writes).
# Used by scripts/sass_diff.sh and scripts/check_fatbin.sh; CUOBJDUMP overrides it.
set -euo pipefail
if [ -n "${CUOBJDUMP:-}" ]; then
  echo "$CUOBJDUMP"
  exit 0
fi
if command -v cuobjdump >/dev/null 2>&1 && command -v nvdisasm >/dev/null 2>&1; then
  command -v cuobjdump
  exit 0
fi
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/mamba-ssu/cuobjdump-13.2
if [ ! -x "$CACHE/nvidia/cu13/bin/cuobjdump" ] || [ ! -x "$CACHE/nvidia/cu13/bin/nvdisasm" ]; then
  echo "cuobjdump.sh: installing cuobjdump and nvdisasm 13.2.86 into $CACHE" >&2
  rm -rf "$CACHE"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --no-deps --target "$CACHE" nvidia-cuda-cuobjdump==13.2.86 nvidia-cuda-nvdisasm==13.2.86 >&2
  chmod +x "$CACHE"/nvidia/cu13/bin/*
fi
echo "$CACHE/nvidia/cu13/bin/cuobjdump"
