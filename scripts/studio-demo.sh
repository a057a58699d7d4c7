#!/usr/bin/env bash
# The platform's main path in one command: start a Kiln Studio, upload
# Fashion-MNIST to its store, submit the W2 recipe as a training job and wait
# for it, register the job's model, alias it production, deploy it as a
# service with two instances, classify test images through the studio's
# endpoint, print the predictions beside the labels, and stop everything.
#   scripts/studio-demo.sh [EPOCHS]   (default 2)
# KILN_DEMO_MAX_STEPS=N stops training after N steps (the tests' quick run);
# KILN_DEMO_NO_SETUP=1 skips installing and building; KILN_DEMO_KEEP=1 leaves
# the studio and its service running for the web console until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${KILN_DEMO_NO_SETUP:-}" ]; then
  scripts/install-deps.sh
  scripts/build.sh kiln_cli kiln_console
fi
epochs="${1:-2}"
kiln="$PWD/build/kiln"
work="${KILN_DEMO_DIR:-$PWD/runs/studio_demo}"
rm -rf "$work"
mkdir -p "$work"

"$kiln" studio serve --data "$work/studio" --host 127.0.0.1 --port 0 2>"$work/studio.log" &
studio=$!
cleanup() {
  kill -TERM "$studio" 2>/dev/null || true
  wait "$studio" 2>/dev/null || true
}
trap cleanup EXIT
port=""
for _ in $(seq 1 300); do
  port="$(sed -n 's/.*ready on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/studio.log")"
  [ -n "$port" ] && break
  kill -0 "$studio" 2>/dev/null || { cat "$work/studio.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "the studio did not start" >&2; cat "$work/studio.log" >&2; exit 1; }
export KILN_STUDIO_URL="http://127.0.0.1:$port"
KILN_STUDIO_TOKEN="$("$kiln" studio token create --data "$work/studio" --name demo --scope write)"
export KILN_STUDIO_TOKEN
echo "== studio on $KILN_STUDIO_URL"

echo "== upload Fashion-MNIST"
"$kiln" store mb studio://data
"$kiln" store cp /usr/share/datasets/fashion-mnist studio://data/fmnist

echo "== train W2 as a job ($epochs epochs)"
sed "s/^epochs: .*/epochs: $epochs/" examples/fashion_mnist/w2_cnn.yaml > "$work/w2.yaml"
[ -n "${KILN_DEMO_MAX_STEPS:-}" ] && echo "max_steps: $KILN_DEMO_MAX_STEPS" >> "$work/w2.yaml"
cat > "$work/job.yaml" <<SPEC
name: w2-demo
recipe: $work/w2.yaml
inputs: {data_url: studio://data/fmnist}
output: studio://runs/w2-demo
SPEC
submitted="$("$kiln" job submit "$work/job.yaml" --wait)"
echo "$submitted"
job="${submitted%%$'\n'*}"  # the first line is the job's id
"$kiln" job logs "$job" --rank 0 --grep accuracy

echo "== register the model, alias it production"
"$kiln" model register fmnist --job "$job" --wait --description "W2 from job $job"
"$kiln" model alias fmnist production 1

echo "== deploy it as a service"
"$kiln" service deploy fmnist --model fmnist@production --instances 2
for _ in $(seq 1 600); do
  "$kiln" service show fmnist | head -1 | grep -q Running && break
  sleep 0.1
done
"$kiln" service show fmnist

echo "== classify test images through the studio"
./build/fashion_mnist_query 127.0.0.1 "$port" fmnist 12 /api/v1/services/fmnist

if [ -n "${KILN_DEMO_KEEP:-}" ]; then
  echo "== the web console: open $KILN_STUDIO_URL/ and sign in with $KILN_STUDIO_TOKEN (Ctrl-C stops everything)"
  trap 'cleanup; exit 0' INT TERM
  wait "$studio" || true
fi

"$kiln" service stop fmnist >/dev/null
echo "== stopped; the studio's data is in $work/studio"
