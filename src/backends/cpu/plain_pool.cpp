#include "backends/cpu/plain_pool.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

// v replaces m as the maximum: larger, or NaN (which then stays).
template <typename T>
inline T take(T v, T m) { return (v > m || v != v) ? v : m; }

// Below every value: -inf, or an integer type's lowest.
template <typename T>
constexpr T lowest() {
  return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
}

// Output columns whose whole window lies inside the row: [lo, hi).
void interior(int64_t w, int64_t ow, const PoolWindow& wd, int64_t& lo, int64_t& hi) {
  lo = 0;
  while (lo < ow && lo * wd.sw - wd.pw < 0) ++lo;
  hi = ow;
  while (hi > lo && (hi - 1) * wd.sw - wd.pw + (wd.kw - 1) * wd.dw >= w) --hi;
}

// col = max(col, in) elementwise. Restrict pointers: 8-bit types may alias
// anything, and without the promise the loop does not vectorize.
template <typename T>
inline void row_max(const T* __restrict in, T* __restrict col, int64_t w) {
  for (int64_t c = 0; c < w; ++c) col[c] = take(in[c], col[c]);
}

// The stem pool's columns: 3 wide, stride 2.
template <typename T>
void three_by_two(const T* __restrict c0, T* __restrict dst, int64_t lo, int64_t hi) {
  for (int64_t ox = lo; ox < hi; ++ox) dst[ox] = take(c0[2 * ox + 2], take(c0[2 * ox + 1], c0[2 * ox]));
}

}  // namespace

template <typename T>
void max_pool_values(const T* x, T* y, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                     const PoolWindow& wd) {
  constexpr T kLowest = lowest<T>();
  int64_t lo, hi;
  interior(w, ow, wd, lo, hi);
  parallel_for(planes * oh, 8, [&](int64_t begin, int64_t end) {
    std::vector<T> rows(static_cast<size_t>(w));  // per input column, the maximum over the window's rows
    T* col = rows.data();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t plane = r / oh, oy = r % oh;
      const T* src = x + plane * h * w;
      std::fill(col, col + w, kLowest);
      for (int64_t i = 0; i < wd.kh; ++i) {
        const int64_t iy = oy * wd.sh - wd.ph + i * wd.dh;
        if (iy < 0 || iy >= h) continue;
        const T* in = src + iy * w;
        row_max(in, col, w);
      }
      T* dst = y + r * ow;
      auto edge = [&](int64_t ox) {
        T m = kLowest;
        for (int64_t j = 0; j < wd.kw; ++j) {
          const int64_t ix = ox * wd.sw - wd.pw + j * wd.dw;
          if (ix >= 0 && ix < w) m = take(col[ix], m);
        }
        dst[ox] = m;
      };
      for (int64_t ox = 0; ox < lo; ++ox) edge(ox);
      if (wd.kw == 3 && wd.sw == 2 && wd.dw == 1) {  // torchvision's stem pool
        three_by_two(col - wd.pw, dst, lo, hi);
      } else {
        for (int64_t ox = lo; ox < hi; ++ox) {
          const T* c0 = col + ox * wd.sw - wd.pw;
          T m = c0[0];
          for (int64_t j = 1; j < wd.kw; ++j) m = take(c0[j * wd.dw], m);
          dst[ox] = m;
        }
      }
      for (int64_t ox = std::max(lo, hi); ox < ow; ++ox) edge(ox);
    }
  });
}

// Separably, one output row at a time: the maximum over the window's rows
// of each input pixel's channels (whole rows at once), then over the
// window's columns of those, for each output pixel.
template <typename T>
void max_pool_values_nhwc(const T* x, T* y, int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                          const PoolWindow& wd) {
  parallel_for(n * oh, 4, [&](int64_t begin, int64_t end) {
    std::vector<T> rows(static_cast<size_t>(w * c));
    T* col = rows.data();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / oh, oy = r % oh;
      std::fill(col, col + w * c, lowest<T>());
      for (int64_t i = 0; i < wd.kh; ++i) {
        const int64_t iy = oy * wd.sh - wd.ph + i * wd.dh;
        if (iy >= 0 && iy < h) row_max(x + (b * h + iy) * w * c, col, w * c);
      }
      for (int64_t ox = 0; ox < ow; ++ox) {
        T* dst = y + (r * ow + ox) * c;
        std::fill(dst, dst + c, lowest<T>());
        for (int64_t j = 0; j < wd.kw; ++j) {
          const int64_t ix = ox * wd.sw - wd.pw + j * wd.dw;
          if (ix >= 0 && ix < w) row_max(col + ix * c, dst, c);
        }
      }
    }
  });
}

template void max_pool_values<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t, int64_t, const PoolWindow&);
template void max_pool_values<uint8_t>(const uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                       const PoolWindow&);
template void max_pool_values<int8_t>(const int8_t*, int8_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                      const PoolWindow&);

template void max_pool_values_nhwc<uint8_t>(const uint8_t*, uint8_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                            int64_t, const PoolWindow&);
template void max_pool_values_nhwc<int8_t>(const int8_t*, int8_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                           const PoolWindow&);

}  // namespace kiln::cpu
