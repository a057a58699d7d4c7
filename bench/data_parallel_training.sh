#!/usr/bin/env bash
# W2 data-parallel training on this machine: 2 ranks x 1 thread (kiln launch)
# against 1 rank x 2 threads, the same recipe and global batch of 64,
# interleaved round by round; prints the median throughputs and their ratio,
# and the data-parallel run's communication per step and the share of it
# that ran under backward. Needs a build (scripts/build.sh) and Debian's
# dataset-fashion-mnist. Arguments: [steps=400] [rounds=3] [mode=eager|graph].
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-400} rounds=${2:-3} mode=${3:-eager}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
recipe=examples/fashion_mnist/w2_cnn.yaml
metric() { python3 -c "import json; print(json.load(open('$1/metrics.json'))['$2'])"; }
one=() two=() comm=() hidden=()
for round in $(seq "$rounds"); do
  ./build/kiln train $recipe --epochs 1 --max-steps "$steps" --threads 2 --mode "$mode" --output "$out/one" > /dev/null
  ./build/kiln launch -n 2 --log-dir "$out/logs" -- ./build/kiln train $recipe --epochs 1 --max-steps "$steps" \
    --threads 1 --mode "$mode" --output "$out/two" > /dev/null
  one+=("$(metric "$out/one" train_samples_per_s)") two+=("$(metric "$out/two" train_samples_per_s)")
  comm+=("$(metric "$out/two" comm_ms_per_step)") hidden+=("$(metric "$out/two" comm_hidden)")
done
python3 - "${one[*]}" "${two[*]}" "${comm[*]}" "${hidden[*]}" "$mode" <<'PY'
import statistics, sys
one, two, comm, hidden = ([float(x) for x in a.split()] for a in sys.argv[1:5])
m = statistics.median
print(f"W2 {sys.argv[5]}, global batch 64: 1 rank x 2 threads {m(one):.0f} samples/s, "
      f"2 ranks x 1 thread {m(two):.0f} samples/s, ratio {m(two) / m(one):.2f}x")
print(f"communication {m(comm):.2f} ms per step, {100 * m(hidden):.0f}% of it under backward")
PY
