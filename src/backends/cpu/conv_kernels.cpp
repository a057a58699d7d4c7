// CPU convolution. float32 goes to oneDNN's convolution primitives (several
// times faster here than the alternative); float64, and the few geometries
// oneDNN cannot express, use im2col over the whole batch and one OpenBLAS GEMM
// per group, so BLAS sees large matrices even for small images.
#include <cstring>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/onednn_conv.h"
#include "backends/cpu/plain_conv.h"
#include "ops/conv_attrs.h"

namespace kiln::cpu {
namespace {

struct Geometry {
  int64_t n, c, h, w;       // input
  int64_t o, kh, kw;        // weight: [o, c/groups, kh, kw]
  int64_t oh, ow;           // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t k() const { return cg() * kh * kw; }  // rows of the column matrix
  int64_t p() const { return oh * ow; }
};

Geometry geometry(const Shape& x, const Shape& w, const Shape& y, const Attrs& a) {
  const Conv2dAttrs c = Conv2dAttrs::of(a);
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], c.stride[0], c.stride[1], c.padding[0], c.padding[1],
          c.dilation[0], c.dilation[1], c.groups};
}

// col[K, N*P] for group g.
template <typename T>
void im2col(const Geometry& g, const T* x, int64_t group, T* col) {
  const int64_t np = g.n * g.p();
  parallel_for(g.k(), 1, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t c = row / (g.kh * g.kw), i = (row / g.kw) % g.kh, j = row % g.kw;
      T* dst = col + row * np;
      for (int64_t n = 0; n < g.n; ++n) {
        const T* plane = x + ((n * g.c) + group * g.cg() + c) * g.h * g.w;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          int64_t iy = oy * g.sh - g.ph + i * g.dh;
          T* out = dst + n * g.p() + oy * g.ow;
          if (iy < 0 || iy >= g.h) {
            std::memset(out, 0, sizeof(T) * g.ow);
            continue;
          }
          const T* src = plane + iy * g.w;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            int64_t ix = ox * g.sw - g.pw + j * g.dw;
            out[ox] = (ix >= 0 && ix < g.w) ? src[ix] : T(0);
          }
        }
      }
    }
  });
}

// Accumulates col[K, N*P] of group g back into the input gradient.
template <typename T>
void col2im(const Geometry& g, const T* col, int64_t group, T* gx) {
  const int64_t np = g.n * g.p();
  parallel_for(g.n * g.cg(), 1, [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      int64_t n = nc / g.cg(), c = nc % g.cg();
      T* plane = gx + ((n * g.c) + group * g.cg() + c) * g.h * g.w;
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const T* src = col + ((c * g.kh + i) * g.kw + j) * np + n * g.p();
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            int64_t iy = oy * g.sh - g.ph + i * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t ox = 0; ox < g.ow; ++ox) {
              int64_t ix = ox * g.sw - g.pw + j * g.dw;
              if (ix >= 0 && ix < g.w) plane[iy * g.w + ix] += src[oy * g.ow + ox];
            }
          }
        }
    }
  });
}

// [N, O, P] <-> [O, N*P]
template <typename T>
void nop_to_onp(const T* src, T* dst, int64_t n, int64_t o, int64_t p) {
  parallel_for(n * o, 16, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t ni = k / o, oi = k % o;
      std::memcpy(dst + oi * n * p + ni * p, src + k * p, sizeof(T) * p);
    }
  });
}
template <typename T>
void onp_to_nop(const T* src, T* dst, int64_t n, int64_t o, int64_t p, const T* bias) {
  parallel_for(n * o, 16, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t ni = k / o, oi = k % o;
      const T* s = src + oi * n * p + ni * p;
      T* d = dst + k * p;
      if (bias) {
        T bv = bias[oi];
        for (int64_t i = 0; i < p; ++i) d[i] = s[i] + bv;
      } else {
        std::memcpy(d, s, sizeof(T) * p);
      }
    }
  });
}

onednn::ConvShape to_onednn(const Geometry& g) {
  return {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.oh, g.ow, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups};
}

template <typename T>
void conv_forward(const Geometry& g, const T* x, const T* w, const T* bias, T* y, bool relu = false) {
  if constexpr (std::is_same_v<T, float>) {
    const PlainConv p{g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.oh, g.ow, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups};
    if (depthwise_conv_applies(p)) return depthwise_conv(p, x, w, bias, y, relu);
    if (pointwise_conv_applies(p)) return pointwise_conv(p, x, w, bias, y, relu);
    if (onednn::conv_forward(to_onednn(g), x, w, bias, y, relu)) return;
  }
  std::vector<T> col(static_cast<size_t>(g.k() * g.n * g.p()));
  std::vector<T> tmp(static_cast<size_t>(g.o * g.n * g.p()));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    im2col(g, x, grp, col.data());
    gemm<T>(false, false, g.og(), g.n * g.p(), g.k(), T(1), w + grp * g.og() * g.k(), g.k(), col.data(), g.n * g.p(),
            T(0), tmp.data() + grp * g.og() * g.n * g.p(), g.n * g.p());
  }
  onp_to_nop(tmp.data(), y, g.n, g.o, g.p(), bias);
  if (relu) {
    const int64_t cells = g.n * g.o * g.p();
    parallel_for(cells, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = y[i] < T(0) ? T(0) : y[i];  // NaN passes, as in eager relu
    });
  }
}

