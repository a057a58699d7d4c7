// CPU interpolate and its backward: per output row and column, the source
// indices and weights of the mode's kernel (nearest, linear, cubic, each
// stretched when antialiased downsampling asks), from the coordinate mapping;
// then a weighted gather (or, backward, a scatter) per plane.
#include <algorithm>
#include <cmath>
#include <string>

#include "backends/cpu/interpolate_pixels.h"
#include "backends/cpu/kernel_helpers.h"
#include "ops/interpolate_axes.h"

namespace kiln::cpu {
namespace {

using resize::axis_map;
using resize::AxisMap;

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
