#include "backends/cpu/patch_gemm_conv.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_caches.h"
#include "backends/cpu/gemm_tile.h"
#include "kiln/error.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu {
namespace {

using vec8::vf;
using gemm::kCols;
using gemm::kRows;

int64_t patch_length(const onednn::ConvShape& s) { return s.c * s.kh * s.kw; }

// The patches of image `img` (S-channel blocks), one row per output pixel,
// ordered (channel block, tap, channel) so that each tap of a block is one
// or two vector copies.
template <int S>
void gather_patches(const onednn::ConvShape& s, const float* x, int64_t img, float* patches) {
  const int64_t blocks = s.c / S, taps = s.kh * s.kw, length = patch_length(s);
  const float* image = x + img * s.c * s.h * s.w;
  parallel_for(s.oh * s.ow, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      const int64_t oy = p / s.ow, ox = p % s.ow;
      float* row = patches + p * length;
      for (int64_t cb = 0; cb < blocks; ++cb)
        for (int64_t ky = 0; ky < s.kh; ++ky)
          for (int64_t kx = 0; kx < s.kw; ++kx) {
            const int64_t iy = oy * s.sh - s.ph + ky * s.dh, ix = ox * s.sw - s.pw + kx * s.dw;
            const bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
            const float* from = image + ((cb * s.h + iy) * s.w + ix) * S;
            float* to = row + (cb * taps + ky * s.kw + kx) * S;
            for (int half = 0; half < S; half += 8) vec8::store(to + half, inside ? vec8::load(from + half) : vf{});
          }
    }
  });
}

constexpr int64_t kPlainChunk = 16 * kRows;  // output pixels a thread takes at a time from plain input

// Plain input: pixels [first, first + count) of image `img`, one row each,
// ordered (channel, tap) as the weights are, zeros outside the image. Only
// the tiles at borders and across rows come here.
void gather_plain_patches(const onednn::ConvShape& s, const float* x, int64_t img, int64_t first, int64_t count,
                          float* patches) {
  const float* image = x + img * s.c * s.h * s.w;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t oy = (first + i) / s.ow, ox = (first + i) % s.ow;
    float* row = patches + i * patch_length(s);
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t ky = 0; ky < s.kh; ++ky) {
        const int64_t iy = oy * s.sh - s.ph + ky * s.dh;
        const float* line = image + (c * s.h + iy) * s.w;
        for (int64_t kx = 0; kx < s.kw; ++kx) {
          const int64_t ix = ox * s.sw - s.pw + kx * s.dw;
          *row++ = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w ? line[ix] : 0.0f;
        }
      }
  }
}

// Where output panel j (16 channels) of the tile at pixel p0 goes: one
// 16-channel block, or two 8-channel ones.
gemm::Output panel_output(float* y, int dst_block, int64_t pixels, int64_t j, int64_t p0) {
  if (dst_block == 16) return {y + (j * pixels + p0) * 16, 16, 8};
  return {y + (2 * j * pixels + p0) * 8, 8, pixels * 8};
}

