#!/usr/bin/env bash
# The README's main job: install what is missing, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
./build/regression_demo
