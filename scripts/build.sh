#!/usr/bin/env bash
# Configures and builds Kiln in ./build (Release, Ninja), with warnings as
# errors: the demo and the tests share this one configuration, so one does
# not rebuild what the other built.
#   scripts/build.sh [TARGET ...]   (default: everything)
# KILN_CMAKE_ARGS adds configure options (e.g. "-DKILN_LIBFUZZER=ON").
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere
# (CI's) reuses what any other clone on this machine compiled.
export CCACHE_BASEDIR="$PWD"
# shellcheck disable=SC2086
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON ${KILN_CMAKE_ARGS:-} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "$(nproc)" "${targets[@]}"
