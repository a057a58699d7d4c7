// matmul (batched, broadcasting) and linear.
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

Metas infer_matmul(const Metas& in, const Attrs&) {
  const Shape &a = in[0].shape, &b = in[1].shape;
  detail::check_same_dtype(in, 0, 1);
  KILN_CHECK(a.size() >= 2 && b.size() >= 2, "both operands need rank >= 2 here, got ", shape_str(a), " and ",
             shape_str(b), " (kiln::matmul accepts 1-D operands and reshapes them)");
  int64_t k = a.back(), k2 = b[b.size() - 2];
  KILN_CHECK(k == k2, "inner dimensions differ: ", shape_str(a), " @ ", shape_str(b), " needs a's last axis (", k,
             ") to equal b's second-to-last (", k2, ")");
  Shape batch = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  batch.push_back(a[a.size() - 2]);
  batch.push_back(b.back());
  return {{true, batch, in[0].dtype, in[0].device}};
}

// 2-D inputs are one Gemm; others a MatMul with the transposed weight.
void write_linear(OnnxWriter& w) {
  if (w.in_shape().size() == 2) {
    w.node("Gemm", {w.in(0), w.in(1), w.in(2)}, {w.out()}, {{"transB", int64_t{1}}});
    return;
  }
  bool bias = !w.in(2).empty();
  std::string wt = w.unique("weight_t"), y = bias ? w.unique("matmul") : w.out();
  w.node("Transpose", {w.in(1)}, {wt}, {{"perm", std::vector<int64_t>{1, 0}}});
  w.node("MatMul", {w.in(0), wt}, {y});
  if (bias) w.node("Add", {y, w.in(2)}, {w.out()});
}

// ONNX MatMul: numpy's matmul, where a 1-d operand is a row or a column
// vector whose axis the result drops.
std::vector<Tensor> read_matmul(const OnnxReader& n, const std::vector<Tensor>& in) {
  Tensor a = n.input(in, 0), b = n.input(in, 1);
  if (a.dim() == 0 || b.dim() == 0) n.fail("MatMul inputs must have at least one axis");
  const bool vec_a = a.dim() == 1, vec_b = b.dim() == 1;
  if (vec_a) a = a.unsqueeze(0);
  if (vec_b) b = b.unsqueeze(1);
  Tensor y = matmul(a, b);
  if (vec_b) y = y.squeeze(y.dim() - 1);
  if (vec_a) y = y.squeeze(y.dim() - (vec_b ? 1 : 2));
  return {y};
}

// ONNX Gemm: alpha * A' B' + beta * C, with B' taken as linear's [out, in]
// weight and a row C as its bias.
std::vector<Tensor> read_gemm(const OnnxReader& n, const std::vector<Tensor>& in) {
  Tensor a = n.input(in, 0);
  const Tensor& b = n.input(in, 1);
  const Tensor c = OnnxReader::optional(in, 2);
  if (a.dim() != 2 || b.dim() != 2) n.fail("Gemm takes 2-d A and B, got ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  if (n.i("transA", 0)) a = a.t();
  const double alpha = n.f("alpha", 1.0), beta = n.f("beta", 1.0);
  const Tensor w = n.i("transB", 0) ? b : b.t();
  const int64_t out = w.shape()[0];
  const bool bias_is_row = c.defined() && beta == 1.0 && (c.shape() == Shape{out} || c.shape() == Shape{1, out});
  Tensor y = linear(a, w, bias_is_row ? c.reshape({out}) : Tensor());
  if (alpha != 1.0) y = y * alpha;
  if (c.defined() && !bias_is_row) y = y + (beta == 1.0 ? c : c * beta);
  return {y};
}

// MindSpore's MatMul and BatchMatMul, with transpose_a and transpose_b;
// nn.Dense's MatMul(x, weight, transpose_b) is a linear layer.
std::vector<Tensor> read_mindspore_matmul(const OnnxReader& n, const std::vector<Tensor>& in) {
  Tensor a = n.input(in, 0), b = n.input(in, 1);
  const bool ta = n.i("transpose_a", 0) != 0, tb = n.i("transpose_b", 0) != 0;
  if (a.dim() < 2 || b.dim() < 2) n.fail("takes matrices (or batches of them), got ", a.meta_str(), " and ", b.meta_str());
  if (!ta && tb && b.dim() == 2) return {linear(a, b)};
  if (ta) a = a.transpose(-1, -2);
  if (tb) b = b.transpose(-1, -2);
  return {matmul(a, b)};
}

OpDefiner d_matmul([] {
  OpDef d;
  d.name = "matmul";
  d.autocast = Autocast::Lower;
  d.inputs = {"a", "b"};
  d.outputs = {"y"};
  d.infer = infer_matmul;
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    const Tensor &a = c.inputs[0], &b = c.inputs[1];
    return {c.needs_grad[0] ? sum_to(matmul(g[0], b.transpose(-1, -2)), a.shape()) : Tensor(),
            c.needs_grad[1] ? sum_to(matmul(a.transpose(-1, -2), g[0]), b.shape()) : Tensor()};
  };
  d.onnx = onnx_as("MatMul");
  d.onnx_import = onnx_reader({"MatMul"}, read_matmul);
  d.mindspore_import = onnx_reader({"MatMul", "BatchMatMul"}, read_mindspore_matmul);
  d.category = "matmul";
  return d;
}());

