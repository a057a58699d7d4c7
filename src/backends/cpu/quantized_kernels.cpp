// CPU integer convolution, matrix products and sum. The first two run on
// oneDNN's int8 primitives (VNNI or AMX where the CPU has them), and on a
// plain int32 loop where those cannot be exact (8-bit weights, or int8
// inputs, on CPUs without VNNI; geometries oneDNN refuses). Both requantize
// as oneDNN does: (acc + bias) * scale in float32, rounded half to even,
// shifted by the zero point and saturated. The product of two activations
// (qlinear_batch_matmul, both with zero points) runs on Kiln's int8 tiles
// (int8_gemm.h) where the build has them and oneDNN's ISA is not held below
// AVX-512 VNNI, else on a plain int32 loop.
// GCC 12 warns that AVX-512 intrinsics' undefined source vectors may be
// used uninitialized (they are fully masked over); the warning is about the
// header's code, so it is silenced around the header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/int8_gemm.h"
#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/norm_rows.h"
#include "backends/cpu/onednn_int8.h"
#include "backends/cpu/quantize_layout.h"
#include "backends/cpu/vec8.h"
#include "ops/conv_attrs.h"

namespace kiln::cpu {
namespace {

using onednn::ConvShape;

using onednn::integer_to_float_scales;
using onednn::scale_of;
using onednn::zero_point_of;

template <typename TY>
TY requantize(int32_t acc, int32_t bias, float scale, int32_t zero) {
  constexpr float lo = std::is_signed_v<TY> ? -128.0f : 0.0f, hi = std::is_signed_v<TY> ? 127.0f : 255.0f;
  const float v = std::nearbyint((static_cast<float>(acc) + static_cast<float>(bias)) * scale) + static_cast<float>(zero);
  return static_cast<TY>(v < lo ? lo : v > hi ? hi : v);
}

template <typename TX, typename TY>
void conv_loop(const ConvShape& s, const TX* x, int32_t xz, const int8_t* w, const std::vector<float>& scales,
               const int32_t* bias, int32_t yz, TY* y) {
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  parallel_for(s.n * s.o, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t no = lo; no < hi; ++no) {
      const int64_t n = no / s.o, o = no % s.o, g = o / og;
      const float scale = scales[scales.size() == 1 ? 0 : static_cast<size_t>(o)];
      for (int64_t oy = 0; oy < s.oh; ++oy)
        for (int64_t ox = 0; ox < s.ow; ++ox) {
          int32_t acc = 0;
          for (int64_t c = 0; c < cg; ++c) {
            const TX* plane = x + (n * s.c + g * cg + c) * s.h * s.w;
            const int8_t* taps = w + (o * cg + c) * s.kh * s.kw;
            for (int64_t i = 0; i < s.kh; ++i) {
              const int64_t iy = oy * s.sh - s.ph + i * s.dh;
              if (iy < 0 || iy >= s.h) continue;
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t ix = ox * s.sw - s.pw + j * s.dw;
                if (ix >= 0 && ix < s.w) acc += (static_cast<int32_t>(plane[iy * s.w + ix]) - xz) * taps[i * s.kw + j];
              }
            }
          }
          y[(no * s.oh + oy) * s.ow + ox] = requantize<TY>(acc, bias ? bias[o] : 0, scale, yz);
        }
    }
  });
}

template <typename TX, typename TY>
void matmul_loop(int64_t m, int64_t k, int64_t n, const TX* a, int32_t az, const int8_t* b,
                 const std::vector<float>& scales, const int32_t* bias, int32_t yz, TY* y) {
  parallel_for(m, 1, [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> acc(static_cast<size_t>(n));
    for (int64_t r = lo; r < hi; ++r) {
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t i = 0; i < k; ++i) {
        const int32_t v = static_cast<int32_t>(a[r * k + i]) - az;
        for (int64_t j = 0; j < n; ++j) acc[j] += v * b[i * n + j];
      }
      for (int64_t j = 0; j < n; ++j)
        y[r * n + j] = requantize<TY>(acc[j], bias ? bias[j] : 0, scales[scales.size() == 1 ? 0 : j], yz);
    }
  });
}

