// attention: softmax(q k^T * scale + mask) v in one op, over any leading
// (batch, head) axes, with causal masking, as torch's
// scaled_dot_product_attention. The CPU kernel works a block of query rows
// at a time, so the [L, S] scores never exist whole (see attention_kernels.cpp).
// With save_weights (set when a gradient will be taken) it also writes the
// attention weights, which the gradient rule reads instead of computing
// them again. Exported as ONNX MatMul, Mul, Add, Softmax and MatMul.
#include <cmath>
#include <limits>
#include <tuple>

#include "kiln/grad_mode.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

double scale_of(const Attrs& a, int64_t head_dim) {
  const double s = a.get_float("scale", 0.0);
  return s > 0 ? s : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

Metas infer_attention(const Metas& in, const Attrs& a) {
  const TensorMeta &q = in[0], &k = in[1], &v = in[2];
  detail::check_floating(q, "q");
  detail::check_same_dtype(in, 0, 1);
  detail::check_same_dtype(in, 0, 2);
  const size_t r = q.shape.size();
  KILN_CHECK(r >= 2 && k.shape.size() == r && v.shape.size() == r, "q, k and v must have the same rank, at least 2 "
             "([..., L, D], [..., S, D], [..., S, Dv]), got ", shape_str(q.shape), ", ", shape_str(k.shape), ", ",
             shape_str(v.shape));
  for (size_t d = 0; d + 2 < r; ++d)
    KILN_CHECK(q.shape[d] == k.shape[d] && q.shape[d] == v.shape[d], "q, k and v must share their leading (batch, "
               "head) axes; got ", shape_str(q.shape), ", ", shape_str(k.shape), ", ", shape_str(v.shape),
               " (repeat grouped key/value heads first)");
  const int64_t l = q.shape[r - 2], s = k.shape[r - 2];
  KILN_CHECK(k.shape[r - 1] == q.shape[r - 1], "q and k must have the same last axis (head size), got ",
             shape_str(q.shape), " and ", shape_str(k.shape));
  KILN_CHECK(v.shape[r - 2] == s, "k and v must have the same number of keys, got ", shape_str(k.shape), " and ",
             shape_str(v.shape));
  if (in.size() > 3 && in[3].defined) {
    KILN_CHECK(in[3].dtype == q.dtype, "mask must be additive, of q's dtype ", dtype_name(q.dtype), "; got ",
               dtype_name(in[3].dtype), " (turn a bool mask into 0 and -inf with where)");
    Shape scores = q.shape;
    scores.back() = s;
    KILN_CHECK(broadcast_shapes(in[3].shape, scores) == scores, "mask ", shape_str(in[3].shape),
               " does not broadcast to the scores ", shape_str(scores));
  }
  Shape y = q.shape;
  y.back() = v.shape.back();
  Shape weights = {0};
  if (a.get_bool("save_weights", false)) {
    weights = q.shape;
    weights.back() = s;
  }
  (void)l;
  return {{true, y, q.dtype, q.device}, {true, weights, q.dtype, q.device}};
}

// The weights again, with the ops, where the forward did not keep them.
Tensor weights_of(const GradContext& c) {
  if (c.outputs[1].numel() > 0) return c.outputs[1];
  const Tensor &q = c.inputs[0], &k = c.inputs[1];
  const double scale = scale_of(c.attrs, q.size(-1));
  Tensor scores = matmul(q * scale, k.transpose(-1, -2));
  const double inf = std::numeric_limits<double>::infinity();
  if (c.attrs.get_bool("causal", false))
    scores =
        where(triu(ones({q.size(-2), k.size(-2)}, DType::Bool, q.device()), 1), scalar_tensor(-inf, q.dtype()), scores);
  if (c.inputs.size() > 3 && c.inputs[3].defined()) scores = scores + c.inputs[3];
  const Tensor blind = eq(amax(scores, {-1}, true), scalar_tensor(-inf, q.dtype()));
  return where(blind, zeros({}, q.dtype()), softmax(scores, -1));
}

Grads attention_grads(const GradContext& c, const Grads& g) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const std::vector<Tensor> d =
      call(KILN_OP("attention_backward"), {g[0], q, k, v, weights_of(c)},
           {{"scale", scale_of(c.attrs, q.size(-1))}, {"causal", c.attrs.get_bool("causal", false)}});
  Grads r(c.inputs.size());
  for (size_t i = 0; i < 3; ++i)
    if (c.needs_grad[i]) r[i] = d[i];
  return r;
}

