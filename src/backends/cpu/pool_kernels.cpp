// CPU pooling kernels, parallel over (batch, channel) planes.
#include <limits>

#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/kernel_helpers.h"

namespace kiln::cpu {
namespace {

PoolWindow window(const Attrs& a) { return PoolWindow::of(Pool2dAttrs::of(a)); }

// Calls fn(plane_in, plane_out, h, w, oh, ow) for every (n, c) plane.
template <typename T, typename F>
void for_planes(const Tensor& x, const Shape& y, F fn) {
  int64_t planes = x.shape()[0] * x.shape()[1];
  int64_t h = x.shape()[2], w = x.shape()[3], oh = y[2], ow = y[3];
  parallel_for(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) fn(pl, h, w, oh, ow);
  });
}

// Non-overlapping 2x2 windows without padding (the usual pool): every window
// lies inside the input, so the loop needs no bounds checks.
bool two_by_two(const PoolWindow& wd) {
  return wd.kh == 2 && wd.kw == 2 && wd.sh == 2 && wd.sw == 2 && wd.ph == 0 && wd.pw == 0 && wd.dh == 1 && wd.dw == 1;
}

// Writes the maximum of each window and its flat index within the plane.
// NaN wins, as in PyTorch.
template <typename T>
void max_pool_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]);
  const PoolWindow wd = window(a);
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  int64_t* pi = out[1].data<int64_t>();
  const bool fast = two_by_two(wd) && 2 * out[0].shape()[2] <= x.shape()[2] && 2 * out[0].shape()[3] <= x.shape()[3];
  for_planes<T>(x, out[0].shape(), [&](int64_t pl, int64_t h, int64_t w, int64_t oh, int64_t ow) {
    const T* src = px + pl * h * w;
    T* dst = py + pl * oh * ow;
    int64_t* idx = pi + pl * oh * ow;
    for (int64_t oy = 0; oy < oh; ++oy) {
      if (fast) {
        const T* r0 = src + 2 * oy * w;
        const T* r1 = r0 + w;
        for (int64_t ox = 0; ox < ow; ++ox) {
          int64_t c = 2 * ox;
          int64_t best = 2 * oy * w + c;
          T bv = r0[c];
          auto take = [&](T v, int64_t at) {
            if (v > bv || (v != v && bv == bv)) {
              bv = v;
              best = at;
            }
          };
          take(r0[c + 1], 2 * oy * w + c + 1);
          take(r1[c], (2 * oy + 1) * w + c);
          take(r1[c + 1], (2 * oy + 1) * w + c + 1);
          dst[oy * ow + ox] = bv;
          idx[oy * ow + ox] = best;
        }
        continue;
      }
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t best = -1;
        T bv = -std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < wd.kh; ++i) {
          int64_t iy = oy * wd.sh - wd.ph + i * wd.dh;
          if (iy < 0 || iy >= h) continue;
          for (int64_t j = 0; j < wd.kw; ++j) {
            int64_t ix = ox * wd.sw - wd.pw + j * wd.dw;
            if (ix < 0 || ix >= w) continue;
            T v = src[iy * w + ix];
            if (best < 0 || v > bv || (v != v && bv == bv)) {
              bv = v;
              best = iy * w + ix;
            }
          }
        }
        dst[oy * ow + ox] = bv;
        idx[oy * ow + ox] = best;
      }
    }
  });
}

// Scatters each output gradient to the input position that held the maximum.
template <typename T>
void max_pool_backward_kernel(const Ins& in, Outs& out, const Attrs&) {
  Tensor g = contiguous(in[0]), indices = contiguous(in[1]);
  // mask (optional): the gradient passes only where mask > 0 (a following ReLU's backward, fused).
  Tensor mask = in.size() > 2 && in[2].defined() ? contiguous(in[2]) : Tensor();
  const T* pg = g.data<T>();
  const int64_t* pi = indices.data<int64_t>();
  const T* pm = mask.defined() ? mask.data<T>() : nullptr;
  T* pgx = out[0].data<T>();
  const Shape& xs = out[0].shape();
  int64_t planes = xs[0] * xs[1], plane = xs[2] * xs[3];
  int64_t per_plane = g.shape()[2] * g.shape()[3];
  parallel_for(planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      T* dst = pgx + pl * plane;
      std::fill(dst, dst + plane, T(0));
      const T* m = pm ? pm + pl * plane : nullptr;
      for (int64_t k = 0; k < per_plane; ++k) {
        int64_t at = pi[pl * per_plane + k];
        if (at >= 0 && (!m || m[at] > T(0))) dst[at] += pg[pl * per_plane + k];
      }
    }
  });
}

