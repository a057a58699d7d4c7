#!/usr/bin/env bash
# Training throughput of Kiln's recipes for W1-W3, eager and graph mode, beside
# PyTorch's, measured in the same run on this machine (2 threads, batch 64, SGD
# with momentum), as ratios. Kiln trains one epoch per workload and mode;
# PyTorch a few hundred steps after a warm-up. The machine's speed drifts
# between minutes, so the three alternate ROUNDS times (KILN_BENCH_ROUNDS,
# default 3) and each figure is the median of its rounds. Needs a build
# (scripts/build.sh) and Debian's python3-torch. Arguments: workloads
# (default w1 w2 w3).
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
out=$(mktemp -d)
rounds="${KILN_BENCH_ROUNDS:-3}"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
metric() { python3 -c "import json; print(round(json.load(open('$1/metrics.json'))['$2']))"; }
printf "%-4s %12s %12s %12s %12s %12s %10s %10s\n" workload "eager samp/s" "graph samp/s" "torch samp/s" \
  "graph/eager" "graph/torch" "graph MB" "torch MB"
[ $# -gt 0 ] || set -- w1 w2 w3
for w in "$@"; do
  case $w in
    w1) recipe=examples/fashion_mnist/w1_mlp.yaml ;;
    w2) recipe=examples/fashion_mnist/w2_cnn.yaml ;;
    w3) recipe=examples/fashion_mnist/w3_resnet8.yaml ;;
  esac
  eagers=() graphs=() torches=()
  for _ in $(seq "$rounds"); do
    for mode in eager graph; do
      KILN_NUM_THREADS=2 ./build/kiln train "$recipe" --epochs 1 --threads 2 --mode $mode --output "$out/$w-$mode" > /dev/null
    done
    eagers+=("$(metric "$out/$w-eager" train_samples_per_s)")
    graphs+=("$(metric "$out/$w-graph" train_samples_per_s)")
    read -r _ torch_rate torch_rss < <(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/peers/torch_train.py "$w")
    torches+=("$torch_rate")
  done
  eager=$(printf '%s\n' "${eagers[@]}" | median) graph=$(printf '%s\n' "${graphs[@]}" | median)
  torch_rate=$(printf '%s\n' "${torches[@]}" | median)
  graph_rss=$(metric "$out/$w-graph" peak_rss_mb)
  ratios=$(python3 -c "print(f'{$graph / $eager:.2f}x {$graph / $torch_rate:.2f}x')")
  printf "%-4s %12s %12s %12s %12s %12s %10s %10s\n" "$w" "$eager" "$graph" "$torch_rate" $ratios "$graph_rss" "$torch_rss"
done
rm -rf "$out"
