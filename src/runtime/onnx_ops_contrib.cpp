// The com.microsoft ops that ONNX Runtime's transformer optimizer writes
// into BERT, GPT-2 and ViT models (its SimplifiedLayerNormalization, in the
// default domain, is read with RMSNormalization), as compositions of Kiln ops:
// Gelu, BiasGelu, FastGelu, QuickGelu, SkipLayerNormalization,
// SkipSimplifiedLayerNormalization, EmbedLayerNormalization, Attention (and
// QAttention, quantize_dynamic's form of it) and MultiHeadAttention.
// Semantics follow ONNX Runtime's CPU kernels, which the fixtures in
// tests/fixtures/onnx/contrib were made with; masks are added to the scores
// as mask_filter_value, as ONNX Runtime does, not as -inf.
#include <cmath>

#include "kiln/functional.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

// ONNX Runtime's default epsilon for its fused normalizations.
constexpr double kContribEpsilon = 1e-12;

Tensor optional_input(const std::vector<Tensor>& in, size_t i) { return OnnxReader::optional(in, i); }

std::vector<Tensor> gelu_erf(const OnnxNode& n, const std::vector<Tensor>& in) { return {gelu(input(n, in, 0))}; }

std::vector<Tensor> bias_gelu(const OnnxNode& n, const std::vector<Tensor>& in) {
  return {gelu(input(n, in, 0) + input(n, in, 1))};
}

// The tanh form, with an optional bias added first.
std::vector<Tensor> fast_gelu(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor x = input(n, in, 0);
  if (const Tensor bias = optional_input(in, 1); bias.defined()) x = x + bias;
  return {gelu(x, true)};
}

// x * sigmoid(alpha * x).
std::vector<Tensor> quick_gelu(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  return {x * sigmoid(x * scalar_like(n.f("alpha", 1.702), x))};
}

// input + skip (+ bias), normalized over the last axis: outputs (output,
// mean, inv_std_var, input_skip_bias_sum); the simplified (RMS) form has no mean.
std::vector<Tensor> skip_normalization(const OnnxNode& n, const std::vector<Tensor>& in, bool simplified) {
  const Tensor& x = input(n, in, 0);
  const Tensor gamma = input(n, in, 2);
  const Tensor beta = simplified ? Tensor() : optional_input(in, 3), bias = optional_input(in, simplified ? 3 : 4);
  const int64_t hidden = x.shape().empty() ? 0 : x.shape().back();
  if (gamma.numel() != hidden)
    n.fail("gamma holds ", gamma.numel(), " values; the input's last axis has ", hidden, " (", shape_str(x.shape()),
           ")");
  // The bias first: after a MatMul it joins it as a linear layer's bias.
  const Tensor sum = bias.defined() ? x + bias + input(n, in, 1) : x + input(n, in, 1);
  const double eps = n.f("epsilon", kContribEpsilon);
  const Tensor g = gamma.reshape({hidden});
  std::vector<Tensor> out = {Tensor(), Tensor(), Tensor(), sum};
  if (simplified) {
    out[2] = inverse_rms(sum, {-1}, eps);
    out[0] = sum * out[2] * g;
  } else {
    out[0] = layer_norm(sum, {hidden}, g, beta.defined() ? beta.reshape({hidden}) : Tensor(), eps);
    if (n.output_wanted(1) || n.output_wanted(2)) {
      const Tensor m = mean(sum, {-1}, true), d = sum - m;
      out[1] = m;
      out[2] = rsqrt(mean(d * d, {-1}, true) + scalar_like(eps, sum));
    }
  }
  return out;
}

std::vector<Tensor> skip_layer_normalization(const OnnxNode& n, const std::vector<Tensor>& in) {
  return skip_normalization(n, in, false);
}

std::vector<Tensor> skip_simplified_layer_normalization(const OnnxNode& n, const std::vector<Tensor>& in) {
  if (n.output_wanted(1)) n.unsupported("the mean output is not supported: the simplified (RMS) form has no mean");
  return skip_normalization(n, in, true);
}