OpDefiner d_linear([] {
  OpDef d;
  d.name = "linear";
  d.autocast = Autocast::Lower;
  d.inputs = {"x", "weight", "bias?"};
  d.outputs = {"y"};
  d.infer = [](const Metas& in, const Attrs&) -> Metas {
    const Shape &x = in[0].shape, &w = in[1].shape;
    detail::check_same_dtype(in, 0, 1);
    KILN_CHECK(x.size() >= 1 && w.size() == 2, "x must have rank >= 1 and weight must be [out_features, in_features], got x ",
               shape_str(x), " and weight ", shape_str(w));
    KILN_CHECK(x.back() == w[1], "x has ", x.back(), " features in its last axis but weight ", shape_str(w), " expects ",
               w[1]);
    if (in.size() > 2 && in[2].defined) {
      detail::check_same_dtype(in, 0, 2);
      KILN_CHECK(in[2].shape == Shape{w[0]}, "bias must have shape [", w[0], "], got ", shape_str(in[2].shape));
    }
    Shape y = x;
    y.back() = w[0];
    return {{true, y, in[0].dtype, in[0].device}};
  };
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    const Tensor &x = c.inputs[0], &w = c.inputs[1];
    int64_t out = w.shape()[0], in = w.shape()[1];
    Tensor g2 = g[0].reshape({-1, out});
    Grads r(3);
    if (c.needs_grad[0]) r[0] = matmul(g[0], w);
    if (c.needs_grad[1]) r[1] = matmul(g2.t(), x.reshape({-1, in}));
    if (c.inputs.size() > 2 && c.needs_grad[2]) r[2] = sum(g2, {0});
    return r;
  };
  d.onnx = {{"Gemm", "Transpose", "MatMul", "Add"}, write_linear};
  d.onnx_import = onnx_reader({"Gemm"}, read_gemm);
  d.category = "matmul";
  return d;
}());

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: operands must have rank >= 1, got ", a.meta_str(), " and ",
             b.meta_str());
  if (a.dtype() != b.dtype()) {
    DType t = promote_types(a.dtype(), b.dtype());
    return matmul(a.to(t), b.to(t));
  }
  // NumPy rules for 1-D operands: a vector becomes a row (a) or column (b), then the axis is dropped.
  if (a.dim() == 1 && b.dim() == 1) return matmul(a.unsqueeze(0), b.unsqueeze(1)).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(1)).squeeze(-1);
  return call1(KILN_OP("matmul"), {a, b});
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return call1(KILN_OP("linear"), {x, weight, bias});
}

}  // namespace kiln
