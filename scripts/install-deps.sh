#!/usr/bin/env bash
# Installs every Debian package that Kiln's build, tests and main job need.
# Idempotent: packages already present are left alone, and apt-get update runs
# only when something is missing.
set -euo pipefail

PACKAGES=(
  # libkiln and the kiln tool (a build with -DKILN_BUILD_SERVE=OFF
  # -DKILN_BUILD_DIST=OFF -DKILN_BUILD_STUDIO=OFF -DKILN_BUILD_PYTHON=OFF
  # needs only these and the test libraries).
  build-essential cmake ninja-build ccache pkg-config
  # oneDNN's CMake package looks for OpenCL (only a recommendation of libdnnl-dev).
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev
  # LLVM's OpenMP runtime: the parallel regions of Kiln and oneDNN run on it (CMakeLists.txt).
  libomp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev zlib1g-dev libyaml-cpp-dev
  libjpeg62-turbo-dev libpng-dev libarchive-dev
  libprotobuf-dev protobuf-compiler libonnx-dev libboost-dev
  # The MindSpore fixtures' script (tests/mindspore): MindSpore's schemas in Python.
  python3-numpy python3-protobuf
  # Serving (libkiln_serve); cpp-httplib is the HTTP client of the tests and the example client.
  libsimdjson-dev libcpp-httplib-dev
  # Distributed training (libkiln_distributed).
  libgloo-dev
  # Kiln Studio (libkiln_studio): its state (SQLite; libpq for PostgreSQL,
  # and the server its tests start), token and object hashes (OpenSSL), the
  # web console's build (nodejs, npm).
  libsqlite3-dev libpq-dev postgresql libssl-dev nodejs
  # Its Slurm executor, and the single-node cluster its tests start; the
  # sandbox its local executor runs each job in; its notebooks' Jupyter.
  slurmctld slurmd slurm-client munge bubblewrap jupyter-notebook
  # The web console's browser tests (Playwright drives it headless).
  chromium
  # The Python package: pybind11 bindings for Debian's Python, its tests
  # (pytest, NumPy) and the quickstart notebook run headless (nbclient).
  python3-dev pybind11-dev libdlpack-dev python3-numpy python3-pytest python3-setuptools
  python3-nbclient python3-nbformat python3-ipykernel python3-matplotlib python3-tqdm
  dataset-fashion-mnist bible-kjv bible-kjv-text
)

# Debian's nodejs 18 ships npm separately; other nodejs builds bundle it.
if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(npm); fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime, the independent reference the ONNX tests compare against (npm,
# pinned by tools/ort/package-lock.json; its CPU library is in the package, so
# the post-install download of GPU libraries is skipped).
ort_dir="$(dirname "$0")/../tools/ort"
if [ ! -f "$ort_dir/node_modules/onnxruntime-node/package.json" ]; then
  echo "install-deps: installing onnxruntime-node into tools/ort"
  (cd "$ort_dir" && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error)
fi