// Calls f.template operator()<TX, TY>() for the input's and the output's types.
template <typename F>
void with_types(DType x, DType y, F&& f) {
  if (x == DType::UInt8) {
    if (y == DType::UInt8) f.template operator()<uint8_t, uint8_t>();
    else f.template operator()<uint8_t, int8_t>();
  } else {
    if (y == DType::UInt8) f.template operator()<int8_t, uint8_t>();
    else f.template operator()<int8_t, int8_t>();
  }
}

void qlinear_conv2d_kernel(const Ins& in, Outs& out, const Attrs& a) {
  if (out[0].numel() == 0) return;
  const Tensor x = in[0].contiguous(), w = in[3].contiguous();
  const Tensor bias = in.size() > 7 && in[7].defined() ? in[7].contiguous() : Tensor();
  const Conv2dAttrs c = Conv2dAttrs::of(a);
  const Shape &xs = x.shape(), &ws = w.shape(), &ys = out[0].shape();
  const ConvShape s{xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], ys[2], ys[3], c.stride[0], c.stride[1],
                    c.padding[0], c.padding[1], c.dilation[0], c.dilation[1], c.groups};
  const std::vector<float> scales = onednn::requantization_scales(in[1], in[4], in[5]);
  const int32_t xz = zero_point_of(in[2]), yz = zero_point_of(in[6]);
  const int32_t* b = bias.defined() ? bias.data<int32_t>() : nullptr;
  onednn::QuantizedConvCall call{s, x.dtype() == DType::Int8, out[0].dtype() == DType::Int8, scales.size() > 1,
                                 b != nullptr, xz != 0};
  if (onednn::int8_products_exact(w.data<int8_t>(), w.numel(), call.x_signed) &&
      onednn::quantized_conv_forward(call, x.raw_data(), xz, w.raw_data(), scales.data(), b, yz, out[0].raw_data()))
    return;
  with_types(x.dtype(), out[0].dtype(), [&]<typename TX, typename TY>() {
    conv_loop<TX, TY>(s, x.data<TX>(), xz, w.data<int8_t>(), scales, b, yz, out[0].data<TY>());
  });
}

void qlinear_matmul_kernel(const Ins& in, Outs& out, const Attrs&) {
  if (out[0].numel() == 0) return;
  const Tensor a = in[0].contiguous(), b = in[3].contiguous();
  const Tensor bias = in.size() > 7 && in[7].defined() ? in[7].contiguous() : Tensor();
  const int64_t k = b.shape()[0], n = b.shape()[1], m = k > 0 ? a.numel() / k : 0;
  const std::vector<float> scales = onednn::requantization_scales(in[1], in[4], in[5]);
  const int32_t az = zero_point_of(in[2]), yz = zero_point_of(in[6]);
  const int32_t* pb = bias.defined() ? bias.data<int32_t>() : nullptr;
  onednn::QuantizedMatmulCall call{m, k, n, a.dtype() == DType::Int8, out[0].dtype() == DType::Int8, scales.size() > 1,
                                   pb != nullptr, false, {}};
  if (m > 0 && k > 0 && onednn::int8_products_exact(b.data<int8_t>(), b.numel(), call.a_signed) &&
      onednn::quantized_matmul(call, a.raw_data(), az, b.data<int8_t>(), scales.data(), pb, yz, out[0].raw_data()))
    return;
  with_types(a.dtype(), out[0].dtype(), [&]<typename TX, typename TY>() {
    matmul_loop<TX, TY>(m, k, n, a.data<TX>(), az, b.data<int8_t>(), scales, pb, yz, out[0].data<TY>());
  });
}

