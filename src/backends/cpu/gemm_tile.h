#pragma once
// The register tile of Kiln's own float32 GEMMs (the patch-GEMM convolution,
// linear layers on packed weights): up to kRows rows of A times one
// 16-column panel of packed B, with the epilogue (accumulate, bias, ReLU)
// applied as the tile is stored. tile_of reads A through a function of
// (row, k), so a convolution can read its patches straight from the image. B panels hold, for each k, the
// 16 values of that row of B side by side.
#include <cstdint>
#include <type_traits>

// (exp16.h brings the AVX-512 intrinsics where the machine has them.)
#include "backends/cpu/exp16.h"
#include "backends/cpu/vec8.h"

namespace kiln::cpu::gemm {

constexpr int64_t kCols = 16;  // columns per panel
#if defined(__AVX512F__)
// One 16-float register per row: 12 accumulators of 32 registers, enough
// independent sums to keep both FMA ports busy.
constexpr int64_t kRows = 12;
#else
// Two 8-float registers per row: 12 accumulators of 16 registers.
constexpr int64_t kRows = 6;
#endif

struct Epilogue {
  const float* bias;  // the panel's 16, or null
  bool accumulate;    // add what the output holds (a residual, or earlier passes over k)
  bool last;          // the last pass over k: bias and ReLU
  bool relu;
  bool hardswish = false;  // x * min(max(x + 3, 0), 6) / 6 after the bias, as the eager hardswish
  float cap = 0;           // with relu, above 0: the output capped at it too (ReLU6), NaN passing
  bool swish = false;      // x * sigmoid(x) after the bias (SiLU); AVX-512 only (swish_in_epilogue)
  bool gelu = false;       // x * Φ(x) after the bias (GELU, erf form); AVX-512 only (swish_in_epilogue)
  bool gelu_tanh = false;  // with gelu: its tanh form
};

// A read from channel-blocked images: row r (an output pixel) reads block
// kb (S channels side by side) at block(kb) + r * RowStep, block(kb) being
// corner + kb * plane (a 1x1 convolution: kb is the channel block) or, with
// offsets, corner + offsets[kb] (an implicit GEMM on a padded image: kb is
// a (channel block, tap) pair). The depth is whole blocks (a blocked
// layout's channel count is a multiple of its block).
template <int S, int RowStep = S>
struct BlockedA {
  const float* corner;
  int64_t plane;
  const int64_t* offsets = nullptr;
  const float* block(int64_t kb) const { return corner + (offsets ? offsets[kb] : kb * plane); }
  float operator()(int r, int64_t k) const { return block(k / S)[r * RowStep + k % S]; }
  // f(block, b's S rows for it) for each block of a depth-deep product,
  // a pointer stepped along each (an index multiplied per block cost a
  // one-panel 48-deep tile a sixth of its speed).
  template <typename F>
  [[gnu::always_inline]] void for_blocks(const float* b, int64_t depth, const F& f) const {
    constexpr int64_t kStep = S * kCols;  // floats of one block's rows of a panel
    const float* end = b + depth * kCols;
    if (offsets) {
      for (const int64_t* at = offsets; b < end; ++at, b += kStep) f(corner + *at, b);
      return;
    }
    for (const float* block = corner; b < end; block += plane, b += kStep) f(block, b);
  }
};

// Rows of the next pair of panels (a line, kCols floats, each) to fetch into
// L2 while a pair's tile runs: weights that come from memory, as a
// network's do on every run, then arrive while the tile computes (160 -> 960
// at 7x7, weights not cached: 68 -> 55 us, against 49 with them in cache).
// The tile spreads them evenly over its k loop: issued in a burst before
// it, they filled the line-fill buffers and stalled it (on an Intel
// Sapphire Rapids machine a 50x768x3072 MLP block ran 1.2x slower so, and
// 1.1x slower than with no prefetch at all).
struct Prefetch {
  const float* first = nullptr;
  const float* second = nullptr;
  int64_t rows = 0;
};

#if defined(__AVX512F__)
constexpr bool swish_in_epilogue = true;
#else
constexpr bool swish_in_epilogue = false;
#endif

// Where the tile goes: row r's first 8 columns at c + r * row_stride, its
// last 8 at that + half_offset (8 for row-major output; a channel block's
// size for channel-blocked output; 0 when only the first 8 exist: the last,
// half panel of an 8-channel-blocked output whose channels end there).
struct Output {
  float* c;
  int64_t row_stride, half_offset;
};

#if defined(__AVX512F__)
// x * sigmoid(x) = x / (1 + exp(-x)), NaN passing (the clip in exp16 would
// lose it); -inf gives NaN and a large negative x -0, as the eager ops do.
[[gnu::always_inline]] inline __m512 silu16(__m512 x) {
  const __m512 y = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

// GELU, x * Φ(x) with Φ(x) = erfc(-x / √2) / 2, erfc by Abramowitz and
// Stegun's 7.1.26 (absolute error under 1.5e-7, as oneDNN's gelu_erf):
// erfc(z) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2), t = 1 / (1 + p z),
// for z >= 0; Φ(x) for x > 0 is 1 minus it at |x|. Past z = 9.3 erfc(z) / 2
// is below the smallest float: 0, so that a large negative x gives -0 and
// -inf NaN, as the eager gelu does; NaN passes, +inf gives itself.
[[gnu::always_inline]] inline __m512 gelu16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f));
  // t by a 14-bit reciprocal and a Newton step (a division took half the
  // epilogue's time); z capped so that d stays finite.
  const __m512 d = _mm512_fmadd_ps(_mm512_min_ps(z, _mm512_set1_ps(10.0f)), _mm512_set1_ps(0.3275911f), one);
  __m512 t = _mm512_rcp14_ps(d);
  t = _mm512_mul_ps(t, _mm512_fnmadd_ps(d, t, _mm512_set1_ps(2.0f)));
  __m512 p = _mm512_set1_ps(1.061405429f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
  const __m512 e = exp16(_mm512_mul_ps(z, _mm512_sub_ps(zero, z)));
  __m512 q = _mm512_mul_ps(_mm512_mul_ps(p, t), _mm512_mul_ps(_mm512_set1_ps(0.5f), e));  // Φ(-|x|)
  q = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(z, _mm512_set1_ps(9.3f), _CMP_GT_OQ), q, zero);
  const __m512 phi = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), q, one - q);
  return _mm512_mul_ps(x, phi);
}

