#include <chrono>
#include <cmath>
#include <cstdio>

#include "kiln/autograd.h"
#include "kiln/parallel.h"
#include "kiln/profiler.h"
#include "kiln/thread_governor.h"
#include "kiln/train.h"

namespace kiln::train {
namespace {

// The batch's tensors on `device` (where they are already: untouched).
void move_batch(data::Batch& batch, Device device) {
  if (batch.inputs.defined()) batch.inputs = batch.inputs.to(device);
  if (batch.labels.defined()) batch.labels = batch.labels.to(device);
  for (Tensor& t : batch.extras)
    if (t.defined()) t = t.to(device);
}

}  // namespace

Model::Model(std::shared_ptr<nn::Cell> net, LossFn loss, std::shared_ptr<optim::Optimizer> optimizer,
             std::vector<std::shared_ptr<metrics::Metric>> metrics)
    : net_(std::move(net)), loss_(std::move(loss)), optimizer_(std::move(optimizer)) {
  KILN_CHECK(net_ != nullptr && static_cast<bool>(loss_), "Model needs a network and a loss function");
  set_metrics(std::move(metrics));
}

Model::Model(std::shared_ptr<nn::Cell> net, std::shared_ptr<nn::LossCell> loss,
             std::shared_ptr<optim::Optimizer> optimizer, std::vector<std::shared_ptr<metrics::Metric>> metrics)
    : Model(std::move(net),
            [loss](const Tensor& out, const Tensor& y) {
              KILN_CHECK(loss != nullptr, "Model needs a loss");
              return (*loss)(out, y);
            },
            std::move(optimizer), std::move(metrics)) {}

Model::Model(std::shared_ptr<nn::Cell> net_with_loss, BatchLossFn loss_of_batch,
             std::shared_ptr<optim::Optimizer> optimizer)
    : net_(std::move(net_with_loss)), batch_loss_(std::move(loss_of_batch)), optimizer_(std::move(optimizer)) {
  KILN_CHECK(net_ != nullptr && static_cast<bool>(batch_loss_), "Model needs a network and its loss of a batch");
}

void Model::set_metrics(std::vector<std::shared_ptr<metrics::Metric>> metrics) {
  KILN_CHECK(!batch_loss_ || metrics.empty(), "Model: metrics need the network's outputs, and this network gives "
             "its loss; evaluate the network inside it with a Model of its own");
  if (batch_loss_) {
    metrics_.clear();
    return;
  }
  for (auto& m : metrics) KILN_CHECK(m != nullptr, "Model: a metric is null");
  metrics_ = metrics.empty() ? std::vector<std::shared_ptr<metrics::Metric>>{std::make_shared<metrics::Accuracy>()}
                             : std::move(metrics);
}

double EvalResult::operator[](const std::string& name) const {
  auto it = metrics.find(name);
  if (it != metrics.end()) return it->second;
  std::string names;
  for (auto& [k, v] : metrics) names += (names.empty() ? "" : ", ") + k;
  KILN_FAIL("no metric '", name, "' in this evaluation; it has: ", names);
}

std::vector<EpochInfo> Model::train(int epochs, data::BatchSource& batches,
                                    const std::vector<std::shared_ptr<Callback>>& callbacks,
                                    data::BatchSource* validation) {
  KILN_CHECK(optimizer_ != nullptr, "Model::train needs an optimizer");
  KILN_CHECK(epochs > 0, "epochs must be positive, got ", epochs);
  if (batch_loss_ && mode() == Mode::Graph)
    std::fprintf(stderr, "kiln: note: a network that computes its own loss from whole batches trains eagerly; graph "
                         "mode compiles a network and a loss given apart\n");
  using Clock = std::chrono::steady_clock;
  std::vector<EpochInfo> history;
  int first_epoch = 1;
  int64_t skip = 0;
  if (resume_epoch_ > 0) {
    first_epoch = resume_epoch_;
    skip = resume_batches_;
    if (skip >= batches.batches_per_epoch()) {
      ++first_epoch;
      skip = 0;
    }
    batches.set_epoch(first_epoch - 1);
    resume_epoch_ = 0;
  }
  epochs_completed_ = first_epoch - 1;
  for (auto& c : callbacks) c->on_train_begin(*this);
  double last_finite = std::nan("");
  int skipped_in_a_row = 0;
  stop_requested_ = false;
  // Steps of the full batch size are measured; a smaller last batch runs on
  // the count they found best.
  auto governor = adapt_threads_ && get_num_threads() > 1 ? std::make_shared<ThreadGovernor>() : nullptr;
  const Device device = net_->device();
  for (int epoch = first_epoch; epoch <= epochs && !stop_requested_; ++epoch) {
    net_->set_train(true);
    batches.start_epoch();
    const int64_t batches_per_epoch = batches.batches_per_epoch();
    int64_t batch_index = 0;
    if (skip > 0) {  // a run resumed inside this epoch: its first batches were trained on already
      batches.skip_batches(skip);
      batch_index = skip;
      skip = 0;
    }
    auto start = Clock::now();
    data::Batch batch;
    double loss_sum = 0;
    int64_t samples = 0, skipped_this_epoch = 0;
    for (;;) {
      if (stop_requested_) break;
      {
        profiler::Range wait("data");  // time the step waits for its batch
        if (!batches.next(batch)) break;
        move_batch(batch, device);
      }
      profiler::Range step("step");
      GovernedRun governed(governor, batch.inputs.shape()[0] == batches.batch_size());
      const bool graph = mode() == Mode::Graph && !batch_loss_;
      const double scale = scaler_ ? scaler_->scale() : 1.0;
      bool gradients_finite = true;
      Tensor loss;
      {  // the forward pass and the loss under autocast (the compiled step sets its own)
        AutocastScope autocast(graph ? std::nullopt : precision_.dtype);
        if (batch_loss_) {
          loss = batch_loss_(batch);
        } else if (graph) {  // forward, backward and the update (skipped for a non-finite loss) in one graph
          if (!train_step_) {
            jit::CompileOptions o;
            o.name = "train_step";
            // The batch axis varies (a short last batch) unless axes were
            // declared: the step's graph is then symbolic in it where it can be.
            o.dynamic = dynamic_;
            if (o.dynamic.empty() && batch.inputs.dim() > 0) o.dynamic.push_back({0, 0});
            const bool labels_follow = batch.labels.defined() && batch.labels.dim() > 0;
            for (const auto& d : std::vector<jit::DynamicAxis>(o.dynamic))  // the labels' batch follows the inputs'
              if (d.input == 0 && d.axis == 0 && labels_follow) o.dynamic.push_back({1, 0});
            train_step_ = std::make_unique<jit::TrainStep>(net_, loss_, optimizer_, o, dp_);
            train_step_->set_mixed_precision(precision_);
          }
          if (scaler_) train_step_->set_loss_scale(scale);
          const jit::TrainStep::Result r = (*train_step_)(batch.inputs, batch.labels);
          loss = r.loss;
          gradients_finite = r.gradients_finite;
        } else {
          loss = loss_((*net_)(batch.inputs), batch.labels);
        }
      }
      // Data-parallel: the ranks' mean loss (the graph's step returns it),
      // so that every rank reports it and skips or stops on a non-finite one
      // alike; eagerly it comes with the gradients, which are dropped then.
      double value;
      if (dp_ && !graph) {
        optimizer_->zero_grad();
        value = dp_->backward(scaler_ ? loss * scale : loss) / scale;
      } else {
        value = loss.item<double>();
      }
      ++global_step_;
      ++batch_index;
      if (!std::isfinite(value)) {
        std::string what = "the loss became " + std::to_string(value) + " at step " + std::to_string(global_step_) +
                           " (epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch_index) +
                           "); the last finite loss was " + std::to_string(last_finite);
        const char* advice = ". Lower the learning rate, clip gradients, or check the inputs for NaN";
        bool give_up = nonfinite_ == NonFinitePolicy::Error ||
                       (nonfinite_ == NonFinitePolicy::SkipStep && ++skipped_in_a_row > 10);
        KILN_CHECK(!give_up, what, nonfinite_ == NonFinitePolicy::SkipStep ? " (the 11th in a row)" : "", advice);
        std::fprintf(stderr, "kiln: warning: %s; %s\n", what.c_str(),
                     nonfinite_ == NonFinitePolicy::Stop ? "training stops here" : "skipping this step");
        if (nonfinite_ == NonFinitePolicy::Stop) stop_requested_ = true;
        optimizer_->zero_grad();
        continue;
      }
      skipped_in_a_row = 0;
      last_finite = value;
      if (!graph) {
        if (!dp_) {
          optimizer_->zero_grad();
          (scaler_ ? loss * scale : loss).backward();
        }
        if (scaler_) {
          std::vector<Tensor> params;
          for (const auto& g : optimizer_->groups()) params.insert(params.end(), g.params.begin(), g.params.end());
          gradients_finite = unscale_gradients(params, scale);
        }
        if (gradients_finite) optimizer_->step();
      }
      if (scaler_) {
        scaler_->update(gradients_finite);
        if (!gradients_finite) ++skipped_this_epoch;
      }
      governed.finished();
      int64_t n = batch.inputs.shape()[0];
      samples += n;
      loss_sum += value * static_cast<double>(n);
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      StepInfo info{epoch, global_step_, batch_index, batches_per_epoch, batches.batch_size(), value,
                    elapsed > 0 ? static_cast<double>(samples) / elapsed : 0, scaler_ ? scale : 0,
                    !gradients_finite};
      for (auto& c : callbacks) c->on_step_end(*this, info);
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (dp_) {  // the epoch over every rank's samples
      auto totals = dp_->sum({loss_sum, static_cast<double>(samples)});
      loss_sum = totals[0];
      samples = static_cast<int64_t>(totals[1]);
    }
    EpochInfo e;
    e.epoch = epoch;
    e.epochs = epochs;
    e.mean_loss = samples ? loss_sum / static_cast<double>(samples) : std::nan("");
    e.seconds = seconds;
    e.samples_per_s = seconds > 0 ? static_cast<double>(samples) / seconds : 0;
    e.skipped_steps = skipped_this_epoch;
    if (validation) {
      EvalResult v = eval(*validation);
      e.val_loss = v.loss;
      e.val_accuracy = v.accuracy;
    }
    history.push_back(e);
    epochs_completed_ = epoch;
    for (auto& c : callbacks) c->on_epoch_end(*this, e);
  }
  for (auto& c : callbacks) c->on_train_end(*this);
  return history;
}

void Model::set_mixed_precision(MixedPrecision precision) {
  if (precision.dtype) AutocastScope check(precision.dtype);  // refuses anything but float16 and bfloat16
  precision_ = std::move(precision);
  const std::optional<LossScale> scale = precision_.effective_loss_scale();
  scaler_ = scale ? std::make_unique<LossScaler>(*scale) : nullptr;
  train_step_.reset();  // the compiled step casts and scales, or not
  inference_ = jit::CompiledFunction();
}

void Model::set_data_parallel(std::shared_ptr<DataParallel> dp) {
  dp_ = std::move(dp);
  train_step_.reset();  // the compiled step averages gradients, or not
}

bool Model::writes_files() const { return !dp_ || dp_->writes(); }

void Model::resume_at(int64_t step, int epoch, int64_t batches_done) {
  KILN_CHECK(step >= 0 && epoch >= 1 && batches_done >= 0, "Model::resume_at: invalid position (step ", step,
             ", epoch ", epoch, ", batch ", batches_done, ")");
  global_step_ = step;
  resume_epoch_ = epoch;
  resume_batches_ = batches_done;
}

Model::CompiledGraphs Model::compiled_graphs() const {
  return {train_step_ ? train_step_->compiled().compiles() : 0, inference_.defined() ? inference_.compiles() : 0};
}

jit::CompiledFunction* Model::inference() {
  if (!inference_.defined()) {
    jit::CompileOptions o;
    o.name = "inference";
    o.inference = true;                            // batch norm folded; rebuilt after the weights change
    o.recompile = jit::RecompilePolicy::Silent;  // a smaller last batch is expected here
    o.dynamic = dynamic_;
    inference_ = jit::compile(net_, {}, o);
  }
  return &inference_;
}

EvalResult Model::eval(data::BatchSource& batches) {
  NoGradGuard guard;
  AutocastScope autocast(precision_.dtype);
  net_->set_train(false);
  batches.start_epoch();
  for (auto& m : metrics_) m->reset();
  data::Batch batch;
  EvalResult r;
  double loss_sum = 0;
  const Device device = net_->device();
  while (batches.next(batch)) {
    move_batch(batch, device);
    int64_t n = batch.inputs.shape()[0];
    if (batch_loss_) {
      loss_sum += batch_loss_(batch).item<double>() * static_cast<double>(n);
      r.samples += n;
      continue;
    }
    Tensor out = mode() == Mode::Graph ? inference()->run_borrowed({batch.inputs})[0] : (*net_)(batch.inputs);
    loss_sum += loss_(out, batch.labels).item<double>() * static_cast<double>(n);
    for (auto& m : metrics_) m->update(out, batch.labels);
    r.samples += n;
  }
  if (dp_) {  // every rank's share of the data counts
    std::vector<double> counts{loss_sum, static_cast<double>(r.samples)};
    std::vector<size_t> sizes;
    for (auto& m : metrics_) {
      const std::vector<double> mine = m->counts();
      sizes.push_back(mine.size());
      counts.insert(counts.end(), mine.begin(), mine.end());
    }
    counts = dp_->sum(counts);
    loss_sum = counts[0];
    r.samples = static_cast<int64_t>(counts[1]);
    auto at = counts.begin() + 2;
    for (size_t i = 0; i < metrics_.size(); ++i) {
      if (sizes[i] > 0) metrics_[i]->set_counts({at, at + static_cast<std::ptrdiff_t>(sizes[i])});
      at += static_cast<std::ptrdiff_t>(sizes[i]);
    }
  }
  r.loss = r.samples ? loss_sum / static_cast<double>(r.samples) : std::nan("");
  r.metrics["loss"] = r.loss;
  for (auto& m : metrics_)
    for (auto& [name, value] : m->results()) r.metrics[name] = value;
  r.accuracy = r.metrics.count("accuracy") ? r.metrics["accuracy"] : std::nan("");
  return r;
}

Tensor Model::predict(const Tensor& inputs) {
  KILN_CHECK(!batch_loss_, "predict: this Model's network computes its loss from whole batches; call the network "
             "it wraps, or a Model of that network, for predictions");
  NoGradGuard guard;
  AutocastScope autocast(precision_.dtype);
  net_->set_train(false);
  const Tensor x = inputs.to(net_->device());
  if (mode() == Mode::Graph) return (*inference())({x})[0];
  return (*net_)(x);
}

}  // namespace kiln::train
