// ONNX Attention and RotaryEmbedding (opset 23 on) as compositions of Kiln
// ops, Attention on the fused attention op unless a softcap or the QK output
// asks for the scores themselves. Attention: 3-d or 4-d inputs, grouped key/value heads, a key/value
// cache (past and present), boolean or additive masks shorter than the keys,
// causal masking aligned to the end of the cache, padded key lengths,
// softcap and the optional QK output. RotaryEmbedding also in ONNX
// Runtime's com.microsoft form (its inputs in another order, positions as
// one offset).
#include <cmath>
#include <limits>

#include "kiln/functional.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

constexpr double kMasked = -std::numeric_limits<double>::infinity();

// [B, S, H * D] to [B, H, S, D].
Tensor split_heads(const OnnxNode& n, const Tensor& t, int64_t heads, const char* what) {
  if (heads <= 0 || t.shape()[2] % heads) n.fail(what, " ", shape_str(t.shape()), " does not split into ", heads, " heads");
  return t.reshape({t.shape()[0], t.shape()[1], heads, t.shape()[2] / heads}).permute({0, 2, 1, 3});
}

// Each key/value head repeated for the query heads that share it: [h0, h0, h1, h1, ...].
Tensor repeat_heads(const Tensor& t, int64_t times) {
  if (times == 1) return t;
  const Shape& s = t.shape();
  return t.unsqueeze(2).expand({s[0], s[1], times, s[2], s[3]}).reshape({s[0], s[1] * times, s[2], s[3]});
}

// An additive bias [.., Sq, Skv] from a mask: true (or 0) attends; a mask
// shorter than the keys leaves the rest out.
Tensor mask_bias(const Tensor& mask, int64_t keys, DType dtype) {
  Tensor m = mask;
  const int64_t missing = keys - m.shape().back();
  if (m.dtype() == DType::Bool) {
    m = where(m, zeros({}, dtype), full({}, kMasked, dtype));
  } else {
    m = cast(m, dtype);
  }
  if (missing > 0) m = pad(m, {0, missing}, "constant", kMasked);
  return m;
}

std::vector<Tensor> attention(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor q = input(n, in, 0), k = input(n, in, 1), v = input(n, in, 2);
  if (q.dim() != k.dim() || q.dim() != v.dim() || (q.dim() != 3 && q.dim() != 4))
    n.fail("Q, K and V must all be 3-d or all 4-d, got ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ",
           shape_str(v.shape()));
  const bool packed = q.dim() == 3;
  if (packed) {
    q = split_heads(n, q, n.required_i("q_num_heads"), "Q");
    k = split_heads(n, k, n.required_i("kv_num_heads"), "K");
    v = split_heads(n, v, n.required_i("kv_num_heads"), "V");
  }
  const DType dt = q.dtype();
  const Tensor past_key = OnnxReader::optional(in, 4), past_value = OnnxReader::optional(in, 5);
  const Tensor nonpad = OnnxReader::optional(in, 6);
  if (past_key.defined()) k = concat({past_key, k}, 2);
  if (past_value.defined()) v = concat({past_value, v}, 2);
  const int64_t batch = q.shape()[0], heads = q.shape()[1], queries = q.shape()[2], keys = k.shape()[2];
  if (heads % k.shape()[1] || k.shape()[1] != v.shape()[1])
    n.fail(heads, " query heads cannot share ", k.shape()[1], " key and ", v.shape()[1], " value heads");

  // The bias added to the scores: the mask, causal masking, padded keys.
  Tensor bias;
  if (const Tensor mask = OnnxReader::optional(in, 3); mask.defined()) bias = mask_bias(mask, keys, dt);
  if (n.i("is_causal", 0)) {
    // Query i sees key j when j <= i + offset: the keys before this block of queries.
    Tensor offset = scalar_tensor(past_key.defined() ? static_cast<double>(past_key.shape()[2]) : 0.0, DType::Int64);
    if (!past_key.defined() && nonpad.defined())
      offset = cast(nonpad, DType::Int64).reshape({batch, 1, 1, 1}) - scalar_tensor(static_cast<double>(queries), DType::Int64);
    const Tensor i = arange(queries, DType::Int64).reshape({queries, 1}), j = arange(keys, DType::Int64).reshape({1, keys});
    const Tensor causal = where(le(j, i + offset), zeros({}, dt), full({}, kMasked, dt));
    bias = bias.defined() ? bias + causal : causal;
  }
  if (nonpad.defined()) {
    const Tensor j = arange(keys, DType::Int64).reshape({1, 1, 1, keys});
    const Tensor padded = where(lt(j, cast(nonpad, DType::Int64).reshape({batch, 1, 1, 1})), zeros({}, dt), full({}, kMasked, dt));
    bias = bias.defined() ? bias + padded : padded;
  }

  const double scale = n.has("scale") ? n.f("scale", 1.0) : 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
  const int64_t share = heads / k.shape()[1];
  const double softcap = n.f("softcap", 0.0);
  const int64_t qk_mode = n.i("qk_matmul_output_mode", 0);
  if (qk_mode < 0 || qk_mode > 3) n.fail("qk_matmul_output_mode must be 0 to 3, got ", qk_mode);
  Tensor y, scores, biased, weights;
  if (softcap <= 0 && !n.output_wanted(3)) {
    // The fused kernel: the scores never exist whole. A query that sees no key gets zeros.
    y = scaled_dot_product_attention(q, repeat_heads(k, share), repeat_heads(v, share), bias, false, scale);
  } else {
    // The scale split between Q and K, as ONNX's reference does.
    const Tensor root = scalar_tensor(std::sqrt(scale), dt);
    scores = matmul(q * root, repeat_heads(k, share).transpose(2, 3) * root);
    if (softcap > 0) scores = tanh(scores / scalar_tensor(softcap, dt)) * scalar_tensor(softcap, dt);
    biased = bias.defined() ? scores + bias : scores;
    // A query that may see no key at all attends to nothing (zeros, not NaN).
    const Tensor blind = eq(amax(biased, {-1}, true), full({}, kMasked, dt));
    weights = where(blind, zeros({}, dt), softmax(biased, -1));
    y = matmul(weights, repeat_heads(v, share));
  }
  if (packed) y = y.permute({0, 2, 1, 3}).reshape({batch, queries, -1});
  std::vector<Tensor> out = {y.contiguous(), k, v};
  if (n.output_wanted(3)) out.push_back(qk_mode == 2 ? biased : qk_mode == 3 ? weights : scores);
  return out;
}

