#pragma once
// Whether ops record gradients on this thread. In core, not autograd, so that
// every layer (core's in-place checks, the dispatcher) can read it.
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

}  // namespace kiln
