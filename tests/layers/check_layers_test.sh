#!/usr/bin/env bash
# The layer checker catches what it is for: a copy of the tree with a core
# file that includes the nn layer, a kernel that calls ops and an IR file that
# includes the CPU's passes (a layer inside the backends folder, above the
# IR) must fail, naming each file.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$root/src" "$root/include" "$tmp/"
echo '#include "kiln/nn.h"' >> "$tmp/src/core/shape.cpp"
echo '#include "kiln/functional.h"' >> "$tmp/src/backends/cpu/shape_kernels.cpp"
echo '#include "backends/cpu/passes/cpu_passes.h"' >> "$tmp/src/graph/ir.cpp"
if out=$(bash "$root/tools/check_layers.sh" "$tmp" 2>&1); then
  echo "FAIL: the checker accepted wrong-way includes:"; echo "$out"; exit 1
fi
for expected in 'src/core/shape.cpp: includes "kiln/nn.h": layer core must not depend on nn' \
                'src/backends/cpu/shape_kernels.cpp: includes "kiln/functional.h"' \
                'src/graph/ir.cpp: includes "backends/cpu/passes/cpu_passes.h": layer graph must not depend on backends/cpu/passes'; do
  if ! grep -qF "$expected" <<<"$out"; then
    echo "FAIL: expected '$expected' in:"; echo "$out"; exit 1
  fi
done
echo "the checker names every wrong-way include"
