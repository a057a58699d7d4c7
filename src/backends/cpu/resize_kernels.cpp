// CPU interpolate and its backward: per output row and column, the source
// index (nearest) or the two neighbours and their weights (linear), from
// the coordinate mapping; then a gather (or, backward, a scatter) per plane.
#include <cmath>
#include <string>

#include "backends/cpu/kernel_helpers.h"

namespace kiln::cpu {
namespace {

struct AxisMap {
  std::vector<int64_t> lo, hi;  // nearest: lo only
  std::vector<double> w_hi;     // linear: the weight of hi (lo gets 1 - it)
};

AxisMap axis_map(const Attrs& a, int axis, int64_t in, int64_t out) {
  const std::string mode = a.get_string("mode", "nearest"), coords = a.get_string("coordinates", "half_pixel"),
                    nearest = a.get_string("nearest_mode", "round_prefer_floor");
  const auto scales = a.get_floats("scales", {});
  // Source pixels per output pixel: 1 / scale when given, else in / out.
  const double inv = scales.empty() ? static_cast<double>(in) / static_cast<double>(out) : 1.0 / scales[axis];
  // The resized length before rounding down: ONNX's align_corners and
  // half_pixel_symmetric use it when the scale is given.
  const double scaled = scales.empty() ? static_cast<double>(out) : in * scales[axis];
  AxisMap m;
  for (int64_t x = 0; x < out; ++x) {
    double c;
    if (coords == "half_pixel") c = (x + 0.5) * inv - 0.5;
    else if (coords == "pytorch_half_pixel") c = out > 1 ? (x + 0.5) * inv - 0.5 : 0.0;
    else if (coords == "align_corners") c = scaled > 1 ? x * static_cast<double>(in - 1) / (scaled - 1) : 0.0;
    else if (coords == "half_pixel_symmetric")
      c = in / 2.0 * (1 - static_cast<double>(out) / scaled) + (x + 0.5) * inv - 0.5;
    else if (coords == "tf_half_pixel_for_nn") c = (x + 0.5) * inv;
    else c = x * inv;  // asymmetric
    if (mode == "nearest") {
      double r;
      if (nearest == "floor") r = std::floor(c);
      else if (nearest == "ceil") r = std::ceil(c);
      else if (nearest == "round_prefer_ceil") r = std::floor(c + 0.5);
      else r = std::ceil(c - 0.5);  // round_prefer_floor
      m.lo.push_back(std::clamp<int64_t>(static_cast<int64_t>(r), 0, in - 1));
      continue;
    }
    c = std::max(c, 0.0);  // before the first pixel: the first pixel
    const int64_t lo = std::min<int64_t>(static_cast<int64_t>(c), in - 1);
    m.lo.push_back(lo);
    m.hi.push_back(std::min<int64_t>(lo + 1, in - 1));
    m.w_hi.push_back(std::min(c - static_cast<double>(lo), 1.0));
  }
  return m;
}

template <typename T, bool Backward>
void interpolate_impl(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor x = contiguous(in[Backward ? 1 : 0]);
  const Tensor g = Backward ? contiguous(in[0]) : Tensor();
  const Shape& xs = x.shape();
  const auto size = a.get_ints("size");
  const int64_t h = xs[2], w = xs[3], oh = size[0], ow = size[1], planes = xs[0] * xs[1];
  const AxisMap rows = axis_map(a, 0, h, oh), cols = axis_map(a, 1, w, ow);
  const bool linear = a.get_string("mode", "nearest") == "linear";
  const T* src = Backward ? g.data<T>() : x.data<T>();
  T* dst = out[0].data<T>();
  parallel_for(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* sp = src + p * (Backward ? oh * ow : h * w);
      T* dp = dst + p * (Backward ? h * w : oh * ow);
      if (Backward) std::fill(dp, dp + h * w, T(0));
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          if (!linear) {
            const int64_t at = rows.lo[oy] * w + cols.lo[ox];
            if (Backward) dp[at] += sp[oy * ow + ox];
            else dp[oy * ow + ox] = sp[at];
            continue;
          }
          const T ly = static_cast<T>(rows.w_hi[oy]), lx = static_cast<T>(cols.w_hi[ox]);
          const T ky = T(1) - ly, kx = T(1) - lx;
          const int64_t r0 = rows.lo[oy] * w, r1 = rows.hi[oy] * w, c0 = cols.lo[ox], c1 = cols.hi[ox];
          if (Backward) {
            const T gv = sp[oy * ow + ox];
            dp[r0 + c0] += ky * kx * gv;
            dp[r0 + c1] += ky * lx * gv;
            dp[r1 + c0] += ly * kx * gv;
            dp[r1 + c1] += ly * lx * gv;
          } else {
            dp[oy * ow + ox] = ky * (kx * sp[r0 + c0] + lx * sp[r0 + c1]) + ly * (kx * sp[r1 + c0] + lx * sp[r1 + c1]);
          }
        }
    }
  });
}

template <typename T>
void interpolate_kernel(const Ins& in, Outs& out, const Attrs& a) { interpolate_impl<T, false>(in, out, a); }
template <typename T>
void interpolate_backward_kernel(const Ins& in, Outs& out, const Attrs& a) { interpolate_impl<T, true>(in, out, a); }

}  // namespace

KILN_CPU_F32_F64("interpolate", interpolate_kernel);
KILN_CPU_F32_F64("interpolate_backward", interpolate_backward_kernel);

}  // namespace kiln::cpu
