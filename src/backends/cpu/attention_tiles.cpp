#include "backends/cpu/attention_tiles.h"

#include <algorithm>

#include "backends/cpu/gemm_tile.h"
#include "backends/cpu/softmax_row.h"
#include "backends/cpu/transpose16.h"

namespace kiln::cpu {

static_assert(kAttentionTileCols == gemm::kCols, "the value width is checked against the tiles' panel width");

namespace {

// Up to kRows rows of C (rows of ldc) = A times B's panels (each
// [depth][16], `stride` floats apart), A read through a_at(row, k); the
// panels in pairs where they can be (two loads of B per k for twice the
// multiply-adds).
template <typename AAt>
void tile_rows(int64_t n, const AAt& a_at, const float* b, int64_t stride, int64_t panels, int64_t depth, float* c,
               int64_t ldc) {
  using gemm::kCols;
  const gemm::Epilogue store{nullptr, false, true, false};
  int64_t p = 0;
  for (; p + 1 < panels; p += 2)
    gemm::tile2_rows_of(n, a_at, b + p * stride, b + (p + 1) * stride, depth, {c + p * kCols, ldc, 8},
                        {c + (p + 1) * kCols, ldc, 8}, store, store);
  if (p < panels) gemm::tile_rows_of(n, a_at, b + p * stride, depth, {c + p * kCols, ldc, 8}, store);
}

// C (rows of ldc) = A (rows of lda) times B's panels (stride: depth * 16
// unless the panels are deeper).
void product(int64_t rows, const float* a, int64_t lda, const float* b, int64_t panels, int64_t depth, float* c,
             int64_t ldc, int64_t stride = 0) {
  for (int64_t i = 0; i < rows; i += gemm::kRows) {
    const float* ai = a + i * lda;
    tile_rows(
        std::min(gemm::kRows, rows - i), [ai, lda](int r, int64_t k) { return ai[r * lda + k]; }, b,
        stride ? stride : depth * gemm::kCols, panels, depth, c + i * ldc, ldc);
  }
}

// Panels of 16 columns of a [rows, cols] matrix (cols a multiple of 16):
// [cols / 16, rows, 16].
void pack_columns(const float* x, int64_t stride, int64_t rows, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols / gemm::kCols; ++c)
    for (int64_t j = 0; j < rows; ++j)
      std::copy_n(x + j * stride + c * gemm::kCols, gemm::kCols, out + (c * rows + j) * gemm::kCols);
}

// Panels of 16 rows of a [rows, cols] matrix, transposed: [rows / 16
// rounded up, cols, 16], zero past the last row. Whole panels 16 columns at
// a time in registers where the machine has AVX-512 (a decoded token's
// attention spent half its time here one float at a time); the rest each
// row read once, in order.
void pack_rows_transposed(const float* x, int64_t stride, int64_t rows, int64_t cols, float* out) {
  using gemm::kCols;
  const int64_t panels = (rows + kCols - 1) / kCols;
  for (int64_t p = 0; p < panels; ++p) {
    float* panel = out + p * cols * kCols;
#if defined(__AVX512F__)
    if (p * kCols + kCols <= rows && cols % kCols == 0) {
      for (int64_t c = 0; c < cols; c += kCols) transpose16(x + p * kCols * stride + c, stride, panel + c * kCols);
      continue;
    }
#endif
    for (int64_t j = 0; j < kCols; ++j) {
      const int64_t row = p * kCols + j;
      if (row >= rows) {
        for (int64_t kk = 0; kk < cols; ++kk) panel[kk * kCols + j] = 0.0f;
        continue;
      }
      const float* from = x + row * stride;
      for (int64_t kk = 0; kk < cols; ++kk) panel[kk * kCols + j] = from[kk];
    }
  }
}

}  // namespace

