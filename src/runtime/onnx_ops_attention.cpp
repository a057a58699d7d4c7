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
              int64_t heads, int64_t rotary_dim, bool interleaved) {
  Tensor t;  // [B, S, H, D]
  if (x.dim() == 4) {
    t = x.permute({0, 2, 1, 3});
  } else if (x.dim() == 3) {
    if (heads <= 0 || x.shape()[2] % heads) n.fail("hidden size ", x.shape()[2], " does not split into ", heads, " heads");
    t = x.reshape({x.shape()[0], x.shape()[1], heads, x.shape()[2] / heads});
  } else {
    n.fail("input must be [B, H, S, D] or [B, S, hidden], got ", shape_str(x.shape()));
  }
  const int64_t head = t.shape()[3], dim = rotary_dim > 0 ? rotary_dim : head;
  if (dim > head || dim % 2) n.fail("the rotary dimension ", dim, " must be even and at most the head size ", head);
  if (positions.defined()) {  // rows of the tables by [B, S] ids, not flattened: [B * S] is not affine in B and S
    const Tensor ids = cast(positions, DType::Int64);
    cos_cache = embedding(cos_cache, ids);
    sin_cache = embedding(sin_cache, ids);
  }
  if (cos_cache.shape().back() != dim / 2) n.fail("the caches hold ", cos_cache.shape().back(), " angles per position; ", dim / 2, " expected");
  const Tensor cosine = cos_cache.unsqueeze(2), sine = sin_cache.unsqueeze(2);  // [B, S, 1, dim / 2]
  const Tensor rotated = t.slice(3, 0, dim);
  // Each pair (x1, x2) turns by its angle to (x1 c - x2 s, x1 s + x2 c):
  // over an axis of the pair, x1 * (c, s) + x2 * (-s, c), one elementwise
  // loop reading x in place (halves or neighbours), where two loops and a
  // concatenation were; the tables' pairs are made once per position.
  const int64_t pair = interleaved ? 4 : 3;
  Shape paired = rotated.shape();
  paired.back() = interleaved ? dim / 2 : 2;
  paired.push_back(interleaved ? 2 : dim / 2);
  const Tensor pairs = rotated.reshape(paired);
  const Tensor x1 = pairs.slice(pair, 0, 1), x2 = pairs.slice(pair, 1, 2);
  const Tensor along = stack({cosine, sine}, pair), across = stack({neg(sine), cosine}, pair);
  Tensor y = (x1 * along + x2 * across).reshape(rotated.shape());
  if (dim < head) y = concat({y, t.slice(3, dim, head)}, 3);
  return x.dim() == 4 ? y.permute({0, 2, 1, 3}).contiguous() : y.reshape(x.shape());
}

// ONNX's RotaryEmbedding: (X, cos_cache, sin_cache, position_ids?).
std::vector<Tensor> rotary_embedding(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  return {rotate(n, x, input(n, in, 1), input(n, in, 2), OnnxReader::optional(in, 3),
                 x.dim() == 3 ? n.required_i("num_heads") : 0, n.i("rotary_embedding_dim", 0),
                 n.i("interleaved", 0) != 0)};
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
  return {
      rotate(n, x, cos_cache, sin_cache, positions, heads, n.i("rotary_embedding_dim", 0), n.i("interleaved", 0) != 0)};
}

// 0, 1, ..., n - 1 ([1, n]), and n alone ([1, 1]), as rows of one table of
// positions picked by consecutive indices, which constant folding makes a
// slice: a graph then has the sizes in its slices' bounds, which a compile
// over symbolic lengths generalizes, where arange(n) would be a constant of
// each length's graph.
Tensor position_table(int64_t size) {
  std::vector<int64_t> values(static_cast<size_t>(size));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i);
  return from_vector(values, {size, 1});  // made, not computed: nothing for a tracer to record
}
Tensor positions_from(int64_t first, int64_t count) {
  static const Tensor table = position_table(int64_t{1} << 16);
  const Tensor all = first + count <= table.shape()[0] ? table : position_table(first + count);
  const Tensor rows =
      embedding(all, arange(static_cast<double>(first), static_cast<double>(first + count), 1.0, DType::Int64));
  return count == 1 ? rows : rows.reshape({1, count});
}
Tensor positions_below(int64_t n) { return positions_from(0, n); }
Tensor position(int64_t n) { return positions_from(n, 1); }

