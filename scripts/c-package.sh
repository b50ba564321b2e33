#!/usr/bin/env bash
# Builds the static library of the kernels and launchers for C and C++ engines:
#   bash scripts/c-package.sh [DEST]     (default DEST: target/c-package)
# DEST/include/mamba_ssu.h, DEST/lib/libmamba_ssu.a, and DEST/lib/libcudart_static.a.
# Link:  cc ... -IDEST/include -LDEST/lib -lmamba_ssu -lcudart_static -lstdc++ -ldl -lpthread -lrt
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-target/c-package}
eval "$(bash scripts/setup.sh)"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
cargo build --release --lib --message-format=json >"$json"
out_dir=$(python3 - "$json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith('{'):
        continue
    m = json.loads(line)
    if m.get('reason') == 'build-script-executed' and 'mamba-ssu' in m.get('package_id', ''):
        print(m['out_dir'])
PY
)
[ -n "$out_dir" ] && [ -f "$out_dir/libmamba_ssu.a" ] || { echo "c-package: libmamba_ssu.a not found" >&2; exit 1; }
cudart=$(grep -o 'cargo:cudart_dir=.*' "$out_dir/../output" | head -1 | cut -d= -f2)
mkdir -p "$dest/include" "$dest/lib"
cp csrc/include/mamba_ssu.h "$dest/include/"
cp "$out_dir/libmamba_ssu.a" "$dest/lib/"
cp "$cudart/libcudart_static.a" "$dest/lib/"
echo "c-package: $dest/include/mamba_ssu.h, $dest/lib/libmamba_ssu.a, $dest/lib/libcudart_static.a"
