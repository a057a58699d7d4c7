// matmul_nbits with accuracy_level 4 (ONNX Runtime's "int8 compute"): a's
// rows rounded to int8 per block, each block's products summed in
// integers, times a's scale and the block's. 4-bit codes in blocks of 32 or
// more run on vpdpbusd where the build has AVX-512 VNNI. One or two rows (a
// decoded token): 64 codes of an output at a time, the nibbles of 32 bytes
// split into bytes by a mask and a shift, against a's int8 values laid out
// once per call in the order that split gives, each unit's sums scaled lane
// by lane. More rows (a prompt): sixteen outputs' codes unpacked once into
// a panel, four k of all sixteen per vpdpbusd against four of a row's
// broadcast, as Kiln's int8 GEMM tiles do, so that a block's sums are
// scaled once for sixteen outputs (a 4096x4096 product of 32 rows 9.7 ->
// 3.5 ms). The zero points come off once per output, as zero * scale *
// a_scale * (the sum of a's int8 values over the block). Elsewhere an int32
// loop.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/int8_vnni.h"
#include "backends/cpu/nbits_matmul.h"
#include "backends/cpu/transpose16.h"
#include "kiln/parallel.h"

namespace kiln::cpu::nbits {
namespace {

// a rounded per block: scale max |a| / 127, values round(a / scale) half
// to even, and each block's sum of them times the scale.
struct RoundedA {
  std::vector<int8_t> values;        // [m, padded_k], zero past K
  std::vector<float> scales;         // [m, blocks]
  std::vector<float> weighted_sums;  // [m, blocks]: scale * the block's sum of values
};

// One block of a row: its values into `to`, its scale and the sum of its values.
void round_block(const float* x, int64_t count, int8_t* to, float* scale_out, int32_t* sum_out) {
  float most = 0.0f;
  int64_t k = 0;
#if KILN_INT8_VNNI
  // Sixteen at a time, the same arithmetic as the loop below (a product,
  // rounding half to even, a clamp), so the values are the same.
  __m512 wide = _mm512_setzero_ps();
  for (; k + 16 <= count; k += 16) wide = _mm512_max_ps(wide, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  most = _mm512_reduce_max_ps(wide);
  for (; k < count; ++k) most = std::max(most, std::fabs(x[k]));
  const float scale = most / 127.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  const __m512 times = _mm512_set1_ps(inverse), top = _mm512_set1_ps(127.0f), bottom = _mm512_set1_ps(-127.0f);
  __m512i sums = _mm512_setzero_si512();
  for (k = 0; k + 16 <= count; k += 16) {
    const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k), times),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, bottom), top));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + k), _mm512_cvtepi32_epi8(q));
    sums = _mm512_add_epi32(sums, q);
  }
  int32_t sum = _mm512_reduce_add_epi32(sums);
#else
  for (; k < count; ++k) most = std::max(most, std::fabs(x[k]));
  const float scale = most / 127.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
  int32_t sum = 0;
  k = 0;
#endif
  for (; k < count; ++k) {
    const auto v = static_cast<int8_t>(std::clamp(std::nearbyint(x[k] * inverse), -127.0f, 127.0f));
    to[k] = v;
    sum += v;
  }
  *scale_out = scale;
  *sum_out = sum;
}

RoundedA rounded(const Shape& s, const float* a) {
  RoundedA r;
  const int64_t width = s.padded_k();
  r.values.assign(static_cast<size_t>(s.m * width), 0);
  r.scales.assign(static_cast<size_t>(s.m * s.blocks), 0.0f);
  r.weighted_sums.assign(static_cast<size_t>(s.m * s.blocks), 0.0f);
  parallel_for(s.m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, s.k)), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      for (int64_t j = 0; j < s.blocks; ++j) {
        const int64_t first = j * s.block, last = std::min(s.k, first + s.block);
        float scale = 0.0f;
        int32_t sum = 0;
        round_block(a + row * s.k + first, last - first, r.values.data() + row * width + first, &scale, &sum);
        r.scales[static_cast<size_t>(row * s.blocks + j)] = scale;
        r.weighted_sums[static_cast<size_t>(row * s.blocks + j)] = scale * static_cast<float>(sum);
      }
  });
  return r;
}

