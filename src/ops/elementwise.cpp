// Elementwise ops: unary math and activations, binary arithmetic with
// broadcasting, comparisons, where, cast, and the activation backward ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "ops/elementwise_formulas.h"
#include "ops/elementwise_math.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;
using namespace formulas;

constexpr uint32_t kEw = kTagElementwise | kTagFusible;

OpDef unary(const char* name, OnnxExport onnx, GradFn grad, std::vector<std::string> attrs = {}) {
  OpDef d;
  d.name = name;
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = std::move(attrs);
  d.infer = detail::same_as_input;
  d.grad = std::move(grad);
  d.onnx = std::move(onnx);
  d.tags = kEw | (d.grad ? 0u : static_cast<uint32_t>(kTagNondifferentiable));
  return d;
}

Metas infer_binary(const Metas& in, const Attrs&) {
  detail::check_same_dtype(in, 0, 1);
  Metas out(1);  // filled in place: a braced list would copy the shape
  out[0] = {true, broadcast_shapes(in[0].shape, in[1].shape), in[0].dtype, in[0].device};
  return out;
}

Metas infer_compare(const Metas& in, const Attrs& a) {
  auto out = infer_binary(in, a);
  out[0].dtype = DType::Bool;
  return out;
}

OpDef binary(const char* name, OnnxExport onnx, GradFn grad, bool compare = false) {
  OpDef d;
  d.name = name;
  d.inputs = {"a", "b"};
  d.outputs = {"y"};
  d.infer = compare ? infer_compare : infer_binary;
  d.grad = std::move(grad);
  d.onnx = std::move(onnx);
  d.tags = kEw | (d.grad ? 0u : static_cast<uint32_t>(kTagNondifferentiable));
  return d;
}

// Backward of an activation: (grad, saved) -> grad of the input.
OpDef activation_backward(const char* name, std::vector<std::string> attrs = {}) {
  OpDef d;
  d.name = name;
  d.inputs = {"grad", "saved"};
  d.outputs = {"grad_x"};
  d.attrs = std::move(attrs);
  d.infer = infer_binary;
  d.tags = kEw | kTagBackward | kTagNondifferentiable;
  return d;
}

const Tensor& X(const GradContext& c) { return c.inputs[0]; }
const Tensor& Y(const GradContext& c) { return c.outputs[0]; }

Tensor bw(const char* op, const Tensor& g, const Tensor& saved, const Attrs& attrs = {}) {
  return call(op, {g, saved}, attrs)[0];
}

template <class F>
OpDef with_math(OpDef d) {
  d.math = detail::elementwise_math<F>();
  return d;
}

