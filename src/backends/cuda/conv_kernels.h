#pragma once
// The CUDA backend's convolution kernels (cuDNN, where it is installed).
#include "kiln/backend_library.h"

namespace kiln::cuda {

// conv2d and its two backward ops in float32, float64, float16 and
// bfloat16; none in a build without cuDNN.
void register_conv_kernels(BackendRegistration& reg);

}  // namespace kiln::cuda