// Word, position and segment embeddings summed and layer-normalized, with
// the count of each row's mask ones (right padding's key lengths) for
// Attention: outputs (output, mask_index, embedding_sum).
std::vector<Tensor> embed_layer_normalization(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& ids = input(n, in, 0);
  if (ids.dim() != 2) n.fail("input_ids must be [batch, sequence], got ", shape_str(ids.shape()));
  const int64_t batch = ids.shape()[0], length = ids.shape()[1];
  const Tensor& words = input(n, in, 2);
  const Tensor& positions = input(n, in, 3);
  const Tensor segment_ids = optional_input(in, 1), segments = optional_input(in, 4);
  if (segment_ids.defined() != segments.defined())
    n.fail("segment_ids and segment_embedding come together; give both or neither");
  auto lookup = [](const Tensor& table, const Tensor& index) { return embedding(table, cast(index, DType::Int64)); };
  Tensor position_ids = optional_input(in, 8);
  if (!position_ids.defined()) position_ids = arange(length, DType::Int64).reshape({1, length});
  Tensor summed = lookup(words, ids) + lookup(positions, position_ids);
  if (segments.defined()) summed = summed + lookup(segments, segment_ids);
  const int64_t hidden = words.shape().back();
  const Tensor beta = optional_input(in, 6);
  const Tensor y = layer_norm(summed, {hidden}, input(n, in, 5).reshape({hidden}),
                              beta.defined() ? beta.reshape({hidden}) : Tensor(), n.f("epsilon", kContribEpsilon));
  const Tensor mask = optional_input(in, 7);
  const Tensor mask_index = mask.defined()
                                ? cast(sum(cast(ne(mask, zeros({}, mask.dtype())), DType::Int32), {1}), DType::Int32)
                                : zeros({batch}, DType::Int32);
  return {y, mask_index, summed};
}

// [B, S, N * D] to [B, N, S, D].
Tensor heads_first(const OnnxNode& n, const Tensor& t, int64_t heads, const char* what) {
  if (t.dim() != 3 || heads <= 0 || t.shape()[2] % heads)
    n.fail(what, " ", shape_str(t.shape()), " is not [batch, sequence, hidden] with hidden split into ", heads,
           " heads");
  return t.reshape({t.shape()[0], t.shape()[1], heads, t.shape()[2] / heads}).permute({0, 2, 1, 3});
}

// The additive mask ONNX Runtime makes of a mask_index / key_padding_mask
// for `queries` queries over `keys` keys (the last `queries` of them new):
// [B, 1, S or 1, T], masked positions at `filter`.
Tensor padding_bias(const OnnxNode& n, const Tensor& mask, int64_t batch, int64_t queries, int64_t keys, double filter,
                    DType dt) {
  const Tensor j = arange(keys, DType::Int64).reshape({1, keys});
  const Tensor masked = full({}, filter, dt), open = zeros({}, dt);
  const Shape& s = mask.shape();
  if (s.size() == 1 && s[0] == batch) {  // right padding: each row's key count
    const Tensor end = cast(mask, DType::Int64).reshape({batch, 1});
    return where(lt(j, end), open, masked).reshape({batch, 1, 1, keys});
  }
  if (s.size() == 1 && s[0] == 2 * batch) {  // left padding: exclusive ends, then inclusive starts
    const Tensor bounds = cast(mask, DType::Int64);
    const Tensor end = bounds.slice(0, 0, batch).reshape({batch, 1}),
                 start = bounds.slice(0, batch, 2 * batch).reshape({batch, 1});
    return where(ge(j, start), where(lt(j, end), open, masked), masked).reshape({batch, 1, 1, keys});
  }
  auto raw = [&](const Tensor& m) { return where(ne(m, zeros({}, m.dtype())), open, masked); };
  if (s.size() == 2 && s[0] == batch && s[1] == keys) return raw(mask).reshape({batch, 1, 1, keys});
  if (s.size() == 3 && s[0] == batch && s[1] == queries && s[2] == keys) return raw(mask).unsqueeze(1);
  if (s.size() == 4 && s[0] == batch && s[1] == 1 && s[2] >= keys && s[3] >= keys)  // [B, 1, max, max]
    return raw(mask.slice(2, keys - queries, keys).slice(3, 0, keys));
  n.unsupported("a mask of shape ", shape_str(s), " for batch ", batch, ", ", queries, " queries and ", keys,
                " keys is not supported (supported: [B] key lengths, [2B] ends and starts, [B, keys], "
                "[B, queries, keys], [B, 1, max, max])");
}

// Queries see keys up to their own position, the cache's keys before them.
Tensor causal_bias(int64_t queries, int64_t keys, double filter, DType dt) {
  const Tensor i = arange(queries, DType::Int64).reshape({queries, 1}),
               j = arange(keys, DType::Int64).reshape({1, keys});
  const Tensor past = scalar_tensor(static_cast<double>(keys - queries), DType::Int64);
  return where(gt(j, i + past), full({}, filter, dt), zeros({}, dt));
}