// GELU's tanh form, 0.5 x (1 + tanh(u)) with u = √(2/π) (x + 0.044715 x³),
// as x / (1 + exp(-2u)). Past -2u = 88 the eager form's 1 + tanh(u) is 0:
// x times 0 there (-0; -inf gives NaN); NaN passes, +inf gives itself.
[[gnu::always_inline]] inline __m512 gelu_tanh16(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 inner = _mm512_fmadd_ps(x3, _mm512_set1_ps(0.044715f), x);
  const __m512 u = _mm512_mul_ps(inner, _mm512_set1_ps(0.79788456080286536f));
  const __m512 minus_2u = _mm512_mul_ps(u, _mm512_set1_ps(-2.0f));
  const __m512 y = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(minus_2u)));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(minus_2u, _mm512_set1_ps(88.0f), _CMP_GT_OQ), y,
                              _mm512_mul_ps(x, _mm512_setzero_ps()));
}

// 16 floats whose second 8 sit half_offset after the first (8: contiguous;
// 0: there is no second 8), as two 8-float halves: with masked 16-float
// loads and stores instead, MobileNetV2's 144 -> 24 projection into
// 8-channel blocks took 82 us rather than 75.
[[gnu::always_inline]] inline __m512 load16(const float* p, int64_t half_offset) {
  if (half_offset == 8) return _mm512_loadu_ps(p);
  const __m512 lo = _mm512_castps256_ps512(_mm256_loadu_ps(p));
  if (half_offset == 0) return _mm512_insertf32x8(lo, _mm256_setzero_ps(), 1);
  return _mm512_insertf32x8(lo, _mm256_loadu_ps(p + half_offset), 1);
}
[[gnu::always_inline]] inline void store16(float* p, int64_t half_offset, __m512 v) {
  if (half_offset == 8) return _mm512_storeu_ps(p, v);
  _mm256_storeu_ps(p, _mm512_castps512_ps256(v));
  if (half_offset != 0) _mm256_storeu_ps(p + half_offset, _mm512_extractf32x8_ps(v, 1));
}

