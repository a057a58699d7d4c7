// CPU kernels of the unary elementwise ops and the activation backward ops.
#include <cmath>

#include "backends/cpu/kernel_helpers.h"

namespace kiln::cpu {
namespace {

#define KILN_UNARY(NAME, EXPR)                                                   \
  template <typename T>                                                          \
  void NAME##_kernel(const Ins& in, Outs& out, const Attrs& attrs) {             \
    using C = compute_t<T>;                                                      \
    unary_map<T, T>(in[0], out[0], [](C x) -> C { return EXPR; });              \
  }

KILN_UNARY(neg, -x)
KILN_UNARY(abs, x < C(0) ? -x : x)
KILN_UNARY(exp, std::exp(x))
KILN_UNARY(log, std::log(x))
KILN_UNARY(log1p, std::log1p(x))
KILN_UNARY(sqrt, std::sqrt(x))
KILN_UNARY(rsqrt, C(1) / std::sqrt(x))
KILN_UNARY(sin, std::sin(x))
KILN_UNARY(cos, std::cos(x))
KILN_UNARY(tanh, std::tanh(x))
KILN_UNARY(sigmoid, C(1) / (C(1) + std::exp(-x)))
KILN_UNARY(relu, x < C(0) ? C(0) : x)  // NaN passes through, as in PyTorch
KILN_UNARY(silu, x / (C(1) + std::exp(-x)))
KILN_UNARY(erf, std::erf(x))
KILN_UNARY(sign, static_cast<C>((x > C(0)) - (x < C(0))))
KILN_UNARY(floor, std::floor(x))
KILN_UNARY(ceil, std::ceil(x))
KILN_UNARY(round, std::nearbyint(x))
#undef KILN_UNARY

// Copies go through strided_copy, which tiles transposed layouts.
template <typename T>
void copy_kernel(const Ins& in, Outs& out, const Attrs&) {
  strided_copy(in[0], out[0]);
}

template <typename T>
void leaky_relu_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  using C = compute_t<T>;
  C slope = static_cast<C>(attrs.get_float("negative_slope", 0.01));
  unary_map<T, T>(in[0], out[0], [slope](C x) -> C { return x > C(0) ? x : x * slope; });
}

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

bool gelu_tanh(const Attrs& attrs) {
  std::string a = attrs.get_string("approximate", "none");
  KILN_CHECK(a == "none" || a == "tanh", "approximate must be 'none' or 'tanh', got '", a, "'");
  return a == "tanh";
}

template <typename T>
void gelu_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  using C = compute_t<T>;
  if (gelu_tanh(attrs)) {
    unary_map<T, T>(in[0], out[0], [](C x) -> C {
      return C(0.5) * x * (C(1) + std::tanh(C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x)));
    });
  } else {
    unary_map<T, T>(in[0], out[0], [](C x) -> C { return C(0.5) * x * (C(1) + std::erf(x * C(kInvSqrt2))); });
  }
}

template <typename T>
void softplus_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  using C = compute_t<T>;
  C beta = static_cast<C>(attrs.get_float("beta", 1.0));
  C threshold = static_cast<C>(attrs.get_float("threshold", 20.0));
  unary_map<T, T>(in[0], out[0], [=](C x) -> C {
    return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
  });
}

template <typename T>
void clamp_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  using C = compute_t<T>;
  bool has_min = attrs.has("min"), has_max = attrs.has("max");
  C lo = has_min ? static_cast<C>(attrs.get_float("min")) : C(0);
  C hi = has_max ? static_cast<C>(attrs.get_float("max")) : C(0);
  unary_map<T, T>(in[0], out[0], [=](C x) -> C {
    if (has_min && x < lo) x = lo;
    if (has_max && x > hi) x = hi;
    return x;
  });
}

// --- activation backward: out = f(grad, saved) ---------------------------------
#define KILN_ACT_BACKWARD(NAME, EXPR)                                             \
  template <typename T>                                                           \
  void NAME##_kernel(const Ins& in, Outs& out, const Attrs& attrs) {              \
    using C = compute_t<T>;                                                       \
    binary_map<T, T>(in[0], in[1], out[0], [](C g, C s) -> C { return EXPR; });   \
  }