template <typename T>
void conv_input_grad(const Geometry& g, const T* gy, const T* w, T* gx, const T* bias) {
  if constexpr (std::is_same_v<T, float>) {
    if (onednn::conv_backward_data(to_onednn(g), gy, w, gx)) {
      if (bias) {
        int64_t plane = g.h * g.w;
        parallel_for(g.n * g.c, 16, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k)
            for (int64_t i = 0; i < plane; ++i) gx[k * plane + i] += bias[k % g.c];
        });
      }
      return;
    }
  }
  std::vector<T> gyt(static_cast<size_t>(g.o * g.n * g.p()));
  nop_to_onp(gy, gyt.data(), g.n, g.o, g.p());
  std::vector<T> col(static_cast<size_t>(g.k() * g.n * g.p()));
  int64_t cells = g.n * g.c * g.h * g.w;
  if (bias) {
    for (int64_t i = 0; i < cells; ++i) gx[i] = bias[(i / (g.h * g.w)) % g.c];
  } else {
    std::fill(gx, gx + cells, T(0));
  }
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    gemm<T>(true, false, g.k(), g.n * g.p(), g.og(), T(1), w + grp * g.og() * g.k(), g.k(),
            gyt.data() + grp * g.og() * g.n * g.p(), g.n * g.p(), T(0), col.data(), g.n * g.p());
    col2im(g, col.data(), grp, gx);
  }
}

// gb (optional): the bias gradient, gy summed over N, H and W.
template <typename T>
void conv_weight_grad(const Geometry& g, const T* x, const T* gy, T* gw, T* gb = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    if (onednn::conv_backward_weights(to_onednn(g), x, gy, gw, gb)) return;
  }
  if (gb) {
    parallel_for(g.o, 1, [&](int64_t b, int64_t e) {
      for (int64_t oi = b; oi < e; ++oi) {
        double acc = 0;
        for (int64_t ni = 0; ni < g.n; ++ni) {
          const T* plane = gy + (ni * g.o + oi) * g.p();
          for (int64_t i = 0; i < g.p(); ++i) acc += static_cast<double>(plane[i]);
        }
        gb[oi] = static_cast<T>(acc);
      }
    });
  }
  std::vector<T> gyt(static_cast<size_t>(g.o * g.n * g.p()));
  nop_to_onp(gy, gyt.data(), g.n, g.o, g.p());
  std::vector<T> col(static_cast<size_t>(g.k() * g.n * g.p()));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    im2col(g, x, grp, col.data());
    gemm<T>(false, true, g.og(), g.k(), g.n * g.p(), T(1), gyt.data() + grp * g.og() * g.n * g.p(), g.n * g.p(),
            col.data(), g.n * g.p(), T(0), gw + grp * g.og() * g.k(), g.k());
  }
}

template <typename T>
void conv2d_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]), w = contiguous(in[1]);
  Tensor b = in.size() > 2 && in[2].defined() ? contiguous(in[2]) : Tensor();
  Geometry g = geometry(x.shape(), w.shape(), out[0].shape(), a);
  const bool relu = a.get_string("activation", "none") == "relu";
  conv_forward<T>(g, x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr, out[0].data<T>(), relu);
}

template <typename T>
void conv2d_input_grad_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor gy = contiguous(in[0]), w = contiguous(in[1]);
  Geometry g = geometry(out[0].shape(), w.shape(), gy.shape(), a);
  conv_input_grad<T>(g, gy.data<T>(), w.data<T>(), out[0].data<T>(), nullptr);
}

template <typename T>
void conv2d_weight_grad_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]), gy = contiguous(in[1]);
  Geometry g = geometry(x.shape(), out[0].shape(), gy.shape(), a);
  conv_weight_grad<T>(g, x.data<T>(), gy.data<T>(), out[0].data<T>(), out.size() > 1 ? out[1].data<T>() : nullptr);
}

template <typename T>
void conv_transpose2d_kernel(const Ins& in, Outs& out, const Attrs& a) {
  // The forward of a transposed convolution is the input gradient of the
  // convolution whose input has the output's shape.
  Tensor x = contiguous(in[0]), w = contiguous(in[1]);
  Tensor b = in.size() > 2 && in[2].defined() ? contiguous(in[2]) : Tensor();
  Geometry g = geometry(out[0].shape(), w.shape(), x.shape(), a);
  conv_input_grad<T>(g, x.data<T>(), w.data<T>(), out[0].data<T>(), b.defined() ? b.data<T>() : nullptr);
}

}  // namespace

KILN_CPU_F32_F64("conv2d", conv2d_kernel);
KILN_CPU_F32_F64("conv2d_input_grad", conv2d_input_grad_kernel);
KILN_CPU_F32_F64("conv2d_weight_grad", conv2d_weight_grad_kernel);
KILN_CPU_F32_F64("conv_transpose2d", conv_transpose2d_kernel);

}  // namespace kiln::cpu
