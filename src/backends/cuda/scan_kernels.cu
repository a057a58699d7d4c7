// cumsum, cumprod and cumprod's gradient on CUDA: a thread per line, each
// walking its line in order as the CPU's loop does.
#include <type_traits>

#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/scan_launch.h"

namespace kiln::cuda {
namespace {

// Line l's position p (in scan order) as an offset.
struct Line {
  int64_t base, inner, n;
  bool reverse;
  __device__ int64_t at(int64_t p) const { return base + (reverse ? n - 1 - p : p) * inner; }
};
__device__ Line line_of(const ScanCall& c, int64_t l) {
  return {l / c.inner * c.n * c.inner + l % c.inner, c.inner, c.n, c.reverse};
}

template <typename S>
__global__ void scan_kernel(ScanCall c, const S* x, S* y) {
  using T = Stored<S>;
  using C = typename T::C;
  const int64_t lines = c.outer * c.inner, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += step) {
    const Line line = line_of(c, l);
    C acc = c.product ? C(1) : C(0);
    for (int64_t p = 0; p < c.n; ++p) {
      const C v = T::load(x + line.at(p));
      acc = c.product ? static_cast<C>(acc * v) : static_cast<C>(acc + v);
      T::store(y + line.at(p), acc);
    }
  }
}

template <typename S>
__global__ void cumprod_backward_kernel(ScanCall c, const S* g, const S* x, S* gx) {
  using T = Stored<S>;
  using C = typename T::C;
  const int64_t lines = c.outer * c.inner, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += step) {
    const Line line = line_of(c, l);
    C s = 0;
    for (int64_t p = c.n - 1; p >= 0; --p) {  // gx holds S_k for now
      s = T::load(g + line.at(p)) + (p + 1 < c.n ? T::load(x + line.at(p + 1)) * s : C(0));
      T::store(gx + line.at(p), s);
    }
    C prefix = 1;
    for (int64_t p = 0; p < c.n; ++p) {
      const C sk = T::load(gx + line.at(p));
      T::store(gx + line.at(p), prefix * sk);
      prefix *= T::load(x + line.at(p));
    }
  }
}

}  // namespace

void launch_scan(const ScanCall& call, const void* x, void* y) {
  const int64_t lines = call.outer * call.inner;
  if (lines == 0 || call.n == 0) return;
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    if constexpr (std::is_same_v<S, bool>)
      KILN_FAIL("CUDA cumsum and cumprod take numbers, not bool");
    else
      scan_kernel<S><<<blocks_for(lines), kThreads, 0, stream_of(call.stream)>>>(call, static_cast<const S*>(x),
                                                                                 static_cast<S*>(y));
  });
  check_launch(call.product ? "cumprod" : "cumsum");
}

void launch_cumprod_backward(const ScanCall& call, const void* grad, const void* x, void* grad_x) {
  const int64_t lines = call.outer * call.inner;
  if (lines == 0 || call.n == 0) return;
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    if constexpr (!std::is_floating_point_v<typename Stored<S>::C>)
      KILN_FAIL("CUDA cumprod_backward: floating types");
    else
      cumprod_backward_kernel<S><<<blocks_for(lines), kThreads, 0, stream_of(call.stream)>>>(
          call, static_cast<const S*>(grad), static_cast<const S*>(x), static_cast<S*>(grad_x));
  });
  check_launch("cumprod_backward");
}

}  // namespace kiln::cuda
