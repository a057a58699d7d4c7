#include "backends/cpu/patch_gemm_conv.h"

#include <algorithm>

#include "backends/cpu/vec8.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu {
namespace {

using vec8::vf;
constexpr int64_t kCols = 16;  // output channels per panel: two blocks of 8
constexpr int64_t kRows = 6;   // output pixels per register tile
constexpr int64_t kDepth = 4096;  // patch values per pass: a panel's slice (256 KB) stays in L2

struct Epilogue {
  const float* bias;  // this panel's 16, or null
  bool accumulate;    // add what the output holds (a residual, or earlier passes)
  bool last;          // the last pass: bias and ReLU
  bool relu;
};

// Rows [0, R) of the output tile: pixel r's two 8-channel vectors sit at
// c + 8 r and c + block_stride + 8 r. a: R patch rows of `depth` values, lda apart.
template <int R>
void tile(const float* a, int64_t lda, const float* b, int64_t depth, float* c, int64_t block_stride,
          const Epilogue& e) {
  vf lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = vf{};
  for (int64_t k = 0; k < depth; ++k) {
    const vf b0 = vec8::load(b + k * kCols), b1 = vec8::load(b + k * kCols + 8);
    for (int r = 0; r < R; ++r) {
      const vf ar = vec8::splat(a[r * lda + k]);
      lo[r] += ar * b0;
      hi[r] += ar * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    float *p0 = c + 8 * r, *p1 = c + block_stride + 8 * r;
    vf v0 = lo[r], v1 = hi[r];
    if (e.accumulate) v0 += vec8::load(p0), v1 += vec8::load(p1);
    if (e.last) {
      if (e.bias) v0 += vec8::load(e.bias), v1 += vec8::load(e.bias + 8);
      if (e.relu) v0 = vec8::keep(v0 > vf{}, v0), v1 = vec8::keep(v1 > vf{}, v1);
    }
    vec8::store(p0, v0);
    vec8::store(p1, v1);
  }
}

void tile_of(int64_t rows, const float* a, int64_t lda, const float* b, int64_t depth, float* c, int64_t block_stride,
             const Epilogue& e) {
  switch (rows) {
    case 6: return tile<6>(a, lda, b, depth, c, block_stride, e);
    case 5: return tile<5>(a, lda, b, depth, c, block_stride, e);
    case 4: return tile<4>(a, lda, b, depth, c, block_stride, e);
    case 3: return tile<3>(a, lda, b, depth, c, block_stride, e);
    case 2: return tile<2>(a, lda, b, depth, c, block_stride, e);
    default: return tile<1>(a, lda, b, depth, c, block_stride, e);
  }
}

int64_t patch_length(const onednn::ConvShape& s) { return s.c * s.kh * s.kw; }

// The patches of image `img`, one row per output pixel, ordered (channel
// block, tap, channel) so that each tap of a block is one vector copy.
void gather_patches(const onednn::ConvShape& s, const float* x, int64_t img, float* patches) {
  const int64_t blocks = s.c / 8, taps = s.kh * s.kw, length = patch_length(s);
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
            const vf v = inside ? vec8::load(image + ((cb * s.h + iy) * s.w + ix) * 8) : vf{};
            vec8::store(row + (cb * taps + ky * s.kw + kx) * 8, v);
          }
    }
  });
}

}  // namespace

bool patch_gemm_applies(const onednn::ConvShape& s, int block) {
  // Few output pixels in all: with more, the direct kernel and Winograd are
  // already efficient, and timing this one too would only slow compiling.
  const int64_t pixels = s.oh * s.ow;
  return block == 8 && s.groups == 1 && s.c % 8 == 0 && s.o % kCols == 0 && pixels >= 1 && pixels <= 256 &&
         s.n * pixels <= 1024 && pixels * patch_length(s) * 4 <= (16 << 20);
}

int64_t patch_gemm_weights_size(const onednn::ConvShape& s) { return s.o * patch_length(s); }

void patch_gemm_weights(const onednn::ConvShape& s, const float* w, float* packed) {
  const int64_t length = patch_length(s), taps = s.kh * s.kw;
  for (int64_t panel = 0; panel < s.o / kCols; ++panel)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t t = 0; t < taps; ++t) {
        const int64_t k = ((c / 8) * taps + t) * 8 + c % 8;
        for (int64_t j = 0; j < kCols; ++j)
          packed[(panel * length + k) * kCols + j] = w[((panel * kCols + j) * s.c + c) * taps + t];
      }
}

void patch_gemm_conv(const onednn::ConvShape& s, const float* x, const float* packed, const float* bias, float* y,
                     bool relu, bool residual) {
  const int64_t length = patch_length(s), pixels = s.oh * s.ow, panels = s.o / kCols;
  Tensor scratch = Tensor::empty({pixels * length});  // from Kiln's caching allocator
  float* patches = scratch.data<float>();
  for (int64_t img = 0; img < s.n; ++img) {
    gather_patches(s, x, img, patches);
    float* out = y + img * s.o * pixels;
    // Threads take panels: each reads its weights once and the patches (in L2) once per pass.
    parallel_for(panels, 1, [&](int64_t first, int64_t last) {
      for (int64_t panel = first; panel < last; ++panel) {
        for (int64_t k0 = 0; k0 < length; k0 += kDepth) {
          const int64_t depth = std::min(kDepth, length - k0);
          const Epilogue e{bias ? bias + panel * kCols : nullptr, k0 > 0 || residual, k0 + depth >= length, relu};
          const float* b = packed + (panel * length + k0) * kCols;
          float* c = out + 2 * panel * pixels * 8;
          for (int64_t r = 0; r < pixels; r += kRows)
            tile_of(std::min(kRows, pixels - r), patches + r * length + k0, length, b, depth, c + 8 * r, pixels * 8, e);
        }
      }
    });
  }
}

}  // namespace kiln::cpu
