// `kiln train RECIPE.yaml` and `kiln eval RECIPE.yaml --checkpoint PATH`.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "kiln/recipe.h"

namespace kiln::cli {

void add_train_commands(CLI::App& app) {
  static std::string recipe_path, checkpoint;
  static recipe::Overrides o;
  static int epochs = 0, threads = -1;
  static int64_t batch_size = 0, seed = -1;
  static double lr = 0;
  static std::string output;

  auto* train = app.add_subcommand("train", "Train a model as a recipe says; writes checkpoint and metrics");
  train->add_option("recipe", recipe_path, "Recipe YAML file")->required();
  train->add_option("--epochs", epochs, "Override the number of epochs");
  train->add_option("--batch-size", batch_size, "Override the batch size");
  train->add_option("--lr", lr, "Override the learning rate");
  train->add_option("--output", output, "Override the output directory");
  train->add_option("--seed", seed, "Override the seed");
  train->add_option("--threads", threads, "Override the thread count");
  train->callback([] {
    recipe::Recipe r = recipe::parse_recipe_file(recipe_path);
    if (epochs) o.epochs = epochs;
    if (batch_size) o.batch_size = batch_size;
    if (lr) o.lr = lr;
    if (!output.empty()) o.output = output;
    if (seed >= 0) o.seed = static_cast<uint64_t>(seed);
    if (threads >= 0) o.threads = threads;
    recipe::apply(r, o);
    recipe::RunResult res = recipe::train(r);
    std::printf("test accuracy %.2f%%, test loss %.4f, %.0f samples/s, %.1f s/epoch, peak RSS %.0f MB\n",
                100 * res.accuracy, res.loss, res.train_samples_per_s, res.sec_per_epoch, res.peak_rss_mb);
    std::printf("wrote %s/checkpoint.safetensors, metrics.json, metrics.jsonl\n", r.output.c_str());
  });

  auto* eval = app.add_subcommand("eval", "Evaluate a checkpoint on the recipe's test set");
  eval->add_option("recipe", recipe_path, "Recipe YAML file")->required();
  eval->add_option("--checkpoint", checkpoint, "Checkpoint (.safetensors) written by kiln train")->required();
  eval->callback([] {
    recipe::Recipe r = recipe::parse_recipe_file(recipe_path);
    recipe::RunResult res = recipe::evaluate(r, checkpoint);
    std::printf("test accuracy %.2f%%, test loss %.4f\n", 100 * res.accuracy, res.loss);
  });
}

}  // namespace kiln::cli
