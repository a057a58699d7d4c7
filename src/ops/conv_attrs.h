#pragma once
// The attributes of the 2-d convolutions, parsed in one place for their op
// definitions (shape inference, ONNX export), their kernels on every
// backend and the CPU's layout pass.
#include <array>
#include <cstdint>

#include "kiln/attrs.h"
#include "kiln/error.h"

namespace kiln {

// One value per spatial axis: [v] stands for [v, v].
inline std::array<int64_t, 2> spatial_pair(const Attrs& a, const char* name, int64_t fallback) {
  auto v = a.get_ints(name, {fallback, fallback});
  if (v.size() == 1) v.push_back(v[0]);
  KILN_CHECK(v.size() == 2, name, " must have 1 or 2 values, got ", v.size());
  return {v[0], v[1]};
}

struct Conv2dAttrs {
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;

  static Conv2dAttrs of(const Attrs& a) {
    return {spatial_pair(a, "stride", 1), spatial_pair(a, "padding", 0), spatial_pair(a, "dilation", 1),
            a.get_int("groups", 1)};
  }
};

}  // namespace kiln
