// `kiln train RECIPE.yaml` and `kiln eval RECIPE.yaml --checkpoint PATH`.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "cli_checks.h"
#include "kiln/dist.h"
#include "kiln/recipe.h"

namespace kiln::cli {

void add_train_commands(CLI::App& app) {
  static std::string recipe_path, checkpoint;
  static recipe::Overrides o;
  static int epochs = 0, threads = -1;
  static int64_t max_steps = -1;
  static int64_t batch_size = 0, seed = -1;
  static double lr = 0;
  static std::string output, resume, profile, data;
  static int64_t profile_steps = 20;
  static std::string mode;       // empty: the recipe's
  static std::string precision;  // empty: the recipe's
  static std::string device;     // empty: the recipe's
  static bool fixed_threads = false;

  auto* train = app.add_subcommand("train", "Train a model as a recipe says; writes checkpoint and metrics");
  train->add_option("recipe", recipe_path, "Recipe YAML file (with --resume: default, the checkpoint's own)");
  train->add_option("--resume", resume,
                    "Continue the run in this output directory (its resume.safetensors) or from this training checkpoint");
  train->add_option("--epochs", epochs, "Override the number of epochs");
  train->add_option("--batch-size", batch_size, "Override the batch size");
  train->add_option("--lr", lr, "Override the learning rate");
  train->add_option("--output", output, "Override the output directory");
  train->add_option("--data", data, "Override the dataset's folder or file (dataset.path); studio jobs pass their staged data_url");
  train->add_option("--seed", seed, "Override the seed");
  train->add_option("--threads", threads, "Override the thread count");
  train->add_flag("--fixed-threads", fixed_threads,
                  "Run every step on all the threads (by default steps measure how many pay off)");
  train->add_option("--max-steps", max_steps, "Stop after this many steps (0: no limit)");
  train->add_option("--profile", profile, "Profile some steps; write profile.txt, trace.json and report.html here")
      ->check(writable_folder());
  train->add_option("--profile-steps", profile_steps, "Steps to profile (after 5 warm-up steps)");
  train->add_option("--mode", mode, "eager, or graph: compile the whole training step and inference")
      ->check(CLI::IsMember({"eager", "graph"}));
  train->add_option("--precision", precision,
                    "float32, or mixed precision: bfloat16 (bf16) or float16 (fp16, with a dynamic loss scale)");
  train->add_option("--device", device,
                    "Where training runs: cpu, or another backend of this build (the recipe's device: key)");
  train->callback([] {
    KILN_CHECK(!recipe_path.empty() || !resume.empty(), "kiln train needs a recipe file, or --resume DIR");
    std::string resume_file = resume;
    if (!resume.empty() && std::filesystem::is_directory(resume)) resume_file = resume + "/resume.safetensors";
    KILN_CHECK(resume.empty() || std::filesystem::exists(resume_file), "--resume: no training checkpoint at '",
               resume_file, "'; kiln train writes resume.safetensors into its output directory after every epoch");
    recipe::Recipe r = recipe_path.empty() ? recipe::recipe_of_checkpoint(resume_file) : recipe::parse_recipe_file(recipe_path);
    if (!resume.empty() && output.empty() && std::filesystem::is_directory(resume)) r.output = resume;
    if (!data.empty()) r.dataset_path = data;
    if (epochs) o.epochs = epochs;
    if (batch_size) o.batch_size = batch_size;
    if (lr) o.lr = lr;
    if (!output.empty()) o.output = output;
    if (seed >= 0) o.seed = static_cast<uint64_t>(seed);
    if (threads >= 0) o.threads = threads;
    if (fixed_threads) o.adapt_threads = false;
    if (max_steps >= 0) o.max_steps = max_steps;
    if (!mode.empty()) o.mode = mode;
    if (!precision.empty()) o.precision = precision;
    if (!device.empty()) o.device = device;
    recipe::apply(r, o);
    recipe::RunOptions options;
    options.resume_from = resume_file;
    options.profile_dir = profile;
    options.profile_steps = profile_steps;
    recipe::RunResult res = recipe::train(r, options);
    if (res.seq_len > 0)
      std::printf("validation loss %.4f nats/char, next-character accuracy %.2f%%, %lld steps, %.0f tokens/s, peak RSS %.0f MB\n",
                  res.loss, 100 * res.accuracy, static_cast<long long>(res.steps),
                  res.train_samples_per_s * static_cast<double>(res.seq_len), res.peak_rss_mb);
    else
      std::printf("test accuracy %.2f%%, test loss %.4f, %.0f samples/s, %.1f s/epoch, peak RSS %.0f MB\n",
                  100 * res.accuracy, res.loss, res.train_samples_per_s, res.sec_per_epoch, res.peak_rss_mb);
    if (dist::place_from_environment().rank == 0)  // rank 0 writes for a data-parallel job
      std::printf("wrote %s/checkpoint.safetensors, resume.safetensors, metrics.json, metrics.jsonl\n", r.output.c_str());
  });

  auto* eval = app.add_subcommand("eval", "Evaluate a checkpoint on the recipe's test set");
  eval->add_option("recipe", recipe_path, "Recipe YAML file")->required();
  eval->add_option("--checkpoint", checkpoint, "Checkpoint (.safetensors) written by kiln train")->required();
  eval->add_option("--mode", mode, "eager, or graph: compiled inference")->check(CLI::IsMember({"eager", "graph"}));
  eval->add_option("--precision", precision, "float32, or bfloat16 or float16 under autocast");
  eval->add_option("--device", device,
                   "Where evaluation runs: cpu, or another backend of this build (the recipe's device: key)");
  static bool no_strict = false;
  eval->add_flag("--no-strict", no_strict,
                 "Load the weights whose names and shapes match and report the rest, instead of refusing the file");
  eval->callback([] {
    recipe::Recipe r = recipe::parse_recipe_file(recipe_path);
    if (!mode.empty()) r.mode = mode;
    recipe::Overrides given;
    if (!precision.empty()) given.precision = precision;
    if (!device.empty()) given.device = device;
    recipe::apply(r, given);
    recipe::RunResult res = recipe::evaluate(r, checkpoint, !no_strict);
    if (res.seq_len > 0)
      std::printf("validation loss %.4f nats/char, next-character accuracy %.2f%%\n", res.loss, 100 * res.accuracy);
    else
      std::printf("test accuracy %.2f%%, test loss %.4f\n", 100 * res.accuracy, res.loss);
    for (const auto& [name, value] : res.metrics) std::printf("  %-16s %.4f\n", name.c_str(), value);
  });
}

}  // namespace kiln::cli
