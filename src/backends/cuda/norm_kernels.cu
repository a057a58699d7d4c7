// Layer and group norm (a block per row), batch norm (a block per channel)
// and dropout (philox's masks, the CPU's for one seed) on CUDA, with their
// backward ops.
#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/training_launch.h"
#include "core/philox.h"

namespace kiln::cuda {
namespace {

template <typename S>
__global__ void layer_norm_kernel(LayerNormCall c, const S* x, S* y, S* mean_out, S* rstd_out) {
  const S* w = static_cast<const S*>(c.weight);
  const S* b = static_cast<const S*>(c.bias);
  for (int64_t r = blockIdx.x; r < c.rows; r += gridDim.x) {
    const S* row = x + r * c.m;
    double s = 0;
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) s += row[k];
    const double mean = block_sum(s) / static_cast<double>(c.m);
    double ss = 0;
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) ss += (row[k] - mean) * (row[k] - mean);
    const double rstd = 1.0 / sqrt(block_sum(ss) / static_cast<double>(c.m) + c.eps);
    const S mu = static_cast<S>(mean), rs = static_cast<S>(rstd);
    const bool per_element = c.affine_period == 0 || (c.affine_period == c.m && c.affine_div == 1);
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) {
      S v = (row[k] - mu) * rs;
      const int64_t a = per_element ? k : ((r % c.row_period) * c.m + k) % c.affine_period / c.affine_div;
      if (w) v *= w[a];
      if (b) v += b[a];
      y[r * c.m + k] = v;
    }
    if (threadIdx.x == 0) {
      mean_out[r] = mu;
      rstd_out[r] = rs;
    }
  }
}

// Per row: gx = rstd (gh - mean(gh) - xhat mean(gh xhat)), gh = g w.
template <typename S>
__global__ void layer_norm_input_grad_kernel(LayerNormCall c, const S* g, const S* x, const S* mean, const S* rstd,
                                             S* gx) {
  const S* w = static_cast<const S*>(c.weight);
  for (int64_t r = blockIdx.x; r < c.rows; r += gridDim.x) {
    const S* gr = g + r * c.m;
    const S* xr = x + r * c.m;
    const S mu = mean[r], rs = rstd[r];
    S s1 = 0, s2 = 0;
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) {
      const S gh = w ? gr[k] * w[k] : gr[k];
      s1 += gh;
      s2 += gh * ((xr[k] - mu) * rs);
    }
    const S k1 = block_sum(s1) / static_cast<S>(c.m), k2 = block_sum(s2) / static_cast<S>(c.m);
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) {
      const S gh = w ? gr[k] * w[k] : gr[k];
      gx[r * c.m + k] = rs * (gh - k1 - (xr[k] - mu) * rs * k2);
    }
  }
}

// Per column j: gw = sum over rows of g xhat, gb = sum of g (in double).
template <typename S>
__global__ void layer_norm_param_grad_kernel(LayerNormCall c, const S* g, const S* x, const S* mean, const S* rstd,
                                             S* gw, S* gb) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < c.m; j += step) {
    double aw = 0, ab = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      const S gv = g[r * c.m + j];
      aw += static_cast<double>(gv * ((x[r * c.m + j] - mean[r]) * rstd[r]));
      ab += static_cast<double>(gv);
    }
    gw[j] = static_cast<S>(aw);
    gb[j] = static_cast<S>(ab);
  }
}

// Element j of channel ch: image j / inner, position j % inner.
__device__ inline int64_t channel_at(const BatchNormCall& c, int64_t ch, int64_t j) {
  return (j / c.inner * c.c + ch) * c.inner + j % c.inner;
}

template <typename S>
__global__ void batch_norm_kernel(BatchNormCall c, const S* x, S* y, S* mean_out, S* rstd_out) {
  const S* w = static_cast<const S*>(c.weight);
  const S* b = static_cast<const S*>(c.bias);
  S* rm = static_cast<S*>(c.running_mean);
  S* rv = static_cast<S*>(c.running_var);
  const int64_t count = c.n * c.inner;
  for (int64_t ch = blockIdx.x; ch < c.c; ch += gridDim.x) {
    double mean, var;
    if (c.training) {
      double s = 0;
      for (int64_t j = threadIdx.x; j < count; j += blockDim.x) s += x[channel_at(c, ch, j)];
      mean = block_sum(s) / static_cast<double>(count);
      double ss = 0;
      for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
        const double d = x[channel_at(c, ch, j)] - mean;
        ss += d * d;
      }
      ss = block_sum(ss);
      var = ss / static_cast<double>(count);
      if (rm && rv && threadIdx.x == 0) {
        S& m = rm[ch * c.running_stride[0]];
        S& v = rv[ch * c.running_stride[1]];
        m = static_cast<S>((1 - c.momentum) * m + c.momentum * mean);
        v = static_cast<S>((1 - c.momentum) * v + c.momentum * ss / static_cast<double>(count - 1));
      }
    } else {
      mean = rm[ch * c.running_stride[0]];
      var = rv[ch * c.running_stride[1]];
    }
    const double rstd = 1.0 / sqrt(var + c.eps), scale = w ? static_cast<double>(w[ch]) : 1.0;
    if (threadIdx.x == 0) {
      mean_out[ch] = static_cast<S>(mean);
      rstd_out[ch] = static_cast<S>(rstd);
    }
    const S k = static_cast<S>(rstd * scale),
            shift = static_cast<S>((b ? static_cast<double>(b[ch]) : 0.0) - mean * rstd * scale);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(c, ch, j);
      y[at] = x[at] * k + shift;
    }
  }
}

