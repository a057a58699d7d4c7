// Normalization (batch, layer, group) and dropout. Forward ops return their
// saved statistics as extra outputs; the gradients are written with Kiln ops.
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

// y = xhat * w + b with xhat = (x - mean) * rstd; given g = dL/dy and
// reduction axes, returns dL/dx for statistics computed over those axes.
Tensor normalized_input_grad(const Tensor& gxhat, const Tensor& xhat, const Tensor& rstd, const std::vector<int64_t>& axes) {
  return rstd * (gxhat - mean(gxhat, axes, true) - xhat * mean(gxhat * xhat, axes, true));
}

Shape channel_shape(int64_t rank, int64_t c) {
  Shape s(rank, 1);
  s[1] = c;
  return s;
}

// --- ONNX forms: inference only (the saved statistics have no ONNX output) ---------
double eps_of(const OnnxWriter& w) { return w.attrs().get_float("eps", 1e-5); }

void write_batch_norm(OnnxWriter& w) {
  KILN_CHECK(!w.attrs().get_bool("training", true),
             "export: batch_norm in training mode; export calls set_train(false), so a Cell that forces "
             "training statistics cannot be exported");
  w.require_unused_from(1, "the batch statistics");
  KILN_CHECK(!w.in(3).empty() && !w.in(4).empty(),
             "export: batch_norm without running statistics has no inference form; track running statistics");
  Shape c = {w.in_shape()[1]};
  w.node("BatchNormalization",
         {w.in(0), w.in_or_filled(1, c, 1, "bn_scale"), w.in_or_filled(2, c, 0, "bn_bias"), w.in(3), w.in(4)},
         {w.out()}, {{"epsilon", eps_of(w)}});
}

void write_layer_norm(OnnxWriter& w) {
  w.require_unused_from(1, "the saved statistics");
  int64_t nd = w.attrs().get_int("normalized_ndim");
  const Shape& x = w.in_shape();
  Shape normalized(x.end() - nd, x.end());
  w.node("LayerNormalization",
         {w.in(0), w.in_or_filled(1, normalized, 1, "ln_scale"), w.in_or_filled(2, normalized, 0, "ln_bias")},
         {w.out()}, {{"axis", -nd}, {"epsilon", eps_of(w)}});
}

// GroupNormalization is an ONNX op from opset 18 on; below that,
// InstanceNormalization over [N, groups, rest], then the per-channel affine.
void write_group_norm(OnnxWriter& w) {
  w.require_unused_from(1, "the saved statistics");
  const Shape& x = w.in_shape();
  DType dt = w.dtype();
  int64_t groups = w.attrs().get_int("groups");
  std::string grouped = w.unique("gn_grouped"), normed = w.unique("gn_normed");
  w.node("Reshape", {w.in(0), w.ints({w.dynamic_batch() ? 0 : x[0], groups, -1}, "shape")}, {grouped});
  w.node("InstanceNormalization", {grouped, w.filled({groups}, 1, dt, "gn_one"), w.filled({groups}, 0, dt, "gn_zero")},
         {normed}, {{"epsilon", eps_of(w)}});
  std::vector<int64_t> shape(x.begin(), x.end());
  if (w.dynamic_batch()) shape[0] = 0;
  bool affine = !w.in(1).empty() || !w.in(2).empty();
  std::string cur = affine ? w.unique("gn_back") : w.out();
  w.node("Reshape", {normed, w.ints(shape, "shape")}, {cur});
  std::vector<int64_t> per_channel(x.size() - 1, 1);
  per_channel[0] = x[1];
  for (auto [i, op] : {std::pair{size_t{1}, "Mul"}, std::pair{size_t{2}, "Add"}}) {
    if (w.in(i).empty()) continue;
    std::string p = w.unique("gn_param"), next = (i == 2 || w.in(2).empty()) ? w.out() : w.unique("gn_scaled");
    w.node("Reshape", {w.in(i), w.ints(per_channel, "shape")}, {p});
    w.node(op, {cur, p}, {next});
    cur = next;
  }
}

void write_dropout(OnnxWriter& w) {
  KILN_CHECK(!w.attrs().get_bool("training", true), "export: dropout in training mode");
  w.require_unused_from(1, "the dropout mask");
  w.node("Identity", {w.in(0)}, {w.out()});
}

// ONNX BatchNormalization in inference form.
std::vector<Tensor> read_batch_norm(const OnnxReader& n, const std::vector<Tensor>& in) {
  if (n.i("training_mode", 0)) n.unsupported("training_mode=1 is not supported; export the model in inference mode");
  for (size_t i = 1; i < n.num_outputs(); ++i)
    if (n.output_wanted(i)) n.unsupported("the running statistics outputs (training mode) are not supported");
  return {batch_norm(n.input(in, 0), n.input(in, 1), n.input(in, 2), n.input(in, 3), n.input(in, 4), false, 0.1,
                     n.f("epsilon", 1e-5))};
}

