#!/usr/bin/env bash
# The layer checker catches what it is for: a copy of the tree with a core
# file that includes the nn layer and a kernel that calls ops must fail,
# naming both files.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/src" "$root/include" "$tmp/"
echo '#include "kiln/nn.h"' >> "$tmp/src/core/shape.cpp"
echo '#include "kiln/functional.h"' >> "$tmp/src/backends/cpu/shape_kernels.cpp"
if out=$(bash "$root/tools/check_layers.sh" "$tmp" 2>&1); then
  echo "FAIL: the checker accepted wrong-way includes:"; echo "$out"; exit 1
fi
for expected in 'src/core/shape.cpp: includes "kiln/nn.h": layer core must not depend on nn' \
                'src/backends/cpu/shape_kernels.cpp: includes "kiln/functional.h"'; do
  if ! grep -qF "$expected" <<<"$out"; then
    echo "FAIL: expected '$expected' in:"; echo "$out"; exit 1
  fi
done
echo "the checker names both wrong-way includes"
