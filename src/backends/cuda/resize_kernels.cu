// interpolate and its backward on CUDA: a thread per output pixel, gathering
// (or scattering, atomically) over its rows' and columns' taps.
#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/resize_launch.h"

namespace kiln::cuda {
namespace {

template <typename S>
__global__ void interpolate_kernel(InterpolateCall c, const S* x, S* y) {
  const int64_t total = c.planes * c.oh * c.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t plane = i / (c.oh * c.ow), oy = i / c.ow % c.oh, ox = i % c.ow;
    if (c.rows.outside[oy] || c.cols.outside[ox]) {
      y[i] = static_cast<S>(c.fill);
      continue;
    }
    const S* src = x + plane * c.h * c.w;
    double sum = 0;
    for (int64_t a = 0; a < c.rows.taps; ++a) {
      const int64_t r = oy * c.rows.taps + a;
      double across = 0;
      for (int64_t b = 0; b < c.cols.taps; ++b) {
        const int64_t k = ox * c.cols.taps + b;
        across += c.cols.weight[k] * static_cast<double>(src[c.rows.index[r] * c.w + c.cols.index[k]]);
      }
      sum += c.rows.weight[r] * across;
    }
    y[i] = static_cast<S>(sum);
  }
}

template <typename S>
__global__ void interpolate_backward_kernel(InterpolateCall c, const S* g, S* gx) {
  const int64_t total = c.planes * c.oh * c.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t plane = i / (c.oh * c.ow), oy = i / c.ow % c.oh, ox = i % c.ow;
    if (c.rows.outside[oy] || c.cols.outside[ox]) continue;
    S* dst = gx + plane * c.h * c.w;
    const double gv = static_cast<double>(g[i]);
    for (int64_t a = 0; a < c.rows.taps; ++a) {
      const int64_t r = oy * c.rows.taps + a;
      for (int64_t b = 0; b < c.cols.taps; ++b) {
        const int64_t k = ox * c.cols.taps + b;
        atomicAdd(dst + c.rows.index[r] * c.w + c.cols.index[k],
                  static_cast<S>(c.rows.weight[r] * c.cols.weight[k] * gv));
      }
    }
  }
}

}  // namespace

void launch_interpolate(const InterpolateCall& call, const void* x, void* y) {
  const int64_t total = call.planes * call.oh * call.ow;
  if (total == 0) return;
  with_float_or_double(call.dtype, "interpolate", [&](auto s) {
    using S = decltype(s);
    interpolate_kernel<S><<<blocks_for(total), kThreads, 0, stream_of(call.stream)>>>(call, static_cast<const S*>(x),
                                                                                      static_cast<S*>(y));
  });
  check_launch("interpolate");
}

void launch_interpolate_backward(const InterpolateCall& call, const void* grad_y, void* grad_x) {
  with_float_or_double(call.dtype, "interpolate_backward", [&](auto s) {
    using S = decltype(s);
    zero(grad_x, static_cast<size_t>(call.planes * call.h * call.w) * sizeof(S), call.stream);
    const int64_t total = call.planes * call.oh * call.ow;
    if (total == 0) return;
    interpolate_backward_kernel<S><<<blocks_for(total), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(grad_y), static_cast<S*>(grad_x));
    check_launch("interpolate_backward");
  });
}

}  // namespace kiln::cuda
