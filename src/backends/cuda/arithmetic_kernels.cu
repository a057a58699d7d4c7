// The elementwise ops on integers (add, sub, mul, truncating div, maximum,
// minimum, mod, neg, abs, sign, relu, clamp) and mod on every numeric type:
// one grid-stride kernel per storage type, the op chosen per call. An
// integer division by zero gives 0 and is reported (index_errors.h).
#include <type_traits>

#include "backends/cuda/arithmetic_launch.h"
#include "backends/cuda/kernel_launch.h"

namespace kiln::cuda {
namespace {

template <typename C>
__device__ bool negative(C x) {
  if constexpr (std::is_unsigned_v<C>)
    return false;
  else
    return x < C(0);
}

template <typename C>
__device__ C remainder_of(C x, C y, bool fmod) {
  C r;
  if constexpr (std::is_floating_point_v<C>)
    r = ::fmod(x, y);
  else
    r = x % y;
  if (!fmod && r != 0 && negative(r) != negative(y)) r += y;
  return r;
}

template <typename S>
__global__ void arithmetic_kernel(ArithmeticCall c) {
  using T = Stored<S>;
  using C = typename T::C;
  const MapGeometry& g = c.map.geometry;
  S* y = static_cast<S*>(c.map.out);
  const S* a = static_cast<const S*>(c.map.in[0]);
  const S* b = static_cast<const S*>(c.map.in[1]);
  const C lo = static_cast<C>(c.min), hi = static_cast<C>(c.max);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.numel; i += step) {
    int64_t off[MapGeometry::kMaxOperands] = {i, i, i, i};
    if (!g.flat) map_offsets(g, i, off);
    const C x = T::load(a + off[1]);
    const C v = b ? T::load(b + off[2]) : C(0);
    C r = 0;
    switch (c.op) {
      case Arithmetic::Add:
        r = x + v;
        break;
      case Arithmetic::Sub:
        r = x - v;
        break;
      case Arithmetic::Mul:
        r = x * v;
        break;
      case Arithmetic::Maximum:
        r = x > v ? x : v;
        break;
      case Arithmetic::Minimum:
        r = x < v ? x : v;
        break;
      case Arithmetic::Neg:
        r = -x;
        break;
      case Arithmetic::Abs:
        r = negative(x) ? static_cast<C>(-x) : x;
        break;
      case Arithmetic::Sign:
        r = static_cast<C>((x > C(0)) - negative(x));
        break;
      case Arithmetic::Relu:
        r = negative(x) ? C(0) : x;
        break;
      case Arithmetic::Clamp:
        r = c.has_min && x < lo ? lo : x;
        if (c.has_max && r > hi) r = hi;
        break;
      case Arithmetic::Div:
      case Arithmetic::Mod:
        if constexpr (!std::is_floating_point_v<C>) {
          if (v == 0) {
            report_bad_index(c.error, IndexKind::DivisionByZero, static_cast<int64_t>(x), i, 0);
            break;
          }
        }
        r = c.op == Arithmetic::Div ? static_cast<C>(x / v) : remainder_of(x, v, c.fmod);
        break;
    }
    T::store(y + off[0], static_cast<C>(r));
  }
}

}  // namespace

void launch_arithmetic(const ArithmeticCall& call) {
  if (call.map.geometry.numel == 0) return;
  with_any(call.dtype, [&](auto s) {
    using S = decltype(s);
    if constexpr (std::is_same_v<S, bool>)
      KILN_FAIL("CUDA arithmetic takes numbers, not bool");
    else
      arithmetic_kernel<S><<<blocks_for(call.map.geometry.numel), kThreads, 0, stream_of(call.map.stream)>>>(call);
  });
  check_launch("arithmetic");
}

}  // namespace kiln::cuda
