#!/usr/bin/env bash
# Training throughput of Kiln's recipes for W1-W4, eager and graph mode, beside
# PyTorch's, measured in the same run on this machine (2 threads), as ratios:
# W1-W3 at batch 64 with SGD and momentum, Kiln one epoch per workload and
# mode, PyTorch a few hundred steps after a warm-up; W4 (the character
# Transformer, batch 32 windows of 128 characters, AdamW) 300 steps in Kiln
# and 100 in PyTorch (bench/peers/torch_w4.py), its samples being windows.
# The machine's speed drifts between minutes, so the three alternate ROUNDS
# times (KILN_BENCH_ROUNDS, default 3) and each figure is the median of its
# rounds. Needs a build (scripts/build.sh), Debian's python3-torch, and for W4
# bible-kjv. Arguments: workloads (default w1 w2 w3 w4).
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
out=$(mktemp -d)
rounds="${KILN_BENCH_ROUNDS:-3}"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
metric() { python3 -c "import json; print(round(json.load(open('$1/metrics.json'))['$2']))"; }
printf "%-4s %12s %12s %12s %12s %12s %10s %10s\n" workload "eager samp/s" "graph samp/s" "torch samp/s" \
  "graph/eager" "graph/torch" "graph MB" "torch MB"
[ $# -gt 0 ] || set -- w1 w2 w3 w4
for w in "$@"; do
  case $w in
    w1) recipe=examples/fashion_mnist/w1_mlp.yaml ;;
    w2) recipe=examples/fashion_mnist/w2_cnn.yaml ;;
    w3) recipe=examples/fashion_mnist/w3_resnet8.yaml ;;
    w4) recipe=examples/kjv/w4_char_transformer.yaml ;;
    *) echo "train_throughput.sh: unknown workload '$w' (w1, w2, w3 or w4)" >&2; exit 2 ;;
  esac
  length=(--epochs 1)
  [[ $w == w4 ]] && length=(--max-steps 300)
  eagers=() graphs=() torches=()
  for _ in $(seq "$rounds"); do
    for mode in eager graph; do
      KILN_NUM_THREADS=2 ./build/kiln train "$recipe" "${length[@]}" --threads 2 --mode $mode --output "$out/$w-$mode" > /dev/null
    done
    eagers+=("$(metric "$out/$w-eager" train_samples_per_s)")
    graphs+=("$(metric "$out/$w-graph" train_samples_per_s)")
    if [[ $w == w4 ]]; then  # (it prints tokens/s: 128 to a window)
      read -r torch_rate torch_rss < <(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/peers/torch_w4.py 100 2> /dev/null |
        awk '$1 == "torch_w4" {printf "%.0f %s\n", $7 / 128, $9}')
    else
      read -r _ torch_rate torch_rss < <(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/peers/torch_train.py "$w")
    fi
    torches+=("$torch_rate")
  done
  eager=$(printf '%s\n' "${eagers[@]}" | median) graph=$(printf '%s\n' "${graphs[@]}" | median)
  torch_rate=$(printf '%s\n' "${torches[@]}" | median)
  graph_rss=$(metric "$out/$w-graph" peak_rss_mb)
  ratios=$(python3 -c "print(f'{$graph / $eager:.2f}x {$graph / $torch_rate:.2f}x')")
  printf "%-4s %12s %12s %12s %12s %12s %10s %10s\n" "$w" "$eager" "$graph" "$torch_rate" $ratios "$graph_rss" "$torch_rss"
done
rm -rf "$out"
