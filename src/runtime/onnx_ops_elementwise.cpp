// ONNX elementwise ops that are compositions of Kiln ops: unary math and
// activations Kiln has no op for, logic, variadic Max/Min/Sum/Mean (the
// others are read by their ops: Gelu by gelu, Clip by clamp, ...).
#include <cmath>
#include <limits>

#include "kiln/functional.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);

Converter unary(Unary f) {
  return [f](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> { return {f(input(n, in, 0))}; };
}
Converter binary(Binary f) {
  return [f](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& a = input(n, in, 0);
    return {f(a, onnx_legacy_broadcast(n, a, input(n, in, 1)))};
  };
}
// Max, Min, Sum, Mean: one or more inputs, broadcast together.
Converter variadic(Binary f, bool mean = false) {
  return [f, mean](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor acc = input(n, in, 0);
    for (size_t i = 1; i < in.size(); ++i) acc = f(acc, input(n, in, i));
    if (in.size() == 1) acc = acc + scalar_like(0, acc);  // a new tensor, not the input itself
    if (mean) acc = acc / scalar_like(static_cast<double>(in.size()), acc);
    return {acc};
  };
}

Tensor logical_not(const Tensor& x) { return eq(x, zeros({}, x.dtype())); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return where(a, b, zeros({}, DType::Bool)); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return where(a, ones({}, DType::Bool), b); }
Tensor identity(const Tensor& x) { return x; }
Tensor reciprocal(const Tensor& x) { return scalar_like(1, x) / x; }
Tensor softsign(const Tensor& x) { return x / (abs(x) + scalar_like(1, x)); }
Tensor mish(const Tensor& x) { return x * tanh(softplus(x)); }
Tensor is_nan(const Tensor& x) { return ne(x, x); }
Tensor tan_of(const Tensor& x) { return sin(x) / cos(x); }
Tensor sinh_of(const Tensor& x) { return (exp(x) - exp(neg(x))) * scalar_like(0.5, x); }
Tensor cosh_of(const Tensor& x) { return (exp(x) + exp(neg(x))) * scalar_like(0.5, x); }
std::vector<Tensor> elu(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  double alpha = n.f("alpha", 1.0);
  Tensor neg_part = (exp(x) - scalar_like(1, x)) * scalar_like(alpha, x);
  return {where(gt(x, scalar_like(0, x)), x, neg_part)};
}

std::vector<Tensor> celu(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  double alpha = n.f("alpha", 1.0);
  Tensor e = (exp(x / scalar_like(alpha, x)) - scalar_like(1, x)) * scalar_like(alpha, x);
  return {maximum(x, scalar_like(0, x)) + minimum(scalar_like(0, x), e)};
}

std::vector<Tensor> selu(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  double alpha = n.f("alpha", 1.67326319217681884765625), gamma = n.f("gamma", 1.05070102214813232421875);
  Tensor neg_part = (exp(x) * scalar_like(alpha, x) - scalar_like(alpha, x));
  return {where(gt(x, scalar_like(0, x)), x, neg_part) * scalar_like(gamma, x)};
}

std::vector<Tensor> prelu(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  Tensor slope = input(n, in, 1);
  // Before opset 7 a 1-d slope holds one value per channel (axis 1).
  if (n.opset() < 7 && slope.dim() == 1 && x.dim() > 2 && slope.shape()[0] == x.shape()[1]) {
    Shape s(static_cast<size_t>(x.dim() - 1), 1);
    s[0] = slope.shape()[0];
    slope = slope.reshape(s);
  }
  return {where(lt(x, scalar_like(0, x)), x * slope, x)};
}

std::vector<Tensor> thresholded_relu(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  return {where(gt(x, scalar_like(n.f("alpha", 1.0), x)), x, scalar_like(0, x))};
}

// Swish: x * sigmoid(alpha * x).
std::vector<Tensor> swish(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  const double alpha = n.f("alpha", 1.0);
  if (alpha == 1.0) return {silu(x)};
  return {x * sigmoid(x * scalar_like(alpha, x))};
}

// Shrink: x + bias below -lambd, x - bias above lambd, 0 between.
std::vector<Tensor> shrink(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  const double lambd = n.f("lambd", 0.5), bias = n.f("bias", 0.0);
  const Tensor zero = scalar_like(0, x);
  return {where(lt(x, scalar_like(-lambd, x)), x + scalar_like(bias, x),
                where(gt(x, scalar_like(lambd, x)), x - scalar_like(bias, x), zero))};
}

std::vector<Tensor> is_inf(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  double inf = std::numeric_limits<double>::infinity();
  bool pos = n.i("detect_positive", 1) != 0, neg = n.i("detect_negative", 1) != 0;
  Tensor r = zeros(x.shape(), DType::Bool);
  if (pos) r = logical_or(r, eq(x, scalar_like(inf, x)));
  if (neg) r = logical_or(r, eq(x, scalar_like(-inf, x)));
  return {r};
}

}  // namespace

void add_elementwise_converters(ConverterTable& t) {
  t["Tan"] = unary(tan_of);
  t["Sinh"] = unary(sinh_of);
  t["Cosh"] = unary(cosh_of);
  t["Reciprocal"] = unary(reciprocal);
  t["Softsign"] = unary(softsign);
  t["Mish"] = unary(mish);
  t["IsNaN"] = unary(is_nan);
  t["Not"] = unary(logical_not);
  t["Identity"] = unary(identity);
  t["Elu"] = elu;
  t["Celu"] = celu;
  t["Selu"] = selu;
  t["PRelu"] = prelu;
  t["ThresholdedRelu"] = thresholded_relu;
  t["IsInf"] = is_inf;
  t["Swish"] = swish;
  t["Shrink"] = shrink;
  t["And"] = binary(logical_and);
  t["Or"] = binary(logical_or);
  t["Xor"] = binary(ne);
  t["Max"] = variadic(maximum);
  t["Min"] = variadic(minimum);
  t["Sum"] = variadic(add);
  t["Mean"] = variadic(add, true);
}

}  // namespace kiln::runtime