// Plain input: threads take chunks of output pixels. A tile of kRows
// pixels on one output row whose windows lie inside the image reads its
// patches straight from the image: pixel r's value k sits at
// offsets[k] + r * stride from the first pixel's window. Other tiles (at
// the borders, across rows) gather their patches first. Two panels at a
// time; the stride is a template argument where it is 1 or 2 (0: any), so
// that the rows' offsets are constants.
template <int kStride>
void plain_patch_gemm_conv(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias,
                           float* y) {
  const onednn::ConvShape& s = call.shape;
  const int64_t length = patch_length(s), pixels = s.oh * s.ow, panels = (s.o + kCols - 1) / kCols;
  const int64_t chunks = (pixels + kPlainChunk - 1) / kPlainChunk;
  // Channels that end in half a panel (40 = 2.5 x 16, 8-channel blocks):
  // that panel's tiles store their first 8 columns, with as much bias.
  const bool half_last = s.o % kCols != 0;
  alignas(64) float half_bias[kCols] = {};
  if (half_last && bias) std::copy_n(bias + (panels - 1) * kCols, s.o % kCols, half_bias);
  const int64_t plane = s.h * s.w, span_y = (s.kh - 1) * s.dh, span_x = (s.kw - 1) * s.dw;
  std::vector<int64_t> offsets;
  for (int64_t c = 0; c < s.c; ++c)
    for (int64_t ky = 0; ky < s.kh; ++ky)
      for (int64_t kx = 0; kx < s.kw; ++kx) offsets.push_back(c * plane + ky * s.dh * s.w + kx * s.dw);
  const int64_t* off = offsets.data();
  const int64_t stride = kStride ? kStride : s.sw;
  for (int64_t img = 0; img < s.n; ++img) {
    float* out = y + img * s.o * pixels;
    const float* image = x + img * s.c * plane;
    parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
      Tensor scratch = Tensor::empty({kRows * length});  // from Kiln's caching allocator
      float* patches = scratch.data<float>();
      for (int64_t chunk = lo; chunk < hi; ++chunk) {
        const int64_t end = std::min(pixels, (chunk + 1) * kPlainChunk);
        for (int64_t p = chunk * kPlainChunk; p < end; p += kRows) {
          const int64_t n = std::min(kRows, end - p), oy = p / s.ow, ox = p % s.ow;
          const int64_t iy0 = oy * s.sh - s.ph, ix0 = ox * s.sw - s.pw;
          const bool direct = n == kRows && ox + kRows <= s.ow && iy0 >= 0 && iy0 + span_y < s.h && ix0 >= 0 &&
                              ix0 + (kRows - 1) * s.sw + span_x < s.w;
          if (!direct) gather_plain_patches(s, x, img, p, n, patches);
          const float* corner = direct ? image + iy0 * s.w + ix0 : nullptr;
          const auto a_at = [corner, off, stride](int r, int64_t k) { return corner[off[k] + r * stride]; };
          const auto epilogue = [&](int64_t j) {
            const bool half = half_last && j + 1 == panels;
            return gemm::Epilogue{bias ? (half ? half_bias : bias + j * kCols) : nullptr,
                                  call.residual,
                                  true,
                                  call.relu,
                                  call.hardswish,
                                  call.cap,
                                  call.swish};
          };
          const auto output = [&](int64_t j) {
            const gemm::Output o = panel_output(out, call.dst_block, pixels, j, p);
            return half_last && j + 1 == panels ? gemm::Output{o.c, o.row_stride, 0} : o;
          };
          for (int64_t j = 0; j < panels; j += 2) {
            const float* b = packed + j * length * kCols;
            if (j + 2 == panels && half_last) {  // the half panel alone, its whole neighbour alone
              for (int64_t k = j; k < panels; ++k, b += length * kCols) {
                if (direct)
                  gemm::tile_of<kRows>(a_at, b, length, output(k), epilogue(k));
                else
                  gemm::tile_rows(n, patches, length, b, length, output(k), epilogue(k));
              }
            } else if (j + 1 == panels) {
              if (direct)
                gemm::tile_of<kRows>(a_at, b, length, output(j), epilogue(j));
              else
                gemm::tile_rows(n, patches, length, b, length, output(j), epilogue(j));
            } else if (direct) {
              gemm::tile2_of<kRows>(a_at, b, b + length * kCols, length, output(j), output(j + 1), epilogue(j),
                                    epilogue(j + 1));
            } else {
              gemm::tile2_rows(n, patches, length, b, b + length * kCols, length, output(j), output(j + 1), epilogue(j),
                               epilogue(j + 1));
            }
          }
        }
      }
    });
  }
}

// Output panels `first` and `first + 1` (where there is one) of the tile of
// `rows` pixels from p0 (consecutive in the output): both at once when both
// are whole, else one at a time. When the channels end in half a panel
// (72 = 4.5 x 16), that half's tile stores its first 8 columns only, as
// only that 8-channel block exists.
// prefetch: fetch the next pair's panels into L2 meanwhile (the first tile
// of a pair, where the pairs' tiles run in turn).
template <typename AAt>
void pair_tile(const onednn::LayoutCall& call, int64_t rows, const AAt& a_at, const float* packed, const float* bias,
               int64_t first, float* out, int64_t pixels, int64_t p0, bool prefetch = false) {
  const int64_t o = call.shape.o, length = patch_length(call.shape), panels = (o + kCols - 1) / kCols;
  const auto epilogue = [&](int64_t j) {
    return gemm::Epilogue{bias ? bias + j * kCols : nullptr, call.residual, true, call.relu, call.hardswish, call.cap,
                          call.swish};
  };
  const auto output = [&](int64_t j) { return panel_output(out, call.dst_block, pixels, j, p0); };
  const auto whole = [&](int64_t j) { return (j + 1) * kCols <= o; };
  const float* b = packed + first * length * kCols;
  if (first + 1 < panels && whole(first + 1)) {
    const gemm::Prefetch next = prefetch && first + 3 < panels
                                    ? gemm::Prefetch{b + 2 * length * kCols, b + 3 * length * kCols, length}
                                    : gemm::Prefetch{};
    gemm::tile2_rows_of(rows, a_at, b, b + length * kCols, length, output(first), output(first + 1), epilogue(first),
                        epilogue(first + 1), next);
    return;
  }
  for (int64_t j = first; j < std::min(panels, first + 2); ++j, b += length * kCols) {
    if (whole(j)) {
      gemm::tile_rows_of(rows, a_at, b, length, output(j), epilogue(j));
      continue;
    }
    gemm::Epilogue e = epilogue(j);
    alignas(64) float half_bias[kCols] = {};
    if (bias) {
      std::copy_n(bias + j * kCols, 8, half_bias);
      e.bias = half_bias;
    }
    gemm::tile_rows_of(rows, a_at, b, length, {output(j).c, 8, 0}, e);
  }
}

