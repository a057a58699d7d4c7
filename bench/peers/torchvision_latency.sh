#!/usr/bin/env bash
# Batch-1 inference latency against ONNX Runtime (onnxruntime-node, same
# thread count) on one model of each torchvision 0.14 family, classification
# and segmentation, and on LSTM and GRU classifiers, as
# make_torchvision_models.py exports them (untrained weights). Kiln and ONNX
# Runtime alternate ROUNDS times per model; each figure is the median p50.
# Prints Kiln p50 / ONNX Runtime p50 per model (below 1: Kiln is faster)
# and the geometric mean of those ratios.
# Usage: bench/peers/torchvision_latency.sh [THREADS] [ROUNDS] [NAME...]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
threads="${1:-2}"
rounds="${2:-2}"
shift $(( $# > 2 ? 2 : $# ))
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/peers/make_torchvision_models.py "$work" "$@" 2> >(grep "not exported" >&2)

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
printf '%-30s %12s %12s %10s\n' model "kiln p50 ms" "ORT p50 ms" "kiln/ORT"
ratios=()
for model in "$work"/*.onnx; do
  name="$(basename "$model" .onnx)"
  dims=1,3,224,224
  [[ "$name" == lstm || "$name" == gru ]] && dims=1,64,128
  # About a second of runs a round, from one timed run (at least 5, at most 100).
  one=$(node tools/ort/ort_bench.js "$model" input "$dims" --threads "$threads" --runs 1 | awk '{print $4}')
  runs=$(awk -v t="$one" 'BEGIN { r = int(1000 / t); print (r < 5 ? 5 : (r > 100 ? 100 : r)) }')
  ks=() os=()
  for _ in $(seq "$rounds"); do
    ks+=("$(KILN_NUM_THREADS="$threads" ./build/kiln bench "$model" --batch 1 --runs "$runs" --threads "$threads" 2>/dev/null |
            awk '$1 == 1 {print $2}')")
    os+=("$(node tools/ort/ort_bench.js "$model" input "$dims" --threads "$threads" --runs "$runs" | awk '{print $4}')")
  done
  k=$(printf '%s\n' "${ks[@]}" | median); o=$(printf '%s\n' "${os[@]}" | median)
  if [[ -z "$k" ]]; then printf '%-30s %12s %12.3f %10s\n' "$name" "failed" "$o" "-"; continue; fi
  awk -v n="$name" -v k="$k" -v o="$o" 'BEGIN { printf "%-30s %12.3f %12.3f %9.2fx\n", n, k, o, k / o }'
  ratios+=("$(awk -v k="$k" -v o="$o" 'BEGIN { print k / o }')")
done
printf '%s\n' "${ratios[@]}" |
  awk '{ s += log($1); n++ } END { printf "geometric mean of kiln/ORT: %.2fx (%d models)\n", exp(s / n), n }'
