#pragma once
// The launch of the arithmetic the formulas do not cover
// (arithmetic_kernels.cu): the elementwise ops on integers, and mod on
// every numeric type, as the CPU computes them. Plain values and C++17.
#include "backends/cuda/convert_launch.h"
#include "backends/cuda/elementwise_launch.h"
#include "backends/cuda/index_errors.h"

namespace kiln::cuda {

enum class Arithmetic { Add, Sub, Mul, Div, Maximum, Minimum, Mod, Neg, Abs, Sign, Relu, Clamp };

struct ArithmeticCall {
  MapCall map;  // y, a (and b for the binary ops); map.dtype unused
  AnyDType dtype = AnyDType::Int64;
  Arithmetic op = Arithmetic::Add;
  bool fmod = false;  // mod: the dividend's sign (C's fmod) rather than the divisor's
  bool has_min = false, has_max = false;
  double min = 0, max = 0;      // clamp's bounds, converted to the type as the CPU does
  IndexError* error = nullptr;  // an integer division by zero is reported here
};
void launch_arithmetic(const ArithmeticCall& call);

}  // namespace kiln::cuda