// The work order of the 1x1 and implicit kernels, which take (pair of
// panels, tile) items: the tiles vary fastest once there are 4 pairs or
// more, so that a pair's weights stay in cache while the pixels pass; with
// fewer, the panels, so that each thread gets its share of every pair (a
// half panel costs half a pair: 40 channels split by pairs gave one thread
// twice the other's work).
bool pixels_fastest(int64_t o) { return (o + 2 * kCols - 1) / (2 * kCols) >= 4; }

// tile(first panel of the pair, tile index) for every item, over the threads.
template <typename Tile>
void for_pairs_and_tiles(int64_t o, int64_t tiles, const Tile& tile) {
  const int64_t groups = (o + 2 * kCols - 1) / (2 * kCols);
  const bool by_pixels = pixels_fastest(o);
  parallel_for(groups * tiles, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi; ++item)
      tile((by_pixels ? item / tiles : item % groups) * 2, by_pixels ? item % tiles : item / groups);
  });
}

bool pointwise(const onednn::ConvShape& s) {
  return s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0 && s.oh == s.h && s.ow == s.w;
}

// A 1x1 convolution (stride 1, no padding) between blocked layouts of either
// block size: the image already is the GEMM's left matrix (pixel p's channel
// k sits at a fixed offset), so nothing is gathered and any pixel count
// goes. (The source block is a template argument so that a tile's rows,
// src_block floats apart, are constant offsets: computed at run time, their
// addresses took two integer operations per broadcast, and the loop ran 15%
// slower; gemm::BlockedA makes the channels' offsets constant too.)
template <int src_block>
void pointwise_patch_gemm_conv(const onednn::LayoutCall& call, const float* x, const float* weights,
                               const float* bias, float* y, const float* channel_scale, int64_t scale_stride) {
  const onednn::ConvShape& s = call.shape;
  // The weights scaled for one image (from Kiln's caching allocator).
  Tensor scratch = channel_scale ? Tensor::empty({patch_gemm_weights_size(s)}) : Tensor();
  const float* packed = channel_scale ? scratch.data<float>() : weights;
  const int64_t pixels = s.h * s.w, tiles = (pixels + kRows - 1) / kRows, plane = pixels * src_block;
  // Taking tiles in turn, threads share the work evenly when the tiles are
  // of equal height (49 pixels: 10, 10, 10, 10, 9 rather than 12, 12, 12, 12, 1).
  const int64_t tile_rows = pixels_fastest(s.o) ? kRows : (pixels + tiles - 1) / tiles;
  for (int64_t img = 0; img < s.n; ++img) {
    const float* image = x + img * s.c * pixels;
    float* out = y + img * s.o * pixels;
    if (channel_scale && (img == 0 || scale_stride != 0)) {  // rows (k: the channel) times its factor, once if shared
      const float* factor = channel_scale + img * scale_stride;
      float* scaled = scratch.data<float>();
      parallel_for(patch_gemm_weights_size(s) / kCols, 64, [&](int64_t lo, int64_t hi) {
        for (int64_t row = lo; row < hi; ++row)
          for (int64_t j = 0; j < kCols; ++j) scaled[row * kCols + j] = weights[row * kCols + j] * factor[row % s.c];
      });
    }
    const bool by_pixels = pixels_fastest(s.o);
    for_pairs_and_tiles(s.o, tiles, [&](int64_t first, int64_t tile) {
      const int64_t p0 = tile * tile_rows, rows = std::min(tile_rows, pixels - p0);
      const gemm::BlockedA<src_block> a_at{image + p0 * src_block, plane};
      pair_tile(call, rows, a_at, packed, bias, first, out, pixels, p0, by_pixels && tile == 0);
    });
  }
}