// --- ONNX forms that take more than one node ------------------------------------
void write_log1p(OnnxWriter& w) {
  std::string s = w.unique("one_plus");
  w.node("Add", {w.in(0), w.scalar(1, w.dtype(), "one")}, {s});
  w.node("Log", {s}, {w.out()});
}
void write_rsqrt(OnnxWriter& w) {
  std::string s = w.unique("sqrt");
  w.node("Sqrt", {w.in(0)}, {s});
  w.node("Reciprocal", {s}, {w.out()});
}
void write_silu(OnnxWriter& w) {
  std::string s = w.unique("sigmoid");
  w.node("Sigmoid", {w.in(0)}, {s});
  w.node("Mul", {w.in(0), s}, {w.out()});
}
void write_ne(OnnxWriter& w) {
  std::string s = w.unique("equal");
  w.node("Equal", {w.in(0), w.in(1)}, {s});
  w.node("Not", {s}, {w.out()});
}
// Gelu is an ONNX op from opset 20 on; below that, its formula.
void write_gelu(OnnxWriter& w) {
  DType dt = w.dtype();
  std::string x = w.in(0), inner;
  if (w.attrs().get_string("approximate", "none") == "tanh") {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    std::string x3 = w.unique("gelu_x3"), c = w.unique("gelu_c"), t = w.unique("gelu_t"), s = w.unique("gelu_s");
    inner = w.unique("gelu_u");
    w.node("Pow", {x, w.scalar(3, dt, "three")}, {x3});
    w.node("Mul", {x3, w.scalar(0.044715, dt, "gelu_k")}, {c});
    w.node("Add", {x, c}, {t});
    w.node("Mul", {t, w.scalar(std::sqrt(2.0 / M_PI), dt, "gelu_sqrt_2_over_pi")}, {s});
    w.node("Tanh", {s}, {inner});
  } else {
    // 0.5 x (1 + erf(x / sqrt(2)))
    std::string d = w.unique("gelu_scaled");
    inner = w.unique("gelu_erf");
    w.node("Mul", {x, w.scalar(M_SQRT1_2, dt, "gelu_rsqrt2")}, {d});
    w.node("Erf", {d}, {inner});
  }
  std::string p = w.unique("gelu_1p"), h = w.unique("gelu_half_x");
  w.node("Add", {inner, w.scalar(1, dt, "one")}, {p});
  w.node("Mul", {x, w.scalar(0.5, dt, "half")}, {h});
  w.node("Mul", {h, p}, {w.out()});
}
// ONNX Softplus has no beta: softplus(beta x) / beta.
void write_softplus(OnnxWriter& w) {
  double beta = w.attrs().get_float("beta", 1.0);
  if (beta == 1.0) {
    w.node("Softplus", {w.in(0)}, {w.out()});
    return;
  }
  std::string bx = w.unique("beta_x"), sp = w.unique("softplus");
  w.node("Mul", {w.in(0), w.scalar(beta, w.dtype(), "beta")}, {bx});
  w.node("Softplus", {bx}, {sp});
  w.node("Div", {sp, w.scalar(beta, w.dtype(), "beta")}, {w.out()});
}
void write_clamp(OnnxWriter& w) {
  const Attrs& a = w.attrs();
  std::string lo = a.has("min") ? w.scalar(a.get_float("min"), w.dtype(), "min") : "";
  std::string hi = a.has("max") ? w.scalar(a.get_float("max"), w.dtype(), "max") : "";
  w.node("Clip", {w.in(0), lo, hi}, {w.out()});
}