// One row of a batch's product, a [k] row by B [k, n], both with zero
// points, in a plain int32 loop (CPUs without VNNI).
template <typename TA, typename TB, typename TY>
void batch_matmul_row(int64_t k, int64_t n, const TA* a, int32_t az, const TB* b, int32_t bz, float scale, int32_t yz,
                      TY* y, std::vector<int32_t>& acc) {
  acc.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t v = static_cast<int32_t>(a[i]) - az;
    for (int64_t j = 0; j < n; ++j) acc[j] += v * (static_cast<int32_t>(b[i * n + j]) - bz);
  }
  for (int64_t j = 0; j < n; ++j) y[j] = requantize<TY>(acc[j], 0, scale, yz);
}

void qlinear_batch_matmul_kernel(const Ins& in, Outs& out, const Attrs&) {
  if (out[0].numel() == 0) return;
  const Tensor a = in[0].contiguous(), b = in[3].contiguous();
  const int64_t k = a.shape().back(), n = b.shape().back(), m = a.shape()[static_cast<size_t>(a.dim() - 2)];
  const int64_t batches = out[0].numel() / (m * n);
  const float scale = scale_of(in[1]) * scale_of(in[4]) / scale_of(in[6]);
  const int32_t az = zero_point_of(in[2]), bz = zero_point_of(in[5]), yz = zero_point_of(in[7]);
  const bool a_signed = a.dtype() == DType::Int8, b_signed = b.dtype() == DType::Int8;
  const bool y_signed = out[0].dtype() == DType::Int8;
  const auto* pa = static_cast<const uint8_t*>(a.raw_data());
  const auto* pb = static_cast<const uint8_t*>(b.raw_data());
  auto* py = static_cast<uint8_t*>(out[0].raw_data());
  if (int8_gemm::available() && onednn::int8_isa_has_avx512_vnni() && k > 0) {
    // A batch (an attention head) a task: each is small, and split across
    // the threads one at a time, each paid a parallel region. (One batch, a
    // product by fixed weights, splits its rows inside instead.)
    parallel_for(batches, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        int8_gemm::Call c;
        c.m = m, c.k = k, c.n = n, c.lda = k, c.ldy = n;
        c.scales = &scale, c.a_signed = a_signed, c.a_zero = az, c.y_zero = yz, c.y_signed = y_signed;
        int8_gemm::run_with_computed_b(c, pa + i * m * k, pb + i * k * n, b_signed, bz, py + i * m * n);
      }
    });
    return;
  }
  // The loop: every batch's rows, in parallel.
  with_types(a.dtype(), out[0].dtype(), [&]<typename TA, typename TY>() {
    parallel_for(batches * m, 1, [&](int64_t lo, int64_t hi) {
      std::vector<int32_t> acc;
      for (int64_t row = lo; row < hi; ++row) {
        const int64_t i = row / m;
        const auto* ar = reinterpret_cast<const TA*>(pa) + row * k;
        auto* yr = reinterpret_cast<TY*>(py) + row * n;
        if (b_signed)
          batch_matmul_row(k, n, ar, az, reinterpret_cast<const int8_t*>(pb) + i * k * n, bz, scale, yz, yr, acc);
        else
          batch_matmul_row(k, n, ar, az, pb + i * k * n, bz, scale, yz, yr, acc);
      }
    });
  });
}

// One row of a dynamically quantized product, a [k] by b [k, n] in int32,
// times the column's scale plus its bias (CPUs without VNNI).
template <typename TA>
void integer_to_float_row(int64_t k, int64_t n, const TA* a, int32_t az, const int8_t* b, const float* scales,
                          const float* bias, float* y, std::vector<int32_t>& acc) {
  acc.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t v = static_cast<int32_t>(a[i]) - az;
    for (int64_t j = 0; j < n; ++j) acc[j] += v * b[i * n + j];
  }
  for (int64_t j = 0; j < n; ++j) y[j] = std::fma(static_cast<float>(acc[j]), scales[j], bias ? bias[j] : 0.0f);
}

