#include "kiln/nn/attention.h"

#include <cmath>
#include <limits>

namespace kiln::nn {

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, bool bias)
    : embed_dim_(embed_dim), heads_(num_heads) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0, "MultiheadAttention: embed_dim (",
             embed_dim, ") must be a positive multiple of num_heads (", num_heads, ")");
  Tensor w = Tensor::empty({3 * embed_dim, embed_dim});
  init::xavier_uniform(w);
  in_proj_weight = register_parameter("in_proj_weight", w);
  if (bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  out_proj = register_cell("out_proj", std::make_shared<Dense>(embed_dim, embed_dim, bias));
  if (bias) init::zeros(out_proj->bias);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks) {
  KILN_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3 && query.size(-1) == embed_dim_ &&
                 key.size(-1) == embed_dim_ && value.size(-1) == embed_dim_ && key.size(0) == query.size(0) &&
                 key.shape() == value.shape(),
             "MultiheadAttention expects query [N, L, ", embed_dim_, "] and key/value [N, S, ", embed_dim_,
             "], got ", query.meta_str(), ", ", key.meta_str(), ", ", value.meta_str());
  const int64_t n = query.size(0), l = query.size(1), s = key.size(1), e = embed_dim_, d = e / heads_;
  Tensor q, k, v;
  if (query.same(key) && key.same(value)) {
    auto qkv = split(linear(query, in_proj_weight, in_proj_bias), {e, e, e}, -1);  // one GEMM
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    auto part = [&](const Tensor& x, int64_t i) {
      Tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, i * e, (i + 1) * e) : Tensor();
      return linear(x, in_proj_weight.slice(0, i * e, (i + 1) * e), b);
    };
    q = part(query, 0), k = part(key, 1), v = part(value, 2);
  }
  auto heads = [&](const Tensor& x, int64_t len) { return x.reshape({n, len, heads_, d}).permute({0, 2, 1, 3}); };
  // The masks as one additive mask over [N, 1, L, S] (or [L, S]); causal is the op's own.
  const DType dt = query.dtype();
  const Tensor minus_inf = scalar_tensor(-std::numeric_limits<double>::infinity(), dt), zero = zeros({}, dt);
  Tensor mask;
  if (masks.attn_mask.defined()) {
    KILN_CHECK(masks.attn_mask.shape() == Shape({l, s}), "attn_mask must be [", l, ", ", s, "], got ",
               masks.attn_mask.meta_str());
    mask = masks.attn_mask.dtype() == DType::Bool ? where(masks.attn_mask, minus_inf, zero) : masks.attn_mask;
  }
  if (masks.key_padding_mask.defined()) {
    KILN_CHECK(masks.key_padding_mask.shape() == Shape({n, s}) && masks.key_padding_mask.dtype() == DType::Bool,
               "key_padding_mask must be bool [", n, ", ", s, "], got ", masks.key_padding_mask.meta_str());
    const Tensor padding = where(masks.key_padding_mask.reshape({n, 1, 1, s}), minus_inf, zero);
    mask = mask.defined() ? mask + padding : padding;
  }
  Tensor out = scaled_dot_product_attention(heads(q, l), heads(k, s), heads(v, s), mask, masks.causal);  // [N, H, L, D]
  return out_proj->construct(out.permute({0, 2, 1, 3}).reshape({n, l, e}));
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderOptions o) : o_(o) {
  self_attn = register_cell("self_attn", std::make_shared<MultiheadAttention>(d_model, nhead));
  linear1 = register_cell("linear1", std::make_shared<Dense>(d_model, o.dim_feedforward));
  linear2 = register_cell("linear2", std::make_shared<Dense>(o.dim_feedforward, d_model));
  norm1 = register_cell("norm1", std::make_shared<LayerNorm>(Shape{d_model}, o.layer_norm_eps));
  norm2 = register_cell("norm2", std::make_shared<LayerNorm>(Shape{d_model}, o.layer_norm_eps));
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  Tensor h = linear1->construct(x);
  h = o_.gelu ? gelu(h) : relu(h);
  return dropout(linear2->construct(dropout(h, o_.dropout, training())), o_.dropout, training());
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const AttentionMasks& masks) {
  auto attend = [&](const Tensor& h) { return dropout(self_attn->forward(h, h, h, masks), o_.dropout, training()); };
  if (o_.norm_first) {
    Tensor h = x + attend(norm1->construct(x));
    return h + feed_forward(norm2->construct(h));
  }
  Tensor h = norm1->construct(x + attend(x));
  return norm2->construct(h + feed_forward(h));
}

}  // namespace kiln::nn
