// Reductions over any set of axes with keepdim, arg-reductions, softmax,
// log_softmax and sum_to (the reduction that gradients of broadcasts use).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

Metas infer_reduce(const Metas& in, const Attrs& a) {
  auto axes = detail::normalize_axes(a.get_ints("axes", {}), static_cast<int64_t>(in[0].shape.size()));
  return {{true, detail::reduced_shape(in[0].shape, axes, a.get_bool("keepdim", false)), in[0].dtype, in[0].device}};
}

std::vector<int64_t> axes_of(const GradContext& c) {
  return detail::normalize_axes(c.attrs.get_ints("axes", {}), c.inputs[0].dim());
}
bool keepdim_of(const GradContext& c) { return c.attrs.get_bool("keepdim", false); }
int64_t reduced_count(const GradContext& c) {
  int64_t n = 1;
  for (int64_t ax : axes_of(c)) n *= c.inputs[0].shape()[ax];
  return n;
}
// The reduced gradient (or output), broadcast back to the input's shape.
Tensor back(const GradContext& c, const Tensor& t) {
  return detail::unreduce(t, c.inputs[0].shape(), axes_of(c), keepdim_of(c)).expand(c.inputs[0].shape());
}

// ONNX reductions: axes as an attribute, except ReduceSum's (an input from
// opset 13 on); no axes means all of them.
OnnxExport onnx_reduce(const char* op_type, bool axes_as_input) {
  return {{op_type}, [op_type, axes_as_input](OnnxWriter& w) {
            auto axes = w.attrs().get_ints("axes", {});
            Attrs a = {{"keepdims", w.attrs().get_bool("keepdim", false)}};
            std::vector<std::string> ins = {w.in(0)};
            if (!axes.empty()) {
              if (axes_as_input) ins.push_back(w.ints(axes, "axes"));
              else a.set("axes", axes);
            }
            w.node(op_type, ins, {w.out()}, a);
          }};
}

