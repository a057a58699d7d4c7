#pragma once
// The first of n floating values that is inf or NaN, for first_non_finite
// and the all_finite op's kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::detail {

// Row-major index of the first inf or NaN (its exponent bits all set) of n
// values, or -1. Blocks are checked with no branch per value, a maximum over
// the exponent bits, which vectorizes; only a block that holds one is
// scanned again (value by value, a [1, 3, 224, 224] input took 40 us).
template <typename T, typename Bits>
int64_t first_non_finite_in(const T* v, int64_t n, Bits exponent) {
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    Bits most = 0;
    for (int64_t i = begin; i < end; ++i) {
      Bits bits;
      std::memcpy(&bits, v + i, sizeof bits);
      most = std::max<Bits>(most, bits & exponent);
    }
    if (most != exponent) continue;
    for (int64_t i = begin; i < end; ++i)
      if (!std::isfinite(v[i])) return i;
  }
  return -1;
}

inline int64_t first_non_finite_f32(const float* v, int64_t n) {
  return first_non_finite_in(v, n, uint32_t{0x7f800000});
}
inline int64_t first_non_finite_f64(const double* v, int64_t n) {
  return first_non_finite_in(v, n, uint64_t{0x7ff0000000000000});
}
// float16 and bfloat16 by their bits: exponent all ones is inf or NaN.
inline bool any_non_finite_16(const uint16_t* v, int64_t n, uint16_t exponent) {
  uint16_t most = 0;
  for (int64_t i = 0; i < n; ++i) most = std::max<uint16_t>(most, v[i] & exponent);
  return most == exponent;
}

}  // namespace kiln::detail
