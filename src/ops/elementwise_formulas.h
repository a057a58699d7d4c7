#pragma once
// The elementwise formulas, written once: each op's definition makes its
// OpDef::math of one (elementwise_math.h), the CPU's block runner and graph
// mode's fusion run them in float and double, and a device backend
// instantiates the same functors in its kernels. A functor's constructor
// reads the op's attributes on the host, once per call; what it keeps is
// plain values, so the functor can be copied to a device. The files that
// run these loops on the CPU are compiled with __FAST_MATH__ defined
// (CMakeLists.txt), so they call glibc's vector math. The CUDA backend also
// compiles this text at run time with NVRTC (__CUDACC_RTC__), into the
// kernels it generates for fused chains: there the functors are the plain
// values the host built, so the constructors from attributes, and the
// includes they need, are left out.
#if !defined(__CUDACC_RTC__)
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "core/host_device.h"
#include "kiln/attrs.h"
#include "kiln/error.h"
#define KILN_FROM_ATTRS(...) __VA_ARGS__
#else
#define KILN_FROM_ATTRS(...)
#endif

// A functor without attributes: KILN_MATH1(Neg, -x), KILN_MATH2(Add, a + b).
// kName is the functor's own name, which ElementwiseMath::formula carries to
// the backends that instantiate it (KILN_FORMULAS below).
#define KILN_MATH1(NAME, EXPR)                             \
  struct NAME {                                            \
    static constexpr int kArity = 1;                       \
    static constexpr const char* kName = #NAME;            \
    KILN_FROM_ATTRS(explicit NAME(const ::kiln::Attrs&){}) \
    template <typename C>                                  \
    KILN_HOST_DEVICE C operator()(C x) const {             \
      return EXPR;                                         \
    }                                                      \
  }
#define KILN_MATH2(NAME, EXPR)                             \
  struct NAME {                                            \
    static constexpr int kArity = 2;                       \
    static constexpr const char* kName = #NAME;            \
    KILN_FROM_ATTRS(explicit NAME(const ::kiln::Attrs&){}) \
    template <typename C>                                  \
    KILN_HOST_DEVICE C operator()(C a, C b) const {        \
      return EXPR;                                         \
    }                                                      \
  }

