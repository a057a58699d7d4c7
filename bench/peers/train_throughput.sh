#!/usr/bin/env bash
# Training throughput of Kiln's recipes for W1-W3 beside PyTorch's, measured in
# the same run on this machine (2 threads, batch 64, SGD with momentum), as a
# ratio. Kiln trains one epoch per workload; PyTorch a few hundred steps after
# a warm-up. Needs a build (scripts/build.sh) and Debian's python3-torch.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
printf "%-4s %14s %14s %7s %12s %12s\n" workload "kiln samples/s" "torch samples/s" ratio "kiln RSS MB" "torch RSS MB"
for w in w1 w2 w3; do
  case $w in
    w1) recipe=examples/fashion_mnist/w1_mlp.yaml ;;
    w2) recipe=examples/fashion_mnist/w2_cnn.yaml ;;
    w3) recipe=examples/fashion_mnist/w3_resnet8.yaml ;;
  esac
  KILN_NUM_THREADS=2 ./build/kiln train "$recipe" --epochs 1 --threads 2 --output "$out/$w" > /dev/null
  kiln_rate=$(python3 -c "import json; print(round(json.load(open('$out/$w/metrics.json'))['train_samples_per_s']))")
  kiln_rss=$(python3 -c "import json; print(round(json.load(open('$out/$w/metrics.json'))['peak_rss_mb']))")
  read -r _ torch_rate torch_rss < <(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/peers/torch_train.py "$w")
  ratio=$(python3 -c "print(f'{$kiln_rate / $torch_rate:.2f}x')")
  printf "%-4s %14s %14s %7s %12s %12s\n" "$w" "$kiln_rate" "$torch_rate" "$ratio" "$kiln_rss" "$torch_rss"
done
rm -rf "$out"
