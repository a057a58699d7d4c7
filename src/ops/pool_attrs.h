#pragma once
// The attributes of 2-d pooling (max_pool2d, avg_pool2d and their backward
// ops), parsed in one place for the op definitions, the kernels of every
// backend and the CPU's layout pass.
#include <array>
#include <cstdint>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/error.h"

namespace kiln {

struct Pool2dAttrs {
  std::array<int64_t, 2> kernel, stride, padding, dilation;
  bool ceil_mode;

  // stride defaults to the kernel (also when given as []); [v] stands for [v, v].
  static Pool2dAttrs of(const Attrs& a) {
    auto pair = [&](const char* name, std::vector<int64_t> fallback) -> std::array<int64_t, 2> {
      auto v = a.get_ints(name, fallback);
      if (v.empty()) v = fallback;
      if (v.size() == 1) v.push_back(v[0]);
      KILN_CHECK(v.size() == 2, name, " must have 1 or 2 values, got ", v.size());
      return {v[0], v[1]};
    };
    const auto k = pair("kernel", {});
    return {k, pair("stride", {k[0], k[1]}), pair("padding", {0, 0}), pair("dilation", {1, 1}),
            a.get_bool("ceil_mode", false)};
  }
};

}  // namespace kiln
