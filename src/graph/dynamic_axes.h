#pragma once
// The input axes a compiled function declares dynamic (jit::DynamicAxis):
// inputs padded up to their buckets and outputs cut back, and whether a new
// signature differs from a cached one on those axes alone.
#include <string>
#include <vector>

#include "kiln/jit.h"

namespace kiln::jit::detail {

// A call's inputs after padding, with the size each padded axis had.
struct Bucketed {
  std::vector<Tensor> inputs;
  struct Padded {
    const DynamicAxis* axis;
    int64_t size, bucket;
  };
  std::vector<Padded> padded;
};
// Checks the declared axes against these inputs (the input and axis exist,
// buckets ascend) and pads those with buckets.
Bucketed pad_to_buckets(const std::vector<DynamicAxis>& axes, const std::vector<Tensor>& inputs);
// The outputs of a padded call cut back to the call's sizes (views).
std::vector<Tensor> cut_to_sizes(const Bucketed& call, const std::vector<Tensor>& outputs);
// Whether the inputs differ from `was` (a cached graph's input shapes) on
// declared dynamic axes only, at least one; *which names the first.
bool only_dynamic_axes_differ(const std::vector<DynamicAxis>& axes, const std::vector<Shape>& was,
                              const std::vector<Tensor>& now, std::string* which);

}  // namespace kiln::jit::detail
