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

// max(v, 0) as the eager relu computes it: NaN passes through (as in PyTorch).
inline vf relu(vf v) { return keep(~(v < vf{}), v); }
// x * min(max(x + 3, 0), 6) / 6, as the eager hardswish computes it.
inline vf hardswish(vf v) {
  vf gate = v + splat(3.0f);
  gate = gate > vf{} ? gate : vf{};
  gate = gate < splat(6.0f) ? gate : splat(6.0f);
  return v * (gate / splat(6.0f));
}
// min(v, cap) as the eager clamp computes it: NaN passes through.
inline vf cap_at(vf v, vf cap) { return select(v > cap, cap, v); }
inline void relu_in_place(float* p, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store(p + i, relu(load(p + i)));
  for (; i < n; ++i) p[i] = p[i] < 0.0f ? 0.0f : p[i];
}
// The ReLU, then the cap (ReLU6: 6), in one pass.
inline void relu_capped_in_place(float* p, int64_t n, float cap) {
  const vf c = splat(cap);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store(p + i, cap_at(relu(load(p + i)), c));
  for (; i < n; ++i) p[i] = p[i] < 0.0f ? 0.0f : p[i] > cap ? cap : p[i];
}
// Per lane: whether v replaces best as a window's running maximum: a larger
// value, or the first NaN (the eager max-pool's rule, so NaN propagates).
inline vi beats(vf v, vf best) { return (v > best) | ((v != v) & (best == best)); }

}  // namespace kiln::cpu::vec8
