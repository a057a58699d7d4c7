#include "backends/cpu/packed_linear.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_caches.h"
#include "backends/cpu/gemm_tile.h"
#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

using gemm::kCols;
using gemm::kRows;
constexpr int64_t kPanelsPerItem = 4;  // 64 output columns per work item

}  // namespace

int64_t packed_linear_weights_size(int64_t out, int64_t in) { return (out + kCols - 1) / kCols * kCols * in; }

void pack_linear_weights(const float* w, int64_t out, int64_t in, float* packed) {
  for (int64_t panel = 0; panel < (out + kCols - 1) / kCols; ++panel)
    for (int64_t k = 0; k < in; ++k)
      for (int64_t j = 0; j < kCols; ++j) {
        const int64_t o = panel * kCols + j;
        packed[(panel * in + k) * kCols + j] = o < out ? w[o * in + k] : 0.0f;
      }
}

void packed_linear(const float* x, int64_t rows, int64_t in, int64_t out, const float* packed, const float* bias,
                   float* y, bool residual, bool relu, bool gelu, bool gelu_tanh) {
  const int64_t panels = (out + kCols - 1) / kCols, groups = (panels + kPanelsPerItem - 1) / kPanelsPerItem;
  // k per pass (a pair of panels' slice stays in L1) and rows per block
  // (their slice of x stays in L2), from this CPU's caches.
  static const int64_t pass_depth = linear_pass_depth(cpu_caches());
  static const int64_t max_block_rows = linear_block_rows(cpu_caches(), pass_depth);
  const int64_t blocks = std::max<int64_t>(1, (rows + max_block_rows - 1) / max_block_rows);
  const int64_t block_rows = (rows + blocks - 1) / blocks;
  // Work items are (group of panels, row block), row blocks fastest: each
  // thread takes whole groups, so it reads only its share of the weights
  // (which, at a few hundred rows, come from memory: 9 MB for a 768x3072
  // layer) and its row blocks' x stays in its L2. Taken the other way, every
  // thread read all the weights; 196x384x1536 went from 610 to 560 us.
  parallel_for(blocks * groups, 1, [&](int64_t lo, int64_t hi) {
    alignas(32) float tail[kRows * kCols];  // the last panel's tile, when out is not a multiple of 16
    alignas(32) float tail_bias[kCols];
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t r0 = item % blocks * block_rows, r1 = std::min(rows, r0 + block_rows);
      const int64_t g = item / blocks;
      // Tiles of equal height (50 rows: five of 10, not four of 12 and one
      // of 2, whose 4 accumulators leave the FMA units waiting on latency).
      const int64_t tiles = (r1 - r0 + kRows - 1) / kRows, height = (r1 - r0 + tiles - 1) / tiles;
      for (int64_t k0 = 0; k0 < in; k0 += pass_depth) {
        const int64_t depth = std::min(pass_depth, in - k0);
        const int64_t last_panel = std::min(panels, (g + 1) * kPanelsPerItem);
        for (int64_t panel = g * kPanelsPerItem; panel < last_panel; ++panel) {
          const int64_t col = panel * kCols, cols = std::min(kCols, out - col);
          if (panel + 1 < last_panel && col + 2 * kCols <= out) {  // two whole panels at once
            const float* b0 = packed + (panel * in + k0) * kCols;
            const float* b1 = b0 + in * kCols;
            const bool accumulate = k0 > 0 || residual, last = k0 + depth >= in;
            gemm::Epilogue e0{bias ? bias + col : nullptr, accumulate, last, relu};
            gemm::Epilogue e1{bias ? bias + col + kCols : nullptr, accumulate, last, relu};
            e0.gelu = e1.gelu = gelu;
            e0.gelu_tanh = e1.gelu_tanh = gelu_tanh;
            // The slice taken next (the next pair, or the first pair at the
            // next k), fetched into L2 a part per tile while this one runs:
            // else the first tile of each slice waits on memory. 49x768x3072
            // (weights from memory) went from 740 to 645 us.
            const bool more = panel + 3 < last_panel;
            const float* n0 = more ? b1 + in * kCols : packed + (g * kPanelsPerItem * in + k0 + pass_depth) * kCols;
            // (A single tile streams its slice once: there the hardware's
            // prefetcher does as well, and more requests only slowed it.)
            const int64_t next_depth = std::min(pass_depth, more ? depth : in - k0 - pass_depth);
            const int64_t ahead = tiles > 1 && (more || k0 + pass_depth < in) ? next_depth : 0;
            for (int64_t r = r0, t = 0; r < r1; r += height, ++t) {
              const int64_t from = t * ahead / tiles, to = (t + 1) * ahead / tiles;
              const gemm::Prefetch next{n0 + from * kCols, n0 + (in + from) * kCols, to - from};
              gemm::tile2_rows(std::min(height, r1 - r), x + r * in + k0, in, b0, b1, depth,
                               {y + r * out + col, out, 8}, {y + r * out + col + kCols, out, 8}, e0, e1, next);
            }
            ++panel;
            continue;
          }
          const float* b = packed + (panel * in + k0) * kCols;
          gemm::Epilogue e{bias ? bias + col : nullptr, k0 > 0 || residual, k0 + depth >= in, relu};
          e.gelu = gelu;
          e.gelu_tanh = gelu_tanh;
          if (bias && cols < kCols) {
            std::memset(tail_bias, 0, sizeof tail_bias);
            std::memcpy(tail_bias, bias + col, static_cast<size_t>(cols) * sizeof(float));
            e.bias = tail_bias;
          }
          for (int64_t r = r0; r < r1; r += height) {
            const int64_t n = std::min(height, r1 - r);
            const float* a = x + r * in + k0;
            if (cols == kCols) {
              gemm::tile_rows(n, a, in, b, depth, {y + r * out + col, out, 8}, e);
              continue;
            }
            for (int64_t i = 0; i < n && e.accumulate; ++i)
              std::memcpy(tail + i * kCols, y + (r + i) * out + col, static_cast<size_t>(cols) * sizeof(float));
            gemm::tile_rows(n, a, in, b, depth, {tail, kCols, 8}, e);
            for (int64_t i = 0; i < n; ++i)
              std::memcpy(y + (r + i) * out + col, tail + i * kCols, static_cast<size_t>(cols) * sizeof(float));
          }
        }
      }
    }
  });
}

}  // namespace kiln::cpu
