// The fused cross entropy and its backward on CUDA, a block per row, and
// nll_loss and the pointwise losses, as the CPU computes them.
#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

// Row i's log-sum-exp and, with smoothing, sum_k w_k (x_k - lse); in every thread.
template <typename S>
__device__ void row_stats(const CrossEntropyCall& c, const S* row, const S* weight, double* lse, double* smooth_sum) {
  using T = Stored<S>;
  double m = -INFINITY;
  for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) m = fmax(m, static_cast<double>(T::load(row + k)));
  m = block_max(m);
  double s = 0;
  for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) s += exp(static_cast<double>(T::load(row + k)) - m);
  *lse = m + log(block_sum(s));
  *smooth_sum = 0;
  if (c.smoothing > 0) {
    double acc = 0;
    for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x)
      acc += (weight ? static_cast<double>(T::load(weight + k)) : 1.0) * (static_cast<double>(T::load(row + k)) - *lse);
    *smooth_sum = block_sum(acc);
  }
}

// Per row: the loss (0 where ignored, NaN for a bad target, which is
// reported) and the weight the mean divides by.
template <typename S>
__global__ void cross_entropy_rows(CrossEntropyCall c, S* none_out) {
  using T = Stored<S>;
  const S* x = static_cast<const S*>(c.x);
  const S* w = static_cast<const S*>(c.weight);
  for (int64_t i = blockIdx.x; i < c.n; i += gridDim.x) {
    const int64_t t = c.target[i];
    const S* row = x + i * c.c;
    double lse = 0, smooth_sum = 0;
    row_stats(c, row, w, &lse, &smooth_sum);
    if (threadIdx.x != 0) continue;
    double loss = 0, weight = 0;
    if (t != c.ignore) {
      if (t < 0 || t >= c.c) {
        report_bad_index(c.error, IndexKind::ClassTarget, t, i, c.c);
        loss = NAN;
      } else {
        weight = w ? static_cast<double>(T::load(w + t)) : 1.0;
        loss = -(1 - c.smoothing) * weight * (static_cast<double>(T::load(row + t)) - lse) -
               c.smoothing / static_cast<double>(c.c) * smooth_sum;
      }
    }
    c.scratch[i] = loss;
    c.scratch[c.n + i] = weight;
    if (none_out) T::store(none_out + i, static_cast<typename T::C>(loss));
  }
}

// Per row (a thread each): -weight[t] x[i, t], or 0 where ignored; NaN for
// a bad target, which is reported.
template <typename S>
__global__ void nll_rows(CrossEntropyCall c, S* none_out) {
  using T = Stored<S>;
  const S* x = static_cast<const S*>(c.x);
  const S* w = static_cast<const S*>(c.weight);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step) {
    const int64_t t = c.target[i];
    double loss = 0, weight = 0;
    if (t != c.ignore) {
      if (t < 0 || t >= c.c) {
        report_bad_index(c.error, IndexKind::ClassTarget, t, i, c.c);
        loss = NAN;
      } else {
        weight = w ? static_cast<double>(T::load(w + t)) : 1.0;
        loss = -weight * static_cast<double>(T::load(x + i * c.c + t));
      }
    }
    c.scratch[i] = loss;
    c.scratch[c.n + i] = weight;
    if (none_out) T::store(none_out + i, static_cast<typename T::C>(loss));
  }
}

__device__ double pointwise_term(const PointwiseLossCall& c, double x, double y) {
  switch (c.loss) {
    case PointwiseLoss::Squared:
      return (x - y) * (x - y);
    case PointwiseLoss::Absolute:
      return fabs(x - y);
    case PointwiseLoss::SmoothL1: {
      const double d = fabs(x - y);
      return d < c.beta ? 0.5 * d * d / c.beta : d - 0.5 * c.beta;
    }
    case PointwiseLoss::LogisticBce:
      return fmax(x, 0.0) - x * y + log1p(exp(-fabs(x)));
  }
  return 0;
}

// Each element's term (reduction None), or each block's sum of its terms.
template <typename S>
__global__ void pointwise_loss_terms(PointwiseLossCall c, const S* x, const S* y, S* out) {
  using T = Stored<S>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double acc = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step) {
    const double term = pointwise_term(c, static_cast<double>(T::load(x + i)), static_cast<double>(T::load(y + i)));
    if (c.reduction == Reduction::None)
      T::store(out + i, static_cast<typename T::C>(term));
    else
      acc += term;
  }
  if (c.reduction == Reduction::None) return;
  acc = block_sum(acc);
  if (threadIdx.x == 0) c.partials[blockIdx.x] = acc;
}

template <typename S>
__global__ void pointwise_loss_total(PointwiseLossCall c, int blocks_used, S* out) {
  double acc = 0;
  for (int b = threadIdx.x; b < blocks_used; b += blockDim.x) acc += c.partials[b];
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    Stored<S>::store(
        out, static_cast<typename Stored<S>::C>(c.reduction == Reduction::Sum ? acc : acc / static_cast<double>(c.n)));
}

// scratch[2n] = the mean's denominator; out[0] = the sum or mean of the losses.
template <typename S>
__global__ void cross_entropy_total(CrossEntropyCall c, S* out) {
  double loss = 0, weight = 0;
  for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
    loss += c.scratch[i];
    weight += c.scratch[c.n + i];
  }
  loss = block_sum(loss);
  weight = block_sum(weight);
  if (threadIdx.x != 0) return;
  c.scratch[2 * c.n] = weight;
  if (out)
    Stored<S>::store(out, static_cast<typename Stored<S>::C>(c.reduction == Reduction::Sum ? loss : loss / weight));
}

