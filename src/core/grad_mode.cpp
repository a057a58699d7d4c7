#include "kiln/grad_mode.h"

#include "kiln/error.h"

namespace kiln::autograd {
namespace {
thread_local bool t_grad_enabled = true;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

}  // namespace kiln::autograd

namespace kiln {
namespace {
thread_local std::optional<DType> t_compute_dtype;
thread_local std::optional<DType> t_autocast_dtype;
}  // namespace

std::optional<DType> compute_dtype() { return t_compute_dtype; }

ComputeDTypeScope::ComputeDTypeScope(std::optional<DType> dtype) : prev_(t_compute_dtype) {
  KILN_CHECK(!dtype || is_floating(*dtype), "a compute dtype must be floating point, not ", dtype_name(*dtype));
  t_compute_dtype = dtype;
}
ComputeDTypeScope::~ComputeDTypeScope() { t_compute_dtype = prev_; }

std::optional<DType> autocast_dtype() { return t_autocast_dtype; }

AutocastScope::AutocastScope(std::optional<DType> dtype) : prev_(t_autocast_dtype) {
  KILN_CHECK(!dtype || *dtype == DType::BFloat16 || *dtype == DType::Float16, "autocast computes in bfloat16 or float16, not ",
             dtype_name(*dtype), "; for float32 throughout, leave autocast off");
  t_autocast_dtype = dtype;
}
AutocastScope::~AutocastScope() { t_autocast_dtype = prev_; }

bool parse_precision(const std::string& name, std::optional<DType>& dtype) {
  if (name == "float32" || name == "fp32") {
    dtype.reset();
  } else if (name == "bfloat16" || name == "bf16") {
    dtype = DType::BFloat16;
  } else if (name == "float16" || name == "fp16") {
    dtype = DType::Float16;
  } else {
    return false;
  }
  return true;
}

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"float32", "fp32", "bfloat16", "bf16", "float16", "fp16"};
  return names;
}

}  // namespace kiln
