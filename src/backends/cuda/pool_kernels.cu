// Max pooling (values and the position of each maximum, as the CPU's),
// average pooling and adaptive average pooling, with their backward ops, on
// CUDA: a thread per output; the backward ops add into a zeroed gradient
// atomically.
#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

template <typename S>
__global__ void max_pool_kernel(PoolCall c, const S* x, S* y, int64_t* indices) {
  const int64_t total = c.planes * c.oh * c.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t plane = i / (c.oh * c.ow), oy = i / c.ow % c.oh, ox = i % c.ow;
    const S* src = x + plane * c.h * c.w;
    int64_t best = -1;
    typename Stored<S>::C value = -INFINITY;
    for (int64_t a = 0; a < c.kh; ++a) {
      const int64_t iy = oy * c.sh - c.ph + a * c.dh;
      if (iy < 0 || iy >= c.h) continue;
      for (int64_t b = 0; b < c.kw; ++b) {
        const int64_t ix = ox * c.sw - c.pw + b * c.dw;
        if (ix < 0 || ix >= c.w) continue;
        const auto v = Stored<S>::load(src + iy * c.w + ix);
        if (best < 0 || v > value || (v != v && value == value)) {
          value = v;
          best = iy * c.w + ix;
        }
      }
    }
    Stored<S>::store(y + i, value);
    indices[i] = best;
  }
}

template <typename S>
__global__ void max_pool_backward_kernel(PoolCall c, const S* g, const int64_t* indices, const S* mask, S* gx) {
  const int64_t per_plane = c.oh * c.ow, total = c.planes * per_plane;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t at = indices[i];
    if (at < 0) continue;
    const int64_t to = i / per_plane * c.h * c.w + at;
    if (mask && !(Stored<S>::load(mask + to) > 0)) continue;
    atomicAdd(gx + to, g[i]);  // (overlapping windows may share a maximum)
  }
}

// Output (plane, oy, ox)'s window: rows [y0, y1), columns [x0, x1), and
// the count an average divides by.
struct Window {
  int64_t y0, y1, x0, x1, count;
};
__device__ inline Window average_window(const PoolCall& c, int64_t oy, int64_t ox) {
  const int64_t y0 = oy * c.sh - c.ph, x0 = ox * c.sw - c.pw;
  const int64_t y1 = min(y0 + c.kh, c.h + c.ph), x1 = min(x0 + c.kw, c.w + c.pw);
  const int64_t padded = (y1 - y0) * (x1 - x0);
  Window w{max(y0, int64_t{0}), min(y1, c.h), max(x0, int64_t{0}), min(x1, c.w), 0};
  w.count = c.include_pad ? padded : (w.y1 - w.y0) * (w.x1 - w.x0);
  return w;
}
__device__ inline Window adaptive_window(const PoolCall& c, int64_t oy, int64_t ox) {
  Window w{oy * c.h / c.oh, ((oy + 1) * c.h + c.oh - 1) / c.oh, ox * c.w / c.ow, ((ox + 1) * c.w + c.ow - 1) / c.ow, 0};
  w.count = (w.y1 - w.y0) * (w.x1 - w.x0);
  return w;
}

// Average pooling over each output's window (adaptive or not): x to y, or
// (backward) the output's gradient x spread into the input's y, zeroed first.
template <typename S, bool kAdaptive>
__global__ void avg_pool_kernel(PoolCall c, const S* x, S* y, bool backward) {
  using C = typename Stored<S>::C;
  const int64_t total = c.planes * c.oh * c.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t plane = i / (c.oh * c.ow);
    const int64_t oy = i / c.ow % c.oh, ox = i % c.ow;
    const Window wd = kAdaptive ? adaptive_window(c, oy, ox) : average_window(c, oy, ox);
    if (wd.count <= 0) continue;
    const C count = static_cast<C>(wd.count);
    if (backward) {
      S share;
      Stored<S>::store(&share, Stored<S>::load(x + i) / count);
      for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
        for (int64_t ix = wd.x0; ix < wd.x1; ++ix) atomicAdd(y + plane * c.h * c.w + iy * c.w + ix, share);
      continue;
    }
    C acc = 0;
    for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
      for (int64_t ix = wd.x0; ix < wd.x1; ++ix) acc += Stored<S>::load(x + plane * c.h * c.w + iy * c.w + ix);
    Stored<S>::store(y + i, acc / count);
  }
}

}  // namespace

void launch_max_pool2d(const PoolCall& call, const void* x, void* y, int64_t* indices) {
  const int64_t total = call.planes * call.oh * call.ow;
  if (total == 0) return;
  with_any_float(call.dtype, [&](auto s) {
    using S = decltype(s);
    max_pool_kernel<S><<<blocks_for(total), kThreads, 0, stream_of(call.stream)>>>(call, static_cast<const S*>(x),
                                                                                   static_cast<S*>(y), indices);
  });
  check_launch("max_pool2d");
}

void launch_max_pool2d_backward(const PoolCall& call, const void* grad_y, const int64_t* indices, const void* mask,
                                void* grad_x) {
  if (call.planes * call.h * call.w == 0) return;
  with_any_float(call.dtype, [&](auto s) {
    using S = decltype(s);
    zero(grad_x, static_cast<size_t>(call.planes * call.h * call.w) * sizeof(S), call.stream);
    max_pool_backward_kernel<S><<<blocks_for(call.planes * call.oh * call.ow), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(grad_y), indices, static_cast<const S*>(mask), static_cast<S*>(grad_x));
  });
  check_launch("max_pool2d_backward");
}

// x to y, or (backward) the output's gradient to the input's.
template <bool kAdaptive>
static void avg_pool(const PoolCall& call, const void* in, void* out, bool backward, const char* op) {
  with_any_float(call.dtype, [&](auto s) {
    using S = decltype(s);
    if (backward) zero(out, static_cast<size_t>(call.planes * call.h * call.w) * sizeof(S), call.stream);
    const int64_t total = call.planes * call.oh * call.ow;
    if (total == 0) return;
    avg_pool_kernel<S, kAdaptive><<<blocks_for(total), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(in), static_cast<S*>(out), backward);
    check_launch(op);
  });
}

void launch_avg_pool2d(const PoolCall& call, const void* x, void* y) {
  avg_pool<false>(call, x, y, false, "avg_pool2d");
}
void launch_avg_pool2d_backward(const PoolCall& call, const void* grad_y, void* grad_x) {
  avg_pool<false>(call, grad_y, grad_x, true, "avg_pool2d_backward");
}
void launch_adaptive_avg_pool2d(const PoolCall& call, const void* x, void* y) {
  avg_pool<true>(call, x, y, false, "adaptive_avg_pool2d");
}
void launch_adaptive_avg_pool2d_backward(const PoolCall& call, const void* grad_y, void* grad_x) {
  avg_pool<true>(call, grad_y, grad_x, true, "adaptive_avg_pool2d_backward");
}

}  // namespace kiln::cuda