// grad_x[i, k] = scale_i (total_i softmax_ik - coeff_ik), where coeff is the
// target's weight (1 - smoothing) plus smoothing / c of every class's.
template <typename S>
__global__ void cross_entropy_backward_rows(CrossEntropyCall c, const S* grad, S* grad_x) {
  using T = Stored<S>;
  const S* x = static_cast<const S*>(c.x);
  const S* w = static_cast<const S*>(c.weight);
  for (int64_t i = blockIdx.x; i < c.n; i += gridDim.x) {
    const int64_t t = c.target[i];
    S* out = grad_x + i * c.c;
    if (t == c.ignore || t < 0 || t >= c.c) {
      const typename T::C fill = t == c.ignore ? 0 : NAN;
      for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) T::store(out + k, fill);
      continue;
    }
    const S* row = x + i * c.c;
    double lse = 0, unused = 0;
    row_stats(c, row, static_cast<const S*>(nullptr), &lse, &unused);
    const double g = static_cast<double>(T::load(grad + (c.reduction == Reduction::None ? i : 0)));
    const double scale = c.reduction == Reduction::Mean ? g / c.scratch[2 * c.n] : g;
    const double w_t = w ? static_cast<double>(T::load(w + t)) : 1.0;
    double weights = 0;  // sum_k w_k, for the smoothing's share
    if (c.smoothing > 0) {
      double acc = 0;
      for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) acc += w ? static_cast<double>(T::load(w + k)) : 1.0;
      weights = block_sum(acc);
    }
    const double share = c.smoothing / static_cast<double>(c.c);
    const double total = (1 - c.smoothing) * w_t + share * weights;
    for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) {
      const double w_k = w ? static_cast<double>(T::load(w + k)) : 1.0;
      const double coeff = share * w_k + (k == t ? (1 - c.smoothing) * w_t : 0.0);
      const double softmax = exp(static_cast<double>(T::load(row + k)) - lse);
      T::store(out + k, static_cast<typename T::C>(scale * (total * softmax - coeff)));
    }
  }
}

}  // namespace

void launch_cross_entropy(const CrossEntropyCall& call, void* out) {
  with_float_or_double(call.dtype, "cross_entropy", [&](auto s) {
    using S = decltype(s);
    S* none_out = call.reduction == Reduction::None ? static_cast<S*>(out) : nullptr;
    cross_entropy_rows<S><<<blocks(call.n), kThreads, 0, stream_of(call.stream)>>>(call, none_out);
    check_launch("cross_entropy");
    if (call.reduction == Reduction::None) return;
    cross_entropy_total<S><<<1, kThreads, 0, stream_of(call.stream)>>>(call, static_cast<S*>(out));
    check_launch("cross_entropy");
  });
}

void launch_nll_loss(const CrossEntropyCall& call, void* out) {
  with_float_or_double(call.dtype, "nll_loss", [&](auto s) {
    using S = decltype(s);
    S* none_out = call.reduction == Reduction::None ? static_cast<S*>(out) : nullptr;
    if (call.n > 0) nll_rows<S><<<blocks_for(call.n), kThreads, 0, stream_of(call.stream)>>>(call, none_out);
    check_launch("nll_loss");
    if (call.reduction == Reduction::None) return;
    cross_entropy_total<S><<<1, kThreads, 0, stream_of(call.stream)>>>(call, static_cast<S*>(out));
    check_launch("nll_loss");
  });
}

void launch_pointwise_loss(const PointwiseLossCall& call, const void* x, const void* y, void* out) {
  with_float_or_double(call.dtype, "the pointwise losses", [&](auto s) {
    using S = decltype(s);
    const int used = static_cast<int>(std::min<int64_t>(blocks_for(call.n), PointwiseLossCall::kPartials));
    if (call.n > 0)
      pointwise_loss_terms<S><<<used, kThreads, 0, stream_of(call.stream)>>>(
          call, static_cast<const S*>(x), static_cast<const S*>(y), static_cast<S*>(out));
    if (call.reduction != Reduction::None)
      pointwise_loss_total<S>
          <<<1, kThreads, 0, stream_of(call.stream)>>>(call, call.n > 0 ? used : 0, static_cast<S*>(out));
  });
  check_launch("a pointwise loss");
}

void launch_cross_entropy_backward(const CrossEntropyCall& call, const void* grad, void* grad_x) {
  if (call.n == 0) return;
  with_float_or_double(call.dtype, "cross_entropy_backward", [&](auto s) {
    using S = decltype(s);
    const cudaStream_t stream = stream_of(call.stream);
    if (call.reduction == Reduction::Mean) {  // the denominator first: sum of the kept targets' weights
      cross_entropy_rows<S><<<blocks(call.n), kThreads, 0, stream>>>(call, nullptr);
      cross_entropy_total<S><<<1, kThreads, 0, stream>>>(call, nullptr);
    }
    cross_entropy_backward_rows<S>
        <<<blocks(call.n), kThreads, 0, stream>>>(call, static_cast<const S*>(grad), static_cast<S*>(grad_x));
  });
  check_launch("cross_entropy_backward");
}

}  // namespace kiln::cuda
