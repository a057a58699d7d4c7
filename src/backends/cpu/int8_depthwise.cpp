#include "backends/cpu/int8_depthwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/int8_vnni.h"
#include "kiln/error.h"
#include "kiln/parallel.h"

namespace kiln::cpu::int8_depthwise {
namespace {

constexpr int64_t kBlock = 16;  // channels per register
constexpr int64_t kGroup = 64;  // channels of a group of four registers
constexpr int64_t kMostColumns = 5;

// The channels come in units: groups of 64 (four registers), then blocks
// of 16 for the rest. Within a group, register q's lane l holds channel
// 16 (l / 4) + 4 q + l % 4: the order in which two rounds of byte and word
// unpacks interleave four rows' 64 channels (each 128-bit lane apart), and
// the order that the packs narrowing four registers of results to bytes
// undo, so that a group's 64 outputs come out in channel order.
int64_t groups_of(const Geometry& g) { return g.c / kGroup; }
int64_t channel_at(const Geometry& g, int64_t position) {
  if (position >= groups_of(g) * kGroup) return position;
  const int64_t within = position % kGroup, q = within / kBlock, lane = within % kBlock;
  return position - within + kBlock * (lane / 4) + 4 * q + lane % 4;
}
int64_t sums_offset(const Geometry& g) { return g.c * g.kw * 4; }

// Sixteen channels of an input column, kernel rows interleaved into 4-byte groups.
struct alignas(64) Column {
  uint8_t bytes[64];
};

}  // namespace

int64_t packed_bytes(const Geometry& g) { return sums_offset(g) + g.c * 4; }

// Weights: per unit, per kernel column, its registers (64 bytes each, the
// lanes in the unit's channel order, byte i of a lane the kernel row i);
// then each channel's sum of weights, in the same order.
void pack(const Geometry& g, const int8_t* w, void* out) {
  auto* bytes = static_cast<int8_t*>(out);
  std::memset(bytes, 0, static_cast<size_t>(packed_bytes(g)));
  auto* sums = reinterpret_cast<int32_t*>(bytes + sums_offset(g));
  for (int64_t position = 0; position < g.c; ++position) {
    const int64_t ch = channel_at(g, position);
    const bool grouped = position < groups_of(g) * kGroup;
    const int64_t unit_first = grouped ? position / kGroup * kGroup : position / kBlock * kBlock;
    const int64_t vectors = grouped ? 4 : 1, within = position - unit_first;
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const int8_t v = w[(ch * g.kh + i) * g.kw + j];
        bytes[unit_first * g.kw * 4 + (j * vectors + within / kBlock) * 64 + within % kBlock * 4 + i] = v;
        sums[position] += v;
      }
  }
}

#if KILN_INT8_VNNI