namespace kiln::formulas {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kInvSqrt2 = 0.7071067811865476;
constexpr double kInvSqrt2Pi = 0.3989422804014327;

KILN_MATH1(Neg, -x);
KILN_MATH1(Abs, x < C(0) ? -x : x);
KILN_MATH1(Exp, std::exp(x));
KILN_MATH1(Log, std::log(x));
KILN_MATH1(Log1p, std::log1p(x));
KILN_MATH1(Sqrt, std::sqrt(x));
KILN_MATH1(Rsqrt, C(1) / std::sqrt(x));
KILN_MATH1(Sin, std::sin(x));
KILN_MATH1(Cos, std::cos(x));
KILN_MATH1(Tanh, std::tanh(x));
KILN_MATH1(Sigmoid, C(1) / (C(1) + std::exp(-x)));
KILN_MATH1(Relu, x < C(0) ? C(0) : x);  // NaN passes through, as in PyTorch
KILN_MATH1(Silu, x / (C(1) + std::exp(-x)));
KILN_MATH1(Erf, std::erf(x));
KILN_MATH1(Sign, static_cast<C>((x > C(0)) - (x < C(0))));
KILN_MATH1(Floor, std::floor(x));
KILN_MATH1(Ceil, std::ceil(x));
KILN_MATH1(Round, std::nearbyint(x));
KILN_MATH2(Add, a + b);
KILN_MATH2(Sub, a - b);
KILN_MATH2(Mul, a * b);
KILN_MATH2(Div, a / b);
KILN_MATH2(Pow, std::pow(a, b));
KILN_MATH2(Maximum, (a > b || a != a) ? a : b);  // NaN in a or b gives NaN
KILN_MATH2(Minimum, (a < b || a != a) ? a : b);
// Activation backward ops: (grad, saved) -> grad of the input.
KILN_MATH2(ReluBackward, b > C(0) ? a : C(0));
KILN_MATH2(SigmoidBackward, a * b * (C(1) - b));
KILN_MATH2(TanhBackward, a * (C(1) - b * b));
KILN_MATH2(SiluBackward, a * (C(1) / (C(1) + std::exp(-b))) * (C(1) + b * (C(1) - C(1) / (C(1) + std::exp(-b)))));

struct LeakyRelu {
  static constexpr int kArity = 1;
  static constexpr const char* kName = "LeakyRelu";
  double slope;
  KILN_FROM_ATTRS(explicit LeakyRelu(const Attrs& a) : slope(a.get_float("negative_slope", 0.01)){})
  template <typename C>
  KILN_HOST_DEVICE C operator()(C x) const { return x > C(0) ? x : x * static_cast<C>(slope); }
};
struct LeakyReluBackward : LeakyRelu {
  static constexpr int kArity = 2;
  static constexpr const char* kName = "LeakyReluBackward";
  using LeakyRelu::LeakyRelu;
  template <typename C>
  KILN_HOST_DEVICE C operator()(C g, C x) const { return x > C(0) ? g : g * static_cast<C>(slope); }
};

#if !defined(__CUDACC_RTC__)
inline bool gelu_tanh(const Attrs& attrs) {
  std::string a = attrs.get_string("approximate", "none");
  KILN_CHECK(a == "none" || a == "tanh", "approximate must be 'none' or 'tanh', got '", a, "'");
  return a == "tanh";
}
#endif
struct Gelu {
  static constexpr int kArity = 1;
  static constexpr const char* kName = "Gelu";
  bool tanh_form;
  KILN_FROM_ATTRS(explicit Gelu(const Attrs& a) : tanh_form(gelu_tanh(a)){})
  template <typename C>
  KILN_HOST_DEVICE C operator()(C x) const {
    if (tanh_form) return C(0.5) * x * (C(1) + std::tanh(C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x)));
    return C(0.5) * x * (C(1) + std::erf(x * C(kInvSqrt2)));
  }
};
struct GeluBackward : Gelu {
  static constexpr int kArity = 2;
  static constexpr const char* kName = "GeluBackward";
  using Gelu::Gelu;
  template <typename C>
  KILN_HOST_DEVICE C operator()(C g, C x) const {
    if (tanh_form) {
      C k = C(kSqrt2OverPi);
      C t = std::tanh(k * (x + C(0.044715) * x * x * x));
      C dt = (C(1) - t * t) * k * (C(1) + C(3 * 0.044715) * x * x);
      return g * (C(0.5) * (C(1) + t) + C(0.5) * x * dt);
    }
    C cdf = C(0.5) * (C(1) + std::erf(x * C(kInvSqrt2)));
    C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};

struct Softplus {
  static constexpr int kArity = 1;
  static constexpr const char* kName = "Softplus";
  double beta, threshold;
  KILN_FROM_ATTRS(explicit Softplus(const Attrs& a)
                  : beta(a.get_float("beta", 1.0)), threshold(a.get_float("threshold", 20.0)){})
  template <typename C>
  KILN_HOST_DEVICE C operator()(C x) const {
    const C b = static_cast<C>(beta);
    return x * b > static_cast<C>(threshold) ? x : std::log1p(std::exp(x * b)) / b;
  }
};
struct SoftplusBackward : Softplus {
  static constexpr int kArity = 2;
  static constexpr const char* kName = "SoftplusBackward";
  using Softplus::Softplus;
  template <typename C>
  KILN_HOST_DEVICE C operator()(C g, C x) const {
    const C b = static_cast<C>(beta);
    return x * b > static_cast<C>(threshold) ? g : g / (C(1) + std::exp(-x * b));
  }
};

struct Clamp {
  static constexpr int kArity = 1;
  static constexpr const char* kName = "Clamp";
  bool has_min, has_max;
  double lo, hi;
  KILN_FROM_ATTRS(explicit Clamp(const Attrs& a)
                  : has_min(a.has("min")), has_max(a.has("max")), lo(has_min ? a.get_float("min") : 0.0),
                    hi(has_max ? a.get_float("max") : 0.0){})
  template <typename C>
  KILN_HOST_DEVICE C operator()(C x) const {
    if (has_min && x < static_cast<C>(lo)) x = static_cast<C>(lo);
    if (has_max && x > static_cast<C>(hi)) x = static_cast<C>(hi);
    return x;
  }
};

// MobileNetV3's activations: relu6(x + 3) / 6 and x times it, as PyTorch
// computes them (NaN passes through).
template <typename C>
KILN_HOST_DEVICE C hard_sigmoid_of(C x) {
  return std::min(std::max(x + C(3), C(0)), C(6)) / C(6);  // constexpr: a device compiler takes them
}
KILN_MATH1(Hardsigmoid, hard_sigmoid_of(x));
KILN_MATH1(Hardswish, x * hard_sigmoid_of(x));
KILN_MATH2(HardsigmoidBackward, (b > C(-3) && b < C(3)) ? a / C(6) : C(0));
KILN_MATH2(HardswishBackward, b < C(-3) ? C(0) : (b <= C(3) ? a * (b / C(3) + C(0.5)) : a));

// Once built, a functor is plain values: it can be copied to a device.
#if !defined(__CUDACC_RTC__)
static_assert(std::is_trivially_copyable_v<LeakyRelu> && std::is_trivially_copyable_v<LeakyReluBackward> &&
              std::is_trivially_copyable_v<Gelu> && std::is_trivially_copyable_v<GeluBackward> &&
              std::is_trivially_copyable_v<Softplus> && std::is_trivially_copyable_v<SoftplusBackward> &&
              std::is_trivially_copyable_v<Clamp>);
#endif

// The inverse trigonometric and hyperbolic functions (inverse_trig.cpp).
KILN_MATH1(Asin, std::asin(x));
KILN_MATH1(Acos, std::acos(x));
KILN_MATH1(Atan, std::atan(x));
KILN_MATH1(Asinh, std::asinh(x));
KILN_MATH1(Acosh, std::acosh(x));
KILN_MATH1(Atanh, std::atanh(x));

}  // namespace kiln::formulas

// Every functor above, for a backend that instantiates each in kernels of
// its own (X(Name) per functor); a test checks that every op's formula is
// here and that each kName is its functor's name.
// clang-format off
#define KILN_FORMULAS(X)                                                                                      \
  X(Neg) X(Abs) X(Exp) X(Log) X(Log1p) X(Sqrt) X(Rsqrt) X(Sin) X(Cos) X(Tanh) X(Sigmoid) X(Relu) X(Silu)      \
  X(Erf) X(Sign) X(Floor) X(Ceil) X(Round) X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum)            \
  X(ReluBackward) X(SigmoidBackward) X(TanhBackward) X(SiluBackward) X(LeakyRelu) X(LeakyReluBackward) X(Gelu) \
  X(GeluBackward) X(Softplus) X(SoftplusBackward) X(Clamp) X(Hardsigmoid) X(Hardswish) X(HardsigmoidBackward)  \
  X(HardswishBackward) X(Asin) X(Acos) X(Atan) X(Asinh) X(Acosh) X(Atanh)
// clang-format on
