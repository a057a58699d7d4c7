#include "backends/cpu/int8_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_caches.h"
#include "backends/cpu/int8_vnni.h"
#include "kiln/error.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu::int8_gemm {
namespace {

constexpr int64_t kPanel = 32;  // columns of a full panel: two registers
constexpr int64_t kRows = 12;   // rows of a tile: 24 accumulators, 2 of B, 1 of A

int64_t groups_of(int64_t k) { return (k + 3) / 4; }
int64_t panels_of(int64_t n) { return (n + kPanel - 1) / kPanel; }
// Every panel but the last is 32 wide; the last takes 16 where 16 columns are left or fewer.
int64_t panel_bytes(int64_t k) { return groups_of(k) * kPanel * 4; }
int64_t sums_offset(int64_t k, int64_t n) { return (panels_of(n) * panel_bytes(k) + 63) / 64 * 64; }

}  // namespace

int64_t packed_bytes(int64_t k, int64_t n) { return sums_offset(k, n) + panels_of(n) * kPanel * 4; }

void pack(const int8_t* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, void* out) {
  auto* bytes = static_cast<int8_t*>(out);
  std::memset(bytes, 0, static_cast<size_t>(packed_bytes(k, n)));
  auto* sums = reinterpret_cast<int32_t*>(bytes + sums_offset(k, n));
  for (int64_t p = 0; p < panels_of(n); ++p) {
    const int64_t first = p * kPanel, width = std::min(kPanel, n - first) <= 16 ? 16 : kPanel;
    int8_t* panel = bytes + p * panel_bytes(k);
    for (int64_t j = first; j < std::min(n, first + kPanel); ++j)
      for (int64_t i = 0; i < k; ++i) {
        const int8_t v = b[i * row_stride + j * col_stride];
        panel[(i / 4) * width * 4 + (j - first) * 4 + i % 4] = v;
        sums[j] += v;
      }
  }
}

#if KILN_INT8_VNNI

namespace {

using int8_vnni::dot_add;
using int8_vnni::store_saturated;

// The constants of a tile's columns: C registers of 16 (the last masked to
// the columns there are).
template <int C>
struct Columns {
  __mmask16 mask[C];
  __m512i adjust[C];  // bias - a_zero * column sum
  __m512 scale[C];
  __m512 vector[C];
};

// adjust: bias - a_zero * column sum for every column, padded to whole panels.
template <int C>
Columns<C> columns_of(const Call& c, const int32_t* adjust, int64_t first) {
  Columns<C> k;
  for (int i = 0; i < C; ++i) {
    const int64_t col = first + 16 * i, left = std::clamp<int64_t>(c.n - col, 0, 16);
    k.mask[i] = static_cast<__mmask16>((1u << left) - 1);
    k.adjust[i] = _mm512_loadu_si512(adjust + col);
    k.scale[i] = c.per_column ? _mm512_maskz_loadu_ps(k.mask[i], c.scales + col) : _mm512_set1_ps(c.scales[0]);
    k.vector[i] = (c.dequantized.add_vector || c.to_float) && c.vector
                      ? _mm512_maskz_loadu_ps(k.mask[i], c.vector + col)
                      : _mm512_setzero_ps();
  }
  return k;
}

inline __m512 rounded(__m512 v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

// One tile's sums (which start from the columns' adjustments) through the
// epilogue into rows [row, row + R) of y: an integer result is
// int8_vnni::requantized, saturated, clipped only where a product could pass
// the conversion's range (may_pass_int32). At 16 deep, this epilogue costs
// more than the products; every instruction in it counts.
template <int R, int C, bool Signed>
[[gnu::always_inline]] inline void store_integers(const Call& c, const Columns<C>& k, __m512i (&acc)[R][C], int64_t row,
                                                  int64_t first, void* y, bool clip) {
  const __m512 zero = _mm512_set1_ps(static_cast<float>(c.y_zero));
  auto* out = static_cast<uint8_t*>(y) + row * c.ldy + first;
  auto integers = [&](int r, int i) { return int8_vnni::requantized(acc[r][i], k.scale[i], zero, clip); };
  if constexpr (C == 2) {
    // A row's 32 values packed to bytes with saturation by two packs, which
    // interleave 4-value pieces of the two registers in each 128-bit lane,
    // put in order by one permutation: 3 instructions where two saturating
    // narrowings took 4 to 6.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    const __mmask32 mask = static_cast<__mmask32>(k.mask[0]) | (static_cast<__mmask32>(k.mask[1]) << 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512i words = _mm512_packs_epi32(integers(r, 0), integers(r, 1));
      const __m512i bytes = Signed ? _mm512_packs_epi16(words, words) : _mm512_packus_epi16(words, words);
      _mm256_mask_storeu_epi8(out + r * c.ldy, mask, _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, bytes)));
    }
  } else {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) store_saturated<Signed>(out + r * c.ldy, k.mask[0], integers(r, 0));
  }
}