namespace {

// Whether sum * scale + zero can pass 2^31 for some channel (as int8_gemm's may_pass_int32).
bool may_pass_int32(const Geometry& g, const Requantization& q) {
  double largest = 0;
  for (int64_t ch = 0; ch < g.c; ++ch) {
    const double bias = q.bias ? std::fabs(static_cast<double>(q.bias[ch])) : 0;
    largest = std::max(largest, (g.kh * g.kw * 255.0 * 128 + bias) * std::fabs(q.scales[q.per_channel ? ch : 0]));
  }
  return largest + std::fabs(static_cast<double>(q.y_zero)) >= 1073741824.0;
}

// A unit's constants: bias - x_zero * sum and the scale, in its order.
template <int V>
struct UnitConstants {
  __m512i adjust[V];
  __m512 scale[V];
};

// One output row of one unit of V registers, from its input columns
// interleaved (expanded: V registers a column, column px - pw first).
template <int V, int KW, bool Signed>
void output_row(const Geometry& g, const Requantization& q, const Column* expanded, const int8_t* weights,
                const UnitConstants<V>& k, bool clip, uint8_t* out) {
  __m512i w[KW][V];
  for (int j = 0; j < KW; ++j)
    for (int v = 0; v < V; ++v) w[j][v] = _mm512_loadu_si512(weights + 64 * (j * V + v));
  const __m512 zero = _mm512_set1_ps(static_cast<float>(q.y_zero));
  for (int64_t ox = 0; ox < g.ow; ++ox, expanded += g.sw * V, out += g.c) {
    __m512i acc[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[v] = k.adjust[v];
#pragma GCC unroll 5
    for (int j = 0; j < KW; ++j)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) int8_vnni::dot_add(acc[v], _mm512_load_si512(expanded[j * V + v].bytes), w[j][v]);
    if constexpr (V == 4) {
      __m512i r[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) r[v] = int8_vnni::requantized(acc[v], k.scale[v], zero, clip);
      const __m512i low = _mm512_packs_epi32(r[0], r[1]), high = _mm512_packs_epi32(r[2], r[3]);
      _mm512_storeu_si512(out, Signed ? _mm512_packs_epi16(low, high) : _mm512_packus_epi16(low, high));
    } else {
      int8_vnni::store_saturated<Signed>(out, 0xFFFF, int8_vnni::requantized(acc[0], k.scale[0], zero, clip));
    }
  }
}

template <int V>
void output_row_of(const Geometry& g, const Requantization& q, const Column* expanded, const int8_t* weights,
                   const UnitConstants<V>& k, bool clip, uint8_t* out) {
#define KILN_DEPTHWISE_ROW(KW)                                                             \
  case KW:                                                                                 \
    if (q.y_signed) return output_row<V, KW, true>(g, q, expanded, weights, k, clip, out); \
    return output_row<V, KW, false>(g, q, expanded, weights, k, clip, out);
  switch (g.kw) {
    KILN_DEPTHWISE_ROW(1) KILN_DEPTHWISE_ROW(2) KILN_DEPTHWISE_ROW(3) KILN_DEPTHWISE_ROW(4) KILN_DEPTHWISE_ROW(5)
  }
#undef KILN_DEPTHWISE_ROW
}

// A group's 64 channels of one input column, its four kernel rows (r)
// interleaved into four registers in the group's order.
inline void expand_group(const __m512i (&r)[4], Column* out) {
  const __m512i low01 = _mm512_unpacklo_epi8(r[0], r[1]), high01 = _mm512_unpackhi_epi8(r[0], r[1]);
  const __m512i low23 = _mm512_unpacklo_epi8(r[2], r[3]), high23 = _mm512_unpackhi_epi8(r[2], r[3]);
  _mm512_store_si512(out[0].bytes, _mm512_unpacklo_epi16(low01, low23));
  _mm512_store_si512(out[1].bytes, _mm512_unpackhi_epi16(low01, low23));
  _mm512_store_si512(out[2].bytes, _mm512_unpacklo_epi16(high01, high23));
  _mm512_store_si512(out[3].bytes, _mm512_unpackhi_epi16(high01, high23));
}

// One output row of one unit: its input columns expanded, then the outputs.
template <int V>
void unit_row(const Geometry& g, const Requantization& q, const uint8_t* const (&rows)[4], const int8_t* weights,
              const int32_t* adjust, const float* scale, bool clip, Column* expanded, uint8_t* out) {
  const int64_t columns = (g.ow - 1) * g.sw + g.kw;
  // (q.x_zero is the uint8 one: run moves an int8 zero point by 128, and
  // top flips the bytes read.)
  const __m512i zero_point = _mm512_set1_epi8(static_cast<char>(q.x_zero));
  const __m512i top = _mm512_set1_epi8(static_cast<char>(q.x_signed ? 0x80 : 0));
  for (int64_t col = 0; col < columns; ++col) {
    const int64_t px = col - g.pw;
    Column* e = expanded + col * V;
    if (px < 0 || px >= g.w) {
      for (int v = 0; v < V; ++v) _mm512_store_si512(e[v].bytes, zero_point);
      continue;
    }
    const int64_t at = px * g.c;
    if constexpr (V == 4) {
      __m512i r[4];
      for (int i = 0; i < 4; ++i) r[i] = rows[i] ? _mm512_xor_si512(_mm512_loadu_si512(rows[i] + at), top) : zero_point;
      expand_group(r, e);
    } else {
      // Byte 4c + i: channel c of kernel row i, at byte 16i + c of the four rows side by side.
      alignas(64) static const uint8_t order[64] = {0,  16, 32, 48, 1,  17, 33, 49, 2,  18, 34, 50, 3,  19, 35, 51,
                                                    4,  20, 36, 52, 5,  21, 37, 53, 6,  22, 38, 54, 7,  23, 39, 55,
                                                    8,  24, 40, 56, 9,  25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,
                                                    12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};
      auto row_at = [&](int i) {
        return rows[i] ? _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + at)),
                                       _mm512_castsi512_si128(top))
                       : _mm512_castsi512_si128(zero_point);
      };
      __m512i v = _mm512_castsi128_si512(row_at(0));
      v = _mm512_inserti32x4(v, row_at(1), 1);
      v = _mm512_inserti32x4(v, row_at(2), 2);
      v = _mm512_inserti32x4(v, row_at(3), 3);
      _mm512_store_si512(e[0].bytes, _mm512_permutexvar_epi8(_mm512_load_si512(order), v));
    }
  }
  UnitConstants<V> k;
  for (int v = 0; v < V; ++v) {
    k.adjust[v] = _mm512_loadu_si512(adjust + kBlock * v);
    k.scale[v] = _mm512_loadu_ps(scale + kBlock * v);
  }
  output_row_of<V>(g, q, expanded, weights, k, clip, out);
}

}  // namespace

