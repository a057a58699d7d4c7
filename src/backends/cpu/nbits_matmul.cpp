// matmul_nbits on the CPU in float32: a float32 product with weights of 2,
// 4 or 8 bits quantized in blocks along K (LLM weights), read in their
// packed form, each weight dequantized as (q - zero) * scale as ONNX
// Runtime's reference does. One or two rows of a (a decoded token): each
// task takes four outputs and dequantizes each 16-byte run of their codes
// as it uses it (byte i holds codes i * per_byte + j: vector j of the run is
// one zero-extension, a shift and a mask), against a's rows laid out once
// per call in that order. More rows (a prompt): 32 outputs dequantized a
// slice of K at a time into two panels, gathered a 32-bit word of codes per
// output, and every row against the slice on gemm_tile.h's tiles (a
// 4096x4096 4-bit product of 32 rows 8.6 -> 5.0 ms). With accuracy_level 4
// the product is the int8 one (nbits_matmul_int8.cpp).
#include "backends/cpu/nbits_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/exp16.h"  // the AVX-512 intrinsics, where the machine has them
#include "backends/cpu/gemm_tile.h"
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

constexpr int kWeightRows = 4;  // rows of b (outputs) a few-row task takes

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

// Many rows (a prompt): 32 outputs' weights dequantized a slice of K at a
// time into two 16-column panels (b[k][16], as gemm_tile.h's tiles read
// them), and every row of a against the slice on those tiles. A panel's
// row k is one 32-bit gather of each output's codes around k, shifted and
// masked, converted, less the zero point, times the scale.
constexpr int64_t kSlice = 256;  // k per slice: two panels of it, 32 KB, stay in the L1 cache

// Output rows n0 .. n0 + 31 (the last again past n: offsets holds each
// one's first byte from codes), k in [k0, k0 + depth), into panels b0 and
// b1. scales and zeros: [blocks][32] for the 32 outputs.
template <int Per>
void dequantize_slice(const NbitsShape& s, const uint8_t* codes, const int32_t* offsets, const float* scales,
                      const float* zeros, int64_t k0, int64_t depth, float* b0, float* b1) {
  constexpr int bits = 8 / Per, per_word = 4 * Per;  // codes in a 32-bit word
  const __m512i mask = _mm512_set1_epi32((1 << bits) - 1);
  const __m512i rows[2] = {_mm512_loadu_si512(offsets), _mm512_loadu_si512(offsets + 16)};
  float* panels[2] = {b0, b1};
  for (int64_t k = k0; k < k0 + depth; k += per_word) {  // (k0 and kSlice are whole words of codes)
    const int64_t j = k / s.block;
    for (int p = 0; p < 2; ++p) {
      const __m512 scale = _mm512_loadu_ps(scales + j * 32 + 16 * p), zero = _mm512_loadu_ps(zeros + j * 32 + 16 * p);
      const __m512i words = _mm512_i32gather_epi32(rows[p], codes + k / Per, 1);
      float* to = panels[p] + (k - k0) * 16;
      const int64_t in_word = std::min<int64_t>(per_word, k0 + depth - k);
      for (int64_t q = 0; q < in_word; ++q) {
        const __m512i code = _mm512_and_si512(_mm512_srli_epi32(words, static_cast<unsigned>(q * bits)), mask);
        _mm512_storeu_ps(to + q * 16, _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(code), zero), scale));
      }
    }
  }
}

template <int Per>
void many_rows(const NbitsShape& s, const float* a, const nbits::Weights& weights, float* y) {
  const int64_t pairs = (s.n + 31) / 32;
  parallel_for(pairs, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> panels(static_cast<size_t>(2 * kSlice * gemm::kCols)), out(static_cast<size_t>(s.m * 32));
    std::vector<float> scales(static_cast<size_t>(s.blocks * 32)), zeros(scales.size());
    int32_t offsets[32];
    for (int64_t pair = lo; pair < hi; ++pair) {
      const int64_t n0 = pair * 32, outputs = std::min<int64_t>(32, s.n - n0);
      for (int64_t o = 0; o < 32; ++o) {
        const int64_t n = std::min(n0 + o, s.n - 1);
        offsets[o] = static_cast<int32_t>((n - n0) * s.blocks * s.blob);
        for (int64_t j = 0; j < s.blocks; ++j) {
          scales[static_cast<size_t>(j * 32 + o)] = weights.scales[n * s.blocks + j];
          zeros[static_cast<size_t>(j * 32 + o)] = nbits::zero_at(s, weights, n * s.blocks + j);
        }
      }
      for (int64_t k0 = 0; k0 < s.k; k0 += kSlice) {
        const int64_t depth = std::min(kSlice, s.k - k0);
        float* b0 = panels.data();
        float* b1 = b0 + kSlice * gemm::kCols;
        dequantize_slice<Per>(s, weights.codes + n0 * s.blocks * s.blob, offsets, scales.data(), zeros.data(), k0,
                              depth, b0, b1);
        const gemm::Epilogue e{nullptr, k0 > 0, k0 + depth >= s.k, false};
        for (int64_t r = 0; r < s.m; r += gemm::kRows) {
          const int64_t rows = std::min(gemm::kRows, s.m - r);
          gemm::tile2_rows(rows, a + r * s.k + k0, s.k, b0, b1, depth, {out.data() + r * 32, 32, 8},
                           {out.data() + r * 32 + 16, 32, 8}, e, e);
        }
      }
      for (int64_t r = 0; r < s.m; ++r)
        for (int64_t o = 0; o < outputs; ++o)
          y[r * s.n + n0 + o] = out[static_cast<size_t>(r * 32 + o)] + (weights.bias ? weights.bias[n0 + o] : 0.0f);
    }
  });
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

// The vector form, for blocks of whole 16-byte runs: one or two rows of a
// (kWeightRows outputs a task, dequantized as they are used), or more
// (many_rows: slices of two panels on the GEMM tiles).
template <int Per>
void vector_rows(const NbitsShape& s, const float* a_rows, const nbits::Weights& weights, float* y) {
  if (s.m > 2) return many_rows<Per>(s, a_rows, weights, y);
  const std::vector<float> a = laid_out(s, a_rows);
  parallel_for((s.n + kWeightRows - 1) / kWeightRows, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t g = lo; g < hi; ++g)
      s.m == 1 ? few_rows<Per, 1>(s, a.data(), weights, g * kWeightRows, y)
               : few_rows<Per, 2>(s, a.data(), weights, g * kWeightRows, y);
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
