#include "backends/cpu/blocked_pool.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/vec8.h"
#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

using vec8::vf;
using vec8::vi;


// Non-overlapping 2x2 windows without padding: four vectors per output position.
template <int B>
void max_pool_2x2_rows(const float* x, float* y, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t begin,
                       int64_t end) {
  for (int64_t row = begin; row < end; ++row) {
    const int64_t plane = row / oh, oy = row % oh;
    const float* r0 = x + (plane * h + 2 * oy) * w * B;
    const float* r1 = r0 + w * B;
    float* dst = y + (plane * oh + oy) * ow * B;
    for (int64_t ox = 0; ox < ow; ++ox)
      for (int half = 0; half < B; half += 8) {
        const float *a = r0 + 2 * ox * B + half, *b = r1 + 2 * ox * B + half;
        vf m = vec8::load(a);
        for (const float* p : {a + B, b, b + B}) {
          const vf v = vec8::load(p);
          m = vec8::select(vec8::beats(v, m), v, m);
        }
        vec8::store(dst + ox * B + half, m);
      }
  }
}

template <int B>
void max_pool_rows(const float* x, float* y, int64_t h, int64_t w, int64_t oh, int64_t ow, const PoolWindow& wd,
                   int64_t begin, int64_t end) {
  for (int64_t row = begin; row < end; ++row) {  // row = plane * oh + oy
    const int64_t plane = row / oh, oy = row % oh;
    const float* src = x + plane * h * w * B;
    float* dst = y + (plane * oh + oy) * ow * B;
    for (int64_t ox = 0; ox < ow; ++ox)
      for (int half = 0; half < B; half += 8) {
        vf m = vec8::splat(-std::numeric_limits<float>::infinity());
        for (int64_t i = 0; i < wd.kh; ++i) {
          const int64_t iy = oy * wd.sh - wd.ph + i * wd.dh;
          if (iy < 0 || iy >= h) continue;
          for (int64_t j = 0; j < wd.kw; ++j) {
            const int64_t ix = ox * wd.sw - wd.pw + j * wd.dw;
            if (ix < 0 || ix >= w) continue;
            const vf v = vec8::load(src + (iy * w + ix) * B + half);
            m = vec8::select(vec8::beats(v, m), v, m);
          }
        }
        vec8::store(dst + ox * B + half, m);
      }
  }
}

// Square K x K windows without dilation (3x3 stride 2 in most CNNs): the
// rows and columns a window keeps are worked out once per row and column,
// and the columns of windows inside the image are unrolled.
template <int B, int K>
void max_pool_square_rows(const float* x, float* y, int64_t h, int64_t w, int64_t oh, int64_t ow, const PoolWindow& wd,
                          int64_t begin, int64_t end) {
  for (int64_t row = begin; row < end; ++row) {
    const int64_t plane = row / oh, oy = row % oh, iy0 = oy * wd.sh - wd.ph;
    const int64_t i_lo = std::max<int64_t>(0, -iy0), i_hi = std::min<int64_t>(K, h - iy0);
    const float* src = x + (plane * h + iy0) * w * B;
    float* dst = y + (plane * oh + oy) * ow * B;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t ix0 = ox * wd.sw - wd.pw;
      for (int half = 0; half < B; half += 8) {
        vf m = vec8::splat(-std::numeric_limits<float>::infinity());
        if (ix0 >= 0 && ix0 + K <= w) {
          for (int64_t i = i_lo; i < i_hi; ++i) {
            const float* p = src + (i * w + ix0) * B + half;
            for (int j = 0; j < K; ++j) {
              const vf v = vec8::load(p + j * B);
              m = vec8::select(vec8::beats(v, m), v, m);
            }
          }
        } else {
          const int64_t j_lo = std::max<int64_t>(0, -ix0), j_hi = std::min<int64_t>(K, w - ix0);
          for (int64_t i = i_lo; i < i_hi; ++i)
            for (int64_t j = j_lo; j < j_hi; ++j) {
              const vf v = vec8::load(src + (i * w + ix0 + j) * B + half);
              m = vec8::select(vec8::beats(v, m), v, m);
            }
        }
        vec8::store(dst + ox * B + half, m);
      }
    }
  }
}

