#pragma once
// How interpolate reads its input along one axis, from the op's attributes
// alone (no data): per output position, the source indices and weights of
// the mode's kernel (nearest, linear, cubic, each stretched when
// antialiased downsampling asks) from the coordinate mapping. Shared by the
// kernels of every backend, which gather (or, backward, scatter) with them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/attrs.h"

namespace kiln::resize {

// Per output position of one axis, `taps` source indices and their weights
// (nearest: one; linear: two; cubic: four; antialiased downsampling: as many
// as the stretched kernel covers), or none where tf_crop_and_resize maps the
// position outside the input (it takes the extrapolation value).
struct AxisMap {
  int64_t taps = 1;
  std::vector<int64_t> index;  // [out][taps]
  std::vector<double> weight;  // [out][taps]
  std::vector<bool> outside;   // [out]
};

// Cubic convolution with coefficient A (Keys), at distance |x| from the tap.
inline double cubic(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

inline AxisMap axis_map(const Attrs& a, int axis, int64_t in, int64_t out) {
  const std::string mode = a.get_string("mode", "nearest"), coords = a.get_string("coordinates", "half_pixel"),
                    nearest = a.get_string("nearest_mode", "round_prefer_floor");
  const auto scales = a.get_floats("scales", {});
  const auto roi = a.get_floats("roi", {});
  const double cubic_a = a.get_float("cubic_coeff_a", -0.75);
  const bool exclude_outside = a.get_bool("exclude_outside", false);
  // Source pixels per output pixel: 1 / scale when given, else in / out.
  const double inv = scales.empty() ? static_cast<double>(in) / static_cast<double>(out) : 1.0 / scales[axis];
  // The resized length before rounding down: ONNX's align_corners and
  // half_pixel_symmetric use it when the scale is given.
  const double scaled = scales.empty() ? static_cast<double>(out) : in * scales[axis];
  // Downsampling with antialias stretches the kernel by 1 / scale.
  const double stretch = a.get_bool("antialias", false) && mode != "nearest" ? std::min(1.0, 1.0 / inv) : 1.0;
  // The kernel's taps, as offsets [first, first + taps) from the pixel at or left of the coordinate.
  int64_t first = 0;
  AxisMap m;
  if (mode == "linear") {
    first = static_cast<int64_t>(std::floor(-1 / stretch) + 1);
    m.taps = 2 - 2 * first;
  } else if (mode == "cubic") {
    first = static_cast<int64_t>(std::floor(-2 / stretch) + 1);
    m.taps = 2 - 2 * first;
  }
  m.index.reserve(static_cast<size_t>(out * m.taps));
  m.weight.reserve(static_cast<size_t>(out * m.taps));
  for (int64_t x = 0; x < out; ++x) {
    double c;
    if (coords == "half_pixel")
      c = (x + 0.5) * inv - 0.5;
    else if (coords == "pytorch_half_pixel")
      c = out > 1 ? (x + 0.5) * inv - 0.5 : 0.0;
    else if (coords == "align_corners")
      c = scaled > 1 ? x * static_cast<double>(in - 1) / (scaled - 1) : 0.0;
    else if (coords == "half_pixel_symmetric")
      c = in / 2.0 * (1 - static_cast<double>(out) / scaled) + (x + 0.5) * inv - 0.5;
    else if (coords == "tf_half_pixel_for_nn")
      c = (x + 0.5) * inv;
    else if (coords == "tf_crop_and_resize") {
      const double start = roi[axis], end = roi[2 + axis];
      c = out > 1 ? start * (in - 1) + x * (end - start) * (in - 1) / static_cast<double>(out - 1)
                  : 0.5 * (start + end) * (in - 1);
    } else
      c = x * inv;  // asymmetric
    m.outside.push_back(coords == "tf_crop_and_resize" && (c < 0 || c > in - 1));
    if (mode == "nearest") {
      double r;
      if (nearest == "floor")
        r = std::floor(c);
      else if (nearest == "ceil")
        r = std::ceil(c);
      else if (nearest == "round_prefer_ceil")
        r = std::floor(c + 0.5);
      else
        r = std::ceil(c - 0.5);  // round_prefer_floor
      m.index.push_back(std::clamp<int64_t>(static_cast<int64_t>(r), 0, in - 1));
      m.weight.push_back(1.0);
      continue;
    }
    // The pixel left of the coordinate and the distance past it, in (0, 1]
    // as ONNX's reference takes it (a coordinate on a pixel is 1 past the one before).
    double base = std::floor(c), ratio = c - base;
    if (ratio == 0) base -= 1, ratio = 1;
    double total = 0;
    const size_t begin = m.weight.size();
    for (int64_t t = 0; t < m.taps; ++t) {
      const int64_t i = static_cast<int64_t>(base) + first + t;
      const double d = (first + t - ratio) * stretch;
      double w = mode == "linear" ? std::clamp(1 - std::fabs(d), 0.0, 1.0) : cubic(d, cubic_a);
      if (exclude_outside && (i < 0 || i >= in)) w = 0;
      m.index.push_back(std::clamp<int64_t>(i, 0, in - 1));  // beyond the edges: the edge pixel
      m.weight.push_back(w);
      total += w;
    }
    if (stretch < 1 || exclude_outside)  // the stretched or cut kernel sums to one again
      for (size_t k = begin; k < m.weight.size(); ++k) m.weight[k] /= total;
  }
  return m;
}

}  // namespace kiln::resize
