#include "backends/cpu/plain_conv.h"

#include <algorithm>

#include "backends/cpu/depthwise_vector.h"
#include "backends/cpu/gemm.h"
#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

inline float relu_of(float v) { return v < 0.0f ? 0.0f : v; }

// The output columns [lo, hi) whose input column ox * sw - pw + offset lies in [0, w).
void columns_inside(int64_t offset, int64_t w, int64_t ow, int64_t sw, int64_t pw, int64_t& lo, int64_t& hi) {
  const int64_t first = pw - offset;  // ox * sw must reach at least this
  lo = first <= 0 ? 0 : (first + sw - 1) / sw;
  const int64_t last = w - 1 + pw - offset;  // and at most this
  hi = last < 0 ? 0 : std::min(ow, last / sw + 1);
  lo = std::min(lo, hi);
}

}  // namespace

bool depthwise_conv_applies(const PlainConv& g) {
  return g.groups == g.c && g.o == g.c && g.groups > 1 && g.kh * g.kw <= 49;
}

bool pointwise_conv_applies(const PlainConv& g) {
  return g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 && g.groups == 1 &&
         g.oh == g.h && g.ow == g.w;
}

namespace {

// One output row of a depthwise convolution with a KW-wide, stride-SW
// window: the columns whose whole window lies inside the row take every tap
// in registers, in one pass; the few at the edges go tap by tap.
template <int KW, int SW>
void depthwise_row(const PlainConv& g, const float* src, const float* k, float b, int64_t oy, float* out) {
  int64_t lo, hi;  // columns whose every tap is inside
  columns_inside(0, g.w, g.ow, SW, g.pw, lo, hi);
  int64_t lo2, hi2;
  columns_inside((KW - 1) * g.dw, g.w, g.ow, SW, g.pw, lo2, hi2);
  lo = std::max(lo, lo2);
  hi = std::min(hi, hi2);
  if (hi < lo) hi = lo;
  for (int64_t ox = 0; ox < g.ow; ++ox) out[ox] = b;
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t iy = oy * g.sh - g.ph + i * g.dh;
    if (iy < 0 || iy >= g.h) continue;
    const float* row = src + iy * g.w - g.pw;
    const float* ki = k + i * KW;
    for (int64_t ox = lo; ox < hi; ++ox) {
      float acc = out[ox];
      for (int j = 0; j < KW; ++j) acc += ki[j] * row[ox * SW + j * g.dw];
      out[ox] = acc;
    }
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      if (ox == lo) ox = hi;
      if (ox >= g.ow) break;
      for (int j = 0; j < KW; ++j) {
        const int64_t ix = ox * SW - g.pw + j * g.dw;
        if (ix >= 0 && ix < g.w) out[ox] += ki[j] * row[ox * SW + j * g.dw];
      }
    }
  }
}

}  // namespace

void depthwise_conv(const PlainConv& g, const float* x, const float* w, const float* bias, float* y, bool relu) {
  using Row = void (*)(const PlainConv&, const float*, const float*, float, int64_t, float*);
  const bool vector = depthwise_3x3_vector_applies(g);
  Row fast = nullptr;
  if (g.kw == 3 && g.sw == 1) fast = depthwise_row<3, 1>;
  if (g.kw == 3 && g.sw == 2) fast = depthwise_row<3, 2>;
  if (g.kw == 5 && g.sw == 1) fast = depthwise_row<5, 1>;
  if (g.kw == 5 && g.sw == 2) fast = depthwise_row<5, 2>;
  parallel_for(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t ch = plane % g.c;
      const float* src = x + plane * g.h * g.w;
      const float* k = w + ch * g.kh * g.kw;
      float* dst = y + plane * g.oh * g.ow;
      const float b = bias ? bias[ch] : 0.0f;
      if (vector) {
        depthwise_3x3_plane(g, src, k, b, relu, dst);
        continue;
      }
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        float* out = dst + oy * g.ow;
        if (fast) {
          fast(g, src, k, b, oy, out);
          if (relu)
            for (int64_t ox = 0; ox < g.ow; ++ox) out[ox] = relu_of(out[ox]);
          continue;
        }
        std::fill(out, out + g.ow, b);
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t iy = oy * g.sh - g.ph + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          const float* row = src + iy * g.w;
          for (int64_t j = 0; j < g.kw; ++j) {
            const float kv = k[i * g.kw + j];
            int64_t lo, hi;
            columns_inside(j * g.dw, g.w, g.ow, g.sw, g.pw, lo, hi);
            const float* in = row - g.pw + j * g.dw;
            if (g.sw == 1) {
              for (int64_t ox = lo; ox < hi; ++ox) out[ox] += kv * in[ox];
            } else {
              for (int64_t ox = lo; ox < hi; ++ox) out[ox] += kv * in[ox * g.sw];
            }
          }
        }
        if (relu)
          for (int64_t ox = 0; ox < g.ow; ++ox) out[ox] = relu_of(out[ox]);
      }
    }
  });
}

void pointwise_conv(const PlainConv& g, const float* x, const float* w, const float* bias, float* y, bool relu) {
  const int64_t p = g.h * g.w;
  for (int64_t img = 0; img < g.n; ++img)
    gemm<float>(false, false, g.o, p, g.c, 1.0f, w, g.c, x + img * g.c * p, p, 0.0f, y + img * g.o * p, p);
  if (!bias && !relu) return;
  parallel_for(g.n * g.o, 4, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      float* out = y + plane * p;
      const float b = bias ? bias[plane % g.o] : 0.0f;
      if (relu)
        for (int64_t i = 0; i < p; ++i) out[i] = relu_of(out[i] + b);
      else
        for (int64_t i = 0; i < p; ++i) out[i] += b;
    }
  });
}

}  // namespace kiln::cpu