// matmul_integer_to_float: on Kiln's int8 tiles where the CPU has VNNI
// (b packed per call here; graph mode packs it once), else an int32 loop.
void matmul_integer_to_float_kernel(const Ins& in, Outs& out, const Attrs&) {
  if (out[0].numel() == 0) return;
  const Tensor a = in[0].contiguous(), b = in[3].contiguous();
  const Tensor bias = in.size() > 5 && in[5].defined() ? in[5].contiguous() : Tensor();
  const int64_t k = b.shape()[0], n = b.shape()[1], m = out[0].numel() / n;
  const std::vector<float> scales = integer_to_float_scales(scale_of(in[1]), in[4], n);
  const int32_t az = zero_point_of(in[2]);
  const float* pbias = bias.defined() ? bias.data<float>() : nullptr;
  float* y = out[0].data<float>();
  if (int8_gemm::available() && onednn::int8_isa_has_avx512_vnni() && k > 0) {
    int8_gemm::Call c;
    c.m = m, c.k = k, c.n = n, c.lda = k, c.ldy = n;
    c.scales = scales.data(), c.per_column = true, c.a_signed = a.dtype() == DType::Int8, c.a_zero = az;
    c.to_float = true, c.vector = pbias;
    int8_gemm::run_with_computed_b(c, a.raw_data(), b.raw_data(), true, 0, y);
    return;
  }
  parallel_for(m, 1, [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> acc;
    for (int64_t r = lo; r < hi; ++r) {
      if (a.dtype() == DType::Int8)
        integer_to_float_row(k, n, a.data<int8_t>() + r * k, az, b.data<int8_t>(), scales.data(), pbias, y + r * n,
                             acc);
      else
        integer_to_float_row(k, n, a.data<uint8_t>() + r * k, az, b.data<int8_t>(), scales.data(), pbias, y + r * n,
                             acc);
    }
  });
}

// saturate(round(v) + zy) for an 8-bit output, in float32 and branch-free,
// so the loops around it vectorize: v is clipped to the output's range (NaN
// to its lowest value), then rounded half to even by adding and taking away
// 1.5 * 2^23, where std::nearbyint, fmin and fmax are library calls.
template <typename TY>
inline TY round_saturate(float v, float zy) {
  constexpr float lo = std::is_signed_v<TY> ? -128.0f : 0.0f, hi = std::is_signed_v<TY> ? 127.0f : 255.0f;
  constexpr float magic = 12582912.0f;
  const float below = lo - zy - 1, above = hi - zy + 1;
  v = !(v >= below) ? below : v > above ? above : v;
  v = (v + magic) - magic + zy;
  return static_cast<TY>(static_cast<int32_t>(v < lo ? lo : v > hi ? hi : v));
}

#if defined(__AVX512F__)
// Sixteen 8-bit values as float32.
template <typename T>
inline __m512 load_sixteen(const T* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(std::is_signed_v<T> ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v));
}

// round_saturate of sixteen values, stored: the hardware's rounding
// conversion (half to even) of values first clipped to +-2^30 (NaN to the
// lowest), then the zero point and the output's range.
template <typename TY>
inline __m128i round_saturate_sixteen(__m512 v, float zy) {
  constexpr int lo = std::is_signed_v<TY> ? -128 : 0, hi = std::is_signed_v<TY> ? 127 : 255;
  v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-1073741824.0f)), _mm512_set1_ps(1073741824.0f));
  __m512i q = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  q = _mm512_add_epi32(q, _mm512_set1_epi32(static_cast<int>(zy)));
  q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi));
  return _mm512_cvtepi32_epi8(q);
}
template <typename TY>
inline void store_sixteen(TY* p, __m512 v, float zy) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), round_saturate_sixteen<TY>(v, zy));
}
#endif

