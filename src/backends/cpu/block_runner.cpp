// The CPU backend's runner of elementwise math (OpDef::math): the loop plan
// of loops.h merges contiguous axes, so a contiguous op is one call of the
// op's block function per thread chunk; broadcast, strided and half-precision
// operands go through small buffers, converted to the compute type.
#include <algorithm>
#include <type_traits>

#include "backends/cpu/half_convert.h"
#include "backends/cpu/kernel_helpers.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kChunk = 1024;

// A block of len values of T, every st-th, as S; and back. The half types
// convert a vector at a time where contiguous (half_convert.h).
template <typename T, typename S>
void load_block(const T* x, int64_t st, S* out, int64_t len) {
  if constexpr (std::is_same_v<T, Half> && std::is_same_v<S, float>) {
    if (st == 1) return half_to_float(reinterpret_cast<const uint16_t*>(x), out, len);
  } else if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<S, float>) {
    if (st == 1) return bfloat16_to_float(reinterpret_cast<const uint16_t*>(x), out, len);
  }
  for (int64_t i = 0; i < len; ++i) out[i] = static_cast<S>(x[i * st]);
}

template <typename T, typename S>
void store_block(const S* r, T* o, int64_t so, int64_t len) {
  if constexpr (std::is_same_v<T, Half> && std::is_same_v<S, float>) {
    if (so == 1) return float_to_half(r, reinterpret_cast<uint16_t*>(o), len);
  } else if constexpr (std::is_same_v<T, BFloat16> && std::is_same_v<S, float>) {
    if (so == 1) return float_to_bfloat16(r, reinterpret_cast<uint16_t*>(o), len);
  }
  for (int64_t i = 0; i < len; ++i) o[i * so] = static_cast<T>(r[i]);
}

// Storage type T computed as S (float for float16 and bfloat16).
template <typename T, typename S, int K>
void run_typed(BlockFn<S> fn, const Ins& in, Outs& out, const Attrs& attrs) {
  constexpr int kInputs = K - 1;
  Tensor& y = out[0];
  std::array<const Tensor*, K> ops;
  std::array<char*, K> base;
  std::array<int64_t, K> sizes;
  ops[0] = &y;
  base[0] = static_cast<char*>(y.raw_data());
  for (int k = 0; k < kInputs; ++k) {
    ops[k + 1] = &in[k];
    base[k + 1] = static_cast<char*>(in[k].raw_data());
  }
  sizes.fill(static_cast<int64_t>(sizeof(T)));
  auto plan = make_plan<K>(y.shape(), ops);
  run_plan<K>(plan, base, sizes, [&](const std::array<char*, K>& p, const std::array<int64_t, K>& s, int64_t n) {
    constexpr bool same = std::is_same_v<T, S>;
    bool direct = same;
    for (int k = 0; k < K; ++k) direct = direct && s[k] == 1;
    if (direct) {
      const S* src[kInputs];
      for (int k = 0; k < kInputs; ++k) src[k] = reinterpret_cast<const S*>(p[k + 1]);
      fn(src, reinterpret_cast<S*>(p[0]), n, attrs);
      return;
    }
    alignas(64) S bufs[kInputs][kChunk];
    alignas(64) S result[kChunk];
    for (int64_t at = 0; at < n; at += kChunk) {
      const int64_t len = std::min(kChunk, n - at);
      const S* src[kInputs];
      for (int k = 0; k < kInputs; ++k) {
        const T* x = reinterpret_cast<const T*>(p[k + 1]);
        const int64_t st = s[k + 1];
        if (same && st == 1) {
          src[k] = reinterpret_cast<const S*>(x + at);
          continue;
        }
        if (st == 0) std::fill(bufs[k], bufs[k] + len, static_cast<S>(x[0]));
        else load_block(x + at * st, st, bufs[k], len);
        src[k] = bufs[k];
      }
      T* o = reinterpret_cast<T*>(p[0]);
      const int64_t so = s[0];
      if (same && so == 1) {
        fn(src, reinterpret_cast<S*>(o + at), len, attrs);
        continue;
      }
      fn(src, result, len, attrs);
      store_block(result, o + at * so, so, len);
    }
  });
}

template <typename T, typename S>
void run_arity(BlockFn<S> fn, int arity, const Ins& in, Outs& out, const Attrs& attrs) {
  KILN_ASSERT(static_cast<int>(in.size()) >= arity, "elementwise math of arity ", arity, " got ", in.size(), " inputs");
  if (arity == 1) run_typed<T, S, 2>(fn, in, out, attrs);
  else run_typed<T, S, 3>(fn, in, out, attrs);
}

void run_blocks(const ElementwiseMath& math, const Ins& in, Outs& out, const Attrs& attrs) {
  switch (out.at(0).dtype()) {
    case DType::Float32: return run_arity<float, float>(math.f32, math.arity, in, out, attrs);
    case DType::Float64: return run_arity<double, double>(math.f64, math.arity, in, out, attrs);
    case DType::Float16: return run_arity<Half, float>(math.f32, math.arity, in, out, attrs);
    case DType::BFloat16: return run_arity<BFloat16, float>(math.f32, math.arity, in, out, attrs);
    default: KILN_FAIL("elementwise math runs on floating dtypes, got ", dtype_name(out[0].dtype()));
  }
}

BlockRunnerRegistrar cpu_runner(DeviceType::CPU, run_blocks,
                                {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16});

}  // namespace
}  // namespace kiln::cpu