// Pixels [p0, p0 + count) of one image on the calling thread, into y (of
// y_pixels pixels per channel block) from its pixel y0: tiles of equal
// height along the run, each through every pair of panels while its
// patches are in L1.
template <int src_block>
void pointwise_run(const onednn::LayoutCall& call, const float* image, const float* packed, const float* bias,
                   int64_t p0, int64_t count, float* y, int64_t y_pixels, int64_t y0) {
  const onednn::ConvShape& s = call.shape;
  const int64_t plane = s.h * s.w * src_block, panels = (s.o + kCols - 1) / kCols;
  const int64_t tiles = (count + kRows - 1) / kRows, tile_rows = (count + tiles - 1) / tiles;
  for (int64_t q = 0; q < count; q += tile_rows) {
    const int64_t rows = std::min(tile_rows, count - q);
    const gemm::BlockedA<src_block> a_at{image + (p0 + q) * src_block, plane};
    for (int64_t first = 0; first < panels; first += 2)
      pair_tile(call, rows, a_at, packed, bias, first, y, y_pixels, y0 + q);
  }
}

// One image with its padding made real: [c / S, hp, wp, S], hp x wp being
// the rows and columns the windows reach from (-ph, -pw), zeros outside the
// image.
template <int src_block>
void pad_image(const onednn::ConvShape& s, const float* image, int64_t hp, int64_t wp, float* padded) {
  const int64_t row = wp * src_block, left = std::min(s.pw, wp) * src_block;
  const int64_t inside = std::clamp<int64_t>(wp - s.pw, 0, s.w) * src_block;
  parallel_for(s.c / src_block * hp, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t at = lo; at < hi; ++at) {
      const int64_t cb = at / hp, iy = at % hp - s.ph;
      float* dst = padded + at * row;
      if (iy < 0 || iy >= s.h) {
        std::fill(dst, dst + row, 0.0f);
        continue;
      }
      std::fill(dst, dst + left, 0.0f);
      std::copy_n(image + (cb * s.h + iy) * s.w * src_block, inside, dst + left);
      std::fill(dst + left + inside, dst + row, 0.0f);
    }
  });
}

// The width of each of an output row's tiles, as equal as they can be.
int64_t tile_width(int64_t ow) {
  const int64_t per_row = (ow + kRows - 1) / kRows;
  return (ow + per_row - 1) / per_row;
}

// Any other convolution from blocked input, into either block size, as an
// implicit GEMM: once the image is padded (pad_image), a tile of output
// pixels on one row reads each (channel block, tap) of its patches at a
// fixed offset from its first pixel's window, the rows stride * S floats
// apart. Nothing is gathered and the borders need no case of their own. A
// row's tiles are of equal width (55 pixels: five of 11).
template <int src_block, int kStride>
void spatial_patch_gemm_conv(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias,
                             float* y) {
  const onednn::ConvShape& s = call.shape;
  const int64_t pixels = s.oh * s.ow;
  const int64_t per_row = (s.ow + kRows - 1) / kRows, width = tile_width(s.ow);
  const int64_t hp = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1, wp = (s.ow - 1) * kStride + (s.kw - 1) * s.dw + 1;
  std::vector<int64_t> offsets;  // of each (channel block, tap) from the window's corner
  for (int64_t cb = 0; cb < s.c / src_block; ++cb)
    for (int64_t ky = 0; ky < s.kh; ++ky)
      for (int64_t kx = 0; kx < s.kw; ++kx) offsets.push_back(((cb * hp + ky * s.dh) * wp + kx * s.dw) * src_block);
  const int64_t* off = offsets.data();
  Tensor scratch = Tensor::empty({s.c * hp * wp});  // from Kiln's caching allocator
  float* padded = scratch.data<float>();
  for (int64_t img = 0; img < s.n; ++img) {
    pad_image<src_block>(s, x + img * s.c * s.h * s.w, hp, wp, padded);
    float* out = y + img * s.o * pixels;
    for_pairs_and_tiles(s.o, s.oh * per_row, [&](int64_t first, int64_t tile) {
      const int64_t oy = tile / per_row, ox = tile % per_row * width, rows = std::min(width, s.ow - ox);
      const float* corner = padded + (oy * s.sh * wp + ox * kStride) * src_block;
      const gemm::BlockedA<src_block, kStride * src_block> a_at{corner, 0, off};
      pair_tile(call, rows, a_at, packed, bias, first, out, pixels, oy * s.ow + ox);
    });
  }
}

