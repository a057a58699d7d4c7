#!/usr/bin/env bash
# Checks that no source file includes a header of a layer above its own
# (docs/architecture.md, "Layers"). Run by scripts/test.sh; exits 1 listing
# every wrong-way include. Takes the tree to check as its argument (the
# checkout by default), so that its own test can run it on a broken copy.
set -euo pipefail
table="$(cd "$(dirname "$0")" && pwd)/layers.txt"
cd "${1:-$(dirname "$0")/..}"

# The layers, their ranks, public headers and forbidden headers come from
# tools/layers.txt, which the build reads too.
declare -A rank=() header_layer=([kiln]=top) forbidden=()
while read -r name second rest; do
  [[ -z $name || $name == \#* ]] && continue
  if [[ $name == !* ]]; then
    for inc in $second $rest; do forbidden[${name#!}:$inc]=1; done
    continue
  fi
  rank[$name]=$second
  for h in $rest; do [[ $h == - ]] || header_layer[$h]=$name; done
done < "$table"

# The layer whose folder holds a src-relative path: the longest match, since
# a layer's folder may sit inside another's (backends/cpu/passes in backends).
layer_of_path() {
  local path=$1 layer best=""
  for layer in "${!rank[@]}"; do
    if [[ $path == "$layer"/* && ${#layer} -gt ${#best} ]]; then best=$layer; fi
  done
  echo "${best:-${path%%/*}}"
}

layer_of_header() {  # kiln/foo.h, kiln/foo/bar.h or src-relative graph/ir.h
  local inc=$1 name
  if [[ $inc == kiln/* ]]; then
    name=${inc#kiln/}
    name=${name%%/*}
    name=${name%.h}
    echo "${header_layer[$name]:-unknown}"
  else
    layer_of_path "$inc"
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
        echo "$file: includes \"$inc\", which belongs to no known layer (add it to tools/layers.txt)"
        bad=1
      fi
      continue
    fi
    if [[ -n ${forbidden[$own:$inc]+x} ]]; then
      echo "$file: includes \"$inc\", which tools/layers.txt forbids to layer $own (kernels compute, they do not call ops or record gradients again)"
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
  layer=$(layer_of_path "${file#src/}")
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
