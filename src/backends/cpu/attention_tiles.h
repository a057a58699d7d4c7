#pragma once
// One work item of the CPU attention kernel (attention_kernels.cpp) on
// Kiln's register tiles (gemm_tile.h) rather than oneDNN's GEMM: for
// float32 with the value width a whole number of tile panels. At heads of
// 32 (a BERT-style encoder's 8 x 128 x 32) oneDNN's GEMM spent more on its
// calls and packing than on the products.
#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::cpu {

// The value width must be a multiple of this.
constexpr int64_t kAttentionTileCols = 16;

struct AttentionTile {
  const float *q, *k, *v;  // the item's first query row, the head's first key and value rows
  int64_t q_stride, k_stride, v_stride;
  int64_t rows, reach, d, dv;  // reach: the keys any of the rows sees
  float scale;
  // Where the scores (then the weights) go, rows `weights_stride` apart
  // (at least the keys rounded up to 16), or null for the scratch.
  float* weights = nullptr;
  int64_t weights_stride = 0;
};

// y (rows of y_stride) = softmax(scale q k^T) v over the first `reach`
// keys: the keys (transposed) and the values packed into panels once, the
// query rows scaled as they are copied. softmax(scores, ld) turns each of
// the item's score rows into weights in place, zero from `reach` on (or as
// far as the caller keeps them).
// scratch: grown as needed, kept by the caller between items.
void attention_by_tiles(const AttentionTile& t, std::vector<float>& scratch,
                        const std::function<void(float*, int64_t)>& softmax, float* y, int64_t y_stride);

}  // namespace kiln::cpu