void attention_backward_by_tiles(const AttentionGradTile& t, std::vector<float>& scratch, float* gq, float* gk,
                                 float* gv) {
  using gemm::kCols;
  const int64_t key_panels = (t.s + kCols - 1) / kCols, ld = key_panels * kCols;
  const size_t need = static_cast<size_t>(t.l * ld + ld * t.dv + t.s * t.d + t.l * t.d + t.l * t.dv);
  if (scratch.size() < need) scratch.resize(need);
  float* ds = scratch.data();          // [l, ld]: dp, then ds
  float* values_t = ds + t.l * ld;     // v^T in panels of 16 keys: [key_panels, dv, 16]
  float* keys = values_t + ld * t.dv;  // k in panels of 16 columns: [d / 16, s, 16]
  float* queries = keys + t.s * t.d;   // q likewise: [d / 16, l, 16]
  float* grads = queries + t.l * t.d;  // g likewise: [dv / 16, l, 16]
  pack_rows_transposed(t.v, t.v_stride, t.s, t.dv, values_t);
  pack_columns(t.k, t.k_stride, t.s, t.d, keys);
  pack_columns(t.q, t.q_stride, t.l, t.d, queries);
  pack_columns(t.g, t.g_stride, t.l, t.dv, grads);
  // Causal: query i sees keys up to i (its weights are zero past them), so
  // a block of rows stops at its last row's keys, and a block of keys
  // starts at its first key's query.
  const auto keys_seen = [&](int64_t end_row) { return t.causal ? std::min(t.s, end_row) : t.s; };
  for (int64_t i = 0; i < t.l; i += gemm::kRows) {
    const int64_t n = std::min(gemm::kRows, t.l - i), cols = keys_seen(i + n);
    const float* gi = t.g + i * t.g_stride;
    tile_rows(
        n, [gi, &t](int r, int64_t k) { return gi[r * t.g_stride + k]; }, values_t, t.dv * kCols,
        (cols + kCols - 1) / kCols, t.dv, ds + i * ld, ld);  // dp = g v^T
    for (int64_t r = i; r < i + n; ++r) {  // ds = p (dp - rowsum(dp p)) scale, zero past the keys seen
      softmax_gradient_row(ds + r * ld, t.p + r * t.s, cols, t.scale);
      std::fill(ds + r * ld + cols, ds + r * ld + t.s, 0.0f);
    }
    const float* dsi = ds + i * ld;
    tile_rows(
        n, [dsi, ld](int r, int64_t k) { return dsi[r * ld + k]; }, keys, t.s * kCols, t.d / kCols, cols, gq + i * t.d,
        t.d);  // gq = ds k
  }
  for (int64_t j = 0; j < t.s; j += gemm::kRows) {
    const int64_t n = std::min(gemm::kRows, t.s - j), first = t.causal ? std::min(j, t.l) : 0, depth = t.l - first;
    const float *dsj = ds + first * ld + j, *pj = t.p + first * t.s + j;
    tile_rows(
        n, [dsj, ld](int r, int64_t k) { return dsj[k * ld + r]; }, queries + first * kCols, t.l * kCols, t.d / kCols,
        depth, gk + j * t.d, t.d);  // gk = ds^T q
    tile_rows(
        n, [pj, &t](int r, int64_t k) { return pj[k * t.s + r]; }, grads + first * kCols, t.l * kCols, t.dv / kCols,
        depth, gv + j * t.dv, t.dv);  // gv = p^T g
  }
}

void pack_attention_head(const AttentionHead& h, std::vector<float>& panels) {
  using gemm::kCols;
  const int64_t key_panels = (h.s + kCols - 1) / kCols;
  panels.resize(static_cast<size_t>(key_panels * kCols * h.d + h.s * h.dv));
  pack_rows_transposed(h.k, h.k_stride, h.s, h.d, panels.data());                      // [key panels, d, 16]
  pack_columns(h.v, h.v_stride, h.s, h.dv, panels.data() + key_panels * kCols * h.d);  // [dv / 16, s, 16]
}

void attention_by_tiles(const AttentionHead& h, const std::vector<float>& panels, const AttentionTile& t,
                        std::vector<float>& scratch, const std::function<void(float*, int64_t)>& softmax, float* y,
                        int64_t y_stride) {
  using gemm::kCols;
  const int64_t seen_panels = (t.reach + kCols - 1) / kCols, key_panels = (h.s + kCols - 1) / kCols;
  const int64_t ld = t.weights ? t.weights_stride : seen_panels * kCols, own = t.weights ? 0 : t.rows * ld;
  const size_t need = static_cast<size_t>(own + t.rows * h.d);
  if (scratch.size() < need) scratch.resize(need);
  float* scores = t.weights ? t.weights : scratch.data();  // [rows, ld]
  float* queries = scratch.data() + own;                   // [rows, d], scaled
  const float* keys = panels.data();
  const float* values = keys + key_panels * kCols * h.d;
  for (int64_t i = 0; i < t.rows; ++i)
    for (int64_t kk = 0; kk < h.d; ++kk) queries[i * h.d + kk] = t.scale * t.q[i * t.q_stride + kk];
  product(t.rows, queries, h.d, keys, seen_panels, h.d, scores, ld);
  softmax(scores, ld);
  product(t.rows, scores, ld, values, h.dv / kCols, t.reach, y, y_stride, h.s * kCols);
}

}  // namespace kiln::cpu
