// Fused losses: cross_entropy (label smoothing, ignore_index, class weights),
// nll, mse, l1, smooth_l1, binary_cross_entropy_with_logits.
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

TensorMeta reduced_meta(const TensorMeta& per_item, const Attrs& a) {
  if (detail::reduction_attr(a) == "none") return per_item;
  return {true, {}, per_item.dtype, per_item.device};
}

Metas infer_class_loss(const Metas& in, const Attrs& a) {
  detail::check_floating(in[0], "input");
  detail::check_rank(in[0], 2, "input", "N, C (kiln::cross_entropy moves extra axes for you)");
  KILN_CHECK(in[1].dtype == DType::Int64 || in[1].dtype == DType::Int32, "target must hold class indices (int64), got ",
             dtype_name(in[1].dtype), "; for class probabilities pass a float target of the input's shape to "
             "kiln::cross_entropy (or soft_cross_entropy), which computes the soft-target loss");
  KILN_CHECK(in[1].shape == Shape{in[0].shape[0]}, "target must have shape [", in[0].shape[0], "] to match input ",
             shape_str(in[0].shape), ", got ", shape_str(in[1].shape));
  if (in.size() > 2 && in[2].defined) {
    KILN_CHECK(in[2].shape == Shape{in[0].shape[1]}, "weight must have one value per class ([", in[0].shape[1],
               "]), got ", shape_str(in[2].shape));
    detail::check_same_dtype(in, 0, 2);
  }
  double ls = a.get_float("label_smoothing", 0.0);
  KILN_CHECK(ls >= 0 && ls <= 1, "label_smoothing must be in [0, 1], got ", ls);
  return {reduced_meta({true, {in[0].shape[0]}, in[0].dtype, in[0].device}, a)};
}

// ONNX's class losses take scores, class indices and optional class weights,
// with ignore_index and reduction as Kiln's; they have no label smoothing.
OnnxExport onnx_class_loss(const char* op_type) {
  return {{op_type}, [op_type](OnnxWriter& w) {
            const Attrs& a = w.attrs();
            KILN_CHECK(a.get_float("label_smoothing", 0.0) == 0.0, "export: ", w.where(),
                       " uses label smoothing, which ONNX ", op_type, " does not have; export the model without its loss");
            w.node(op_type, {w.in(0), w.in(1), w.in(2)}, {w.out()},
                   {{"ignore_index", a.get_int("ignore_index", -100)}, {"reduction", detail::reduction_attr(a)}});
          }};
}

// mse and l1: the difference, squared (Mul) or taken absolute (Abs), reduced.
OnnxExport onnx_pointwise_loss(const char* op_type) {
  return {{"Sub", op_type, "ReduceMean", "ReduceSum"}, [op_type = std::string(op_type)](OnnxWriter& w) {
            std::string reduction = detail::reduction_attr(w.attrs());
            std::string d = w.unique("loss_diff"), e = reduction == "none" ? w.out() : w.unique("loss_items");
            w.node("Sub", {w.in(0), w.in(1)}, {d});
            w.node(op_type, op_type == "Mul" ? std::vector<std::string>{d, d} : std::vector<std::string>{d}, {e});
            if (reduction != "none")
              w.node(reduction == "mean" ? "ReduceMean" : "ReduceSum", {e}, {w.out()}, {{"keepdims", int64_t{0}}});
          }};
}

OpDef loss_op(const char* name, std::vector<std::string> inputs, std::vector<std::string> attrs, InferFn infer, GradFn grad,
              OnnxExport onnx) {
  return detail::make_op(name, std::move(inputs), std::move(attrs), std::move(infer), std::move(grad), std::move(onnx), kTagLoss,
                         {"loss"});
}