// y = saturate(round((a - za) * ma + (b - zb) * mb) + zy) over a block, the
// sum as one fused multiply-add in every lane and in the tail alike.
template <typename TX, typename TY>
void add_block(const TX* __restrict a, const TX* __restrict b, TY* __restrict y, int64_t n, float za, float ma, float zb,
               float mb, float zy) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vza = _mm512_set1_ps(za), vma = _mm512_set1_ps(ma), vzb = _mm512_set1_ps(zb), vmb = _mm512_set1_ps(mb);
  for (; i + 16 <= n; i += 16) {
    const __m512 pb = _mm512_mul_ps(_mm512_sub_ps(load_sixteen(b + i), vzb), vmb);
    store_sixteen(y + i, _mm512_fmadd_ps(_mm512_sub_ps(load_sixteen(a + i), vza), vma, pb), zy);
  }
#endif
  for (; i < n; ++i)
    y[i] = round_saturate<TY>(std::fma(static_cast<float>(a[i]) - za, ma, (static_cast<float>(b[i]) - zb) * mb), zy);
}

// The dequantized sum, requantized: (a - a_zero) * a_scale / y_scale + (b - b_zero) * b_scale / y_scale.
void qlinear_add_kernel(const Ins& in, Outs& out, const Attrs&) {
  const Tensor a = in[0].contiguous(), b = in[3].contiguous();
  const float ys = scale_of(in[6]), ma = scale_of(in[1]) / ys, mb = scale_of(in[4]) / ys;
  const float za = static_cast<float>(zero_point_of(in[2])), zb = static_cast<float>(zero_point_of(in[5])),
              zy = static_cast<float>(zero_point_of(in[7]));
  with_types(a.dtype(), out[0].dtype(), [&]<typename TX, typename TY>() {
    const TX *pa = a.data<TX>(), *pb = b.data<TX>();
    TY* py = out[0].data<TY>();
    parallel_for(a.numel(), 1 << 15, [=](int64_t begin, int64_t end) {
      add_block<TX, TY>(pa + begin, pb + begin, py + begin, end - begin, za, ma, zb, mb, zy);
    });
  });
}

// saturate(round(x / scale) + zero), in float32 as ONNX Runtime computes it
// (a division, rounded half to even). With AVX-512 sixteen at a time through
// the hardware's own rounding conversion and saturating clamps: about twice
// the rate of the portable loop, whose float clamps come first.
template <typename TY>
void quantize_block(const float* __restrict x, TY* __restrict y, int64_t n, float scale, float zy) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 s = _mm512_set1_ps(scale);
  for (; i + 16 <= n; i += 16) store_sixteen(y + i, _mm512_div_ps(_mm512_loadu_ps(x + i), s), zy);
#endif
  for (; i < n; ++i) y[i] = round_saturate<TY>(x[i] / scale, zy);
}

void quantize_linear_kernel(const Ins& in, Outs& out, const Attrs&) {
  const Tensor x = in[0].contiguous();
  const float scale = scale_of(in[1]), zy = static_cast<float>(zero_point_of(in[2]));
  const float* px = x.data<float>();
  auto run = [&]<typename TY>(TY* py) {
    // A division per element (about a cycle each with AVX-512): BERT's
    // 128 x 256 activations took 10.5 us on one thread, 6 on two.
    parallel_for(x.numel(), 1 << 13, [=](int64_t b, int64_t e) { quantize_block<TY>(px + b, py + b, e - b, scale, zy); });
  };
  if (out[0].dtype() == DType::UInt8) run(out[0].data<uint8_t>());
  else run(out[0].data<int8_t>());
}

// One quantized row of each channel in turn, spread into the pixels' channels.
template <typename TY>
void spread(const TY* __restrict row, TY* __restrict dst, int64_t w, int64_t stride) {
  for (int64_t i = 0; i < w; ++i) dst[i * stride] = row[i];
}

