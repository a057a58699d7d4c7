#pragma once
// The launch of topk (sort_kernels.cu): each line along the axis sorted by
// CUB's segmented radix sort (stable, so equal values keep their order by
// position, as the CPU's), the first k taken. Plain values and C++17.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "backends/cuda/convert_launch.h"

namespace kiln::cuda {

struct TopkCall {
  AnyDType dtype = AnyDType::Float32;
  int64_t outer = 1, len = 0, inner = 1, k = 0;  // x dense [outer, len, inner]
  bool largest = true;
  void* stream = nullptr;
};
// values [outer, k, inner] and their int64 positions along the axis;
// `scratch` gives stream-ordered device memory that lives until the call's
// work is queued.
void launch_topk(const TopkCall& call, const void* x, void* values, int64_t* indices,
                 const std::function<void*(size_t)>& scratch);

}  // namespace kiln::cuda
