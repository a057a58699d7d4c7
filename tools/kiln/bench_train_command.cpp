// `kiln bench-train MODEL`: the training throughput of a zoo model on
// random data of its shape, one batch reused as a benchmark does, in eager or
// graph mode, in float32 or mixed precision, on any device of this build:
// warm-up steps, then timed steps ended by reading the loss (which waits
// for the device). Prints samples/s (tokens/s for text models) and the
// device's peak memory; --json prints one JSON line for scripts; --profile
// profiles the timed steps (op by op, device time beside host time).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_checks.h"
#include "kiln/kiln.h"
#include "kiln/mixed_precision.h"
#include "kiln/profiler.h"
#include "kiln/train_step.h"

namespace kiln::cli {
namespace {

struct BenchTrainArgs {
  std::string model, device = "cpu", mode = "eager", precision = "float32", profile;
  int64_t batch = 64, seq_len = 0, image_size = 28, channels = 1, classes = 10;
  int warmup = 5, steps = 20, threads = 0;
  bool json = false;
};

Tensor loss_of(const Tensor& out, const Tensor& y) {
  CrossEntropyOptions o;
  o.classes_last = out.dim() == 3;  // text models: [N, T, vocab] against [N, T]
  return cross_entropy(out, y, o);
}

void bench_train(const BenchTrainArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  const Device device = parse_device(a.device);
  const bool text = models::reads_tokens(a.model);
  models::ModelConfig c = models::default_config(a.model);
  c.num_classes = a.classes, c.in_channels = a.channels, c.image_size = a.image_size;
  if (a.seq_len > 0) c.seq_len = a.seq_len;
  const train::MixedPrecision precision = train::MixedPrecision::parse(a.precision);
  manual_seed(0);
  auto net = models::make_model(a.model, c);
  net->to(device);
  std::shared_ptr<optim::Optimizer> opt;
  if (text)
    opt = optim::make_adamw(net->trainable_params(), 1e-4, 0.01);
  else
    opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  const Tensor x = text ? randint(0, c.vocab_size, {a.batch, c.seq_len}).to(device)
                        : randn({a.batch, c.in_channels, c.image_size, c.image_size}).to(device);
  const Tensor y = text ? randint(0, c.vocab_size, {a.batch, c.seq_len}).to(device)
                        : randint(0, c.num_classes, {a.batch}).to(device);
  // float16 keeps a fixed scale here: a dynamic one's bookkeeping is the same work.
  const double scale = precision.dtype == DType::Float16 ? 1024.0 : 1.0;
  std::function<Tensor()> step;
  std::shared_ptr<jit::TrainStep> compiled;
  if (a.mode == "graph") {
    compiled = std::make_shared<jit::TrainStep>(net, loss_of, opt);
    if (precision.dtype) {
      compiled->set_mixed_precision(precision);
      if (scale != 1.0) compiled->set_loss_scale(scale);
    }
    step = [&] { return (*compiled)(x, y).loss; };
  } else {
    step = [&] {
      Tensor loss;
      {
        AutocastScope autocast(precision.dtype);
        loss = loss_of((*net)(x), y);
      }
      opt->zero_grad();
      (scale != 1.0 ? loss * scale : loss).backward();
      if (train::unscale_gradients(net->trainable_params(), scale)) opt->step();
      return loss;
    };
  }
  using clock = std::chrono::steady_clock;
  const auto compile_start = clock::now();
  for (int i = 0; i < a.warmup; ++i) step().item<double>();  // (the first graph step compiles)
  const double warmup_s = std::chrono::duration<double>(clock::now() - compile_start).count();
  if (!a.profile.empty()) profiler::start();
  const auto start = clock::now();
  Tensor loss;
  for (int i = 0; i < a.steps; ++i) loss = step();
  const double last_loss = loss.item<double>();  // waits for the device's queued steps
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  if (!a.profile.empty()) {
    profiler::stop();
    profiler::write_folder(a.profile, "kiln bench-train " + a.model + ", " + a.mode + " mode");
  }
  const double samples = static_cast<double>(a.batch) * a.steps;
  const double per_s = samples * (text ? static_cast<double>(c.seq_len) : 1.0) / seconds;
  const AllocatorStats memory = allocator_stats(device);
  // Graph mode on a device: whether the timed steps replayed a recording (CUDA graphs), or why not.
  const std::string recording = compiled ? compiled->compiled().report().recording : "";
  if (a.json) {
    nlohmann::json j = {{"model", a.model},
                        {"device", device.str()},
                        {"mode", a.mode},
                        {"precision", a.precision},
                        {"batch", a.batch},
                        {"seq_len", text ? c.seq_len : 0},
                        {"steps", a.steps},
                        {"step_ms", seconds / a.steps * 1e3},
                        {text ? "tokens_per_s" : "samples_per_s", per_s},
                        {"warmup_s", warmup_s},
                        {"loss", last_loss},
                        {"peak_mb", memory.peak_bytes_in_use / 1e6},
                        {"recording", recording}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s on %s, %s mode, %s, batch %lld%s: %.1f %s (%.2f ms a step), %lld parameters\n", a.model.c_str(),
              device.str().c_str(), a.mode.c_str(), a.precision.c_str(), static_cast<long long>(a.batch),
              text ? (" x " + std::to_string(c.seq_len)).c_str() : "", per_s, text ? "tokens/s" : "samples/s",
              seconds / a.steps * 1e3, static_cast<long long>(net->parameter_count()));
  std::printf("warm-up %.2f s (%d steps%s); last loss %.4f; peak memory on %s %.1f MB\n", warmup_s, a.warmup,
              a.mode == "graph" ? ", compiling the step" : "", last_loss, device.str().c_str(),
              memory.peak_bytes_in_use / 1e6);
  if (!recording.empty()) std::printf("the compiled step %s\n", recording.c_str());
  if (!a.profile.empty())
    std::printf(
        "profiled the %d timed steps (their time above includes the profiler's): wrote %s/profile.txt, "
        "trace.json and report.html\n",
        a.steps, a.profile.c_str());
}

}  // namespace

void add_bench_train_command(CLI::App& app) {
  auto a = std::make_shared<BenchTrainArgs>();
  auto* cmd = app.add_subcommand("bench-train", "Time training steps of a zoo model on random data");
  std::string models;
  for (const auto& m : models::model_names()) models += (models.empty() ? "" : ", ") + m;
  cmd->add_option("model", a->model, "The zoo model: " + models)
      ->required()
      ->check(CLI::IsMember(models::model_names()));
  cmd->add_option("--device", a->device, "Where it trains: cpu, or another backend of this build (cuda, cuda:1)");
  cmd->add_option("--mode", a->mode, "eager, or graph: the whole step compiled")
      ->check(CLI::IsMember({"eager", "graph"}));
  cmd->add_option("--precision", a->precision, "float32, bfloat16 (bf16) or float16 (fp16, with a loss scale)")
      ->check(precisions());
  cmd->add_option("--batch", a->batch, "Samples (sequences for text models) per step")->check(positive_count());
  cmd->add_option("--seq-len", a->seq_len, "Text models: tokens per sequence (default: the model's context)")
      ->check(positive_count());
  cmd->add_option("--image-size", a->image_size, "Image models: height and width")->check(positive_count());
  cmd->add_option("--channels", a->channels, "Image models: input channels")->check(positive_count());
  cmd->add_option("--classes", a->classes, "Image models: classes")->check(positive_count());
  cmd->add_option("--warmup", a->warmup, "Untimed steps first")->check(CLI::NonNegativeNumber);
  cmd->add_option("--steps", a->steps, "Timed steps")->check(positive_count());
  cmd->add_option("--threads", a->threads, "Intra-op threads (0: KILN_NUM_THREADS or all cores)");
  cmd->add_flag("--json", a->json, "One JSON line instead of the text");
  cmd->add_option("--profile", a->profile,
                  "Profile the timed steps; write profile.txt, trace.json and report.html here")
      ->check(writable_folder());
  cmd->callback([a] { bench_train(*a); });
}

}  // namespace kiln::cli
