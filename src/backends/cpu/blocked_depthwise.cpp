#include "backends/cpu/blocked_depthwise.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/gemm_tile.h"
#include "backends/cpu/lanes.h"
#include "backends/cpu/patch_gemm_conv.h"
#include "kiln/error.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu {
namespace {

// Output pixels computed together: independent chains of multiply-adds
// whose windows share their loads (32 vector registers with AVX-512, 16 without).
#if defined(__AVX512F__)
constexpr int kPixels = 8;
#else
constexpr int kPixels = 4;
#endif

template <int B>
struct Kernel : Lanes<B> {
  using typename Lanes<B>::vf;
  using Lanes<B>::load;
  using Lanes<B>::store;
  using Lanes<B>::splat;
  using Lanes<B>::select;

  // Keeps v in a register: GCC would fold each use of a loaded column into
  // its multiply-add as a load of its own, kw loads per column instead of
  // one (the loads, not the arithmetic, then bound the kernel).
  [[gnu::always_inline]] static void hold(vf& v) {
#if defined(__AVX512F__)
    asm("" : "+v"(v));
#elif defined(__AVX__)
    if constexpr (sizeof(vf) == 32) asm("" : "+x"(v));
#endif
  }

  // The epilogue as the eager ops compute it: ReLU and the cap pass NaN.
  struct Epilogue {
    bool relu, hardswish, swish;
    float cap;
    vf apply(vf v) const {
      if (relu) v = select(v < vf{}, vf{}, v);
      if (cap > 0) v = select(v > splat(cap), splat(cap), v);
      if (hardswish) {
        vf gate = v + splat(3.0f);
        gate = select(gate > vf{}, gate, vf{});
        gate = select(gate < splat(6.0f), gate, splat(6.0f));
        v = v * (gate / splat(6.0f));
      }
#if defined(__AVX512F__)
      if constexpr (B == 16)  // (blocked_depthwise_applies: a SiLU only on 16-channel blocks, with AVX-512)
        if (swish) v = reinterpret_cast<vf>(gemm::silu16(reinterpret_cast<__m512>(v)));
#endif
      return v;
    }
  };

  // The input rows one output row reads (those inside the image) and the
  // taps of each: rows[k] is the input row's first column, taps[k] its
  // kernel row's first tap.
  struct Window {
    const float* rows[16];
    const float* taps[16];  // (input channel 0 of each group's taps)
    int count = 0;
    // Groups of gw channels (1: depthwise): lane l reads input channel
    // (l / gw) * gw + j of its block for j < gw, through the taps
    // j * tap_stride floats on.
    int gw = 1;
    int64_t tap_stride = 0;
  };

  // The lanes of v that input channel j of each lane's group takes.
  using vi = typename Lanes<B>::vi;
  struct GroupLanes {
    vi index[17][16];  // [gw][j], gw 1, 2, 4, 8 or 16
    GroupLanes() {
      for (int gw = 1; gw <= B; gw *= 2)
        for (int j = 0; j < gw; ++j)
          for (int l = 0; l < B; ++l) index[gw][j][l] = (l / gw) * gw + j;
    }
  };
  static const vi& group_index(int gw, int j) {
    static const GroupLanes lanes;
    return lanes.index[gw][j];
  }

