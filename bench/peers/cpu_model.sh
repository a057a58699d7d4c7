#!/usr/bin/env bash
# Prints the CPU the figures come from (model, cores, vector extensions), so
# that runs on different machines are not compared as if they were one.
model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
flags="$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1)"
isa=""
for f in avx2 avx512f avx512_vnni avx512_bf16 amx_tile; do
  case " $flags " in *" $f "*) isa="$isa $f" ;; esac
done
echo "CPU: $model, $(nproc) cores,${isa:- no AVX2}"
