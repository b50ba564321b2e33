#!/usr/bin/env bash
# compress_fixtures.sh — the form tests/data keeps a recorded data set in: its manifest.json and
# fixtures.bin as xz streams (manifest.json.xz, fixtures.bin.xz; xz -9, one thread, CRC64, so
# that the same bytes give the same file). The originals are removed. The tests embed the .xz
# files and decode them (tests/common/mod.rs `unxz`); the Python tests and tools read either form.
#
#   bash scripts/compress_fixtures.sh DIR...     (e.g. tests/data/flashinfer_ssu_new_cases)
#
# A directory whose files are already compressed is left as it is. Exit status 1 when a DIR
# holds neither form.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
for d in "$@"; do
  found=0
  for f in manifest.json fixtures.bin; do
    if [ -f "$d/$f" ]; then
      xz -9 -T1 --check=crc64 -c "$d/$f" > "$d/$f.xz.tmp"
      xz -t "$d/$f.xz.tmp"
      mv "$d/$f.xz.tmp" "$d/$f.xz"
      rm "$d/$f"
      found=1
    elif [ -f "$d/$f.xz" ]; then
      found=1
    fi
  done
  [ "$found" = 1 ] || { echo "compress_fixtures: $d holds no manifest.json or fixtures.bin" >&2; exit 1; }
done
