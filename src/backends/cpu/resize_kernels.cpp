// CPU interpolate and its backward: per output row and column, the source
// indices and weights of the mode's kernel (nearest, linear, cubic, each
// stretched when antialiased downsampling asks), from the coordinate mapping;
// then a weighted gather (or, backward, a scatter) per plane.
#include <algorithm>
#include <cmath>
#include <string>

#include "backends/cpu/interpolate_pixels.h"
#include "backends/cpu/kernel_helpers.h"

namespace kiln::cpu {
namespace {

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
double cubic(double x, double a) {
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

AxisMap axis_map(const Attrs& a, int axis, int64_t in, int64_t out) {
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
    if (coords == "half_pixel") c = (x + 0.5) * inv - 0.5;
    else if (coords == "pytorch_half_pixel") c = out > 1 ? (x + 0.5) * inv - 0.5 : 0.0;
    else if (coords == "align_corners") c = scaled > 1 ? x * static_cast<double>(in - 1) / (scaled - 1) : 0.0;
    else if (coords == "half_pixel_symmetric")
      c = in / 2.0 * (1 - static_cast<double>(out) / scaled) + (x + 0.5) * inv - 0.5;
    else if (coords == "tf_half_pixel_for_nn") c = (x + 0.5) * inv;
    else if (coords == "tf_crop_and_resize") {
      const double start = roi[axis], end = roi[2 + axis];
      c = out > 1 ? start * (in - 1) + x * (end - start) * (in - 1) / static_cast<double>(out - 1)
                  : 0.5 * (start + end) * (in - 1);
    } else c = x * inv;  // asymmetric
    m.outside.push_back(coords == "tf_crop_and_resize" && (c < 0 || c > in - 1));
    if (mode == "nearest") {
      double r;
      if (nearest == "floor") r = std::floor(c);
      else if (nearest == "ceil") r = std::ceil(c);
      else if (nearest == "round_prefer_ceil") r = std::floor(c + 0.5);
      else r = std::ceil(c - 0.5);  // round_prefer_floor
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

// One plane, forward (a weighted gather) or backward (a scatter). TAPS > 0
// fixes both axes' tap counts at compile time (nearest, linear and cubic
// without antialias), so the inner loops unroll; 0 reads them at run time.
template <int TAPS, typename T, bool Backward>
void interpolate_plane(const AxisMap& rows, const AxisMap& cols, const std::vector<T>& wy_all,
                       const std::vector<T>& wx_all, const T* sp, T* dp, int64_t w, int64_t oh, int64_t ow, T fill) {
  const int64_t rt = TAPS > 0 ? TAPS : rows.taps, ct = TAPS > 0 ? TAPS : cols.taps;
  for (int64_t oy = 0; oy < oh; ++oy) {
    const int64_t* ry = &rows.index[oy * rt];
    const T* wy = &wy_all[oy * rt];
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t* cx = &cols.index[ox * ct];
      const T* wx = &wx_all[ox * ct];
      const bool outside = rows.outside[oy] || cols.outside[ox];
      if (Backward) {
        if (outside) continue;
        const T gv = sp[oy * ow + ox];
        for (int64_t i = 0; i < rt; ++i) {
          const T gi = wy[i] * gv;
          for (int64_t j = 0; j < ct; ++j) dp[ry[i] * w + cx[j]] += wx[j] * gi;
        }
        continue;
      }
      if (outside) {
        dp[oy * ow + ox] = fill;
        continue;
      }
      T sum = 0;
      for (int64_t i = 0; i < rt; ++i) {
        const T* row = sp + ry[i] * w;
        T across = 0;
        for (int64_t j = 0; j < ct; ++j) across += wx[j] * row[cx[j]];
        sum += wy[i] * across;
      }
      dp[oy * ow + ox] = sum;
    }
  }
}

// One plane forward, separably: source rows interpolated across (ow
// pixels each), then each output row as the weighted sum of its source
// rows, a loop over contiguous values that vectorizes. The same sums in the
// same order as interpolate_plane, with a fraction of the gathers. A pixel is
// `pixel` consecutive values (1 in NCHW planes; a channel block in nChw8c).
// TAPS and PIXEL > 0 fix the tap count and the pixel's values at compile
// time (so the inner loops unroll); 0 reads them at run time. The rows
// across are kept in a few slots, each made when an output row first needs
// it: the rows an output row reads move down with it, so each is made
// about once, and the slots stay in the L1 cache (a buffer of the whole
// plane, 512 KB for U-Net's 64x64 -> 128x128 block, was allocated, zeroed
// and written out to memory each call).
template <int TAPS, int PIXEL, typename T>
void interpolate_plane_separable(const AxisMap& rows, const AxisMap& cols, const std::vector<T>& wy_all,
                                 const std::vector<T>& wx_all, const T* sp, T* dp, int64_t h, int64_t w, int64_t oh,
                                 int64_t ow, int64_t any_pixel, std::vector<T>& across) {
  const int64_t rt = TAPS > 0 ? TAPS : rows.taps, ct = TAPS > 0 ? TAPS : cols.taps;
  const int64_t pixel = PIXEL > 0 ? PIXEL : any_pixel;
  const int64_t out_row = ow * pixel, slots = rt + 1;
  across.resize(static_cast<size_t>(slots * out_row));
  std::vector<int64_t> held(static_cast<size_t>(slots), -1);  // the source row in each slot
  auto across_row = [&](int64_t y, const int64_t* keep) -> const T* {
    int64_t slot = std::find(held.begin(), held.end(), y) - held.begin();
    if (slot < slots) return across.data() + slot * out_row;
    // A slot holding no row this output row reads (there are rt + 1 slots).
    slot = 0;
    while (std::find(keep, keep + rt, held[static_cast<size_t>(slot)]) != keep + rt) ++slot;
    held[static_cast<size_t>(slot)] = y;
    const T* row = sp + y * w * pixel;
    T* to = across.data() + slot * out_row;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t* cx = &cols.index[ox * ct];
      const T* wx = &wx_all[ox * ct];
      T* px = to + ox * pixel;
      std::fill(px, px + pixel, T(0));
      for (int64_t j = 0; j < ct; ++j) {
        const T* from = row + cx[j] * pixel;
        for (int64_t c = 0; c < pixel; ++c) px[c] += wx[j] * from[c];
      }
    }
    return to;
  };
  for (int64_t oy = 0; oy < oh; ++oy) {
    const int64_t* ry = &rows.index[oy * rt];
    const T* wy = &wy_all[oy * rt];
    T* to = dp + oy * out_row;
    const T* from[TAPS > 0 ? TAPS : 1];
    if constexpr (TAPS > 0) {
      for (int r = 0; r < TAPS; ++r) from[r] = across_row(ry[r], ry);
      for (int64_t i = 0; i < out_row; ++i) {
        T sum = 0;
        for (int r = 0; r < TAPS; ++r) sum += wy[r] * from[r][i];
        to[i] = sum;
      }
    } else {
      std::fill(to, to + out_row, T(0));
      for (int64_t r = 0; r < rt; ++r) {
        const T* source = across_row(ry[r], ry);
        for (int64_t i = 0; i < out_row; ++i) to[i] += wy[r] * source[i];
      }
    }
  }
}

// The separable plane function for this tap count and pixel width PIXEL.
template <int PIXEL, typename T>
auto separable_plane(int64_t taps) {
  return taps == 1   ? interpolate_plane_separable<1, PIXEL, T>
         : taps == 2 ? interpolate_plane_separable<2, PIXEL, T>
         : taps == 4 ? interpolate_plane_separable<4, PIXEL, T>
                     : interpolate_plane_separable<0, PIXEL, T>;
}

}  // namespace

template <typename T>
bool interpolate_pixels(const T* src, T* dst, int64_t planes, int64_t h, int64_t w, int64_t pixel, const Attrs& a) {
  const auto size = a.get_ints("size");
  const int64_t oh = size[0], ow = size[1];
  const AxisMap rows = axis_map(a, 0, h, oh), cols = axis_map(a, 1, w, ow);
  auto outside = [](const AxisMap& m) { return std::any_of(m.outside.begin(), m.outside.end(), [](bool o) { return o; }); };
  if (outside(rows) || outside(cols)) return false;
  const std::vector<T> wy(rows.weight.begin(), rows.weight.end()), wx(cols.weight.begin(), cols.weight.end());
  const int64_t taps = rows.taps == cols.taps ? rows.taps : 0;
  const auto plane = pixel == 1    ? separable_plane<1, T>(taps)
                     : pixel == 8  ? separable_plane<8, T>(taps)
                     : pixel == 16 ? separable_plane<16, T>(taps)
                                   : separable_plane<0, T>(taps);
  parallel_for(planes, 1, [&](int64_t b, int64_t e) {
    std::vector<T> across;
    for (int64_t p = b; p < e; ++p)
      plane(rows, cols, wy, wx, src + p * h * w * pixel, dst + p * oh * ow * pixel, h, w, oh, ow, pixel, across);
  });
  return true;
}
template bool interpolate_pixels<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t, const Attrs&);
template bool interpolate_pixels<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t, const Attrs&);

