#!/usr/bin/env bash
# Products with 4-bit block-quantized weights (com.microsoft's MatMulNBits, a
# 4096x4096 LLM projection in blocks of 32, made by make_nbits_models.py):
# Kiln against ONNX Runtime (onnxruntime-node, same thread count) on the same
# file, at accuracy_level 0 (float32 products) and 4 (the activation rounded
# to int8 per block), for one row (a decoded token) and 32 (a short prompt).
# Each column is the median of ROUNDS alternations.
# Usage: bench/peers/nbits_latency.sh [THREADS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
threads="${1:-2}"
rounds="${2:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/peers/make_nbits_models.py "$work"

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
printf '%-22s %12s %12s %10s\n' "4096x4096, 4-bit" "kiln ms" "ORT ms" "kiln/ORT"
for level in 0 4; do
  for rows in 1 32; do
    model="$work/nbits_level$level.onnx" runs=$((rows == 1 ? 300 : 40))
    ks=() os=()
    for _ in $(seq "$rounds"); do
      ks+=("$(KILN_NUM_THREADS="$threads" ./build/kiln bench "$model" --batch "$rows" --runs "$runs" \
        --threads "$threads" | awk -v b="$rows" '$1 == b {print $2}')")
      os+=("$(node tools/ort/ort_bench.js "$model" input "$rows,4096" --threads "$threads" --runs "$runs" |
        awk '{print $4}')")
    done
    k=$(printf '%s\n' "${ks[@]}" | median) o=$(printf '%s\n' "${os[@]}" | median)
    awk -v n="level $level, $rows row(s)" -v k="$k" -v o="$o" \
      'BEGIN { printf "%-22s %12.3f %12.3f %9.2fx\n", n, k, o, k / o }'
  done
done