// Row `line` of image b, channels-last, from c plain planes of w floats.
template <typename TY>
void quantize_row_to_channels_last(const float* x, TY* y, int64_t c, int64_t h, int64_t w, float scale, float zy,
                                   TY* row) {
  int64_t i = 0;
#if defined(__AVX512VBMI__)
  // Up to four channels of sixteen pixels fill one vector: each channel's
  // sixteen bytes quantized into their quarter, then interleaved by one byte
  // permutation (byte k of the output: channel k % c of pixel k / c).
  if (c <= 4) {
    alignas(64) uint8_t order[64];
    for (int k = 0; k < 64; ++k) order[k] = static_cast<uint8_t>(k < 16 * c ? (k % c) * 16 + k / c : 0);
    const __m512i perm = _mm512_load_si512(order);
    const __mmask64 bytes = c == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * c)) - 1;
    const __m512 s = _mm512_set1_ps(scale);
    for (; i + 16 <= w; i += 16) {
      __m512i v = _mm512_setzero_si512();
      for (int64_t ch = 0; ch < c; ++ch) {
        const __m128i q = round_saturate_sixteen<TY>(_mm512_div_ps(_mm512_loadu_ps(x + ch * h * w + i), s), zy);
        v = _mm512_mask_blend_epi32(__mmask16(0xF) << (4 * ch), v, _mm512_broadcast_i32x4(q));
      }
      _mm512_mask_storeu_epi8(y + i * c, bytes, _mm512_permutexvar_epi8(perm, v));
    }
  }
#endif
  for (int64_t ch = 0; ch < c; ++ch) {
    quantize_block<TY>(x + ch * h * w + i, row, w - i, scale, zy);
    spread(row, y + i * c + ch, w - i, c);
  }
}

}  // namespace

void quantize_to_channels_last(const Tensor& x, float scale, int32_t zero, Tensor& y) {
  const Tensor xc = x.contiguous();
  const Shape& s = xc.shape();
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  const float* px = xc.data<float>();
  const float zy = static_cast<float>(zero);
  auto run = [&]<typename TY>(TY* py) {
    parallel_for(n * h, 1, [&](int64_t lo, int64_t hi) {
      std::vector<TY> row(static_cast<size_t>(w));
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t b = r / h, line = r % h;
        quantize_row_to_channels_last<TY>(px + (b * c * h + line) * w, py + r * w * c, c, h, w, scale, zy, row.data());
      }
    });
  };
  if (y.dtype() == DType::UInt8) run(y.data<uint8_t>());
  else run(y.data<int8_t>());
}

namespace {

template <typename TX>
void dequantize_block(const TX* __restrict px, float* __restrict py, int64_t n, float scale, float zero) {
  for (int64_t i = 0; i < n; ++i) py[i] = (static_cast<float>(px[i]) - zero) * scale;
}

// The smallest and largest of p[0, n) in one pass, eight lanes at a time;
// a NaN anywhere makes both NaN, as amin and amax give it.
void min_max(const float* p, int64_t n, float& lo, float& hi) {
  using namespace vec8;
  const float inf = std::numeric_limits<float>::infinity();
  vf low = splat(inf), high = splat(-inf);
  vi nan = vi{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const vf v = load(p + i);
    low = v < low ? v : low;
    high = v > high ? v : high;
    nan |= v != v;
  }
  bool any_nan = false;
  for (int k = 0; k < 8; ++k) {
    lo = std::min(lo, low[k]), hi = std::max(hi, high[k]);
    any_nan = any_nan || nan[k] != 0;
  }
  for (; i < n; ++i) {
    any_nan = any_nan || p[i] != p[i];
    lo = std::min(lo, p[i]), hi = std::max(hi, p[i]);
  }
  if (any_nan) lo = hi = std::numeric_limits<float>::quiet_NaN();
}

// DynamicQuantizeLinear in two passes over x (its range, then the
// quantization) where the composition of ops took five.
void dynamic_quantize_linear_kernel(const Ins& in, Outs& out, const Attrs&) {
  const Tensor x = in[0].contiguous();
  const float* px = x.data<float>();
  const int64_t n = x.numel();
  const int parts = static_cast<int>(std::clamp<int64_t>(n / (1 << 14), 1, get_num_threads()));
  std::vector<float> lows(static_cast<size_t>(parts), 0.0f), highs(static_cast<size_t>(parts), 0.0f);
  parallel_for(parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      min_max(px + n * t / parts, n * (t + 1) / parts - n * t / parts, lows[t], highs[t]);
  });
  // (the range always holds 0: both start there)
  float lo = 0.0f, hi = 0.0f;
  for (int t = 0; t < parts; ++t) {
    if (lows[t] != lows[t]) lo = hi = lows[t];
    if (lo != lo) break;
    lo = std::min(lo, lows[t]), hi = std::max(hi, highs[t]);
  }
  const float scale = (hi - lo) / 255.0f;
  const float zero = std::nearbyint(-lo / scale);  // NaN (all zeros, or a NaN in x) gives 0
  const int32_t zy = zero > 0.0f ? static_cast<int32_t>(std::min(zero, 255.0f)) : 0;
  out[1].data<float>()[0] = scale;
  out[2].data<uint8_t>()[0] = static_cast<uint8_t>(zy);
  uint8_t* py = out[0].data<uint8_t>();
  parallel_for(n, 1 << 13, [=](int64_t b, int64_t e) { quantize_row(px + b, py + b, e - b, scale, zy); });
}

