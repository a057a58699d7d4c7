#!/usr/bin/env bash
# Greedy decoding of an LLM decoder in onnxruntime-genai's form (8 layers,
# hidden 512, 8 query and 2 key/value heads, 4-bit MatMulNBits weights,
# GroupQueryAttention with rotary embeddings; tools/ort/genai_decoder.py):
# Kiln's `kiln generate` against ONNX Runtime (onnxruntime-node, same thread
# count) on the same file, a 16-token prompt then TOKENS tokens, at
# accuracy_level 0 (float32 products) and 4 (int8). "cold" is a process's
# first generation, every cache length new to it; "warm" a second one.
# Both run on all the threads (kiln generate's default; its --adapt-threads
# would measure fewer on the first runs of each graph, and a prompt's graph
# runs once a generation).
# Both must print the same tokens (at level 4 the first: see below). Each
# figure is the median of ROUNDS.
# Usage: bench/peers/llm_decode.sh [THREADS] [ROUNDS] [TOKENS]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench/peers/cpu_model.sh
threads="${1:-2}"
rounds="${2:-3}"
tokens="${3:-64}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prompt=3,17,42,5,88,21,7,9,100,2000,31,64,5,900,12,77

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
field() { awk -v f="$1" '/^prefill/ {gsub(",", ""); for (i = 1; i <= NF; ++i) if ($i == f) print $(i + 1)}'; }
printf '%-24s %10s %10s %10s\n' "ms" "kiln" "ORT" "kiln/ORT"
for level in 0 4; do
  model="$work/decoder_level$level.onnx"
  /usr/bin/python3 tools/ort/genai_decoder.py "$model" --layers 8 --hidden 512 --heads 8 --kv-heads 2 \
    --intermediate 1536 --vocab 8192 --max-length 1024 --accuracy-level "$level"
  for warmup in 0 1; do
    kp=() kd=() op=() od=()
    for _ in $(seq "$rounds"); do
      k="$(KILN_NUM_THREADS="$threads" ./build/kiln generate "$model" --prompt "$prompt" --tokens "$tokens" \
        --threads "$threads" --warmup "$warmup")"
      o="$(node tools/ort/ort_generate.js "$model" --prompt "$prompt" --tokens "$tokens" --threads "$threads" \
        --warmup "$warmup")"
      # At level 0 the answers agree to float32 rounding; at level 4 each layer
      # rounds its input to int8, and on random weights a change in the
      # seventh digit moves ONNX Runtime's own logits by 2%: only the first
      # token is compared there.
      kt=($(grep '^tokens:' <<<"$k")) ot=($(grep '^tokens:' <<<"$o"))
      if { [ "$level" = 0 ] && [ "${kt[*]}" != "${ot[*]}" ]; } || [ "${kt[1]}" != "${ot[1]}" ]; then
        echo "level $level: Kiln's tokens differ from ONNX Runtime's" >&2
        exit 1
      fi
      kp+=("$(field prefill <<<"$k")") kd+=("$(field p50 <<<"$k")")
      op+=("$(field prefill <<<"$o")") od+=("$(field p50 <<<"$o")")
    done
    phase=$([ "$warmup" = 0 ] && echo cold || echo warm)
    for what in prefill decode; do
      if [ "$what" = prefill ]; then k=$(printf '%s\n' "${kp[@]}" | median) o=$(printf '%s\n' "${op[@]}" | median)
      else k=$(printf '%s\n' "${kd[@]}" | median) o=$(printf '%s\n' "${od[@]}" | median); fi
      awk -v n="level $level $phase $what" -v k="$k" -v o="$o" \
        'BEGIN { printf "%-24s %10.3f %10.3f %9.2fx\n", n, k, o, k / o }'
    done
  done
done