// bias - the sum over blocks of zero * scale * a_scale * (the block's sum of
// a's values), for output n of rows [r0, r0 + R) (128 blocks for a
// 4096-deep product, so 16 at a time where the machine has AVX-512).
template <int R>
void offsets(const Shape& s, const Weights& w, const RoundedA& a, int64_t r0, int64_t n, float (&out)[R]) {
  const float* scales = w.scales + n * s.blocks;
  const float* zeros = w.zeros ? w.zeros + n * s.blocks : nullptr;
  const float fixed = static_cast<float>(1 << (s.bits - 1));
  float sums[R];
#if defined(__AVX512F__)
  __m512 parts[R];
  for (int r = 0; r < R; ++r) parts[r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < s.blocks; j += 16) {
    const auto mask = static_cast<__mmask16>(s.blocks - j >= 16 ? 0xFFFF : (1u << (s.blocks - j)) - 1);
    const __m512 z = zeros ? _mm512_maskz_loadu_ps(mask, zeros + j) : _mm512_set1_ps(fixed);
    const __m512 zs = _mm512_mul_ps(z, _mm512_maskz_loadu_ps(mask, scales + j));
    for (int r = 0; r < R; ++r)
      parts[r] =
          _mm512_fmadd_ps(zs, _mm512_maskz_loadu_ps(mask, a.weighted_sums.data() + (r0 + r) * s.blocks + j), parts[r]);
  }
  for (int r = 0; r < R; ++r) sums[r] = _mm512_reduce_add_ps(parts[r]);
#else
  for (int r = 0; r < R; ++r) {
    sums[r] = 0.0f;
    for (int64_t j = 0; j < s.blocks; ++j)
      sums[r] += (zeros ? zeros[j] : fixed) * scales[j] * a.weighted_sums[(r0 + r) * s.blocks + j];
  }
#endif
  for (int r = 0; r < R; ++r) out[r] = (w.bias ? w.bias[n] : 0.0f) - sums[r];
}

// Any code width and block: an int32 sum per block.
void plain(const Shape& s, const RoundedA& a, const Weights& w, float* y) {
  const int64_t width = s.padded_k();
  parallel_for(s.n, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, s.k)), [&](int64_t lo, int64_t hi) {
    for (int64_t n = lo; n < hi; ++n)
      for (int64_t row = 0; row < s.m; ++row) {
        float sum = 0.0f;
        for (int64_t j = 0; j < s.blocks; ++j) {
          const uint8_t* codes = w.codes + (n * s.blocks + j) * s.blob;
          const int8_t* x = a.values.data() + row * width + j * s.block;
          int32_t products = 0;
          for (int64_t i = 0; i < s.block; ++i) products += code_at(s, codes, i) * x[i];
          sum += static_cast<float>(products) * (a.scales[row * s.blocks + j] * w.scales[n * s.blocks + j]);
        }
        float off[1];
        offsets<1>(s, w, a, row, n, off);
        y[row * s.n + n] = sum + off[0];
      }
  });
}

#if KILN_INT8_VNNI

constexpr int kOutputs = 4;  // outputs (rows of b) a tile takes
constexpr int kUnit = 64;    // codes a vpdpbusd takes

// A unit's 64 codes come in the order the split gives them: the low
// nibbles of its two 16-byte runs (even k of each), then their high nibbles
// (odd k); a's values are laid out in that order (units_of).

// The 64 codes of unit u of a row of 4-bit codes, as bytes in unit order;
// the last unit may hold one run only (an odd count of 32-code blocks).
// (The 32 bytes loaded into both halves, the upper half's words shifted:
// two vector operations, where splitting then joining the halves took four.)
[[gnu::always_inline]] inline __m512i unit_codes(const uint8_t* row, int64_t u, bool half) {
  const __m256i packed = half ? _mm256_maskz_loadu_epi8(0xFFFF, row + u * 32)
                              : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + u * 32));
  const __m512i both = _mm512_broadcast_i64x4(packed);
#if defined(__GFNI__)
  // One affine map over GF(2) per byte: the lower half keeps each byte's low
  // nibble, the upper half moves its high nibble down.
  const __m512i nibbles =
      _mm512_set_epi64(0x1020408000000000ll, 0x1020408000000000ll, 0x1020408000000000ll, 0x1020408000000000ll,
                       0x0102040800000000ll, 0x0102040800000000ll, 0x0102040800000000ll, 0x0102040800000000ll);
  return _mm512_gf2p8affine_epi64_epi8(both, nibbles, 0);