KILN_ACT_BACKWARD(relu_backward, s > C(0) ? g : C(0))
KILN_ACT_BACKWARD(sigmoid_backward, g * s * (C(1) - s))
KILN_ACT_BACKWARD(tanh_backward, g * (C(1) - s * s))
KILN_ACT_BACKWARD(silu_backward, g * (C(1) / (C(1) + std::exp(-s))) * (C(1) + s * (C(1) - C(1) / (C(1) + std::exp(-s)))))
#undef KILN_ACT_BACKWARD

template <typename T>
void leaky_relu_backward_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  using C = compute_t<T>;
  C slope = static_cast<C>(attrs.get_float("negative_slope", 0.01));
  binary_map<T, T>(in[0], in[1], out[0], [slope](C g, C x) -> C { return x > C(0) ? g : g * slope; });
}

template <typename T>
void gelu_backward_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  using C = compute_t<T>;
  if (gelu_tanh(attrs)) {
    binary_map<T, T>(in[0], in[1], out[0], [](C g, C x) -> C {
      C k = C(kSqrt2OverPi);
      C t = std::tanh(k * (x + C(0.044715) * x * x * x));
      C dt = (C(1) - t * t) * k * (C(1) + C(3 * 0.044715) * x * x);
      return g * (C(0.5) * (C(1) + t) + C(0.5) * x * dt);
    });
  } else {
    binary_map<T, T>(in[0], in[1], out[0], [](C g, C x) -> C {
      C cdf = C(0.5) * (C(1) + std::erf(x * C(kInvSqrt2)));
      C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
      return g * (cdf + x * pdf);
    });
  }
}

template <typename T>
void softplus_backward_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  using C = compute_t<T>;
  C beta = static_cast<C>(attrs.get_float("beta", 1.0));
  C threshold = static_cast<C>(attrs.get_float("threshold", 20.0));
  binary_map<T, T>(in[0], in[1], out[0], [=](C g, C x) -> C {
    return x * beta > threshold ? g : g / (C(1) + std::exp(-x * beta));
  });
}

}  // namespace

KILN_CPU_FLOAT("neg", neg_kernel);
KILN_CPU_INT("neg", neg_kernel);
KILN_CPU_FLOAT("abs", abs_kernel);
KILN_CPU_INT("abs", abs_kernel);
KILN_CPU_FLOAT("exp", exp_kernel);
KILN_CPU_FLOAT("log", log_kernel);
KILN_CPU_FLOAT("log1p", log1p_kernel);
KILN_CPU_FLOAT("sqrt", sqrt_kernel);
KILN_CPU_FLOAT("rsqrt", rsqrt_kernel);
KILN_CPU_FLOAT("sin", sin_kernel);
KILN_CPU_FLOAT("cos", cos_kernel);
KILN_CPU_FLOAT("tanh", tanh_kernel);
KILN_CPU_FLOAT("sigmoid", sigmoid_kernel);
KILN_CPU_FLOAT("relu", relu_kernel);
KILN_CPU_INT("relu", relu_kernel);
KILN_CPU_FLOAT("silu", silu_kernel);
KILN_CPU_FLOAT("erf", erf_kernel);
KILN_CPU_FLOAT("sign", sign_kernel);
KILN_CPU_INT("sign", sign_kernel);
KILN_CPU_FLOAT("floor", floor_kernel);
KILN_CPU_FLOAT("ceil", ceil_kernel);
KILN_CPU_FLOAT("round", round_kernel);
KILN_CPU_ALL("copy", copy_kernel);
KILN_CPU_FLOAT("leaky_relu", leaky_relu_kernel);
KILN_CPU_FLOAT("gelu", gelu_kernel);
KILN_CPU_FLOAT("softplus", softplus_kernel);
KILN_CPU_FLOAT("clamp", clamp_kernel);
KILN_CPU_INT("clamp", clamp_kernel);
KILN_CPU_FLOAT("relu_backward", relu_backward_kernel);
KILN_CPU_FLOAT("sigmoid_backward", sigmoid_backward_kernel);
KILN_CPU_FLOAT("tanh_backward", tanh_backward_kernel);
KILN_CPU_FLOAT("silu_backward", silu_backward_kernel);
KILN_CPU_FLOAT("leaky_relu_backward", leaky_relu_backward_kernel);
KILN_CPU_FLOAT("gelu_backward", gelu_backward_kernel);
KILN_CPU_FLOAT("softplus_backward", softplus_backward_kernel);

}  // namespace kiln::cpu
