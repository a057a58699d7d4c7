#include "kiln/shape.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln {

int64_t checked_numel(const Shape& shape, int64_t limit) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) return 0;  // [huge, 0] holds nothing, whatever the other sizes
    overflow = overflow || __builtin_mul_overflow(n, d, &n) || n > limit;
  }
  return overflow ? -1 : n;
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      int64_t checked = checked_numel(shape);
      if (checked >= 0) return checked;  // a zero size later in the shape
      KILN_FAIL("shape ", shape_str(shape), " has more elements than a 64-bit count can hold; ",
                "a size in it is wrong (read from a file or request that is malformed?)");
    }
  }
  return n;
}

size_t nbytes_of(const Shape& shape, size_t element_size) {
  size_t bytes = 0;
  KILN_CHECK(!__builtin_mul_overflow(static_cast<size_t>(numel_of(shape)), element_size, &bytes), "shape ",
             shape_str(shape), " of ", element_size, "-byte elements needs more bytes than memory can address");
  return bytes;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what) {
  int64_t r = std::max<int64_t>(rank, 1);
  KILN_CHECK(axis >= -r && axis < r, what, " ", axis, " is out of range for a tensor of rank ", rank,
             "; valid values are ", -r, "..", r - 1);
  return axis < 0 ? axis + r : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast together (axis ", static_cast<int64_t>(i) - static_cast<int64_t>(n),
               " has sizes ", da, " and ", db, "); sizes must match or be 1");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace kiln