// Rotates pairs of each head's first rotary_embedding_dim values (halves, or
// neighbours when interleaved) by the angles of the caches, looked up by
// `positions` or given per batch and position. x: [B, H, S, D], or
// [B, S, hidden] split into `heads`.
Tensor rotate(const OnnxNode& n, const Tensor& x, Tensor cos_cache, Tensor sin_cache, const Tensor& positions,
              int64_t heads) {
  Tensor t;  // [B, S, H, D]
  if (x.dim() == 4) {
    t = x.permute({0, 2, 1, 3});
  } else if (x.dim() == 3) {
    if (heads <= 0 || x.shape()[2] % heads) n.fail("hidden size ", x.shape()[2], " does not split into ", heads, " heads");
    t = x.reshape({x.shape()[0], x.shape()[1], heads, x.shape()[2] / heads});
  } else {
    n.fail("input must be [B, H, S, D] or [B, S, hidden], got ", shape_str(x.shape()));
  }
  const int64_t head = t.shape()[3], dim = n.i("rotary_embedding_dim", 0) > 0 ? n.i("rotary_embedding_dim", 0) : head;
  if (dim > head || dim % 2) n.fail("rotary_embedding_dim ", dim, " must be even and at most the head size ", head);
  if (positions.defined()) {
    const Tensor flat = cast(positions, DType::Int64).reshape({-1});
    Shape looked_up = positions.shape();
    looked_up.push_back(dim / 2);
    cos_cache = index_select(cos_cache, 0, flat).reshape(looked_up);
    sin_cache = index_select(sin_cache, 0, flat).reshape(looked_up);
  }
  if (cos_cache.shape().back() != dim / 2) n.fail("the caches hold ", cos_cache.shape().back(), " angles per position; ", dim / 2, " expected");
  const Tensor cosine = cos_cache.unsqueeze(2), sine = sin_cache.unsqueeze(2);  // [B, S, 1, dim / 2]
  const Tensor rotated = t.slice(3, 0, dim);
  const bool interleaved = n.i("interleaved", 0) != 0;
  const Tensor x1 = interleaved ? rotated.slice(3, 0, dim, 2) : rotated.slice(3, 0, dim / 2);
  const Tensor x2 = interleaved ? rotated.slice(3, 1, dim, 2) : rotated.slice(3, dim / 2, dim);
  const Tensor real = cosine * x1 - sine * x2, imag = sine * x1 + cosine * x2;
  Tensor y = interleaved ? stack({real, imag}, 4).reshape(rotated.shape()) : concat({real, imag}, 3);
  if (dim < head) y = concat({y, t.slice(3, dim, head)}, 3);
  return x.dim() == 4 ? y.permute({0, 2, 1, 3}).contiguous() : y.reshape(x.shape());
}

// ONNX's RotaryEmbedding: (X, cos_cache, sin_cache, position_ids?).
std::vector<Tensor> rotary_embedding(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  return {rotate(n, x, input(n, in, 1), input(n, in, 2), OnnxReader::optional(in, 3),
                 x.dim() == 3 ? n.required_i("num_heads") : 0)};
}

// ONNX Runtime's com.microsoft RotaryEmbedding: (input, position_ids,
// cos_cache, sin_cache), position_ids [B, S] or one offset for positions
// offset, offset + 1, ...; without num_heads a 3-d input's heads are as
// wide as the caches' angles make them (all of each head rotated).
std::vector<Tensor> contrib_rotary_embedding(const OnnxNode& n, const std::vector<Tensor>& in) {
  if (n.i("is_packed_batching", 0)) n.unsupported("is_packed_batching=1 is not supported");
  if (n.f("scale", 1.0) != 1.0) n.unsupported("scale other than 1 is not supported");
  const Tensor& x = input(n, in, 0);
  const Tensor &cos_cache = input(n, in, 2), &sin_cache = input(n, in, 3);
  Tensor positions = input(n, in, 1);
  if (positions.numel() == 1 && positions.dim() <= 1) {
    const int64_t length = x.dim() == 4 ? x.shape()[2] : x.shape()[1];
    positions = (arange(length, DType::Int64) + cast(positions.reshape({}), DType::Int64)).reshape({1, length});
  }
  int64_t heads = n.i("num_heads", 0);
  if (x.dim() == 3 && heads <= 0) {
    if (n.i("rotary_embedding_dim", 0) > 0) n.fail("rotary_embedding_dim needs num_heads for a 3-d input");
    const int64_t head = 2 * cos_cache.shape().back();
    heads = head > 0 && x.shape()[2] % head == 0 ? x.shape()[2] / head : 0;
  }
  return {rotate(n, x, cos_cache, sin_cache, positions, heads)};
}

}  // namespace

void add_attention_converters(ConverterTable& t) {
  t["Attention"] = attention;
  t["RotaryEmbedding"] = rotary_embedding;
  t["com.microsoft::RotaryEmbedding"] = contrib_rotary_embedding;
}

}  // namespace kiln::runtime
