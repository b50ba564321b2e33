#!/usr/bin/env bash
# Builds the wheel of the mamba_ssu package for one torch environment:
#   bash python/wheel.sh [PYTHON]
# PYTHON: an interpreter of the environment the wheel is for — the extension is compiled against
# its torch (a CUDA 13 build, e.g. PyPI's torch 2.11 / 2.14 for Linux x86_64); default: the
# project's cached environment of python/build.sh for $MAMBA_SSU_TORCH_VERSION (2.11.0 unless
# set), made if missing (`python/build.sh --env-only`). That environment needs setuptools and
# wheel (the build is not isolated: it must see the environment's torch). Needs the crate's toolchain (scripts/setup.sh installs it) for the
# static library. Writes target/wheels/mamba_ssu-0.1.0+torchX.Y-cpXY-cpXY-linux_x86_64.whl
# (the extension with the whole static library linked in, the Python package and the engines'
# plugin entry points) and prints its path as the LAST line. Install it with
# `pip install target/wheels/mamba_ssu-...whl` into an environment with that torch minor.
set -euo pipefail
cd "$(dirname "$0")/.."

py=${1:-}
if [ -z "$py" ]; then
  py=$(bash python/build.sh --env-only | tail -n 1)
fi
bash scripts/c-package.sh target/c-package >&2
eval "$(bash scripts/setup.sh 2>/dev/null)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp" python/build python/*.egg-info' EXIT
rm -rf python/build python/*.egg-info
# In-tree build (python/ is the project; setup.py finds target/c-package from there).
"$py" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
  ./python -w "$tmp" >&2
whl=$(ls "$tmp"/mamba_ssu-*.whl)
mkdir -p target/wheels
mv -f "$whl" target/wheels/
echo "python/wheel.sh: $("$py" -c 'import torch; print("torch", torch.__version__)'): target/wheels/$(basename "$whl")" >&2
echo "$(pwd)/target/wheels/$(basename "$whl")"
