#!/usr/bin/env bash
# Checks that no source file includes a header of a layer above its own
# (docs/architecture.md, "Layers"). Run by scripts/test.sh; exits 1 listing
# every wrong-way include. Takes the tree to check as its argument (the
# checkout by default), so that its own test can run it on a broken copy.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# Layers from the bottom up; a file may include its own layer and those below.
# Folders under src/ and the public headers (include/kiln/NAME.h or NAME/) map
# to a layer each.
declare -A rank=(
  [core]=0 [profiler]=1 [ops]=2 [autograd]=3 [backends]=4 [graph]=5
  [nn]=6 [optim]=6 [data]=6 [models]=7 [io]=8 [runtime]=9 [train]=10 [serve]=11
)
declare -A header_layer=(
  [tensor]=core [backend]=core [dtype]=core [shape]=core [device]=core [allocator]=core [storage]=core
  [parallel]=core [generator]=core [error]=core [attrs]=core [grad_mode]=core
  [profiler]=profiler [registry]=ops [op_onnx]=ops [functional]=ops [autograd]=autograd [jit]=graph
  [nn]=nn [optim]=optim [data]=data [models]=models [io]=io [onnx]=io [migrate]=io
  [runtime]=runtime [train]=train [callbacks]=train [metrics]=train [recipe]=train
  [training_checkpoint]=train [train_step]=train [serve]=serve [kiln]=top
)

layer_of_header() {  # kiln/foo.h, kiln/foo/bar.h or src-relative graph/ir.h
  local inc=$1 name
  if [[ $inc == kiln/* ]]; then
    name=${inc#kiln/}
    name=${name%%/*}
    name=${name%.h}
    echo "${header_layer[$name]:-unknown}"
  else
    echo "${inc%%/*}"
  fi
}

bad=0
check_file() {  # file, its layer
  local file=$1 own=$2 inc target
  while IFS= read -r inc; do
    target=$(layer_of_header "$inc")
    [[ $target == "$own" ]] && continue
    if [[ $target == unknown || $target == top || -z ${rank[$target]+x} ]]; then
      if [[ $inc == */* ]]; then
        echo "$file: includes \"$inc\", which belongs to no known layer (add it to tools/check_layers.sh)"
        bad=1
      fi
      continue
    fi
    if [[ $own == backends && ( $inc == kiln/functional.h || $inc == kiln/autograd.h || $inc == ops/op_helpers.h ) ]]; then
      echo "$file: includes \"$inc\": kernels compute, they do not call ops or record gradients again"
      bad=1
      continue
    fi
    if ((rank[$target] > rank[$own])); then
      echo "$file: includes \"$inc\": layer $own must not depend on $target, a layer above it"
      bad=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
}

while IFS= read -r file; do
  layer=${file#src/}
  layer=${layer%%/*}
  [[ -n ${rank[$layer]+x} ]] || { echo "$file: folder src/$layer is not a known layer"; bad=1; continue; }
  check_file "$file" "$layer"
done < <(find src -name '*.cpp' -o -name '*.h' | sort)

while IFS= read -r file; do
  name=${file#include/kiln/}
  name=${name%%/*}
  name=${name%.h}
  layer=${header_layer[$name]:-unknown}
  [[ $layer == top ]] && continue
  [[ $layer != unknown ]] || { echo "$file: a public header of no known layer"; bad=1; continue; }
  check_file "$file" "$layer"
done < <(find include/kiln -name '*.h' | sort)

if ((bad)); then
  echo "wrong-way includes found: move the code to the layer it needs, or give the lower layer a hook" >&2
  exit 1
fi
echo "layers: every include points down"