template <int R, int C>
[[gnu::always_inline]] inline void store_tile(const Call& c, const Columns<C>& k, __m512i (&acc)[R][C], int64_t row,
                                              int64_t first, void* y, bool clip) {
  if (c.to_float) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int i = 0; i < C; ++i)
        _mm512_mask_storeu_ps(static_cast<float*>(y) + (row + r) * c.ldy + first + 16 * i, k.mask[i],
                              _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][i]), k.scale[i], k.vector[i]));
    return;
  }
  const auto& dq = c.dequantized;
  if (!dq.on) {
    if (c.y_signed)
      store_integers<R, C, true>(c, k, acc, row, first, y, clip);
    else
      store_integers<R, C, false>(c, k, acc, row, first, y, clip);
    return;
  }
  const int lo = c.y_signed ? -128 : 0, hi = c.y_signed ? 127 : 255;
  // The 8-bit result as store_integers makes it (the same fused
  // multiply-add and rounding), in float; then its dequantization and what
  // follows, one op at a time as the eager ops compute them.
  const __m512 yz = _mm512_set1_ps(static_cast<float>(c.y_zero)), flo = _mm512_set1_ps(static_cast<float>(lo)),
               fhi = _mm512_set1_ps(static_cast<float>(hi)), y_scale = _mm512_set1_ps(dq.y_scale),
               zero = _mm512_setzero_ps();
  const __m512 q_scale = _mm512_set1_ps(dq.q_scale), q_zero = _mm512_set1_ps(static_cast<float>(dq.q_zero));
  const __m512 q_lo = _mm512_set1_ps(dq.q_signed ? -128.0f : 0.0f),
               q_hi = _mm512_set1_ps(dq.q_signed ? 127.0f : 255.0f);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int i = 0; i < C; ++i) {
      __m512 v = rounded(_mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][i]), k.scale[i], yz));
      v = _mm512_min_ps(_mm512_max_ps(v, flo), fhi);
      v = _mm512_mul_ps(_mm512_sub_ps(v, yz), y_scale);
      const int64_t at = (row + r) * c.ldy + first + 16 * i;
      if (dq.add_vector) v = _mm512_add_ps(v, k.vector[i]);
      if (dq.add_residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k.mask[i], c.residual + at));
      if (dq.relu) v = _mm512_max_ps(zero, v);  // NaN (from a residual) passes, as the eager relu lets it
      if (dq.requantize) {
        v = _mm512_add_ps(rounded(_mm512_div_ps(v, q_scale)), q_zero);
        v = _mm512_min_ps(_mm512_max_ps(v, q_lo), q_hi);  // NaN to the lowest, as quantize_linear
        if (dq.q_signed)
          store_saturated<true>(static_cast<uint8_t*>(y) + at, k.mask[i], _mm512_cvtps_epi32(v));
        else
          store_saturated<false>(static_cast<uint8_t*>(y) + at, k.mask[i], _mm512_cvtps_epi32(v));
      } else {
        _mm512_mask_storeu_ps(static_cast<float*>(y) + at, k.mask[i], v);
      }
    }
}

