#!/usr/bin/env bash
# Downloads, on a Debian 12 machine, the packages that the core build of
# Kiln needs and a GPU machine without Debian's archive lacks, into
# .gpu-debs/ (ignored by git; about 40 MB): scripts/gpu/build-and-test.sh
# unpacks them there. Carry the folder along with the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
PACKAGES=(
  libdnnl2 libdnnl-dev ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers opencl-clhpp-headers
  libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5
  libgtest-dev libgmock-dev googletest
  libcli11-dev nlohmann-json3-dev zlib1g-dev libyaml-cpp0.7 libyaml-cpp-dev
  libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev libarchive13 libarchive-dev
  libprotobuf32 libprotobuf-dev protobuf-compiler libprotoc32 libonnx1 libonnx-dev libonnxifi
  libboost1.74-dev libboost-dev
  # Gloo and what it loads, for libkiln_distributed and NCCL's group beside it
  libgloo0 libgloo-dev libibverbs1 libnl-3-200 libnl-route-3-200 libhiredis0.14
  # pkg-config, which the configuration asks for
  pkgconf pkgconf-bin libpkgconf3 pkg-config
)
mkdir -p .gpu-debs
cd .gpu-debs
apt-get download "${PACKAGES[@]}"
du -sh .
