// CPU kernels of the binary elementwise ops, where, cast and strided copies.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "backends/cpu/half_convert.h"
#include "backends/cpu/kernel_helpers.h"

namespace kiln::cpu {
namespace {

#define KILN_BINARY(NAME, R, EXPR)                                                         \
  template <typename T>                                                                    \
  void NAME##_kernel(const Ins& in, Outs& out, const Attrs&) {                             \
    using C = compute_t<T>;                                                                \
    binary_map<T, R>(in[0], in[1], out[0], [](C a, C b) -> compute_t<R> { return EXPR; }); \
  }
KILN_BINARY(add, T, a + b)
KILN_BINARY(sub, T, a - b)
KILN_BINARY(mul, T, a * b)
KILN_BINARY(div, T, a / b)
KILN_BINARY(pow, T, std::pow(a, b))
KILN_BINARY(maximum, T, (a > b || a != a) ? a : b)
KILN_BINARY(minimum, T, (a < b || a != a) ? a : b)
KILN_BINARY(eq, bool, a == b)
KILN_BINARY(ne, bool, a != b)
KILN_BINARY(lt, bool, a < b)
KILN_BINARY(le, bool, a <= b)
KILN_BINARY(gt, bool, a > b)
KILN_BINARY(ge, bool, a >= b)
#undef KILN_BINARY

// Integer division must not crash the process on a zero divisor.
template <typename T>
void int_div_kernel(const Ins& in, Outs& out, const Attrs&) {
  std::atomic<bool> zero{false};
  binary_map<T, T>(in[0], in[1], out[0], [&zero](T a, T b) -> T {
    if (b == 0) {
      zero.store(true, std::memory_order_relaxed);
      return 0;
    }
    return a / b;
  });
  KILN_CHECK(!zero, "integer division by zero; cast to a floating type for IEEE semantics (inf/nan)");
}

// Remainders; an integer zero divisor is an error, not a crash.
template <typename T>
void mod_kernel(const Ins& in, Outs& out, const Attrs& a) {
  using C = compute_t<T>;
  const bool fmod = a.get_bool("fmod", false);
  std::atomic<bool> zero{false};
  binary_map<T, T>(in[0], in[1], out[0], [&zero, fmod](C x, C y) -> C {
    C r;
    if constexpr (std::is_floating_point_v<C>) {
      r = std::fmod(x, y);
    } else {
      if (y == 0) {
        zero.store(true, std::memory_order_relaxed);
        return 0;
      }
      r = x % y;
    }
    if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
  });
  KILN_CHECK(!zero, "mod: integer division by zero; cast to a floating type for IEEE semantics (nan)");
}

template <typename T>
void where_kernel(const Ins& in, Outs& out, const Attrs&) {
  Tensor& o = out[0];
  auto plan = make_plan<4>(o.shape(), {&o, &in[0], &in[1], &in[2]});
  run_plan<4>(plan,
              {static_cast<char*>(o.raw_data()), static_cast<char*>(in[0].raw_data()),
               static_cast<char*>(in[1].raw_data()), static_cast<char*>(in[2].raw_data())},
              {sizeof(T), 1, sizeof(T), sizeof(T)},
              [](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
                T* y = reinterpret_cast<T*>(p[0]);
                const bool* c = reinterpret_cast<const bool*>(p[1]);
                const T* a = reinterpret_cast<const T*>(p[2]);
                const T* b = reinterpret_cast<const T*>(p[3]);
                if (s[1] == 0) {  // one condition for the run (a mask over rows): the chosen operand's run
                  const T* from = *c ? a : b;
                  const int64_t step = *c ? s[2] : s[3];
                  if (s[0] == 1 && step == 1) {
                    std::memcpy(y, from, static_cast<size_t>(n) * sizeof(T));
                  } else if (s[0] == 1 && step == 0) {
                    std::fill(y, y + n, *from);
                  } else {
                    for (int64_t i = 0; i < n; ++i) y[i * s[0]] = from[i * step];
                  }
                } else if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {
                  for (int64_t i = 0; i < n; ++i) y[i] = c[i] ? a[i] : b[i];
                } else {
                  for (int64_t i = 0; i < n; ++i) y[i * s[0]] = c[i * s[1]] ? a[i * s[2]] : b[i * s[3]];
                }
              });
}

// float32 <-> float16/bfloat16 between contiguous tensors, a vector at a
// time (half_convert.h) in parallel chunks: element by element through
// Half's conversion, a float16 training step spent most of its time here.
bool cast_contiguous_half(const Tensor& x, Tensor& y) {
  const DType from = x.dtype(), to = y.dtype();
  const bool half_from = from == DType::Float16 || from == DType::BFloat16;
  const bool half_to = to == DType::Float16 || to == DType::BFloat16;
  if (!((half_from && to == DType::Float32) || (from == DType::Float32 && half_to)) || !x.is_contiguous() ||
      !y.is_contiguous())
    return false;
  const void* src = x.raw_data();
  void* dst = y.raw_data();
  parallel_for(x.numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
    const int64_t n = hi - lo;
    if (from == DType::Float32) {
      const float* s = static_cast<const float*>(src) + lo;
      uint16_t* d = static_cast<uint16_t*>(dst) + lo;
      if (to == DType::Float16) float_to_half(s, d, n);
      else float_to_bfloat16(s, d, n);
    } else {
      const uint16_t* s = static_cast<const uint16_t*>(src) + lo;
      float* d = static_cast<float*>(dst) + lo;
      if (from == DType::Float16) half_to_float(s, d, n);
      else bfloat16_to_float(s, d, n);
    }
  });
  return true;
}