// A tile's R rows leave the registers: the epilogue, then the stores. Each
// step runs over every row with its test made once per tile: tested per row,
// e's fields were read again after each store (a float store may alias
// them), and on a 16-deep 1x1 tile (MnasNet's 16 -> 48) the epilogue took a
// third of the time; hoisted, that tile runs 1.4x faster. (Always inlined,
// rows unrolled, so the accumulators stay in registers: called out of line
// with the vectors passed in memory, the 1x1 kernel ran at half speed.)
template <int R>
[[gnu::always_inline]] inline void store_tile(__m512* acc, const Output& o, const Epilogue& e) {
  float* const c = o.c;
  const int64_t stride = o.row_stride, half = o.half_offset;
  if (e.accumulate) {
    if (half == 8) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = _mm512_add_ps(acc[r], _mm512_loadu_ps(c + r * stride));
    } else {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = _mm512_add_ps(acc[r], load16(c + r * stride, half));
    }
  }
  if (e.last) {
    // Without a bias, -0 is added: the identity for every float, -0 included.
    const __m512 bias = e.bias ? _mm512_loadu_ps(e.bias) : _mm512_set1_ps(-0.0f);
    const bool relu = e.relu, swish = e.swish, gelu = e.gelu, gelu_tanh = e.gelu_tanh, hardswish = e.hardswish;
    const float cap = e.cap;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r] = _mm512_add_ps(acc[r], bias);
    // max(v, 0) with NaN passed through, as the eager relu does.
    if (relu) {
      const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(acc[r], zero, _CMP_LT_OQ), acc[r], zero);
    }
    if (swish) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = silu16(acc[r]);
    }
    if (gelu) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = gelu_tanh ? gelu_tanh16(acc[r]) : gelu16(acc[r]);
    }
    if (cap > 0) {  // min(v, cap), NaN passing
      const __m512 top = _mm512_set1_ps(cap);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(acc[r], top, _CMP_GT_OQ), acc[r], top);
    }
    if (hardswish) {  // (vector operators: GCC 12 warns falsely on _mm512_max_ps here)
      const __m512 zero = _mm512_setzero_ps(), three = _mm512_set1_ps(3.0f), six = _mm512_set1_ps(6.0f);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        __m512 gate = acc[r] + three;
        gate = gate > zero ? gate : zero;
        gate = gate < six ? gate : six;
        acc[r] = acc[r] * (gate / six);
      }
    }
  }
  if (half == 8) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(c + r * stride, acc[r]);
  } else {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) store16(c + r * stride, half, acc[r]);
  }
}

template <int R, typename AAt>
void tile_of(const AAt& a_at, const float* b, int64_t depth, const Output& o, const Epilogue& e) {
  // Every loop over rows unrolled, so the accumulators stay in registers
  // (GCC otherwise keeps the array in memory and stores it every k).
  __m512 acc[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < depth; ++k) {
    const __m512 bk = _mm512_loadu_ps(b + k * kCols);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a_at(r, k)), bk, acc[r]);
  }
  store_tile<R>(acc, o, e);
}

// One panel from channel-blocked A, k walked a block at a time so that
// every address is a constant offset: computed per k, they took as many
// instructions as the FMAs, and a 16-deep one-panel 1x1 tile ran at 105
// GFLOP/s rather than 130 (AVX-512, one core).
template <int R, int S, int RowStep>
void tile_of(const BlockedA<S, RowStep>& a, const float* b, int64_t depth, const Output& o, const Epilogue& e) {
  __m512 acc[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const auto one_block = [&](const float* block, const float* bb) {
#pragma GCC unroll 16
    for (int kk = 0; kk < S; ++kk) {
      const __m512 bk = _mm512_loadu_ps(bb + kk * kCols);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(block[r * RowStep + kk]), bk, acc[r]);
    }
  };
  a.for_blocks(b, depth, one_block);
  store_tile<R>(acc, o, e);
}

