// Concatenation and average pooling of 8-bit quantized values (see the
// header), and their eager kernels: qlinear_concat and qlinear_avg_pool2d.
#include "backends/cpu/quantized_concat_pool.h"

#include <cmath>
#include <cstring>

#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/onednn_int8.h"
#include "ops/pool_attrs.h"

namespace kiln::cpu {
namespace {

template <typename T>
T saturate(float v) {
  constexpr float lo = std::is_signed_v<T> ? -128.0f : 0.0f, hi = std::is_signed_v<T> ? 127.0f : 255.0f;
  return static_cast<T>(v < lo ? lo : v > hi ? hi : v);
}

}  // namespace

Requantizer::Requantizer(float x_scale, int32_t x_zero, float y_scale, int32_t y_zero, bool is_signed) {
  identity = x_scale == y_scale && x_zero == y_zero;
  for (int b = 0; b < 256; ++b) {
    const int32_t q = is_signed ? static_cast<int8_t>(b) : b;
    const float v = std::nearbyint(x_scale * static_cast<float>(q - x_zero) / y_scale) + static_cast<float>(y_zero);
    table[b] = is_signed ? static_cast<uint8_t>(saturate<int8_t>(v)) : saturate<uint8_t>(v);
  }
}

template <typename T>
void Requantizer::apply(const T* x, T* y, int64_t n) const {
  if (identity) {
    std::memcpy(y, x, static_cast<size_t>(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(table[static_cast<uint8_t>(x[i])]);
}

template <typename T>
void concat_rows(const std::vector<ConcatPart<T>>& parts, int64_t rows, T* y) {
  int64_t width = 0;
  for (const auto& p : parts) width += p.width;
  parallel_for(rows, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(width, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      T* out = y + r * width;
      for (const auto& p : parts) {
        p.requantize->apply(p.x + r * p.width, out, p.width);
        out += p.width;
      }
    }
  });
}

namespace {

// The window of output (oy, ox): its rows and columns inside x, and how
// many positions the average divides by.
struct Window {
  int64_t y0, y1, x0, x1, count;
};
Window window_at(const QuantizedPool& p, int64_t oy, int64_t ox) {
  const PoolWindow& wd = p.window;
  const int64_t ys = oy * wd.sh - wd.ph, xs = ox * wd.sw - wd.pw;
  const int64_t ye = std::min(ys + wd.kh, p.h + wd.ph), xe = std::min(xs + wd.kw, p.w + wd.pw);
  Window w{std::max<int64_t>(ys, 0), std::min(ye, p.h), std::max<int64_t>(xs, 0), std::min(xe, p.w), 0};
  w.count = p.count_include_pad ? (ye - ys) * (xe - xs) : (w.y1 - w.y0) * (w.x1 - w.x0);
  return w;
}

// (sum - count * x_zero) * multiplier / count, rounded half to even, + y_zero.
template <typename T>
T average(int32_t sum, const Window& w, const QuantizedPool& p) {
  const float centered = static_cast<float>(sum - static_cast<int32_t>(w.y1 - w.y0) * (w.x1 - w.x0) * p.x_zero);
  return saturate<T>(std::nearbyint(centered * p.multiplier / static_cast<float>(w.count)) + static_cast<float>(p.y_zero));
}

}  // namespace

template <typename T>
void avg_pool_quantized_nchw(const QuantizedPool& p, const T* x, T* y) {
  parallel_for(p.n * p.c, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t plane = lo; plane < hi; ++plane) {
      const T* in = x + plane * p.h * p.w;
      T* out = y + plane * p.oh * p.ow;
      for (int64_t oy = 0; oy < p.oh; ++oy)
        for (int64_t ox = 0; ox < p.ow; ++ox) {
          const Window w = window_at(p, oy, ox);
          int32_t sum = 0;
          for (int64_t iy = w.y0; iy < w.y1; ++iy)
            for (int64_t ix = w.x0; ix < w.x1; ++ix) sum += in[iy * p.w + ix];
          out[oy * p.ow + ox] = average<T>(sum, w, p);
        }
    }
  });
}

// Channels innermost: each window sums whole rows of C values, which vectorize.
template <typename T>
void avg_pool_quantized_nhwc(const QuantizedPool& p, const T* x, T* y) {
  parallel_for(p.n * p.oh, 1, [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> sums(static_cast<size_t>(p.c));
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t b = row / p.oh, oy = row % p.oh;
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        const Window w = window_at(p, oy, ox);
        std::fill(sums.begin(), sums.end(), 0);
        for (int64_t iy = w.y0; iy < w.y1; ++iy)
          for (int64_t ix = w.x0; ix < w.x1; ++ix) {
            const T* in = x + ((b * p.h + iy) * p.w + ix) * p.c;
            for (int64_t ch = 0; ch < p.c; ++ch) sums[static_cast<size_t>(ch)] += in[ch];
          }
        T* out = y + ((b * p.oh + oy) * p.ow + ox) * p.c;
        for (int64_t ch = 0; ch < p.c; ++ch) out[ch] = average<T>(sums[static_cast<size_t>(ch)], w, p);
      }
    }
  });
}

