// matmul_nbits on the CPU in float32: a float32 product with weights of 2,
// 4 or 8 bits quantized in blocks along K (LLM weights), read in their
// packed form. Each task dequantizes a few rows of b, (q - zero) * scale as
// ONNX Runtime's reference does, into a buffer that stays in the L2 cache,
// then takes every row of a against them. The dequantization comes out in
// the order a 16-byte run of codes holds them (byte i holds codes
// i * per_byte + j, j = 0 .. per_byte - 1: vector j of the run is one
// zero-extension, a shift and a mask), and a's rows are laid out once per
// call in that order. With accuracy_level 4 the product is the int8 one
// (nbits_matmul_int8.cpp).
#include "backends/cpu/nbits_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/exp16.h"  // the AVX-512 intrinsics, where the machine has them
#include "backends/cpu/kernel_helpers.h"
#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

using nbits::code_at;
using NbitsShape = nbits::Shape;

// The plain form, for blocks of under 16 bytes of codes (4-bit blocks of
// 16, 2-bit ones of 16 or 32) and CPUs without AVX-512: each weight
// dequantized, (q - zero) * scale, as ONNX Runtime's reference computes it.
void plain_rows(const NbitsShape& s, const float* a, const nbits::Weights& weights, float* y) {
  parallel_for(s.n, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, s.k)), [&](int64_t lo, int64_t hi) {
    std::vector<float> w(static_cast<size_t>(s.k));
    for (int64_t n = lo; n < hi; ++n) {
      const uint8_t* row = weights.codes + n * s.blocks * s.blob;
      for (int64_t j = 0; j < s.blocks; ++j) {
        const float scale = weights.scales[n * s.blocks + j], zero = nbits::zero_at(s, weights, n * s.blocks + j);
        for (int64_t k = j * s.block; k < std::min(s.k, (j + 1) * s.block); ++k)
          w[k] = (static_cast<float>(code_at(s, row + j * s.blob, k - j * s.block)) - zero) * scale;
      }
      for (int64_t r = 0; r < s.m; ++r) {
        float sum = weights.bias ? weights.bias[n] : 0.0f;
        for (int64_t k = 0; k < s.k; ++k) sum = std::fma(a[r * s.k + k], w[k], sum);
        y[r * s.n + n] = sum;
      }
    }
  });
}

#if defined(__AVX512F__)

constexpr int kWeightRows = 4;   // rows of b (outputs) a task dequantizes at once
constexpr int kRowsPerTile = 4;  // rows of a a tile takes: 4 x 4 accumulators

// a's rows laid out as the code runs read them (see the top), zero past K.
std::vector<float> laid_out(const NbitsShape& s, const float* a) {
  const int64_t per = s.per_byte(), run = 16 * per, width = s.padded_k();
  std::vector<float> out(static_cast<size_t>(s.m * width), 0.0f);
  for (int64_t r = 0; r < s.m; ++r)
    for (int64_t k = 0; k < s.k; ++k) {
      const int64_t base = k / run * run, within = k % run;
      out[static_cast<size_t>(r * width + base + (within % per) * 16 + within / per)] = a[r * s.k + k];
    }
  return out;
}

// Row n of b dequantized, (q - zero) * scale, into `w` in the laid-out order.
template <int Per>
void dequantize_row(const NbitsShape& s, const uint8_t* codes, const float* scales, const float* zeros, float* w) {
  constexpr int bits = 8 / Per;
  const __m512i mask = _mm512_set1_epi32((1 << bits) - 1);
  const int64_t runs = s.blob / 16;
  for (int64_t j = 0; j < s.blocks; ++j) {
    const __m512 scale = _mm512_set1_ps(scales[j]);
    const __m512 zero = _mm512_set1_ps(zeros ? zeros[j] : static_cast<float>(1 << (bits - 1)));
    for (int64_t c = 0; c < runs; ++c, codes += 16, w += 16 * Per) {
      const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
#pragma GCC unroll 4
      for (int q = 0; q < Per; ++q) {
        const __m512i shifted = q == 0 ? bytes : _mm512_srli_epi32(bytes, static_cast<unsigned>(q * bits));
        const __m512 code = _mm512_cvtepi32_ps(q + 1 == Per ? shifted : _mm512_and_si512(shifted, mask));
        _mm512_storeu_ps(w + q * 16, _mm512_mul_ps(_mm512_sub_ps(code, zero), scale));
      }
    }
  }
}