// ONNX SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: scores
// [N, C, ...] with class indices [N, ...] and optional class weights; without
// ignore_index no target is ignored. The first also returns log_prob.
std::vector<Tensor> read_class_loss(const OnnxReader& n, const std::vector<Tensor>& in, bool softmax) {
  const Tensor& x = n.input(in, 0);
  Tensor target = n.input(in, 1);
  if (is_floating(target.dtype())) n.fail("labels must be integer class indices, got ", dtype_name(target.dtype()));
  if (target.dtype() != DType::Int64) target = cast(target, DType::Int64);
  CrossEntropyOptions o;
  o.reduction = n.s("reduction", "mean");
  if (o.reduction != "mean" && o.reduction != "sum" && o.reduction != "none")
    n.fail("reduction must be mean, sum or none, got '", o.reduction, "'");
  o.ignore_index = n.has("ignore_index") ? n.i("ignore_index", 0) : std::numeric_limits<int64_t>::min();
  o.weight = OnnxReader::optional(in, 2);
  if (!softmax) return {nll_loss(x, target, o)};
  const Tensor log_prob = log_softmax(x, 1);
  std::vector<Tensor> out = {nll_loss(log_prob, target, o)};
  if (n.output_wanted(1)) out.push_back(log_prob);
  return out;
}

OpDefiner d_ce([] {
  OpDef d = loss_op(
      "cross_entropy", {"input", "target", "weight?"},
      {"ignore_index:int=-100", "label_smoothing:float=0", "reduction:string=mean|sum|none"}, infer_class_loss,
      [](const GradContext& c, const Grads& g) -> Grads {
        std::vector<Tensor> ins{g[0], c.inputs[0], c.inputs[1]};
        if (c.inputs.size() > 2) ins.push_back(c.inputs[2]);
        return {call("cross_entropy_backward", ins, c.attrs)[0]};
      },
      onnx_class_loss("SoftmaxCrossEntropyLoss"));
  d.differentiable_inputs = {0};
  d.onnx_import = onnx_reader({"SoftmaxCrossEntropyLoss"}, [](const OnnxReader& n, const std::vector<Tensor>& in) {
    return read_class_loss(n, in, true);
  });
  return d;
}());

OpDefiner d_ce_bw([] {
  OpDef d = loss_op("cross_entropy_backward", {"grad", "input", "target", "weight?"},
                    {"ignore_index", "label_smoothing", "reduction"},
                    [](const Metas& in, const Attrs&) -> Metas { return {in[1]}; }, nullptr, {});
  d.tags = kTagBackward | kTagNondifferentiable;
  d.dispatch_input = 1;
  return d;
}());

OpDefiner d_nll([] {
  OpDef d = loss_op(
      "nll_loss", {"input", "target", "weight?"}, {"ignore_index:int=-100", "reduction:string=mean|sum|none"},
      infer_class_loss,
      [](const GradContext& c, const Grads& g) -> Grads {
        // d loss_i / d input[i, t_i] = -w_{t_i} (scaled by the reduction), 0 elsewhere.
        const Tensor &x = c.inputs[0], &t = c.inputs[1];
        int64_t ignore = c.attrs.get_int("ignore_index", -100);
        int64_t classes = x.shape()[1];
        Tensor valid = ne(t, scalar_tensor(static_cast<double>(ignore), t.dtype()));
        Tensor safe_t = where(valid, t, zeros({}, t.dtype()));
        Tensor w_t = c.inputs.size() > 2 && c.inputs[2].defined() ? index_select(c.inputs[2], 0, safe_t)
                                                                  : ones({x.shape()[0]}, x.dtype(), x.device());
        w_t = w_t * cast(valid, x.dtype());
        Tensor scale = g[0];
        if (detail::reduction_attr(c.attrs) == "mean") scale = scale / sum(w_t);
        Tensor coeff = (w_t * scale).reshape({-1, 1}) * -1.0;
        return {cast(one_hot(safe_t, classes), x.dtype()) * coeff, Tensor()};
      },
      onnx_class_loss("NegativeLogLikelihoodLoss"));
  d.differentiable_inputs = {0};
  d.onnx_import = onnx_reader({"NegativeLogLikelihoodLoss"}, [](const OnnxReader& n, const std::vector<Tensor>& in) {
    return read_class_loss(n, in, false);
  });
  return d;
}());

