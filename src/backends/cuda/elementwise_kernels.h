#pragma once
// The CUDA backend's kernels for the ops with elementwise formulas.
#include "kiln/backend_library.h"

namespace kiln::cuda {

// A kernel for every op whose OpDef::math names a formula, in float32,
// float64, float16 and bfloat16.
void register_elementwise_kernels(BackendRegistration& reg);

}  // namespace kiln::cuda