// Issues a Prefetch's rows over a loop of `depth` steps: after step k,
// (k + 1) * rows / depth of them, rounded up.
class PrefetchSpread {
 public:
  PrefetchSpread(const Prefetch& p, int64_t depth) : p_(p), depth_(depth) {}
  [[gnu::always_inline]] void step() {
    for (owed_ += p_.rows; owed_ > 0 && done_ < p_.rows; ++done_, owed_ -= depth_) {
      _mm_prefetch(reinterpret_cast<const char*>(p_.first + done_ * kCols), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(p_.second + done_ * kCols), _MM_HINT_T1);
    }
  }

 private:
  const Prefetch& p_;
  int64_t depth_, owed_ = 0, done_ = 0;
};

// R rows of A times two panels of B (32 columns): 24 accumulators, and two
// loads of B per k for 24 FMAs. One panel's tile loads B once per 12 FMAs
// plus 12 broadcasts of A, which keeps the load ports, not the FMA units,
// the limit (about 80% of peak; the pair reaches about 95%). next: rows to
// fetch meanwhile.
template <int R, typename AAt>
void tile2_of(const AAt& a_at, const float* b0, const float* b1, int64_t depth, const Output& o0, const Output& o1,
              const Epilogue& e0, const Epilogue& e1, const Prefetch& next = {}) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  PrefetchSpread spread(next, depth);
  for (int64_t k = 0; k < depth; ++k) {
    spread.step();
    const __m512 bk0 = _mm512_loadu_ps(b0 + k * kCols), bk1 = _mm512_loadu_ps(b1 + k * kCols);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a_at(r, k));
      acc0[r] = _mm512_fmadd_ps(ar, bk0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(ar, bk1, acc1[r]);
    }
  }
  store_tile<R>(acc0, o0, e0);
  store_tile<R>(acc1, o1, e1);
}

// The pair from channel-blocked A, a block at a time (as tile_of's).
template <int R, int S, int RowStep>
void tile2_of(const BlockedA<S, RowStep>& a, const float* b0, const float* b1, int64_t depth, const Output& o0,
              const Output& o1, const Epilogue& e0, const Epilogue& e1, const Prefetch& next = {}) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  const int64_t second = b1 - b0;  // B's second panel, from the first
  PrefetchSpread spread(next, depth);
  const auto one_block = [&](const float* block, const float* bb) {
#pragma GCC unroll 16
    for (int kk = 0; kk < S; ++kk) {
      spread.step();
      const __m512 bk0 = _mm512_loadu_ps(bb + kk * kCols), bk1 = _mm512_loadu_ps(bb + second + kk * kCols);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512 ar = _mm512_set1_ps(block[r * RowStep + kk]);
        acc0[r] = _mm512_fmadd_ps(ar, bk0, acc0[r]);
        acc1[r] = _mm512_fmadd_ps(ar, bk1, acc1[r]);
      }
    }
  };
  a.for_blocks(b0, depth, one_block);
  store_tile<R>(acc0, o0, e0);
  store_tile<R>(acc1, o1, e1);
}

