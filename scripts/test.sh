#!/usr/bin/env bash
# The one test command (README "Quick start"; .ci/run calls it):
#   bash scripts/test.sh
# Installs what is missing (pinned CUDA 13.0 compiler wheels and a torch 2.11.0 environment into
# ~/.cache/mamba-ssu, libclang-dev), builds, checks formatting and lints, builds the torch
# extension and runs its tests (pytest), and runs `cargo test`.
# On a host with an NVIDIA driver and a GPU it also runs the GPU tests (--include-ignored),
# with MAMBA_SSU_REQUIRE_GPU=1 so that a GPU test fails rather than skips.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(bash scripts/setup.sh)"

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --locked

# The README's commands that need no GPU, as printed.
bash scripts/readme_commands.sh

# The torch extension (python/): build it (torch 2.11.0 in ~/.cache/mamba-ssu) and run the
# package's tests; its GPU tests skip without a GPU (and fail under MAMBA_SSU_REQUIRE_GPU=1).
py=$(bash python/build.sh | tail -n 1)
(cd python/tests && "$py" -m pytest -q -p no:cacheprovider)

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "test.sh: GPU found: running the CPU and GPU tests"
  MAMBA_SSU_REQUIRE_GPU=1 cargo test --release --locked -- --include-ignored
else
  echo "test.sh: no GPU: running the CPU tests (GPU tests are ignored; README 'Build notes' says how to run them on a GPU host)"
  cargo test --locked
fi
