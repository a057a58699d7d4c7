// A program run in half precision (SessionOptions::precision): the model's
// ops under an autocast scope, so matrix products, convolutions and attention
// compute in bfloat16 or float16 while reductions and norms stay in float32,
// and the outputs in the dtypes the model declares, so that callers and
// servers see the same interface at any precision.
#include "kiln/functional.h"
#include "kiln/grad_mode.h"
#include "runtime/program.h"

namespace kiln::runtime {
namespace {

class AutocastProgram final : public Program {
 public:
  AutocastProgram(std::unique_ptr<Program> inner, DType dtype) : inner_(std::move(inner)), dtype_(dtype) {}
  const std::vector<TensorInfo>& inputs() const override { return inner_->inputs(); }
  const std::vector<TensorInfo>& outputs() const override { return inner_->outputs(); }
  const std::map<std::string, std::string>& metadata() const override { return inner_->metadata(); }
  int opset() const override { return inner_->opset(); }
  const std::string& producer() const override { return inner_->producer(); }
  const std::vector<bool>& bound_by_value() const override { return inner_->bound_by_value(); }
  const std::string& rewrites() const override { return inner_->rewrites(); }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override {
    std::vector<Tensor> out;
    {
      const AutocastScope autocast(dtype_);
      out = inner_->run(inputs);
    }
    const auto& declared = inner_->outputs();
    for (size_t i = 0; i < out.size() && i < declared.size(); ++i)
      if (is_floating(declared[i].dtype) && out[i].dtype() != declared[i].dtype)
        out[i] = cast(out[i], declared[i].dtype);
    return out;
  }

 private:
  std::unique_ptr<Program> inner_;
  DType dtype_;
};

}  // namespace

std::unique_ptr<Program> autocast_program(std::unique_ptr<Program> program, DType dtype) {
  KILN_CHECK(dtype == DType::BFloat16 || dtype == DType::Float16, "half-precision inference runs in bfloat16 or ",
             "float16, not ", dtype_name(dtype));
  return std::make_unique<AutocastProgram>(std::move(program), dtype);
}

}  // namespace kiln::runtime
