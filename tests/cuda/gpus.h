#pragma once
// The CUDA tests' start: the backend library loaded, and the GPUs this
// machine has; NEEDS_A_GPU() skips a test, saying why, where it has none.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kiln/op_library.h"

namespace kiln::testing {

inline int gpus() {
  load_op_library(KILN_CUDA_BACKEND);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace kiln::testing

#define NEEDS_A_GPU() \
  if (::kiln::testing::gpus() == 0) GTEST_SKIP() << "no CUDA device on this machine"