// 3x3 windows without dilation, a whole output row at a time, in two
// passes: the maximum down each input column the row's windows cover, then
// across each window's three columns. Plain maximums, with no NaN rule per
// element: a row whose input holds a NaN is done again by
// max_pool_square_rows, which keeps the first NaN as the rule says. (Stride
// 2 reads each input value 1.5 times rather than 2.25, with 8 operations
// per output vector rather than 45.)
template <int B>
void max_pool_3x3_rows(const float* x, float* y, int64_t h, int64_t w, int64_t oh, int64_t ow, const PoolWindow& wd,
                       int64_t begin, int64_t end) {
  // (vector_size takes no size that depends on a template parameter.)
  using V = std::conditional_t<B == 16, float __attribute__((vector_size(64))), vf>;
  using M = std::conditional_t<B == 16, int32_t __attribute__((vector_size(64))), vi>;
  static_assert(sizeof(V) == B * sizeof(float) && sizeof(M) == sizeof(V));
  // (No helper functions take or return V: without AVX-512 that would change
  // their ABI, which GCC warns of.)
  // The input columns the windows cover: [c_lo, c_hi).
  const int64_t c_lo = std::max<int64_t>(0, -wd.pw), c_hi = std::min<int64_t>(w, (ow - 1) * wd.sw - wd.pw + 3);
  std::vector<V> column(static_cast<size_t>(std::max<int64_t>(1, c_hi - c_lo)));
  for (int64_t row = begin; row < end; ++row) {
    const int64_t plane = row / oh, oy = row % oh, iy0 = oy * wd.sh - wd.ph;
    const int64_t i_lo = std::max<int64_t>(0, -iy0), i_hi = std::min<int64_t>(3, h - iy0);
    const float* src = x + (plane * h + iy0) * w * B;
    float* dst = y + (plane * oh + oy) * ow * B;
    M unordered{};  // lanes that met a NaN
    for (int64_t ix = c_lo; ix < c_hi && i_lo < i_hi; ++ix) {
      V m, v;
      std::memcpy(&m, src + (i_lo * w + ix) * B, sizeof m);
      unordered |= m != m;
      for (int64_t i = i_lo + 1; i < i_hi; ++i) {
        std::memcpy(&v, src + (i * w + ix) * B, sizeof v);
        unordered |= v != v;
        m = v > m ? v : m;
      }
      column[static_cast<size_t>(ix - c_lo)] = m;
    }
    bool nan = i_lo >= i_hi;  // (a window wholly in the padding: the general rows write -inf)
    for (int k = 0; k < B; ++k) nan = nan || unordered[k] != 0;
    if (nan) {
      max_pool_square_rows<B, 3>(x, y, h, w, oh, ow, wd, row, row + 1);
      continue;
    }
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t ix0 = ox * wd.sw - wd.pw;
      const int64_t j_lo = std::max<int64_t>(c_lo, ix0), j_hi = std::min<int64_t>(c_hi, ix0 + 3);
      V m = V{} - std::numeric_limits<float>::infinity();
      for (int64_t j = j_lo; j < j_hi; ++j) {
        const V& c = column[static_cast<size_t>(j - c_lo)];
        m = c > m ? c : m;
      }
      std::memcpy(dst + ox * B, &m, sizeof m);
    }
  }
}

template <int B>
void global_avg_planes(const float* x, float* y, int64_t c, int64_t hw, int64_t begin, int64_t end) {
  const int64_t blocks = c / B;
  for (int64_t plane = begin; plane < end; ++plane) {  // plane = n * blocks + cb
    const float* src = x + plane * hw * B;
    float s[B] = {};
    for (int64_t p = 0; p < hw; ++p)
      for (int k = 0; k < B; ++k) s[k] += src[p * B + k];
    const int64_t n = plane / blocks, cb = plane % blocks;
    for (int k = 0; k < B; ++k) y[n * c + cb * B + k] = s[k] / static_cast<float>(hw);
  }
}

// Whether v replaces best as a window's maximum, scanning in order: the
// first maximum stays, and the first NaN wins (the plain kernel's rule).
inline bool beats(float v, float best) { return v > best || (v != v && best == best); }

// The output gradient of lane k at (n, channel block cb, oy, ox).
template <int B>
inline float grad_at(const MaxPoolGrad& a, int64_t n, int64_t cb, int64_t oy, int64_t ox, int k) {
  if (a.gy_block) return a.gy[(((n * (a.c / B) + cb) * a.oh + oy) * a.ow + ox) * B + k];
  return a.gy[((n * a.c + cb * B + k) * a.oh + oy) * a.ow + ox];
}