#define KILN_INSTANTIATE(T)                                                                        \
  template void Requantizer::apply<T>(const T*, T*, int64_t) const;                                \
  template void concat_rows<T>(const std::vector<ConcatPart<T>>&, int64_t, T*);                    \
  template void avg_pool_quantized_nchw<T>(const QuantizedPool&, const T*, T*);                    \
  template void avg_pool_quantized_nhwc<T>(const QuantizedPool&, const T*, T*);
KILN_INSTANTIATE(uint8_t)
KILN_INSTANTIATE(int8_t)
#undef KILN_INSTANTIATE

namespace {

template <typename T>
void concat_kernel_typed(const Ins& in, Outs& out, const Attrs& a) {
  Tensor& y = out[0];
  int64_t axis = a.get_int("axis", 1);
  if (axis < 0) axis += y.dim();
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= y.shape()[static_cast<size_t>(d)];
  const float ys = onednn::scale_of(in[0]);
  const int32_t yz = onednn::zero_point_of(in[1]);
  std::vector<Tensor> held;  // contiguous copies, alive while the parts point into them
  std::vector<Requantizer> requantizers;
  requantizers.reserve((in.size() - 2) / 3);
  std::vector<ConcatPart<T>> parts;
  for (size_t i = 2; i < in.size(); i += 3) {
    held.push_back(in[i].contiguous());
    requantizers.emplace_back(onednn::scale_of(in[i + 1]), onednn::zero_point_of(in[i + 2]), ys, yz, std::is_signed_v<T>);
    const int64_t width = rows ? held.back().numel() / rows : 0;
    parts.push_back({held.back().template data<T>(), width, &requantizers.back()});
  }
  if (y.numel() > 0) concat_rows<T>(parts, rows, y.data<T>());
}

void qlinear_concat_kernel(const Ins& in, Outs& out, const Attrs& a) {
  if (out[0].dtype() == DType::UInt8) concat_kernel_typed<uint8_t>(in, out, a);
  else concat_kernel_typed<int8_t>(in, out, a);
}

void qlinear_avg_pool2d_kernel(const Ins& in, Outs& out, const Attrs& a) {
  if (out[0].numel() == 0) return;
  const Tensor x = in[0].contiguous();
  const Shape &xs = x.shape(), &ys = out[0].shape();
  const QuantizedPool p{PoolWindow::of(Pool2dAttrs::of(a)), xs[0], xs[1], xs[2], xs[3], ys[2], ys[3],
                        a.get_bool("count_include_pad", true), onednn::zero_point_of(in[2]),
                        onednn::zero_point_of(in[4]), onednn::scale_of(in[1]) / onednn::scale_of(in[3])};
  if (x.dtype() == DType::UInt8) avg_pool_quantized_nchw(p, x.data<uint8_t>(), out[0].data<uint8_t>());
  else avg_pool_quantized_nchw(p, x.data<int8_t>(), out[0].data<int8_t>());
}

}  // namespace

KILN_REGISTER_KERNEL("qlinear_concat", CPU, qlinear_concat_kernel, DType::UInt8, DType::Int8);
KILN_REGISTER_KERNEL("qlinear_avg_pool2d", CPU, qlinear_avg_pool2d_kernel, DType::UInt8, DType::Int8);

}  // namespace kiln::cpu
