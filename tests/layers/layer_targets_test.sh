#!/usr/bin/env bash
# The build enforces the layers: a file compiled as part of a layer sees, in
# place of a header it may not include, one that stops the compiler naming
# the rule. Compiles one-line files the way the layer targets do.
# Usage: layer_targets_test.sh CXX BUILD_DIR
set -euo pipefail
cxx=$1 layers=$2/layers
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
try() {  # layer, include -> compiler output; exit status in $status
  echo "#include \"$2\"" > "$tmp/probe.cpp"
  status=0
  out=$("$cxx" -std=c++20 -fsyntax-only -I"$layers/$1" "$tmp/probe.cpp" 2>&1) || status=$?
}
expect_refused() {  # layer, include, expected text
  try "$1" "$2"
  if ((status == 0)) || ! grep -qF "$3" <<<"$out"; then
    echo "FAIL: layer $1 including $2 should stop with '$3'; got (status $status):"; echo "$out"; exit 1
  fi
}
expect_refused core graph/ir.h "layer core must not include graph/ir.h: graph is a layer above it"
expect_refused ops kiln/nn.h "layer ops must not include kiln/nn.h: nn is a layer above it"
expect_refused backends kiln/functional.h "layer backends must not include kiln/functional.h (tools/layers.txt)"
# A layer inside another's folder: the CPU's graph passes sit above the IR, the kernels below it.
expect_refused graph backends/cpu/passes/cpu_passes.h "layer graph must not include backends/cpu/passes/cpu_passes.h: backends/cpu/passes is a layer above it"
expect_refused backends graph/ir.h "layer backends must not include graph/ir.h: graph is a layer above it"
try graph kiln/registry.h
if ((status != 0)); then echo "FAIL: layer graph may include kiln/registry.h, but:"; echo "$out"; exit 1; fi
try backends_cpu_passes graph/ir.h
if ((status != 0)); then echo "FAIL: layer backends/cpu/passes may include graph/ir.h, but:"; echo "$out"; exit 1; fi
echo "the layer targets refuse wrong-way includes and accept the others"
