// Batch normalization on channel-blocked activations: per-channel sums as
// lane-wise double vectors, one partial per thread over its images, then
// one pass that applies the result.
#include "backends/cpu/blocked_batch_norm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/vec8.h"
#include "kiln/error.h"
#include "kiln/parallel.h"

// Eight doubles, one AVX-512 register: without AVX-512, GCC warns that such
// a value passed or returned by value changes the calling convention
// (-Wpsabi). Every function here is internal to this file, compiled with one
// set of flags, so no caller can disagree with it.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::cpu {
namespace {

using vf = vec8::vf;
using vd = double __attribute__((vector_size(64)));

inline vd widen(vf v) { return __builtin_convertvector(v, vd); }
inline vd load_d(const double* p) {
  vd v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_d(double* p, vd v) { std::memcpy(p, &v, sizeof v); }

// g where mask > 0, else 0 (relu_backward's formula); g itself without a mask.
inline vf masked(const float* g, const float* mask) {
  return mask ? vec8::keep(vec8::load(mask) > vf{}, vec8::load(g)) : vec8::load(g);
}

// Sums over one image's plane of a channel block into s and q (B lanes each):
// forward, of d = x - shift and d * d; backward, of g and g * (x - mean).
template <int B, bool Backward>
void plane_sums(const float* x, const float* g, const float* mask, int64_t hw, const double* centre, double* s, double* q) {
  constexpr int G = B / 8;
  vd c[G], as[G] = {}, aq[G] = {};
  for (int k = 0; k < G; ++k) c[k] = load_d(centre + 8 * k);
  for (int64_t p = 0; p < hw; ++p)
    for (int k = 0; k < G; ++k) {
      const int64_t at = p * B + 8 * k;
      const vd d = widen(vec8::load(x + at)) - c[k];
      if constexpr (Backward) {
        const vd gd = widen(masked(g + at, mask ? mask + at : nullptr));
        as[k] += gd;
        aq[k] += gd * d;
      } else {
        as[k] += d;
        aq[k] += d * d;
      }
    }
  for (int k = 0; k < G; ++k) {
    store_d(s + 8 * k, load_d(s + 8 * k) + as[k]);
    store_d(q + 8 * k, load_d(q + 8 * k) + aq[k]);
  }
}

// Per-channel sums over all images (s and q, [c] each): each thread sums its
// share of the images, then the shares are added in a fixed order.
template <bool Backward>
void channel_sums(const BlockedBatchNorm& sh, const float* x, const float* g, const float* mask, const double* centre,
                  std::vector<double>& s, std::vector<double>& q) {
  const int64_t blocks = sh.c / sh.block, plane = sh.hw * sh.block;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), sh.n));
  std::vector<double> ps(static_cast<size_t>(parts * sh.c), 0.0), pq(ps.size(), 0.0);
  parallel_for(parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t i = t * sh.n / parts; i < (t + 1) * sh.n / parts; ++i)
        for (int64_t cb = 0; cb < blocks; ++cb) {
          const int64_t off = (i * blocks + cb) * plane, ch = cb * sh.block;
          double *s_out = ps.data() + t * sh.c + ch, *q_out = pq.data() + t * sh.c + ch;
          const float* gp = Backward ? g + off : nullptr;
          const float* mp = mask ? mask + off : nullptr;
          if (sh.block == 16)
            plane_sums<16, Backward>(x + off, gp, mp, sh.hw, centre + ch, s_out, q_out);
          else
            plane_sums<8, Backward>(x + off, gp, mp, sh.hw, centre + ch, s_out, q_out);
        }
  });
  s.assign(static_cast<size_t>(sh.c), 0.0);
  q.assign(static_cast<size_t>(sh.c), 0.0);
  for (int64_t t = 0; t < parts; ++t)
    for (int64_t ch = 0; ch < sh.c; ++ch) {
      s[ch] += ps[t * sh.c + ch];
      q[ch] += pq[t * sh.c + ch];
    }
}

// Runs fn(image, channel block, offset of its plane) over all planes, in parallel.
template <typename Fn>
void for_each_plane(const BlockedBatchNorm& sh, Fn fn) {
  const int64_t blocks = sh.c / sh.block, plane = sh.hw * sh.block;
  parallel_for(sh.n * blocks, std::max<int64_t>(1, 16384 / plane), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) fn(i % blocks, i * plane);
  });
}

}  // namespace

