// The fused SGD, Adam (AdamW) and RMSProp updates on CUDA, in the
// parameter's type as the CPU's, skipped whole when the step's loss is not
// finite.
#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

// Whether the step's loss (the guard: float32 or float64, or none) skips it.
__device__ bool skipped(const void* loss, bool f64) {
  if (!loss) return false;
  const double l = f64 ? *static_cast<const double*>(loss) : *static_cast<const float*>(loss);
  return !isfinite(l);
}

template <typename S>
__global__ void sgd_kernel(SgdCall c) {
  if (skipped(c.loss, c.loss_f64)) return;
  S* p = static_cast<S*>(c.param);
  const S* g = static_cast<const S*>(c.grad);
  S* buf = static_cast<S*>(c.buffer);
  const S neg_lr = static_cast<S>(-*c.lr), m = static_cast<S>(c.momentum), wd = static_cast<S>(c.weight_decay);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step) {
    const S d = g[i] + p[i] * wd;
    if (!buf) {
      p[i] = p[i] + d * neg_lr;
      continue;
    }
    const S nb = buf[i] * m + d;
    buf[i] = nb;
    p[i] = p[i] + (c.nesterov ? d + nb * m : nb) * neg_lr;
  }
}

template <typename S>
__global__ void adam_kernel(AdamCall c) {
  if (skipped(c.loss, c.loss_f64)) return;
  S* p = static_cast<S*>(c.param);
  const S* g = static_cast<const S*>(c.grad);
  S* m = static_cast<S*>(c.exp_avg);
  S* v = static_cast<S*>(c.exp_avg_sq);
  const double lr = *c.lr, step = *c.step;
  const S b1 = static_cast<S>(c.beta1), b2 = static_cast<S>(c.beta2), one_b1 = static_cast<S>(1 - c.beta1),
          one_b2 = static_cast<S>(1 - c.beta2), eps = static_cast<S>(c.eps);
  const S bc2 = static_cast<S>(1 - pow(c.beta2, step));
  const S step_size = static_cast<S>(-lr / (1 - pow(c.beta1, step)));
  const S decay = static_cast<S>(1 - lr * c.weight_decay), l2 = static_cast<S>(c.weight_decay);
  const bool decays = c.weight_decay != 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += stride) {
    if (c.decoupled && decays) p[i] = p[i] * decay;
    const S d = (!c.decoupled && decays) ? g[i] + p[i] * l2 : g[i];
    m[i] = m[i] * b1 + d * one_b1;
    v[i] = v[i] * b2 + d * d * one_b2;
    p[i] = p[i] + m[i] / (sqrt(v[i] / bc2) + eps) * step_size;
  }
}

template <typename S>
__global__ void rmsprop_kernel(RmsPropCall c) {
  if (skipped(c.loss, c.loss_f64)) return;
  S* p = static_cast<S*>(c.param);
  const S* g = static_cast<const S*>(c.grad);
  S* sq = static_cast<S*>(c.square_avg);
  S* buf = static_cast<S*>(c.buffer);
  const S neg_lr = static_cast<S>(-*c.lr), al = static_cast<S>(c.alpha), one_al = static_cast<S>(1 - c.alpha);
  const S eps = static_cast<S>(c.eps), m = static_cast<S>(c.momentum), wd = static_cast<S>(c.weight_decay);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step) {
    const S d = wd != S(0) ? g[i] + p[i] * wd : g[i];
    sq[i] = sq[i] * al + d * d * one_al;
    S u = d / (sqrt(sq[i]) + eps);
    if (buf) {
      buf[i] = buf[i] * m + u;
      u = buf[i];
    }
    p[i] = p[i] + u * neg_lr;
  }
}

}  // namespace

void launch_sgd_update(const SgdCall& call) {
  if (call.n == 0) return;
  with_float_or_double(call.dtype, "sgd_update", [&](auto s) {
    sgd_kernel<decltype(s)><<<blocks_for(call.n), kThreads, 0, stream_of(call.stream)>>>(call);
  });
  check_launch("sgd_update");
}

void launch_adam_update(const AdamCall& call) {
  if (call.n == 0) return;
  with_float_or_double(call.dtype, "adam_update", [&](auto s) {
    adam_kernel<decltype(s)><<<blocks_for(call.n), kThreads, 0, stream_of(call.stream)>>>(call);
  });
  check_launch("adam_update");
}

void launch_rmsprop_update(const RmsPropCall& call) {
  if (call.n == 0) return;
  with_float_or_double(call.dtype, "rmsprop_update", [&](auto s) {
    rmsprop_kernel<decltype(s)><<<blocks_for(call.n), kThreads, 0, stream_of(call.stream)>>>(call);
  });
  check_launch("rmsprop_update");
}

}  // namespace kiln::cuda