  // Output pixels [ox, ox + U) whose windows lie inside the input's columns:
  // each input column a row of them reads is loaded once. Under four
  // pixels, the kernel rows alternate between two sets of sums, so that
  // each chain of multiply-adds waits on the one before half as often.
  template <int KW, int SW, int U>
  static void inside(const onednn::ConvShape& s, const Window& win, const vf& bias, const Epilogue& e, int64_t ox,
                     float* y) {
    if (win.gw > 1) return inside_groups<KW, SW, U>(s, win, bias, e, ox, y);
    constexpr int kColumns = (U - 1) * SW + KW, kSets = U < 4 ? 2 : 1;
    vf acc[kSets][U];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      acc[0][u] = bias;
      if constexpr (kSets == 2) acc[kSets - 1][u] = vf{};
    }
    for (int k = 0; k < win.count; ++k) {
      vf(&sum)[U] = acc[k & (kSets - 1)];
      const float* r = win.rows[k] + (ox * SW - s.pw) * B;
      vf col[kColumns];
#pragma GCC unroll 24
      for (int j = 0; j < kColumns; ++j) {
        col[j] = load(r + j * B);
        hold(col[j]);
      }
#pragma GCC unroll 8
      for (int kx = 0; kx < KW; ++kx) {
        const vf tap = load(win.taps[k] + kx * B);
#pragma GCC unroll 8
        for (int u = 0; u < U; ++u) sum[u] += col[u * SW + kx] * tap;
      }
    }
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      if constexpr (kSets == 2) acc[0][u] += acc[1][u];
      store(y + (ox + u) * B, e.apply(acc[0][u]));
    }
  }

  // Lane l's value from lane (l / GW) * GW + J: a constant permutation,
  // within 128-bit lanes where GW <= 4 (an in-lane shuffle).
  template <int GW, int J>
  static vf take(vf v) {
    if constexpr (GW == B)
      return splat(v[J]);
    else if constexpr (B == 16)
      return __builtin_shuffle(
          v, vi{0 / GW * GW + J, 1 / GW * GW + J, 2 / GW * GW + J, 3 / GW * GW + J, 4 / GW * GW + J, 5 / GW * GW + J,
                6 / GW * GW + J, 7 / GW * GW + J, 8 / GW * GW + J, 9 / GW * GW + J, 10 / GW * GW + J, 11 / GW * GW + J,
                12 / GW * GW + J, 13 / GW * GW + J, 14 / GW * GW + J, 15 / GW * GW + J});
    else
      return __builtin_shuffle(v, vi{0 / GW * GW + J, 1 / GW * GW + J, 2 / GW * GW + J, 3 / GW * GW + J,
                                     4 / GW * GW + J, 5 / GW * GW + J, 6 / GW * GW + J, 7 / GW * GW + J});
  }

  // Input channel J of each group, then the next: the columns' lanes moved
  // to the lanes that read them, each column loaded once per channel.
  template <int KW, int SW, int U, int GW, int J>
  static void group_channel(const Window& win, int k, const float* r, vf (&acc)[U]) {
    if constexpr (J < GW) {
      constexpr int kColumns = (U - 1) * SW + KW;
      vf col[kColumns];
#pragma GCC unroll 24
      for (int c = 0; c < kColumns; ++c) {
        if constexpr (GW == B)
          col[c] = splat(r[c * B + J]);  // (a broadcast load: a block is one group)
        else
          col[c] = take<GW, J>(load(r + c * B));
        hold(col[c]);
      }
      const float* taps = win.taps[k] + J * win.tap_stride;
#pragma GCC unroll 8
      for (int kx = 0; kx < KW; ++kx) {
        const vf tap = load(taps + kx * B);
#pragma GCC unroll 8
        for (int u = 0; u < U; ++u) acc[u] += col[u * SW + kx] * tap;
      }
      group_channel<KW, SW, U, GW, J + 1>(win, k, r, acc);
    }
  }

  template <int KW, int SW, int U, int GW>
  static void inside_groups_of(const onednn::ConvShape& s, const Window& win, const vf& bias, const Epilogue& e,
                               int64_t ox, float* y) {
    vf acc[U];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) acc[u] = bias;
    for (int k = 0; k < win.count; ++k)
      group_channel<KW, SW, U, GW, 0>(win, k, win.rows[k] + (ox * SW - s.pw) * B, acc);
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) store(y + (ox + u) * B, e.apply(acc[u]));
  }

  // The same for groups (gw 2, 4, 8 or, in 16-channel blocks, 16 channels).
  template <int KW, int SW, int U>
  static void inside_groups(const onednn::ConvShape& s, const Window& win, const vf& bias, const Epilogue& e,
                            int64_t ox, float* y) {
    if (win.gw == 2) return inside_groups_of<KW, SW, U, 2>(s, win, bias, e, ox, y);
    if (win.gw == 4) return inside_groups_of<KW, SW, U, 4>(s, win, bias, e, ox, y);
    if constexpr (B == 16)
      if (win.gw == 16) return inside_groups_of<KW, SW, U, 16>(s, win, bias, e, ox, y);
    inside_groups_of<KW, SW, U, 8>(s, win, bias, e, ox, y);
  }

  // One output pixel of any geometry, the columns checked.
  static void any(const onednn::ConvShape& s, const Window& win, const vf& bias, const Epilogue& e, int64_t ox,
                  float* y) {
    vf acc = bias;
    for (int k = 0; k < win.count; ++k)
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        const int64_t ix = ox * s.sw - s.pw + kx * s.dw;
        if (ix < 0 || ix >= s.w) continue;
        const vf v = load(win.rows[k] + ix * B);
        if (win.gw == 1) {
          acc += v * load(win.taps[k] + kx * B);
          continue;
        }
        for (int j = 0; j < win.gw; ++j)
          acc += __builtin_shuffle(v, group_index(win.gw, j)) * load(win.taps[k] + j * win.tap_stride + kx * B);
      }
    store(y + ox * B, e.apply(acc));
  }

  // One output row. KW, SW: the kernel's width and stride where fixed at
  // compile time (dilation 1), 0 where not.
  template <int KW, int SW, int U>
  static void row(const onednn::ConvShape& s, const Window& win, const vf& bias, const Epilogue& e, int64_t first,
                  int64_t last, float* y) {
    int64_t ox = 0;
    for (; ox < first; ++ox) any(s, win, bias, e, ox, y);
    if constexpr (KW > 0) {
      for (; ox + U <= last; ox += U) inside<KW, SW, U>(s, win, bias, e, ox, y);
      if constexpr (U > 4)
        if (ox + 4 <= last) inside<KW, SW, 4>(s, win, bias, e, ox, y), ox += 4;
      if (ox + 2 <= last) inside<KW, SW, 2>(s, win, bias, e, ox, y), ox += 2;
      if (ox < last) inside<KW, SW, 1>(s, win, bias, e, ox, y), ++ox;
    }
    for (; ox < s.ow; ++ox) any(s, win, bias, e, ox, y);
  }

  using Row = void (*)(const onednn::ConvShape&, const Window&, const vf&, const Epilogue&, int64_t, int64_t, float*);
  // Rows of a width that is a multiple of 7 and not of 8 (the 7x7, 14x14
  // and 28x28 stages) go 7 pixels at a time, without the tails' short
  // chains (a 7x7 layer took twice oneDNN's time in 4 + 2 + 1 pixels).
  template <int KW, int SW>
  static Row row_of_width(int64_t ow) {
    if constexpr (kPixels == 8)
      if (ow % 7 == 0 && ow % 8 != 0) return row<KW, SW, 7>;
    return row<KW, SW, kPixels>;
  }
  static Row row_for(const onednn::ConvShape& s) {
    if (s.dw != 1) return row<0, 0, 1>;
    if (s.kw == 3 && s.sw == 1) return row_of_width<3, 1>(s.ow);
    if (s.kw == 3 && s.sw == 2) return row_of_width<3, 2>(s.ow);
    if (s.kw == 5 && s.sw == 1) return row_of_width<5, 1>(s.ow);
    if (s.kw == 5 && s.sw == 2) return row_of_width<5, 2>(s.ow);
    if (s.kw == 7 && s.sw == 1) return row_of_width<7, 1>(s.ow);
    return row<0, 0, 1>;
  }

  struct Call {
    const onednn::ConvShape& s;
    const float *x, *packed, *bias;
    float* y;
    Epilogue e;
    Row compute;
    int64_t first, last;  // the output columns whose windows lie inside the input's
    // Narrow images (7x7, 14x14), where most columns are near an edge: the
    // rows are copied into a buffer with their padding made zeros, so that
    // every window lies inside; `padded` is the geometry in that buffer.
    bool narrow;
    onednn::ConvShape padded;
  };

  // Output rows [oy0, oy1) of channel block cb of image img.
  static void rows_of(const Call& c, int64_t img, int64_t cb, int64_t oy0, int64_t oy1, std::vector<float>& buffer) {
    const onednn::ConvShape& s = c.s;
    const int64_t blocks = s.c / B, taps = s.kh * s.kw, gw = s.c / s.groups;
    const float* tap0 = c.packed + cb * gw * taps * B;
    const vf b = c.bias ? load(c.bias + cb * B) : vf{};
    const float* plane = c.x + (img * blocks + cb) * s.h * s.w * B;
    float* out = c.y + (img * blocks + cb) * s.oh * s.ow * B;
    int64_t iy0 = 0, width = s.w * B;
    if (c.narrow) {
      iy0 = oy0 * s.sh - s.ph;
      const int64_t iy1 = (oy1 - 1) * s.sh - s.ph + (s.kh - 1) * s.dh + 1;
      width = c.padded.w * B;
      const int64_t left = std::min(s.pw, c.padded.w) * B, inside = std::clamp<int64_t>(c.padded.w - s.pw, 0, s.w) * B;
      buffer.resize(static_cast<size_t>((iy1 - iy0) * width));
      for (int64_t iy = iy0; iy < iy1; ++iy) {
        float* dst = buffer.data() + (iy - iy0) * width;
        if (iy < 0 || iy >= s.h) {
          std::fill(dst, dst + width, 0.0f);
          continue;
        }
        std::fill(dst, dst + left, 0.0f);
        std::copy_n(plane + iy * s.w * B, inside, dst + left);
        std::fill(dst + left + inside, dst + width, 0.0f);
      }
      plane = buffer.data();
    }
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      Window win;
      win.gw = static_cast<int>(gw);
      win.tap_stride = taps * B;
      for (int64_t ky = 0; ky < s.kh; ++ky) {
        const int64_t iy = oy * s.sh - s.ph + ky * s.dh;
        if (!c.narrow && (iy < 0 || iy >= s.h)) continue;
        win.rows[win.count] = plane + (iy - iy0) * width;
        win.taps[win.count++] = tap0 + ky * s.kw * B;
      }
      if (c.narrow)
        c.compute(c.padded, win, b, c.e, 0, s.ow, out + oy * s.ow * B);
      else
        c.compute(s, win, b, c.e, c.first, c.last, out + oy * s.ow * B);
    }
  }

  static Call call_of(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias,
                      float* y) {
    const onednn::ConvShape& s = call.shape;
    const int64_t reach = (s.kw - 1) * s.dw;  // a window's width less one
    const int64_t first = std::min<int64_t>(s.ow, (s.pw + s.sw - 1) / s.sw);
    const int64_t last =
        s.w - 1 - reach + s.pw < 0 ? first : std::clamp((s.w - 1 - reach + s.pw) / s.sw + 1, first, s.ow);
    Call c{s,          x,
           packed,     bias,
           y,          {call.relu, call.hardswish, call.swish, call.relu ? call.cap : 0.0f},
           row_for(s), first,
           last,       !blocked_depthwise_splits_rows(call),
           s};
    c.padded.w = (s.ow - 1) * s.sw + reach + 1;
    c.padded.pw = 0;
    return c;
  }

  // A thread's share is worth its start from about 2^15 multiply-adds.
  static int64_t row_work(const onednn::ConvShape& s) { return std::max<int64_t>(1, s.ow * s.kh * s.kw * B); }

  static void run(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias, float* y) {
    const onednn::ConvShape& s = call.shape;
    const int64_t blocks = s.c / B;
    const Call c = call_of(call, x, packed, bias, y);
    if (c.narrow) {
      // Whole planes: a band of a narrow plane's rows costs nearly the copy
      // of the whole, and its values are few (14x14: 12 KB a block).
      parallel_for(s.n * blocks, std::max<int64_t>(1, (int64_t{1} << 15) / (row_work(s) * s.oh)),
                   [&](int64_t lo, int64_t hi) {
                     thread_local std::vector<float> buffer;
                     for (int64_t at = lo; at < hi; ++at) rows_of(c, at / blocks, at % blocks, 0, s.oh, buffer);
                   });
      return;
    }
    parallel_for(s.n * s.oh, std::max<int64_t>(1, (int64_t{1} << 15) / (row_work(s) * blocks)),
                 [&](int64_t lo, int64_t hi) {
                   std::vector<float> unused;
                   for (int64_t cb = 0; cb < blocks; ++cb)
                     for (int64_t r = lo; r < hi;) {  // a run of rows of one image at a time
                       const int64_t img = r / s.oh, oy0 = r % s.oh, oy1 = std::min(s.oh, oy0 + (hi - r));
                       rows_of(c, img, cb, oy0, oy1, unused);
                       r += oy1 - oy0;
                     }
                 });
  }

  // The chain by bands of output rows. With an expansion, its rows are made
  // as the windows reach them into a ring of `span` rows per thread (slot
  // iy mod span; a row holds every channel block, [c / B, w, B]) and read
  // from there while in L1 or L2; with a projection, each depthwise output
  // row (every block) goes to a line buffer, which the 1x1 layer reads.
  static void chain(const DepthwiseChain& d, const float* x, float* y) {
    const onednn::ConvShape& s = d.call.shape;
    const int64_t blocks = s.c / B, span = (s.kh - 1) * s.dh + 1, row_floats = blocks * s.w * B;
    const int64_t image_floats = (d.expand ? d.expand->shape.c : s.c) * s.h * s.w;
    const int64_t out_floats = (d.project ? d.project->shape.o : s.c) * s.oh * s.ow;
    const Call c = call_of(d.call, nullptr, d.taps, d.bias, y);
    onednn::LayoutCall line_call;  // the projection of one output row
    if (d.project) {
      line_call = *d.project;
      line_call.shape.h = line_call.shape.oh = 1;
    }
    // A band's first rows repeat the 1x1 work of the band above: worth it
    // from about 2^16 multiply-adds of the layers a thread.
    int64_t work = row_work(s) * blocks;
    if (d.expand) work += s.sh * s.w * d.expand->shape.c * s.c;
    if (d.project) work += s.ow * s.c * d.project->shape.o;
    parallel_for(s.n * s.oh, std::max<int64_t>(1, (int64_t{1} << 16) / work), [&](int64_t lo, int64_t hi) {
      thread_local std::vector<float> ring, line;
      if (d.expand) ring.resize(static_cast<size_t>(span * row_floats));
      if (d.project) line.resize(static_cast<size_t>(blocks * s.ow * B));
      const auto slot = [&](int64_t iy) { return ring.data() + (iy % span) * row_floats; };
      for (int64_t r = lo; r < hi;) {  // a run of rows of one image at a time
        const int64_t img = r / s.oh, oy0 = r % s.oh, oy1 = std::min(s.oh, oy0 + (hi - r));
        const float* image = x + img * image_floats;
        float* out = y + img * out_floats;
        int64_t next = 0;  // the next 1x1 row to make
        for (int64_t oy = oy0; oy < oy1; ++oy) {
          const int64_t top = oy * s.sh - s.ph;
          if (d.expand) {
            next = std::max(next, top);
            for (; next < std::min(s.h, top + span); ++next)
              pointwise_patch_gemm_run(*d.expand, image, d.expand_panels, d.expand_bias, next * s.w, s.w, slot(next),
                                       s.w, 0);
          }
          for (int64_t cb = 0; cb < blocks; ++cb) {
            Window win;
            for (int64_t ky = 0; ky < s.kh; ++ky) {
              const int64_t iy = top + ky * s.dh;
              if (iy < 0 || iy >= s.h) continue;
              win.rows[win.count] = d.expand ? slot(iy) + cb * s.w * B : image + (cb * s.h + iy) * s.w * B;
              win.taps[win.count++] = d.taps + (cb * s.kh + ky) * s.kw * B;
            }
            const vf b = d.bias ? load(d.bias + cb * B) : vf{};
            float* to = d.project ? line.data() + cb * s.ow * B : out + (cb * s.oh + oy) * s.ow * B;
            c.compute(s, win, b, c.e, c.first, c.last, to);
          }
          if (d.project)
            pointwise_patch_gemm_run(line_call, line.data(), d.project_panels, d.project_bias, 0, s.ow, out,
                                     s.oh * s.ow, oy * s.ow);
        }
        r += oy1 - oy0;
      }
    });
  }
};

}  // namespace

