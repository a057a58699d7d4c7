#!/usr/bin/env bash
# Training throughput while another process keeps one core busy, beside
# PyTorch's in the same run (2 threads, batch 64): Kiln's graph mode as it
# runs by default (steps measure how many threads pay off) and with
# --fixed-threads, one epoch of W1 and W2 each, quiet and busy. Needs a build
# and Debian's python3-torch. Arguments: workloads (default w1 w2).
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
out=$(mktemp -d)
busy=""
cleanup() { [[ -n "$busy" ]] && kill "$busy" 2> /dev/null; rm -rf "$out"; }
trap cleanup EXIT
[ $# -gt 0 ] || set -- w1 w2
kiln_rate() {  # recipe, extra flags -> samples/s
  # (the smaller last batch compiles a second graph: that notice is left out)
  ./build/kiln train "$1" --epochs 1 --threads 2 --mode graph --output "$out/run" ${2:-} > /dev/null 2> >(grep -v "compiled again" >&2)
  python3 -c "import json; print(round(json.load(open('$out/run/metrics.json'))['train_samples_per_s']))"
}
table() {
  printf "%-4s %14s %14s %14s %12s %12s\n" workload "kiln samp/s" "fixed samp/s" "torch samp/s" "kiln/torch" "fixed/torch"
  for w in "$@"; do
    case $w in
      w1) recipe=examples/fashion_mnist/w1_mlp.yaml ;;
      w2) recipe=examples/fashion_mnist/w2_cnn.yaml ;;
      *) echo "unknown workload $w (w1 or w2)" >&2; exit 2 ;;
    esac
    k=$(kiln_rate "$recipe")
    f=$(kiln_rate "$recipe" --fixed-threads)
    read -r _ t _ < <(OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/peers/torch_train.py "$w")
    python3 -c "print(f'%-4s %14d %14d %14d %11.2fx %11.2fx' % ('$w', $k, $f, $t, $k / $t, $f / $t))"
  done
}
echo "quiet machine"
table "$@"
echo "one core kept busy by another process"
timeout 1800 sh -c 'while :; do :; done' &
busy=$!
table "$@"
echo "ratio > 1: Kiln trains faster than PyTorch"