// Whether the implicit GEMM takes this call from blocked input: where its
// tiles are wide (at least 11 pixels with AVX-512: 55x55, not 27x27). On
// narrower ones oneDNN's direct kernel was faster (SqueezeNet's 27x27: 148
// against 168 us); but from one block size to the other oneDNN has no fast
// kernel (RegNetY's 48 -> 104 1x1 at stride 2 into 28x28 ran plain,
// between reorders).
bool implicit_fits(const onednn::LayoutCall& call) {
  const onednn::ConvShape& s = call.shape;
  return (s.sw == 1 || s.sw == 2) && (tile_width(s.ow) >= kRows - 1 || call.src_block != call.dst_block);
}

// The gathered GEMM (below) for few output pixels: its tiles run across
// output rows, where the implicit GEMM's stop at each row's end (7 pixels
// at 7x7). Gathering costs more than the implicit GEMM's padded copy, so
// from 16-channel blocks it takes only the calls that one does not.
// (ResNet-50's 512-channel 3x3 at stride 2 into 7x7: 0.65-0.76 ms against
// oneDNN's direct kernel's 0.86-0.91.)
bool gathered(const onednn::LayoutCall& call) {
  const onednn::ConvShape& s = call.shape;
  const int64_t pixels = s.oh * s.ow;
  const bool eights = call.src_block == 8 && call.dst_block == 8;
  return (eights || ((call.src_block == 8 || call.src_block == 16) && (call.dst_block == 8 || call.dst_block == 16) &&
                     !implicit_fits(call))) &&
         !call.hardswish && s.o % kCols == 0 && pixels <= 256 && s.n * pixels <= 1024 &&
         pixels * patch_length(s) * 4 <= (16 << 20);
}

}  // namespace

bool patch_gemm_applies(const onednn::LayoutCall& call) {
  const onednn::ConvShape& s = call.shape;
  const int src_block = call.src_block, dst_block = call.dst_block;
  if (call.kind != onednn::ConvPass::Forward || call.hardsigmoid || (call.swish && !gemm::swish_in_epilogue) ||
      s.groups != 1 || s.oh < 1 || s.ow < 1)
    return false;
  const bool blocks = (src_block == 8 || src_block == 16) && (dst_block == 8 || dst_block == 16);
  if (blocks && pointwise(s)) return s.c % src_block == 0 && s.o % dst_block == 0;
  if (src_block == 0)  // (o a multiple of 8 only where the blocks are 8)
    return (s.o % kCols == 0 || (dst_block == 8 && s.o % 8 == 0)) && (dst_block == 8 || dst_block == 16) && s.c <= 4 &&
           patch_length(s) <= 256;
  if (!blocks || s.c % src_block != 0 || s.o % dst_block != 0) return false;
  return gathered(call) || implicit_fits(call);
}

bool patch_gemm_splits_rows(const onednn::LayoutCall& call) {
  if (call.src_block == 0) return true;  // chunks of pixels
  if (!pointwise(call.shape) && gathered(call)) return false;  // panels
  return !pixels_fastest(call.shape.o);  // (pair, tile) items, panels fastest
}

int64_t patch_gemm_weights_size(const onednn::ConvShape& s) {
  return (s.o + kCols - 1) / kCols * kCols * patch_length(s);
}

void patch_gemm_weights(const onednn::ConvShape& s, int src_block, const float* w, float* packed) {
  const int64_t length = patch_length(s), taps = s.kh * s.kw;
  for (int64_t panel = 0; panel < (s.o + kCols - 1) / kCols; ++panel)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t k = src_block == 0 ? c * taps + t : ((c / src_block) * taps + t) * src_block + c % src_block;
        for (int64_t j = 0; j < kCols; ++j) {
          const int64_t o = panel * kCols + j;
          packed[(panel * length + k) * kCols + j] = o < s.o ? w[(o * s.c + c) * taps + t] : 0.0f;
        }
      }
}

