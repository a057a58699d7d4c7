#pragma once
// Whether ops record gradients on this thread. In core, not autograd, so that
// every layer (core's in-place checks, the dispatcher) can read it.
#include <optional>

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

}  // namespace kiln