// --- unary -----------------------------------------------------------------
OpDefiner d_neg(detail::read_mindspore_as(detail::read_onnx_as(with_math<Neg>(unary("neg", onnx_as("Neg"), [](const GradContext&, const Grads& g) -> Grads { return {neg(g[0])}; })), "Neg"), {"Neg"}));
OpDefiner d_abs(detail::read_mindspore_as(detail::read_onnx_as(with_math<Abs>(unary("abs", onnx_as("Abs"), [](const GradContext& c, const Grads& g) -> Grads { return {g[0] * sign(X(c))}; })), "Abs"), {"Abs"}));
OpDefiner d_exp(detail::autocast_as(detail::read_mindspore_as(detail::read_onnx_as(with_math<Exp>(unary("exp", onnx_as("Exp"), [](const GradContext& c, const Grads& g) -> Grads { return {g[0] * Y(c)}; })), "Exp"), {"Exp"}), Autocast::Float32));
OpDefiner d_log(detail::autocast_as(detail::read_mindspore_as(detail::read_onnx_as(with_math<Log>(unary("log", onnx_as("Log"), [](const GradContext& c, const Grads& g) -> Grads { return {g[0] / X(c)}; })), "Log"), {"Log"}), Autocast::Float32));
OpDefiner d_log1p(detail::autocast_as(with_math<Log1p>(unary("log1p", {{"Add", "Log"}, write_log1p}, [](const GradContext& c, const Grads& g) -> Grads {
  return {g[0] / (X(c) + 1.0)};
})), Autocast::Float32));
OpDefiner d_sqrt(detail::read_mindspore_as(detail::read_onnx_as(with_math<Sqrt>(unary("sqrt", onnx_as("Sqrt"), [](const GradContext& c, const Grads& g) -> Grads { return {g[0] * 0.5 / Y(c)}; })), "Sqrt"), {"Sqrt"}));
OpDefiner d_rsqrt(detail::autocast_as(detail::read_mindspore_as(with_math<Rsqrt>(unary("rsqrt", {{"Sqrt", "Reciprocal"}, write_rsqrt}, [](const GradContext& c, const Grads& g) -> Grads {
  const Tensor& y = Y(c);
  return {g[0] * (y * y * y) * -0.5};
})), {"Rsqrt"}), Autocast::Float32));
OpDefiner d_sin(detail::read_mindspore_as(detail::read_onnx_as(with_math<Sin>(unary("sin", onnx_as("Sin"), [](const GradContext& c, const Grads& g) -> Grads { return {g[0] * cos(X(c))}; })), "Sin"), {"Sin"}));
OpDefiner d_cos(detail::read_mindspore_as(detail::read_onnx_as(with_math<Cos>(unary("cos", onnx_as("Cos"), [](const GradContext& c, const Grads& g) -> Grads { return {neg(g[0] * sin(X(c)))}; })), "Cos"), {"Cos"}));
OpDefiner d_tanh(detail::read_mindspore_as(detail::read_onnx_as(with_math<Tanh>(unary("tanh", onnx_as("Tanh"), [](const GradContext& c, const Grads& g) -> Grads { return {bw("tanh_backward", g[0], Y(c))}; })), "Tanh"), {"Tanh"}));
OpDefiner d_sigmoid(detail::read_mindspore_as(detail::read_onnx_as(with_math<Sigmoid>(unary("sigmoid", onnx_as("Sigmoid"), [](const GradContext& c, const Grads& g) -> Grads {
  return {bw("sigmoid_backward", g[0], Y(c))};
})), "Sigmoid"), {"Sigmoid"}));
OpDefiner d_relu(detail::read_mindspore_as(detail::read_onnx_as(with_math<Relu>(unary("relu", onnx_as("Relu"), [](const GradContext& c, const Grads& g) -> Grads { return {bw("relu_backward", g[0], Y(c))}; })), "Relu"), {"ReLU"}));
OpDefiner d_leaky(detail::reads_mindspore(detail::reads_onnx(with_math<LeakyRelu>(unary("leaky_relu", onnx_as("LeakyRelu", [](const OnnxWriter& w) -> Attrs {
  return {{"alpha", w.attrs().get_float("negative_slope", 0.01)}};
}), [](const GradContext& c, const Grads& g) -> Grads {
  return {bw("leaky_relu_backward", g[0], X(c), c.attrs)};
}, {"negative_slope:float=0.01"})), onnx_reader({"LeakyRelu"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  return {leaky_relu(n.input(in, 0), n.f("alpha", 0.01))};
})), onnx_reader({"LeakyReLU"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  return {leaky_relu(n.input(in, 0), n.f("alpha", 0.2))};
})));
OpDefiner d_gelu(detail::reads_mindspore(detail::reads_onnx(with_math<Gelu>(unary("gelu", {{"Mul", "Erf", "Add", "Pow", "Tanh"}, write_gelu}, [](const GradContext& c, const Grads& g) -> Grads {
  return {bw("gelu_backward", g[0], X(c), c.attrs)};
}, {"approximate:string=none|tanh"})), onnx_reader({"Gelu"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  const std::string approx = n.s("approximate", "none");
  if (approx != "none" && approx != "tanh") n.fail("approximate must be 'none' or 'tanh', got '", approx, "'");
  return {gelu(n.input(in, 0), approx == "tanh")};
})), onnx_reader({"GeLU"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  return {gelu(n.input(in, 0), true)};  // MindSpore's GeLU primitive computes the tanh form
})));
OpDefiner d_silu(detail::reads_mindspore(with_math<Silu>(unary("silu", {{"Sigmoid", "Mul"}, write_silu}, [](const GradContext& c, const Grads& g) -> Grads { return {bw("silu_backward", g[0], X(c))}; })), onnx_reader({"SiLU"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  return {silu(n.input(in, 0))};
})));
OpDefiner d_erf(detail::read_mindspore_as(detail::read_onnx_as(with_math<Erf>(unary("erf", onnx_as("Erf"), [](const GradContext& c, const Grads& g) -> Grads {
  const Tensor& x = X(c);
  return {g[0] * exp(neg(x * x)) * (2.0 / std::sqrt(M_PI))};
})), "Erf"), {"Erf"}));
// ONNX Softplus has no threshold: log(1 + exp(x)), which Kiln's threshold matches within rounding.
OpDefiner d_softplus(detail::autocast_as(detail::reads_mindspore(detail::reads_onnx(with_math<Softplus>(unary("softplus", {{"Softplus", "Mul", "Div"}, write_softplus}, [](const GradContext& c, const Grads& g) -> Grads {
  return {bw("softplus_backward", g[0], X(c), c.attrs)};
}, {"beta:float=1", "threshold:float=20"})), onnx_reader({"Softplus"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  return {softplus(n.input(in, 0), 1.0, 20.0)};
})), onnx_reader({"Softplus"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  return {softplus(n.input(in, 0), 1.0, 20.0)};
})), Autocast::Float32));
// ONNX Clip: bounds as attributes before opset 11, optional inputs after.
OnnxImport clip_reader() {
  return onnx_reader({"Clip"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = n.input(in, 0);
    std::optional<double> lo, hi;
    if (n.opset() < 11) {
      lo = n.f("min", -std::numeric_limits<double>::infinity());
      hi = n.f("max", std::numeric_limits<double>::infinity());
    } else {
      if (in.size() > 1 && in[1].defined()) lo = n.scalar_value(in[1], "min");
      if (in.size() > 2 && in[2].defined()) hi = n.scalar_value(in[2], "max");
    }
    if (!lo && !hi) return {x + 0.0};
    return {clamp(x, lo, hi)};
  }, {1, 2});
}
OpDefiner d_clamp(detail::reads_mindspore(detail::reads_onnx(with_math<Clamp>(unary("clamp", {{"Clip"}, write_clamp}, [](const GradContext& c, const Grads& g) -> Grads {
  // Gradient passes where the input was inside [min, max].
  const Tensor& x = X(c);
  Tensor mask = ones_like(x);
  if (c.attrs.has("min")) mask = mask * cast(ge(x, scalar_tensor(c.attrs.get_float("min"), x.dtype())), x.dtype());
  if (c.attrs.has("max")) mask = mask * cast(le(x, scalar_tensor(c.attrs.get_float("max"), x.dtype())), x.dtype());
  return {g[0] * mask};
}, {"min:float?", "max:float?"})), clip_reader()), onnx_reader({"ReLU6"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  return {clamp(n.input(in, 0), 0.0, 6.0)};
})));
OpDefiner d_sign(detail::read_mindspore_as(detail::read_onnx_as(with_math<Sign>(unary("sign", onnx_as("Sign"), nullptr)), "Sign"), {"Sign"}));
OpDefiner d_floor(detail::read_mindspore_as(detail::read_onnx_as(with_math<Floor>(unary("floor", onnx_as("Floor"), nullptr)), "Floor"), {"Floor"}));
OpDefiner d_ceil(detail::read_mindspore_as(detail::read_onnx_as(with_math<Ceil>(unary("ceil", onnx_as("Ceil"), nullptr)), "Ceil"), {"Ceil"}));
OpDefiner d_round(detail::read_mindspore_as(detail::read_onnx_as(with_math<Round>(unary("round", onnx_as("Round"), nullptr)), "Round"), {"Round"}));