// Non-overlapping 2x2 windows tiling the whole plane: each input position
// belongs to exactly one window, so every gradient element is written once.
template <int B>
void grad_plane_2x2(const MaxPoolGrad& a, int64_t plane, float* out) {
  const int64_t blocks = a.c / B, n = plane / blocks, cb = plane % blocks, base = plane * a.h * a.w * B;
  const vi none = {}, all = ~none;
  for (int64_t oy = 0; oy < a.oh; ++oy)
    for (int64_t ox = 0; ox < a.ow; ++ox)
      for (int half = 0; half < B; half += 8) {
        const int64_t r0 = 2 * oy * a.w * B, r1 = r0 + a.w * B;  // offsets within the plane
        const int64_t at[4] = {r0 + 2 * ox * B + half, r0 + (2 * ox + 1) * B + half, r1 + 2 * ox * B + half,
                               r1 + (2 * ox + 1) * B + half};
        // One-hot masks of the winning position, scanning in order.
        vi win[4] = {all, none, none, none};
        vf best = vec8::load(a.x + base + at[0]);
        for (int j = 1; j < 4; ++j) {
          const vf v = vec8::load(a.x + base + at[j]);
          const vi b = vec8::beats(v, best);
          best = vec8::select(b, v, best);
          for (int i = 0; i < j; ++i) win[i] &= ~b;
          win[j] = b;
        }
        vf g;
        if (a.gy_block) {
          g = vec8::load(a.gy + (((n * blocks + cb) * a.oh + oy) * a.ow + ox) * B + half);
        } else {
          float lanes[8];
          for (int k = 0; k < 8; ++k) lanes[k] = grad_at<B>(a, n, cb, oy, ox, half + k);
          g = vec8::load(lanes);
        }
        if (a.mask) {
          vi pass = none;
          for (int j = 0; j < 4; ++j) pass |= win[j] & (vec8::load(a.mask + base + at[j]) > vf{});
          g = vec8::keep(pass, g);
        }
        for (int j = 0; j < 4; ++j) vec8::store(out + at[j], vec8::keep(win[j], g));
      }
}

// Any window: zero the plane, then add each window's gradient at its maximum.
template <int B>
void grad_plane_any(const MaxPoolGrad& a, int64_t plane, float* out) {
  const int64_t blocks = a.c / B, n = plane / blocks, cb = plane % blocks, base = plane * a.h * a.w * B;
  const PoolWindow& wd = a.window;
  std::fill(out, out + a.h * a.w * B, 0.0f);
  for (int64_t oy = 0; oy < a.oh; ++oy)
    for (int64_t ox = 0; ox < a.ow; ++ox)
      for (int k = 0; k < B; ++k) {
        int64_t found = -1;
        float best = 0.0f;
        for (int64_t i = 0; i < wd.kh; ++i) {
          const int64_t iy = oy * wd.sh - wd.ph + i * wd.dh;
          if (iy < 0 || iy >= a.h) continue;
          for (int64_t j = 0; j < wd.kw; ++j) {
            const int64_t ix = ox * wd.sw - wd.pw + j * wd.dw;
            if (ix < 0 || ix >= a.w) continue;
            const int64_t at = (iy * a.w + ix) * B + k;
            if (found < 0 || beats(a.x[base + at], best)) {
              best = a.x[base + at];
              found = at;
            }
          }
        }
        if (found < 0 || (a.mask && !(a.mask[base + found] > 0.0f))) continue;
        out[found] += grad_at<B>(a, n, cb, oy, ox, k);
      }
}

// Rows [b, e) of y, (plane, oy) flattened: each window's sum over the
// positions inside x, divided by its count (padding counted or not), one
// block of channels at a time.
template <int B>
void avg_pool_rows(const float* x, float* y, int64_t h, int64_t w, int64_t oh, int64_t ow, const PoolWindow& wd,
                   bool include_pad, int64_t b, int64_t e) {
  for (int64_t r = b; r < e; ++r) {
    const int64_t plane = r / oh, oy = r % oh;
    const float* xp = x + plane * h * w * B;
    float* yp = y + r * ow * B;
    const int64_t ys = oy * wd.sh - wd.ph, y0 = std::max<int64_t>(ys, 0), y1 = std::min(ys + wd.kh, h);
    const int64_t rows_counted = include_pad ? std::min(ys + wd.kh, h + wd.ph) - ys : y1 - y0;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t xs = ox * wd.sw - wd.pw, x0 = std::max<int64_t>(xs, 0), x1 = std::min(xs + wd.kw, w);
      const int64_t cols_counted = include_pad ? std::min(xs + wd.kw, w + wd.pw) - xs : x1 - x0;
      float acc[B] = {};
      for (int64_t iy = y0; iy < y1; ++iy)
        for (int64_t ix = x0; ix < x1; ++ix) {
          const float* px = xp + (iy * w + ix) * B;
          for (int k = 0; k < B; ++k) acc[k] += px[k];
        }
      const auto count = static_cast<float>(rows_counted * cols_counted);
      for (int k = 0; k < B; ++k) yp[ox * B + k] = acc[k] / count;
    }
  }
}

}  // namespace

