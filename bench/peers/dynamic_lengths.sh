#!/usr/bin/env bash
# A Transformer encoder with dynamic batch and sequence axes, called at batch
# 1 with lengths 20..59 in turn (as a server sees them) and at one fixed
# length, in Kiln and in ONNX Runtime (onnxruntime-node) in the same run:
# p50 and p90 of each, and Kiln's ratio to ONNX Runtime and to its own
# fixed-length figure. Needs Debian's python3-onnx to write the model.
# Usage: bench/peers/dynamic_lengths.sh [THREADS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
threads="${1:-2}"
runs="${2:-400}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/peers/make_dynamic_encoder.py "$work/encoder.onnx"
kiln() { ./build/kiln bench "$work/encoder.onnx" --shape "x=$1" --threads "$threads" --runs "$runs" | awk '$1 ~ /^x=/ {print $2, $3}'; }
ort() { node tools/ort/ort_bench.js "$work/encoder.onnx" x "$1" --threads "$threads" --runs "$runs" | awk '{print $4, $6}'; }
read -r k_p50 k_p90 <<< "$(kiln 1x20..59x64)"
read -r o_p50 o_p90 <<< "$(ort 1,20..59,64)"
read -r f_p50 f_p90 <<< "$(kiln 1x37x64)"
read -r of_p50 of_p90 <<< "$(ort 1,37,64)"
printf "%-28s %10s %10s %10s %10s\n" "" "Kiln p50" "ORT p50" "Kiln p90" "ORT p90"
printf "%-28s %10s %10s %10s %10s\n" "lengths 20..59 in turn" "$k_p50" "$o_p50" "$k_p90" "$o_p90"
printf "%-28s %10s %10s %10s %10s\n" "length 37" "$f_p50" "$of_p50" "$f_p90" "$of_p90"
awk -v k="$k_p50" -v o="$o_p50" -v k9="$k_p90" -v o9="$o_p90" -v f="$f_p50" 'BEGIN {
  printf "lengths in turn: Kiln/ORT p50 %.2fx, p90 %.2fx; Kiln fixed/in turn %.2f (target: at least 0.9)\n", k / o, k9 / o9, f / k }'