bool takes(const Geometry& g) {
  return g.c % kBlock == 0 && g.kh >= 1 && g.kh <= 4 && g.kw >= 1 && g.kw <= kMostColumns;
}

void run(const Geometry& g, const Requantization& given, const void* x_bytes, const void* packed, void* y) {
  KILN_CHECK(takes(g), "an int8 depthwise convolution the kernel does not take (check int8_depthwise::takes first)");
  // int8 x is read as uint8 x + 128 (unit_row flips the bytes it loads),
  // its zero point moved alike, so that each x - x_zero stays as it was.
  Requantization q = given;
  if (q.x_signed) q.x_zero += 128;
  const auto* x = static_cast<const uint8_t*>(x_bytes);
  const auto* bytes = static_cast<const int8_t*>(packed);
  const auto* sums = reinterpret_cast<const int32_t*>(bytes + sums_offset(g));
  // bias - x_zero * sum, and the scale, in the packed order.
  std::vector<int32_t> adjust(static_cast<size_t>(g.c));
  std::vector<float> scale(static_cast<size_t>(g.c));
  for (int64_t position = 0; position < g.c; ++position) {
    const int64_t ch = channel_at(g, position);
    adjust[position] = (q.bias ? q.bias[ch] : 0) - q.x_zero * sums[position];
    scale[position] = q.scales[q.per_channel ? ch : 0];
  }
  const int64_t groups = groups_of(g), units = groups + (g.c - groups * kGroup) / kBlock;
  const int64_t columns = (g.ow - 1) * g.sw + g.kw;  // expanded columns, from -pw
  const bool clip = may_pass_int32(g, q);
  const int64_t grain = std::max<int64_t>(1, 2048 / (g.ow * g.kw));
  parallel_for(g.n * g.oh * units, grain, [&](int64_t lo, int64_t hi) {
    std::vector<Column> expanded(static_cast<size_t>(columns * 4));
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t unit = t % units, oy = t / units % g.oh, b = t / (units * g.oh);
      const bool grouped = unit < groups;
      const int64_t first = grouped ? unit * kGroup : groups * kGroup + (unit - groups) * kBlock;
      // Kernel rows past kh repeat the last (their weights are zero); rows
      // outside the image read the zero point, which adds nothing.
      const uint8_t* rows[4];
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t iy = oy * g.sh - g.ph + std::min(i, g.kh - 1);
        rows[i] = iy >= 0 && iy < g.h ? x + (b * g.h + iy) * g.w * g.c + first : nullptr;
      }
      const int8_t* weights = bytes + first * g.kw * 4;
      uint8_t* out = static_cast<uint8_t*>(y) + (b * g.oh + oy) * g.ow * g.c + first;
      if (grouped)
        unit_row<4>(g, q, rows, weights, adjust.data() + first, scale.data() + first, clip, expanded.data(), out);
      else
        unit_row<1>(g, q, rows, weights, adjust.data() + first, scale.data() + first, clip, expanded.data(), out);
    }
  });
}

#else

bool takes(const Geometry&) { return false; }

void run(const Geometry&, const Requantization&, const void*, const void*, void*) {
  KILN_CHECK(false, "Kiln's int8 depthwise kernel needs AVX-512 VNNI; this build has none (check takes first)");
}

#endif

}  // namespace kiln::cpu::int8_depthwise
