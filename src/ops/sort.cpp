// topk: the k largest (or smallest) values along an axis and their indices,
// as torch.topk and ONNX TopK (ties: the lower index first). The gradient
// scatters into the chosen positions.
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

Metas infer_topk(const Metas& in, const Attrs& a) {
  const int64_t rank = static_cast<int64_t>(in[0].shape.size());
  KILN_CHECK(rank > 0, "topk needs at least one axis, got a 0-d tensor");
  KILN_CHECK(in[0].dtype != DType::Bool, "topk: bool tensors have no order; convert to an integer dtype");
  const int64_t axis = normalize_axis(a.get_int("axis", -1), rank);
  const int64_t k = a.get_int("k");
  KILN_CHECK(k >= 0 && k <= in[0].shape[axis], "topk: k = ", k, " must be in [0, ", in[0].shape[axis],
             "] (the length of axis ", axis, " of ", shape_str(in[0].shape), ")");
  Shape s = in[0].shape;
  s[axis] = k;
  return {{true, s, in[0].dtype, in[0].device}, {true, s, DType::Int64, in[0].device}};
}

void write_topk(OnnxWriter& w) {
  const Attrs& a = w.attrs();
  w.node("TopK", {w.in(0), w.ints({a.get_int("k")}, "k")}, {w.out(0), w.out(1)},
         {{"axis", a.get_int("axis", -1)}, {"largest", int64_t{a.get_bool("largest", true)}}, {"sorted", int64_t{1}}});
}

// ONNX TopK: K as an input from opset 10 (an attribute before); sorted=0
// leaves the order free, so the sorted order is one valid answer.
std::vector<Tensor> read_topk(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  int64_t k;
  if (n.opset() < 10) {
    k = n.i("k", -1);
  } else {
    const Tensor& kt = n.input(in, 1);
    if (kt.numel() != 1) n.fail("K must hold one value, it has shape ", shape_str(kt.shape()));
    k = kt.to(DType::Int64).contiguous().to_vector<int64_t>()[0];
  }
  const int64_t axis = n.axis(n.i("axis", -1), x.dim());
  if (k < 0 || k > x.shape()[axis]) n.fail("K = ", k, " is outside [0, ", x.shape()[axis], "]");
  return call(KILN_OP("topk"), {x}, {{"k", k}, {"axis", axis}, {"largest", n.i("largest", 1) != 0}});
}

OpDefiner d_topk([] {
  OpDef d;
  d.name = "topk";
  d.inputs = {"x"};
  d.outputs = {"values", "indices"};
  d.attrs = {"k:int", "axis:int=-1", "largest:bool=true"};
  d.infer = infer_topk;
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    const int64_t axis = normalize_axis(c.attrs.get_int("axis", -1), c.inputs[0].dim());
    return {scatter_add(zeros_like(c.inputs[0]), axis, c.outputs[1], g[0])};
  };
  d.onnx = {{"TopK"}, write_topk};
  d.onnx_import = onnx_reader({"TopK"}, read_topk, {1}, false);
  d.category = "sort";
  return d;
}());

}  // namespace

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest) {
  auto out = call(KILN_OP("topk"), {x}, {{"k", k}, {"axis", axis}, {"largest", largest}});
  return {out[0], out[1]};
}

}  // namespace kiln
