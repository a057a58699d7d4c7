// CPU kernels of the unary elementwise ops on integers, and copies. Their
// floating forms come from each op's formula (OpDef::math) through the block
// runner (block_runner.cpp).
#include "backends/cpu/kernel_helpers.h"

namespace kiln::cpu {
namespace {

#define KILN_INT_UNARY(NAME, EXPR)                                  \
  template <typename T>                                             \
  void NAME##_kernel(const Ins& in, Outs& out, const Attrs&) {      \
    unary_map<T, T>(in[0], out[0], [](T x) -> T { return EXPR; });  \
  }
KILN_INT_UNARY(neg, -x)
KILN_INT_UNARY(abs, x < T(0) ? -x : x)
KILN_INT_UNARY(relu, x < T(0) ? T(0) : x)
KILN_INT_UNARY(sign, static_cast<T>((x > T(0)) - (x < T(0))))
#undef KILN_INT_UNARY

template <typename T>
void clamp_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  bool has_min = attrs.has("min"), has_max = attrs.has("max");
  T lo = has_min ? static_cast<T>(attrs.get_float("min")) : T(0);
  T hi = has_max ? static_cast<T>(attrs.get_float("max")) : T(0);
  unary_map<T, T>(in[0], out[0], [=](T x) -> T {
    if (has_min && x < lo) x = lo;
    if (has_max && x > hi) x = hi;
    return x;
  });
}

// Copies go through strided_copy, which tiles transposed layouts.
template <typename T>
void copy_kernel(const Ins& in, Outs& out, const Attrs&) {
  strided_copy(in[0], out[0]);
}

}  // namespace

KILN_CPU_SIGNED("neg", neg_kernel);
KILN_CPU_SIGNED("abs", abs_kernel);
KILN_CPU_SIGNED("relu", relu_kernel);
KILN_CPU_SIGNED("sign", sign_kernel);
KILN_CPU_SIGNED("clamp", clamp_kernel);
KILN_CPU_ALL("copy", copy_kernel);

}  // namespace kiln::cpu
