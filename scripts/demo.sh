#!/usr/bin/env bash
# The README's main job, the whole road in one command: install what is
# missing, build, train the W2 CNN on Fashion-MNIST (2 epochs by default; pass
# another count), export it to ONNX, serve it with `kiln serve`, send test
# images over HTTP, print the predictions next to their labels, and stop the
# server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh kiln_cli fashion_mnist_query  # what the demo runs, not the tests
epochs="${1:-2}"
run=runs/demo_w2
repo="$run/repository"

./build/kiln train examples/fashion_mnist/w2_cnn.yaml --epochs "$epochs" --output "$run"
mkdir -p "$repo/w2/1"
./build/kiln export --recipe examples/fashion_mnist/w2_cnn.yaml --checkpoint "$run/checkpoint.safetensors" \
  --input-shape 1,1,28,28 --dynamic-batch --out "$repo/w2/1/model.onnx"
cp examples/fashion_mnist/serve_config.yaml "$repo/w2/config.yaml"

# Any free port; the server prints the one it took.
log="$run/serve.log"
./build/kiln serve --model-repository "$repo" --host 127.0.0.1 --port 0 --access-log "$run/access.log" 2>"$log" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 600); do
  port="$(sed -n 's/.*ready on 127.0.0.1:\([0-9]*\).*/\1/p' "$log")"
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "kiln serve did not become ready" >&2; cat "$log" >&2; exit 1; }
echo "kiln serve: model w2 ready on port $port"

./build/fashion_mnist_query 127.0.0.1 "$port" w2 12

kill -TERM "$server"
wait "$server"
trap - EXIT
echo "server stopped; its log: $log, access log: $run/access.log"