// ONNX HardSigmoid with PyTorch's slope (alpha 1/6, beta 0.5) is this op;
// other slopes are the formula.
OpDefiner d_hardsigmoid(detail::reads_mindspore(detail::reads_onnx(with_math<Hardsigmoid>(unary("hardsigmoid", onnx_as("HardSigmoid", [](const OnnxWriter&) -> Attrs {
  return {{"alpha", 1.0 / 6}, {"beta", 0.5}};
}), [](const GradContext& c, const Grads& g) -> Grads { return {bw("hardsigmoid_backward", g[0], X(c))}; })),
onnx_reader({"HardSigmoid"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  const Tensor& x = n.input(in, 0);
  const double alpha = n.f("alpha", 0.2), beta = n.f("beta", 0.5);
  if (std::abs(alpha - 1.0 / 6) < 1e-7 && beta == 0.5) return {hardsigmoid(x)};
  return {clamp(x * alpha + beta, 0.0, 1.0)};
})), onnx_reader({"HSigmoid"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
  return {hardsigmoid(n.input(in, 0))};
})));
// HardSwish is an ONNX op from opset 14 on; before, x * HardSigmoid(x).
OpDefiner d_hardswish(detail::read_mindspore_as(detail::read_onnx_as(with_math<Hardswish>(unary("hardswish", {{"HardSwish", "HardSigmoid", "Mul"}, [](OnnxWriter& w) {
  if (w.opset() >= 14) return w.node("HardSwish", {w.in(0)}, {w.out()});
  std::string hs = w.unique("hard_sigmoid");
  w.node("HardSigmoid", {w.in(0)}, {hs}, {{"alpha", 1.0 / 6}, {"beta", 0.5}});
  w.node("Mul", {w.in(0), hs}, {w.out()});
}}, [](const GradContext& c, const Grads& g) -> Grads { return {bw("hardswish_backward", g[0], X(c))}; })), "HardSwish"), {"HSwish"}));

