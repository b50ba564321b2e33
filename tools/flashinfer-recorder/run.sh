#!/usr/bin/env bash
# Runs the FlashInfer reference recorder on a GPU host (needs python3 and an NVIDIA driver;
# no network, no compiler, no Rust). See tools/flashinfer-recorder/README.md.
#   bash run.sh verify               re-record the reference manifests' cases, compare every block's SHA-256
#   bash run.sh record [spec.json]   record the spec's cases into $OUT/<case>/ (default specs/new_cases.json)
#   bash run.sh list [spec.json]     list the cases and their instantiation groups
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
exec "$PY" "$HERE/runner/main.py" --dist "$HERE" "$@"
