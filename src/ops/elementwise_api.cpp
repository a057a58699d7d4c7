// The functional API of the elementwise ops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/finite_scan.h"
#include "ops/op_helpers.h"

namespace kiln {

#define KILN_UNARY_API(NAME) \
  Tensor NAME(const Tensor& x) { return call1(KILN_OP(#NAME), {x}); }
KILN_UNARY_API(neg)
KILN_UNARY_API(abs)
KILN_UNARY_API(exp)
KILN_UNARY_API(log)
KILN_UNARY_API(log1p)
KILN_UNARY_API(sqrt)
KILN_UNARY_API(rsqrt)
KILN_UNARY_API(sin)
KILN_UNARY_API(cos)
KILN_UNARY_API(tanh)
KILN_UNARY_API(sigmoid)
KILN_UNARY_API(relu)
KILN_UNARY_API(silu)
KILN_UNARY_API(hardsigmoid)
KILN_UNARY_API(hardswish)
KILN_UNARY_API(erf)
KILN_UNARY_API(sign)
KILN_UNARY_API(floor)
KILN_UNARY_API(ceil)
KILN_UNARY_API(round)
#undef KILN_UNARY_API

Tensor leaky_relu(const Tensor& x, double slope) {
  return call1(KILN_OP("leaky_relu"), {x}, {{"negative_slope", slope}});
}
Tensor gelu(const Tensor& x, bool tanh_approximation) {
  return call1(KILN_OP("gelu"), {x}, {{"approximate", std::string(tanh_approximation ? "tanh" : "none")}});
}
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return call1(KILN_OP("softplus"), {x}, {{"beta", beta}, {"threshold", threshold}});
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  Attrs a;
  if (min) a.set("min", *min);
  if (max) a.set("max", *max);
  return call1(KILN_OP("clamp"), {x}, a);
}
Tensor square(const Tensor& x) { return mul(x, x); }

namespace {
// Promotes both operands to a common dtype (float beats int, wider beats narrower).
Tensor binary_call(const OpDef& op, const Tensor& a, const Tensor& b, const Attrs& attrs = {}) {
  if (a.defined() && b.defined() && a.dtype() != b.dtype()) {
    DType t = promote_types(a.dtype(), b.dtype());
    return call1(op, {a.to(t), b.to(t)}, attrs);
  }
  return call1(op, {a, b}, attrs);
}
}  // namespace

#define KILN_BINARY_API(NAME) \
  Tensor NAME(const Tensor& a, const Tensor& b) { return binary_call(KILN_OP(#NAME), a, b); }
KILN_BINARY_API(add)
KILN_BINARY_API(sub)
KILN_BINARY_API(mul)
KILN_BINARY_API(div)
KILN_BINARY_API(pow)
KILN_BINARY_API(maximum)
KILN_BINARY_API(minimum)
KILN_BINARY_API(eq)
KILN_BINARY_API(ne)
KILN_BINARY_API(lt)
KILN_BINARY_API(le)
KILN_BINARY_API(gt)
KILN_BINARY_API(ge)
#undef KILN_BINARY_API
Tensor remainder(const Tensor& a, const Tensor& b) { return binary_call(KILN_OP("mod"), a, b); }
Tensor fmod(const Tensor& a, const Tensor& b) { return binary_call(KILN_OP("mod"), a, b, {{"fmod", true}}); }

Tensor pow(const Tensor& a, double exponent) { return pow(a, scalar_tensor(exponent, a.dtype())); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    DType t = promote_types(a.dtype(), b.dtype());
    return call1(KILN_OP("where"), {cond, a.to(t), b.to(t)});
  }
  return call1(KILN_OP("where"), {cond, a, b});
}

Tensor cast(const Tensor& x, DType dtype) { return call1(KILN_OP("cast"), {x}, {{"dtype", dtype}}); }

int64_t first_non_finite(const Tensor& x) {
  if (!is_floating(x.dtype()) || x.numel() == 0) return -1;
  if (x.dtype() == DType::Float64) return detail::first_non_finite_f64(x.contiguous().data<double>(), x.numel());
  // float16 and bfloat16 widen exactly, so inf and NaN stay what they are.
  Tensor f = x.dtype() == DType::Float32 ? x.contiguous() : cast(x, DType::Float32).contiguous();
  return detail::first_non_finite_f32(f.data<float>(), f.numel());
}

namespace {
// A Python-style scalar adopts the tensor's dtype, except that a fractional
// scalar with an integer tensor makes the result float32.
Tensor scalar_like(double v, const Tensor& t) {
  DType d = t.dtype();
  if (!is_floating(d) && v != static_cast<double>(static_cast<int64_t>(v))) d = DType::Float32;
  return scalar_tensor(v, d);
}
}  // namespace

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(a, b), b); }

}  // namespace kiln
