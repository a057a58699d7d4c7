#!/usr/bin/env bash
# Batch-1 latency while another process keeps one core busy, against ONNX
# Runtime (onnxruntime-node) at the same thread count, in one run: Kiln's p90
# as it runs by default (the thread governor chooses the count per model) and
# with --fixed-threads, beside ORT's p90, and the same three figures on the
# quiet machine. The models come from make_inference_models.py (Debian's
# python3-torch; the CNNs with python3-torchvision).
# Usage: bench/peers/contended_latency.sh [THREADS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
threads="${1:-2}"
runs="${2:-60}"
work="$(mktemp -d)"
busy=""
cleanup() { [[ -n "$busy" ]] && kill "$busy" 2> /dev/null; rm -rf "$work"; }
trap cleanup EXIT
/usr/bin/python3 bench/peers/make_inference_models.py "$work" 2> /dev/null

kiln_p90() {  # model, extra flags
  ./build/kiln bench "$1" --batch 1 --runs "$runs" --threads "$threads" ${2:-} | awk '$1 == 1 {print $3}'
}
ort_p90() {  # model, dims, input type
  node tools/ort/ort_bench.js "$1" input "$2" --threads "$threads" --runs "$runs" --type "$3" | awk '{print $6}'
}
table() {
  printf '%-22s %14s %14s %12s %8s %8s\n' model "kiln p90 ms" "fixed p90 ms" "ORT p90 ms" "ORT/kiln" "ORT/fixed"
  for m in resnet18 transformer_encoder text_lstm unet gpt_decoder shufflenet_v2 squeezenet mobilenet_v3; do
    [[ -f "$work/$m.onnx" ]] || continue
    dims=1,3,224,224 type=float32
    case $m in
      transformer_encoder) dims=1,128,256 ;;
      text_lstm) dims=1,64 type=int64 ;;
      unet) dims=1,3,128,128 ;;
      gpt_decoder) dims=1,128 type=int64 ;;
    esac
    k=$(kiln_p90 "$work/$m.onnx")
    f=$(kiln_p90 "$work/$m.onnx" --fixed-threads)
    o=$(ort_p90 "$work/$m.onnx" "$dims" "$type")
    awk -v n="$m" -v k="$k" -v f="$f" -v o="$o" \
      'BEGIN { printf "%-22s %14.3f %14.3f %12.3f %7.2fx %7.2fx\n", n, k, f, o, o / k, o / f }'
  done
}
echo "quiet machine"
table
echo "one core kept busy by another process"
timeout 1800 sh -c 'while :; do :; done' &
busy=$!
table
echo "ratio > 1: Kiln's p90 is lower than ONNX Runtime's"
