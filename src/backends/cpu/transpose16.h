#pragma once
// A 16 x 16 transpose of 32-bit values in AVX-512 registers, for packing
// panels: attention's keys (floats) and matmul_nbits' codes (four bytes of
// k per 32-bit word).
#include <cstdint>

#include "backends/cpu/exp16.h"  // the AVX-512 intrinsics, where the machine has them

#if defined(__AVX512F__)
namespace kiln::cpu {

// 16 rows of 16 floats (rows `stride` apart) transposed into out[c * 16 + r]:
// pairs of rows interleaved, then pairs of pairs, then 128-bit lanes
// exchanged twice.
inline void transpose16(const float* x, int64_t stride, float* out) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(x + i * stride);
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 12; i += (i == 3 ? 5 : 1)) {  // 0-3 and 8-11
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
  }
  for (int i = 0; i < 8; ++i) {
    _mm512_storeu_ps(out + i * 16, _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88));
    _mm512_storeu_ps(out + (i + 8) * 16, _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD));
  }
}

}  // namespace kiln::cpu
#endif