// 16-channel blocks with AVX-512 only (lanes.h's kSixteenLanes): they are
// its block size; oneDNN's nChw8c is the block without it.
bool blocked_depthwise_applies(const onednn::LayoutCall& call) {
  const onednn::ConvShape& s = call.shape;
  const int64_t gw = s.groups >= 1 && s.c % s.groups == 0 ? s.c / s.groups : 0;  // channels a group
  return call.kind == onednn::ConvPass::Forward && (call.src_block == 8 || (call.src_block == 16 && kSixteenLanes)) &&
         call.dst_block == call.src_block && gw >= 1 && call.src_block % gw == 0 && s.o == s.c &&
         s.c % call.src_block == 0 && s.kh <= 16 && s.kh >= 1 && s.kw >= 1 && s.sh >= 1 && s.sw >= 1 && s.oh >= 1 &&
         s.ow >= 1 && !call.residual && !call.hardsigmoid &&
         (!call.swish || (call.src_block == 16 && gemm::swish_in_epilogue));
}

int64_t blocked_depthwise_weights_size(const onednn::LayoutCall& call) {
  return call.shape.c * (call.shape.c / call.shape.groups) * call.shape.kh * call.shape.kw;
}

void blocked_depthwise_weights(const onednn::LayoutCall& call, const float* w, float* packed) {
  const onednn::ConvShape& s = call.shape;
  const int64_t block = call.src_block, taps = s.kh * s.kw, gw = s.c / s.groups;
  for (int64_t o = 0; o < s.c; ++o)
    for (int64_t j = 0; j < gw; ++j)
      for (int64_t t = 0; t < taps; ++t)
        packed[(((o / block) * gw + j) * taps + t) * block + o % block] = w[(o * gw + j) * taps + t];
}

