#pragma once
// Model: the training and evaluation loop around a Cell, a loss and an optimizer.
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data.h"
#include "kiln/data_parallel.h"
#include "kiln/jit.h"
#include "kiln/metrics.h"
#include "kiln/mixed_precision.h"
#include "kiln/nn.h"
#include "kiln/nn/losses.h"
#include "kiln/optim.h"
#include "kiln/train_step.h"

namespace kiln::train {

using LossFn = std::function<Tensor(const Tensor& outputs, const Tensor& labels)>;
// The loss of a network that computes it itself from a whole batch, every
// column (MindSpore's Model(net_with_loss, optimizer=...)).
using BatchLossFn = std::function<Tensor(const data::Batch& batch)>;

struct StepInfo {
  int epoch = 0;               // from 1
  int64_t step = 0;            // global, from 1
  int64_t batch = 0;           // within the epoch, from 1
  int64_t batches_per_epoch = 0;
  int64_t batch_size = 0;
  double loss = 0;
  double samples_per_s = 0;    // over the epoch so far
  // With a loss scale (mixed precision in float16): the scale this step
  // ran with, and whether its gradients overflowed, which skipped its update.
  double loss_scale = 0;
  bool update_skipped = false;
};

struct EpochInfo {
  int epoch = 0;
  int epochs = 0;
  double mean_loss = 0;        // training loss, mean over the epoch
  double val_loss = std::nan("");      // with a validation set
  double val_accuracy = std::nan("");
  double seconds = 0;          // the training loop alone
  double samples_per_s = 0;
  int64_t skipped_steps = 0;  // updates skipped for overflowed gradients (loss scaling)
};

class Model;

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Model&) {}
  virtual void on_step_end(Model&, const StepInfo&) {}
  virtual void on_epoch_end(Model&, const EpochInfo&) {}
  virtual void on_train_end(Model&) {}
  // What a callback must carry across a resumed run (EarlyStopping's best
  // value, ...), as strings for the checkpoint's metadata.
  virtual std::map<std::string, std::string> state() const { return {}; }
  virtual void load_state(const std::map<std::string, std::string>&) {}
};

// Prints progress: a bar with rate and ETA on a terminal, a line every
// `every` steps otherwise, and a summary line per epoch.
class LossMonitor : public Callback {
 public:
  explicit LossMonitor(int64_t every = 100) : every_(every) {}
  void on_step_end(Model&, const StepInfo& s) override;
  void on_epoch_end(Model&, const EpochInfo& e) override;

 private:
  int64_t every_;
};

// Sets the optimizer's learning rate from a schedule before every step
// (per_epoch: from the epoch number instead, counted from 0).
class LearningRateScheduler : public Callback {
 public:
  explicit LearningRateScheduler(optim::Schedule schedule, bool per_epoch = false)
      : schedule_(std::move(schedule)), per_epoch_(per_epoch) {}
  void on_train_begin(Model& m) override;
  void on_step_end(Model& m, const StepInfo& s) override;
  void on_epoch_end(Model& m, const EpochInfo& e) override;

 private:
  optim::Schedule schedule_;
  bool per_epoch_;
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // top-1, over samples (or tokens, for sequence outputs)
  int64_t samples = 0;
  // "loss" and every result of the Model's metrics ("accuracy", "precision", ...).
  std::map<std::string, double> metrics;
  double operator[](const std::string& name) const;  // throws naming the metrics there are
};

// What train() does when the loss is NaN or infinite.
enum class NonFinitePolicy {
  Error,     // throw, naming the step and the last finite loss (the default)
  Stop,      // end training there, keep what was learned so far, and warn
  SkipStep,  // skip that batch's update and warn; still an error after 10 in a row
};

