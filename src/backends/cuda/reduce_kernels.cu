// Sums over any axes (a block per output, its threads striding over the
// reduced positions) and softmax over any axis (a block per row), on CUDA.
#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

template <typename S>
__global__ void sum_kernel(ReduceCall c) {
  using T = Stored<S>;
  using Acc = typename T::C;
  const S* x = static_cast<const S*>(c.in);
  S* y = static_cast<S*>(c.out);
  for (int64_t o = blockIdx.x; o < c.outer.numel; o += gridDim.x) {
    int64_t at[MapGeometry::kMaxOperands] = {o, o, o, o};
    if (!c.outer.flat) map_offsets(c.outer, o, at);
    Acc acc = 0;
    for (int64_t r = threadIdx.x; r < c.inner.numel; r += blockDim.x) {
      int64_t in[MapGeometry::kMaxOperands] = {r, r, r, r};
      if (!c.inner.flat) map_offsets(c.inner, r, in);
      acc += T::load(x + at[1] + in[0]);
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) T::store(y + at[0], static_cast<Acc>(acc * static_cast<Acc>(c.scale)));
  }
}

template <typename S>
__global__ void softmax_kernel(SoftmaxCall c) {
  using T = Stored<S>;
  using C = typename T::C;
  const S* x = static_cast<const S*>(c.x);
  S* y = static_cast<S*>(c.y);
  for (int64_t r = blockIdx.x; r < c.outer * c.inner; r += gridDim.x) {
    const int64_t base = r / c.inner * c.n * c.inner + r % c.inner;
    const int64_t seen = c.causal_rows > 0 ? std::min<int64_t>(r % c.causal_rows + 1, c.n) : c.n;
    C m = -INFINITY;
    for (int64_t k = threadIdx.x; k < seen; k += blockDim.x) m = max(m, T::load(x + base + k * c.inner));
    m = block_max(m);
    const bool blind = c.zero_blind_rows && m == C(-INFINITY);
    C total = 0;
    if (!blind)
      for (int64_t k = threadIdx.x; k < seen; k += blockDim.x) total += exp(T::load(x + base + k * c.inner) - m);
    total = block_sum(total);
    const C log_total = log(total);
    for (int64_t k = threadIdx.x; k < c.n; k += blockDim.x) {
      const C v = T::load(x + base + k * c.inner) - m;
      C out = c.log ? v - log_total : exp(v) / total;
      if (k >= seen || blind) out = c.log ? C(-INFINITY) : C(0);
      T::store(y + base + k * c.inner, out);
    }
  }
}

}  // namespace

void launch_sum(const ReduceCall& call) {
  if (call.outer.numel == 0) return;
  with_any_float(call.dtype, [&](auto s) {
    using S = decltype(s);
    sum_kernel<S><<<blocks(call.outer.numel), kThreads, 0, stream_of(call.stream)>>>(call);
  });
  check_launch("sum");
}

void launch_softmax(const SoftmaxCall& call) {
  if (call.outer * call.n * call.inner == 0) return;
  with_any_float(call.dtype, [&](auto s) {
    using S = decltype(s);
    softmax_kernel<S><<<blocks(call.outer * call.inner), kThreads, 0, stream_of(call.stream)>>>(call);
  });
  check_launch(call.log ? "log_softmax" : "softmax");
}

}  // namespace kiln::cuda
