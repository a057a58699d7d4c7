#pragma once
// Int8 results against their exact answer (requantized: from integer sums
// in float64): equal but where the float32 rounding of (acc + bias) * scale
// at a tie goes the other way now and then (expect_requantized_equal: every
// value within one, and 99.5% of them equal).
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"

namespace kiln::testing {

// Uniform random uint8 or int8 values over the type's whole range.
inline Tensor random_quantized(const Shape& shape, DType dtype, uint64_t seed) {
  manual_seed(seed);
  const double lo = dtype == DType::Int8 ? -128 : 0, hi = dtype == DType::Int8 ? 127 : 255;
  return cast(floor(rand(shape) * (hi - lo + 1) + lo), dtype);
}

// The answer in exact arithmetic: the product of the centered integers (in
// float64, exact at these sizes) plus the bias, times the float32
// multiplier, rounded half to even, shifted by the zero point, saturated.
inline Tensor requantized(const Tensor& acc, const Tensor& multiplier, double y_zero, DType out) {
  const double lo = out == DType::Int8 ? -128 : 0, hi = out == DType::Int8 ? 127 : 255;
  return cast(clamp(round(acc * cast(multiplier, DType::Float64)) + y_zero, lo, hi), out);
}

inline void expect_requantized_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  const auto a = cast(got, DType::Float64).contiguous().to_vector<double>();
  const auto b = cast(want, DType::Float64).contiguous().to_vector<double>();
  size_t equal = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_LE(std::fabs(a[i] - b[i]), 1.0) << "element " << i << ": " << a[i] << " vs " << b[i];
    equal += a[i] == b[i];
  }
  EXPECT_GE(equal, a.size() * 995 / 1000) << equal << " of " << a.size() << " equal";
}

}  // namespace kiln::testing