class Model {
 public:
  Model(std::shared_ptr<nn::Cell> net, LossFn loss, std::shared_ptr<optim::Optimizer> optimizer,
        std::vector<std::shared_ptr<metrics::Metric>> metrics = {});
  Model(std::shared_ptr<nn::Cell> net, std::shared_ptr<nn::LossCell> loss, std::shared_ptr<optim::Optimizer> optimizer,
        std::vector<std::shared_ptr<metrics::Metric>> metrics = {});
  // `net_with_loss` computes the loss itself, through `loss_of_batch`, from
  // each batch's columns (a per-sample weight, a mask, several inputs):
  // training runs eagerly in either mode, eval() gives the mean loss alone
  // (metrics need outputs), and predict() is refused.
  Model(std::shared_ptr<nn::Cell> net_with_loss, BatchLossFn loss_of_batch, std::shared_ptr<optim::Optimizer> optimizer);
  // Metrics that eval() computes besides the loss (default: top-1 accuracy).
  void set_metrics(std::vector<std::shared_ptr<metrics::Metric>> metrics);
  void set_nonfinite_policy(NonFinitePolicy policy) { nonfinite_ = policy; }
  // Eager or graph execution for this Model's train, eval and predict; unset,
  // the process-wide kiln::context().mode when each call starts.
  void set_mode(Mode mode) { mode_ = mode; }
  Mode mode() const { return mode_ ? *mode_ : context().mode; }
  // On (the default), training steps measure how many intra-op threads pay
  // off (kiln/thread_governor.h), so a step keeps its pace when another
  // process takes a core. Off, every step runs on all of them; a run and its
  // resumption in one process then give the same bits.
  void set_adapt_threads(bool on) { adapt_threads_ = on; }
  // Graph mode: input axes whose size varies (a short last batch, text of
  // any length), as jit::CompileOptions::dynamic: a new size there runs the
  // step's graph generalized over it, or compiles as expected where it
  // cannot be, and a change anywhere else is the unexpected recompile the
  // compile report names. Axis 0 of input 0 varies the labels' too. None
  // declared: the batch axis.
  void set_dynamic_axes(std::vector<jit::DynamicAxis> axes) { dynamic_ = std::move(axes); }
  // Trains in mixed precision (kiln/mixed_precision.h): forward and loss
  // under autocast, float32 master weights, and a loss scale for float16,
  // eagerly and in the compiled step alike. eval() and predict() run under
  // the same autocast.
  void set_mixed_precision(MixedPrecision precision);
  const MixedPrecision& mixed_precision() const { return precision_; }
  // The loss scale in use, or null.
  LossScaler* loss_scaler() { return scaler_.get(); }
  // Trains as one rank of a data-parallel job (kiln/data_parallel.h):
  // gradients averaged over the ranks in eager and graph mode, the step's
  // loss, the epoch's mean loss and eval()'s loss and metrics reduced over
  // the ranks, so that every rank reports and decides (early stopping,
  // plateaus) alike. Give each rank its share of the data
  // (data::DistributedSampler), and call train() and eval() on every rank:
  // they are collective.
  void set_data_parallel(std::shared_ptr<DataParallel> dp);
  const std::shared_ptr<DataParallel>& data_parallel() const { return dp_; }
  // Whether this process writes checkpoints and metrics files: rank 0 of a
  // data-parallel job, or a process training alone.
  bool writes_files() const;
  // Trains for `epochs` epochs; returns one EpochInfo per epoch. A loss that is
  // not finite is handled as the NonFinitePolicy says. Batches are copied to
  // the device the network's parameters are on (Cell::to), in eval() and
  // predict() too.
  // With a validation set, each epoch ends with an evaluation on it
  // (EpochInfo::val_loss and val_accuracy), before the callbacks run.
  std::vector<EpochInfo> train(int epochs, data::BatchSource& batches,
                               const std::vector<std::shared_ptr<Callback>>& callbacks = {},
                               data::BatchSource* validation = nullptr);
  // Asks train() to stop after the current step; the epoch then ends as usual
  // (validation, callbacks). EarlyStopping and StopAtStep call it.
  void stop_training() { stop_requested_ = true; }
  // Mean loss and the metrics over a dataset, in inference mode.
  EvalResult eval(data::BatchSource& batches);
  Tensor predict(const Tensor& inputs);
  // Makes the next train() call continue a run: after `batches_done` batches
  // of `epoch` (from 1), at global step `step`. Training checkpoints call it.
  void resume_at(int64_t step, int epoch, int64_t batches_done);
  int64_t global_step() const { return global_step_; }
  int epochs_completed() const { return epochs_completed_; }
  // Graph mode: the graphs compiled so far for the training step and for
  // eval/predict (one per input shape; both 0 when everything ran eagerly).
  struct CompiledGraphs {
    int train_step = 0;
    int inference = 0;
  };
  CompiledGraphs compiled_graphs() const;
  nn::Cell& network() { return *net_; }
  optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  std::shared_ptr<nn::Cell> net_;
  LossFn loss_;
  BatchLossFn batch_loss_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::vector<std::shared_ptr<metrics::Metric>> metrics_;
  NonFinitePolicy nonfinite_ = NonFinitePolicy::Error;
  std::optional<Mode> mode_;
  int64_t global_step_ = 0;
  int epochs_completed_ = 0;
  int resume_epoch_ = 0;  // 0: not resuming
  int64_t resume_batches_ = 0;
  bool stop_requested_ = false;
  bool adapt_threads_ = true;
  std::vector<jit::DynamicAxis> dynamic_;
  MixedPrecision precision_;
  std::unique_ptr<LossScaler> scaler_;
  std::shared_ptr<DataParallel> dp_;
  jit::CompiledFunction* inference();
  // Graph mode: the compiled training step and inference.
  std::unique_ptr<jit::TrainStep> train_step_;
  jit::CompiledFunction inference_;
};

}  // namespace kiln::train
