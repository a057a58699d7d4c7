// What the zoo's training steps need from the CUDA backend, checked in the
// op registry (no GPU needed): every op and dtype that one step of each model
// calls (forward, loss, backward, the SGD and Adam updates, the accuracy
// metric), in float32, under bfloat16 autocast and under float16 autocast
// with a scaled loss, has a CUDA kernel (or runs as ops that have one), so
// that none of it falls back to the CPU on a GPU.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "kiln/kiln.h"
#include "kiln/metrics.h"
#include "kiln/mixed_precision.h"
#include "kiln/models.h"
#include "kiln/op_library.h"
#include "ops/dispatch_hooks.h"

namespace kiln {
namespace {

std::set<std::pair<std::string, DType>>& called() {
  static std::set<std::pair<std::string, DType>> ops;
  return ops;
}

// Ops that run as their ops where a backend has no kernel of theirs
// (OpDef::decompose): those ops are noted instead.
std::set<std::string>& decomposed() {
  static std::set<std::string> ops;
  return ops;
}

// The op and the dtype that picks its kernel; views compute nothing.
void note_call(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>&, const Attrs& attrs) {
  if ((op.tags & kTagView) != 0) return;
  const auto at = static_cast<size_t>(op.dispatch_input);
  if (at < inputs.size() && inputs[at].defined()) called().insert({op.name, inputs[at].dtype()});
  if (op.decompose && decomposed().insert(op.name).second) op.decompose(inputs, attrs);  // (its calls noted too)
}

// One step of `name` with each optimizer and precision.
void train_one_step(const std::string& name) {
  models::ModelConfig config;
  config.hidden = {32};
  config.d_model = 32;
  config.dim_feedforward = 64;
  config.seq_len = 16;
  config.layers = 1;
  const bool text = models::reads_tokens(name);
  for (std::optional<DType> half :
       {std::optional<DType>(), std::optional<DType>(DType::BFloat16), std::optional<DType>(DType::Float16)}) {
    for (bool adam : {false, true}) {
      manual_seed(3);
      auto net = models::make_model(name, config);
      std::unique_ptr<optim::Optimizer> opt;
      if (adam)
        opt = std::make_unique<optim::Adam>(net->trainable_params(), optim::AdamOptions{});
      else
        opt = std::make_unique<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      const Tensor x = text ? randint(0, config.vocab_size, {2, config.seq_len}) : randn({4, 1, 28, 28});
      const Tensor y = text ? randint(0, config.vocab_size, {2 * config.seq_len}) : randint(0, 10, {4});
      Tensor out, loss;
      {
        AutocastScope autocast(half);
        out = (*net)(x);
        if (text) out = out.reshape({-1, config.vocab_size});
        loss = cross_entropy(out, y);
      }
      const double scale = half == DType::Float16 ? 1024.0 : 1.0;  // float16's loss scaling
      opt->zero_grad();
      (loss * scale).backward();
      if (train::unscale_gradients(net->trainable_params(), scale)) opt->step();
      train::metrics::Accuracy accuracy;
      accuracy.update(out.detach(), y);
    }
  }
}

TEST(CudaCoverage, EveryOpOfTheZoosTrainingStepsHasACudaKernel) {
  load_op_library(KILN_CUDA_BACKEND);
  called().clear();
  detail::t_op_observer = &note_call;
  for (const std::string& name : models::model_names()) train_one_step(name);
  detail::t_op_observer = nullptr;
  ASSERT_GT(called().size(), 20u) << "the observer saw too few ops to prove anything";
  std::string missing;
  for (const auto& [op, dtype] : called()) {
    if (decomposed().count(op)) continue;
    const auto on_cuda = OpRegistry::instance().get(op).dtypes(DeviceType::CUDA);
    if (std::find(on_cuda.begin(), on_cuda.end(), dtype) == on_cuda.end())
      missing += "\n  " + op + " (" + dtype_name(dtype) + ")";
  }
  EXPECT_TRUE(missing.empty()) << "ops of the zoo's training steps without a CUDA kernel:" << missing;
}

}  // namespace
}  // namespace kiln
