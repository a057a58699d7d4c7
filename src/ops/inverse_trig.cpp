// The inverse trigonometric and hyperbolic functions: asin, acos, atan,
// asinh, acosh, atanh, each an elementwise formula with its gradient and
// the ONNX type of the same name.
#include <cmath>

#include "ops/elementwise_formulas.h"
#include "ops/elementwise_math.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using namespace formulas;

// d/dx f(x) = g(x) for the op `name`, read from and written as `onnx`.
template <class F>
OpDef inverse(const char* name, const char* onnx, Tensor (*slope)(const Tensor& x)) {
  OpDef d = detail::make_op(
      name, {"x"}, {}, detail::same_as_input,
      [slope](const GradContext& c, const Grads& g) -> Grads { return {g[0] * slope(c.inputs[0])}; }, onnx_as(onnx),
      kTagElementwise | kTagFusible);
  d.math = detail::elementwise_math<F>();
  return detail::read_onnx_as(std::move(d), onnx);
}

Tensor one_minus_square(const Tensor& x) { return 1.0 - x * x; }
Tensor square_plus_one(const Tensor& x) { return x * x + 1.0; }

OpDefiner d_asin(detail::autocast_as(inverse<Asin>("asin", "Asin", [](const Tensor& x) { return rsqrt(one_minus_square(x)); }), Autocast::Float32));
OpDefiner d_acos(detail::autocast_as(inverse<Acos>("acos", "Acos", [](const Tensor& x) { return neg(rsqrt(one_minus_square(x))); }), Autocast::Float32));
OpDefiner d_atan(inverse<Atan>("atan", "Atan", [](const Tensor& x) { return 1.0 / square_plus_one(x); }));
OpDefiner d_asinh(inverse<Asinh>("asinh", "Asinh", [](const Tensor& x) { return rsqrt(square_plus_one(x)); }));
OpDefiner d_acosh(inverse<Acosh>("acosh", "Acosh", [](const Tensor& x) { return rsqrt(x * x - 1.0); }));
OpDefiner d_atanh(inverse<Atanh>("atanh", "Atanh", [](const Tensor& x) { return 1.0 / one_minus_square(x); }));

}  // namespace

Tensor asin(const Tensor& x) { return call1(KILN_OP("asin"), {x}); }
Tensor acos(const Tensor& x) { return call1(KILN_OP("acos"), {x}); }
Tensor atan(const Tensor& x) { return call1(KILN_OP("atan"), {x}); }
Tensor asinh(const Tensor& x) { return call1(KILN_OP("asinh"), {x}); }
Tensor acosh(const Tensor& x) { return call1(KILN_OP("acosh"), {x}); }
Tensor atanh(const Tensor& x) { return call1(KILN_OP("atanh"), {x}); }

}  // namespace kiln