void pointwise_patch_gemm_run(const onednn::LayoutCall& call, const float* image, const float* packed,
                              const float* bias, int64_t p0, int64_t count, float* y, int64_t y_pixels, int64_t y0) {
  KILN_CHECK(pointwise(call.shape) && (call.src_block == 8 || call.src_block == 16),
             "pointwise_patch_gemm_run: not a 1x1 convolution from blocked input");
  if (call.src_block == 8) return pointwise_run<8>(call, image, packed, bias, p0, count, y, y_pixels, y0);
  pointwise_run<16>(call, image, packed, bias, p0, count, y, y_pixels, y0);
}

bool patch_gemm_scales_input(const onednn::LayoutCall& call) {
  const onednn::ConvShape& s = call.shape;
  return (call.src_block == 8 || call.src_block == 16) && pointwise(s) &&
         (s.o + kCols - 1) / kCols * kCols < s.h * s.w;
}

void patch_gemm_conv(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias, float* y,
                     const float* channel_scale, int64_t scale_stride) {
  const onednn::ConvShape& s = call.shape;
  const bool relu = call.relu, residual = call.residual;
  KILN_CHECK(!channel_scale || (pointwise(s) && call.src_block != 0),
             "a channel scale goes with a 1x1 convolution only");
  if (call.src_block == 8 && pointwise(s))
    return pointwise_patch_gemm_conv<8>(call, x, packed, bias, y, channel_scale, scale_stride);
  if (call.src_block == 16 && pointwise(s))
    return pointwise_patch_gemm_conv<16>(call, x, packed, bias, y, channel_scale, scale_stride);
  if (call.src_block == 0 && s.sw == 1) return plain_patch_gemm_conv<1>(call, x, packed, bias, y);
  if (call.src_block == 0 && s.sw == 2) return plain_patch_gemm_conv<2>(call, x, packed, bias, y);
  if (call.src_block == 0) return plain_patch_gemm_conv<0>(call, x, packed, bias, y);
  if (!gathered(call)) {
    if (call.src_block == 8)
      return s.sw == 1 ? spatial_patch_gemm_conv<8, 1>(call, x, packed, bias, y)
                       : spatial_patch_gemm_conv<8, 2>(call, x, packed, bias, y);
    return s.sw == 1 ? spatial_patch_gemm_conv<16, 1>(call, x, packed, bias, y)
                     : spatial_patch_gemm_conv<16, 2>(call, x, packed, bias, y);
  }
  const int64_t length = patch_length(s), pixels = s.oh * s.ow, panels = s.o / kCols;
  // Patch values per pass: a panel's slice stays in L2.
  static const int64_t pass_depth = patch_pass_depth(cpu_caches());
  Tensor scratch = Tensor::empty({pixels * length});  // from Kiln's caching allocator
  float* patches = scratch.data<float>();
  for (int64_t img = 0; img < s.n; ++img) {
    if (call.src_block == 16)
      gather_patches<16>(s, x, img, patches);
    else
      gather_patches<8>(s, x, img, patches);
    float* out = y + img * s.o * pixels;
    // Threads take pairs of panels: each reads its weights once and the
    // patches (in L2) once per pass, two panels at a time (24 accumulators:
    // half the loads of A per FMA that one panel's tile takes).
    parallel_for((panels + 1) / 2, 1, [&](int64_t first, int64_t last) {
      for (int64_t j = 2 * first; j < std::min(panels, 2 * last); j += 2) {
        for (int64_t k0 = 0; k0 < length; k0 += pass_depth) {
          const int64_t depth = std::min(pass_depth, length - k0);
          const auto epilogue = [&](int64_t panel) {
            return gemm::Epilogue{bias ? bias + panel * kCols : nullptr,
                                  k0 > 0 || residual,
                                  k0 + depth >= length,
                                  relu,
                                  false,
                                  call.cap,
                                  call.swish};
          };
          const float* b = packed + (j * length + k0) * kCols;
          for (int64_t r = 0; r < pixels; r += kRows) {
            const int64_t rows = std::min(kRows, pixels - r);
            if (j + 1 == panels)
              gemm::tile_rows(rows, patches + r * length + k0, length, b, depth,
                              panel_output(out, call.dst_block, pixels, j, r), epilogue(j));
            else
              gemm::tile2_rows(rows, patches + r * length + k0, length, b, b + length * kCols, depth,
                               panel_output(out, call.dst_block, pixels, j, r),
                               panel_output(out, call.dst_block, pixels, j + 1, r), epilogue(j), epilogue(j + 1));
          }
        }
      }
    });
  }
}

}  // namespace kiln::cpu
