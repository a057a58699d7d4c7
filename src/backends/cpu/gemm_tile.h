#pragma once
// The register tile of Kiln's own float32 GEMMs (the patch-GEMM convolution,
// linear layers on packed weights): up to 6 rows of A times one 16-column
// panel of packed B, 12 vector accumulators, with the epilogue (accumulate,
// bias, ReLU) applied as the tile is stored. B panels hold, for each k, the
// 16 values of that row of B side by side.
#include <cstdint>

#include "backends/cpu/vec8.h"

namespace kiln::cpu::gemm {

constexpr int64_t kCols = 16;  // columns per panel: two vectors of 8
constexpr int64_t kRows = 6;   // rows per register tile

struct Epilogue {
  const float* bias;  // the panel's 16, or null
  bool accumulate;    // add what the output holds (a residual, or earlier passes over k)
  bool last;          // the last pass over k: bias and ReLU
  bool relu;
};

// Where the tile goes: row r's first 8 columns at c + r * row_stride, its
// last 8 at that + half_offset (8 for row-major output; a channel block's
// size for channel-blocked output).
struct Output {
  float* c;
  int64_t row_stride, half_offset;
};

template <int R>
void tile(const float* a, int64_t lda, const float* b, int64_t depth, const Output& o, const Epilogue& e) {
  using vec8::vf;
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
    float *p0 = o.c + r * o.row_stride, *p1 = p0 + o.half_offset;
    vf v0 = lo[r], v1 = hi[r];
    if (e.accumulate) v0 += vec8::load(p0), v1 += vec8::load(p1);
    if (e.last) {
      if (e.bias) v0 += vec8::load(e.bias), v1 += vec8::load(e.bias + 8);
      if (e.relu) v0 = vec8::relu(v0), v1 = vec8::relu(v1);
    }
    vec8::store(p0, v0);
    vec8::store(p1, v1);
  }
}

// The same for 1 to 6 rows.
inline void tile_rows(int64_t rows, const float* a, int64_t lda, const float* b, int64_t depth, const Output& o,
                      const Epilogue& e) {
  switch (rows) {
    case 6: return tile<6>(a, lda, b, depth, o, e);
    case 5: return tile<5>(a, lda, b, depth, o, e);
    case 4: return tile<4>(a, lda, b, depth, o, e);
    case 3: return tile<3>(a, lda, b, depth, o, e);
    case 2: return tile<2>(a, lda, b, depth, o, e);
    default: return tile<1>(a, lda, b, depth, o, e);
  }
}

}  // namespace kiln::cpu::gemm