// gb = sum g, gw = rstd sum g (x - mean); gx = w rstd (g - mean(g) - xhat
// mean(g xhat)) in training, w rstd g in eval.
template <typename S>
__global__ void batch_norm_backward_kernel(BatchNormCall c, const S* g, const S* x, const S* mean, const S* rstd, S* gx,
                                           S* gw, S* gb) {
  const S* w = static_cast<const S*>(c.weight);
  const int64_t count = c.n * c.inner;
  for (int64_t ch = blockIdx.x; ch < c.c; ch += gridDim.x) {
    const double mu = mean[ch], rs = rstd[ch], scale = w ? static_cast<double>(w[ch]) : 1.0;
    double sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(c, ch, j);
      sg += g[at];
      sgx += static_cast<double>(g[at]) * (static_cast<double>(x[at]) - mu);
    }
    sg = block_sum(sg);
    sgx = block_sum(sgx);
    if (threadIdx.x == 0) {
      gb[ch] = static_cast<S>(sg);
      gw[ch] = static_cast<S>(sgx * rs);
    }
    const S k1 = static_cast<S>(scale * rs);
    const S k2 = static_cast<S>(c.training ? sg / static_cast<double>(count) : 0.0);
    const S k3 = static_cast<S>(c.training ? rs * rs * sgx / static_cast<double>(count) : 0.0);
    const S m = static_cast<S>(mu);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(c, ch, j);
      gx[at] = k1 * (g[at] - k2 - (x[at] - m) * k3);
    }
  }
}

template <typename S>
__global__ void dropout_kernel(DropoutCall c, const S* x, S* y, S* mask) {
  const S scale = static_cast<S>(1.0 / (1.0 - c.p));
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uint64_t seed = c.state ? c.state[0] : c.seed, first = c.state ? c.state[1] + c.relative : c.first;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step) {
    const S m = philox::keeps(seed, first, static_cast<uint64_t>(i), 1.0 - c.p) ? scale : S(0);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

}  // namespace

void launch_layer_norm(const LayerNormCall& call, const void* x, void* y, void* mean, void* rstd) {
  if (call.rows == 0 || call.m == 0) return;
  with_float_or_double(call.dtype, "layer_norm", [&](auto s) {
    using S = decltype(s);
    layer_norm_kernel<S><<<blocks(call.rows), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(x), static_cast<S*>(y), static_cast<S*>(mean), static_cast<S*>(rstd));
  });
  check_launch("layer_norm");
}

void launch_layer_norm_backward(const LayerNormCall& call, const void* grad, const void* x, const void* mean,
                                const void* rstd, void* grad_x, void* grad_weight, void* grad_bias) {
  if (call.rows == 0 || call.m == 0) return;
  with_float_or_double(call.dtype, "layer_norm_backward", [&](auto s) {
    using S = decltype(s);
    const auto g = static_cast<const S*>(grad), xs = static_cast<const S*>(x), mu = static_cast<const S*>(mean),
               rs = static_cast<const S*>(rstd);
    layer_norm_input_grad_kernel<S>
        <<<blocks(call.rows), kThreads, 0, stream_of(call.stream)>>>(call, g, xs, mu, rs, static_cast<S*>(grad_x));
    layer_norm_param_grad_kernel<S><<<blocks_for(call.m), kThreads, 0, stream_of(call.stream)>>>(
        call, g, xs, mu, rs, static_cast<S*>(grad_weight), static_cast<S*>(grad_bias));
  });
  check_launch("layer_norm_backward");
}

void launch_batch_norm(const BatchNormCall& call, const void* x, void* y, void* mean, void* rstd) {
  if (call.c == 0) return;
  with_float_or_double(call.dtype, "batch_norm", [&](auto s) {
    using S = decltype(s);
    batch_norm_kernel<S><<<blocks(call.c), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(x), static_cast<S*>(y), static_cast<S*>(mean), static_cast<S*>(rstd));
  });
  check_launch("batch_norm");
}

void launch_batch_norm_backward(const BatchNormCall& call, const void* grad, const void* x, const void* mean,
                                const void* rstd, void* grad_x, void* grad_weight, void* grad_bias) {
  if (call.c == 0) return;
  with_float_or_double(call.dtype, "batch_norm_backward", [&](auto s) {
    using S = decltype(s);
    batch_norm_backward_kernel<S><<<blocks(call.c), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(grad), static_cast<const S*>(x), static_cast<const S*>(mean),
        static_cast<const S*>(rstd), static_cast<S*>(grad_x), static_cast<S*>(grad_weight), static_cast<S*>(grad_bias));
  });
  check_launch("batch_norm_backward");
}

void launch_dropout(const DropoutCall& call, const void* x, void* y, void* mask) {
  if (call.n == 0) return;
  with_float_or_double(call.dtype, "dropout", [&](auto s) {
    using S = decltype(s);
    dropout_kernel<S><<<blocks_for(call.n), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(x), static_cast<S*>(y), static_cast<S*>(mask));
  });
  check_launch("dropout");
}

}  // namespace kiln::cuda