void dequantize_linear_kernel(const Ins& in, Outs& out, const Attrs&) {
  const Tensor q = in[0].contiguous();
  const float scale = scale_of(in[1]), zero = static_cast<float>(zero_point_of(in[2]));
  float* py = out[0].data<float>();
  auto run = [&]<typename TX>(const TX* px) {
    parallel_for(q.numel(), 1 << 15,
                 [=](int64_t b, int64_t e) { dequantize_block(px + b, py + b, e - b, scale, zero); });
  };
  if (q.dtype() == DType::UInt8) run(q.data<uint8_t>());
  else run(q.data<int8_t>());
}

}  // namespace

void quantize_row(const float* x, uint8_t* y, int64_t n, float scale, int32_t zero) {
  quantize_block<uint8_t>(x, y, n, scale, static_cast<float>(zero));
}
void quantize_row(const float* x, int8_t* y, int64_t n, float scale, int32_t zero) {
  quantize_block<int8_t>(x, y, n, scale, static_cast<float>(zero));
}
void dequantize_row(const uint8_t* q, float* y, int64_t n, float scale, int32_t zero) {
  dequantize_block(q, y, n, scale, static_cast<float>(zero));
}
void dequantize_row(const int8_t* q, float* y, int64_t n, float scale, int32_t zero) {
  dequantize_block(q, y, n, scale, static_cast<float>(zero));
}

KILN_REGISTER_KERNEL("quantize_linear", CPU, quantize_linear_kernel, DType::Float32);
KILN_REGISTER_KERNEL("dynamic_quantize_linear", CPU, dynamic_quantize_linear_kernel, DType::Float32);
KILN_REGISTER_KERNEL("dequantize_linear", CPU, dequantize_linear_kernel, DType::UInt8, DType::Int8);
KILN_REGISTER_KERNEL("qlinear_add", CPU, qlinear_add_kernel, DType::UInt8, DType::Int8);
KILN_REGISTER_KERNEL("qlinear_conv2d", CPU, qlinear_conv2d_kernel, DType::UInt8, DType::Int8);
KILN_REGISTER_KERNEL("qlinear_matmul", CPU, qlinear_matmul_kernel, DType::UInt8, DType::Int8);
KILN_REGISTER_KERNEL("qlinear_batch_matmul", CPU, qlinear_batch_matmul_kernel, DType::UInt8, DType::Int8);
KILN_REGISTER_KERNEL("matmul_integer_to_float", CPU, matmul_integer_to_float_kernel, DType::UInt8, DType::Int8);

}  // namespace kiln::cpu
