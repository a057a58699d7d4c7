#pragma once
// What Kiln's own int8 kernels on AVX-512 VNNI share (int8_gemm.cpp,
// int8_depthwise.cpp): the four-byte dot product that accumulates in place,
// the requantization of int32 sums, and their narrowing to saturated bytes.
#include <cstdint>

#include "backends/cpu/exp16.h"  // the AVX-512 intrinsics, where the machine has them

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define KILN_INT8_VNNI 1

namespace kiln::cpu::int8_vnni {

// acc += the four byte products of each lane of a (unsigned) and b
// (signed). As an asm statement that updates acc in place: through the
// intrinsic, GCC 12 copied every accumulator to another register and spilled
// half of them each step, and a 12x2 tile ran at half the instruction's rate.
[[gnu::always_inline]] inline void dot_add(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

// Sixteen int32 values stored as bytes, saturated to the 8-bit type's range.
template <bool Signed>
inline void store_saturated(void* y, __mmask16 mask, __m512i q) {
  if constexpr (Signed)
    _mm_mask_storeu_epi8(y, mask, _mm512_cvtsepi32_epi8(q));
  else
    _mm_mask_storeu_epi8(y, mask, _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, _mm512_setzero_si512())));
}

// round(sum * scale + zero) as int32, the zero point added in the same fused
// multiply-add (oneDNN and ONNX Runtime add it after rounding, which differs
// by one only where the product lies within a float32 step of a half); with
// clip, the value first held below 2^30 (past 2^31 the conversion gives
// INT_MIN, which would saturate to the low end).
[[gnu::always_inline]] inline __m512i requantized(__m512i sum, __m512 scale, __m512 zero, bool clip) {
  __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, zero);
  if (clip) v = _mm512_min_ps(v, _mm512_set1_ps(1073741824.0f));
  return _mm512_cvtps_epi32(v);
}

}  // namespace kiln::cpu::int8_vnni

#endif