// The gradients of q, k and v from the output's and the weights p (zero
// where a query does not see a key): with dp = g v^T and
// ds = p (dp - rowsum(dp p)) scale, they are ds k, ds^T q and p^T g.
// (causal says the weights are zero past each query's position, which a
// kernel may use to skip them.)
std::vector<Tensor> attention_backward_ops(const std::vector<Tensor>& in, const Attrs& a) {
  const Tensor &g = in[0], &q = in[1], &k = in[2], &v = in[3], &p = in[4];
  const Tensor dp = matmul(g, v.transpose(-1, -2));
  const Tensor ds = p * (dp - sum(dp * p, {-1}, true)) * a.get_float("scale");
  return {matmul(ds, k), matmul(ds.transpose(-1, -2), q), matmul(p.transpose(-1, -2), g)};
}

Metas infer_attention_backward(const Metas& in, const Attrs& a) {
  const TensorMeta &g = in[0], &q = in[1], &k = in[2], &v = in[3], &p = in[4];
  KILN_CHECK(a.get_float("scale") > 0, "scale must be positive, got ", a.get_float("scale"));
  const Metas forward = infer_attention({q, k, v}, {{"save_weights", true}});
  for (const auto& [what, meta, want] : {std::tuple{"grad", &g, &forward[0]}, std::tuple{"weights", &p, &forward[1]}})
    KILN_CHECK(meta->shape == want->shape && meta->dtype == want->dtype, what, " must be ", dtype_name(want->dtype),
               shape_str(want->shape), ", got ", dtype_name(meta->dtype), shape_str(meta->shape));
  return {q, k, v};
}

// MatMul(q * scale, k^T) (+ mask) (+ causal) -> Softmax -> MatMul(v).
void write_attention(OnnxWriter& w) {
  w.require_unused_from(1, "attention weights");
  const Shape &q = w.in_shape(0), &k = w.in_shape(1);
  const size_t r = q.size();
  const DType dt = w.dtype();
  std::vector<int64_t> perm(r);
  for (size_t d = 0; d < r; ++d) perm[d] = static_cast<int64_t>(d);
  std::swap(perm[r - 1], perm[r - 2]);
  const std::string kt = w.unique("keys_t"), qs = w.unique("q_scaled"), scores = w.unique("scores");
  w.node("Transpose", {w.in(1)}, {kt}, {{"perm", perm}});
  w.node("Mul", {w.in(0), w.scalar(scale_of(w.attrs(), q.back()), dt, "scale")}, {qs});
  w.node("MatMul", {qs, kt}, {scores});
  std::string biased = scores;
  if (!w.in(3).empty()) {
    biased = w.unique("scores_masked");
    w.node("Add", {scores, w.in(3)}, {biased});
  }
  if (w.attrs().get_bool("causal", false)) {
    const int64_t l = q[r - 2], s = k[r - 2];
    Tensor causal = zeros({l, s}, dt);
    causal = where(triu(ones({l, s}, DType::Bool), 1), scalar_tensor(-std::numeric_limits<double>::infinity(), dt), causal);
    const std::string with_causal = w.unique("scores_causal");
    w.node("Add", {biased, w.initializer(causal, "causal_mask")}, {with_causal});
    biased = with_causal;
  }
  const std::string weights = w.unique("attention_weights");
  w.node("Softmax", {biased}, {weights}, {{"axis", int64_t{-1}}});
  w.node("MatMul", {weights, w.in(2)}, {w.out(0)});
}

OpDefiner d_attention([] {
  OpDef d = detail::make_op("attention", {"q", "k", "v", "mask?"},
                            {"scale:float=0", "causal:bool=false", "save_weights:bool=false"}, infer_attention,
                            attention_grads, {{"Transpose", "Mul", "MatMul", "Add", "Softmax"}, write_attention}, 0,
                            {"y", "weights"});
  d.differentiable_inputs = {0, 1, 2};
  d.category = "attention";
  d.autocast = Autocast::Lower;
  return d;
}());

// Fused where the backend has a kernel (the CPU's: the four products of a
// head on its register tiles, one [L, S] scratch a thread instead of the
// ops' temporaries); elsewhere the ops of attention_backward_ops.
OpDefiner d_attention_backward([] {
  OpDef d =
      detail::make_op("attention_backward", {"grad", "q", "k", "v", "weights"}, {"scale:float", "causal:bool=false"},
                      infer_attention_backward, nullptr, {}, kTagBackward, {"grad_q", "grad_k", "grad_v"});
  d.decompose = attention_backward_ops;
  d.category = "attention";
  return d;
}());

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                                    double scale) {
  // The weights are kept for the gradient when one will be taken.
  const bool grad = autograd::grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  std::vector<Tensor> inputs = {q, k, v};
  if (mask.defined()) inputs.push_back(mask);
  return call(KILN_OP("attention"), inputs, {{"scale", scale}, {"causal", causal}, {"save_weights", grad}})[0];
}

}  // namespace kiln