// R rows of A by one panel of C registers, over every group of 4 k.
template <int R, int C>
void tile(const Call& c, const Columns<C>& k, const uint8_t* a, const int8_t* panel, int64_t row, int64_t first,
          void* y, bool clip) {
  __m512i acc[R][C];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    const __m512i row_bias = _mm512_set1_epi32(c.row_bias ? c.row_bias[row + r] : 0);
#pragma GCC unroll 2
    for (int i = 0; i < C; ++i) acc[r][i] = _mm512_add_epi32(k.adjust[i], row_bias);
  }
  const int64_t run_groups = groups_of(c.k) / c.segments, lda = c.lda, skip = c.segment_stride - run_groups * 4;
  for (int64_t s = 0; s < c.segments; ++s, a += skip)
    for (int64_t g = 0; g < run_groups; ++g, a += 4, panel += C * 64) {
      __m512i b[C];
#pragma GCC unroll 2
      for (int i = 0; i < C; ++i) b[i] = _mm512_loadu_si512(panel + 64 * i);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        int32_t four;
        std::memcpy(&four, a + r * lda, 4);
        const __m512i av = _mm512_set1_epi32(four);
#pragma GCC unroll 2
        for (int i = 0; i < C; ++i) dot_add(acc[r][i], av, b[i]);
      }
    }
  store_tile<R, C>(c, k, acc, row, first, y, clip);
}

template <int C>
void tile_of_height(int64_t rows, const Call& c, const Columns<C>& k, const uint8_t* a, const int8_t* panel,
                    int64_t row, int64_t first, void* y, bool clip) {
  using Tile = void (*)(const Call&, const Columns<C>&, const uint8_t*, const int8_t*, int64_t, int64_t, void*, bool);
  static constexpr Tile by_height[kRows] = {tile<1, C>, tile<2, C>, tile<3, C>, tile<4, C>,  tile<5, C>,  tile<6, C>,
                                            tile<7, C>, tile<8, C>, tile<9, C>, tile<10, C>, tile<11, C>, tile<12, C>};
  KILN_CHECK(rows >= 1 && rows <= kRows, "an int8 tile of " + std::to_string(rows) + " rows");
  by_height[rows - 1](c, k, a, panel, row, first, y, clip);
}

// Whether sum * scale + zero can pass 2^31 for some column (the float to
// int32 conversion then gives INT_MIN, which would saturate to the low end).
bool may_pass_int32(const Call& c) {
  double largest = 0;
  const double b_most = c.b_centered ? 255.0 : 128.0;
  for (int64_t j = 0; j < c.n; ++j) {
    const double bias = c.bias ? std::fabs(static_cast<double>(c.bias[j])) : 0;
    const double sum = c.k * 255.0 * b_most + bias;  // each |a - a_zero| at most 255, each |b| 128 (or 255 centered)
    largest = std::max(largest, sum * std::fabs(c.scales[c.per_column ? j : 0]));
  }
  return largest + std::fabs(static_cast<double>(c.y_zero)) >= 1073741824.0;
}

}  // namespace

bool available() { return true; }

