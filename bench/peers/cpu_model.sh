#!/usr/bin/env bash
# Prints the CPU the figures come from (model, cores, vector extensions, the
# L1 data and L2 caches per core that Kiln's block sizes follow), so that runs
# on different machines are not compared as if they were one.
model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
flags="$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1)"
isa=""
for f in avx2 avx512f avx512_vnni avx512_bf16 amx_tile; do
  case " $flags " in *" $f "*) isa="$isa $f" ;; esac
done
kb() { local b; b="$(getconf "$1" 2>/dev/null)"; [[ "$b" =~ ^[1-9][0-9]*$ ]] && echo "$((b / 1024)) KB" || echo "?"; }
echo "CPU: $model, $(nproc) cores,${isa:- no AVX2}; L1d $(kb LEVEL1_DCACHE_SIZE), L2 $(kb LEVEL2_CACHE_SIZE)"
