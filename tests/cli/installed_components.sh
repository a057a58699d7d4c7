#!/usr/bin/env bash
# A program built against an installed Kiln finds the parts this build has
# with find_package(Kiln COMPONENTS ...), and is told plainly about the ones
# it lacks. Needs the installed prefix (the custom_op_package fixture).
#   installed_components.sh BUILD_DIR "COMPONENTS BUILT"
set -euo pipefail
build=$(cd "$1" && pwd)
built=$2
prefix=$build/kiln-install
work=$build/installed_components
rm -rf "$work"
mkdir -p "$work/src"
cat > "$work/src/main.cpp" <<'CPP'
#include <cstdio>

#include "kiln/dist.h"

int main() {
  for (const auto& name : kiln::dist::registered_backends()) std::printf("backend %s\n", name.c_str());
}
CPP
configure() {  # components -> the configure output; exit status in $status
  cat > "$work/src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.22)
project(consumer CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(Kiln REQUIRED ${1:+COMPONENTS $1})
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE Kiln::kiln \$<TARGET_NAME_IF_EXISTS:Kiln::distributed>)
CMAKE
  rm -rf "$work/build"
  status=0
  out=$(cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" 2>&1) || status=$?
}
configure "$built"
if ((status != 0)); then echo "FAIL: find_package(Kiln COMPONENTS $built) failed:"; echo "$out"; exit 1; fi
cmake --build "$work/build" >/dev/null
ran=$("$work/build/consumer")
if [[ " $built " == *" distributed "* ]] && ! grep -q "backend gloo" <<<"$ran"; then
  echo "FAIL: a program linking Kiln::distributed has no gloo backend registered; it printed: $ran"; exit 1
fi
for missing in serve distributed studio; do
  [[ " $built " == *" $missing "* ]] && continue
  configure "$missing"
  if ((status == 0)) || ! grep -q "built without $missing" <<<"$out"; then
    echo "FAIL: find_package(Kiln COMPONENTS $missing) should say Kiln was built without it:"; echo "$out"; exit 1
  fi
done
configure nosuch
if ((status == 0)) || ! grep -q "no component 'nosuch'" <<<"$out"; then
  echo "FAIL: an unknown component should be named:"; echo "$out"; exit 1
fi
echo "find_package(Kiln COMPONENTS $built) builds a program; missing and unknown components are named"
