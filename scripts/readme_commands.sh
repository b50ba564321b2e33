#!/usr/bin/env bash
# Runs every README command block marked `<!-- readme-ci: run -->` (the line before a ```sh
# fence), each in its own bash -euo pipefail from the repository root, and fails if any fails.
# scripts/test.sh calls it, so CI checks that the README's commands that need no GPU work as
# printed (on a machine without a GPU the GPU programs must say so and exit cleanly).
set -euo pipefail
cd "$(dirname "$0")/.."
blocks=$(mktemp -d)
trap 'rm -rf "$blocks"' EXIT
python3 - "$blocks" <<'PY'
import pathlib, sys
out = pathlib.Path(sys.argv[1])
lines = pathlib.Path("README.md").read_text().splitlines()
n, i = 0, 0
while i < len(lines):
    if lines[i].strip() == "<!-- readme-ci: run -->":
        assert lines[i + 1].strip() == "```sh", f"README line {i + 2}: expected a ```sh fence"
        j = i + 2
        body = []
        while lines[j].strip() != "```":
            body.append(lines[j])
            j += 1
        n += 1
        (out / f"{n:02d}.sh").write_text("\n".join(body) + "\n")
        i = j
    i += 1
print(f"readme_commands: {n} marked blocks", file=sys.stderr)
PY
fail=0
for f in "$blocks"/*.sh; do
  echo "readme_commands: \$ $(head -c 200 "$f")"
  if ! bash -euo pipefail "$f"; then echo "readme_commands: FAILED: $(basename "$f")"; fail=1; fi
done
exit $fail