template <typename T, bool kBackward>
void avg_pool_impl(const Ins& in, Outs& out, const Attrs& a) {
  Tensor src_t = contiguous(in[0]);
  const PoolWindow wd = window(a);
  bool include_pad = a.get_bool("count_include_pad", true);
  const Tensor& x = kBackward ? in[1] : in[0];
  Shape yshape = kBackward ? in[0].shape() : out[0].shape();
  const T* ps = src_t.data<T>();
  T* pd = out[0].data<T>();
  if (kBackward) std::fill(pd, pd + out[0].numel(), T(0));
  for_planes<T>(x, yshape, [&](int64_t pl, int64_t h, int64_t w, int64_t oh, int64_t ow) {
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t y0 = oy * wd.sh - wd.ph, x0 = ox * wd.sw - wd.pw;
        int64_t y1 = std::min(y0 + wd.kh, h + wd.ph), x1 = std::min(x0 + wd.kw, w + wd.pw);
        int64_t pad_count = (y1 - y0) * (x1 - x0);
        int64_t ys = std::max<int64_t>(y0, 0), xs = std::max<int64_t>(x0, 0);
        int64_t ye = std::min(y1, h), xe = std::min(x1, w);
        int64_t count = include_pad ? pad_count : (ye - ys) * (xe - xs);
        if (count <= 0) continue;
        if (!kBackward) {
          const T* src = ps + pl * h * w;
          T acc = 0;
          for (int64_t iy = ys; iy < ye; ++iy)
            for (int64_t ix = xs; ix < xe; ++ix) acc += src[iy * w + ix];
          pd[pl * oh * ow + oy * ow + ox] = acc / static_cast<T>(count);
        } else {
          T gv = ps[pl * oh * ow + oy * ow + ox] / static_cast<T>(count);
          T* dst = pd + pl * h * w;
          for (int64_t iy = ys; iy < ye; ++iy)
            for (int64_t ix = xs; ix < xe; ++ix) dst[iy * w + ix] += gv;
        }
      }
  });
}
template <typename T>
void avg_pool_kernel(const Ins& in, Outs& out, const Attrs& a) { avg_pool_impl<T, false>(in, out, a); }
template <typename T>
void avg_pool_backward_kernel(const Ins& in, Outs& out, const Attrs& a) { avg_pool_impl<T, true>(in, out, a); }

// PyTorch's adaptive bins: [floor(i*H/OH), ceil((i+1)*H/OH)).
template <typename T, bool kBackward>
void adaptive_impl(const Ins& in, Outs& out, const Attrs&) {
  Tensor src_t = contiguous(in[0]);
  const Tensor& x = kBackward ? in[1] : in[0];
  Shape yshape = kBackward ? in[0].shape() : out[0].shape();
  const T* ps = src_t.data<T>();
  T* pd = out[0].data<T>();
  if (kBackward) std::fill(pd, pd + out[0].numel(), T(0));
  for_planes<T>(x, yshape, [&](int64_t pl, int64_t h, int64_t w, int64_t oh, int64_t ow) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      int64_t ys = oy * h / oh, ye = ((oy + 1) * h + oh - 1) / oh;
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t xs = ox * w / ow, xe = ((ox + 1) * w + ow - 1) / ow;
        T count = static_cast<T>((ye - ys) * (xe - xs));
        if (!kBackward) {
          T acc = 0;
          for (int64_t iy = ys; iy < ye; ++iy)
            for (int64_t ix = xs; ix < xe; ++ix) acc += ps[pl * h * w + iy * w + ix];
          pd[pl * oh * ow + oy * ow + ox] = acc / count;
        } else {
          T gv = ps[pl * oh * ow + oy * ow + ox] / count;
          for (int64_t iy = ys; iy < ye; ++iy)
            for (int64_t ix = xs; ix < xe; ++ix) pd[pl * h * w + iy * w + ix] += gv;
        }
      }
    }
  });
}
template <typename T>
void adaptive_kernel(const Ins& in, Outs& out, const Attrs& a) { adaptive_impl<T, false>(in, out, a); }
template <typename T>
void adaptive_backward_kernel(const Ins& in, Outs& out, const Attrs& a) { adaptive_impl<T, true>(in, out, a); }

}  // namespace

KILN_CPU_F32_F64("max_pool2d", max_pool_kernel);
// Quantized values pool as they are: the maximum commutes with dequantizing.
KILN_REGISTER_KERNEL("max_pool2d", CPU, max_pool_kernel<uint8_t>, DType::UInt8);
KILN_REGISTER_KERNEL("max_pool2d", CPU, max_pool_kernel<int8_t>, DType::Int8);
KILN_CPU_F32_F64("max_pool2d_backward", max_pool_backward_kernel);
KILN_CPU_F32_F64("avg_pool2d", avg_pool_kernel);
KILN_CPU_F32_F64("avg_pool2d_backward", avg_pool_backward_kernel);
KILN_CPU_F32_F64("adaptive_avg_pool2d", adaptive_kernel);
KILN_CPU_F32_F64("adaptive_avg_pool2d_backward", adaptive_backward_kernel);

}  // namespace kiln::cpu
