// matmul_nbits with accuracy_level 4 (ONNX Runtime's "int8 compute"): a's
// rows rounded to int8 per block, each block's products summed in
// integers, times a's scale and the block's. 4-bit codes in blocks of 32 or
// more run on vpdpbusd where the build has AVX-512 VNNI: 64 codes at a time,
// the nibbles of 32 bytes split into bytes by a mask and a shift, against
// a's int8 values laid out once per call in the order that split gives;
// the zero points come off once per output, as zero * scale * a_scale *
// (the sum of a's int8 values over the block). Elsewhere an int32 loop.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/int8_vnni.h"
#include "backends/cpu/nbits_matmul.h"
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

RoundedA rounded(const Shape& s, const float* a) {
  RoundedA r;
  const int64_t width = s.padded_k();
  r.values.assign(static_cast<size_t>(s.m * width), 0);
  r.scales.assign(static_cast<size_t>(s.m * s.blocks), 0.0f);
  r.weighted_sums.assign(static_cast<size_t>(s.m * s.blocks), 0.0f);
  parallel_for(s.m, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row)
      for (int64_t j = 0; j < s.blocks; ++j) {
        const int64_t first = j * s.block, last = std::min(s.k, first + s.block);
        const float* x = a + row * s.k;
        float most = 0.0f;
        for (int64_t k = first; k < last; ++k) most = std::max(most, std::fabs(x[k]));
        const float scale = most / 127.0f, inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
        int32_t sum = 0;
        for (int64_t k = first; k < last; ++k) {
          const auto v = static_cast<int8_t>(std::clamp(std::nearbyint(x[k] * inverse), -127.0f, 127.0f));
          r.values[static_cast<size_t>(row * width + k)] = v;
          sum += v;
        }
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

// The order of a unit's 64 codes as the split gives them: the low nibbles
// of its two 16-byte runs (even k of each), then their high nibbles (odd k).
int64_t unit_position(int64_t k) {
  const int64_t within = k % kUnit, run = within / 32, pair = within % 32;
  return k - within + (pair % 2) * 32 + run * 16 + pair / 2;
}

// The 64 codes of unit u of a row of 4-bit codes, as bytes in unit order;
// the last unit may hold one run only (an odd count of 32-code blocks).
[[gnu::always_inline]] inline __m512i unit_codes(const uint8_t* row, int64_t u, bool half) {
  const __m256i packed = half ? _mm256_maskz_loadu_epi8(0xFFFF, row + u * 32)
                              : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + u * 32));
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(packed, low), hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// A unit's scales lane by lane: lanes of its second run (4-7, 12-15) take
// block `second`'s.
[[gnu::always_inline]] inline __m512 unit_scales(float first, float second) {
  return _mm512_mask_blend_ps(0xF0F0, _mm512_set1_ps(first), _mm512_set1_ps(second));
}

struct Units {
  std::vector<int8_t> values;  // [m, units * 64], unit order
  std::vector<float> scales;   // [m, units, 16]: a's scale per lane
};

Units units_of(const Shape& s, const RoundedA& a) {
  const int64_t units = (s.padded_k() + kUnit - 1) / kUnit, width = s.padded_k();
  Units r;
  r.values.assign(static_cast<size_t>(s.m * units * kUnit), 0);
  r.scales.assign(static_cast<size_t>(s.m * units * 16), 0.0f);
  for (int64_t row = 0; row < s.m; ++row) {
    for (int64_t k = 0; k < width; ++k)
      r.values[static_cast<size_t>(row * units * kUnit + unit_position(k))] = a.values[row * width + k];
    for (int64_t u = 0; u < units; ++u)
      for (int lane = 0; lane < 16; ++lane) {
        const int64_t k = u * kUnit + ((lane / 4) % 2) * 32;
        r.scales[static_cast<size_t>((row * units + u) * 16 + lane)] =
            k < width ? a.scales[row * s.blocks + k / s.block] : 0.0f;
      }
  }
  return r;
}

// kOutputs rows of b from n0 as the tiles read them: each unit's 64 codes
// as bytes in unit order, and its 16 lanes' scales; outputs past n as
// zeros (their sums are not stored).
struct Group {
  std::vector<uint8_t> codes;  // [kOutputs, units * 64]
  std::vector<float> scales;   // [kOutputs, units * 16]
};

void unpack_group(const Shape& s, const Weights& w, int64_t n0, int64_t units, Group& g) {
  g.codes.resize(static_cast<size_t>(kOutputs * units * kUnit));
  g.scales.resize(static_cast<size_t>(kOutputs * units * 16));
  const int64_t row_bytes = s.blocks * s.blob, outputs = std::min<int64_t>(kOutputs, s.n - n0);
  const int shift = __builtin_ctzll(static_cast<uint64_t>(s.block));  // (a power of two: no divisions per unit)
  for (int64_t i = 0; i < outputs; ++i) {
    const uint8_t* row = w.codes + (n0 + i) * row_bytes;
    const float* scales = w.scales + (n0 + i) * s.blocks;
    for (int64_t u = 0; u < units; ++u) {
      const bool half = (u + 1) * kUnit > s.padded_k();
      const int64_t first = (u * kUnit) >> shift, second = std::min(s.blocks - 1, (u * kUnit + 32) >> shift);
      _mm512_storeu_si512(g.codes.data() + (i * units + u) * kUnit, unit_codes(row, u, half));
      _mm512_storeu_ps(g.scales.data() + (i * units + u) * 16, unit_scales(scales[first], scales[second]));
    }
  }
  std::fill(g.codes.begin() + outputs * units * kUnit, g.codes.end(), 0);
  std::fill(g.scales.begin() + outputs * units * 16, g.scales.end(), 0.0f);
}

// Rows [r0, r0 + R) of a by the group's outputs [n0, n0 + kOutputs) (those below n).
template <int R>
void tile(const Shape& s, const Units& a, const RoundedA& rounded_a, const Weights& w, const Group& g, int64_t units,
          int64_t r0, int64_t n0, float* y) {
  __m512 total[kOutputs][R];
  for (int i = 0; i < kOutputs; ++i)
    for (int r = 0; r < R; ++r) total[i][r] = _mm512_setzero_ps();
  for (int64_t u = 0; u < units; ++u) {
    __m512i x[R];
    __m512 x_scales[R];
    for (int r = 0; r < R; ++r) {
      x[r] = _mm512_loadu_si512(a.values.data() + ((r0 + r) * units + u) * kUnit);
      x_scales[r] = _mm512_loadu_ps(a.scales.data() + ((r0 + r) * units + u) * 16);
    }
    for (int i = 0; i < kOutputs; ++i) {
      const __m512i codes = _mm512_loadu_si512(g.codes.data() + (i * units + u) * kUnit);
      const __m512 scales = _mm512_loadu_ps(g.scales.data() + (i * units + u) * 16);
      for (int r = 0; r < R; ++r) {
        const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes, x[r]);
        total[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(x_scales[r], scales), total[i][r]);
      }
    }
  }
  for (int64_t i = 0; i < std::min<int64_t>(kOutputs, s.n - n0); ++i) {
    float off[R];
    offsets<R>(s, w, rounded_a, r0, n0 + i, off);
    for (int r = 0; r < R; ++r) y[(r0 + r) * s.n + n0 + i] = _mm512_reduce_add_ps(total[i][r]) + off[r];
  }
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
void one_row(const Shape& s, const Units& a, const RoundedA& rounded_a, const Weights& w, int64_t units, int64_t row,
             int64_t n0, float* y) {
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
  const int8_t* x = a.values.data() + row * units * kUnit;
  const float* x_scales = a.scales.data() + row * units * 16;
  const int64_t whole = s.padded_k() / kUnit;
  for (int64_t u = 0; u < whole; ++u)
    one_unit<false>(rows, scales, u, (u * kUnit) >> shift, (u * kUnit + 32) >> shift, _mm512_loadu_si512(x + u * kUnit),
                    _mm512_loadu_ps(x_scales + u * 16), total);
  if (whole < units)  // the last unit's one run
    one_unit<true>(rows, scales, whole, (whole * kUnit) >> shift, (whole * kUnit) >> shift,
                   _mm512_loadu_si512(x + whole * kUnit), _mm512_loadu_ps(x_scales + whole * 16), total);
  for (int64_t i = 0; i < outputs; ++i) {
    float off[1];
    offsets<1>(s, w, rounded_a, row, n0 + i, off);
    y[row * s.n + n0 + i] = _mm512_reduce_add_ps(total[i]) + off[0];
  }
}

// Each task takes a group of outputs: for a row or two, unpacking the codes
// as it goes; for more, unpacking them once into a buffer that every tile
// of 4 rows reads.
void vnni(const Shape& s, const RoundedA& rounded_a, const Weights& w, float* y) {
  const Units a = units_of(s, rounded_a);
  const int64_t units = (s.padded_k() + kUnit - 1) / kUnit, groups = (s.n + kOutputs - 1) / kOutputs;
  parallel_for(groups, 1, [&](int64_t lo, int64_t hi) {
    Group g;
    for (int64_t group = lo; group < hi; ++group) {
      const int64_t n0 = group * kOutputs;
      if (s.m <= 2) {
        for (int64_t r = 0; r < s.m; ++r) one_row(s, a, rounded_a, w, units, r, n0, y);
        continue;
      }
      unpack_group(s, w, n0, units, g);
      int64_t r = 0;
      for (; r + 4 <= s.m; r += 4) tile<4>(s, a, rounded_a, w, g, units, r, n0, y);
      for (; r + 2 <= s.m; r += 2) tile<2>(s, a, rounded_a, w, g, units, r, n0, y);
      for (; r < s.m; ++r) tile<1>(s, a, rounded_a, w, g, units, r, n0, y);
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