Metas infer_pointwise(const Metas& in, const Attrs& a) {
  detail::check_floating(in[0], "input");
  detail::check_same_dtype(in, 0, 1);
  KILN_CHECK(in[0].shape == in[1].shape, "input ", shape_str(in[0].shape), " and target ", shape_str(in[1].shape),
             " must have the same shape");
  return {reduced_meta(in[0], a)};
}

// The upstream gradient spread over the elements: g / n for "mean".
Tensor spread(const GradContext& c, const Tensor& g) {
  if (detail::reduction_attr(c.attrs) == "mean") return g / static_cast<double>(std::max<int64_t>(c.inputs[0].numel(), 1));
  return g;
}

GradFn pointwise_grad(Tensor (*dloss_dinput)(const Tensor& x, const Tensor& y, const Attrs& a), bool target_mirrors) {
  return [=](const GradContext& c, const Grads& g) -> Grads {
    Tensor gx = dloss_dinput(c.inputs[0], c.inputs[1], c.attrs) * spread(c, g[0]);
    Grads r{gx, Tensor()};
    if (c.needs_grad[1]) {
      r[1] = target_mirrors ? neg(gx) : neg(c.inputs[0]) * spread(c, g[0]);
    }
    return r;
  };
}

OpDefiner d_mse(loss_op("mse_loss", {"input", "target"}, {"reduction:string=mean|sum|none"}, infer_pointwise,
                        pointwise_grad([](const Tensor& x, const Tensor& y, const Attrs&) { return (x - y) * 2.0; }, true),
                        onnx_pointwise_loss("Mul")));
OpDefiner d_l1(loss_op("l1_loss", {"input", "target"}, {"reduction:string=mean|sum|none"}, infer_pointwise,
                       pointwise_grad([](const Tensor& x, const Tensor& y, const Attrs&) { return sign(x - y); }, true),
                       onnx_pointwise_loss("Abs")));
OpDefiner d_smooth_l1(loss_op(
    "smooth_l1_loss", {"input", "target"}, {"reduction:string=mean|sum|none", "beta:float=1"}, infer_pointwise,
    pointwise_grad(
        [](const Tensor& x, const Tensor& y, const Attrs& a) {
          double beta = a.get_float("beta", 1.0);
          Tensor d = x - y;
          if (beta == 0) return sign(d);
          return where(lt(abs(d), scalar_tensor(beta, d.dtype())), d / beta, sign(d));
        },
        true),
    {}));
OpDefiner d_bce(loss_op("binary_cross_entropy_with_logits", {"input", "target"}, {"reduction:string=mean|sum|none"},
                        infer_pointwise,
                        pointwise_grad([](const Tensor& x, const Tensor& y, const Attrs&) { return sigmoid(x) - y; }, false),
                        {}));

// Moves the class axis of [N, C, d1, ...] last and flattens: [N*d1*..., C].
std::pair<Tensor, Tensor> flatten_classes(const Tensor& input, const Tensor& target) {
  if (input.dim() <= 2) return {input, target};
  std::vector<int64_t> order{0};
  for (int64_t i = 2; i < input.dim(); ++i) order.push_back(i);
  order.push_back(1);
  return {input.permute(order).reshape({-1, input.shape()[1]}), target.reshape({-1})};
}

