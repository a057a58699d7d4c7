// Reductions that keep an order or an extreme (maxima, minima, their
// positions, products, integer sums) on CUDA: a block per output, each
// thread folding the reduced positions it strides over into a (value,
// position) pair, then a tree over the block's pairs in shared memory; and
// those of two passes (log-sum-exp, variance, standard deviation).
#include <type_traits>

#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

template <typename V>
struct Best {
  V v;
  int64_t at;  // the reduced position; -1 before the first (maxima and minima)
};

template <typename V>
__device__ bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) return v != v;
  return false;
}

template <Fold kFold, typename V>
__device__ Best<V> combine(Best<V> a, Best<V> b) {
  if constexpr (kFold == Fold::Sum) {
    return {a.v + b.v, 0};
  } else if constexpr (kFold == Fold::Prod) {
    return {a.v * b.v, 0};
  } else {
    if (a.at < 0) return b;
    if (b.at < 0) return a;
    const bool a_nan = is_nan(a.v), b_nan = is_nan(b.v);
    if (a_nan || b_nan) return a_nan && b_nan ? (a.at < b.at ? a : b) : (a_nan ? a : b);
    if (a.v == b.v) return a.at < b.at ? a : b;
    constexpr bool kMax = kFold == Fold::Max || kFold == Fold::ArgMax;
    return (kMax ? a.v > b.v : a.v < b.v) ? a : b;
  }
}

template <Fold kFold, typename V>
__device__ Best<V> block_fold(Best<V> mine) {
  __shared__ Best<V> slots[kThreads];
  slots[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) slots[threadIdx.x] = combine<kFold>(slots[threadIdx.x], slots[threadIdx.x + half]);
    __syncthreads();
  }
  const Best<V> all = slots[0];
  __syncthreads();
  return all;
}

template <typename S, Fold kFold>
__global__ void fold_kernel(FoldCall c) {
  using T = Stored<S>;
  using C = typename T::C;
  constexpr bool kCounts = kFold == Fold::Sum || kFold == Fold::Prod;
  using Wide = std::conditional_t<std::is_floating_point_v<C>, double, int64_t>;
  using V = std::conditional_t<kCounts, Wide, C>;
  const S* x = static_cast<const S*>(c.in);
  for (int64_t o = blockIdx.x; o < c.outer.numel; o += gridDim.x) {
    int64_t at[MapGeometry::kMaxOperands] = {o, o, o, o};
    if (!c.outer.flat) map_offsets(c.outer, o, at);
    Best<V> acc{V(kFold == Fold::Prod ? 1 : 0), kCounts ? 0 : -1};
    for (int64_t r = threadIdx.x; r < c.inner.numel; r += blockDim.x) {
      int64_t in[MapGeometry::kMaxOperands] = {r, r, r, r};
      if (!c.inner.flat) map_offsets(c.inner, r, in);
      acc = combine<kFold>(acc, Best<V>{static_cast<V>(T::load(x + at[1] + in[0])), r});
    }
    acc = block_fold<kFold>(acc);
    if (threadIdx.x != 0) continue;
    if constexpr (kFold == Fold::ArgMax || kFold == Fold::ArgMin) {
      static_cast<int64_t*>(c.out)[at[0]] = acc.at < 0 ? 0 : acc.at;
    } else {
      T::store(static_cast<S*>(c.out) + at[0], static_cast<C>(acc.v));
    }
  }
}

// Two passes over each output's positions, in double: the maximum then the
// sum of exponentials (LogSumExp), or the mean then the squared deviations.
template <typename S, Fold kFold>
__global__ void moments_kernel(FoldCall c) {
  using T = Stored<S>;
  const S* x = static_cast<const S*>(c.in);
  for (int64_t o = blockIdx.x; o < c.outer.numel; o += gridDim.x) {
    int64_t at[MapGeometry::kMaxOperands] = {o, o, o, o};
    if (!c.outer.flat) map_offsets(c.outer, o, at);
    auto value = [&](int64_t r) {
      int64_t in[MapGeometry::kMaxOperands] = {r, r, r, r};
      if (!c.inner.flat) map_offsets(c.inner, r, in);
      return static_cast<double>(T::load(x + at[1] + in[0]));
    };
    double first = kFold == Fold::LogSumExp ? -INFINITY : 0.0;
    for (int64_t r = threadIdx.x; r < c.inner.numel; r += blockDim.x)
      first = kFold == Fold::LogSumExp ? fmax(first, value(r)) : first + value(r);
    first = kFold == Fold::LogSumExp ? block_max(first) : block_sum(first);
    const double center = kFold == Fold::LogSumExp ? first : first / static_cast<double>(c.inner.numel);
    double second = 0;
    if (kFold != Fold::LogSumExp || isfinite(center))
      for (int64_t r = threadIdx.x; r < c.inner.numel; r += blockDim.x) {
        const double d = value(r) - center;
        second += kFold == Fold::LogSumExp ? exp(d) : d * d;
      }
    second = block_sum(second);
    if (threadIdx.x != 0) continue;
    double y = 0;
    if (kFold == Fold::LogSumExp) {
      y = isfinite(center) ? center + log(second) : center;
    } else {
      const double denominator = static_cast<double>(c.inner.numel - c.correction);
      y = denominator > 0 ? second / denominator : NAN;
      if (kFold == Fold::Std) y = sqrt(y);
    }
    T::store(static_cast<S*>(c.out) + at[0], static_cast<typename T::C>(y));
  }
}

template <Fold kFold>
void launch_moments(const FoldCall& call) {
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    if constexpr (std::is_floating_point_v<typename Stored<S>::C>)
      moments_kernel<S, kFold><<<blocks(call.outer.numel), kThreads, 0, stream_of(call.stream)>>>(call);
    else
      KILN_FAIL("CUDA logsumexp, var and std: floating types");
  });
}

template <Fold kFold>
void launch_as(const FoldCall& call) {
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    if constexpr (!std::is_same_v<S, bool>)
      fold_kernel<S, kFold><<<blocks(call.outer.numel), kThreads, 0, stream_of(call.stream)>>>(call);
    else
      KILN_FAIL("CUDA reductions take numbers, not bool: cast first");
  });
}

}  // namespace

void launch_fold(const FoldCall& call) {
  if (call.outer.numel == 0) return;
  switch (call.fold) {
    case Fold::Sum:
      launch_as<Fold::Sum>(call);
      break;
    case Fold::Prod:
      launch_as<Fold::Prod>(call);
      break;
    case Fold::Max:
      launch_as<Fold::Max>(call);
      break;
    case Fold::Min:
      launch_as<Fold::Min>(call);
      break;
    case Fold::ArgMax:
      launch_as<Fold::ArgMax>(call);
      break;
    case Fold::ArgMin:
      launch_as<Fold::ArgMin>(call);
      break;
    case Fold::LogSumExp:
      launch_moments<Fold::LogSumExp>(call);
      break;
    case Fold::Var:
      launch_moments<Fold::Var>(call);
      break;
    case Fold::Std:
      launch_moments<Fold::Std>(call);
      break;
  }
  check_launch("reduction");
}

}  // namespace kiln::cuda
