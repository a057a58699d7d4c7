// Running a recipe: data first (so a missing dataset fails before anything
// else), then the model, optimizer and schedule, training, the test-set
// evaluation, the checkpoint and the metrics files.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/callbacks.h"
#include "kiln/io.h"
#include "kiln/parallel.h"
#include "kiln/recipe.h"
#include "kiln/train.h"

namespace kiln::recipe {
namespace {

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::string dataset_dir(const Recipe& r) {
  if (!r.dataset_path.empty()) return r.dataset_path;
  KILN_CHECK(r.dataset == "fashion_mnist", r.source, ": dataset '", r.dataset,
             "' has no default location; set dataset.path to the folder of its idx files");
  return data::kFashionMnistDir;
}

std::shared_ptr<optim::Optimizer> make_optimizer(const Recipe& r, const std::vector<Tensor>& params) {
  const OptimizerSpec& o = r.optimizer;
  if (o.name == "sgd")
    return std::make_shared<optim::SGD>(
        params, optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay, .nesterov = o.nesterov});
  if (o.name == "adam" || o.name == "adamw")
    return std::make_shared<optim::Adam>(
        params, optim::AdamOptions{.lr = o.lr, .weight_decay = o.name == "adamw" && o.weight_decay == 0 ? 0.01 : o.weight_decay,
                                   .decoupled_weight_decay = o.name == "adamw"});
  return std::make_shared<optim::RMSProp>(
      params, optim::RMSPropOptions{.lr = o.lr, .weight_decay = o.weight_decay, .momentum = o.momentum});
}

std::optional<optim::Schedule> make_schedule(const Recipe& r, int64_t steps_per_epoch) {
  const ScheduleSpec& s = r.schedule;
  int64_t total = r.epochs * steps_per_epoch;
  if (s.name == "cosine")
    return optim::cosine_schedule(r.optimizer.lr, total, static_cast<int64_t>(s.warmup_epochs * steps_per_epoch), s.min_lr);
  if (s.name == "step") return optim::step_schedule(r.optimizer.lr, s.step_epochs * steps_per_epoch, s.gamma);
  auto to_steps = [&](const std::vector<double>& epochs) {
    std::vector<int64_t> steps;
    for (double e : epochs) steps.push_back(static_cast<int64_t>(std::llround(e * static_cast<double>(steps_per_epoch))));
    return steps;
  };
  if (s.name == "multistep") return optim::multistep_schedule(r.optimizer.lr, to_steps(s.milestones), s.gamma);
  if (s.name == "exponential")
    return optim::exponential_schedule(r.optimizer.lr, std::pow(s.gamma, 1.0 / static_cast<double>(steps_per_epoch)));
  if (s.name == "polynomial") return optim::polynomial_schedule(r.optimizer.lr, total, s.power, s.end_lr);
  if (s.name == "piecewise") return optim::piecewise_constant_schedule(to_steps(s.boundaries), s.values);
  return std::nullopt;
}

models::ModelConfig model_config(const Recipe& r) {
  models::ModelConfig c = r.model_config;
  c.in_channels = 1;
  c.image_size = 28;
  return c;
}

train::LossFn loss_of(const Recipe& r) {
  CrossEntropyOptions o;
  o.label_smoothing = r.label_smoothing;
  return [o](const Tensor& out, const Tensor& y) { return cross_entropy(out, y, o); };
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

RunResult train(const Recipe& r, bool progress) {
  if (r.threads > 0) set_num_threads(r.threads);
  std::string dir = dataset_dir(r);
  data::TensorDataset train_set = data::load_mnist(dir, "train");
  data::TensorDataset test_set = data::load_mnist(dir, "test");
  std::filesystem::create_directories(r.output);

  manual_seed(r.seed);
  auto net = models::make_model(r.model, model_config(r));
  auto opt = make_optimizer(r, net->trainable_params());
  data::BatchIterator train_batches(train_set, r.batch_size, /*shuffle=*/true, /*drop_remainder=*/false, r.seed + 1);
  // Evaluation batches stay small: a batch of 1000 would make activations the peak of memory.
  data::BatchIterator test_batches(test_set, 256, false);
  std::vector<std::shared_ptr<train::Callback>> callbacks;
  if (progress) callbacks.push_back(std::make_shared<train::LossMonitor>(100));
  if (auto s = make_schedule(r, train_batches.batches_per_epoch()))
    callbacks.push_back(std::make_shared<train::LearningRateScheduler>(*s));
  callbacks.push_back(std::make_shared<train::MetricsLogger>(r.output + "/metrics.jsonl"));

  train::Model model(net, loss_of(r), opt);
  auto history = model.train(r.epochs, train_batches, callbacks);
  train::EvalResult ev = model.eval(test_batches);
  io::save_cell(*net, r.output + "/checkpoint.safetensors",
                {{"recipe", r.text}, {"model", r.model}, {"epochs", std::to_string(r.epochs)}});

  RunResult res;
  res.accuracy = ev.accuracy;
  res.loss = ev.loss;
  std::vector<double> rates, seconds;
  for (auto& e : history) {
    rates.push_back(e.samples_per_s);
    seconds.push_back(e.seconds);
  }
  res.train_samples_per_s = median(rates);
  res.sec_per_epoch = median(seconds);
  res.peak_rss_mb = peak_rss_mb();
  nlohmann::json metrics{{"accuracy", res.accuracy},
                         {"loss", res.loss},
                         {"train_samples_per_s", res.train_samples_per_s},
                         {"sec_per_epoch", res.sec_per_epoch},
                         {"peak_rss_mb", res.peak_rss_mb},
                         {"epochs", r.epochs},
                         {"model", r.model},
                         {"threads", get_num_threads()}};
  std::ofstream(r.output + "/metrics.json") << metrics.dump(2) << "\n";
  return res;
}

RunResult evaluate(const Recipe& r, const std::string& checkpoint) {
  if (r.threads > 0) set_num_threads(r.threads);
  data::BatchIterator test_batches(data::load_mnist(dataset_dir(r), "test"), 256, false);
  auto net = models::make_model(r.model, model_config(r));
  io::load_cell(*net, checkpoint);
  train::Model model(net, loss_of(r), nullptr);
  train::EvalResult ev = model.eval(test_batches);
  RunResult res;
  res.accuracy = ev.accuracy;
  res.loss = ev.loss;
  res.peak_rss_mb = peak_rss_mb();
  return res;
}

}  // namespace kiln::recipe
