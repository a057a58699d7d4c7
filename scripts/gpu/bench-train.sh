#!/usr/bin/env bash
# Training throughput of Kiln against PyTorch in the same run, on the
# workloads the GPU targets name: W1 and W2 at batch 256 (float32), ResNet-50
# at batch 128 and GPT-2 small at 8 x 1024 (bfloat16). For each: Kiln eager
# and graph mode (`kiln bench-train`), PyTorch eager and torch.compile
# (bench/peers/torch_bench_train.py), one JSON line each into
# $OUT/bench-train.jsonl, then a table of the ratios.
#   scripts/gpu/bench-train.sh              # after scripts/gpu/build-and-test.sh
#   QUICK=1 DEVICE=cpu KILN=build/kiln PYTHON=/usr/bin/python3 scripts/gpu/bench-train.sh  # tiny sizes, on a CPU
# Each run stops after LIMIT seconds (default 150), so one that hangs leaves
# the others their time.
set -uo pipefail
cd "$(dirname "$0")/../.."
KILN=${KILN:-build-gpu/kiln}
DEVICE=${DEVICE:-cuda}
LOGS=${OUT:-build-gpu}
mkdir -p "$LOGS"
RESULTS=$LOGS/bench-train.jsonl
: > "$RESULTS"
if [ "${QUICK:-0}" = 1 ]; then
  STEPS="--steps 2 --warmup 1"
  workloads=("mlp --batch 32" "cnn --batch 32" "resnet50 --batch 2 --image-size 32 --channels 3 --classes 100 --precision bf16"
             "gpt2 --batch 1 --seq-len 32 --precision bf16")
else
  STEPS="--steps 20 --warmup 5"
  workloads=("mlp --batch 256" "cnn --batch 256"
             "resnet50 --batch 128 --image-size 224 --channels 3 --classes 1000 --precision bf16"
             "gpt2 --batch 8 --seq-len 1024 --precision bf16")
fi
for w in "${workloads[@]}"; do
  # shellcheck disable=SC2086  # the workload's words are its options
  for mode in eager graph; do
    timeout "${LIMIT:-150}" "$KILN" bench-train $w --device "$DEVICE" --mode "$mode" $STEPS --json >> "$RESULTS" \
      2> "$LOGS/bench-train.err" ||
      echo "kiln bench-train $w --mode $mode failed: $(tail -1 "$LOGS/bench-train.err")" >&2
  done
  for compile in "" --compile; do
    timeout "${LIMIT:-150}" "${PYTHON:-python3}" bench/peers/torch_bench_train.py $w --device "$DEVICE" $compile $STEPS \
      >> "$RESULTS" 2> "$LOGS/torch.err" ||
      echo "PyTorch $w $compile failed: $(tail -1 "$LOGS/torch.err")" >&2
  done
done
"${PYTHON:-python3}" - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def rate(r): return r.get("samples_per_s") or r.get("tokens_per_s")
groups = {}
for r in rows:
    key = (r["model"], r["precision"], r["batch"], r["seq_len"])
    groups.setdefault(key, {})[("kiln " if "torch" not in r else "torch ") + r["mode"]] = r
print(f"{'workload':34} {'kiln eager':>12} {'kiln graph':>12} {'torch eager':>12} {'torch compile':>13}"
      f" {'eager/eager':>12} {'graph/eager':>12} {'graph/compile':>13}")
for (model, precision, batch, seq), g in groups.items():
    name = f"{model} {precision} b{batch}" + (f"x{seq}" if seq else "")
    v = {k: rate(r) for k, r in g.items()}
    fmt = lambda k: f"{v[k]:12.0f}" if k in v else f"{'-':>12}"
    ratio = lambda a, b: f"{v[a] / v[b]:12.2f}x" if a in v and b in v else f"{'-':>13}"
    print(f"{name:34} {fmt('kiln eager')} {fmt('kiln graph')} {fmt('torch eager')} {fmt('torch compile'):>13}"
          f" {ratio('kiln eager', 'torch eager')} {ratio('kiln graph', 'torch eager')}"
          f" {ratio('kiln graph', 'torch compile')}")
print("(samples/s; tokens/s for gpt2; ratios are Kiln's throughput over PyTorch's in this run)")
EOF