// softmax(q k^T scale + bias) v over heads-first q, k, v, back to [B, S, N * Dv].
Tensor attend(const OnnxNode& n, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias) {
  const double scale = n.has("scale") && n.f("scale", 0.0) != 0.0 ? n.f("scale", 0.0)
                                                                  : 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
  const Tensor y = scaled_dot_product_attention(q, k, v, bias, false, scale);
  return y.permute({0, 2, 1, 3}).reshape({q.shape()[0], q.shape()[2], -1}).contiguous();
}

// The mask, causal masking and attention_bias added into one bias.
Tensor scores_bias(const OnnxNode& n, const Tensor& mask, const Tensor& attention_bias, bool causal, int64_t batch,
                   int64_t queries, int64_t keys, DType dt) {
  const double filter = n.f("mask_filter_value", -10000.0);
  Tensor bias;
  auto add = [&](const Tensor& t) { bias = bias.defined() ? bias + t : t; };
  if (mask.defined()) add(padding_bias(n, mask, batch, queries, keys, filter, dt));
  if (causal) add(causal_bias(queries, keys, filter, dt));
  if (attention_bias.defined()) add(attention_bias);
  return bias;
}

// Attention of the projected Q, K and V side by side in qkv [B, S, Dq + Dk + Dv]
// (sizes), with an optional key/value cache `past` [2, B, N, P, D] and
// `present` out: Attention's and QAttention's second half.
std::vector<Tensor> attention_of_qkv(const OnnxNode& n, const Tensor& qkv, const std::vector<int64_t>& sizes,
                                     const Tensor& mask, const Tensor& past, const Tensor& attention_bias) {
  if (n.i("do_rotary", 0)) n.unsupported("do_rotary=1 (rotary embeddings inside Attention) is not supported");
  if (n.i("past_present_share_buffer", 0)) n.unsupported("past_present_share_buffer=1 is not supported");
  const int64_t heads = n.required_i("num_heads"), batch = qkv.shape()[0], length = qkv.shape()[1];
  Tensor q = heads_first(n, qkv.slice(2, 0, sizes[0]), heads, "Q");
  Tensor k = heads_first(n, qkv.slice(2, sizes[0], sizes[0] + sizes[1]), heads, "K");
  Tensor v = heads_first(n, qkv.slice(2, sizes[0] + sizes[1], qkv.shape()[2]), heads, "V");
  if (past.defined()) {
    if (past.dim() != 5 || past.shape()[0] != 2)
      n.fail("past must be [2, batch, heads, past length, head size], got ", shape_str(past.shape()));
    k = concat({past.select(0, 0), k}, 2);
    v = concat({past.select(0, 1), v}, 2);
  }
  const Tensor bias =
      scores_bias(n, mask, attention_bias, n.i("unidirectional", 0) != 0, batch, length, k.shape()[2], qkv.dtype());
  std::vector<Tensor> out = {attend(n, q, k, v, bias)};
  if (n.output_wanted(1)) out.push_back(stack({k, v}, 0));
  return out;
}

// Q, K and V's sizes among the weights' `columns`: qkv_hidden_sizes, or thirds.
std::vector<int64_t> qkv_sizes(const OnnxNode& n, int64_t columns) {
  std::vector<int64_t> sizes = n.ints("qkv_hidden_sizes");
  if (sizes.empty()) {
    if (columns % 3) n.fail("weights' ", columns, " columns do not split into equal Q, K and V");
    sizes = {columns / 3, columns / 3, columns / 3};
  }
  if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[0] + sizes[1] + sizes[2] != columns)
    n.fail("qkv_hidden_sizes must be three sizes, Q's equal to K's, summing to the weights' ", columns, " columns");
  return sizes;
}

void check_projection(const OnnxNode& n, const Tensor& x, const Tensor& w) {
  if (x.dim() != 3 || w.dim() != 2 || w.shape()[0] != x.shape()[2])
    n.fail("input must be [batch, sequence, in] and weights [in, Dq + Dk + Dv], got ", shape_str(x.shape()), " and ",
           shape_str(w.shape()));
}

