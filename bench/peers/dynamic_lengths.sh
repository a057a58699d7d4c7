#!/usr/bin/env bash
# Transformer encoders with dynamic batch and sequence axes (a pre-norm layer
# on float input, and a BERT-style model on token ids), called at batch 1 with
# lengths 20..59 in turn (as a server sees them), in Kiln and in ONNX Runtime
# (onnxruntime-node) in the same run: p50 and p90 of each, Kiln's ratio to
# ONNX Runtime, and to Kiln's own fixed-shape figures (the median over the
# lengths of each length's p50 timed alone). Then the W2 CNN exported with a
# dynamic batch (tests/fixtures/onnx/cnn.onnx), called with batch sizes 1..16
# in turn: each batch size's p50 in both, and the largest ratio. The machine's
# speed drifts between minutes, so the three measurements alternate ROUNDS
# times and each figure is the median of its rounds. Needs Debian's
# python3-onnx to write the encoders.
# Usage: bench/peers/dynamic_lengths.sh [THREADS] [RUNS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
threads="${1:-2}"
runs="${2:-400}"
rounds="${3:-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bench/peers/cpu_model.sh
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# model input tail(kiln dims after the length) tail(ORT) type
measure() {
  local model="$1" input="$2" ktail="$3" otail="$4" type="$5"
  local k50=() k90=() o50=() o90=() f50=()
  for _ in $(seq "$rounds"); do
    read -r a b < <(./build/kiln bench "$model" --shape "$input=1x20..59$ktail" --threads "$threads" \
      --runs "$runs" | awk -v n="$input=" 'index($1, n) == 1 {print $2, $3}')
    k50+=("$a") k90+=("$b")
    read -r a b < <(node tools/ort/ort_bench.js "$model" "$input" "1,20..59$otail" --type "$type" \
      --threads "$threads" --runs $((runs * 40)) | awk '{print $4, $6}')
    o50+=("$a") o90+=("$b")
    local fixed=()
    for length in $(seq 20 59); do
      fixed+=("$(./build/kiln bench "$model" --shape "$input=1x$length$ktail" --threads "$threads" --runs "$runs" |
        awk -v n="$input=" 'index($1, n) == 1 {print $2}')")
    done
    f50+=("$(printf '%s\n' "${fixed[@]}" | median)")
  done
  local k_p50 k_p90 o_p50 o_p90 f_p50
  k_p50=$(printf '%s\n' "${k50[@]}" | median) k_p90=$(printf '%s\n' "${k90[@]}" | median)
  o_p50=$(printf '%s\n' "${o50[@]}" | median) o_p90=$(printf '%s\n' "${o90[@]}" | median)
  f_p50=$(printf '%s\n' "${f50[@]}" | median)
  printf "%-34s %10s %10s %10s %10s %12s\n" "$(basename "$model" .onnx), lengths 20..59 in turn" "$k_p50" "$o_p50" \
    "$k_p90" "$o_p90" "$f_p50"
  awk -v k="$k_p50" -v o="$o_p50" -v k9="$k_p90" -v o9="$o_p90" -v f="$f_p50" 'BEGIN {
    printf "  Kiln/ORT p50 %.2fx, p90 %.2fx (target: at most 1.0); Kiln fixed/in turn %.2f (target: at least 0.9)\n",
      k / o, k9 / o9, f / k }'
}
/usr/bin/python3 bench/peers/make_dynamic_encoder.py "$work/encoder.onnx"
/usr/bin/python3 bench/peers/make_dynamic_encoder.py "$work/bert.onnx" --bert
printf "%-34s %10s %10s %10s %10s %12s\n" "ms" "Kiln p50" "ORT p50" "Kiln p90" "ORT p90" "Kiln fixed"
measure "$work/encoder.onnx" x x64 ,64 float32
measure "$work/bert.onnx" ids "" "" int64

# The CNN at batch sizes 1..16 in turn: one line per batch size from the same
# runs, each round's lines appended ("batch p50"), the median per batch size.
cnn=tests/fixtures/onnx/cnn.onnx
for _ in $(seq "$rounds"); do
  ./build/kiln bench "$cnn" --shape input=1..16x1x28x28 --each --threads "$threads" --runs "$runs" |
    awk '$1 ~ /^input=[0-9]+x/ {split($1, d, /[=x]/); print d[2], $2}' >> "$work/kiln_rounds"
  node tools/ort/ort_bench.js "$cnn" input 1..16,1,28,28 --each --threads "$threads" --runs $((runs * 16)) |
    awk '$1 == "shape" {split($2, d, ","); print d[1], $4}' >> "$work/ort_rounds"
done
per_batch_median() {
  sort -k1,1n -k2,2g "$1" | awk '{v[$1] = v[$1] " " $2; n[$1]++} END {
    for (b in v) { split(substr(v[b], 2), x, " "); print b, x[int((n[b] + 1) / 2)] } }' | sort -k1,1
}
per_batch_median "$work/kiln_rounds" > "$work/kiln_cnn"
per_batch_median "$work/ort_rounds" > "$work/ort_cnn"
echo "cnn, batch sizes 1..16 in turn (p50 ms, median of $rounds rounds):"
join "$work/kiln_cnn" "$work/ort_cnn" | sort -k1,1n | awk '{
  r = $2 / $3; if (r > worst) { worst = r; at = $1 }
  line = line sprintf(" %s:%.2fx", $1, r) }
  END { printf "  Kiln/ORT by batch size%s\n  largest %.2fx at batch %s (target: at most 1.0 at each)\n", line, worst, at }'
