#pragma once
// Shapes and strides, and the helpers every op's shape inference uses.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// The element count; throws when a size is negative or the product overflows
// int64 (shapes from files and requests can claim anything).
int64_t numel_of(const Shape& shape);
// The element count, or -1 when a size is negative or the product does not fit
// in `limit` elements: for readers that name the file in their own message.
int64_t checked_numel(const Shape& shape, int64_t limit = INT64_MAX);
// numel * bytes per element; throws like numel_of when the bytes overflow.
size_t nbytes_of(const Shape& shape, size_t element_size);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);
// Maps a possibly negative axis into [0, rank); throws naming `what` otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what = "axis");
// NumPy broadcasting of two shapes; throws with both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace kiln
