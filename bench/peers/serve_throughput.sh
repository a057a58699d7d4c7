#!/usr/bin/env bash
# W2 served by kiln serve under load from wrk (64 connections, batch-1
# requests with JSON tensors): throughput and latency with dynamic batching
# against the same server without it, in one run.
# Usage: bench/peers/serve_throughput.sh MODEL.onnx [SECONDS]
#   MODEL.onnx: W2 exported with a dynamic batch (kiln export --dynamic-batch).
# Needs wrk (apt install wrk).
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
model="$1"
seconds="${2:-10}"
work="$(mktemp -d)"
trap 'kill -TERM $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

python3 - "$work/body.json" <<'PY'
import json, random, sys
random.seed(0)
x = [round(random.random(), 4) for _ in range(784)]
json.dump({"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": x}]}, open(sys.argv[1], "w"))
PY
cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$work/body.json", "r")
wrk.body = f:read("*a")
f:close()
LUA

run() {  # name, config.yaml text
  local repo="$work/$1"
  mkdir -p "$repo/w2/1"
  cp "$model" "$repo/w2/1/model.onnx"
  printf '%s\n' "$2" > "$repo/w2/config.yaml"
  ./build/kiln serve --model-repository "$repo" --host 127.0.0.1 --port 0 --access-log "" 2> "$work/$1.log" &
  local pid=$! port=""
  for _ in $(seq 1 300); do
    port="$(sed -n 's/.*ready on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/$1.log")"
    [ -n "$port" ] && break
    sleep 0.1
  done
  wrk -t2 -c64 -d"${seconds}s" --latency -s "$work/post.lua" "http://127.0.0.1:$port/v2/models/w2/infer" > "$work/$1.wrk"
  kill -TERM "$pid"
  wait "$pid" || true
  local rps p50 p99 errors
  rps="$(awk '/Requests\/sec/ {print $2}' "$work/$1.wrk")"
  p50="$(awk '$1 == "50%" {print $2}' "$work/$1.wrk")"
  p99="$(awk '$1 == "99%" {print $2}' "$work/$1.wrk")"
  errors="$(awk '/Non-2xx/ {print $NF} /Socket errors/ {print}' "$work/$1.wrk" | tr '\n' ' ')"
  printf '%-22s %10s req/s   p50 %8s   p99 %8s   errors: %s\n' "$1" "$rps" "$p50" "$p99" "${errors:-none}"
  echo "$rps" > "$work/$1.rps"
}

echo "W2, batch-1 JSON requests, wrk -c64 for ${seconds}s on $(nproc) cores"
run no_batching "max_batch_size: 64
warmup: [1]"
run dynamic_batching "max_batch_size: 64
dynamic_batching: {max_queue_delay_microseconds: 2000, preferred_batch_size: [64]}"
awk -v a="$(cat "$work/dynamic_batching.rps")" -v b="$(cat "$work/no_batching.rps")" \
  'BEGIN { printf "dynamic batching / no batching: %.2fx throughput (target >= 2x)\n", a / b }'
