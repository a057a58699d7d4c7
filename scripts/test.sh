#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test;
# then the same for the core built alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The op table is generated from the registry; a stale committed copy fails.
# It is written by a build with the CUDA backend (its kernels in the backends
# and fallback columns); this build, without it, checks the rest of the table
# (a CUDA build's ops_doc_with_cuda test checks the whole of it).
./build/kiln ops --markdown > build/ops.md
sed -E 's/^(\| `[^`]*` \| [^|]*\| [a-z ]*)cuda /\1/; s/\| cuda( \([^)]*\))?; /| /; s/\| cuda( \([^)]*\))? \|/| - |/' \
  docs/ops.md > build/ops.expected.md
if ! diff -u build/ops.expected.md build/ops.md > build/ops.diff; then
  echo "docs/ops.md is stale: run 'kiln ops --markdown > docs/ops.md' from a build with -DKILN_CUDA=on" \
    "(which adds the CUDA backend's kernels) and commit it" >&2
  head -40 build/ops.diff >&2
  exit 1
fi
(cd build && ctest --output-on-failure -j "$(nproc)" "$@")
# The core alone (no serve, distributed, studio or Python) builds and passes its tests.
scripts/build-core.sh "$@"
