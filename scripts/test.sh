#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test;
# then the same for the core built alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The op table is generated from the registry; a stale committed copy fails.
./build/kiln ops --markdown > build/ops.md
if ! diff -u docs/ops.md build/ops.md > build/ops.diff; then
  echo "docs/ops.md is stale: run './build/kiln ops --markdown > docs/ops.md' and commit it" >&2
  head -40 build/ops.diff >&2
  exit 1
fi
(cd build && ctest --output-on-failure -j "$(nproc)" "$@")
# The core alone (no serve, distributed, studio or Python) builds and passes its tests.
scripts/build-core.sh "$@"
