#!/usr/bin/env bash
# int8 inference against float32 and against ONNX Runtime (onnxruntime-node,
# same thread count), in one run: ResNet-18, MobileNetV2 and a BERT-style
# encoder, exported by make_int8_models.py (Debian's python3-torch and
# python3-torchvision), quantized by `kiln quantize` on random calibration
# batches, and the encoder again in quantize_dynamic's form
# (quantize_dynamic_form.py); batch-1 latency of Kiln's float32 model, Kiln's
# int8 model and ONNX Runtime on the same int8 file, with the two ratios the
# int8 targets name: Kiln int8 / Kiln float32 and Kiln int8 / ONNX Runtime int8.
# Usage: bench/peers/int8_latency.sh [THREADS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
threads="${1:-2}"
rounds="${2:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/peers/make_int8_models.py "$work" 2>/dev/null

kiln_p50() {  # model, runs
  KILN_NUM_THREADS="$threads" ./build/kiln bench "$1" --batch 1 --runs "$2" --threads "$threads" | awk '$1 == 1 {print $2}'
}
ort_p50() {  # model, dims, runs
  node tools/ort/ort_bench.js "$1" input "$2" --threads "$threads" --runs "$3" | awk '{print $4}'
}
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

printf '%-14s %14s %14s %14s %16s %16s\n' model "kiln f32 ms" "kiln int8 ms" "ORT int8 ms" "int8/f32" "kiln/ORT int8"
row() {  # name, model stem, dims, runs: the three alternate `rounds` times; each column is the median
  [[ "${quantize:-true}" == false ]] ||
    ./build/kiln quantize "$work/$2.onnx" --data "$work/$2_calibration" --out "$work/$2.int8.onnx" > /dev/null
  local fs=() qs=() os=()
  for _ in $(seq "$rounds"); do
    fs+=("$(kiln_p50 "$work/$2.onnx" "$4")")
    qs+=("$(kiln_p50 "$work/$2.int8.onnx" "$4")")
    os+=("$(ort_p50 "$work/$2.int8.onnx" "$3" "$4")")
  done
  local f q o
  f=$(printf '%s\n' "${fs[@]}" | median); q=$(printf '%s\n' "${qs[@]}" | median); o=$(printf '%s\n' "${os[@]}" | median)
  awk -v n="$1" -v f="$f" -v q="$q" -v o="$o" \
    'BEGIN { printf "%-14s %14.3f %14.3f %14.3f %15.2fx %15.2fx\n", n, f, q, o, q / f, q / o }'
}
row ResNet-18 resnet18 1,3,224,224 30
row MobileNetV2 mobilenet_v2 1,3,224,224 50
row "BERT encoder" bert_encoder 1,128,256 50
# The same encoder as onnxruntime's quantize_dynamic writes it (weights int8
# ahead of time, each activation quantized per run), not by kiln quantize.
/usr/bin/python3 bench/peers/quantize_dynamic_form.py "$work/bert_encoder.onnx" "$work/bert_dynamic.int8.onnx"
cp "$work/bert_encoder.onnx" "$work/bert_dynamic.onnx"
quantize=false row "BERT dynamic" bert_dynamic 1,128,256 50