bool blocked_depthwise_splits_rows(const onednn::LayoutCall& call) { return call.shape.ow >= 4 * kPixels; }

void blocked_depthwise_conv(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias,
                            float* y) {
  KILN_CHECK(blocked_depthwise_applies(call), "blocked_depthwise_conv: not a blocked depthwise convolution");
  if constexpr (kSixteenLanes)
    if (call.src_block == 16) return Kernel < kSixteenLanes ? 16 : 8 > ::run(call, x, packed, bias, y);
  Kernel<8>::run(call, x, packed, bias, y);
}

namespace {
bool pointwise_call(const onednn::LayoutCall& call) {
  const onednn::ConvShape& s = call.shape;
  return patch_gemm_applies(call) && s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0 &&
         (call.src_block == 8 || call.src_block == 16);
}
}  // namespace

bool pointwise_depthwise_applies(const onednn::LayoutCall& expand, const onednn::LayoutCall& call) {
  const onednn::ConvShape &e = expand.shape, &s = call.shape;
  return blocked_depthwise_applies(call) && s.groups == s.c && s.w >= 4 * kPixels && pointwise_call(expand) &&
         !expand.residual && expand.dst_block == call.src_block && e.n == s.n && e.o == s.c && e.h == s.h && e.w == s.w;
}