// var and std: sum((x - mean)^2) / (count - correction), then the root.
void write_moment(OnnxWriter& w, bool take_sqrt) {
  DType dt = w.dtype();
  const Shape& s = w.in_shape();
  auto axes = detail::normalize_axes(w.attrs().get_ints("axes", {}), static_cast<int64_t>(s.size()));
  int64_t count = 1;
  for (int64_t a : axes) count *= s[a];
  double denom = static_cast<double>(std::max<int64_t>(count - w.attrs().get_int("correction", 1), 0));
  std::string mean = w.unique("var_mean"), d = w.unique("var_diff"), sq = w.unique("var_sq"), sum = w.unique("var_sum");
  w.node("ReduceMean", {w.in(0)}, {mean}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  w.node("Sub", {w.in(0), mean}, {d});
  w.node("Mul", {d, d}, {sq});
  w.node("ReduceSum", {sq, w.ints(axes, "axes")}, {sum}, {{"keepdims", w.attrs().get_bool("keepdim", false)}});
  std::string var = take_sqrt ? w.unique("var") : w.out();
  w.node("Div", {sum, w.scalar(denom, dt, "var_count")}, {var});
  if (take_sqrt) w.node("Sqrt", {var}, {w.out()});
}

Attrs reduce_attrs(const std::vector<int64_t>& axes, bool keepdim) { return {{"axes", axes}, {"keepdim", keepdim}}; }

// ONNX Reduce* (`type`): axes an attribute, or input 1 from opset `since` on;
// none means all of them unless noop_with_empty_axes. Global*Pool (`global`)
// reduces the spatial axes, keeping them. The maximum of nothing is the
// lowest value (ONNX 18), the minimum the highest.
OnnxImport reduce_reader(const std::string& op, const char* type, int since, const char* global = nullptr) {
  std::vector<std::string> types = {type};
  if (global) types.push_back(global);
  const std::string reduce_type = type;
  return onnx_reader(types, [op, reduce_type, since](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const OpDef& self = OpRegistry::instance().get(op);
    const Tensor& x = n.input(in, 0);
    std::vector<int64_t> axes;
    bool keep = true;
    if (n.op_type() == reduce_type) {
      axes = n.axes_input(in, 1, since);
      if (axes.empty() && n.i("noop_with_empty_axes", 0)) return {x + 0.0};
      for (int64_t& a : axes) a = n.axis(a, x.dim());
      if (axes.empty())
        for (int64_t i = 0; i < x.dim(); ++i) axes.push_back(i);
      keep = n.i("keepdims", 1) != 0;
    } else {
      if (x.dim() < 3) n.fail("input must be [N, C, D1, ...], got ", shape_str(x.shape()));
      for (int64_t i = 2; i < x.dim(); ++i) axes.push_back(i);
    }
    const bool extreme = op == "amax" || op == "amin";
    if (extreme && x.numel() == 0) {
      const double inf = std::numeric_limits<double>::infinity();
      return {full(detail::reduced_shape(x.shape(), detail::normalize_axes(axes, x.dim()), keep),
                   op == "amax" ? -inf : inf, x.dtype(), x.device())};
    }
    if (extreme && x.dtype() == DType::Bool)
      return {cast(call1(self, {cast(x, DType::UInt8)}, reduce_attrs(axes, keep)), DType::Bool)};
    return {call1(self, {x}, reduce_attrs(axes, keep))};
  }, {1});
}

// MindSpore's Reduce* (x, axis, keep_dims): axis a constant int or tuple,
// () for every axis.
OnnxImport mindspore_reduce_reader(const std::string& op, const char* primitive) {
  return onnx_reader({primitive}, [op](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = n.input(in, 0);
    std::vector<int64_t> axes;
    if (in.size() > 1 && in[1].defined()) axes = n.int_values(in[1], "axis");
    for (int64_t& a : axes) a = n.axis(a, x.dim());
    if (axes.empty())
      for (int64_t i = 0; i < x.dim(); ++i) axes.push_back(i);
    return {call1(OpRegistry::instance().get(op), {x}, reduce_attrs(axes, n.i("keep_dims", 0) != 0))};
  });
}

OpDef reduction(const char* name, OnnxExport onnx, GradFn grad) {
  OpDef d;
  d.name = name;
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {"axes:ints=[] (all)", "keepdim:bool=false"};
  d.infer = infer_reduce;
  d.grad = std::move(grad);
  d.onnx = std::move(onnx);
  d.tags = kTagReduction | (d.grad ? 0u : static_cast<uint32_t>(kTagNondifferentiable));
  return d;
}

// Gradient of max/min: split evenly among the positions that hit the extreme.
Tensor extreme_grad(const GradContext& c, const Tensor& g) {
  const Tensor& x = c.inputs[0];
  Tensor mask = cast(eq(x, back(c, c.outputs[0])), x.dtype());
  Tensor count = detail::unreduce(sum(mask, axes_of(c), true), x.shape(), axes_of(c), true);
  return back(c, g) * mask / count;
}

OpDefiner d_sum(detail::reads_mindspore(detail::reads_onnx(reduction("sum", onnx_reduce("ReduceSum", true), [](const GradContext& c, const Grads& g) -> Grads {
  return {back(c, g[0]).contiguous()};
}), reduce_reader("sum", "ReduceSum", 13)), mindspore_reduce_reader("sum", "ReduceSum")));
OpDefiner d_mean(detail::reads_mindspore(detail::reads_onnx(reduction("mean", onnx_reduce("ReduceMean", false), [](const GradContext& c, const Grads& g) -> Grads {
  return {back(c, g[0] / static_cast<double>(reduced_count(c)))};
}), reduce_reader("mean", "ReduceMean", 18, "GlobalAveragePool")), mindspore_reduce_reader("mean", "ReduceMean")));
OpDefiner d_amax(detail::reads_mindspore(detail::reads_onnx(reduction("amax", onnx_reduce("ReduceMax", false), [](const GradContext& c, const Grads& g) -> Grads {
  return {extreme_grad(c, g[0])};
}), reduce_reader("amax", "ReduceMax", 18, "GlobalMaxPool")), mindspore_reduce_reader("amax", "ReduceMax")));
OpDefiner d_amin(detail::reads_mindspore(detail::reads_onnx(reduction("amin", onnx_reduce("ReduceMin", false), [](const GradContext& c, const Grads& g) -> Grads {
  return {extreme_grad(c, g[0])};
}), reduce_reader("amin", "ReduceMin", 18)), mindspore_reduce_reader("amin", "ReduceMin")));
OpDefiner d_prod(detail::reads_mindspore(detail::reads_onnx(reduction("prod", onnx_reduce("ReduceProd", false), [](const GradContext& c, const Grads& g) -> Grads {
  // y / x, valid where x != 0 (PyTorch takes the same shortcut off the zero path).
  return {back(c, g[0]) * back(c, c.outputs[0]) / c.inputs[0]};
}), reduce_reader("prod", "ReduceProd", 18)), mindspore_reduce_reader("prod", "ReduceProd")));
OpDefiner d_logsumexp(detail::reads_onnx(reduction("logsumexp", onnx_reduce("ReduceLogSumExp", false), [](const GradContext& c, const Grads& g) -> Grads {
  return {back(c, g[0]) * exp(c.inputs[0] - back(c, c.outputs[0]))};
}), reduce_reader("logsumexp", "ReduceLogSumExp", 18)));

OpDef moment(const char* name, bool is_std) {
  OnnxExport onnx{{"ReduceMean", "Sub", "Mul", "ReduceSum", "Div", "Sqrt"},
                  [is_std](OnnxWriter& w) { write_moment(w, is_std); }};
  OpDef d = reduction(name, std::move(onnx), [is_std](const GradContext& c, const Grads& g) -> Grads {
    const Tensor& x = c.inputs[0];
    auto axes = axes_of(c);
    double denom = static_cast<double>(reduced_count(c) - c.attrs.get_int("correction", 1));
    Tensor centered = x - mean(x, axes, true);
    Tensor gy = is_std ? g[0] / (c.outputs[0] * 2.0) : g[0];
    return {back(c, gy) * centered * (2.0 / denom)};
  });
  d.attrs.push_back("correction:int=1");
  return d;
}
OpDefiner d_var(moment("var", false));
OpDefiner d_std(moment("std", true));

OpDef arg_reduction(const char* name, const char* onnx_type) {
  OpDef d;
  d.name = name;
  d.inputs = {"x"};
  d.outputs = {"indices"};
  d.attrs = {"axis:int", "keepdim:bool=false"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    int64_t ax = normalize_axis(a.get_int("axis"), static_cast<int64_t>(in[0].shape.size()));
    KILN_CHECK(in[0].shape.empty() || in[0].shape[ax] > 0, "cannot take the arg-extreme of an empty axis ", ax);
    return {{true, detail::reduced_shape(in[0].shape, {ax}, a.get_bool("keepdim", false)), DType::Int64, in[0].device}};
  };
  d.onnx = onnx_as(onnx_type, [](const OnnxWriter& w) -> Attrs {
    return {{"axis", w.attrs().get_int("axis")}, {"keepdims", w.attrs().get_bool("keepdim", false)}};
  });
  // select_last_index: search the reversed axis and map the index back.
  const std::string op = name;
  d.onnx_import = onnx_reader({onnx_type}, [op](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const OpDef& self = OpRegistry::instance().get(op);
    const Tensor& x = n.input(in, 0);
    const int64_t axis = n.axis(n.i("axis", 0), x.dim());
    const Attrs a{{"axis", axis}, {"keepdim", n.i("keepdims", 1) != 0}};
    if (!n.i("select_last_index", 0)) return call(self, {x}, a);
    const int64_t dim = x.shape()[axis];
    std::vector<int64_t> reversed;
    for (int64_t i = dim - 1; i >= 0; --i) reversed.push_back(i);
    const Tensor flipped = index_select(x, axis, from_vector(reversed, Shape{dim}));
    return {scalar_tensor(static_cast<double>(dim - 1), DType::Int64) - call1(self, {flipped}, a)};
  });
  d.tags = kTagReduction | kTagNondifferentiable;
  return d;
}
// MindSpore's Argmax (axis, output_type, int32 by default) and
// ArgMaxWithValue (axis, keep_dims), which also gives the maxima.
std::vector<Tensor> read_mindspore_argmax(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const int64_t axis = n.axis(n.i("axis", n.op_type() == "Argmax" ? -1 : 0), x.dim());
  if (n.op_type() == "Argmax") return {cast(argmax(x, axis), n.has("output_type") ? n.dtype("output_type") : DType::Int32)};
  const bool keep = n.i("keep_dims", 0) != 0;
  return {cast(argmax(x, axis, keep), DType::Int32), amax(x, {axis}, keep)};
}
OpDefiner d_argmax(detail::reads_mindspore(arg_reduction("argmax", "ArgMax"),
                                           onnx_reader({"Argmax", "ArgMaxWithValue"}, read_mindspore_argmax)));
OpDefiner d_argmin(arg_reduction("argmin", "ArgMin"));

// Whether every value of every input is finite, as a bool scalar: the check
// of the gradients before a loss-scaled update, on the device and inside a
// compiled step (MindSpore's amp.all_finite).
OpDefiner d_all_finite(detail::autocast_as(detail::make_op(
    "all_finite", {"tensors*"}, {},
    [](const Metas& in, const Attrs&) -> Metas {
      KILN_CHECK(!in.empty(), "all_finite takes at least one tensor");
      TensorMeta m = in[0];
      m.shape = {};
      m.dtype = DType::Bool;
      return {m};
    },
    {}, {}, kTagReduction), Autocast::Keep));

OpDef softmax_like(const char* name, const char* onnx_type, GradFn grad) {
  OpDef d;
  d.name = name;
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {"axis:int=-1"};
  d.autocast = Autocast::Float32;
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    detail::check_floating(in[0], "x");
    normalize_axis(a.get_int("axis", -1), static_cast<int64_t>(in[0].shape.size()));
    return {in[0]};
  };
  d.grad = std::move(grad);
  d.onnx = onnx_as(onnx_type, [](const OnnxWriter& w) -> Attrs { return {{"axis", w.attrs().get_int("axis", -1)}}; });
  // Before opset 13, Softmax and LogSoftmax flatten the input to 2-d at `axis`.
  const std::string op = name;
  d.onnx_import = onnx_reader({onnx_type}, [op](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const OpDef& self = OpRegistry::instance().get(op);
    const Tensor& x = n.input(in, 0);
    if (n.opset() >= 13) return call(self, {x}, {{"axis", n.axis(n.i("axis", -1), x.dim())}});
    const int64_t axis = x.dim() == 0 ? 0 : n.axis(n.i("axis", 1), x.dim());
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[i];
    Tensor flat = x.reshape({outer, x.numel() / std::max<int64_t>(outer, 1)});
    return {call1(self, {flat}, {{"axis", int64_t{1}}}).reshape(x.shape())};
  });
  // MindSpore's Softmax takes its axis as a one-element tuple, LogSoftmax as an int.
  d.mindspore_import = onnx_reader({onnx_type}, [op](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = n.input(in, 0);
    const std::vector<int64_t> axis = n.ints("axis", {-1});
    if (axis.size() != 1) n.unsupported("a softmax over ", axis.size(), " axes at once");
    return call(OpRegistry::instance().get(op), {x}, {{"axis", n.axis(axis[0], x.dim())}});
  });
  return d;
}
OpDefiner d_softmax(softmax_like("softmax", "Softmax", [](const GradContext& c, const Grads& g) -> Grads {
  const Tensor& y = c.outputs[0];
  int64_t ax = c.attrs.get_int("axis", -1);
  return {y * (g[0] - sum(g[0] * y, {ax}, true))};
}));
OpDefiner d_log_softmax(softmax_like("log_softmax", "LogSoftmax", [](const GradContext& c, const Grads& g) -> Grads {
  const Tensor& y = c.outputs[0];
  int64_t ax = c.attrs.get_int("axis", -1);
  return {g[0] - exp(y) * sum(g[0], {ax}, true)};
}));

}  // namespace