// ONNX Runtime's com.microsoft GroupQueryAttention, the attention of
// onnxruntime-genai's LLM exports: (query, key?, value?, past_key?,
// past_value?, seqlens_k, total_sequence_length, cos_cache?, sin_cache?,
// position_ids?, attention_bias?, head_sink?) -> (output, present_key,
// present_value). Query [B, S, N * D] (or Q, K and V packed in it), caches
// [B, Nkv, P, D]. total_sequence_length T is read as a value (exports
// compute it from the mask's shape): S == T is a first prompt, every row
// new from position 0; otherwise each row b has seqlens_k[b] + 1 tokens,
// the last S of them new. The present cache is max(T, P) long: the past's
// rows before the new ones, the new ones, then zeros (ONNX Runtime's answer
// for a present that is not the past's own buffer). Query i of row b sees
// the keys up to its own position (the last local_window_size of them with
// a window), as ONNX Runtime's CPU kernel does.
std::vector<Tensor> group_query_attention(const OnnxNode& n, const std::vector<Tensor>& in) {
  for (const auto& [index, what] : std::vector<std::pair<size_t, const char*>>{{9, "position_ids"},
                                                                               {12, "k_scale (a quantized cache)"},
                                                                               {13, "v_scale (a quantized cache)"},
                                                                               {14, "q_norm_weight"},
                                                                               {15, "k_norm_weight"}})
    if (OnnxReader::optional(in, index).defined()) n.unsupported("the input ", what, " is not supported");
  if (n.i("qk_output", 0)) n.unsupported("qk_output is not supported");
  if (n.i("sliding_window_cache", 0)) n.unsupported("sliding_window_cache=1 (a window-sized cache) is not supported");
  const int64_t heads = n.required_i("num_heads"), kv_heads = n.required_i("kv_num_heads");
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads)
    n.fail("num_heads ", heads, " must be a positive multiple of kv_num_heads ", kv_heads);
  const Tensor& query = input(n, in, 0);
  const Tensor key = OnnxReader::optional(in, 1), value = OnnxReader::optional(in, 2);
  if (query.dim() != 3) n.fail("query must be [batch, sequence, hidden], got ", shape_str(query.shape()));
  if (key.defined() != value.defined()) n.fail("key and value come together; give both, or neither for packed QKV");
  const int64_t batch = query.shape()[0], length = query.shape()[1];
  const int64_t head = key.defined() ? query.shape()[2] / heads : query.shape()[2] / (heads + 2 * kv_heads);
  Tensor q = query, k = key, v = value;
  if (!key.defined()) {
    if (query.shape()[2] != head * (heads + 2 * kv_heads))
      n.fail("packed QKV ", shape_str(query.shape()), " does not split into ", heads, " query and 2 x ", kv_heads,
             " key/value heads");
    q = query.slice(2, 0, heads * head);
    k = query.slice(2, heads * head, (heads + kv_heads) * head);
    v = query.slice(2, (heads + kv_heads) * head, query.shape()[2]);
  } else if (query.shape()[2] != heads * head || k.dim() != 3 || v.shape() != k.shape() ||
             k.shape() != Shape{batch, length, kv_heads * head}) {
    n.fail("query ", shape_str(query.shape()), ", key ", shape_str(k.shape()), " and value ", shape_str(v.shape()),
           " must be [batch, sequence, heads x head size] with ", heads, " query and ", kv_heads, " key/value heads");
  }
  const Tensor past_key = OnnxReader::optional(in, 3), past_value = OnnxReader::optional(in, 4);
  if (past_key.defined() != past_value.defined()) n.fail("past_key and past_value come together");
  const int64_t past = past_key.defined() ? past_key.shape()[2] : 0;
  if (past_key.defined() &&
      (past_key.shape() != Shape{batch, kv_heads, past, head} || past_value.shape() != past_key.shape()))
    n.fail("past_key ", shape_str(past_key.shape()), " and past_value ", shape_str(past_value.shape()), " must be [",
           batch, ", ", kv_heads, ", past length, ", head, "]");
  const Tensor& seqlens = input(n, in, 5);
  if (seqlens.numel() != batch)
    n.fail("seqlens_k must hold one length per row (", batch, "), got ", shape_str(seqlens.shape()));
  const auto total = static_cast<int64_t>(scalar_value(n, input(n, in, 6), "total_sequence_length"));
  const bool first_prompt = length == total;
  if (total < length) n.fail("total_sequence_length ", total, " is shorter than the ", length, " new tokens");
  if (!first_prompt && past == 0)
    n.fail("total_sequence_length ", total, " counts tokens before the ", length,
           " new ones, but there is no past_key");
  const int64_t cache = std::max(total, past);

  // Each row's count of tokens, the new ones' offset after the earlier ones,
  // and their positions (a first prompt's padding at position 1, as ONNX
  // Runtime places it). Sizes enter as slices of one table of positions, not
  // as constants: one compiled graph serves every length.
  const Tensor lengths = cast(seqlens, DType::Int64).reshape({batch, 1}) + scalar_tensor(1.0, DType::Int64);
  const Tensor steps = positions_below(length);
  const Tensor offset = first_prompt ? zeros({1, 1}, DType::Int64) : clamp(lengths - position(length), 0.0, {});
  if (const Tensor cos_cache = OnnxReader::optional(in, 7); cos_cache.defined()) {
    const Tensor sin_cache = input(n, in, 8);
    if (cos_cache.dim() != 2 || sin_cache.shape() != cos_cache.shape() || cos_cache.shape()[0] < total)
      n.fail("cos_cache ", shape_str(cos_cache.shape()), " and sin_cache ", shape_str(sin_cache.shape()),
             " must be [max sequence, rotary dim / 2] with at least total_sequence_length ", total, " positions");
    const Tensor positions =
        first_prompt ? where(lt(steps, lengths), steps, scalar_tensor(1.0, DType::Int64)) : offset + steps;
    const bool interleaved = n.i("rotary_interleaved", 0) != 0;
    const int64_t dim = 2 * cos_cache.shape()[1];
    q = rotate(n, q, cos_cache, sin_cache, positions, heads, dim, interleaved);
    k = rotate(n, k, cos_cache, sin_cache, positions, kv_heads, dim, interleaved);
  } else if (n.i("do_rotary", 0)) {
    n.fail("do_rotary=1 needs cos_cache and sin_cache");
  }
  q = split_heads(n, q, heads, "query");
  k = split_heads(n, k, kv_heads, "key");
  v = split_heads(n, v, kv_heads, "value");

  // The present cache: each row's earlier tokens from the past, the new
  // ones at its offset, zeros after them. Every row takes its own offset,
  // also where several rows have several new tokens (which ONNX Runtime's
  // kernel refuses).
  const Tensor row = positions_below(cache).reshape({1, 1, cache, 1});
  auto present = [&](const Tensor& old, const Tensor& fresh) {
    if (first_prompt) return cache == length ? fresh : pad(fresh, {0, 0, 0, cache - length});
    const Tensor start = offset.reshape({batch, 1, 1, 1});
    const Tensor kept = index_select(old, 2, minimum(row, position(past - 1)).reshape({cache}));
    Tensor written = fresh;  // one new token: its row, broadcast
    if (length > 1) {        // row r takes new row r - start: whole rows for one sequence, elements for several
      const Tensor from = minimum(clamp(row - start, 0.0, {}), position(length - 1));
      // (one form for every batch: a graph that branched on batch 1 would not generalize over it)
      written = gather(fresh, 2, from.expand({batch, kv_heads, cache, head}));
    }
    return where(lt(row, start), kept,
                 where(lt(row, lengths.reshape({batch, 1, 1, 1})), written, zeros({}, fresh.dtype())));
  };
  const Tensor present_key = present(past_key, k), present_value = present(past_value, v);

  // Which keys each query sees: up to its own position, and no further
  // back than the window.
  const double scale = n.f("scale", 0.0) != 0.0 ? n.f("scale", 0.0) : 1.0 / std::sqrt(static_cast<double>(head));
  const int64_t window = n.i("local_window_size", -1);
  const double softcap = n.f("softcap", 0.0);
  const Tensor attention_bias = OnnxReader::optional(in, 10), sink = OnnxReader::optional(in, 11);
  const bool smooth = n.i("smooth_softmax", 0) != 0 || sink.defined();
  const DType dt = q.dtype();
  const Tensor key_row = row.reshape({1, 1, 1, cache});
  const Tensor own = (offset + steps).reshape({-1, 1, length, 1});
  Tensor bias = where(le(key_row, own), zeros({}, dt), full({}, kMasked, dt));  // [B or 1, 1, S, cache]
  if (window > 0)
    bias =
        where(gt(key_row, own - scalar_tensor(static_cast<double>(window), DType::Int64)), bias, full({}, kMasked, dt));
  if (attention_bias.defined()) {
    if (attention_bias.dim() != 4 || attention_bias.shape()[3] > cache)
      n.fail("attention_bias must be [batch or 1, heads or 1, ", length, ", ", total, "], got ",
             shape_str(attention_bias.shape()));
    bias = bias + mask_bias(attention_bias, cache, dt);
  }
  // The query heads that share a key/value head attend as one block of
  // rows, [B, Nkv, share * S, D], the bias repeated for each: the cache is
  // read as it is, not copied per query head.
  const int64_t share = heads / kv_heads, rows = share * length;
  const Tensor grouped = q.reshape({batch, kv_heads, rows, head});
  const int64_t bias_rows = bias.shape()[0];
  bias = bias.shape()[1] == heads
             ? bias.reshape({bias_rows, kv_heads, rows, cache})  // a bias per query head
             : bias.unsqueeze(2).expand({bias_rows, 1, share, length, cache}).reshape({bias_rows, 1, rows, cache});
  Tensor y;
  if (softcap <= 0 && !smooth) {
    y = scaled_dot_product_attention(grouped, present_key, present_value, bias, false, scale);
  } else {
    Tensor scores = matmul(grouped, present_key.transpose(2, 3)) * scalar_tensor(scale, dt);
    if (softcap > 0) scores = tanh(scores / scalar_tensor(softcap, dt)) * scalar_tensor(softcap, dt);
    scores = scores + bias;
    Tensor vs = present_value;
    if (smooth) {  // one more key, every query's: the head's sink score (0 by default), a zero value
      const Tensor extra =
          (sink.defined() ? cast(sink, dt).reshape({1, kv_heads, share, 1, 1}) : zeros({1, 1, 1, 1, 1}, dt))
              .expand({batch, kv_heads, share, length, 1})
              .reshape({batch, kv_heads, rows, 1});
      scores = concat({scores, extra}, 3);
      vs = pad(vs, {0, 0, 0, 1});
    }
    y = matmul(softmax(scores, -1), vs);
  }
  y = y.reshape({batch, heads, length, head}).permute({0, 2, 1, 3}).reshape({batch, length, heads * head}).contiguous();
  return {y, present_key, present_value};
}

}  // namespace

void add_attention_converters(ConverterTable& t) {
  t["Attention"] = attention;
  t["RotaryEmbedding"] = rotary_embedding;
  t["com.microsoft::RotaryEmbedding"] = contrib_rotary_embedding;
  t["com.microsoft::GroupQueryAttention"] = [](const OnnxNode& n, const std::vector<Tensor>& in) {
    return computed_in_float32(in, [&](const std::vector<Tensor>& args) { return group_query_attention(n, args); });
  };
}

}  // namespace kiln::runtime
