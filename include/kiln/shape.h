#pragma once
// Shapes and strides, and the helpers every op's shape inference uses.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);
// Maps a possibly negative axis into [0, rank); throws naming `what` otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what = "axis");
// NumPy broadcasting of two shapes; throws with both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace kiln