bool depthwise_pointwise_applies(const onednn::LayoutCall& call, const onednn::LayoutCall& project) {
  const onednn::ConvShape &s = call.shape, &p = project.shape;
  return blocked_depthwise_applies(call) && s.groups == s.c && s.w >= 4 * kPixels && pointwise_call(project) &&
         project.src_block == call.dst_block && p.n == s.n && p.c == s.c && p.h == s.oh && p.w == s.ow;
}

void depthwise_chain_conv(const DepthwiseChain& chain, const float* x, float* y) {
  KILN_CHECK(chain.expand || chain.project, "depthwise_chain_conv: no 1x1 layer to make inside the depthwise one");
  KILN_CHECK(!chain.expand || pointwise_depthwise_applies(*chain.expand, chain.call),
             "depthwise_chain_conv: the expansion is not a 1x1 convolution the depthwise kernel can make");
  KILN_CHECK(!chain.project || depthwise_pointwise_applies(chain.call, *chain.project),
             "depthwise_chain_conv: the projection is not a 1x1 convolution of the depthwise output");
  if constexpr (kSixteenLanes)
    if (chain.call.src_block == 16) return Kernel < kSixteenLanes ? 16 : 8 > ::chain(chain, x, y);
  Kernel<8>::chain(chain, x, y);
}

}  // namespace kiln::cpu
