#pragma once
// The launches of the indexing kernels (gather_kernels.cu): gather and
// scatter_add along one axis, index_select, one_hot. Indices are int64; one
// out of range is reported through `error` (index_errors.h) and its element
// left zero (gather, index_select) or untouched. Plain values and C++17, as
// elementwise_launch.h.
#include <cstdint>

#include "backends/cuda/convert_launch.h"
#include "backends/cuda/index_errors.h"

namespace kiln::cuda {

struct GatherCall {
  static constexpr int kMaxRank = 8;
  AnyDType dtype = AnyDType::Float32;
  int rank = 0, axis = 0;
  int64_t index_shape[kMaxRank] = {};  // the index's shape: gather's output's, scatter's updates'
  int64_t strides[kMaxRank] = {};      // the indexed tensor's (gather: x; scatter: the output)
  int64_t src_strides[kMaxRank] = {};  // scatter's source, read at each index element's position
  int64_t axis_size = 0;
  IndexError* error = nullptr;
  void* stream = nullptr;
};
// y (dense, the index's shape)[p] = x at p with the axis's coordinate index[p].
void launch_gather(const GatherCall& call, const void* x, const int64_t* index, void* y);
// y (holding x) at p with the axis's coordinate index[p] combined with
// src[p], atomically: added (floating types, int32, int64), or as the CPU's
// scatter_reduce multiplied, or the maximum or minimum taken (a NaN wins) by
// compare-and-swap (float32, float64, int32, int64).
enum class ScatterReduce { Add, Prod, Max, Min };
void launch_scatter(const GatherCall& call, ScatterReduce how, const void* src, const int64_t* index, void* y);

// y [outer, m, inner] = x [outer, n, inner] at the m rows index names (x and y dense).
struct SelectCall {
  AnyDType dtype = AnyDType::Float32;
  int64_t outer = 1, n = 0, m = 0, inner = 1;
  IndexError* error = nullptr;
  void* stream = nullptr;
};
void launch_index_select(const SelectCall& call, const void* x, const int64_t* index, void* y);

// y [count, classes] int64, zeros but a 1 at each index's class.
void launch_one_hot(const int64_t* index, int64_t count, int64_t classes, int64_t* y, IndexError* error, void* stream);

}  // namespace kiln::cuda
