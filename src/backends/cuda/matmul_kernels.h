#pragma once
// The CUDA backend's matmul, linear and attention kernels (cuBLASLt).
#include "kiln/backend_library.h"

namespace kiln::cuda {

// matmul, linear and attention in float32, float64, float16 and bfloat16.
void register_matmul_kernels(BackendRegistration& reg);

}  // namespace kiln::cuda
