#include "backends/cpu/plain_pool.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

// v replaces m as the maximum: larger, or NaN (which then stays).
inline float take(float v, float m) { return (v > m || v != v) ? v : m; }

// Output columns whose whole window lies inside the row: [lo, hi).
void interior(int64_t w, int64_t ow, const PoolWindow& wd, int64_t& lo, int64_t& hi) {
  lo = 0;
  while (lo < ow && lo * wd.sw - wd.pw < 0) ++lo;
  hi = ow;
  while (hi > lo && (hi - 1) * wd.sw - wd.pw + (wd.kw - 1) * wd.dw >= w) --hi;
}

}  // namespace

void max_pool_values(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                     const PoolWindow& wd) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  int64_t lo, hi;
  interior(w, ow, wd, lo, hi);
  parallel_for(planes * oh, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> rows(static_cast<size_t>(w));  // per input column, the maximum over the window's rows
    float* col = rows.data();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t plane = r / oh, oy = r % oh;
      const float* src = x + plane * h * w;
      std::fill(col, col + w, kLowest);
      for (int64_t i = 0; i < wd.kh; ++i) {
        const int64_t iy = oy * wd.sh - wd.ph + i * wd.dh;
        if (iy < 0 || iy >= h) continue;
        const float* in = src + iy * w;
        for (int64_t c = 0; c < w; ++c) col[c] = take(in[c], col[c]);
      }
      float* dst = y + r * ow;
      auto edge = [&](int64_t ox) {
        float m = kLowest;
        for (int64_t j = 0; j < wd.kw; ++j) {
          const int64_t ix = ox * wd.sw - wd.pw + j * wd.dw;
          if (ix >= 0 && ix < w) m = take(col[ix], m);
        }
        dst[ox] = m;
      };
      for (int64_t ox = 0; ox < lo; ++ox) edge(ox);
      if (wd.kw == 3 && wd.sw == 2 && wd.dw == 1) {  // torchvision's stem pool
        const float* c0 = col - wd.pw;
        for (int64_t ox = lo; ox < hi; ++ox)
          dst[ox] = take(c0[2 * ox + 2], take(c0[2 * ox + 1], c0[2 * ox]));
      } else {
        for (int64_t ox = lo; ox < hi; ++ox) {
          const float* c0 = col + ox * wd.sw - wd.pw;
          float m = c0[0];
          for (int64_t j = 1; j < wd.kw; ++j) m = take(c0[j * wd.dw], m);
          dst[ox] = m;
        }
      }
      for (int64_t ox = std::max(lo, hi); ox < ow; ++ox) edge(ox);
    }
  });
}

}  // namespace kiln::cpu
