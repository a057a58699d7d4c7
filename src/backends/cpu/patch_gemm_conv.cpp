#include "backends/cpu/patch_gemm_conv.h"

#include <algorithm>

#include "backends/cpu/gemm_tile.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu {
namespace {

using vec8::vf;
using gemm::kCols;
using gemm::kRows;
constexpr int64_t kDepth = 4096;  // patch values per pass: a panel's slice (256 KB) stays in L2

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
          const gemm::Epilogue e{bias ? bias + panel * kCols : nullptr, k0 > 0 || residual, k0 + depth >= length,
                                 relu};
          const float* b = packed + (panel * length + k0) * kCols;
          float* c = out + 2 * panel * pixels * 8;
          for (int64_t r = 0; r < pixels; r += kRows)
            gemm::tile_rows(std::min(kRows, pixels - r), patches + r * length + k0, length, b, depth,
                            {c + 8 * r, 8, pixels * 8}, e);
        }
      }
    });
  }
}

}  // namespace kiln::cpu
