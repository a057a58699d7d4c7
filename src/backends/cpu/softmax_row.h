#pragma once
// The softmax of one contiguous row, shared by the softmax and attention
// kernels.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/exp16.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/vec8.h"

namespace kiln::cpu {

// The exponentials of one contiguous row shifted by its maximum, written to
// py (px may be py; for float16/bfloat16 only with `write`), and their sum;
// *max gets the maximum (-inf: every value was -inf).
#if defined(__AVX512F__)
// exp_sum_row for float32 in two passes of 16 lanes, the exponentials
// inline (exp16), each summed as it is made: the four passes below (the
// maximum in 8 lanes, libmvec's exp, the sum, the scaling) took a third of
// a BERT-style layer's attention. Value j sits in lane j % 16 whatever n
// is, so a row cut short (a causal row's visible keys) and the whole row
// with the rest masked to -inf sum alike, bit for bit. Returns false where
// the maximum is -inf (nothing to shift by), for the general loop.
inline bool exp_sum_row16(const float* px, float* py, int64_t n, float* max, bool write, float* sum) {
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 lanes = minus_inf;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {  // a NaN never replaces the maximum
    const __m512 v = _mm512_loadu_ps(px + j);
    lanes = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lanes, _CMP_GT_OQ), lanes, v);
  }
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
  if (tail) {
    const __m512 v = _mm512_mask_loadu_ps(minus_inf, tail, px + j);
    lanes = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lanes, _CMP_GT_OQ), lanes, v);
  }
  const float m = _mm512_reduce_max_ps(lanes);
  *max = m;
  if (m == -std::numeric_limits<float>::infinity()) return false;
  // exp(x - m): 0 below -87 (masked scores; exp16 would clip them to
  // 1e-38), NaN kept (exp16 would clip it away too).
  const __m512 shift = _mm512_set1_ps(m), low = _mm512_set1_ps(-87.0f);
  auto exp_of = [&](__m512 x) {
    const __m512 d = _mm512_sub_ps(x, shift);
    const __m512 e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q), exp16(d), d);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(d, low, _CMP_LT_OQ), e, _mm512_setzero_ps());
  };
  __m512 total = _mm512_setzero_ps();
  for (j = 0; j + 16 <= n; j += 16) {
    const __m512 e = exp_of(_mm512_loadu_ps(px + j));
    total = _mm512_add_ps(total, e);
    if (write) _mm512_storeu_ps(py + j, e);
  }
  if (tail) {
    const __m512 e = _mm512_maskz_mov_ps(tail, exp_of(_mm512_maskz_loadu_ps(tail, px + j)));
    total = _mm512_add_ps(total, e);
    if (write) _mm512_mask_storeu_ps(py + j, tail, e);
  }
  *sum = _mm512_reduce_add_ps(total);
  return true;
}
#endif

template <typename T>
inline compute_t<T> exp_sum_row(const T* px, T* py, int64_t n, compute_t<T>* max, bool write = true) {
  using C = compute_t<T>;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    float sum;
    if (exp_sum_row16(px, py, n, max, write, &sum)) return sum;
  }
#endif
  C m = -std::numeric_limits<C>::infinity();
  int64_t first = 0;
  if constexpr (std::is_same_v<T, float>) {
    // The maximum in 8 lanes: std::max in a loop is a serial chain (it does
    // not vectorize without -ffast-math) and took half of softmax's time.
    // Same rule per lane: a NaN never replaces the maximum.
    vec8::vf lanes = vec8::splat(m);
    for (; first + 8 <= n; first += 8) {
      const vec8::vf v = vec8::load(px + first);
      lanes = vec8::select(v > lanes, v, lanes);
    }
    float lane[8];
    vec8::store(lane, lanes);
    for (float v : lane) m = std::max(m, v);
  }
  for (int64_t r = first; r < n; ++r) m = std::max(m, static_cast<C>(px[r]));
  *max = m;
  C s = 0;
  if constexpr (std::is_same_v<T, C>) {
    // exp in a loop of its own so it vectorizes (libmvec); a running sum in the
    // same loop would keep it scalar. Then the sum in 8 lanes. Arguments below
    // `low` (masked -inf scores) give 0 directly: libmvec takes a slow path for
    // -inf and for subnormal results (a causal mask made softmax 3.4x slower).
    const C low = std::is_same_v<C, float> ? C(-87) : C(-708);
    for (int64_t r = 0; r < n; ++r) {
      C d = px[r] - m;
      C e = std::exp(d < low ? low : d);
      py[r] = d < low ? C(0) : e;
    }
    C lanes[8] = {};
    int64_t r = 0;
    if constexpr (std::is_same_v<C, float>) {
      // As one 8-float value: written as an array, GCC preferring 512-bit
      // vectors moved each lane through scalar registers.
      vec8::vf sum{};
      for (; r + 8 <= n; r += 8) sum += vec8::load(py + r);
      vec8::store(lanes, sum);
    } else {
      for (; r + 8 <= n; r += 8)
        for (int k = 0; k < 8; ++k) lanes[k] += py[r + k];
    }
    for (; r < n; ++r) s += py[r];
    for (int k = 0; k < 8; ++k) s += lanes[k];
  } else {
    for (int64_t r = 0; r < n; ++r) {
      C ev = std::exp(static_cast<C>(px[r]) - m);
      s += ev;
      if (write) py[r] = static_cast<T>(ev);
    }
  }
  return s;
}

// One softmax (or log-softmax) over n contiguous values: three passes the
// compiler vectorizes. px may be py. Returns the maximum (-inf: every value
// was -inf, and the row holds NaN).
template <typename T, bool kLog>
inline compute_t<T> softmax_row(const T* px, T* py, int64_t n) {
  using C = compute_t<T>;
  C m;
  const C s = exp_sum_row(px, py, n, &m, !kLog);
  if (kLog) {
    C lse = m + std::log(s);
    for (int64_t r = 0; r < n; ++r) py[r] = static_cast<T>(static_cast<C>(px[r]) - lse);
  } else {
    C inv = C(1) / s;
    for (int64_t r = 0; r < n; ++r) py[r] = static_cast<T>(static_cast<C>(py[r]) * inv);
  }
  return m;
}

// The gradient of a softmax (times `scale`) on one row, in place: dy
// becomes y (dy - sum(dy y)) scale over n values (attention's ds from dp
// and the weights). For float32 the sum runs in 16 lanes: one running sum
// waits on the add at every value.
template <typename T>
inline void softmax_gradient_row(T* dy, const T* y, int64_t n, T scale) {
  T seen = 0;
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    vec8::vf lo{}, hi{};
    for (; j + 16 <= n; j += 16) {
      lo += vec8::load(dy + j) * vec8::load(y + j);
      hi += vec8::load(dy + j + 8) * vec8::load(y + j + 8);
    }
    float lanes[8];
    vec8::store(lanes, lo + hi);
    for (float v : lanes) seen += v;
  }
  for (; j < n; ++j) seen += dy[j] * y[j];
  for (j = 0; j < n; ++j) dy[j] = y[j] * (dy[j] - seen) * scale;
}

}  // namespace kiln::cpu
