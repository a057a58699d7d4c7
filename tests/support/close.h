#pragma once
// Element-wise comparison of two tensors with a readable failure.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/tensor.h"

namespace kiln::testing {

// |a - b| <= atol + rtol * |b| everywhere (b is the reference); with
// equal_nan, NaN matches NaN (equal infinities always match).
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol = 1e-4, double atol = 1e-4,
                                            bool equal_nan = false) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << "shapes differ: " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  auto x = a.to(DType::Float64).contiguous().to_vector<double>();
  auto y = b.to(DType::Float64).contiguous().to_vector<double>();
  double worst = 0;
  size_t worst_at = 0, bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i] || (equal_nan && std::isnan(x[i]) && std::isnan(y[i]))) continue;
    double d = std::fabs(x[i] - y[i]), limit = atol + rtol * std::fabs(y[i]);
    if (!(d <= limit)) {
      ++bad;
      if (!(d <= worst)) {
        worst = d;
        worst_at = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << x.size() << " elements differ; worst at " << worst_at << ": "
                                       << x[worst_at] << " vs " << y[worst_at];
}

}  // namespace kiln::testing
