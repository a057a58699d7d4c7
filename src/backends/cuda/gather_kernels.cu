// gather, scatter_add, scatter_reduce, index_select and one_hot on CUDA: a
// thread per index element (per output element for index_select) in a
// grid-stride loop; the scatters combine atomically, since an index may
// repeat.
#include <type_traits>

#include "backends/cuda/gather_launch.h"
#include "backends/cuda/kernel_launch.h"

namespace kiln::cuda {
namespace {

// Index element p's offset in the indexed tensor (the axis's coordinate left
// out) and, with `src` strides, in the source.
__device__ void index_offsets(const GatherCall& c, int64_t p, const int64_t* src_strides, int64_t* off,
                              int64_t* src_off) {
  *off = 0;
  *src_off = 0;
  for (int d = c.rank - 1; d >= 0; --d) {
    const int64_t i = p % c.index_shape[d];
    p /= c.index_shape[d];
    if (d != c.axis) *off += i * c.strides[d];
    if (src_strides) *src_off += i * src_strides[d];
  }
}

// The coordinate an index names (negative ones count from the end), or -1.
__device__ int64_t coordinate(int64_t k, int64_t size) {
  if (k < -size || k >= size) return -1;
  return k < 0 ? k + size : k;
}

int64_t count_of(const GatherCall& c) {
  int64_t n = 1;
  for (int d = 0; d < c.rank; ++d) n *= c.index_shape[d];
  return n;
}

template <typename S>
__global__ void gather_kernel(GatherCall c, int64_t count, const S* x, const int64_t* index, S* y) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < count; p += step) {
    int64_t off = 0, unused = 0;
    index_offsets(c, p, nullptr, &off, &unused);
    const int64_t k = coordinate(index[p], c.axis_size);
    if (k < 0) {
      report_bad_index(c.error, IndexKind::Gather, index[p], p, c.axis_size);
      y[p] = S{};
      continue;
    }
    y[p] = x[off + k * c.strides[c.axis]];
  }
}

__device__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ void atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ void atomic_add(int32_t* p, int32_t v) { atomicAdd(p, v); }
__device__ void atomic_add(int64_t* p, int64_t v) {  // two's complement: the unsigned sum is the signed one
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// *p = f(*p, v) atomically, by compare-and-swap on the word that holds it.
template <typename S, typename F>
__device__ void atomic_combine(S* p, S v, F f) {
  using Word = std::conditional_t<sizeof(S) == 8, unsigned long long, unsigned int>;
  static_assert(sizeof(S) == sizeof(Word), "4- and 8-byte elements");
  Word* word = reinterpret_cast<Word*>(p);
  Word seen = *word, expected;
  do {
    expected = seen;
    S now;
    memcpy(&now, &expected, sizeof(S));
    const S next = f(now, v);
    Word desired;
    memcpy(&desired, &next, sizeof(S));
    seen = atomicCAS(word, expected, desired);
  } while (seen != expected);
}

template <typename S, ScatterReduce kHow>
__global__ void scatter_kernel(GatherCall c, int64_t count, const S* src, const int64_t* index, S* y) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < count; p += step) {
    int64_t off = 0, src_off = 0;
    index_offsets(c, p, c.src_strides, &off, &src_off);
    const int64_t k = coordinate(index[p], c.axis_size);
    if (k < 0) {
      report_bad_index(c.error, IndexKind::Scatter, index[p], p, c.axis_size);
      continue;
    }
    S* to = y + off + k * c.strides[c.axis];
    if constexpr (kHow == ScatterReduce::Add) {
      atomic_add(to, src[src_off]);
    } else {
      atomic_combine(to, src[src_off], [](S cur, S v) -> S {
        if (kHow == ScatterReduce::Prod) return cur * v;
        if (kHow == ScatterReduce::Max) return (v > cur || v != v) ? v : cur;
        return (v < cur || v != v) ? v : cur;
      });
    }
  }
}

template <typename S>
__global__ void index_select_kernel(SelectCall c, const S* x, const int64_t* index, S* y) {
  const int64_t total = c.outer * c.m * c.inner, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t i = e % c.inner, j = e / c.inner % c.m, o = e / (c.inner * c.m);
    const int64_t r = coordinate(index[j], c.n);
    if (r < 0) {
      if (o == 0 && i == 0) report_bad_index(c.error, IndexKind::IndexSelect, index[j], j, c.n);
      y[e] = S{};
      continue;
    }
    y[e] = x[(o * c.n + r) * c.inner + i];
  }
}

__global__ void one_hot_kernel(const int64_t* index, int64_t count, int64_t classes, int64_t* y, IndexError* error) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < count; p += step) {
    const int64_t k = index[p];
    if (k < 0 || k >= classes)
      report_bad_index(error, IndexKind::OneHot, k, p, classes);
    else
      y[p * classes + k] = 1;
  }
}

}  // namespace

void launch_gather(const GatherCall& call, const void* x, const int64_t* index, void* y) {
  const int64_t count = count_of(call);
  if (count == 0) return;
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    gather_kernel<S><<<blocks_for(count), kThreads, 0, stream_of(call.stream)>>>(call, count, static_cast<const S*>(x),
                                                                                 index, static_cast<S*>(y));
  });
  check_launch("gather");
}

void launch_scatter(const GatherCall& call, ScatterReduce how, const void* src, const int64_t* index, void* y) {
  const int64_t count = count_of(call);
  if (count == 0) return;
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    auto launch = [&](auto kernel) {
      kernel<<<blocks_for(count), kThreads, 0, stream_of(call.stream)>>>(call, count, static_cast<const S*>(src), index,
                                                                         static_cast<S*>(y));
    };
    if constexpr (std::is_same_v<S, bool> || std::is_same_v<S, uint8_t> || std::is_same_v<S, int8_t>) {
      KILN_FAIL("CUDA scatters: floating types, int32 and int64");
    } else if (how == ScatterReduce::Add) {
      launch(scatter_kernel<S, ScatterReduce::Add>);
    } else if constexpr (sizeof(S) < 4) {
      KILN_FAIL("CUDA scatter_reduce: float32, float64, int32 and int64");
    } else if (how == ScatterReduce::Prod) {
      launch(scatter_kernel<S, ScatterReduce::Prod>);
    } else if (how == ScatterReduce::Max) {
      launch(scatter_kernel<S, ScatterReduce::Max>);
    } else {
      launch(scatter_kernel<S, ScatterReduce::Min>);
    }
  });
  check_launch(how == ScatterReduce::Add ? "scatter_add" : "scatter_reduce");
}

void launch_index_select(const SelectCall& call, const void* x, const int64_t* index, void* y) {
  const int64_t total = call.outer * call.m * call.inner;
  if (total == 0) return;
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    index_select_kernel<S><<<blocks_for(total), kThreads, 0, stream_of(call.stream)>>>(call, static_cast<const S*>(x),
                                                                                       index, static_cast<S*>(y));
  });
  check_launch("index_select");
}

void launch_one_hot(const int64_t* index, int64_t count, int64_t classes, int64_t* y, IndexError* error, void* stream) {
  zero(y, static_cast<size_t>(count * classes) * sizeof(int64_t), stream);
  if (count == 0) return;
  one_hot_kernel<<<blocks_for(count), kThreads, 0, stream_of(stream)>>>(index, count, classes, y, error);
  check_launch("one_hot");
}

}  // namespace kiln::cuda
