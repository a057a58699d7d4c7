#pragma once
// Whether ops record gradients on this thread. In core, not autograd, so that
// every layer (core's in-place checks, the dispatcher) can read it.
#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {
namespace autograd {

bool grad_enabled();
void set_grad_enabled(bool on);

}  // namespace autograd

// Disables gradient recording for its lifetime.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(autograd::grad_enabled()) { autograd::set_grad_enabled(false); }
  ~NoGradGuard() { autograd::set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// The floating dtype that ops compute in on this thread (Cell::to_float):
// inside a scope, the dispatcher casts each op's floating inputs to it, so a
// float32 parameter takes part as a float16 copy and its gradient flows back
// through the cast. Ops that update inputs in place (batch norm's running
// statistics, optimizer steps) compute in those inputs' dtype instead.
std::optional<DType> compute_dtype();

// Sets compute_dtype() for its lifetime (nullopt: ops take inputs as given).
class ComputeDTypeScope {
 public:
  explicit ComputeDTypeScope(std::optional<DType> dtype);
  ~ComputeDTypeScope();
  ComputeDTypeScope(const ComputeDTypeScope&) = delete;
  ComputeDTypeScope& operator=(const ComputeDTypeScope&) = delete;

 private:
  std::optional<DType> prev_;
};

// Mixed precision (PyTorch's autocast): inside a scope, each op computes in
// the precision its definition asks for (OpDef::autocast): matrix products,
// convolutions and attention take their float32 inputs in `dtype` (float16
// or bfloat16), reductions, softmax, normalizations and
// losses take half-precision inputs in float32, and the rest compute in
// their inputs' dtype. Parameters stay float32 (the master weights) and take
// their gradients through the casts. Backward runs outside it, in the dtypes
// the forward chose. A Cell's own to_float inside it wins.
std::optional<DType> autocast_dtype();

// The precisions Kiln computes in, by name: "float32"/"fp32" (nullopt:
// float32 throughout), "bfloat16"/"bf16", "float16"/"fp16". False, leaving
// `dtype` alone, for any other name; precision_names() lists them all.
bool parse_precision(const std::string& name, std::optional<DType>& dtype);
const std::vector<std::string>& precision_names();

// Sets autocast_dtype() for its lifetime (nullopt: no autocast).
class AutocastScope {
 public:
  explicit AutocastScope(std::optional<DType> dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  std::optional<DType> prev_;
};

}  // namespace kiln
