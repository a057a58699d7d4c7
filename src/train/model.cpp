#include <chrono>
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/train.h"

namespace kiln::train {

Model::Model(std::shared_ptr<nn::Cell> net, LossFn loss, std::shared_ptr<optim::Optimizer> optimizer)
    : net_(std::move(net)), loss_(std::move(loss)), optimizer_(std::move(optimizer)) {
  KILN_CHECK(net_ != nullptr && static_cast<bool>(loss_), "Model needs a network and a loss function");
}

Model::Model(std::shared_ptr<nn::Cell> net, std::shared_ptr<nn::LossCell> loss,
             std::shared_ptr<optim::Optimizer> optimizer)
    : Model(std::move(net),
            [loss](const Tensor& out, const Tensor& y) {
              KILN_CHECK(loss != nullptr, "Model needs a loss");
              return loss->construct(out, y);
            },
            std::move(optimizer)) {}

std::vector<EpochInfo> Model::train(int epochs, data::BatchSource& batches,
                                    const std::vector<std::shared_ptr<Callback>>& callbacks,
                                    data::BatchSource* validation) {
  KILN_CHECK(optimizer_ != nullptr, "Model::train needs an optimizer");
  KILN_CHECK(epochs > 0, "epochs must be positive, got ", epochs);
  using Clock = std::chrono::steady_clock;
  std::vector<EpochInfo> history;
  for (auto& c : callbacks) c->on_train_begin(*this);
  double last_finite = std::nan("");
  stop_requested_ = false;
  for (int epoch = 1; epoch <= epochs && !stop_requested_; ++epoch) {
    net_->set_train(true);
    batches.start_epoch();
    auto start = Clock::now();
    data::Batch batch;
    double loss_sum = 0;
    int64_t samples = 0, batch_index = 0;
    while (batches.next(batch)) {
      Tensor loss = loss_(net_->construct(batch.inputs), batch.labels);
      double value = loss.item<double>();
      ++global_step_;
      ++batch_index;
      KILN_CHECK(std::isfinite(value), "the loss became ", value, " at step ", global_step_, " (epoch ", epoch,
                 ", batch ", batch_index, "); the last finite loss was ", last_finite,
                 ". Lower the learning rate, clip gradients, or check the inputs for NaN");
      last_finite = value;
      optimizer_->zero_grad();
      loss.backward();
      optimizer_->step();
      int64_t n = batch.inputs.shape()[0];
      samples += n;
      loss_sum += value * static_cast<double>(n);
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      StepInfo info{epoch, global_step_, batch_index, batches.batches_per_epoch(), batches.batch_size(), value,
                    elapsed > 0 ? static_cast<double>(samples) / elapsed : 0};
      for (auto& c : callbacks) c->on_step_end(*this, info);
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EpochInfo e;
    e.epoch = epoch;
    e.epochs = epochs;
    e.mean_loss = samples ? loss_sum / static_cast<double>(samples) : 0;
    e.seconds = seconds;
    e.samples_per_s = seconds > 0 ? static_cast<double>(samples) / seconds : 0;
    if (validation) {
      EvalResult v = eval(*validation);
      e.val_loss = v.loss;
      e.val_accuracy = v.accuracy;
    }
    history.push_back(e);
    for (auto& c : callbacks) c->on_epoch_end(*this, e);
  }
  for (auto& c : callbacks) c->on_train_end(*this);
  return history;
}

EvalResult Model::eval(data::BatchSource& batches) {
  NoGradGuard guard;
  net_->set_train(false);
  batches.start_epoch();
  data::Batch batch;
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  while (batches.next(batch)) {
    Tensor out = net_->construct(batch.inputs);
    int64_t n = batch.inputs.shape()[0];
    loss_sum += loss_(out, batch.labels).item<double>() * static_cast<double>(n);
    correct += sum(cast(eq(argmax(out, -1), batch.labels), DType::Int64)).item<int64_t>();
    r.samples += n;
  }
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  return r;
}

Tensor Model::predict(const Tensor& inputs) {
  NoGradGuard guard;
  net_->set_train(false);
  return net_->construct(inputs);
}

}  // namespace kiln::train
