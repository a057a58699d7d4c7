#!/usr/bin/env bash
# Builds the core alone in ./build-core — serve, distributed, studio and
# Python off, as on a machine with only the core's packages — and runs its
# tests: the parts must stay separable, and libkiln must not need theirs.
#   scripts/build-core.sh [CTEST ARGS ...]
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"  # the full build's objects serve this one too
cmake -S . -B build-core -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON -DKILN_BUILD_SERVE=OFF \
  -DKILN_BUILD_DIST=OFF -DKILN_BUILD_STUDIO=OFF -DKILN_BUILD_PYTHON=OFF -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build build-core -j "$(nproc)"
for lib in build-core/libkiln_serve.so build-core/libkiln_distributed.so build-core/libkiln_studio.so; do
  if [ -e "$lib" ]; then echo "$lib was built although its option is off" >&2; exit 1; fi
done
cd build-core && ctest --output-on-failure -j "$(nproc)" "$@"