// ONNX LayerNormalization: scale and bias broadcast to the normalized shape;
// the mean and inverse deviation outputs, where read, shaped like x with the
// normalized axes kept as 1.
std::vector<Tensor> read_layer_norm(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const int64_t axis = n.axis(n.i("axis", -1), x.dim());
  const double eps = n.f("epsilon", 1e-5);
  const Shape normalized(x.shape().begin() + axis, x.shape().end());
  Tensor scale = n.input(in, 1), bias = OnnxReader::optional(in, 2);
  if (scale.shape() != normalized) scale = scale.expand(normalized).contiguous();
  if (bias.defined() && bias.shape() != normalized) bias = bias.expand(normalized).contiguous();
  std::vector<Tensor> out = {layer_norm(x, normalized, scale, bias, eps)};
  if (n.output_wanted(1) || n.output_wanted(2)) {
    std::vector<int64_t> axes;
    for (int64_t a = axis; a < x.dim(); ++a) axes.push_back(a);
    const Tensor m = mean(x, axes, true), d = x - m;
    out.push_back(m);
    out.push_back(rsqrt(mean(d * d, axes, true) + eps));
  }
  return out;
}

// ONNX InstanceNormalization: a group norm with one channel per group.
std::vector<Tensor> read_instance_norm(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  if (x.dim() < 3) n.fail("input must be [N, C, D1, ...], got ", shape_str(x.shape()));
  return {group_norm(x, x.shape()[1], n.input(in, 1), n.input(in, 2), n.f("epsilon", 1e-5))};
}

// ONNX Dropout runs as the identity (a copy) in inference, and so does one
// whose ratio is a constant 0 in any mode (PyTorch exports attention dropout
// of p=0 that way, with training_mode=true).
std::vector<Tensor> read_dropout(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const bool training = in.size() > 2 && in[2].defined() && n.scalar_value(in[2], "training_mode") != 0;
  const double ratio = in.size() > 1 && in[1].defined() ? n.scalar_value(in[1], "ratio") : 0.5;
  if (training && ratio != 0)
    n.unsupported("training_mode=true with ratio ", ratio, " is not supported; inference runs dropout as the identity "
                  "(export the model in eval mode)");
  std::vector<Tensor> out = {x + 0.0};
  if (n.output_wanted(1)) out.push_back(ones(x.shape(), DType::Bool, x.device()));
  return out;
}

// MindSpore's BatchNorm (x, scale, bias, mean, variance) in inference mode;
// its outputs after y are the statistics, which inference graphs do not read.
std::vector<Tensor> read_mindspore_batch_norm(const OnnxReader& n, const std::vector<Tensor>& in) {
  detail::require_nchw(n);
  if (n.i("is_training", 0) != 0)
    n.unsupported("is_training=True (a training graph); export the network after net.set_train(False)");
  const Tensor &mean = n.input(in, 3), &var = n.input(in, 4);
  Tensor y = batch_norm(n.input(in, 0), n.input(in, 1), n.input(in, 2), mean, var, false, 0.1, n.f("epsilon", 1e-5));
  return {y, mean, var};
}

// MindSpore's LayerNorm: the axes from begin_norm_axis on are normalized,
// gamma and beta cover those from begin_params_axis on.
std::vector<Tensor> read_mindspore_layer_norm(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor &x = n.input(in, 0), &gamma = n.input(in, 1), &beta = n.input(in, 2);
  const int64_t norm_axis = n.axis(n.i("begin_norm_axis", 1), x.dim());
  const int64_t params_axis = n.axis(n.i("begin_params_axis", 1), x.dim());
  const Shape normalized(x.shape().begin() + norm_axis, x.shape().end());
  const double eps = n.f("epsilon", 1e-7);
  if (params_axis == norm_axis) return {layer_norm(x, normalized, gamma, beta, eps)};
  return {layer_norm(x, normalized, Tensor(), Tensor(), eps) * gamma + beta};
}

