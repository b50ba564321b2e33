#!/usr/bin/env bash
# Checks an engine adapter of the torch package against the published engine's own code, on the
# CPU (no GPU needed):
#   bash scripts/check-engine.sh vllm      (bash scripts/check-vllm.sh: vLLM 0.33.0, torch 2.14.0)
#   bash scripts/check-engine.sh sglang    (bash scripts/check-sglang.sh: sglang 0.5.23, torch 2.14.1)
# 1. an environment with the engine installed by pip (its pinned torch comes with it), cached in
#    $MAMBA_SSU_PY_CACHE (default ~/.cache/mamba-ssu)/<engine>-<version>-cp312 (idempotent; several
#    GB of wheels the first time);
# 2. the package's torch 2.14 wheel, built against torch 2.14.0 (python/wheel.sh in the
#    torch-2.14.0 environment of python/build.sh, made if missing), installed into it with pip
#    (which checks its torch requirement against the engine's torch);
# 3. the package's tests on the installed wheel (`pytest python/tests`): every CPU test, and the
#    adapter tests against the engine's real code (plugin loader, backend initialisation,
#    signatures, the arguments that reach the kernel).
# Not part of scripts/test.sh (the engine's environment takes longer to make than the CI's budget
# leaves). Needs CPython 3.12 (found as build.sh finds it; MAMBA_SSU_PYTHON picks another).
set -euo pipefail
cd "$(dirname "$0")/.."

engine=${1:?usage: check-engine.sh vllm|sglang}
case "$engine" in
  vllm) spec="vllm==0.33.0" ;;
  sglang) spec="sglang==0.5.23" ;;
  *) echo "check-engine.sh: unknown engine $engine (vllm or sglang)" >&2; exit 2 ;;
esac
CACHE=${MAMBA_SSU_PY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mamba-ssu}
log() { echo "check-engine.sh: $*" >&2; }

# The wheel first (python/build.sh finds the interpreter and makes the torch 2.14.0 environment
# the wheel is built in).
base_py=$(MAMBA_SSU_TORCH_VERSION=2.14.0 bash python/build.sh --env-only | tail -n 1)
whl=$(bash python/wheel.sh "$base_py" | tail -n 1)
py=$("$base_py" -c 'import sys; print(sys._base_executable)')
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')

venv="$CACHE/${spec/==/-}-$tag"
stamp="$venv/.complete-v1"
if [ -f "$stamp" ] && [ -x "$venv/bin/python" ]; then
  log "$spec environment already at $venv"
else
  log "creating $venv with $spec (several GB of wheels)"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec" pytest numpy >&2
  touch "$stamp"
fi
vpy="$venv/bin/python"
"$vpy" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$whl" >&2
"$vpy" -m pip install --quiet --disable-pip-version-check "$whl" >&2   # checks the torch requirement
(cd /tmp && "$vpy" -c "import torch, mamba_ssu, $engine; print('check-engine.sh: torch', torch.__version__, '$engine', $engine.__version__, 'mamba_ssu from', mamba_ssu.__file__)") >&2
(cd python/tests && MAMBA_SSU_EXPECT_ENGINE="$engine" "$vpy" -m pytest -q -p no:cacheprovider)
