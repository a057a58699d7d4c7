#!/usr/bin/env bash
# The test suite under AddressSanitizer and UndefinedBehaviorSanitizer, in
# ./build-sanitize (a separate build: instrumented code runs 2-5x slower).
# Any memory error, leak or undefined behaviour fails the test that hit it.
# The Python package is left out: an instrumented extension cannot load into
# an uninstrumented Python.
# Warnings are not errors here: GCC's sanitizer instrumentation makes false
# ones (maybe-uninitialized inside std::function and std::regex).
# Arguments go to ctest, e.g. scripts/sanitize.sh -R Serve
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=address,undefined \
  -DKILN_BUILD_BENCH=OFF -DKILN_BUILD_PYTHON=OFF -DKILN_WERROR=OFF >/dev/null
cmake --build build-sanitize -j "$(nproc)"
# OpenMP's and oneDNN's thread pools live for the whole process: their one-time
# allocations are not leaks worth reporting.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
cd build-sanitize && ctest --output-on-failure -j "$(nproc)" --timeout 1500 "$@"
