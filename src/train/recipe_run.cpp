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
#include "kiln/run_tracker.h"
#include "kiln/dist.h"
#include "kiln/io.h"
#include "kiln/parallel.h"
#include "kiln/recipe.h"
#include "kiln/train.h"
#include "kiln/training_checkpoint.h"
#include "train/recipe_data.h"

namespace kiln::recipe {
namespace {

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
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

std::optional<optim::Schedule> make_schedule(const Recipe& r, int64_t steps_per_epoch, int64_t total) {
  const ScheduleSpec& s = r.schedule;
  if (s.name == "cosine") {
    // max_steps compresses the whole schedule into the shorter run; the warm-up keeps its share.
    const double share = s.warmup_epochs / static_cast<double>(r.epochs);
    const int64_t warmup = std::min(static_cast<int64_t>(share * static_cast<double>(total)), std::max<int64_t>(total - 1, 0));
    return optim::cosine_schedule(r.optimizer.lr, total, warmup, s.min_lr);
  }
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

train::LossFn loss_of(const Recipe& r) {
  CrossEntropyOptions o;
  o.label_smoothing = r.label_smoothing;
  o.classes_last = true;  // language models: logits [N, T, V]
  return [o](const Tensor& out, const Tensor& y) { return cross_entropy(out, y, o); };
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}


std::shared_ptr<train::Callback> make_callback(const CallbackSpec& c, const Recipe& r) {
  if (c.name == "early_stopping") return std::make_shared<train::EarlyStopping>(c.monitor, c.patience, c.min_delta);
  if (c.name == "reduce_lr_on_plateau")
    return std::make_shared<train::ReduceLROnPlateau>(c.monitor, c.factor, c.patience, c.min_lr);
  if (c.name == "model_checkpoint") return std::make_shared<train::ModelCheckpoint>(r.output, c.every_epochs, c.keep, "checkpoint", c.every_steps);
  return std::make_shared<train::TimeMonitor>();
}

RunResult result_of(const train::EvalResult& ev) {
  RunResult res;
  res.accuracy = ev.accuracy;
  res.loss = ev.loss;
  res.peak_rss_mb = peak_rss_mb();
  return res;
}

}  // namespace

RunResult train(const Recipe& r, bool progress) {
  RunOptions options;
  options.progress = progress;
  return train(r, options);
}

std::shared_ptr<nn::Cell> build_model(const Recipe& r) {
  return detail::make_model(r, detail::load_data(r).config);
}

Recipe recipe_of_checkpoint(const std::string& resume_path) {
  io::MappedSafetensors file(resume_path);
  auto it = file.metadata().find("recipe");
  KILN_CHECK(it != file.metadata().end(), "'", resume_path, "' does not carry the recipe it was trained with");
  return parse_recipe_text(it->second, resume_path);
}

namespace {
// The recipe's execution mode, for its Model alone (the process-wide mode is left as it is).
Mode mode_of(const Recipe& r) { return r.mode == "graph" ? Mode::Graph : Mode::Eager; }
}  // namespace

RunResult train(const Recipe& r, const RunOptions& options) {
  bool progress = options.progress;
  if (r.threads > 0) set_num_threads(r.threads);
  // More than one rank (kiln launch, torchrun, srun): join them first, so
  // that a rank that fails below is named by the others.
  std::shared_ptr<dist::ProcessGroup> group;
  if (dist::place_from_environment().world_size > 1) {
    dist::InitOptions init;
    init.backend = r.distributed.backend;
    init.timeout = std::chrono::milliseconds(static_cast<int64_t>(r.distributed.timeout_s * 1000));
    group = dist::init(init);
  }
  const detail::Shard shard{group ? group->rank() : 0, group ? group->size() : 1};
  const bool writes = shard.rank == 0;
  detail::RecipeData d = detail::load_data(r, shard);  // first: missing data fails before anything is written
  if (writes) std::filesystem::create_directories(r.output);

  manual_seed(r.seed);
  auto net = detail::make_model(r, d.config);
  // Before the optimizer: its state is made beside the parameters. Ranks of
  // one host train on GPUs of their own: "cuda" names the local rank's.
  Device device = parse_device(r.device);
  if (group && device.type == DeviceType::CUDA && r.device.find(':') == std::string::npos)
    device.index = group->place().local_rank;
  net->to(device);
  if (group && r.distributed.sync_batchnorm) nn::convert_sync_batchnorm(*net, dist::handle_of(group));
  auto opt = make_optimizer(r, net->trainable_params());
  int64_t steps_per_epoch = d.train->batches_per_epoch();
  int64_t total_steps = r.epochs * steps_per_epoch;
  if (r.max_steps > 0) total_steps = std::min(total_steps, r.max_steps);
  std::vector<std::shared_ptr<train::Callback>> callbacks;
  if (progress) callbacks.push_back(std::make_shared<train::LossMonitor>(100));
  if (auto s = make_schedule(r, steps_per_epoch, total_steps))
    callbacks.push_back(std::make_shared<train::LearningRateScheduler>(*s));
  bool resuming = !options.resume_from.empty();
  callbacks.push_back(std::make_shared<train::MetricsLogger>(r.output + "/metrics.jsonl", /*append=*/resuming));
  // Inside a Kiln Studio job, the run's metrics go to the studio too.
  auto tracker = train::RunTracker::from_environment();
  if (tracker) callbacks.push_back(tracker);
  std::vector<std::shared_ptr<train::Callback>> recipe_callbacks;  // their state goes into resume.safetensors
  for (const auto& c : r.callbacks) recipe_callbacks.push_back(make_callback(c, r));
  callbacks.insert(callbacks.end(), recipe_callbacks.begin(), recipe_callbacks.end());
  if (r.max_steps > 0) callbacks.push_back(std::make_shared<train::StopAtStep>(r.max_steps));
  int64_t checkpoint_steps = 0;
  for (const auto& c : r.callbacks)
    if (c.name == "model_checkpoint") checkpoint_steps = c.every_steps;
  callbacks.push_back(std::make_shared<train::TrainingCheckpoint>(
      r.output + "/resume.safetensors", checkpoint_steps,
      std::map<std::string, std::string>{{"recipe", r.text}, {"model", r.model}}, recipe_callbacks));
  callbacks.insert(callbacks.end(), options.callbacks.begin(), options.callbacks.end());
  if (!options.profile_dir.empty())
    callbacks.push_back(std::make_shared<train::ProfilerCallback>(options.profile_dir, options.profile_steps));

  train::Model model(net, loss_of(r), opt);
  model.set_mode(mode_of(r));
  model.set_adapt_threads(r.adapt_threads);
  model.set_mixed_precision(mixed_precision_of(r));
  if (resuming) train::load_training_checkpoint(options.resume_from, model, recipe_callbacks);
  std::shared_ptr<train::DataParallel> dp;
  if (group) {
    train::DataParallelOptions o;
    o.bucket_bytes = static_cast<int64_t>(r.distributed.bucket_mb * (1 << 20));
    dp = std::make_shared<train::DataParallel>(net, group, o);
    model.set_data_parallel(dp);
  }
  // Communication while training: the gradient buckets' and the rest (loss
  // and metrics, synchronized batch norm).
  auto comm = [&] {
    dist::ProcessGroup::Stats total;
    if (!dp) return total;
    for (const auto* g : {dp->group().get(), dp->buckets_group().get()}) {
      const auto s = g->stats();
      total.collectives += s.collectives;
      total.busy_seconds += s.busy_seconds;
      total.waited_seconds += s.waited_seconds;
    }
    return total;
  };
  const auto comm_before = comm();
  auto history = model.train(r.epochs, *d.train, callbacks, d.validation.get());
  const auto comm_after = comm();
  train::EvalResult ev = model.eval(*d.test);
  if (tracker && writes) {  // the test set's figures, which the studio's job list shows
    tracker->log("test_accuracy", model.global_step(), ev.accuracy);
    tracker->log("test_loss", model.global_step(), ev.loss);
    tracker->flush();
  }
  if (writes)
    io::save_cell(*net, r.output + "/checkpoint.safetensors",
                  {{"recipe", r.text}, {"model", r.model}, {"epochs", std::to_string(history.size())}});

  RunResult res = result_of(ev);
  std::vector<double> rates, seconds;
  for (auto& e : history) {
    rates.push_back(e.samples_per_s);
    seconds.push_back(e.seconds);
  }
  res.train_samples_per_s = median(rates);
  res.sec_per_epoch = median(seconds);
  res.steps = opt->steps();
  res.seq_len = d.seq_len;
  nlohmann::json metrics{{"accuracy", res.accuracy},
                         {"loss", res.loss},
                         {"train_samples_per_s", res.train_samples_per_s},
                         {"sec_per_epoch", res.sec_per_epoch},
                         {"peak_rss_mb", res.peak_rss_mb},
                         {"epochs", history.size()},
                         {"steps", res.steps},
                         {"model", r.model},
                         {"dataset", r.dataset},
                         {"threads", get_num_threads()},
                         {"mode", r.mode},
                         {"precision", model.mixed_precision().str()}};
  if (const train::LossScaler* scaler = model.loss_scaler()) {
    metrics["loss_scale"] = scaler->scale();
    metrics["skipped_steps"] = scaler->skipped_steps();
  }
  if (d.seq_len > 0) {  // text: the test set is the validation split, and throughput counts tokens
    metrics["val_loss"] = res.loss;
    metrics["train_tokens_per_s"] = res.train_samples_per_s * static_cast<double>(d.seq_len);
  }
  metrics["ranks"] = shard.ranks;  // throughput and metrics count every rank's samples
  if (group && res.steps > 0) {  // rank 0's view of the gradient (and loss) all-reduces
    const double busy = comm_after.busy_seconds - comm_before.busy_seconds;
    const double waited = comm_after.waited_seconds - comm_before.waited_seconds;
    metrics["comm_ms_per_step"] = 1000 * busy / static_cast<double>(res.steps);
    metrics["comm_hidden"] = busy > 0 ? std::max(0.0, 1 - waited / busy) : 1.0;
    if (progress)
      std::printf("communication: %.2f ms per step, %.0f%% of it under backward\n", metrics["comm_ms_per_step"].get<double>(),
                  100 * metrics["comm_hidden"].get<double>());
  }
  if (writes) std::ofstream(r.output + "/metrics.json") << metrics.dump(2) << "\n";
  return res;
}

RunResult evaluate(const Recipe& r, const std::string& checkpoint, bool strict) {
  if (r.threads > 0) set_num_threads(r.threads);
  detail::RecipeData d = detail::load_data(r);
  auto net = detail::make_model(r, d.config);
  io::load_checkpoint(*net, checkpoint, {.strict = strict});
  net->to(parse_device(r.device));
  std::vector<std::shared_ptr<train::metrics::Metric>> metrics{std::make_shared<train::metrics::Accuracy>()};
  if (d.seq_len == 0) {  // classification: top-5 and macro precision, recall and F1 too
    metrics.push_back(std::make_shared<train::metrics::Accuracy>(std::min<int64_t>(5, d.config.num_classes)));
    metrics.push_back(std::make_shared<train::metrics::ClassificationReport>(d.config.num_classes));
  }
  train::Model model(net, loss_of(r), nullptr, metrics);
  model.set_mode(mode_of(r));
  model.set_mixed_precision(mixed_precision_of(r));
  train::EvalResult ev = model.eval(*d.test);
  RunResult res = result_of(ev);
  res.seq_len = d.seq_len;
  res.metrics = ev.metrics;
  return res;
}

}  // namespace kiln::recipe
