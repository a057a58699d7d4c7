// Kernels of every dtype: casts, comparisons, where, tril/triu, the
// finiteness check, fills and padding. One thread per output element in a grid-stride loop, operands
// addressed through a MapGeometry as the formulas' kernels do.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/convert_launch.h"
#include "backends/cuda/kernel_launch.h"

namespace kiln::cuda {
namespace {

// The grid-stride loop over a geometry's elements: body(i, offsets).
template <typename Body>
__device__ void for_each_mapped(const MapGeometry& g, Body body) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.numel; i += step) {
    int64_t off[MapGeometry::kMaxOperands] = {i, i, i, i};
    if (!g.flat) map_offsets(g, i, off);
    body(i, off);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(MapGeometry g, To* y, const From* x) {
  using C = typename Stored<To>::C;
  for_each_mapped(g, [&](int64_t, const int64_t* off) {
    Stored<To>::store(y + off[0], static_cast<C>(Stored<From>::load(x + off[1])));
  });
}

template <typename S>
__global__ void compare_kernel(MapGeometry g, Comparison op, bool* y, const S* a, const S* b) {
  for_each_mapped(g, [&](int64_t, const int64_t* off) {
    const auto u = Stored<S>::load(a + off[1]);
    const auto v = Stored<S>::load(b + off[2]);
    bool r = false;
    switch (op) {
      case Comparison::Eq:
        r = u == v;
        break;
      case Comparison::Ne:
        r = u != v;
        break;
      case Comparison::Lt:
        r = u < v;
        break;
      case Comparison::Le:
        r = u <= v;
        break;
      case Comparison::Gt:
        r = u > v;
        break;
      case Comparison::Ge:
        r = u >= v;
        break;
    }
    y[off[0]] = r;
  });
}

template <typename S>
__global__ void where_kernel(MapGeometry g, S* y, const bool* cond, const S* a, const S* b) {
  for_each_mapped(g, [&](int64_t, const int64_t* off) { y[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]]; });
}

// y is dense, so element i's row and column follow from i.
template <typename S>
__global__ void triangle_kernel(MapGeometry g, S* y, const S* x, int64_t rows, int64_t cols, int64_t diagonal,
                                bool lower) {
  for_each_mapped(g, [&](int64_t i, const int64_t* off) {
    const int64_t col = i % cols, row = (i / cols) % rows;
    const bool keep = lower ? col - row <= diagonal : col - row >= diagonal;
    y[i] = keep ? x[off[1]] : S(0);
  });
}

template <typename S>
__global__ void non_finite_kernel(MapGeometry g, const S* x, bool* flag) {
  for_each_mapped(g, [&](int64_t, const int64_t* off) {
    if (!isfinite(Stored<S>::load(x + off[0]))) *flag = false;  // (every writer writes the same)
  });
}

template <typename S>
__global__ void fill_kernel(S* y, int64_t n, double value) {
  using C = typename Stored<S>::C;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    Stored<S>::store(y + i, static_cast<C>(value));
}

// The index along an axis of `size` that padded position p reads, or -1
// (constant mode's fill), as the CPU's pad_source.
__device__ int64_t pad_source(int64_t p, int64_t before, int64_t size, PadMode mode) {
  const int64_t j = p - before;
  if (j >= 0 && j < size) return j;
  switch (mode) {
    case PadMode::Constant:
      return -1;
    case PadMode::Reflect:
      return j < 0 ? -j : 2 * (size - 1) - j;
    case PadMode::Replicate:
      return j < 0 ? 0 : size - 1;
    case PadMode::Circular:
      return ((j % size) + size) % size;
  }
  return -1;
}

// The dense offset in x that padded position i reads, or -1.
__device__ int64_t pad_read(const PadCall& c, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int d = c.rank - 1; d >= 0; --d) {
    const int64_t s = pad_source(i % c.padded[d], c.before[d], c.shape[d], c.mode);
    i /= c.padded[d];
    if (s < 0) return -1;
    off += s * stride;
    stride *= c.shape[d];
  }
  return off;
}

int64_t padded_numel(const PadCall& c) {
  int64_t n = 1;
  for (int d = 0; d < c.rank; ++d) n *= c.padded[d];
  return n;
}
int64_t unpadded_numel(const PadCall& c) {
  int64_t n = 1;
  for (int d = 0; d < c.rank; ++d) n *= c.shape[d];
  return n;
}

template <typename S>
__global__ void pad_kernel(PadCall c, int64_t n, const S* x, S* y) {
  using C = typename Stored<S>::C;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t s = pad_read(c, i);
    if (s < 0)
      Stored<S>::store(y + i, static_cast<C>(c.value));
    else
      y[i] = x[s];
  }
}

template <typename S>
__global__ void pad_backward_kernel(PadCall c, int64_t n, const S* gy, S* gx) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t s = pad_read(c, i);
    if (s < 0) continue;
    if constexpr (sizeof(S) >= 4) {
      if (c.mode != PadMode::Constant) {
        atomicAdd(gx + s, gy[i]);  // (positions that wrap or mirror read one element)
        continue;
      }
    }
    gx[s] = gy[i];  // constant mode: one position per element
  }
}

}  // namespace

