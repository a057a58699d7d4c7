#include "backends/cpu/depthwise_vector.h"

// GCC 12 warns that AVX-512 intrinsics' undefined source vectors may be
// used uninitialized (they are fully masked over); the warning is about the
// header's code, so it is silenced around the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>

namespace kiln::cpu {

#if defined(__AVX512F__)

bool depthwise_3x3_vector_applies(const PlainConv& g) {
  return g.kh == 3 && g.kw == 3 && g.dh == 1 && g.dw == 1 && (g.sw == 1 || g.sw == 2);
}

namespace {

// Lanes [0, n) of sixteen.
__mmask16 first_lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << std::max<int64_t>(n, 0)) - 1); }

// Lanes e of sixteen whose column start + e lies in [0, w).
__mmask16 inside(int64_t start, int64_t w) {
  const int64_t lo = std::max<int64_t>(0, -start), hi = std::min<int64_t>(16, w - start);
  return hi <= lo ? __mmask16(0) : __mmask16(first_lanes(hi) & ~first_lanes(lo));
}

}  // namespace

void depthwise_3x3_plane(const PlainConv& g, const float* src, const float* k, float b, bool relu, float* dst) {
  const __m512 zero = _mm512_setzero_ps();
  // Even lanes of two vectors: a stride-2 window's columns.
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  __m512 taps[9];
  for (int t = 0; t < 9; ++t) taps[t] = _mm512_set1_ps(k[t]);
  for (int64_t c0 = 0; c0 < g.ow; c0 += 16) {
    const __mmask16 store = first_lanes(g.ow - c0);
    // For each tap column j, the input columns its lanes read start at
    // first[j]; the masks keep those inside the row (the rest read as 0).
    int64_t first[3];
    __mmask16 lo[3], hi[3];
    for (int j = 0; j < 3; ++j) {
      first[j] = c0 * g.sw - g.pw + j;
      lo[j] = inside(first[j], g.w);
      hi[j] = g.sw == 2 ? inside(first[j] + 16, g.w) : __mmask16(0);
    }
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      __m512 acc = _mm512_set1_ps(b);
      for (int i = 0; i < 3; ++i) {
        const int64_t iy = oy * g.sh - g.ph + i;
        if (iy < 0 || iy >= g.h) continue;
        const float* row = src + iy * g.w;
        for (int j = 0; j < 3; ++j) {
          __m512 v = _mm512_maskz_loadu_ps(lo[j], row + first[j]);
          if (g.sw == 2) v = _mm512_permutex2var_ps(v, even, _mm512_maskz_loadu_ps(hi[j], row + first[j] + 16));
          acc = _mm512_fmadd_ps(taps[i * 3 + j], v, acc);
        }
      }
      if (relu) acc = _mm512_max_ps(zero, acc);  // the second operand where either is NaN: NaN passes
      _mm512_mask_storeu_ps(dst + oy * g.ow + c0, store, acc);
    }
  }
}

#else

bool depthwise_3x3_vector_applies(const PlainConv&) { return false; }
void depthwise_3x3_plane(const PlainConv&, const float*, const float*, float, bool, float*) {}

#endif

}  // namespace kiln::cpu
