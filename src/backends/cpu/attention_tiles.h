#pragma once
// The CPU attention kernel's work (attention_kernels.cpp) on Kiln's
// register tiles (gemm_tile.h) rather than oneDNN's GEMM: for float32 with
// the value width a whole number of tile panels. At heads of
// 32 (a BERT-style encoder's 8 x 128 x 32) oneDNN's GEMM spent more on its
// calls and packing than on the products.
#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::cpu {

// The value width must be a multiple of this.
constexpr int64_t kAttentionTileCols = 16;

// A (batch, head)'s keys and values.
struct AttentionHead {
  const float *k, *v;  // the first rows
  int64_t k_stride, v_stride, s, d, dv;
};
// Its keys (transposed: 16 keys side by side per dimension) and values
// packed into the tiles' panels, once for all the work items of the head.
void pack_attention_head(const AttentionHead& h, std::vector<float>& panels);

// A block of query rows of the head.
struct AttentionTile {
  const float* q;                 // the block's first row
  int64_t q_stride, rows, reach;  // reach: the keys any of the rows sees
  float scale;
  // Where the scores (then the weights) go, rows `weights_stride` apart
  // (at least the keys rounded up to 16), or null for the scratch.
  float* weights = nullptr;
  int64_t weights_stride = 0;
};

// y (rows of y_stride) = softmax(scale q k^T) v over the first `reach`
// keys, from the head's panels, the query rows scaled as they are copied.
// softmax(scores, ld) turns each of the block's score rows into weights in
// place, zero from `reach` on (or as far as the caller keeps them).
// scratch: grown as needed, kept by the caller between items.
void attention_by_tiles(const AttentionHead& h, const std::vector<float>& panels, const AttentionTile& t,
                        std::vector<float>& scratch, const std::function<void(float*, int64_t)>& softmax, float* y,
                        int64_t y_stride);

}  // namespace kiln::cpu

namespace kiln::cpu {

// One (batch, head) of the attention gradient, for float32 with both head
// widths whole numbers of tile panels: with dp = g v^T and ds = p (dp -
// rowsum(dp p)) scale, gq = ds k, gk = ds^T q and gv = p^T g, each on the
// register tiles, the operands packed into panels once. p: the weights
// kept by the forward, [l, s], zero where a query does not see a key.
struct AttentionGradTile {
  const float *g, *q, *k, *v, *p;                  // the head's first rows
  int64_t g_stride, q_stride, k_stride, v_stride;  // (p's rows are s apart)
  int64_t l, s, d, dv;
  float scale;
  bool causal;  // query i sees keys up to i only (and the weights say so)
};
// gq [l, d], gk [s, d], gv [s, dv], rows contiguous. scratch: grown as
// needed, kept by the caller between heads.
void attention_backward_by_tiles(const AttentionGradTile& t, std::vector<float>& scratch, float* gq, float* gk,
                                 float* gv);

}  // namespace kiln::cpu
