#include "backends/cpu/few_channel_conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/lanes.h"
#include "backends/cpu/vec8.h"
#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kMaxTaps = 4 * 7 * 7;  // channels x kernel height x kernel width

// The input plane with its padding, large enough for every tap of every
// output position (the right padding may be smaller than the left).
int64_t padded_height(const onednn::ConvShape& s) {
  return std::max(s.h + 2 * s.ph, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1);
}
int64_t padded_width(const onednn::ConvShape& s) {
  return std::max(s.w + 2 * s.pw, (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1);
}

// Each tap (c, i, j), in [c, kh, kw] order: its offset in the padded input.
std::vector<int64_t> tap_offsets(const onednn::ConvShape& s) {
  const int64_t ph_w = padded_width(s), ph_h = padded_height(s);
  std::vector<int64_t> offsets;
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) offsets.push_back((c * ph_h + i * s.dh) * ph_w + j * s.dw);
  return offsets;
}

// Image n of x into the middle of padded (whose zero border stays as it is).
void copy_padded(const onednn::ConvShape& s, const float* x, int64_t n, std::vector<float>& padded) {
  const int64_t ph_w = padded_width(s), ph_h = padded_height(s);
  padded.resize(static_cast<size_t>(s.c * ph_h * ph_w), 0.0f);
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t iy = 0; iy < s.h; ++iy)
      std::copy_n(x + ((n * s.c + c) * s.h + iy) * s.w, s.w, padded.data() + (c * ph_h + iy + s.ph) * ph_w + s.pw);
}

// One channel block of outputs: acc[tap][lane] += gy[pos][lane] * x at the
// tap's offset from pos, over every image and output position. The input is
// copied with its zero padding around it, so no tap needs a bounds check.
// TAPS > 0 fixes the tap count at compile time, which keeps the accumulators
// in registers for the common 3x3 single-channel case.
// grad_plane(n): image n's output gradient for this channel block, [oh, ow, B].
template <int B, int TAPS, typename GradPlane>
void accumulate_block(const onednn::ConvShape& s, const float* x, const GradPlane& grad_plane, float* acc,
                      float* bias_acc, std::vector<float>& padded, const std::vector<int64_t>& offsets) {
  const int64_t taps = TAPS > 0 ? TAPS : static_cast<int64_t>(offsets.size());
  const int64_t ph_w = padded_width(s);
  std::fill_n(acc, taps * B, 0.0f);
  std::fill_n(bias_acc, B, 0.0f);
  for (int64_t n = 0; n < s.n; ++n) {
    // Sums per image, added to the totals after it: shorter float sums.
    float a[TAPS > 0 ? TAPS : kMaxTaps][B] = {};
    float bsum[B] = {};
    copy_padded(s, x, n, padded);
    const float* g = grad_plane(n);
    for (int64_t oy = 0; oy < s.oh; ++oy)
      for (int64_t ox = 0; ox < s.ow; ++ox) {
        const float* gv = g + (oy * s.ow + ox) * B;
        const float* origin = padded.data() + oy * s.sh * ph_w + ox * s.sw;
#pragma GCC unroll 16
        for (int64_t t = 0; t < taps; ++t) {
          const float xv = origin[offsets[t]];
#pragma omp simd
          for (int k = 0; k < B; ++k) a[t][k] += gv[k] * xv;
        }
#pragma omp simd
        for (int k = 0; k < B; ++k) bsum[k] += gv[k];
      }
    for (int64_t t = 0; t < taps; ++t)
      for (int k = 0; k < B; ++k) acc[t * B + k] += a[t][k];
    for (int k = 0; k < B; ++k) bias_acc[k] += bsum[k];
  }
}

// Parallel over output channel blocks; grad_plane(n, cb, scratch) returns
// image n's gradient plane for block cb, made in scratch if it must be.
template <int B, typename GradPlane>
void weight_grad(const onednn::ConvShape& s, const float* x, const GradPlane& grad_plane, float* gw, float* gb) {
  const int64_t taps = s.c * s.kh * s.kw;
  const std::vector<int64_t> offsets = tap_offsets(s);
  parallel_for(s.o / B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> padded;
    std::vector<float> acc(static_cast<size_t>(taps * B)), bias_acc(B), scratch;
    for (int64_t cb = begin; cb < end; ++cb) {
      auto plane = [&](int64_t n) { return grad_plane(n, cb, scratch); };
      if (taps == 9)
        accumulate_block<B, 9>(s, x, plane, acc.data(), bias_acc.data(), padded, offsets);
      else
        accumulate_block<B, 0>(s, x, plane, acc.data(), bias_acc.data(), padded, offsets);
      for (int k = 0; k < B; ++k) {
        const int64_t o = cb * B + k;
        for (int64_t t = 0; t < taps; ++t) gw[o * taps + t] = acc[t * B + k];  // taps run in [c, kh, kw] order
        if (gb) gb[o] = bias_acc[k];
      }
    }
  });
}

template <int B>
void weight_grad_from_pool(const onednn::ConvShape& s, const float* x, const MaxPoolGrad& pool, float* gw, float* gb) {
  auto plane = [&](int64_t n, int64_t cb, std::vector<float>& scratch) -> const float* {
    scratch.resize(static_cast<size_t>(s.oh * s.ow * B));
    max_pool_grad_plane(pool, n * (s.o / B) + cb, scratch.data());
    return scratch.data();
  };
  weight_grad<B>(s, x, plane, gw, gb);
}

