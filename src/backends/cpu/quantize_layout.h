#pragma once
// Quantizing a plain float32 image batch straight into channels-last 8-bit
// memory, as the int8 layout pass has a model's input quantized for its
// first convolution: one pass, where a quantization and a reorder took two.
#include <cstdint>

#include "kiln/tensor.h"

namespace kiln::cpu {

// y (uint8 or int8, NCHW by shape, NHWC in memory) = quantize_linear(x, scale, zero) of x [N, C, H, W].
void quantize_to_channels_last(const Tensor& x, float scale, int32_t zero, Tensor& y);

}  // namespace kiln::cpu
