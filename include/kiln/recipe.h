#pragma once
// Training recipes: a YAML file that names the model, the dataset, the loss,
// the optimizer and schedule, the epochs and the output directory. Parsing
// validates every key and value before any data is loaded or trained on.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/models.h"
#include "kiln/quantize.h"
#include "kiln/train.h"

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

// A training augmentation, applied in the dataset's own layout before the
// conversion to the model's float32 [C, H, W] input.
struct TransformSpec {
  std::string name;            // resize | random_crop | center_crop | random_horizontal_flip | random_rotation | random_erasing
  std::vector<int64_t> size;   // resize, random_crop, center_crop: [height, width] or [side]
  int64_t padding = 0;         // random_crop
  double probability = 0.5;    // random_horizontal_flip, random_erasing
  double degrees = 0;          // random_rotation
};

struct CallbackSpec {
  std::string name;             // early_stopping | reduce_lr_on_plateau | model_checkpoint | time_monitor
  std::string monitor = "val_loss";
  int patience = 3;
  double min_delta = 0;
  double factor = 0.1;
  double min_lr = 0;
  int every_epochs = 1;       // model_checkpoint (0: not per epoch)
  int64_t every_steps = 0;    // model_checkpoint (0: not per step)
  int keep = 3;
};

// Data-parallel training, used when the launcher started more than one rank
// (kiln launch, torchrun, srun): the ranks join, batch_size stays the global
// batch, and rank 0 writes the output.
struct DistributedSpec {
  std::string backend = "gloo";  // dist::InitOptions::backend
  double timeout_s = 300;  // joining and each collective
  double bucket_mb = 25;   // gradients all-reduced together
  bool sync_batchnorm = false;  // batch statistics over every rank's share of the batch
};

struct Recipe {
  std::string source;         // the path it was read from
  std::string text;           // the file as written, stored in checkpoints
  std::string model = "cnn";
  models::ModelConfig model_config;
  // fashion_mnist | mnist | cifar10 | image_folder | text | kjv | shards
  std::string dataset = "fashion_mnist";
  // shards: WebDataset-style tars of (image, cls) samples, local or
  // studio://, as patterns such as "studio://data/shards/fm-train-{000000..000003}.tar"
  // (kiln/data/shards.h); images decoded with `channels` (1: grey, 3: RGB).
  std::string shards, test_shards;
  int channels = 3;
  // mnist: the idx folder; cifar10: the folder of its .bin files; image_folder:
  // a folder with train/ and test/, one subfolder per class in each; text: a
  // file. Default: Debian's location for fashion_mnist; kjv reads bible-kjv.
  std::string dataset_path;
  std::vector<TransformSpec> transforms;  // training only; resize/crops also shape the test set
  std::vector<double> normalize_mean, normalize_std;  // after scaling pixels to [0, 1]
  // Held out of the training set for per-epoch validation (0: none). Text
  // datasets always split: the last 10% of the text unless set.
  double validation_fraction = 0;
  bool skip_bad_images = false;  // image_folder: replace images that do not decode, with a counted warning
  int workers = 2;                        // pipeline threads for datasets with transforms or files
  int64_t max_steps = 0;                  // stop after this many steps (0: run all epochs)
  std::vector<CallbackSpec> callbacks;
  double label_smoothing = 0.0;
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  int epochs = 5;
  int64_t batch_size = 64;
  bool drop_remainder = false;  // training: leave out a smaller last batch (one graph shape in graph mode)
  uint64_t seed = 0;
  int threads = 0;            // 0: KILN_NUM_THREADS or all cores
  bool adapt_threads = true;  // steps measure how many threads pay off (Model::set_adapt_threads)
  std::string output = "runs/default";
  std::string mode = "eager";  // eager | graph: compile the training step and inference (jit)
  // float32, or mixed precision: bfloat16 | float16 (kiln/mixed_precision.h).
  std::string precision = "float32";
  // float16's loss scale: dynamic (the default), or a fixed number.
  std::string loss_scale = "dynamic";
  // Quantization-aware training: convolutions and dense layers train on
  // fake-quantized inputs and weights (kiln/nn/quantize_aware.h), for a
  // checkpoint that `kiln quantize` turns into int8 with less loss.
  bool quantize_aware = false;
  std::string device = "cpu";  // where training runs: cpu (a device this build lacks is refused by name)
  DistributedSpec distributed;
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
  std::optional<bool> adapt_threads;
  std::optional<int64_t> max_steps;
  std::optional<std::string> mode;
  std::optional<std::string> precision;
  std::optional<std::string> device;
};
// The recipe's precision and loss scale as Model::set_mixed_precision takes them.
train::MixedPrecision mixed_precision_of(const Recipe& r);
void apply(Recipe& r, const Overrides& o);

struct RunResult {
  double accuracy = 0, loss = 0, train_samples_per_s = 0, sec_per_epoch = 0, peak_rss_mb = 0;
  int64_t steps = 0;
  int64_t seq_len = 0;  // text datasets: tokens per sample
  std::map<std::string, double> metrics;  // evaluate(): every metric of the test set
};

struct RunOptions {
  bool progress = true;
  // A training checkpoint (OUTPUT/resume.safetensors) to continue from.
  std::string resume_from;
  std::vector<std::shared_ptr<train::Callback>> callbacks;  // run after the recipe's own
  std::string profile_dir;     // profile some steps into this folder (ProfilerCallback)
  int64_t profile_steps = 20;
};

// Trains as the recipe says, writing into r.output: checkpoint.safetensors
// (the weights), resume.safetensors (the training checkpoint, after every
// epoch), metrics.jsonl (one line per epoch) and metrics.json (test accuracy
// and loss, median training throughput, seconds per epoch, peak RSS).
RunResult train(const Recipe& r, const RunOptions& options);
RunResult train(const Recipe& r, bool progress = true);
// The recipe's model, configured for its data (input channels, image size,
// classes, vocabulary), with fresh weights.
std::shared_ptr<nn::Cell> build_model(const Recipe& r);
// The recipe a training checkpoint was written with.
Recipe recipe_of_checkpoint(const std::string& resume_path);
// Evaluates a checkpoint on the recipe's test set (for text: the validation split).
// Non-strict: loads the weights that match and prints what did not.
RunResult evaluate(const Recipe& r, const std::string& checkpoint, bool strict = true);

// A checkpoint exported to ONNX (batch size free) and quantized after
// training: calibrated on the first `calibration_batches` batches of the
// recipe's training data (or its validation split), and, for classifiers,
// the test set's accuracy of the float and of the quantized model.
struct QuantizedRecipe {
  QuantizeResult quantized;
  double float_accuracy = -1, quantized_accuracy = -1;  // -1: not a classifier
  int64_t test_samples = 0;
};
QuantizedRecipe quantize(const Recipe& r, const std::string& checkpoint, const QuantizeOptions& options = {},
                         int64_t calibration_batches = 8);

}  // namespace kiln::recipe