#else
  return _mm512_and_si512(_mm512_mask_srli_epi16(both, 0xFFFF0000u, both, 4), _mm512_set1_epi8(0x0F));
#endif
}

// A unit's scales lane by lane: lanes of its second run (4-7, 12-15) take
// block `second`'s.
[[gnu::always_inline]] inline __m512 unit_scales(float first, float second) {
  return _mm512_mask_blend_ps(0xF0F0, _mm512_set1_ps(first), _mm512_set1_ps(second));
}

// a's int8 values of each row in unit order, zeros past K:
// in each 16-byte lane its even bytes then its odd ones (one byte shuffle),
// then the lanes' halves regrouped (one permutation of 8-byte words).
std::vector<int8_t> units_of(const Shape& s, const RoundedA& a, int64_t units) {
  const int64_t width = s.padded_k();
  std::vector<int8_t> r(static_cast<size_t>(s.m * units * kUnit));
  const __m512i evens_then_odds =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m512i regroup = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t row = 0; row < s.m; ++row)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t count = std::min<int64_t>(kUnit, width - u * kUnit);
      const __mmask64 mask = count == kUnit ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
      const __m512i x = _mm512_maskz_loadu_epi8(mask, a.values.data() + row * width + u * kUnit);
      _mm512_storeu_si512(r.data() + (row * units + u) * kUnit,
                          _mm512_permutexvar_epi64(regroup, _mm512_shuffle_epi8(x, evens_then_odds)));
    }
  return r;
}

// Sixteen outputs from n0 as the many-row tiles read them: their codes as
// bytes, four k a lane ([k / 4][16 outputs][4]: one vpdpbusd takes four k of
// all sixteen against four of a row's, broadcast), and their scales per
// block ([blocks][16]); outputs past n as zeros.
constexpr int kPanel = 16;
struct Panel {
  std::vector<uint8_t> natural;  // [16][padded_k]: each output's codes in k order
  std::vector<uint8_t> codes;    // [padded_k / 4][16][4]
  std::vector<float> scales;     // [blocks][16]
};

void unpack_panel(const Shape& s, const Weights& w, int64_t n0, Panel& p) {
  const int64_t width = s.padded_k(), row_bytes = s.blocks * s.blob, outputs = std::min<int64_t>(kPanel, s.n - n0);
  p.natural.resize(static_cast<size_t>(kPanel * width));
  p.codes.resize(static_cast<size_t>(kPanel * width));
  p.scales.assign(static_cast<size_t>(s.blocks * kPanel), 0.0f);
  // (every output's codes are written below; only those past n are zeros)
  std::fill(p.natural.begin() + outputs * width, p.natural.end(), 0);
  const __m128i low = _mm_set1_epi8(0x0F);
  for (int64_t o = 0; o < outputs; ++o) {
    const uint8_t* row = w.codes + (n0 + o) * row_bytes;
    uint8_t* to = p.natural.data() + o * width;
    for (int64_t b = 0; b < row_bytes; b += 16) {  // 32 codes: byte i holds k = 2i (low bits) and 2i + 1
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b));
      const __m128i lo = _mm_and_si128(x, low), hi = _mm_and_si128(_mm_srli_epi16(x, 4), low);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 2 * b), _mm_unpacklo_epi8(lo, hi));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 2 * b + 16), _mm_unpackhi_epi8(lo, hi));
    }
    for (int64_t j = 0; j < s.blocks; ++j)
      p.scales[static_cast<size_t>(j * kPanel + o)] = w.scales[(n0 + o) * s.blocks + j];
  }
  // Four k of each output side by side: the outputs' 32-bit words
  // transposed, 16 x 16 in registers (a gather per four k took half the
  // time of a 16-row product), the last few by a gather of one word per output.
  const int64_t words = width / 4, whole = words / 16 * 16;
  for (int64_t g = 0; g < whole; g += 16)
    transpose16(reinterpret_cast<const float*>(p.natural.data()) + g, words,
                reinterpret_cast<float*>(p.codes.data()) + g * 16);
  const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int32_t>(words)));
  for (int64_t g = whole; g < words; ++g)
    _mm512_storeu_si512(p.codes.data() + g * 64,
                        _mm512_i32gather_epi32(_mm512_add_epi32(rows, _mm512_set1_epi32(static_cast<int32_t>(g))),
                                               p.natural.data(), 4));
}