void batch_norm_train_blocked(const BlockedBatchNorm& sh, const BatchNormForward& a, float* y, float* mean, float* rstd) {
  const int64_t count = sh.n * sh.hw;
  KILN_CHECK(count > 1, "training mode needs more than one value per channel (got ", sh.n, " images of ", sh.hw,
             " positions); use a batch larger than 1 or eval mode");
  KILN_CHECK(sh.block % 8 == 0 && sh.c % sh.block == 0, "batch_norm_train_blocked: ", sh.c, " channels in blocks of ",
             sh.block);
  // Centred on each channel's first value: the variance stays accurate when the mean is large.
  std::vector<double> centre(static_cast<size_t>(sh.c)), s, q;
  for (int64_t ch = 0; ch < sh.c; ++ch) centre[ch] = a.x[(ch / sh.block) * sh.hw * sh.block + ch % sh.block];
  channel_sums<false>(sh, a.x, nullptr, nullptr, centre.data(), s, q);
  std::vector<float> scale(static_cast<size_t>(sh.c)), shift(static_cast<size_t>(sh.c));
  const double n = static_cast<double>(count);
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    const double m = centre[ch] + s[ch] / n;
    const double ss = std::max(0.0, q[ch] - s[ch] * s[ch] / n);
    const double r = 1.0 / std::sqrt(ss / n + a.eps);
    mean[ch] = static_cast<float>(m);
    rstd[ch] = static_cast<float>(r);
    if (a.running_mean) {
      a.running_mean[ch] = static_cast<float>((1 - a.momentum) * a.running_mean[ch] + a.momentum * m);
      a.running_var[ch] = static_cast<float>((1 - a.momentum) * a.running_var[ch] + a.momentum * ss / (n - 1));
    }
    // As the plain kernel: float scale and shift, y = x * scale + shift.
    const double w = a.weight ? a.weight[ch] : 1.0;
    scale[ch] = static_cast<float>(r * w);
    shift[ch] = static_cast<float>((a.bias ? a.bias[ch] : 0.0) - m * r * w);
  }
  for_each_plane(sh, [&](int64_t cb, int64_t off) {
    const float *x = a.x + off, *res = a.residual ? a.residual + off : nullptr;
    float* out = y + off;
    for (int64_t p = 0; p < sh.hw * sh.block; p += sh.block)
      for (int k = 0; k < sh.block; k += 8) {
        const int64_t ch = cb * sh.block + k;
        vf v = vec8::load(x + p + k) * vec8::load(scale.data() + ch) + vec8::load(shift.data() + ch);
        if (res) v += vec8::load(res + p + k);
        vec8::store(out + p + k, a.relu ? vec8::relu(v) : v);
      }
  });
}

void batch_norm_backward_blocked(const BlockedBatchNorm& sh, const BatchNormBackward& a, float* gx, float* gw, float* gb) {
  KILN_CHECK(sh.block % 8 == 0 && sh.c % sh.block == 0, "batch_norm_backward_blocked: ", sh.c, " channels in blocks of ",
             sh.block);
  std::vector<double> centre(a.mean, a.mean + sh.c), sum_g, sum_gx;
  channel_sums<true>(sh, a.x, a.gy, a.mask, centre.data(), sum_g, sum_gx);
  const double n = static_cast<double>(sh.n * sh.hw);
  std::vector<float> k1(static_cast<size_t>(sh.c)), k2(k1.size()), k3(k1.size());
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    const double r = a.rstd[ch];
    gb[ch] = static_cast<float>(sum_g[ch]);
    gw[ch] = static_cast<float>(sum_gx[ch] * r);
    k1[ch] = static_cast<float>((a.weight ? a.weight[ch] : 1.0) * r);
    k2[ch] = static_cast<float>(sum_g[ch] / n);
    k3[ch] = static_cast<float>(r * r * sum_gx[ch] / n);
  }
  for_each_plane(sh, [&](int64_t cb, int64_t off) {
    const float *g = a.gy + off, *m = a.mask ? a.mask + off : nullptr, *x = a.x + off;
    float* out = gx + off;
    for (int64_t p = 0; p < sh.hw * sh.block; p += sh.block)
      for (int k = 0; k < sh.block; k += 8) {
        const int64_t ch = cb * sh.block + k;
        const vf gv = masked(g + p + k, m ? m + p + k : nullptr);
        const vf xm = vec8::load(x + p + k) - vec8::load(a.mean + ch);
        vec8::store(out + p + k, vec8::load(k1.data() + ch) *
                                     (gv - vec8::load(k2.data() + ch) - xm * vec8::load(k3.data() + ch)));
      }
  });
}

}  // namespace kiln::cpu