OpDefiner d_batch_norm([] {
  OpDef d;
  d.name = "batch_norm";
  d.autocast = Autocast::Float32;
  d.inputs = {"x", "weight?", "bias?", "running_mean?", "running_var?"};
  d.outputs = {"y", "saved_mean", "saved_rstd"};
  d.attrs = {"training:bool", "momentum:float=0.1", "eps:float=1e-5"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    KILN_CHECK(in[0].shape.size() >= 2, "input must be [N, C, ...], got ", shape_str(in[0].shape));
    detail::check_floating(in[0], "input");
    int64_t c = in[0].shape[1];
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].defined) {
        KILN_CHECK(in[i].shape == Shape{c}, "parameter ", i, " must have shape [", c, "] (one per channel), got ",
                   shape_str(in[i].shape));
        detail::check_same_dtype(in, 0, i);
      }
    bool training = a.get_bool("training", true);
    KILN_CHECK(training || (in.size() > 4 && in[3].defined && in[4].defined),
               "inference mode needs running_mean and running_var");
    return {in[0], {true, {c}, in[0].dtype, in[0].device}, {true, {c}, in[0].dtype, in[0].device}};
  };
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    bool has_w = c.inputs.size() > 1 && c.inputs[1].defined();
    auto outs = call("batch_norm_backward", {g[0], c.inputs[0], has_w ? c.inputs[1] : Tensor(), c.outputs[1], c.outputs[2]},
                     {{"training", c.attrs.get_bool("training", true)}});
    Grads r(c.inputs.size());
    r[0] = outs[0];
    if (has_w) r[1] = outs[1];
    if (c.inputs.size() > 2 && c.inputs[2].defined()) r[2] = outs[2];
    return r;
  };
  d.differentiable_inputs = {0, 1, 2};
  d.writes = {3, 4};  // the running statistics, in training mode
  d.writes_if = "training";
  d.onnx = {{"BatchNormalization"}, write_batch_norm};
  d.onnx_import = onnx_reader({"BatchNormalization"}, read_batch_norm);
  d.mindspore_import = onnx_reader({"BatchNorm"}, read_mindspore_batch_norm);
  d.category = "normalization";
  return d;
}());

// One pass for the parameter gradients and one for the input gradient, per channel.
OpDefiner d_batch_norm_backward([] {
  OpDef d = detail::make_op(
      "batch_norm_backward", {"grad", "x", "weight?", "saved_mean", "saved_rstd"}, {"training:bool"},
      [](const Metas& in, const Attrs&) -> Metas {
        TensorMeta c{true, {in[0].shape[1]}, in[0].dtype, in[0].device};
        return {in[1], c, c};
      },
      nullptr, {}, kTagBackward, {"grad_x", "grad_weight", "grad_bias"});
  d.category = "normalization";
  return d;
}());

// One pass per row for the input gradient, the parameter gradients summed
// over the rows alongside.
OpDefiner d_layer_norm_backward([] {
  OpDef d = detail::make_op(
      "layer_norm_backward", {"grad", "x", "weight?", "saved_mean", "saved_rstd"}, {"normalized_ndim:int"},
      [](const Metas& in, const Attrs& a) -> Metas {
        const Shape& x = in[1].shape;
        const int64_t k = a.get_int("normalized_ndim");
        KILN_CHECK(k >= 1 && k <= static_cast<int64_t>(x.size()), "normalized_ndim ", k, " for input ", shape_str(x));
        TensorMeta p{true, Shape(x.end() - k, x.end()), in[1].dtype, in[1].device};
        return {in[1], p, p};
      },
      nullptr, {}, kTagBackward, {"grad_x", "grad_weight", "grad_bias"});
  d.category = "normalization";
  return d;
}());

OpDefiner d_layer_norm([] {
  OpDef d;
  d.name = "layer_norm";
  d.autocast = Autocast::Float32;
  d.inputs = {"x", "weight?", "bias?"};
  d.outputs = {"y", "saved_mean", "saved_rstd"};
  d.attrs = {"normalized_ndim:int", "eps:float=1e-5"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    detail::check_floating(in[0], "input");
    int64_t k = a.get_int("normalized_ndim");
    const Shape& x = in[0].shape;
    KILN_CHECK(k >= 1 && k <= static_cast<int64_t>(x.size()), "normalized_shape has ", k,
               " axes but the input is ", shape_str(x));
    Shape norm(x.end() - k, x.end());
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].defined)
        KILN_CHECK(in[i].shape == norm, "parameter ", i, " must have the normalized shape ", shape_str(norm), ", got ",
                   shape_str(in[i].shape));
    Shape stat(x.begin(), x.end() - k);
    stat.insert(stat.end(), k, 1);
    return {in[0], {true, stat, in[0].dtype, in[0].device}, {true, stat, in[0].dtype, in[0].device}};
  };
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    const bool has_w = c.inputs.size() > 1 && c.inputs[1].defined();
    auto outs = call("layer_norm_backward", {g[0], c.inputs[0], has_w ? c.inputs[1] : Tensor(), c.outputs[1], c.outputs[2]},
                     {{"normalized_ndim", c.attrs.get_int("normalized_ndim")}});
    Grads r(c.inputs.size());
    r[0] = outs[0];
    if (has_w) r[1] = outs[1];
    if (c.inputs.size() > 2 && c.inputs[2].defined()) r[2] = outs[2];
    return r;
  };
  d.onnx = {{"LayerNormalization"}, write_layer_norm};
  d.onnx_import = onnx_reader({"LayerNormalization"}, read_layer_norm);
  d.mindspore_import = onnx_reader({"LayerNorm"}, read_mindspore_layer_norm);
  d.category = "normalization";
  return d;
}());