// Rows [r0, r0 + R) of a by the panel's sixteen outputs from n0: per block,
// its eight groups of four k on vpdpbusd into int32 sums, then one
// conversion and one fused multiply-add with a_scale * the outputs' scales.
template <int R>
void panel_tile(const Shape& s, const RoundedA& a, const Weights& w, const Panel& p, int64_t r0, int64_t n0, float* y) {
  const int64_t width = s.padded_k(), groups = s.block / 4;
  __m512 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < s.blocks; ++j) {
    __m512i sums[R];
    for (int r = 0; r < R; ++r) sums[r] = _mm512_setzero_si512();
    const uint8_t* codes = p.codes.data() + j * groups * 64;
    const int8_t* x = a.values.data() + r0 * width + j * s.block;
    for (int64_t g = 0; g < groups; ++g, codes += 64, x += 4) {
      const __m512i c = _mm512_loadu_si512(codes);
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, x + r * width, 4);
        int8_vnni::dot_add(sums[r], c, _mm512_set1_epi32(four));
      }
    }
    const __m512 scales = _mm512_loadu_ps(p.scales.data() + j * kPanel);
    for (int r = 0; r < R; ++r)
      total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]),
                                 _mm512_mul_ps(_mm512_set1_ps(a.scales[(r0 + r) * s.blocks + j]), scales), total[r]);
  }
  const int64_t outputs = std::min<int64_t>(kPanel, s.n - n0);
  alignas(64) float lanes[kPanel];
  for (int r = 0; r < R; ++r) {
    _mm512_store_ps(lanes, total[r]);
    for (int64_t o = 0; o < outputs; ++o) y[(r0 + r) * s.n + n0 + o] = lanes[o];
  }
  for (int64_t o = 0; o < outputs; ++o) {
    float off[R];
    offsets<R>(s, w, a, r0, n0 + o, off);
    for (int r = 0; r < R; ++r) y[(r0 + r) * s.n + n0 + o] += off[r];
  }
}

// panel_tile for 1 to kPanelRows rows.
constexpr int kPanelRows = 12;  // 12 int32 sums and 12 float totals in registers
template <int R = kPanelRows>
void panel_rows(int64_t rows, const Shape& s, const RoundedA& a, const Weights& w, const Panel& p, int64_t r0,
                int64_t n0, float* y) {
  if constexpr (R > 1) {
    if (rows < R) return panel_rows<R - 1>(rows, s, a, w, p, r0, n0, y);
  }
  panel_tile<R>(s, a, w, p, r0, n0, y);
}

// One unit of one row of a against kOutputs rows of codes.
template <bool Half>
[[gnu::always_inline]] inline void one_unit(const uint8_t* const (&rows)[kOutputs],
                                            const float* const (&scales)[kOutputs], int64_t u, int64_t first,
                                            int64_t second, __m512i x, __m512 x_scales, __m512 (&total)[kOutputs]) {
#pragma GCC unroll 4
  for (int i = 0; i < kOutputs; ++i) {
    const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), unit_codes(rows[i], u, Half), x);
    total[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                               _mm512_mul_ps(x_scales, unit_scales(scales[i][first], scales[i][second])), total[i]);
  }
}

