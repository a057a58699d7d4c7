#pragma once
// An elementwise formula written once, as a functor (elementwise_formulas.h),
// becomes OpDef::math:
//
//   struct Relu {
//     static constexpr int kArity = 1;
//     static constexpr const char* kName = "Relu";
//     explicit Relu(const Attrs&) {}
//     template <typename C> C operator()(C x) const { return x < C(0) ? C(0) : x; }
//   };
//   d.math = detail::elementwise_math<Relu>();
//
// The functor is built from the op's attributes once per run of elements and
// called in float or double. Files that define such ops are compiled with
// __FAST_MATH__ defined (CMakeLists.txt), so these loops call glibc's vector
// math.
#include "kiln/registry.h"

namespace kiln::detail {

template <class F, typename T>
void math_block(const T* const* in, T* out, int64_t n, const Attrs& attrs) {
  const F f(attrs);
  const T* a = in[0];
  if constexpr (F::kArity == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i]);
  } else {
    static_assert(F::kArity == 2, "elementwise math takes one or two inputs");
    const T* b = in[1];
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  }
}

// Runs `math` with the block runner of the output's backend.
void run_math(const ElementwiseMath& math, const std::vector<Tensor>& in, std::vector<Tensor>& out,
              const Attrs& attrs);

template <class F>
void math_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs);

template <class F>
ElementwiseMath elementwise_math() {
  return {F::kArity, &math_block<F, float>, &math_block<F, double>, &math_kernel<F>, F::kName};
}

template <class F>
void math_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  static const ElementwiseMath math = elementwise_math<F>();
  run_math(math, in, out, attrs);
}

}  // namespace kiln::detail
