// The fused SGD, Adam (AdamW) and RMSProp updates on CUDA, in the
// parameter's type as the CPU's, skipped whole when the step's loss is not
// finite; each also over a group's parameters in one launch.
#include <algorithm>

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

// SGD's step on element i, as the CPU's (buf: null without momentum).
template <typename S>
struct SgdMath {
  S neg_lr, m, wd;
  bool nesterov;
  __device__ explicit SgdMath(const SgdCall& c)
      : neg_lr(static_cast<S>(-*c.lr)),
        m(static_cast<S>(c.momentum)),
        wd(static_cast<S>(c.weight_decay)),
        nesterov(c.nesterov) {}
  __device__ void operator()(S* p, const S* g, S* buf, int64_t i) const {
    const S d = g[i] + p[i] * wd;
    if (!buf) {
      p[i] = p[i] + d * neg_lr;
      return;
    }
    const S nb = buf[i] * m + d;
    buf[i] = nb;
    p[i] = p[i] + (nesterov ? d + nb * m : nb) * neg_lr;
  }
};

template <typename S>
__global__ void sgd_kernel(SgdCall c) {
  if (skipped(c.loss, c.loss_f64)) return;
  const SgdMath<S> math(c);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step)
    math(static_cast<S*>(c.param), static_cast<const S*>(c.grad), static_cast<S*>(c.buffer), i);
}

// Adam's step (AdamW when decoupled) on element i, as the CPU's.
template <typename S>
struct AdamMath {
  S b1, b2, one_b1, one_b2, eps, bc2, step_size, decay, l2;
  bool decoupled, decays;
  __device__ explicit AdamMath(const AdamCall& c) {
    const double lr = *c.lr, step = *c.step;
    b1 = static_cast<S>(c.beta1), b2 = static_cast<S>(c.beta2);
    one_b1 = static_cast<S>(1 - c.beta1), one_b2 = static_cast<S>(1 - c.beta2), eps = static_cast<S>(c.eps);
    bc2 = static_cast<S>(1 - pow(c.beta2, step));
    step_size = static_cast<S>(-lr / (1 - pow(c.beta1, step)));
    decay = static_cast<S>(1 - lr * c.weight_decay), l2 = static_cast<S>(c.weight_decay);
    decoupled = c.decoupled, decays = c.weight_decay != 0;
  }
  __device__ void operator()(S* p, const S* g, S* m, S* v, int64_t i) const {
    if (decoupled && decays) p[i] = p[i] * decay;
    const S d = (!decoupled && decays) ? g[i] + p[i] * l2 : g[i];
    m[i] = m[i] * b1 + d * one_b1;
    v[i] = v[i] * b2 + d * d * one_b2;
    p[i] = p[i] + m[i] / (sqrt(v[i] / bc2) + eps) * step_size;
  }
};

template <typename S>
__global__ void adam_kernel(AdamCall c) {
  if (skipped(c.loss, c.loss_f64)) return;
  const AdamMath<S> math(c);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += stride)
    math(static_cast<S*>(c.param), static_cast<const S*>(c.grad), static_cast<S*>(c.exp_avg),
         static_cast<S*>(c.exp_avg_sq), i);
}

// RMSProp's step on element i, as the CPU's (buf: null without momentum).
template <typename S>
struct RmsPropMath {
  S neg_lr, al, one_al, eps, m, wd;
  __device__ explicit RmsPropMath(const RmsPropCall& c)
      : neg_lr(static_cast<S>(-*c.lr)),
        al(static_cast<S>(c.alpha)),
        one_al(static_cast<S>(1 - c.alpha)),
        eps(static_cast<S>(c.eps)),
        m(static_cast<S>(c.momentum)),
        wd(static_cast<S>(c.weight_decay)) {}
  __device__ void operator()(S* p, const S* g, S* sq, S* buf, int64_t i) const {
    const S d = wd != S(0) ? g[i] + p[i] * wd : g[i];
    sq[i] = sq[i] * al + d * d * one_al;
    S u = d / (sqrt(sq[i]) + eps);
    if (buf) {
      buf[i] = buf[i] * m + u;
      u = buf[i];
    }
    p[i] = p[i] + u * neg_lr;
  }
};

// One launch's parameters for a multi-tensor kernel, passed by value: each
// tensor's addresses (a: the parameter, g: its gradient, b and c: its
// state) and size, and the first block of each, so that a block finds its
// tensor by a scan of at most kListTensors entries.
struct TensorLists {
  int count = 0;
  unsigned first_block[kListTensors + 1] = {};
  void* a[kListTensors] = {};
  const void* g[kListTensors] = {};
  void* b[kListTensors] = {};
  void* c[kListTensors] = {};
  int64_t n[kListTensors] = {};
};