// Plane (n, cb) of the pooled output: for each 2x2 window, the four
// convolution outputs (L channels to a vector: the whole block of 16 in
// one where the block is 16), their maximum, then the bias and the ReLU once
// (both commute with the maximum).
template <int B, int L>
void conv_relu_pool_plane(const onednn::ConvShape& s, const float* w, const float* bias, float* y, int64_t n,
                          int64_t cb, int64_t pooled_h, int64_t pooled_w, const std::vector<float>& padded,
                          const std::vector<int64_t>& offsets) {
  using V = Lanes<L>;
  using vf = typename V::vf;
  const int64_t taps = static_cast<int64_t>(offsets.size()), ph_w = padded_width(s);
  for (int part = 0; part < B; part += L) {
    std::vector<vf> wv(static_cast<size_t>(taps));  // tap t's weights for L output channels
    for (int64_t t = 0; t < taps; ++t) {
      float lanes[L];
      for (int k = 0; k < L; ++k) lanes[k] = w[(cb * B + part + k) * taps + t];
      wv[t] = V::load(lanes);
    }
    const vf b = bias ? V::load(bias + cb * B + part) : vf{};
    float* out = y + (n * (s.o / B) + cb) * pooled_h * pooled_w * B + part;
    // Q pooled outputs at a time, each from four convolution outputs: 4Q
    // independent sums, so the multiply-adds do not wait on one another.
    auto pooled = [&](auto q_count, int64_t py, int64_t px) {
      constexpr int Q = decltype(q_count)::value;
      const float* origin[Q][4];
      for (int q = 0; q < Q; ++q)
        for (int d = 0; d < 4; ++d)
          origin[q][d] = padded.data() + (2 * py + d / 2) * s.sh * ph_w + (2 * (px + q) + d % 2) * s.sw;
      vf acc[Q][4] = {};
      for (int64_t t = 0; t < taps; ++t) {
        const vf wt = wv[t];
        const int64_t off = offsets[t];
        for (int q = 0; q < Q; ++q)
          for (int d = 0; d < 4; ++d) acc[q][d] += V::splat(origin[q][d][off]) * wt;
      }
      for (int q = 0; q < Q; ++q) {
        vf best = acc[q][0];
        for (int d = 1; d < 4; ++d) best = V::select(V::beats(acc[q][d], best), acc[q][d], best);
        best += b;
        V::store(out + (py * pooled_w + px + q) * B, V::relu(best));
      }
    };
    for (int64_t py = 0; py < pooled_h; ++py) {
      int64_t px = 0;
      for (; px + 2 <= pooled_w; px += 2) pooled(std::integral_constant<int, 2>{}, py, px);
      if (px < pooled_w) pooled(std::integral_constant<int, 1>{}, py, px);
    }
  }
}

}  // namespace

bool conv_relu_pool_applies(const onednn::ConvShape& s, int block, const PoolWindow& wd) {
  return few_channel_weight_grad_applies(s, block) && s.c * s.kh * s.kw <= 27 && wd.kh == 2 && wd.kw == 2 &&
         wd.sh == 2 && wd.sw == 2 && wd.ph == 0 && wd.pw == 0 && wd.dh == 1 && wd.dw == 1;
}

void conv_relu_pool_few_channels(const onednn::ConvShape& s, int block, const float* x, const float* w,
                                 const float* bias, float* y) {
  const int64_t pooled_h = s.oh / 2, pooled_w = s.ow / 2, blocks = s.o / block;
  const std::vector<int64_t> offsets = tap_offsets(s);
  parallel_for(s.n * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> padded;
    int64_t copied = -1;  // the image in padded
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t n = plane / blocks, cb = plane % blocks;
      if (n != copied) copy_padded(s, x, n, padded), copied = n;
      if (block == 16)  // (in two halves of 8 without AVX-512: lanes.h's 16 would change the calling convention)
        conv_relu_pool_plane<16, kSixteenLanes ? 16 : 8>(s, w, bias, y, n, cb, pooled_h, pooled_w, padded, offsets);
      else
        conv_relu_pool_plane<8, 8>(s, w, bias, y, n, cb, pooled_h, pooled_w, padded, offsets);
    }
  });
}

bool few_channel_weight_grad_applies(const onednn::ConvShape& s, int block) {
  return (block == 8 || block == 16) && s.groups == 1 && s.c <= 4 && s.kh <= 7 && s.kw <= 7 && s.o % block == 0;
}

void conv_weight_grad_few_channels(const onednn::ConvShape& s, int block, const float* x, const float* gy, float* gw,
                                   float* gb) {
  const int64_t plane_size = s.oh * s.ow * block;
  auto plane = [&](int64_t n, int64_t cb, std::vector<float>&) { return gy + (n * (s.o / block) + cb) * plane_size; };
  if (block == 16)
    weight_grad<16>(s, x, plane, gw, gb);
  else
    weight_grad<8>(s, x, plane, gw, gb);
}

void conv_weight_grad_few_channels(const onednn::ConvShape& s, const float* x, const MaxPoolGrad& pool, float* gw,
                                   float* gb) {
  if (pool.block == 16)
    weight_grad_from_pool<16>(s, x, pool, gw, gb);
  else
    weight_grad_from_pool<8>(s, x, pool, gw, gb);
}

}  // namespace kiln::cpu