void max_pool_blocked(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow,
                      int block, const PoolWindow& wd, bool row_bands, bool relu) {
  const int64_t planes = n * (c / block);
  // (ceil_mode's partial last windows take the general path.)
  const bool two_by_two = wd.kh == 2 && wd.kw == 2 && wd.sh == 2 && wd.sw == 2 && wd.ph == 0 && wd.pw == 0 &&
                          wd.dh == 1 && wd.dw == 1 && 2 * oh <= h && 2 * ow <= w;
  const bool three_by_three = wd.kh == 3 && wd.kw == 3 && wd.dh == 1 && wd.dw == 1;
  auto rows = [&](int64_t b, int64_t e) {  // rows of y, (plane, oy) flattened
    if (three_by_three && block == 16)
      max_pool_3x3_rows<16>(x, y, h, w, oh, ow, wd, b, e);
    else if (three_by_three)
      max_pool_3x3_rows<8>(x, y, h, w, oh, ow, wd, b, e);
    else if (two_by_two && block == 16)
      max_pool_2x2_rows<16>(x, y, h, w, oh, ow, b, e);
    else if (two_by_two)
      max_pool_2x2_rows<8>(x, y, h, w, oh, ow, b, e);
    else if (block == 16)
      max_pool_rows<16>(x, y, h, w, oh, ow, wd, b, e);
    else
      max_pool_rows<8>(x, y, h, w, oh, ow, wd, b, e);
    if (relu) vec8::relu_in_place(y + b * ow * block, (e - b) * ow * block);  // (rows just written, in cache)
  };
  if (!row_bands) return parallel_for(planes * oh, 4, rows);
  // (SqueezeNet's first pool, after a stem whose threads split the pixels:
  // 69 -> 54 us; after oneDNN's stems, which split otherwise, slower.)
  parallel_for(oh, 4, [&](int64_t b, int64_t e) {
    for (int64_t plane = 0; plane < planes; ++plane) rows(plane * oh + b, plane * oh + e);
  });
}

void avg_pool_blocked(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow,
                      int block, const PoolWindow& wd, bool count_include_pad) {
  parallel_for(n * (c / block) * oh, 4, [&](int64_t b, int64_t e) {
    if (block == 16)
      avg_pool_rows<16>(x, y, h, w, oh, ow, wd, count_include_pad, b, e);
    else
      avg_pool_rows<8>(x, y, h, w, oh, ow, wd, count_include_pad, b, e);
  });
}

void global_avg_pool_blocked(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int block) {
  parallel_for(n * (c / block), 1, [&](int64_t b, int64_t e) {
    if (block == 16)
      global_avg_planes<16>(x, y, c, h * w, b, e);
    else
      global_avg_planes<8>(x, y, c, h * w, b, e);
  });
}

void max_pool_grad_plane(const MaxPoolGrad& a, int64_t plane, float* out) {
  const PoolWindow& wd = a.window;
  const bool tiled = wd.kh == 2 && wd.kw == 2 && wd.sh == 2 && wd.sw == 2 && wd.ph == 0 && wd.pw == 0 &&
                     wd.dh == 1 && wd.dw == 1 && a.h == 2 * a.oh && a.w == 2 * a.ow;
  if (tiled)
    a.block == 16 ? grad_plane_2x2<16>(a, plane, out) : grad_plane_2x2<8>(a, plane, out);
  else
    a.block == 16 ? grad_plane_any<16>(a, plane, out) : grad_plane_any<8>(a, plane, out);
}

void max_pool_backward_blocked(const MaxPoolGrad& a, float* gx) {
  const int64_t plane_size = a.h * a.w * a.block;
  parallel_for(a.n * (a.c / a.block), 1, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) max_pool_grad_plane(a, plane, gx + plane * plane_size);
  });
}

}  // namespace kiln::cpu
