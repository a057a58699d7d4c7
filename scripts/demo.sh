#!/usr/bin/env bash
# The README's main job: install what is missing, build, then train the W2
# CNN on Fashion-MNIST (2 epochs by default; pass another count) and print the
# test accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
./build/fashion_mnist_train "${1:-2}"