OpDefiner d_group_norm([] {
  OpDef d;
  d.name = "group_norm";
  d.autocast = Autocast::Float32;
  d.inputs = {"x", "weight?", "bias?"};
  d.outputs = {"y", "saved_mean", "saved_rstd"};
  d.attrs = {"groups:int", "eps:float=1e-5"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    detail::check_floating(in[0], "input");
    const Shape& x = in[0].shape;
    KILN_CHECK(x.size() >= 2, "input must be [N, C, ...], got ", shape_str(x));
    int64_t g = a.get_int("groups");
    KILN_CHECK(g > 0 && x[1] % g == 0, "channels (", x[1], ") must be divisible by groups (", g, ")");
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].defined)
        KILN_CHECK(in[i].shape == Shape{x[1]}, "parameter ", i, " must have shape [", x[1], "], got ", shape_str(in[i].shape));
    return {in[0], {true, {x[0], g, 1}, in[0].dtype, in[0].device}, {true, {x[0], g, 1}, in[0].dtype, in[0].device}};
  };
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    const Tensor& x = c.inputs[0];
    int64_t n = x.shape()[0], ch = x.shape()[1], groups = c.attrs.get_int("groups");
    Shape cs = channel_shape(x.dim(), ch);
    std::vector<int64_t> axes{0};
    for (int64_t i = 2; i < x.dim(); ++i) axes.push_back(i);
    Tensor xr = x.reshape({n, groups, -1});
    Tensor xhat = (xr - c.outputs[1]) * c.outputs[2];
    bool has_w = c.inputs.size() > 1 && c.inputs[1].defined();
    Tensor gxhat = (has_w ? g[0] * c.inputs[1].reshape(cs) : g[0]).reshape({n, groups, -1});
    Grads r(c.inputs.size());
    if (c.needs_grad[0]) r[0] = normalized_input_grad(gxhat, xhat, c.outputs[2], {2}).reshape(x.shape());
    Tensor xhat_full = xhat.reshape(x.shape());
    if (has_w && c.needs_grad[1]) r[1] = sum(g[0] * xhat_full, axes);
    if (c.inputs.size() > 2 && c.needs_grad[2]) r[2] = sum(g[0], axes);
    return r;
  };
  d.onnx = {{"Reshape", "InstanceNormalization", "Mul", "Add"}, write_group_norm};
  d.onnx_import = onnx_reader({"InstanceNormalization"}, read_instance_norm);
  d.category = "normalization";
  return d;
}());

OpDefiner d_dropout([] {
  OpDef d;
  d.name = "dropout";
  d.inputs = {"x"};
  d.outputs = {"y", "mask"};
  d.attrs = {"p:float", "training:bool=true"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    double p = a.get_float("p");
    KILN_CHECK(p >= 0 && p < 1, "p must be in [0, 1), got ", p);
    detail::check_floating(in[0], "input");
    return {in[0], in[0]};
  };
  // mask holds 0 or 1/(1-p), so the gradient is one multiply.
  d.grad = [](const GradContext& c, const Grads& g) -> Grads { return {g[0] * c.outputs[1]}; };
  d.onnx = {{"Identity"}, write_dropout};
  d.onnx_import = onnx_reader({"Dropout"}, read_dropout, {1, 2}, false);
  d.tags = kTagRandom;
  return d;
}());

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  return call(KILN_OP("batch_norm"), {x, weight, bias, running_mean, running_var},
              {{"training", training}, {"momentum", momentum}, {"eps", eps}})[0];
}
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1 && k <= x.dim() && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
             "layer_norm: normalized_shape ", shape_str(normalized_shape), " must match the last axes of the input ",
             x.meta_str());
  return call(KILN_OP("layer_norm"), {x, weight, bias}, {{"normalized_ndim", k}, {"eps", eps}})[0];
}
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  return call(KILN_OP("group_norm"), {x, weight, bias}, {{"groups", groups}, {"eps", eps}})[0];
}
Tensor dropout(const Tensor& x, double p, bool training) {
  if (!training || p == 0.0) return x;
  return call(KILN_OP("dropout"), {x}, {{"p", p}, {"training", training}})[0];
}

}  // namespace kiln