// A bool tensor sums to a count (int64), as in NumPy, PyTorch and MindSpore.
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return call1(KILN_OP("sum"), {x.dtype() == DType::Bool ? cast(x, DType::Int64) : x}, reduce_attrs(axes, keepdim));
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return call1(KILN_OP("mean"), {x}, reduce_attrs(axes, keepdim));
}
Tensor amax(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return call1(KILN_OP("amax"), {x}, reduce_attrs(axes, keepdim));
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return call1(KILN_OP("amin"), {x}, reduce_attrs(axes, keepdim));
}
Tensor prod(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return call1(KILN_OP("prod"), {x}, reduce_attrs(axes, keepdim));
}
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return call1(KILN_OP("logsumexp"), {x}, reduce_attrs(axes, keepdim));
}
Tensor var(const Tensor& x, const std::vector<int64_t>& axes, int64_t correction, bool keepdim) {
  Attrs a = reduce_attrs(axes, keepdim);
  a.set("correction", correction);
  return call1(KILN_OP("var"), {x}, a);
}
Tensor std(const Tensor& x, const std::vector<int64_t>& axes, int64_t correction, bool keepdim) {
  Attrs a = reduce_attrs(axes, keepdim);
  a.set("correction", correction);
  return call1(KILN_OP("std"), {x}, a);
}
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) {
  return call1(KILN_OP("argmax"), {x}, {{"axis", axis}, {"keepdim", keepdim}});
}
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim) {
  return call1(KILN_OP("argmin"), {x}, {{"axis", axis}, {"keepdim", keepdim}});
}
Tensor all_finite(const std::vector<Tensor>& tensors) { return call1(KILN_OP("all_finite"), tensors); }
Tensor softmax(const Tensor& x, int64_t axis) { return call1(KILN_OP("softmax"), {x}, {{"axis", axis}}); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return call1(KILN_OP("log_softmax"), {x}, {{"axis", axis}}); }

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  KILN_CHECK(lead >= 0, "sum_to: cannot reduce ", shape_str(x.shape()), " to the larger rank of ", shape_str(shape));
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) axes.push_back(i);
  Tensor s = axes.empty() ? x : sum(x, axes, true);
  return s.reshape(shape);
}

}  // namespace kiln
