#!/usr/bin/env bash
# The one test command (README "Quick start"; .ci/run calls it):
#   bash scripts/test.sh
# Installs what is missing (pinned CUDA 13.0 compiler wheels and a torch 2.11.0 environment into
# ~/.cache/mamba-ssu, libclang-dev), builds, checks formatting and lints, builds the torch
# extension and runs its tests (pytest), builds the torch 2.11 wheel and runs the same tests on
# it installed into a clean environment, runs `cargo test`, and packages the crate as crates.io
# would get it (built from the package alone, under crates.io's size limit).
# The engine checks against vLLM 0.33.0 and sglang 0.5.23 (scripts/check-vllm.sh,
# scripts/check-sglang.sh) are not part of it: each installs an engine with its own torch.
# On a host with an NVIDIA driver and a GPU it also runs the GPU tests (--include-ignored),
# with MAMBA_SSU_REQUIRE_GPU=1 so that a GPU test fails rather than skips.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's start, in seconds since the script began (CI's budget is 30 minutes on 2 cores).
mark() { echo "test.sh: [$SECONDS s] $*"; }
mark "setup"
eval "$(bash scripts/setup.sh)"

# GPU targets: every build below takes the same list (build.rs's MAMBA_SSU_CUDA_ARCHS; unset: its
# full list), so that the library the tests link is the one the wheel and the C package carry and
# nvcc compiles it once (MAMBA_SSU_NVCC_CACHE below); scripts/check_fatbin.sh checks it.
# MAMBA_SSU_TEST_ARCHS narrows the Rust builds only (e.g. `90` on an H200 host, a shorter build).
full_archs=${MAMBA_SSU_CUDA_ARCHS-}
export MAMBA_SSU_CUDA_ARCHS=${MAMBA_SSU_TEST_ARCHS:-$full_archs}
# One nvcc compilation per library for all of cargo's profiles below (clippy, doc, bench, test,
# and `cargo package`'s verification build the same nvcc command): build.rs keeps each built
# library under the key of its command, toolkit and sources (README "Build notes").
export MAMBA_SSU_NVCC_CACHE=${MAMBA_SSU_NVCC_CACHE:-$PWD/target/nvcc-cache}

mark "fmt, clippy, doc"
cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked

# The README's commands that need no GPU, as printed.
mark "README commands"
bash scripts/readme_commands.sh

# The torch extension (python/): build it (torch 2.11.0 in ~/.cache/mamba-ssu) and run the
# package's tests; its GPU tests skip without a GPU (and fail under MAMBA_SSU_REQUIRE_GPU=1).
mark "torch extension: build, tests"
py=$(MAMBA_SSU_CUDA_ARCHS=$full_archs bash python/build.sh | tail -n 1)
(cd python/tests && "$py" -m pytest -q -p no:cacheprovider)
MAMBA_SSU_CUDA_ARCHS=$full_archs bash scripts/check_fatbin.sh target/c-package/lib/libmamba_ssu.a

# The FlashInfer reference recorder's CPU tests (tools/flashinfer-recorder: no wheel download,
# no nvcc; its build and GPU runs are separate steps, see its README).
mark "recorder tests"
"$py" -m unittest discover -s tools/flashinfer-recorder/tests

# The wheel (README "Use it from Python"): built against that torch, installed with pip into a
# fresh environment, imported from there, and the package's CPU tests run on it (the installed
# plugin entry points included: MAMBA_SSU_EXPECT_WHEEL=1 makes that test fail rather than skip).
# The fresh environment sees the build environment's site-packages (torch, numpy, pytest) as a
# plain path of a .pth file instead of a second torch install (about 4 GB on disk): pip resolves
# the wheel's torch requirement against that torch, and that path's own .pth files (the checkout
# link python/build.sh writes) are not processed, so mamba_ssu can only come from the wheel; the
# import check below fails if it comes from anywhere else.
mark "wheel: build, install, tests"
whl=$(MAMBA_SSU_CUDA_ARCHS=$full_archs bash python/wheel.sh "$py" | tail -n 1)
torch_release=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')
clean="${MAMBA_SSU_PY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mamba-ssu}/wheel-check-torch-$torch_release"
rm -rf "$clean"
"$("$py" -c 'import sys; print(sys._base_executable)')" -m venv "$clean"
sitedirs='import sysconfig as s; p = s.get_paths(); print(*dict.fromkeys([p["purelib"], p["platlib"]]), sep="\n")'
"$py" -c "$sitedirs" >"$("$clean/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/mamba_ssu_build_env.pth"
"$clean/bin/python" -m pip install --quiet --disable-pip-version-check "$whl" \
  "torch==$torch_release" pytest numpy
(cd /tmp && "$clean/bin/python" - "$clean" <<'PY'
import os, sys
import mamba_ssu, mamba_ssu.vllm, mamba_ssu.sglang
where = os.path.realpath(mamba_ssu.__file__)
if not where.startswith(os.path.realpath(sys.argv[1]) + os.sep):
    sys.exit(f"test.sh: mamba_ssu imports from {where}, not from the wheel's environment")
print("test.sh: wheel imports from", where)
PY
)
(cd python/tests && CUDA_VISIBLE_DEVICES= MAMBA_SSU_REQUIRE_GPU= MAMBA_SSU_EXPECT_WHEEL=1 "$clean/bin/python" -m pytest -q -p no:cacheprovider)

mark "cargo test"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "test.sh: GPU found: running the CPU and GPU tests"
  MAMBA_SSU_REQUIRE_GPU=1 cargo test --release --locked -- --include-ignored
else
  echo "test.sh: no GPU: running the CPU tests (GPU tests are ignored; README 'Build notes' says how to run them on a GPU host)"
  cargo test --locked
fi

# The crate as crates.io would get it: the files of Cargo.toml's include list, built from the
# package alone (cargo package verifies it), and under crates.io's 10 MB upload limit.
mark "cargo package"
cargo package --locked --allow-dirty
crate=$(ls target/package/mamba-ssu-*.crate)
size=$(stat -c %s "$crate")
echo "test.sh: $crate: $size bytes"
[ "$size" -lt 10000000 ] || { echo "test.sh: $crate is over crates.io's 10 MB limit" >&2; exit 1; }
mark "done"