#else
// store_tile's 8-float form: each row as two halves, the second absent
// where o.half_offset is 0. Tests made once per tile, as there.
template <int R>
[[gnu::always_inline]] inline void store_tile8(vec8::vf* lo, vec8::vf* hi, const Output& o, const Epilogue& e) {
  using vec8::vf;
  float* const c = o.c;
  const int64_t stride = o.row_stride, half = o.half_offset;
  if (e.accumulate) {
    for (int r = 0; r < R; ++r) lo[r] += vec8::load(c + r * stride);
    if (half)
      for (int r = 0; r < R; ++r) hi[r] += vec8::load(c + r * stride + half);
  }
  if (e.last) {
    // Without a bias, -0 is added: the identity for every float, -0 included.
    const vf b0 = e.bias ? vec8::load(e.bias) : vec8::splat(-0.0f), b1 = e.bias ? vec8::load(e.bias + 8) : b0;
    const bool relu = e.relu, hardswish = e.hardswish;
    const float cap = e.cap;
    for (int r = 0; r < R; ++r) lo[r] += b0, hi[r] += b1;
    if (relu)
      for (int r = 0; r < R; ++r) lo[r] = vec8::relu(lo[r]), hi[r] = vec8::relu(hi[r]);
    if (cap > 0)
      for (int r = 0; r < R; ++r)
        lo[r] = vec8::cap_at(lo[r], vec8::splat(cap)), hi[r] = vec8::cap_at(hi[r], vec8::splat(cap));
    if (hardswish)
      for (int r = 0; r < R; ++r) lo[r] = vec8::hardswish(lo[r]), hi[r] = vec8::hardswish(hi[r]);
  }
  for (int r = 0; r < R; ++r) vec8::store(c + r * stride, lo[r]);
  if (half)
    for (int r = 0; r < R; ++r) vec8::store(c + r * stride + half, hi[r]);
}

template <int R, typename AAt>
void tile_of(const AAt& a_at, const float* b, int64_t depth, const Output& o, const Epilogue& e) {
  using vec8::vf;
  vf lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = vf{};
  for (int64_t k = 0; k < depth; ++k) {
    const vf b0 = vec8::load(b + k * kCols), b1 = vec8::load(b + k * kCols + 8);
    for (int r = 0; r < R; ++r) {
      const vf ar = vec8::splat(a_at(r, k));
      lo[r] += ar * b0;
      hi[r] += ar * b1;
    }
  }
  store_tile8<R>(lo, hi, o, e);
}

// Two panels: with 8-float registers one panel's tile already holds 12
// accumulators, so the pair is two tiles. (next: as above, unused here.)
template <int R, typename AAt>
void tile2_of(const AAt& a_at, const float* b0, const float* b1, int64_t depth, const Output& o0, const Output& o1,
              const Epilogue& e0, const Epilogue& e1, const Prefetch& = {}) {
  tile_of<R>(a_at, b0, depth, o0, e0);
  tile_of<R>(a_at, b1, depth, o1, e1);
}
#endif

// f(std::integral_constant<int, rows>{}) for rows from 1 to kRows, so that
// tiles of any height run with their loops over rows unrolled.
template <int R = kRows, typename F>
void with_rows(int64_t rows, const F& f) {
  if constexpr (R > 1) {
    if (rows < R) return with_rows<R - 1>(rows, f);
  }
  f(std::integral_constant<int, R>{});
}

// tile_of and tile2_of for 1 to kRows rows.
template <typename AAt>
void tile_rows_of(int64_t rows, const AAt& a_at, const float* b, int64_t depth, const Output& o, const Epilogue& e) {
  with_rows(rows, [&](auto r) { tile_of<decltype(r)::value>(a_at, b, depth, o, e); });
}
template <typename AAt>
void tile2_rows_of(int64_t rows, const AAt& a_at, const float* b0, const float* b1, int64_t depth, const Output& o0,
                   const Output& o1, const Epilogue& e0, const Epilogue& e1, const Prefetch& next = {}) {
  with_rows(rows, [&](auto r) { tile2_of<decltype(r)::value>(a_at, b0, b1, depth, o0, o1, e0, e1, next); });
}

// The same with A's rows lda apart in memory.
inline void tile_rows(int64_t rows, const float* a, int64_t lda, const float* b, int64_t depth, const Output& o,
                      const Epilogue& e) {
  tile_rows_of(rows, [a, lda](int r, int64_t k) { return a[r * lda + k]; }, b, depth, o, e);
}
inline void tile2_rows(int64_t rows, const float* a, int64_t lda, const float* b0, const float* b1, int64_t depth,
                       const Output& o0, const Output& o1, const Epilogue& e0, const Epilogue& e1,
                       const Prefetch& next = {}) {
  tile2_rows_of(
      rows, [a, lda](int r, int64_t k) { return a[r * lda + k]; }, b0, b1, depth, o0, o1, e0, e1, next);
}

}  // namespace kiln::cpu::gemm