void run(const Call& given, const void* a_bytes, const void* packed, void* y) {
  if (given.m <= 0 || given.n <= 0) return;  // (an empty batch)
  Call c = given;
  const auto* a = static_cast<const uint8_t*>(a_bytes);
  // vpdpbusd multiplies unsigned bytes by signed ones: int8 A is read as
  // uint8 A + 128 (its top bit flipped, into a copy) with its zero point
  // moved by 128 too, which leaves each a - a_zero, and so the sums, as they were.
  Tensor flipped;
  KILN_CHECK(!c.a_signed || (c.segments == 1 && c.block_rows == 0 && c.image_blocks == 0),
             "int8_gemm::run: patches of an image are uint8 (int8_patch_conv flips them as it pads)");
  if (c.a_signed) {
    flipped = Tensor::empty({c.m * c.k}, DType::UInt8);
    uint8_t* to = flipped.data<uint8_t>();
    // (64 bytes at a time by hand: GCC 12 left the byte loop scalar, and
    // the copy took six times the product of a 32 -> 16 1x1 layer.)
    const int64_t k = c.k, lda = c.lda;
    parallel_for(c.m, std::max<int64_t>(1, (1 << 14) / k), [=](int64_t lo, int64_t hi) {
      const __m512i top = _mm512_set1_epi8(static_cast<char>(0x80));
      for (int64_t r = lo; r < hi; ++r) {
        const uint8_t* from = a + r * lda;
        uint8_t* row = to + r * k;
        for (int64_t i = 0; i < k; i += 64) {
          const __mmask64 m = k - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (k - i)) - 1;
          _mm512_mask_storeu_epi8(row + i, m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, from + i), top));
        }
      }
    });
    a = to, c.lda = c.k, c.a_zero += 128, c.a_signed = false;
  }
  const auto* bytes = static_cast<const int8_t*>(packed);
  const auto* sums = reinterpret_cast<const int32_t*>(bytes + sums_offset(c.k, c.n));
  const int64_t block_rows = c.block_rows > 0 ? c.block_rows : c.m;
  KILN_CHECK(c.m % block_rows == 0 && (c.segments == 1 || c.k % (4 * c.segments) == 0),
             "int8_gemm::run: whole blocks of rows, and runs of whole groups of 4");
  // Tiles of equal heights, 12 rows at most, within each block.
  const int64_t block_tiles = (block_rows + kRows - 1) / kRows, height = (block_rows + block_tiles - 1) / block_tiles;
  const int64_t tiles = c.m / block_rows * block_tiles;
  const int64_t panels = panels_of(c.n), groups = groups_of(c.k);
  std::vector<int32_t> adjust(static_cast<size_t>(panels * kPanel));
  for (int64_t j = 0; j < c.n; ++j) adjust[j] = (c.bias ? c.bias[j] : 0) - c.a_zero * sums[j];
  // Where B takes a third of the L1 cache or less (16 KB of 48), a task
  // takes a row tile's panels one after another, so that each output row
  // is written whole at once (a 1x1 layer of 16 to 96 channels over 112x112
  // pixels otherwise swept its 1.2 MB output once per panel); else a
  // panel's tiles, so that the panel stays in the L1 cache.
  const bool rows_outer = panels * panel_bytes(c.k) <= cpu_caches().l1d_bytes / 3;
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / (height * kPanel * groups * 4));
  const bool clip = may_pass_int32(c);
  parallel_for(panels * tiles, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t p = rows_outer ? t % panels : t / tiles, tile = rows_outer ? t / panels : t % tiles;
      const int64_t block = tile / block_tiles, in_block = tile % block_tiles * height;
      const int64_t row = block * block_rows + in_block, rows = std::min(height, block_rows - in_block);
      const int64_t first = p * kPanel;
      const int8_t* panel = bytes + p * panel_bytes(c.k);
      const int64_t image = c.image_blocks > 0 ? block / c.image_blocks : 0,
                    in_image = c.image_blocks > 0 ? block % c.image_blocks : block;
      const uint8_t* rows_of_a = a + image * c.image_stride + in_image * c.block_stride + in_block * c.lda;
      if (c.n - first <= 16)
        tile_of_height<1>(rows, c, columns_of<1>(c, adjust.data(), first), rows_of_a, panel, row, first, y, clip);
      else
        tile_of_height<2>(rows, c, columns_of<2>(c, adjust.data(), first), rows_of_a, panel, row, first, y, clip);
    }
  });
}

namespace {

// pack() for a row-major B of bytes, 16 columns and 4 rows at a time by
// byte and word unpacks (the scalar pack took ten times the product of a
// 128x32x128 attention head), the top bit flipped where B is uint8 (b - 128
// as int8), and the column sums by vpdpbusd against ones.
void pack_rows(const uint8_t* b, int64_t k, int64_t n, bool flip, void* out) {
  auto* bytes = static_cast<int8_t*>(out);
  auto* sums = reinterpret_cast<int32_t*>(bytes + sums_offset(k, n));
  const __m128i top = _mm_set1_epi8(static_cast<char>(flip ? 0x80 : 0));
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t p = 0; p < panels_of(n); ++p) {
    const int64_t first = p * kPanel, width = std::min(kPanel, n - first) <= 16 ? 16 : kPanel;
    int8_t* panel = bytes + p * panel_bytes(k);
    for (int64_t half = 0; half < width; half += 16) {
      const int64_t col = first + half, cols = std::clamp<int64_t>(n - col, 0, 16);
      const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
      __m512i sum = _mm512_setzero_si512();
      for (int64_t g = 0; g < groups_of(k); ++g) {
        __m128i r[4];
        for (int64_t j = 0; j < 4; ++j) {
          const int64_t i = 4 * g + j;
          r[j] = i < k ? _mm_maskz_mov_epi8(mask, _mm_xor_si128(_mm_maskz_loadu_epi8(mask, b + i * n + col), top))
                       : _mm_setzero_si128();
        }
        const __m128i lo01 = _mm_unpacklo_epi8(r[0], r[1]), hi01 = _mm_unpackhi_epi8(r[0], r[1]);
        const __m128i lo23 = _mm_unpacklo_epi8(r[2], r[3]), hi23 = _mm_unpackhi_epi8(r[2], r[3]);
        int8_t* to = panel + g * width * 4 + half * 4;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to), _mm_unpacklo_epi16(lo01, lo23));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 16), _mm_unpackhi_epi16(lo01, lo23));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 32), _mm_unpacklo_epi16(hi01, hi23));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to + 48), _mm_unpackhi_epi16(hi01, hi23));
        dot_add(sum, ones, _mm512_loadu_si512(to));
      }
      _mm512_mask_storeu_epi32(sums + col, mask, sum);
    }
  }
}