template <typename From>
void cast_kernel(const Ins& in, Outs& out, const Attrs&) {
  if (cast_contiguous_half(in[0], out[0])) return;
  KILN_DISPATCH_ALL(out[0].dtype(), {
    unary_map<From, scalar_t>(in[0], out[0], [](compute_t<From> x) -> compute_t<From> { return x; });
  });
}

template <typename T>
void assign_kernel(const Ins& in, Outs&, const Attrs&) {
  Tensor dst = in[0];
  strided_copy(in[1], dst);
}

}  // namespace

namespace {

// dst[..., i, j] = src[..., i, j] where src reads down columns (its last two
// axes are transposed in memory): copy 32x32 tiles so both sides stay in cache.
template <typename U>
void tiled_transpose_copy(const LoopPlan<2>& p, U* dst, const U* src) {
  constexpr int64_t kTile = 32;
  const int nd = p.ndim;
  const int64_t rows = p.shape[nd - 2], cols = p.shape[nd - 1];
  const int64_t dr = p.strides[0][nd - 2], sc = p.strides[1][nd - 1];
  int64_t batches = 1;
  for (int d = 0; d < nd - 2; ++d) batches *= p.shape[d];
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  parallel_for(batches * row_tiles, 4, [&](int64_t b, int64_t e) {
    for (int64_t job = b; job < e; ++job) {
      int64_t batch = job / row_tiles, r0 = (job % row_tiles) * kTile;
      int64_t doff = 0, soff = 0, rem = batch;
      for (int d = nd - 3; d >= 0; --d) {
        int64_t i = rem % p.shape[d];
        rem /= p.shape[d];
        doff += i * p.strides[0][d];
        soff += i * p.strides[1][d];
      }
      int64_t r1 = std::min(rows, r0 + kTile);
      for (int64_t ct = 0; ct < col_tiles; ++ct) {
        int64_t c0 = ct * kTile, c1 = std::min(cols, c0 + kTile);
        // dc == 1 and sr == 1 (checked by the caller): unit strides let the compiler unroll.
        for (int64_t r = r0; r < r1; ++r) {
          U* d = dst + doff + r * dr;
          const U* sp = src + soff + r;
          for (int64_t c = c0; c < c1; ++c) d[c] = sp[c * sc];
        }
      }
    }
  });
}

}  // namespace

void strided_copy(const Tensor& src, Tensor& dst) {
  auto plan = make_plan<2>(dst.shape(), {&dst, &src});
  int64_t es = static_cast<int64_t>(dst.element_size());
  const int nd = plan.ndim;
  const bool transposed = nd >= 2 && plan.strides[0][nd - 1] == 1 && plan.strides[1][nd - 1] != 1 &&
                          plan.strides[1][nd - 2] == 1 && plan.shape[nd - 1] >= 8 && plan.shape[nd - 2] >= 8;
  auto copy = [&](auto tag) {
    using U = decltype(tag);
    if (transposed) {
      tiled_transpose_copy<U>(plan, static_cast<U*>(dst.raw_data()), static_cast<const U*>(src.raw_data()));
      return;
    }
    run_plan<2>(plan, {static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())}, {es, es},
                [](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                  U* o = reinterpret_cast<U*>(p[0]);
                  const U* a = reinterpret_cast<const U*>(p[1]);
                  if (s[0] == 1 && s[1] == 1) {
                    std::memcpy(o, a, static_cast<size_t>(n) * sizeof(U));
                  } else {
                    for (int64_t i = 0; i < n; ++i) o[i * s[0]] = a[i * s[1]];
                  }
                });
  };
  switch (es) {
    case 1: copy(uint8_t{}); break;
    case 2: copy(uint16_t{}); break;
    case 4: copy(uint32_t{}); break;
    case 8: copy(uint64_t{}); break;
    default: KILN_ASSERT(false, "unexpected element size ", es);
  }
}

KILN_CPU_NUMERIC("add", add_kernel);
KILN_CPU_NUMERIC("sub", sub_kernel);
KILN_CPU_NUMERIC("mul", mul_kernel);
KILN_CPU_FLOAT("div", div_kernel);
KILN_CPU_SIGNED("div", int_div_kernel);
KILN_REGISTER_KERNEL("div", CPU, int_div_kernel<uint8_t>, DType::UInt8);
KILN_CPU_FLOAT("pow", pow_kernel);
KILN_CPU_NUMERIC("maximum", maximum_kernel);
KILN_CPU_NUMERIC("mod", mod_kernel);
KILN_CPU_NUMERIC("minimum", minimum_kernel);
KILN_CPU_ALL("eq", eq_kernel);
KILN_CPU_ALL("ne", ne_kernel);
KILN_CPU_NUMERIC("lt", lt_kernel);
KILN_CPU_NUMERIC("le", le_kernel);
KILN_CPU_NUMERIC("gt", gt_kernel);
KILN_CPU_NUMERIC("ge", ge_kernel);
KILN_CPU_ALL("where", where_kernel);
KILN_CPU_ALL("cast", cast_kernel);
KILN_CPU_ALL("assign", assign_kernel);

}  // namespace kiln::cpu