// --- activation backward ops ---------------------------------------------------
OpDefiner d_hardsigmoid_bw(with_math<HardsigmoidBackward>(activation_backward("hardsigmoid_backward")));
OpDefiner d_hardswish_bw(with_math<HardswishBackward>(activation_backward("hardswish_backward")));
OpDefiner d_relu_bw(with_math<ReluBackward>(activation_backward("relu_backward")));
OpDefiner d_sigmoid_bw(with_math<SigmoidBackward>(activation_backward("sigmoid_backward")));
OpDefiner d_tanh_bw(with_math<TanhBackward>(activation_backward("tanh_backward")));
OpDefiner d_silu_bw(with_math<SiluBackward>(activation_backward("silu_backward")));
OpDefiner d_gelu_bw(with_math<GeluBackward>(activation_backward("gelu_backward", {"approximate:string=none|tanh"})));
OpDefiner d_leaky_bw(with_math<LeakyReluBackward>(activation_backward("leaky_relu_backward", {"negative_slope:float=0.01"})));
OpDefiner d_softplus_bw(with_math<SoftplusBackward>(activation_backward("softplus_backward", {"beta:float=1", "threshold:float=20"})));

// --- binary ----------------------------------------------------------------
const Shape& shape_of(const GradContext& c, int i) { return c.inputs[i].shape(); }

