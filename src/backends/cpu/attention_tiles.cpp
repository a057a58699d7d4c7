#include "backends/cpu/attention_tiles.h"

#include <algorithm>

#include "backends/cpu/gemm_tile.h"

namespace kiln::cpu {

static_assert(kAttentionTileCols == gemm::kCols, "the value width is checked against the tiles' panel width");

namespace {

// C (rows of ldc) = A (rows of lda) times B's panels ([panels][depth][16]),
// panels in pairs where they can be (two loads of B per k for twice the
// multiply-adds).
void product(int64_t rows, const float* a, int64_t lda, const float* b, int64_t panels, int64_t depth, float* c,
             int64_t ldc) {
  using gemm::kCols;
  const gemm::Epilogue store{nullptr, false, true, false};
  for (int64_t i = 0; i < rows; i += gemm::kRows) {
    const int64_t n = std::min(gemm::kRows, rows - i);
    int64_t p = 0;
    for (; p + 1 < panels; p += 2)
      gemm::tile2_rows(n, a + i * lda, lda, b + p * depth * kCols, b + (p + 1) * depth * kCols, depth,
                       {c + i * ldc + p * kCols, ldc, 8}, {c + i * ldc + (p + 1) * kCols, ldc, 8}, store, store);
    if (p < panels)
      gemm::tile_rows(n, a + i * lda, lda, b + p * depth * kCols, depth, {c + i * ldc + p * kCols, ldc, 8}, store);
  }
}

}  // namespace

void attention_by_tiles(const AttentionTile& t, std::vector<float>& scratch,
                        const std::function<void(float*, int64_t)>& softmax, float* y, int64_t y_stride) {
  using gemm::kCols;
  const int64_t panels = (t.reach + kCols - 1) / kCols, value_panels = t.dv / kCols;
  const int64_t ld = t.weights ? t.weights_stride : panels * kCols, own = t.weights ? 0 : t.rows * ld;
  const size_t need = static_cast<size_t>(own + panels * kCols * t.d + t.reach * t.dv + t.rows * t.d);
  if (scratch.size() < need) scratch.resize(need);
  float* scores = t.weights ? t.weights : scratch.data();  // [rows, ld]
  float* keys = scratch.data() + own;                      // [panels, d, 16]: 16 keys side by side per dimension
  float* values = keys + panels * kCols * t.d;             // [dv / 16, reach, 16]
  float* queries = values + t.reach * t.dv;  // [rows, d], scaled
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t kk = 0; kk < t.d; ++kk)
      for (int64_t j = 0; j < kCols; ++j) {
        const int64_t key = p * kCols + j;
        keys[(p * t.d + kk) * kCols + j] = key < t.reach ? t.k[key * t.k_stride + kk] : 0.0f;
      }
  for (int64_t c = 0; c < value_panels; ++c)
    for (int64_t j = 0; j < t.reach; ++j)
      std::copy_n(t.v + j * t.v_stride + c * kCols, kCols, values + (c * t.reach + j) * kCols);
  for (int64_t i = 0; i < t.rows; ++i)
    for (int64_t kk = 0; kk < t.d; ++kk) queries[i * t.d + kk] = t.scale * t.q[i * t.q_stride + kk];
  product(t.rows, queries, t.d, keys, panels, t.d, scores, ld);
  softmax(scores, ld);
  product(t.rows, scores, ld, values, value_panels, t.reach, y, y_stride);
}

}  // namespace kiln::cpu
