#pragma once
// One row at a time of the CPU's normalization and quantization kernels,
// bit for bit as the ops compute them, for fused kernels that finish a row
// while it is in the L1 cache (the CPU pass that quantizes a layer norm's
// rows as it makes them: norm_quantize.cpp).
#include <cstdint>

namespace kiln::cpu {

// layer_norm over one row of m float32 values (normalized over the whole
// row; w and b, each [m] or null), as the layer_norm kernel computes it.
void layer_norm_row(const float* x, float* y, int64_t m, double eps, const float* w, const float* b);

// x * rsqrt(mean(x * x) + eps) * w over one row of m float32 values (w
// [m] or null), the sum of squares in sixteen float lanes.
void rms_norm_row(const float* x, float* y, int64_t m, double eps, const float* w);

// quantize_linear and dequantize_linear of n values by one scale and zero
// point, as their kernels compute them.
void quantize_row(const float* x, uint8_t* y, int64_t n, float scale, int32_t zero);
void quantize_row(const float* x, int8_t* y, int64_t n, float scale, int32_t zero);
void dequantize_row(const uint8_t* q, float* y, int64_t n, float scale, int32_t zero);
void dequantize_row(const int8_t* q, float* y, int64_t n, float scale, int32_t zero);

}  // namespace kiln::cpu
