#pragma once
// Registration shorthands for CPU kernels templated on the element type.
#include "backends/cpu/loops.h"
#include "kiln/registry.h"

namespace kiln::cpu {
using Ins = std::vector<Tensor>;
using Outs = std::vector<Tensor>;
}  // namespace kiln::cpu

#define KILN_CPU_FLOAT(OP, FN)                                         \
  KILN_REGISTER_KERNEL(OP, CPU, FN<float>, ::kiln::DType::Float32);    \
  KILN_REGISTER_KERNEL(OP, CPU, FN<double>, ::kiln::DType::Float64);   \
  KILN_REGISTER_KERNEL(OP, CPU, FN<::kiln::Half>, ::kiln::DType::Float16); \
  KILN_REGISTER_KERNEL(OP, CPU, FN<::kiln::BFloat16>, ::kiln::DType::BFloat16)
// float32 and float64 only (kernels that call BLAS or need full precision).
#define KILN_CPU_F32_F64(OP, FN)                                     \
  KILN_REGISTER_KERNEL(OP, CPU, FN<float>, ::kiln::DType::Float32);  \
  KILN_REGISTER_KERNEL(OP, CPU, FN<double>, ::kiln::DType::Float64)
#define KILN_CPU_INT(OP, FN)                                          \
  KILN_REGISTER_KERNEL(OP, CPU, FN<int32_t>, ::kiln::DType::Int32);   \
  KILN_REGISTER_KERNEL(OP, CPU, FN<int64_t>, ::kiln::DType::Int64)
// The signed integers: int32, int64 and int8.
#define KILN_CPU_SIGNED(OP, FN) \
  KILN_CPU_INT(OP, FN);         \
  KILN_REGISTER_KERNEL(OP, CPU, FN<int8_t>, ::kiln::DType::Int8)
#define KILN_CPU_NUMERIC(OP, FN) \
  KILN_CPU_FLOAT(OP, FN);        \
  KILN_CPU_INT(OP, FN);          \
  KILN_REGISTER_KERNEL(OP, CPU, FN<uint8_t>, ::kiln::DType::UInt8); \
  KILN_REGISTER_KERNEL(OP, CPU, FN<int8_t>, ::kiln::DType::Int8)
#define KILN_CPU_ALL(OP, FN)  \
  KILN_CPU_NUMERIC(OP, FN);   \
  KILN_REGISTER_KERNEL(OP, CPU, FN<bool>, ::kiln::DType::Bool)