Tensor class_loss(const OpDef& op, const Tensor& input, const Tensor& target, const CrossEntropyOptions& o, bool smoothing) {
  KILN_CHECK(input.dim() >= 1, op.name, ": input must be [N, C, ...] or [C], got ", input.meta_str());
  KILN_CHECK(!is_floating(target.dtype()), op.name, ": a float target holds class probabilities (the soft-target loss) "
             "and must have the input's shape ", input.meta_str(), ", got ", target.meta_str(),
             "; class indices go as int64 without the class axis");
  if (input.dim() == 1) return class_loss(op, input.unsqueeze(0), target.reshape({1}), o, smoothing).reshape({});
  if (o.classes_last && input.dim() > 2) {
    Shape lead(input.shape().begin(), input.shape().end() - 1);
    KILN_CHECK(target.shape() == lead, op.name, ": with classes_last, target must have the shape of input ",
               input.meta_str(), " without its last axis, got ", target.meta_str());
    CrossEntropyOptions flat = o;
    flat.classes_last = false;
    Tensor loss = class_loss(op, input.reshape({-1, input.shape().back()}), target.reshape({-1}), flat, smoothing);
    return o.reduction == "none" ? loss.reshape(lead) : loss;
  }
  KILN_CHECK(target.dim() == input.dim() - 1, op.name, ": target ", target.meta_str(), " must have the shape of input ",
             input.meta_str(), " without the class axis 1");
  auto [x, t] = flatten_classes(input, target);
  Attrs a{{"ignore_index", o.ignore_index}, {"reduction", o.reduction}};
  if (smoothing) a.set("label_smoothing", o.label_smoothing);
  Tensor loss = call1(op, {x, t, o.weight}, a);
  if (o.reduction == "none" && input.dim() > 2) return loss.reshape(target.shape());
  return loss;
}

}  // namespace

Tensor soft_cross_entropy(const Tensor& logits, const Tensor& probs, const CrossEntropyOptions& o) {
  KILN_CHECK(is_floating(probs.dtype()) && probs.shape() == logits.shape(), "soft_cross_entropy: the target ",
             probs.meta_str(), " must hold class probabilities of the logits' shape ", logits.meta_str(),
             " (class indices go to cross_entropy as int64 [N])");
  const int64_t axis = logits.dim() == 1 || o.classes_last ? -1 : 1, classes = logits.size(axis);
  Tensor p = probs.dtype() == logits.dtype() ? probs : probs.to(logits.dtype());
  if (o.label_smoothing > 0) p = p * (1.0 - o.label_smoothing) + o.label_smoothing / static_cast<double>(classes);
  if (o.weight.defined()) {
    KILN_CHECK(o.weight.shape() == Shape{classes}, "soft_cross_entropy: weight must have one value per class ([",
               classes, "]), got ", o.weight.meta_str());
    Shape at(static_cast<size_t>(logits.dim()), 1);
    at[static_cast<size_t>(axis < 0 ? logits.dim() - 1 : axis)] = classes;
    p = p * o.weight.reshape(at);
  }
  Tensor per_item = neg(sum(p * log_softmax(logits, axis), {axis}));
  const std::string& r = detail::reduction_attr(Attrs{{"reduction", o.reduction}});
  return r == "none" ? per_item : r == "sum" ? sum(per_item) : mean(per_item);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  // Probabilities (distillation, mixup, smoothed labels) take the soft-target form.
  if (is_floating(target.dtype()) && target.shape() == logits.shape()) return soft_cross_entropy(logits, target, o);
  return class_loss(KILN_OP("cross_entropy"), logits, target, o, true);
}
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& o) {
  return class_loss(KILN_OP("nll_loss"), log_probs, target, o, false);
}
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  return call1(KILN_OP("mse_loss"), {input, target}, {{"reduction", reduction}});
}
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction) {
  return call1(KILN_OP("l1_loss"), {input, target}, {{"reduction", reduction}});
}
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction, double beta) {
  KILN_CHECK(beta >= 0, "smooth_l1_loss: beta must be >= 0, got ", beta);
  return call1(KILN_OP("smooth_l1_loss"), {input, target}, {{"reduction", reduction}, {"beta", beta}});
}
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const std::string& reduction) {
  return call1(KILN_OP("binary_cross_entropy_with_logits"), {logits, target}, {{"reduction", reduction}});
}

}  // namespace kiln
