#pragma once
// Multi-head attention and the Transformer encoder layer (batch first: [N, L, E]).
#include "kiln/nn.h"
#include "kiln/nn/layers.h"

namespace kiln::nn {

struct AttentionMasks {
  Tensor attn_mask;         // bool [L, S] (true = may not attend) or float [L, S] added to the scores
  Tensor key_padding_mask;  // bool [N, S], true = padding
  bool causal = false;      // position i attends to positions <= i
};

class MultiheadAttention : public Cell {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, bool bias = true);
  // Self-attention without masks.
  Tensor construct(const Tensor& x) override { return forward(x, x, x); }
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionMasks& masks = {});
  std::string type_name() const override { return "MultiheadAttention"; }
  // Packed Q, K, V projections [3E, E] and [3E], as PyTorch's in_proj.
  Tensor in_proj_weight, in_proj_bias;
  std::shared_ptr<Dense> out_proj;

 private:
  int64_t embed_dim_, heads_;
};

struct TransformerEncoderOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  bool gelu = false;        // activation of the feed-forward block (ReLU otherwise)
  bool norm_first = false;  // pre-norm; post-norm (the original Transformer) otherwise
  double layer_norm_eps = 1e-5;
};

class TransformerEncoderLayer : public Cell {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderOptions o = {});
  Tensor construct(const Tensor& x) override { return forward(x); }
  Tensor forward(const Tensor& x, const AttentionMasks& masks = {});
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Dense> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  Tensor feed_forward(const Tensor& x);
  TransformerEncoderOptions o_;
};

}  // namespace kiln::nn