// MindSpore's Add, and BiasAdd: a bias per channel, axis 1 (NCHW) or the
// last axis (NHWC).
OnnxImport mindspore_add_reader() {
  return onnx_reader({"Add", "BiasAdd"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& a = n.input(in, 0);
    Tensor b = n.input(in, 1);
    if (b.dtype() != a.dtype()) b = cast(b, a.dtype());
    if (n.op_type() == "Add") return {a + b};
    if (b.dim() != 1 || a.dim() < 2) n.fail("takes x [N, C, ...] and a bias [C], got ", a.meta_str(), " and ", b.meta_str());
    const std::string format = detail::mindspore_data_format(n);
    if (format == "NHWC" || a.dim() == 2) return {a + b};
    Shape s(a.dim(), 1);
    s[1] = b.shape()[0];
    return {a + b.reshape(s)};
  });
}
OpDefiner d_add(detail::reads_mindspore(detail::read_onnx_as(with_math<Add>(binary("add", onnx_as("Add"), [](const GradContext& c, const Grads& g) -> Grads {
  return {sum_to(g[0], shape_of(c, 0)), sum_to(g[0], shape_of(c, 1))};
})), "Add"), mindspore_add_reader()));
OpDefiner d_sub(detail::read_mindspore_as(detail::read_onnx_as(with_math<Sub>(binary("sub", onnx_as("Sub"), [](const GradContext& c, const Grads& g) -> Grads {
  return {sum_to(g[0], shape_of(c, 0)), c.needs_grad[1] ? sum_to(neg(g[0]), shape_of(c, 1)) : Tensor()};
})), "Sub"), {"Sub"}));
OpDefiner d_mul(detail::read_mindspore_as(detail::read_onnx_as(with_math<Mul>(binary("mul", onnx_as("Mul"), [](const GradContext& c, const Grads& g) -> Grads {
  return {c.needs_grad[0] ? sum_to(g[0] * c.inputs[1], shape_of(c, 0)) : Tensor(),
          c.needs_grad[1] ? sum_to(g[0] * c.inputs[0], shape_of(c, 1)) : Tensor()};
})), "Mul"), {"Mul"}));
// ONNX Div on integers truncates toward zero, as Kiln's does; the narrow
// integer types divide as int64.
OnnxImport div_reader() {
  return onnx_reader({"Div"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& a = n.input(in, 0);
    const Tensor b = onnx_legacy_broadcast(n, a, n.input(in, 1));
    if (is_floating(a.dtype()) || a.dtype() == DType::Int32 || a.dtype() == DType::Int64) return {div(a, b)};
    return {cast(div(cast(a, DType::Int64), cast(b, DType::Int64)), a.dtype())};
  });
}
OpDefiner d_div(detail::read_mindspore_as(detail::reads_onnx(with_math<Div>(binary("div", onnx_as("Div"), [](const GradContext& c, const Grads& g) -> Grads {
  const Tensor& b = c.inputs[1];
  return {c.needs_grad[0] ? sum_to(g[0] / b, shape_of(c, 0)) : Tensor(),
          c.needs_grad[1] ? sum_to(neg(g[0] * Y(c) / b), shape_of(c, 1)) : Tensor()};
})), div_reader()), {"RealDiv", "Div"}));
// ONNX Pow takes an exponent of another dtype; integer powers are computed
// in float64, exact for the results an int64 holds up to 2^53.
OnnxImport pow_reader() {
  return onnx_reader({"Pow"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& a = n.input(in, 0);
    const Tensor b = onnx_legacy_broadcast(n, a, n.input(in, 1));
    if (!is_floating(a.dtype())) return {cast(round(pow(cast(a, DType::Float64), cast(b, DType::Float64))), a.dtype())};
    return {pow(a, b.dtype() == a.dtype() ? b : cast(b, a.dtype()))};
  });
}
OpDefiner d_pow(detail::autocast_as(detail::read_mindspore_as(detail::reads_onnx(with_math<Pow>(binary("pow", onnx_as("Pow"), [](const GradContext& c, const Grads& g) -> Grads {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  Grads out(2);
  if (c.needs_grad[0]) out[0] = sum_to(g[0] * b * pow(a, b - 1.0), a.shape());
  if (c.needs_grad[1]) {
    // d/db a^b = a^b log a, taken as 0 where a == 0 (the limit for b > 0).
    Tensor safe_log = where(eq(a, zeros_like(a)), zeros_like(a), log(abs(a)));
    out[1] = sum_to(g[0] * Y(c) * safe_log, b.shape());
  }
  return out;
})), pow_reader()), {"Pow"}), Autocast::Float32));
GradFn select_grad(bool take_max) {
  return [take_max](const GradContext& c, const Grads& g) -> Grads {
    const Tensor &a = c.inputs[0], &b = c.inputs[1];
    // Ties split the gradient evenly, as PyTorch does.
    Tensor a_wins = cast(take_max ? gt(a, b) : lt(a, b), g[0].dtype());
    Tensor tie = cast(eq(a, b), g[0].dtype()) * 0.5;
    return {sum_to(g[0] * (a_wins + tie), a.shape()), sum_to(g[0] * (1.0 - a_wins - tie), b.shape())};
  };
}
OpDefiner d_maximum(detail::read_mindspore_as(with_math<Maximum>(binary("maximum", onnx_as("Max"), select_grad(true))), {"Maximum"}));
OpDefiner d_minimum(detail::read_mindspore_as(with_math<Minimum>(binary("minimum", onnx_as("Min"), select_grad(false))), {"Minimum"}));
// The remainder of a / b: with the divisor's sign (Python's %, torch.remainder,
// ONNX Mod) or, with fmod, the dividend's (C's fmod, torch.fmod, ONNX Mod
// fmod=1). d/da = 1, d/db = -q with q the quotient rounded the same way.
OpDef mod_op() {
  OpDef d = binary("mod", {{"Mod", "Less", "Xor", "Equal", "Not", "And", "Add", "Where"}, [](OnnxWriter& w) {
    const bool fmod = w.attrs().get_bool("fmod", false);
    if (fmod || !is_floating(w.dtype())) {
      w.node("Mod", {w.in(0), w.in(1)}, {w.out()}, {{"fmod", int64_t{fmod}}});
      return;
    }
    // ONNX's Mod on floats is fmod only: its result, moved by b where the
    // signs of the result and b differ.
    auto v = [&](const char* hint) { return w.unique(hint); };
    std::string r = v("fmod"), zero = w.scalar(0, w.dtype(), "zero"), r_neg = v("r_neg"), b_neg = v("b_neg"),
                differ = v("signs_differ"), is_zero = v("r_zero"), nonzero = v("r_nonzero"), fix = v("fix"),
                moved = v("moved");
    w.node("Mod", {w.in(0), w.in(1)}, {r}, {{"fmod", int64_t{1}}});
    w.node("Less", {r, zero}, {r_neg});
    w.node("Less", {w.in(1), zero}, {b_neg});
    w.node("Xor", {r_neg, b_neg}, {differ});
    w.node("Equal", {r, zero}, {is_zero});
    w.node("Not", {is_zero}, {nonzero});
    w.node("And", {differ, nonzero}, {fix});
    w.node("Add", {r, w.in(1)}, {moved});
    w.node("Where", {fix, moved, r}, {w.out()});
  }}, [](const GradContext& c, const Grads& g) -> Grads {
    const Tensor &a = c.inputs[0], &b = c.inputs[1];
    Grads out(2);
    if (c.needs_grad[0]) out[0] = sum_to(g[0], a.shape());
    if (c.needs_grad[1]) {
      Tensor q = div(a - Y(c), b);  // exact: a = q * b + y
      out[1] = sum_to(neg(g[0] * round(q)), b.shape());
    }
    return out;
  });
  d.attrs = {"fmod:bool=false"};
  d.onnx_import = onnx_reader({"Mod"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const bool fmod = n.i("fmod", 0) != 0;
    if (!fmod && is_floating(n.input(in, 0).dtype())) n.fail("Mod on floating inputs requires fmod=1");
    return call(KILN_OP("mod"), {n.input(in, 0), n.input(in, 1)}, {{"fmod", fmod}});
  });
  return d;
}
OpDefiner d_mod(mod_op());
OpDefiner d_eq(detail::read_mindspore_as(detail::read_onnx_as(binary("eq", onnx_as("Equal"), nullptr, true), "Equal"), {"Equal"}));
OpDefiner d_ne(binary("ne", {{"Equal", "Not"}, write_ne}, nullptr, true));
OpDefiner d_lt(detail::read_mindspore_as(detail::read_onnx_as(binary("lt", onnx_as("Less"), nullptr, true), "Less"), {"Less"}));
OpDefiner d_le(detail::read_mindspore_as(detail::read_onnx_as(binary("le", onnx_as("LessOrEqual"), nullptr, true), "LessOrEqual"), {"LessEqual"}));
OpDefiner d_gt(detail::read_mindspore_as(detail::read_onnx_as(binary("gt", onnx_as("Greater"), nullptr, true), "Greater"), {"Greater"}));
OpDefiner d_ge(detail::read_mindspore_as(detail::read_onnx_as(binary("ge", onnx_as("GreaterOrEqual"), nullptr, true), "GreaterOrEqual"), {"GreaterEqual"}));

