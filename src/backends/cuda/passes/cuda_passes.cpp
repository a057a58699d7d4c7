// The CUDA backend's graph passes, registered when libkiln_cuda loads:
// elementwise chains fused into kernels generated from the op formulas and
// compiled at run time (fused_elementwise.h), in float32 and the 16-bit
// floats. KILN_CUDA_FUSION=0 leaves the chains to the library's kernels, one
// op at a time.
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/on_device.h"
#include "backends/cuda/passes/fused_elementwise.h"
#include "backends/cuda/runtime_compiler.h"
#include "graph/passes.h"
#include "kiln/backend.h"

namespace kiln::cuda {
namespace {

constexpr unsigned kThreads = 256;

// One fused node's kernels: a variant per device and way of reading the
// inputs, compiled when a run first needs it.
class FusedKernel {
 public:
  explicit FusedKernel(const graph::ElementwiseExpression& expression)
      : expression_(expression), functors_(expression) {}

  void run(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const KernelContext context = kernel_context();
    FusedLaunch plan = plan_fused_launch(in, out.at(0));
    if (plan.args.numel == 0) return;
    void* function = variant(context.device.index, plan.kinds);
    OnDevice on(context.device.index);  // the function belongs to that device's context
    std::vector<void*> params{&plan.args};
    for (size_t k = 0; k < expression_.steps.size(); ++k) params.push_back(functors_.at(k));
    const int64_t blocks = std::min<int64_t>((plan.args.numel + kThreads - 1) / kThreads, int64_t{1} << 16);
    launch_runtime_kernel(function, static_cast<unsigned>(blocks), kThreads, context.stream.handle, params.data(),
                          "fused elementwise");
  }

 private:
  void* variant(int device, const std::vector<FusedInput>& kinds) {
    std::string key = std::to_string(device) + ":";
    for (FusedInput k : kinds) key += "DSB"[static_cast<int>(k)];
    std::lock_guard<std::mutex> lock(mutex_);
    void*& function = variants_[key];
    if (function == nullptr) function = runtime_kernel(device, fused_kernel_source(expression_, kinds), "kiln_fused");
    return function;
  }

  const graph::ElementwiseExpression expression_;
  FusedFunctors functors_;
  std::mutex mutex_;
  std::map<std::string, void*> variants_;
};

// Expressions whose every step has a formula of ops/elementwise_formulas.h
// (an op package's formula has none here); others stay unfused.
graph::CustomKernel lower(const graph::ElementwiseExpression& expression) {
  for (const auto& step : expression.steps)
    if (step.op->math.formula == nullptr) return nullptr;
  auto kernel = std::make_shared<FusedKernel>(expression);
  return [kernel](const std::vector<Tensor>& in, std::vector<Tensor>& out) { kernel->run(in, out); };
}

std::string fuse_unless_turned_off(graph::Graph& g) {
  const char* setting = std::getenv("KILN_CUDA_FUSION");
  if (setting != nullptr && std::string(setting) == "0") return "";
  return graph::fuse_elementwise(g);
}

[[maybe_unused]] const bool registered = [] {
  graph::register_elementwise_lowering(DeviceType::CUDA, lower, {DType::Float32, DType::Float16, DType::BFloat16});
  graph::register_backend_passes(DeviceType::CUDA, {{"elementwise fusion", graph::plain<fuse_unless_turned_off>}});
  return true;
}();

}  // namespace
}  // namespace kiln::cuda
