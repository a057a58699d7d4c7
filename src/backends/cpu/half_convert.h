#pragma once
// float32 <-> float16/bfloat16 over whole arrays, the casts around every
// half-precision op on the CPU (mixed precision, half-precision models):
// F16C's vector conversions where the CPU has them, and loops the compiler
// vectorizes for bfloat16. Each rounds as Half's and BFloat16's
// constructors do (to nearest even; NaN stays NaN).
#include <cstdint>

#if defined(__F16C__)  // 8 at a time: GCC 12 warns wrongly inside AVX-512's 16-wide forms
#include <immintrin.h>
#endif

#include "kiln/dtype.h"

namespace kiln::cpu {

inline void float_to_half(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) dst[i] = Half(src[i]).bits;
}

inline void half_to_float(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) {
    Half h;
    h.bits = src[i];
    dst[i] = static_cast<float>(h);
  }
}

// (BFloat16's own conversions vectorize as they are.)
inline void float_to_bfloat16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16(src[i]).bits;
}

inline void bfloat16_to_float(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    BFloat16 b;
    b.bits = src[i];
    dst[i] = static_cast<float>(b);
  }
}

}  // namespace kiln::cpu