OpDefiner d_where([] {
  OpDef d;
  d.name = "where";
  d.inputs = {"cond", "a", "b"};
  // MindSpore's Select (cond, x, y).
  d.mindspore_import = onnx_reader({"Select"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {where(n.input(in, 0), n.input(in, 1), n.input(in, 2))};
  });
  d.outputs = {"y"};
  d.infer = [](const Metas& in, const Attrs&) -> Metas {
    KILN_CHECK(in[0].dtype == DType::Bool, "cond must be a bool tensor, got ", dtype_name(in[0].dtype),
               "; build it with a comparison such as gt(x, y)");
    detail::check_same_dtype(in, 1, 2);
    Shape s = broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape), in[2].shape);
    return {{true, s, in[1].dtype, in[1].device}};
  };
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    Tensor z = zeros({}, g[0].dtype());
    return {Tensor(), c.needs_grad[1] ? sum_to(where(c.inputs[0], g[0], z), c.inputs[1].shape()) : Tensor(),
            c.needs_grad[2] ? sum_to(where(c.inputs[0], z, g[0]), c.inputs[2].shape()) : Tensor()};
  };
  d.onnx = onnx_as("Where");
  d.tags = kEw;
  d.dispatch_input = 1;
  d.differentiable_inputs = {1, 2};
  d = detail::read_onnx_as(std::move(d), "Where");
  d.onnx_import.widen_half = false;  // it selects; it computes nothing
  return d;
}());

