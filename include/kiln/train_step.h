#pragma once
// jit::TrainStep: a Cell's whole training step (forward, loss, gradients and
// the optimizer's update) compiled as one graph.
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/data_parallel.h"
#include "kiln/jit.h"
#include "kiln/mixed_precision.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

namespace kiln::jit {

// A whole training step as one graph: forward, loss, gradients (traced
// through the same gradient rules as eager backward), and the optimizer's
// fused in-place update, which reads the learning rate when it runs and is
// skipped when the loss is not finite. Parameters, buffers and optimizer
// state are updated in place; nothing is allocated per step.
class TrainStep {
 public:
  using LossFn = std::function<Tensor(const Tensor& outputs, const Tensor& labels)>;
  // With `data_parallel`, the graph averages the gradients over the ranks:
  // it starts each bucket's all-reduce where backward has produced it and
  // waits for them all before the update.
  TrainStep(std::shared_ptr<nn::Cell> net, LossFn loss, std::shared_ptr<optim::Optimizer> optimizer,
            CompileOptions options = {}, std::shared_ptr<train::DataParallel> data_parallel = nullptr);
  struct Result {
    Tensor loss;     // 0-d, unscaled
    Tensor outputs;  // the network's outputs
    // With a loss scale: false when the gradients overflowed, and the
    // update was skipped.
    bool gradients_finite = true;
  };
  // The forward pass and loss under autocast in precision.dtype, and with a
  // loss scale (precision.effective_loss_scale()) the loss multiplied by
  // set_loss_scale()'s value before the gradients, which are divided by it
  // and checked in the graph: an overflow skips the update. Set before the
  // first step.
  void set_mixed_precision(const train::MixedPrecision& precision);
  void set_loss_scale(double scale);
  // One step on a batch. The results stay valid until the next call.
  Result operator()(const Tensor& inputs, const Tensor& labels);
  const CompiledFunction& compiled() const { return fn_; }
  // Whether the optimizer update is part of the graph (optimizers without a
  // fused form are stepped eagerly after it, from the gradients it computed).
  bool fused_update() const { return fused_; }

 private:
  void build();
  std::shared_ptr<nn::Cell> net_;
  LossFn loss_;
  std::shared_ptr<optim::Optimizer> opt_;
  CompileOptions options_;
  std::shared_ptr<train::DataParallel> dp_;
  CompiledFunction fn_;
  std::vector<Tensor> lr_, state_;
  Tensor step_;
  std::optional<DType> autocast_;
  Tensor loss_scale_;  // 0-d float32, defined with a loss scale
  bool fused_ = true;
  std::shared_ptr<bool> fused_flag_;
  std::shared_ptr<std::vector<std::pair<size_t, size_t>>> returned_;  // unfused: whose gradients the graph returns
};

}  // namespace kiln::jit