// Self-attention with the Q, K and V projections in one weight [in, Dq + Dk + Dv]
// (qkv_hidden_sizes when they differ), as BERT and GPT-2 are fused: (input,
// weights, bias, mask_index, past, attention_bias).
std::vector<Tensor> fused_attention(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &x = input(n, in, 0), &w = input(n, in, 1);
  check_projection(n, x, w);
  Tensor qkv = matmul(x, w);
  if (const Tensor bias = optional_input(in, 2); bias.defined()) qkv = qkv + bias;
  return attention_of_qkv(n, qkv, qkv_sizes(n, w.shape()[1]), optional_input(in, 3), optional_input(in, 4),
                          optional_input(in, 5));
}

// The same with the input quantized (per run, by a DynamicQuantizeLinear
// before it) and int8 weights, as quantize_dynamic leaves an optimized
// BERT: (input, weight, bias, input_scale, weight_scale, mask_index,
// input_zero_point, weight_zero_point, past); the projection is a
// MatMulIntegerToFloat (the int8 kernels).
std::vector<Tensor> quantized_attention(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &x = input(n, in, 0), &w = input(n, in, 1);
  check_projection(n, x, w);
  const Tensor qkv = converters().at("com.microsoft::MatMulIntegerToFloat")(
      n, {x, w, input(n, in, 3), input(n, in, 4), optional_input(in, 6), optional_input(in, 7), input(n, in, 2)})[0];
  return attention_of_qkv(n, qkv, qkv_sizes(n, w.shape()[1]), optional_input(in, 5), optional_input(in, 8), Tensor());
}

// Attention over projected Q, K and V (3-d, their biases in one `bias`
// [Dq + Dk + Dv]), with key_padding_mask, attention_bias and a key/value
// cache: outputs (output, present_key, present_value).
std::vector<Tensor> multi_head_attention(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& query = input(n, in, 0);
  const Tensor key = optional_input(in, 1), value = optional_input(in, 2);
  if (!key.defined() || !value.defined() || query.dim() != 3 || key.dim() != 3 || value.dim() != 3)
    n.unsupported(
        "only query, key and value each [batch, sequence, hidden] are supported (not packed QKV or KV, "
        "nor heads-first keys), got query ",
        shape_str(query.shape()));
  if (optional_input(in, 8).defined()) n.unsupported("cache_indirection (beam search) is not supported");
  const int64_t heads = n.required_i("num_heads"), batch = query.shape()[0], length = query.shape()[1];
  Tensor q = query, k = key, v = value;
  if (const Tensor bias = optional_input(in, 3); bias.defined()) {
    const int64_t dq = q.shape()[2], dk = k.shape()[2];
    if (bias.numel() != dq + dk + v.shape()[2])
      n.fail("bias holds ", bias.numel(), " values; Q, K and V need ", dq + dk + v.shape()[2]);
    q = q + bias.slice(0, 0, dq);
    k = k + bias.slice(0, dq, dq + dk);
    v = v + bias.slice(0, dq + dk, bias.numel());
  }
  q = heads_first(n, q, heads, "query");
  k = heads_first(n, k, heads, "key");
  v = heads_first(n, v, heads, "value");
  const Tensor past_key = optional_input(in, 6), past_value = optional_input(in, 7);
  if (past_key.defined() != past_value.defined()) n.fail("past_key and past_value come together");
  if (past_key.defined()) {
    k = concat({past_key, k}, 2);
    v = concat({past_value, v}, 2);
  }
  const Tensor bias = scores_bias(n, optional_input(in, 4), optional_input(in, 5), n.i("unidirectional", 0) != 0, batch,
                                  length, k.shape()[2], query.dtype());
  return {attend(n, q, k, v, bias), k, v};
}

}  // namespace

void add_contrib_converters(ConverterTable& t) {
  t["com.microsoft::Gelu"] = gelu_erf;
  t["com.microsoft::BiasGelu"] = bias_gelu;
  t["com.microsoft::FastGelu"] = fast_gelu;
  t["com.microsoft::QuickGelu"] = quick_gelu;
  t["com.microsoft::SkipLayerNormalization"] = skip_layer_normalization;
  t["com.microsoft::SkipSimplifiedLayerNormalization"] = skip_simplified_layer_normalization;
  t["com.microsoft::EmbedLayerNormalization"] = embed_layer_normalization;
  t["com.microsoft::Attention"] = fused_attention;
  t["com.microsoft::QAttention"] = quantized_attention;
  t["com.microsoft::MultiHeadAttention"] = multi_head_attention;
}

}  // namespace kiln::runtime
