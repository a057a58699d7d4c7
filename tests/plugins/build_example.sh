#!/usr/bin/env bash
# Builds examples/custom_op as a user would: Kiln installed into a prefix,
# the package configured as a separate CMake project against it
# (find_package(Kiln)), and once more with pkg-config and a bare compiler.
#   build_example.sh BUILD_DIR SOURCE_DIR [SANITIZERS] [PACKAGE CMAKE OPTIONS]
set -euo pipefail
build=$1
source=$2
# A sanitized Kiln needs its users built with the same sanitizers.
if [[ -n "${3:-}" ]]; then
  export CXXFLAGS="-fsanitize=$3" LDFLAGS="-fsanitize=$3"
fi
prefix=$build/kiln-install
cmake --install "$build" --prefix "$prefix" >/dev/null
# shellcheck disable=SC2086  # the options are words
cmake -S "$source/examples/custom_op" -B "$build/custom_op_example" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" ${4:-} >/dev/null
cmake --build "$build/custom_op_example"
test -f "$build/custom_op_example/libcustom_ops.so"
# Without CMake: the kiln-plugin pkg-config file gives everything a package needs.
out=$build/custom_op_pkgconfig
mkdir -p "$out"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
c++ -O2 ${CXXFLAGS:-} $(pkg-config --cflags kiln-plugin) -ffast-math \
  "$source"/examples/custom_op/{custom_ops,rms_norm,swiglu}.cpp -o "$out/libcustom_ops.so" $(pkg-config --libs kiln-plugin)
echo "built $build/custom_op_example/libcustom_ops.so and $out/libcustom_ops.so"