// Rows [r0, r0 + R) of a by the kWeightRows dequantized rows w (row stride
// width): y's columns [n0, n0 + cols).
template <int R>
void tile(const NbitsShape& s, const float* a, const float* w, int64_t r0, int64_t n0, int64_t cols, const float* bias,
          float* y) {
  const int64_t width = s.padded_k();
  __m512 acc[R][kWeightRows];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < kWeightRows; ++i) acc[r][i] = _mm512_setzero_ps();
  const float* rows = a + r0 * width;
  for (int64_t k = 0; k < width; k += 16) {
    __m512 wv[kWeightRows];
#pragma GCC unroll 4
    for (int i = 0; i < kWeightRows; ++i) wv[i] = _mm512_loadu_ps(w + i * width + k);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_loadu_ps(rows + r * width + k);
#pragma GCC unroll 4
      for (int i = 0; i < kWeightRows; ++i) acc[r][i] = _mm512_fmadd_ps(av, wv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < cols; ++i)
      y[(r0 + r) * s.n + n0 + i] = _mm512_reduce_add_ps(acc[r][i]) + (bias ? bias[n0 + i] : 0.0f);
}

// R rows of a (one or two: a decoded token) by outputs [n0, n0 +
// kWeightRows), each code vector dequantized as it is used: the buffer's
// store and load cost more than the products at so few rows.
template <int Per, int R>
void few_rows(const NbitsShape& s, const float* a, const nbits::Weights& weights, int64_t n0, float* y) {
  constexpr int bits = 8 / Per;
  const __m512i mask = _mm512_set1_epi32((1 << bits) - 1);
  const int64_t width = s.padded_k(), runs = s.blob / 16, row_bytes = s.blocks * s.blob;
  const int64_t outputs = std::min<int64_t>(kWeightRows, s.n - n0);
  const uint8_t* codes[kWeightRows];
  int64_t at[kWeightRows];  // output i's first scale and zero point
  for (int i = 0; i < kWeightRows; ++i) {
    const int64_t n = std::min(n0 + i, s.n - 1);  // (past n: the last again, not stored)
    codes[i] = weights.codes + n * row_bytes;
    at[i] = n * s.blocks;
  }
  __m512 acc[kWeightRows][R];
  for (int i = 0; i < kWeightRows; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < s.blocks; ++j) {
    __m512 scale[kWeightRows], zero[kWeightRows];
#pragma GCC unroll 4
    for (int i = 0; i < kWeightRows; ++i) {
      scale[i] = _mm512_set1_ps(weights.scales[at[i] + j]);
      zero[i] = _mm512_set1_ps(nbits::zero_at(s, weights, at[i] + j));
    }
    for (int64_t c = 0; c < runs; ++c) {
      const float* x = a + j * s.block + c * 16 * Per;
#pragma GCC unroll 4
      for (int i = 0; i < kWeightRows; ++i) {
        const __m512i bytes =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[i] + j * s.blob + c * 16)));
#pragma GCC unroll 4
        for (int q = 0; q < Per; ++q) {
          const __m512i shifted = q == 0 ? bytes : _mm512_srli_epi32(bytes, static_cast<unsigned>(q * bits));
          const __m512 code = _mm512_cvtepi32_ps(q + 1 == Per ? shifted : _mm512_and_si512(shifted, mask));
          const __m512 w = _mm512_mul_ps(_mm512_sub_ps(code, zero[i]), scale[i]);
#pragma GCC unroll 2
          for (int r = 0; r < R; ++r)
            acc[i][r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * width + q * 16), w, acc[i][r]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t i = 0; i < outputs; ++i)
      y[r * s.n + n0 + i] = _mm512_reduce_add_ps(acc[i][r]) + (weights.bias ? weights.bias[n0 + i] : 0.0f);
}

