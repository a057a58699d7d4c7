#pragma once
// Eight floats as one value (GCC/Clang vector extensions), for kernels on
// channel-blocked data where eight channels sit side by side. Written with
// bit operations rather than per-lane branches: the compiler's if-conversion
// of per-lane loops produced masked stores, which are slow.
#include <cstdint>
#include <cstring>

namespace kiln::cpu::vec8 {

using vf = float __attribute__((vector_size(32)));
using vi = int32_t __attribute__((vector_size(32)));

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{x, x, x, x, x, x, x, x}; }
// v where mask is set, else 0.
inline vf keep(vi mask, vf v) { return reinterpret_cast<vf>(reinterpret_cast<vi>(v) & mask); }
// a where mask is set, else b.
inline vf select(vi mask, vf a, vf b) {
  return reinterpret_cast<vf>((reinterpret_cast<vi>(a) & mask) | (reinterpret_cast<vi>(b) & ~mask));
}

}  // namespace kiln::cpu::vec8
