// topk on CUDA: the lines gathered contiguous with their positions, sorted
// as (value, position) pairs by CUB's segmented radix sort, and the first k
// of each line written out.
#include <climits>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <type_traits>

#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/sort_launch.h"

namespace kiln::cuda {
namespace {

// keys[line][j] = x at (o, j, i) for line (o, i); positions j; each line's start.
template <typename S>
__global__ void lines_kernel(TopkCall c, const S* x, S* keys, int64_t* positions, int* starts) {
  const int64_t lines = c.outer * c.inner, n = lines * c.len, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    const int64_t line = e / c.len, j = e % c.len, o = line / c.inner, i = line % c.inner;
    keys[e] = x[(o * c.len + j) * c.inner + i];
    positions[e] = j;
    if (j == 0) starts[line] = static_cast<int>(e);
    if (e == n - 1) starts[lines] = static_cast<int>(n);
  }
}

template <typename S>
__global__ void first_k_kernel(TopkCall c, const S* sorted, const int64_t* positions, S* values, int64_t* indices) {
  const int64_t total = c.outer * c.k * c.inner, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t i = e % c.inner, j = e / c.inner % c.k, o = e / (c.inner * c.k);
    const int64_t from = (o * c.inner + i) * c.len + j;
    values[e] = sorted[from];
    indices[e] = positions[from];
  }
}

template <typename S>
void topk_as(const TopkCall& c, const S* x, S* values, int64_t* indices, const std::function<void*(size_t)>& scratch) {
  const int64_t lines = c.outer * c.inner, n = lines * c.len;
  KILN_CHECK(n < INT_MAX, "CUDA topk sorts fewer than 2^31 elements at once, not ", n);
  const cudaStream_t stream = stream_of(c.stream);
  S* keys = static_cast<S*>(scratch(static_cast<size_t>(n) * sizeof(S)));
  S* sorted = static_cast<S*>(scratch(static_cast<size_t>(n) * sizeof(S)));
  auto* positions = static_cast<int64_t*>(scratch(static_cast<size_t>(n) * sizeof(int64_t)));
  auto* sorted_positions = static_cast<int64_t*>(scratch(static_cast<size_t>(n) * sizeof(int64_t)));
  int* starts = static_cast<int*>(scratch(static_cast<size_t>(lines + 1) * sizeof(int)));
  lines_kernel<S><<<blocks_for(n), kThreads, 0, stream>>>(c, x, keys, positions, starts);
  check_launch("topk");
  auto sort = [&](void* temp, size_t& bytes) {
    const int items = static_cast<int>(n), segments = static_cast<int>(lines);
    return c.largest
               ? cub::DeviceSegmentedRadixSort::SortPairsDescending(temp, bytes, keys, sorted, positions,
                                                                    sorted_positions, items, segments, starts,
                                                                    starts + 1, 0, sizeof(S) * 8, stream)
               : cub::DeviceSegmentedRadixSort::SortPairs(temp, bytes, keys, sorted, positions, sorted_positions, items,
                                                          segments, starts, starts + 1, 0, sizeof(S) * 8, stream);
  };
  size_t bytes = 0;
  if (sort(nullptr, bytes) != cudaSuccess) KILN_FAIL("CUDA topk: CUB could not size the sort");
  void* temp = scratch(bytes);
  if (sort(temp, bytes) != cudaSuccess) KILN_FAIL("CUDA topk: CUB's segmented sort did not launch");
  first_k_kernel<S>
      <<<blocks_for(c.outer * c.k * c.inner), kThreads, 0, stream>>>(c, sorted, sorted_positions, values, indices);
  check_launch("topk");
}

}  // namespace

void launch_topk(const TopkCall& call, const void* x, void* values, int64_t* indices,
                 const std::function<void*(size_t)>& scratch) {
  if (call.outer * call.inner * call.len == 0 || call.k == 0) return;
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    if constexpr (std::is_same_v<S, bool>)
      KILN_FAIL("CUDA topk takes numbers, not bool");
    else
      topk_as<S>(call, static_cast<const S*>(x), static_cast<S*>(values), indices, scratch);
  });
}

}  // namespace kiln::cuda