void launch_cast(const MapCall& call, AnyDType from, AnyDType to) {
  if (call.geometry.numel == 0) return;
  with_any(from, [&](auto f) {
    with_any(to, [&](auto t) {
      using From = decltype(f);
      using To = decltype(t);
      cast_kernel<From, To><<<blocks_for(call.geometry.numel), kThreads, 0, stream_of(call.stream)>>>(
          call.geometry, static_cast<To*>(call.out), static_cast<const From*>(call.in[0]));
    });
  });
  check_launch("cast");
}

void launch_compare(const MapCall& call, AnyDType operands, Comparison op) {
  if (call.geometry.numel == 0) return;
  with_any(operands, [&](auto s) {
    using S = decltype(s);
    compare_kernel<S><<<blocks_for(call.geometry.numel), kThreads, 0, stream_of(call.stream)>>>(
        call.geometry, op, static_cast<bool*>(call.out), static_cast<const S*>(call.in[0]),
        static_cast<const S*>(call.in[1]));
  });
  check_launch("comparison");
}

void launch_where(const MapCall& call, AnyDType dtype) {
  if (call.geometry.numel == 0) return;
  with_any(dtype, [&](auto s) {
    using S = decltype(s);
    where_kernel<S><<<blocks_for(call.geometry.numel), kThreads, 0, stream_of(call.stream)>>>(
        call.geometry, static_cast<S*>(call.out), static_cast<const bool*>(call.in[0]),
        static_cast<const S*>(call.in[1]), static_cast<const S*>(call.in[2]));
  });
  check_launch("where");
}

void launch_triangle(const MapCall& call, AnyDType dtype, int64_t rows, int64_t cols, int64_t diagonal, bool lower) {
  if (call.geometry.numel == 0) return;
  with_any(dtype, [&](auto s) {
    using S = decltype(s);
    triangle_kernel<S><<<blocks_for(call.geometry.numel), kThreads, 0, stream_of(call.stream)>>>(
        call.geometry, static_cast<S*>(call.out), static_cast<const S*>(call.in[0]), rows, cols, diagonal, lower);
  });
  check_launch(lower ? "tril" : "triu");
}

void launch_clear_if_non_finite(const MapGeometry& g, AnyDType dtype, const void* x, bool* flag, void* stream) {
  if (g.numel == 0) return;
  with_any(dtype, [&](auto s) {
    using S = decltype(s);
    if constexpr (std::is_floating_point_v<typename Stored<S>::C>)
      non_finite_kernel<S><<<blocks_for(g.numel), kThreads, 0, stream_of(stream)>>>(g, static_cast<const S*>(x), flag);
  });
  check_launch("all_finite");
}

void launch_fill(void* y, int64_t n, AnyDType dtype, double value, void* stream) {
  if (n == 0) return;
  with_any(dtype, [&](auto s) {
    using S = decltype(s);
    fill_kernel<S><<<blocks_for(n), kThreads, 0, stream_of(stream)>>>(static_cast<S*>(y), n, value);
  });
  check_launch("fill");
}

void launch_pad(const PadCall& call, const void* x, void* y) {
  const int64_t n = padded_numel(call);
  if (n == 0) return;
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    pad_kernel<S>
        <<<blocks_for(n), kThreads, 0, stream_of(call.stream)>>>(call, n, static_cast<const S*>(x), static_cast<S*>(y));
  });
  check_launch("pad");
}

void launch_pad_backward(const PadCall& call, const void* grad_y, void* grad_x) {
  KILN_CHECK(call.dtype == AnyDType::Float32 || call.dtype == AnyDType::Float64 || call.dtype == AnyDType::Float16 ||
                 call.dtype == AnyDType::BFloat16,
             "CUDA pad_backward: floating dtypes");
  const size_t element = call.dtype == AnyDType::Float64 ? 8 : call.dtype == AnyDType::Float32 ? 4 : 2;
  KILN_CHECK(call.mode == PadMode::Constant || element >= 4,
             "CUDA pad_backward adds reflected, replicated and wrapped gradients in float32 or float64 only");
  zero(grad_x, static_cast<size_t>(unpadded_numel(call)) * element, call.stream);
  const int64_t n = padded_numel(call);
  if (n == 0) return;
  const MapDType floating = call.dtype == AnyDType::Float64    ? MapDType::Float64
                            : call.dtype == AnyDType::Float16  ? MapDType::Float16
                            : call.dtype == AnyDType::BFloat16 ? MapDType::BFloat16
                                                               : MapDType::Float32;
  with_any_float(floating, [&](auto s) {
    using S = decltype(s);
    pad_backward_kernel<S><<<blocks_for(n), kThreads, 0, stream_of(call.stream)>>>(
        call, n, static_cast<const S*>(grad_y), static_cast<S*>(grad_x));
  });
  check_launch("pad_backward");
}

}  // namespace kiln::cuda
