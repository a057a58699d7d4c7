#pragma once
// exp of 16 floats in one AVX-512 register, for the kernels that take it
// inline (the tiles' SiLU and GELU epilogues, the softmax row).
#if defined(__AVX512F__)
// GCC 12 warns that AVX-512 intrinsics' undefined source vectors are or may
// be used uninitialized (they are fully masked over); the warning is about
// the header's code, so it is silenced around the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace kiln::cpu {

// exp(x) for 16 floats (Cephes' single-precision polynomial, within 2 ulp):
// 2^n times exp(r) with r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2], x clipped
// to [-87.3, 89] first: below, exp would be subnormal; above, the scaling
// overflows to infinity, as exp does.
[[gnu::always_inline]] inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

}  // namespace kiln::cpu
#endif
