#!/usr/bin/env bash
# Inference runtime against ONNX Runtime (onnxruntime-node, same thread
# count), in one run: latency at batch 1 and throughput at batch 64 for W2,
# ResNet-18 and a Transformer encoder, batch-1 latency of a bidirectional
# LSTM text classifier, a U-Net and a GPT-style decoder block, and of three
# torchvision CNNs (ShuffleNetV2 x0.5, SqueezeNet 1.1, MobileNetV3-small)
# when Debian's python3-torchvision is installed; then the geometric mean of
# the batch-1 latency ratios.
# Usage: bench/peers/inference_latency.sh W2.onnx [THREADS] [ROUNDS]
#   W2.onnx: exported with kiln export --dynamic-batch. ResNet-18 and the
#   encoder are exported by make_inference_models.py (needs Debian's python3-torch).
#   ROUNDS (default 3): Kiln and ORT alternate this many times per row; more
#   rounds steady the medians on a machine whose load comes and goes.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
w2="$1"
threads="${2:-2}"
rounds="${3:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 bench/peers/make_inference_models.py "$work" 2>/dev/null

kiln_p50() {  # model, batch, runs -> "p50_ms samples_per_s"
  KILN_NUM_THREADS="$threads" ./build/kiln bench "$1" --batch "$2" --runs "$3" --threads "$threads" |
    awk -v b="$2" '$1 == b {print $2, $5}'
}
ort_p50() {  # model, dims, runs, type
  node tools/ort/ort_bench.js "$1" input "$2" --threads "$threads" --runs "$3" --type "${4:-float32}" | awk '{print $4, $10}'
}

printf '%-20s %5s  %12s %12s %7s  %12s %12s %7s\n' model batch "kiln p50 ms" "ORT p50 ms" "ratio" "kiln /s" "ORT /s" "ratio"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
latency_ratios=()
row() {  # name, model, batch, dims, runs[, input type]: Kiln and ORT alternate `rounds` times (this
         # machine swings between busy and quiet minutes); each column is the median of the rounds
  local kps=() kss=() ops=() oss=()
  for _ in $(seq "$rounds"); do
    read -r kp ks <<< "$(kiln_p50 "$2" "$3" "$5")"
    read -r op os <<< "$(ort_p50 "$2" "$4" "$5" "${6:-float32}")"
    kps+=("$kp"); kss+=("$ks"); ops+=("$op"); oss+=("$os")
  done
  kp=$(printf '%s\n' "${kps[@]}" | median); ks=$(printf '%s\n' "${kss[@]}" | median)
  op=$(printf '%s\n' "${ops[@]}" | median); os=$(printf '%s\n' "${oss[@]}" | median)
  awk -v n="$1" -v b="$3" -v kp="$kp" -v op="$op" -v ks="$ks" -v os="$os" \
    'BEGIN { printf "%-20s %5d  %12.3f %12.3f %6.2fx  %12.0f %12.0f %6.2fx\n", n, b, kp, op, op / kp, ks, os, ks / os }'
  if [[ "$3" == 1 ]]; then latency_ratios+=("$(awk -v kp="$kp" -v op="$op" 'BEGIN { print op / kp }')"); fi
}
row W2 "$w2" 1 1,1,28,28 200
row W2 "$w2" 64 64,1,28,28 50
row ResNet-18 "$work/resnet18.onnx" 1 1,3,224,224 20
row ResNet-18 "$work/resnet18.onnx" 64 64,3,224,224 3
row "Transformer encoder" "$work/transformer_encoder.onnx" 1 1,128,256 50
row "Transformer encoder" "$work/transformer_encoder.onnx" 64 64,128,256 5
row "BiLSTM classifier" "$work/text_lstm.onnx" 1 1,64 50 int64
row U-Net "$work/unet.onnx" 1 1,3,128,128 20
row "GPT decoder block" "$work/gpt_decoder.onnx" 1 1,128 50 int64
for cnn in shufflenet_v2 squeezenet mobilenet_v3; do  # with python3-torchvision installed
  if [[ -f "$work/$cnn.onnx" ]]; then row "$cnn" "$work/$cnn.onnx" 1 1,3,224,224 50; fi
done
printf '%s\n' "${latency_ratios[@]}" |
  awk '{ s += log($1); n++ } END { printf "geometric mean of the batch-1 latency ratios: %.2fx (%d models)\n", exp(s / n), n }'
echo "ratio > 1: Kiln is faster (latency: ORT p50 / Kiln p50; throughput: Kiln / ORT)"