// The vector form, for blocks of whole 16-byte runs: each task takes
// kWeightRows outputs; for one or two rows of a, dequantizing as it goes;
// for more, dequantizing them once into a buffer that stays in the L2
// cache, every row of a against it, 4 rows a tile.
template <int Per>
void vector_rows(const NbitsShape& s, const float* a_rows, const nbits::Weights& weights, float* y) {
  const std::vector<float> a = laid_out(s, a_rows);
  const int64_t width = s.padded_k(), groups = (s.n + kWeightRows - 1) / kWeightRows;
  parallel_for(groups, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> w(static_cast<size_t>(s.m > 2 ? kWeightRows * width : 0), 0.0f);
    for (int64_t g = lo; g < hi; ++g) {
      const int64_t n0 = g * kWeightRows, cols = std::min<int64_t>(kWeightRows, s.n - n0);
      if (s.m <= 2) {
        s.m == 1 ? few_rows<Per, 1>(s, a.data(), weights, n0, y) : few_rows<Per, 2>(s, a.data(), weights, n0, y);
        continue;
      }
      for (int64_t i = 0; i < cols; ++i)
        dequantize_row<Per>(s, weights.codes + (n0 + i) * s.blocks * s.blob, weights.scales + (n0 + i) * s.blocks,
                            weights.zeros ? weights.zeros + (n0 + i) * s.blocks : nullptr, w.data() + i * width);
      int64_t r = 0;
      for (; r + kRowsPerTile <= s.m; r += kRowsPerTile)
        tile<kRowsPerTile>(s, a.data(), w.data(), r, n0, cols, weights.bias, y);
      for (; r < s.m; ++r) tile<1>(s, a.data(), w.data(), r, n0, cols, weights.bias, y);
    }
  });
}

#endif

void matmul_nbits_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  const Tensor a = in[0].contiguous(), b = in[1].contiguous(), scales = in[2].contiguous();
  const Tensor zeros = in.size() > 3 && in[3].defined() ? in[3].contiguous() : Tensor();
  const Tensor bias = in.size() > 4 && in[4].defined() ? in[4].contiguous() : Tensor();
  NbitsShape s;
  s.k = a.shape().back(), s.n = b.shape()[0], s.m = s.n > 0 ? out[0].numel() / s.n : 0;
  s.bits = attrs.get_int("bits", 4), s.block = attrs.get_int("block_size", 32);
  s.blocks = b.shape()[1], s.blob = b.shape()[2];
  if (out[0].numel() == 0) return;
  const nbits::Weights w{b.data<uint8_t>(), scales.data<float>(), zeros.defined() ? zeros.data<float>() : nullptr,
                         bias.defined() ? bias.data<float>() : nullptr};
  if (attrs.get_int("accuracy_level", 0) == 4) return nbits::int8_product(s, a.data<float>(), w, out[0].data<float>());
#if defined(__AVX512F__)
  if (s.blob % 16 == 0) {
    auto run = s.bits == 4 ? vector_rows<2> : s.bits == 2 ? vector_rows<4> : vector_rows<1>;
    return run(s, a.data<float>(), w, out[0].data<float>());
  }
#endif
  plain_rows(s, a.data<float>(), w, out[0].data<float>());
}

}  // namespace

KILN_REGISTER_KERNEL("matmul_nbits", CPU, matmul_nbits_kernel, DType::Float32);

}  // namespace kiln::cpu