OpDefiner d_cast([] {
  OpDef d;
  d.name = "cast";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = {"dtype:dtype"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    return {{true, in[0].shape, a.get_dtype("dtype"), in[0].device}};
  };
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    if (!is_floating(c.outputs[0].dtype())) return {Tensor()};
    return {cast(g[0], c.inputs[0].dtype())};
  };
  d.onnx = onnx_as("Cast", [](const OnnxWriter& w) -> Attrs { return {{"to", w.attrs().get_dtype("dtype")}}; });
  d.onnx_import = onnx_reader({"Cast", "CastLike"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const DType to = n.op_type() == "CastLike" ? n.input(in, 1).dtype() : n.dtype("to");
    return {cast(n.input(in, 0), to)};
  }, {}, false);
  // MindSpore's Cast (x, type): the type arrives as an empty tensor of that dtype.
  d.mindspore_import = onnx_reader({"Cast"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {cast(n.input(in, 0), n.input(in, 1).dtype())};
  }, {}, false);
  d.tags = kEw;
  return d;
}());

OpDefiner d_copy(unary("copy", onnx_as("Identity"), [](const GradContext&, const Grads& g) -> Grads { return {g[0]}; }));

// Writes b (broadcast) into a in place. Not differentiable: Tensor::copy_ and
// the other in-place methods refuse tensors that autograd tracks.
OpDefiner d_assign([] {
  OpDef d;
  d.name = "assign";
  d.inputs = {"dst", "src"};
  d.outputs = {};
  d.infer = [](const Metas& in, const Attrs&) -> Metas {
    detail::check_same_dtype(in, 0, 1);
    KILN_CHECK(broadcast_shapes(in[0].shape, in[1].shape) == in[0].shape, "cannot write a tensor of shape ",
               shape_str(in[1].shape), " into one of shape ", shape_str(in[0].shape),
               "; the source must broadcast to the destination");
    return {};
  };
  d.writes = {0};
  d.tags = kTagNondifferentiable;
  return d;
}());

}  // namespace
}  // namespace kiln