// The sum of each row of A [m, k] (row stride k), as signed values where a_signed.
void row_sums(const uint8_t* a, int64_t m, int64_t k, bool a_signed, int32_t* out) {
  const __m512i top = _mm512_set1_epi8(static_cast<char>(a_signed ? 0x80 : 0));
  for (int64_t r = 0; r < m; ++r) {
    __m512i sum = _mm512_setzero_si512();
    for (int64_t i = 0; i < k; i += 64) {
      const __mmask64 mask = k - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (k - i)) - 1;
      // (int8 read as uint8 + 128 through the flipped top bit, the 128s taken away below)
      const __m512i v =
          _mm512_maskz_mov_epi8(mask, _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, a + r * k + i), top));
      sum = _mm512_add_epi64(sum, _mm512_sad_epu8(v, _mm512_setzero_si512()));
    }
    out[r] = static_cast<int32_t>(_mm512_reduce_add_epi64(sum)) - (a_signed ? static_cast<int32_t>(128 * k) : 0);
  }
}

}  // namespace

void run_with_computed_b(const Call& given, const void* a_bytes, const void* b_bytes, bool b_signed, int32_t b_zero,
                         void* y) {
  KILN_CHECK(!given.bias && !given.row_bias && given.lda == given.k,
             "int8_gemm::run_with_computed_b: no bias, and A's rows packed (lda == k)");
  if (given.m <= 0 || given.n <= 0) return;
  Call c = given;
  const auto* a = static_cast<const uint8_t*>(a_bytes);
  // B as int8: uint8 B flipped, its zero point moved by 128 with it, which
  // leaves each b - b_zero as it was.
  const int32_t zero = b_signed ? b_zero : b_zero - 128;
  Tensor packed = Tensor::empty({packed_bytes(c.k, c.n)}, DType::UInt8);
  pack_rows(static_cast<const uint8_t*>(b_bytes), c.k, c.n, !b_signed, packed.raw_data());
  // Each row's sums less b_zero times the sum of its a - a_zero.
  Tensor row_bias = Tensor::empty({c.m}, DType::Int32);
  int32_t* bias = row_bias.data<int32_t>();
  row_sums(a, c.m, c.k, c.a_signed, bias);
  for (int64_t r = 0; r < c.m; ++r) bias[r] = -zero * (bias[r] - static_cast<int32_t>(c.k) * c.a_zero);
  c.row_bias = bias, c.b_centered = true;
  // A's rows are read 4 bytes at a time: where k is not a whole number of
  // groups, a copy padded with zeros (against B's zero rows they add nothing).
  Tensor padded;
  if (c.k % 4 != 0) {
    const int64_t k4 = groups_of(c.k) * 4;
    padded = zeros({c.m * k4}, DType::UInt8);
    for (int64_t r = 0; r < c.m; ++r)
      std::memcpy(padded.data<uint8_t>() + r * k4, a + r * c.k, static_cast<size_t>(c.k));
    a = padded.data<uint8_t>(), c.lda = k4;
  }
  run(c, a, packed.raw_data(), y);
}

#else

bool available() { return false; }

void run(const Call&, const void*, const void*, void*) {
  KILN_CHECK(false, "Kiln's int8 kernels need AVX-512 VNNI; this build has none (check int8_gemm::available first)");
}

void run_with_computed_b(const Call&, const void*, const void*, bool, int32_t, void*) {
  KILN_CHECK(false, "Kiln's int8 kernels need AVX-512 VNNI; this build has none (check int8_gemm::available first)");
}

#endif

}  // namespace kiln::cpu::int8_gemm