// One row of a (a decoded token) by outputs [n0, n0 + kOutputs), the codes
// unpacked as they are used: what a row waits on is b's bytes.
void one_row(const Shape& s, const std::vector<int8_t>& a, const RoundedA& rounded_a, const Weights& w, int64_t units,
             int64_t row, int64_t n0, float* y) {
  const int64_t row_bytes = s.blocks * s.blob, outputs = std::min<int64_t>(kOutputs, s.n - n0);
  const int shift = __builtin_ctzll(static_cast<uint64_t>(s.block));
  const uint8_t* rows[kOutputs];
  const float* scales[kOutputs];
  for (int i = 0; i < kOutputs; ++i) {
    const int64_t n = std::min(n0 + i, s.n - 1);  // (past n: the last again, not stored)
    rows[i] = w.codes + n * row_bytes;
    scales[i] = w.scales + n * s.blocks;
  }
  __m512 total[kOutputs];
  for (int i = 0; i < kOutputs; ++i) total[i] = _mm512_setzero_ps();
  const int8_t* x = a.data() + row * units * kUnit;
  const float* x_scales = rounded_a.scales.data() + row * s.blocks;
  const int64_t whole = s.padded_k() / kUnit;
  for (int64_t u = 0; u < whole; ++u) {
    const int64_t first = (u * kUnit) >> shift, second = (u * kUnit + 32) >> shift;
    one_unit<false>(rows, scales, u, first, second, _mm512_loadu_si512(x + u * kUnit),
                    unit_scales(x_scales[first], x_scales[second]), total);
  }
  if (whole < units) {  // the last unit's one run
    const int64_t first = (whole * kUnit) >> shift;
    one_unit<true>(rows, scales, whole, first, first, _mm512_loadu_si512(x + whole * kUnit),
                   _mm512_set1_ps(x_scales[first]), total);
  }
  // The zero points' part (offsets' sum) joins each total before its one
  // horizontal sum: called per output, offsets took a third of this kernel's time.
  const float fixed = static_cast<float>(1 << (s.bits - 1));
  const float* weighted = rounded_a.weighted_sums.data() + row * s.blocks;
  for (int64_t i = 0; i < outputs; ++i) {
    const int64_t n = n0 + i;
    const float* block_scales = w.scales + n * s.blocks;
    const float* zeros = w.zeros ? w.zeros + n * s.blocks : nullptr;
    for (int64_t j = 0; j < s.blocks; j += 16) {
      const auto mask = static_cast<__mmask16>(s.blocks - j >= 16 ? 0xFFFF : (1u << (s.blocks - j)) - 1);
      const __m512 z = zeros ? _mm512_maskz_loadu_ps(mask, zeros + j) : _mm512_set1_ps(fixed);
      total[i] = _mm512_fnmadd_ps(_mm512_mul_ps(z, _mm512_maskz_loadu_ps(mask, block_scales + j)),
                                  _mm512_maskz_loadu_ps(mask, weighted + j), total[i]);
    }
    y[row * s.n + n] = _mm512_reduce_add_ps(total[i]) + (w.bias ? w.bias[n] : 0.0f);
  }
}

// For a row or two, each task takes kOutputs outputs and unpacks their
// codes as it goes; for more, kPanel outputs unpacked once into a panel that
// every tile of up to 12 rows reads.
void vnni(const Shape& s, const RoundedA& rounded_a, const Weights& w, float* y) {
  if (s.m <= 2) {
    const int64_t units = (s.padded_k() + kUnit - 1) / kUnit;
    const std::vector<int8_t> a = units_of(s, rounded_a, units);
    parallel_for((s.n + kOutputs - 1) / kOutputs, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t group = lo; group < hi; ++group)
        for (int64_t r = 0; r < s.m; ++r) one_row(s, a, rounded_a, w, units, r, group * kOutputs, y);
    });
    return;
  }
  // Rows in tiles as even as they can be (16 rows: two of 8, not 12 and 4).
  const int64_t tiles = (s.m + kPanelRows - 1) / kPanelRows, per_tile = (s.m + tiles - 1) / tiles;
  parallel_for((s.n + kPanel - 1) / kPanel, 1, [&](int64_t lo, int64_t hi) {
    Panel p;
    for (int64_t panel = lo; panel < hi; ++panel) {
      unpack_panel(s, w, panel * kPanel, p);
      for (int64_t r = 0; r < s.m; r += per_tile)
        panel_rows(std::min<int64_t>(per_tile, s.m - r), s, rounded_a, w, p, r, panel * kPanel, y);
    }
  });
}

#endif

}  // namespace

void int8_product(const Shape& s, const float* a, const Weights& w, float* y) {
  const RoundedA rounded_a = rounded(s, a);
#if KILN_INT8_VNNI
  if (s.bits == 4 && s.block >= 32) return vnni(s, rounded_a, w, y);
#endif
  plain(s, rounded_a, w, y);
}

}  // namespace kiln::cpu::nbits
