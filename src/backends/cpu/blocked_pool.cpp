#include "backends/cpu/blocked_pool.h"

#include <limits>

#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

// a, or b when b is larger or NaN (NaN wins, as in the plain kernel).
inline float take_max(float a, float b) { return (b > a || b != b) ? b : a; }

// Non-overlapping 2x2 windows without padding: four vectors per output position.
template <int B>
void max_pool_2x2_rows(const float* x, float* y, int64_t h, int64_t w, int64_t oh, int64_t ow, int64_t begin,
                       int64_t end) {
  for (int64_t row = begin; row < end; ++row) {
    const int64_t plane = row / oh, oy = row % oh;
    const float* r0 = x + (plane * h + 2 * oy) * w * B;
    const float* r1 = r0 + w * B;
    float* dst = y + (plane * oh + oy) * ow * B;
    for (int64_t ox = 0; ox < ow; ++ox) {
      const float *a = r0 + 2 * ox * B, *b = r1 + 2 * ox * B;
#pragma omp simd
      for (int k = 0; k < B; ++k) dst[ox * B + k] = take_max(take_max(a[k], a[B + k]), take_max(b[k], b[B + k]));
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
    for (int64_t ox = 0; ox < ow; ++ox) {
      float m[B];
      for (int k = 0; k < B; ++k) m[k] = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < wd.kh; ++i) {
        const int64_t iy = oy * wd.sh - wd.ph + i * wd.dh;
        if (iy < 0 || iy >= h) continue;
        for (int64_t j = 0; j < wd.kw; ++j) {
          const int64_t ix = ox * wd.sw - wd.pw + j * wd.dw;
          if (ix < 0 || ix >= w) continue;
          const float* v = src + (iy * w + ix) * B;
#pragma omp simd
          for (int k = 0; k < B; ++k) m[k] = take_max(m[k], v[k]);
        }
      }
      for (int k = 0; k < B; ++k) dst[ox * B + k] = m[k];
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

}  // namespace

void max_pool_blocked(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow,
                      int block, const PoolWindow& wd) {
  const int64_t rows = n * (c / block) * oh;
  const bool two_by_two = wd.kh == 2 && wd.kw == 2 && wd.sh == 2 && wd.sw == 2 && wd.ph == 0 && wd.pw == 0 &&
                          wd.dh == 1 && wd.dw == 1;
  parallel_for(rows, 4, [&](int64_t b, int64_t e) {
    if (two_by_two && block == 16)
      max_pool_2x2_rows<16>(x, y, h, w, oh, ow, b, e);
    else if (two_by_two)
      max_pool_2x2_rows<8>(x, y, h, w, oh, ow, b, e);
    else if (block == 16)
      max_pool_rows<16>(x, y, h, w, oh, ow, wd, b, e);
    else
      max_pool_rows<8>(x, y, h, w, oh, ow, wd, b, e);
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

}  // namespace kiln::cpu
