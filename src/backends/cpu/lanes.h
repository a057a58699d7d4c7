#pragma once
// L floats as one value (GCC/Clang vector extensions): 8 (as vec8.h's), or
// 16, which AVX-512 holds in one register and other CPUs in two, for kernels
// on channel-blocked data whose block is a template argument. The types come
// from a struct per size: an alias template with the size as its parameter
// drops vector_size.
#include <cstdint>
#include <cstring>

namespace kiln::cpu {
// Whether 16 lanes are one register here. Without AVX-512, code that takes
// a 16-lane value through a function it does not inline changes the calling
// convention (GCC: -Werror=psabi): such code uses 8 lanes there.
constexpr bool kSixteenLanes =
#if defined(__AVX512F__)
    true;
#else
    false;
#endif

template <int L>
struct LaneTypes;
template <>
struct LaneTypes<8> {
  typedef float vf __attribute__((vector_size(32)));
  typedef int32_t vi __attribute__((vector_size(32)));
};
template <>
struct LaneTypes<16> {
  typedef float vf __attribute__((vector_size(64)));
  typedef int32_t vi __attribute__((vector_size(64)));
};

template <int L>
struct Lanes {
  using vf = typename LaneTypes<L>::vf;
  using vi = typename LaneTypes<L>::vi;
  static vf load(const float* p) {
    vf v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
  static vf splat(float x) { return vf{} + x; }
  // a where mask is set, else b: bit operations rather than per-lane
  // branches, which compilers turn into slow masked stores (see vec8.h).
  static vf select(vi mask, vf a, vf b) {
    return reinterpret_cast<vf>((reinterpret_cast<vi>(a) & mask) | (reinterpret_cast<vi>(b) & ~mask));
  }
  // As vec8's: a NaN beats a number; max(v, 0) lets NaN through.
  static vi beats(vf v, vf best) { return (v > best) | ((v != v) & (best == best)); }
  static vf relu(vf v) { return reinterpret_cast<vf>(reinterpret_cast<vi>(v) & ~(v < vf{})); }
};

}  // namespace kiln::cpu
