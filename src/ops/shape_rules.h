#pragma once
// Rules on axes, slices and attributes shared by op definitions and the
// kernels (which must not see the functional API: they never run ops).
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/shape.h"

namespace kiln::detail {

// Normalizes a list of axes (empty = all) into sorted unique positive axes.
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank);
Shape reduced_shape(const Shape& in, const std::vector<int64_t>& axes, bool keepdim);

// Python slice semantics for one axis: negative indices count from the end,
// out-of-range bounds clamp; count is the number of selected elements.
void slice_bounds(int64_t size, int64_t& start, int64_t& end, int64_t step, int64_t& count);

inline const std::string& reduction_attr(const Attrs& a) {
  static const std::string kMean = "mean", kSum = "sum", kNone = "none";
  std::string r = a.get_string("reduction", "mean");
  if (r == "mean") return kMean;
  if (r == "sum") return kSum;
  KILN_CHECK(r == "none", "reduction '", r, "' is not one of 'mean', 'sum', 'none'");
  return kNone;
}

}  // namespace kiln::detail
