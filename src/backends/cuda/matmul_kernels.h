#pragma once
// The CUDA backend's matmul and linear kernels (cuBLASLt).
#include "kiln/backend_library.h"

namespace kiln::cuda {

// matmul and linear in float32, float64, float16 and bfloat16.
void register_matmul_kernels(BackendRegistration& reg);

}  // namespace kiln::cuda
