#!/usr/bin/env bash
# On a GPU machine without Debian's archive (CUDA in /usr/local/cuda): unpacks
# the packages scripts/gpu/fetch-debs.sh downloaded (.gpu-debs/) into a
# prefix, builds the core, the CUDA backend for this machine's GPU and
# NCCL's process group in ./build-gpu, and the example op package with its CUDA kernels, and runs
# the CUDA tests and an ONNX model on the GPU. Logs go
# to $OUT when it is set (the device tool's folder), else to build-gpu/.
#   scripts/gpu/build-and-test.sh [GTEST FILTER]
set -euo pipefail
cd "$(dirname "$0")/../.."
PREFIX=${KILN_DEPS_PREFIX:-/opt/kiln-deps}
LOGS=${OUT:-build-gpu}
mkdir -p "$PREFIX" "$LOGS"
[ -d .gpu-debs ] || { echo "no .gpu-debs/: run scripts/gpu/fetch-debs.sh on a Debian 12 machine first" >&2; exit 1; }
ls .gpu-debs/libgloo-dev_*.deb > /dev/null 2>&1 ||
  { echo ".gpu-debs/ has no Gloo: run scripts/gpu/fetch-debs.sh again (it adds what is missing)" >&2; exit 1; }
for deb in .gpu-debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
LIB="$PREFIX/usr/lib/x86_64-linux-gnu"
# Debian's libz.so points at Debian's zlib by an absolute path, and its
# libz.a is not PIC: link the machine's own zlib instead.
rm -f "$LIB/libz.a"
ln -sf "$(ls /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)" "$LIB/libz.so"
# Gloo's CMake file names its library by an absolute path in /usr/lib.
sed -i "s|\"/usr/lib/libgloo|\"$PREFIX/usr/lib/libgloo|g" "$PREFIX"/usr/share/cmake/Gloo/GlooTargets-*.cmake
export LD_LIBRARY_PATH="$LIB:$LIB/openblas-pthread:$PREFIX/usr/lib:${LD_LIBRARY_PATH:-}"
export PATH="$PREFIX/usr/bin:/usr/local/cuda/bin:$PATH"
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$LOGS/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=OFF -DKILN_BUILD_SERVE=OFF \
  -DKILN_BUILD_DIST=ON -DKILN_BUILD_STUDIO=OFF -DKILN_BUILD_PYTHON=OFF -DKILN_BUILD_BENCH=OFF -DKILN_OPENMP=gnu \
  -DKILN_CUDA=on -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" \
  -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCMAKE_INCLUDE_PATH="$PREFIX/usr/include" \
  -DCMAKE_LIBRARY_PATH="$LIB;$LIB/openblas-pthread" -DProtobuf_PROTOC_EXECUTABLE="$PREFIX/usr/bin/protoc" \
  2>&1 | tee "$LOGS/configure.log" | tail -3
start=$(date +%s)
cmake --build build-gpu -j "$(nproc)" --target kiln_cli kiln_cuda kiln_nccl cuda_tests 2>&1 | tee "$LOGS/build.log" | tail -3
echo "built in $(( $(date +%s) - start )) s"
set +e
# The example op package with its CUDA kernels, for the package's GPU test.
# (Its last step, a build with pkg-config, may find no pkg-config there.)
CMAKE_PREFIX_PATH="$PREFIX/usr" bash tests/plugins/build_example.sh build-gpu . "" \
  "-DCUSTOM_OPS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90}" > "$LOGS/package.log" 2>&1
if [ -f build-gpu/custom_op_example/libcustom_ops.so ]; then
  export KILN_TEST_CUSTOM_OPS=$PWD/build-gpu/custom_op_example/libcustom_ops.so
else
  echo "the example op package did not build: $LOGS/package.log"
fi
# The whole log goes to $LOGS; here, the failures and the totals. A test
# that crashes or hangs ends the binary's run early: then each test runs
# again in its own process (ctest), so one bad kernel hides no other result.
timeout 300 build-gpu/tests/cuda_tests --gtest_filter="${1:-*}" > "$LOGS/cuda_tests.log" 2>&1
status=$?
grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests? ran|Failure" "$LOGS/cuda_tests.log" | sort | uniq -c | sort -rn | head -80
if [ $status -ge 124 ] || ! grep -qE "tests? from .* ran" "$LOGS/cuda_tests.log"; then
  echo "cuda_tests ended early (exit $status; its last lines in $LOGS/cuda_tests.log): each test in its own process"
  tail -5 "$LOGS/cuda_tests.log"
  (cd build-gpu && timeout 240 ctest -L cuda -FA '.*' -j 4 --timeout 60 ${1:+-R "${1//\*/.*}"}) > "$LOGS/cuda_ctest.log" 2>&1
  grep -E "\*\*\*(Failed|Exception)|Timeout|tests passed|tests failed" "$LOGS/cuda_ctest.log" | head -80
fi
F=tests/fixtures/onnx
build-gpu/kiln run $F/mlp.onnx --input $F/mlp.input.npy --device cuda 2>&1 | tee "$LOGS/run.log" | tail -4
build-gpu/kiln bench $F/cnn.onnx --batch 1,32 --runs 50 --device cuda 2>&1 | tee "$LOGS/bench.log" | tail -6