// This block's tensor, and the block's and the grid-stride step's place in it.
struct BlockPlace {
  int t;
  int64_t first, stride;
};
__device__ BlockPlace place_of_block(const TensorLists& l) {
  int t = 0;
  while (t + 1 < l.count && blockIdx.x >= l.first_block[t + 1]) ++t;
  const int64_t blocks = l.first_block[t + 1] - l.first_block[t];
  return {t, static_cast<int64_t>(blockIdx.x - l.first_block[t]) * blockDim.x + threadIdx.x, blocks * blockDim.x};
}

template <typename S>
__global__ void sgd_many_kernel(SgdCall c, TensorLists l) {
  if (skipped(c.loss, c.loss_f64)) return;
  const SgdMath<S> math(c);
  const BlockPlace at = place_of_block(l);
  for (int64_t i = at.first; i < l.n[at.t]; i += at.stride)
    math(static_cast<S*>(l.a[at.t]), static_cast<const S*>(l.g[at.t]), static_cast<S*>(l.b[at.t]), i);
}

// Adam's or RMSProp's step (Math) over a launch's tensors, each with two
// states (RMSProp's second: null without momentum).
template <typename Math, typename S, typename Call>
__global__ void two_state_many_kernel(Call c, TensorLists l) {
  if (skipped(c.loss, c.loss_f64)) return;
  const Math math(c);
  const BlockPlace at = place_of_block(l);
  for (int64_t i = at.first; i < l.n[at.t]; i += at.stride)
    math(static_cast<S*>(l.a[at.t]), static_cast<const S*>(l.g[at.t]), static_cast<S*>(l.b[at.t]),
         static_cast<S*>(l.c[at.t]), i);
}

// Calls launch(lists, blocks) for every kListTensors parameters of the
// group; each tensor gets blocks for its elements, at most 1024 (its
// grid-stride loop takes the rest).
template <typename Launch>
void for_each_list(const TensorGroup& group, const Launch& launch) {
  const size_t count = group.params.size();
  for (size_t first = 0; first < count; first += kListTensors) {
    TensorLists l;
    l.count = static_cast<int>(std::min<size_t>(kListTensors, count - first));
    for (int k = 0; k < l.count; ++k) {
      const size_t t = first + k;
      l.a[k] = group.params[t], l.g[k] = group.grads[t], l.n[k] = group.n[t];
      l.b[k] = group.states[0].empty() ? nullptr : group.states[0][t];
      l.c[k] = group.states[1].empty() ? nullptr : group.states[1][t];
      l.first_block[k + 1] = l.first_block[k] + std::min(blocks_for(group.n[t]), 1024u);
    }
    launch(l, l.first_block[l.count]);
  }
}

template <typename S>
__global__ void rmsprop_kernel(RmsPropCall c) {
  if (skipped(c.loss, c.loss_f64)) return;
  const RmsPropMath<S> math(c);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step)
    math(static_cast<S*>(c.param), static_cast<const S*>(c.grad), static_cast<S*>(c.square_avg),
         static_cast<S*>(c.buffer), i);
}

// Adam's or RMSProp's multi-tensor launches (Math: its step on one element).
template <template <typename> class Math, typename Call>
void launch_two_state_many(const Call& options, const TensorGroup& group, const char* what) {
  with_float_or_double(options.dtype, what, [&](auto s) {
    using S = decltype(s);
    for_each_list(group, [&](const TensorLists& l, unsigned blocks) {
      two_state_many_kernel<Math<S>, S><<<blocks, kThreads, 0, stream_of(options.stream)>>>(options, l);
      check_launch(what);
    });
  });
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

void launch_sgd_update_many(const SgdCall& options, const TensorGroup& group) {
  with_float_or_double(options.dtype, "sgd_update_many", [&](auto s) {
    for_each_list(group, [&](const TensorLists& l, unsigned blocks) {
      sgd_many_kernel<decltype(s)><<<blocks, kThreads, 0, stream_of(options.stream)>>>(options, l);
      check_launch("sgd_update_many");
    });
  });
}

void launch_adam_update_many(const AdamCall& options, const TensorGroup& group) {
  launch_two_state_many<AdamMath>(options, group, "adam_update_many");
}

void launch_rmsprop_update_many(const RmsPropCall& options, const TensorGroup& group) {
  launch_two_state_many<RmsPropMath>(options, group, "rmsprop_update_many");
}

void launch_rmsprop_update(const RmsPropCall& call) {
  if (call.n == 0) return;
  with_float_or_double(call.dtype, "rmsprop_update", [&](auto s) {
    rmsprop_kernel<decltype(s)><<<blocks_for(call.n), kThreads, 0, stream_of(call.stream)>>>(call);
  });
  check_launch("rmsprop_update");
}

}  // namespace kiln::cuda