namespace {

template <typename T, bool Backward>
void interpolate_impl(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor x = contiguous(in[Backward ? 1 : 0]);
  const Tensor g = Backward ? contiguous(in[0]) : Tensor();
  const Shape& xs = x.shape();
  const auto size = a.get_ints("size");
  const int64_t h = xs[2], w = xs[3], oh = size[0], ow = size[1], planes = xs[0] * xs[1];
  const T* src = Backward ? g.data<T>() : x.data<T>();
  T* dst = out[0].data<T>();
  // Forward with no position outside the input (tf_crop_and_resize's
  // extrapolation): separably.
  if (!Backward && interpolate_pixels<T>(src, dst, planes, h, w, 1, a)) return;
  const AxisMap rows = axis_map(a, 0, h, oh), cols = axis_map(a, 1, w, ow);
  const std::vector<T> wy(rows.weight.begin(), rows.weight.end()), wx(cols.weight.begin(), cols.weight.end());
  const T fill = static_cast<T>(a.get_float("extrapolation_value", 0.0));
  const int64_t taps = rows.taps == cols.taps ? rows.taps : 0;
  auto plane = taps == 1   ? interpolate_plane<1, T, Backward>
               : taps == 2 ? interpolate_plane<2, T, Backward>
               : taps == 4 ? interpolate_plane<4, T, Backward>
                           : interpolate_plane<0, T, Backward>;
  parallel_for(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* sp = src + p * (Backward ? oh * ow : h * w);
      T* dp = dst + p * (Backward ? h * w : oh * ow);
      if (Backward) std::fill(dp, dp + h * w, T(0));
      plane(rows, cols, wy, wx, sp, dp, w, oh, ow, fill);
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
