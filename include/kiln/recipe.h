#pragma once
// Training recipes: a YAML file that names the model, the dataset, the loss,
// the optimizer and schedule, the epochs and the output directory. Parsing
// validates every key and value before any data is loaded or trained on.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/models.h"

namespace kiln::recipe {

struct OptimizerSpec {
  std::string name = "sgd";  // sgd | adam | adamw | rmsprop
  double lr = 0.05;
  double momentum = 0.9;     // sgd, rmsprop
  double weight_decay = 0.0;
  bool nesterov = false;
};

// Schedules are written in epochs (fractions allowed) and applied every step.
struct ScheduleSpec {
  std::string name = "none";  // none | cosine | step | multistep | exponential | polynomial | piecewise
  double warmup_epochs = 0;   // cosine
  double min_lr = 0;          // cosine
  int64_t step_epochs = 1;    // step
  double gamma = 0.1;         // step, multistep, exponential (per epoch)
  std::vector<double> milestones;  // multistep: epochs at which the rate is multiplied by gamma
  double power = 1.0;         // polynomial
  double end_lr = 0.0;        // polynomial
  std::vector<double> boundaries;  // piecewise: epochs where the next value starts
  std::vector<double> values;      // piecewise: one more than boundaries
};

struct Recipe {
  std::string source;         // the path it was read from
  std::string text;           // the file as written, stored in checkpoints
  std::string model = "cnn";
  models::ModelConfig model_config;
  std::string dataset = "fashion_mnist";  // fashion_mnist | mnist
  std::string dataset_path;               // default: Debian's location for fashion_mnist
  double label_smoothing = 0.0;
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  int epochs = 5;
  int64_t batch_size = 64;
  uint64_t seed = 0;
  int threads = 0;            // 0: KILN_NUM_THREADS or all cores
  std::string output = "runs/default";
};

// Throws kiln::Error naming the key, the allowed keys or values, and the file.
Recipe parse_recipe_file(const std::string& path);
Recipe parse_recipe_text(const std::string& text, const std::string& source = "<text>");

// Command-line overrides (unset ones keep the recipe's values).
struct Overrides {
  std::optional<int> epochs;
  std::optional<int64_t> batch_size;
  std::optional<double> lr;
  std::optional<std::string> output;
  std::optional<uint64_t> seed;
  std::optional<int> threads;
};
void apply(Recipe& r, const Overrides& o);

struct RunResult {
  double accuracy = 0, loss = 0, train_samples_per_s = 0, sec_per_epoch = 0, peak_rss_mb = 0;
};

// Trains as the recipe says, writing into r.output: checkpoint.safetensors,
// metrics.jsonl (one line per epoch) and metrics.json (test accuracy and loss,
// median training throughput, seconds per epoch, peak RSS).
RunResult train(const Recipe& r, bool progress = true);
// Evaluates a checkpoint on the recipe's test set.
RunResult evaluate(const Recipe& r, const std::string& checkpoint);

}  // namespace kiln::recipe
