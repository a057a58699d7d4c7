#pragma once
// Concatenation and average pooling of 8-bit quantized values, requantized
// to the output's parameters, on plain (NCHW) and channels-last (NHWC)
// memory: the eager kernels use the plain forms, graph mode's int8 layouts
// the channels-last ones.
#include <cstdint>
#include <vector>

#include "backends/cpu/blocked_pool.h"

namespace kiln::cpu {

// The output value of every 8-bit input value from (scale, zero) to
// (y_scale, y_zero): round(x_scale * (q - zero) / y_scale) + y_zero,
// saturated, rounding half to even, as dequantizing and quantizing again
// does. `identity` when the parameters agree (a plain copy).
struct Requantizer {
  bool identity = true;
  uint8_t table[256] = {};  // indexed by the value's byte
  Requantizer() = default;
  Requantizer(float x_scale, int32_t x_zero, float y_scale, int32_t y_zero, bool is_signed);
  template <typename T>
  void apply(const T* x, T* y, int64_t n) const;
};

// One input of a concatenation: `rows` rows of `width` values each, row r at x + r * width.
template <typename T>
struct ConcatPart {
  const T* x;
  int64_t width;
  const Requantizer* requantize;
};
// y row r is the parts' rows r side by side. Plain memory concatenating
// along axis a: rows = the product of the dims before a; channels-last
// memory concatenating channels: rows = N * H * W, width = each part's C.
template <typename T>
void concat_rows(const std::vector<ConcatPart<T>>& parts, int64_t rows, T* y);

// The average of each window of quantized x (padding counted in the divisor
// or not), requantized by multiplier = x_scale / y_scale and y_zero.
struct QuantizedPool {
  PoolWindow window;
  int64_t n, c, h, w, oh, ow;
  bool count_include_pad;
  int32_t x_zero, y_zero;
  float multiplier;
};
template <typename T>
void avg_pool_quantized_nchw(const QuantizedPool& p, const T* x, T* y);
template <typename T>
void avg_pool_quantized_nhwc(const QuantizedPool& p, const T* x, T* y);

}  // namespace kiln::cpu
