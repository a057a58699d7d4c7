// scatter_reduce: src combined into x at index along an axis by product,
// maximum or minimum, x's own values taking part (ONNX ScatterElements with
// reduction mul, max or min; torch.scatter_reduce with include_self). Its
// gradients are written with scatter_add and gather: a product's through
// the product of the other factors (zeros counted, so none divides by one),
// a maximum's or minimum's shared among the values that reach it.
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

const char* onnx_reduction(const std::string& reduce) {
  return reduce == "prod" ? "mul" : reduce == "amax" ? "max" : "min";
}

// src's part that meets the index (src may be larger), and a gradient of that
// part padded with zeros back to src's shape.
Tensor used_part(const Tensor& src, const Tensor& index) {
  Tensor t = src;
  for (int64_t d = 0; d < index.dim(); ++d) t = t.slice(d, 0, index.shape()[d]);
  return t;
}
Tensor padded_to(const Tensor& g, const Tensor& src) {
  if (g.shape() == src.shape()) return g;
  std::vector<int64_t> pads;
  for (int64_t d = g.dim() - 1; d >= 0; --d) {
    pads.push_back(0);
    pads.push_back(src.shape()[d] - g.shape()[d]);
  }
  return pad(g, pads);
}

// The product of every factor reaching each position but one: x's (at x)
// and each src element's (at index), from the product of the nonzero factors
// and the count of zero ones.
Grads product_grads(const GradContext& c, const Tensor& g) {
  const Tensor &x = c.inputs[0], &index = c.inputs[1], src = used_part(c.inputs[2], index);
  const int64_t axis = c.attrs.get_int("axis");
  const Tensor zero = zeros({}, x.dtype()), one = ones({}, x.dtype());
  const Tensor x_zero = eq(x, zero), src_zero = eq(src, zero);
  const Tensor nonzero = scatter_reduce(where(x_zero, one, x), axis, index, where(src_zero, one, src), "prod");
  const Tensor zeros_at = scatter_add(cast(x_zero, x.dtype()), axis, index, cast(src_zero, x.dtype()));
  auto others = [&](const Tensor& factor, const Tensor& is_zero, const Tensor& product, const Tensor& count) {
    const Tensor none = eq(count, zero), only_this = where(eq(count, one), is_zero, zeros({}, DType::Bool));
    return where(none, product / where(is_zero, one, factor), where(only_this, product, zero));
  };
  Grads r(3);
  if (c.needs_grad[0]) r[0] = g * others(x, x_zero, nonzero, zeros_at);
  if (c.needs_grad[2])
    r[2] = padded_to(gather(g, axis, index) * others(src, src_zero, gather(nonzero, axis, index), gather(zeros_at, axis, index)),
                     c.inputs[2]);
  return r;
}

// Every value equal to the result shares its gradient evenly, as in PyTorch.
Grads extreme_grads(const GradContext& c, const Tensor& g) {
  const Tensor &x = c.inputs[0], &index = c.inputs[1], src = used_part(c.inputs[2], index), &y = c.outputs[0];
  const int64_t axis = c.attrs.get_int("axis");
  const Tensor x_hit = cast(eq(x, y), x.dtype()), src_hit = cast(eq(src, gather(y, axis, index)), x.dtype());
  const Tensor share = g / scatter_add(x_hit, axis, index, src_hit);
  Grads r(3);
  if (c.needs_grad[0]) r[0] = share * x_hit;
  if (c.needs_grad[2]) r[2] = padded_to(gather(share, axis, index) * src_hit, c.inputs[2]);
  return r;
}

void write_scatter_reduce(OnnxWriter& w) {
  const std::string reduce = w.attrs().get_string("reduce", "prod");
  // max and min came with opset 18, past the opsets Kiln writes (13 to 17).
  KILN_CHECK(reduce == "prod" || w.opset() >= 18, "export: scatter_reduce '", reduce,
             "' is ONNX ScatterElements with reduction '", onnx_reduction(reduce),
             "', which needs opset 18; Kiln writes opsets 13 to 17, so a model using it runs in Kiln but cannot be "
             "exported yet");
  KILN_CHECK(w.opset() >= 16, "export: scatter_reduce 'prod' is ONNX ScatterElements with reduction 'mul', which "
             "needs opset 16 or later; export with opset 16 or 17 (the default)");
  w.node("ScatterElements", {w.in(0), w.in(1), detail::updates_like_index(w)}, {w.out()},
         {{"axis", w.attrs().get_int("axis")}, {"reduction", std::string(onnx_reduction(reduce))}});
}

OpDefiner d_scatter_reduce([] {
  OpDef d = detail::make_op(
      "scatter_reduce", {"x", "index", "src"}, {"axis:int", "reduce:string=prod|amax|amin"},
      detail::infer_scatter,
      [](const GradContext& c, const Grads& g) -> Grads {
        return c.attrs.get_string("reduce", "prod") == "prod" ? product_grads(c, g[0]) : extreme_grads(c, g[0]);
      },
      {{"Slice", "ScatterElements"}, write_scatter_reduce});
  d.differentiable_inputs = {0, 2};
  return d;
}());

}  // namespace

Tensor scatter_reduce(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, const std::string& reduce) {
  if (reduce == "sum") return scatter_add(x, axis, index, src);
  return call1(KILN_OP("scatter_reduce"), {x, index, src}, {{"axis", axis}, {"reduce", reduce}});
}

}  // namespace kiln
