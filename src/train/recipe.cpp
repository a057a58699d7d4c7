#include "kiln/recipe.h"

#include "io/yaml_section.h"
#include "kiln/backend.h"
#include "kiln/device.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace kiln::recipe {
namespace {

using detail::join;
using Section = detail::YamlSection;

void check(bool ok, const Recipe& r, const std::string& what) { KILN_CHECK(ok, r.source, ": ", what); }

// The device a recipe trains on (where: the key or option that named it):
// any backend this build has; ops its kernels lack run on the CPU, visibly.
void check_training_device(const std::string& name, const std::string& where) {
  try {
    backend(parse_device(name).type);  // a malformed name, or a backend this build lacks, is named
  } catch (const Error& e) {
    KILN_FAIL(where, ": ", e.what());
  }
}

std::string item_name(const char* list, size_t i) {
  std::string where = list;  // appended: GCC 12 warns falsely (-Wrestrict) on chained + here
  where += "[";
  where += std::to_string(i);
  where += "]";
  return where;
}

std::vector<TransformSpec> parse_transforms(const YAML::Node& list, const std::string& source) {
  KILN_CHECK(list.IsSequence(), source, ": dataset.transforms must be a list, e.g. [{name: random_crop, size: 28, ",
             "padding: 2}]");
  std::vector<TransformSpec> out;
  for (size_t i = 0; i < list.size(); ++i) {
    std::string where = item_name("dataset.transforms", i);
    Section t(list[i], where, {"name", "size", "padding", "probability", "degrees"}, source);
    TransformSpec spec;
    t.read_choice("name", spec.name,
                  {"resize", "random_crop", "center_crop", "random_horizontal_flip", "random_rotation", "random_erasing"});
    if (t["size"] && t["size"].IsScalar()) {
      int64_t side = 0;
      t.read("size", side);
      spec.size = {side, side};
    } else {
      t.read("size", spec.size);
    }
    t.read("padding", spec.padding);
    t.read("probability", spec.probability);
    t.read("degrees", spec.degrees);
    bool sized = spec.name == "resize" || spec.name == "random_crop" || spec.name == "center_crop";
    KILN_CHECK(!sized || (spec.size.size() == 2 && spec.size[0] > 0 && spec.size[1] > 0), source, ": ", where, " (",
               spec.name, ") needs size: [height, width] or one positive side");
    KILN_CHECK(spec.probability >= 0 && spec.probability <= 1 && spec.padding >= 0 && spec.degrees >= 0, source, ": ",
               where, ": probability must be in [0, 1], padding and degrees >= 0");
    out.push_back(spec);
  }
  return out;
}

std::vector<CallbackSpec> parse_callbacks(const YAML::Node& list, const std::string& source) {
  KILN_CHECK(list.IsSequence(), source, ": callbacks must be a list, e.g. [{name: early_stopping, patience: 3}]");
  std::vector<CallbackSpec> out;
  for (size_t i = 0; i < list.size(); ++i) {
    std::string where = item_name("callbacks", i);
    Section c(list[i], where,
              {"name", "monitor", "patience", "min_delta", "factor", "min_lr", "every_epochs", "every_steps", "keep"}, source);
    CallbackSpec spec;
    c.read_choice("name", spec.name, {"early_stopping", "reduce_lr_on_plateau", "model_checkpoint", "time_monitor"});
    c.read_choice("monitor", spec.monitor, {"loss", "val_loss", "val_accuracy"});
    c.read("patience", spec.patience);
    c.read("min_delta", spec.min_delta);
    c.read("factor", spec.factor);
    c.read("min_lr", spec.min_lr);
    c.read("every_epochs", spec.every_epochs);
    c.read("every_steps", spec.every_steps);
    c.read("keep", spec.keep);
    KILN_CHECK(spec.patience >= 0 && spec.every_epochs >= 0 && spec.every_steps >= 0 &&
                   (spec.every_epochs > 0 || spec.every_steps > 0) && spec.keep > 0 && spec.factor > 0 && spec.factor < 1,
               source, ": ", where, ": need patience >= 0, every_epochs or every_steps > 0, keep > 0 and 0 < factor < 1");
    out.push_back(spec);
  }
  return out;
}

}  // namespace

Recipe parse_recipe_text(const std::string& text, const std::string& source) {
  Recipe r;
  r.source = source;
  r.text = text;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    KILN_FAIL(source, ": not valid YAML: ", e.what());
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  Section top(root, "the recipe",
              {"model", "model_config", "dataset", "loss", "optimizer", "schedule", "callbacks", "epochs", "max_steps",
               "batch_size", "drop_remainder", "seed", "threads", "adapt_threads", "output", "mode", "distributed",
               "device", "quantize_aware", "precision", "loss_scale"},
              source);
  std::set<std::string> models(models::model_names().begin(), models::model_names().end());
  top.read_choice("model", r.model, models);
  r.model_config = models::default_config(r.model);  // the model's own sizes, which model_config overrides
  if (top["model_config"]) {
    Section mc(top["model_config"], "model_config",
               {"num_classes", "hidden", "vocab_size", "seq_len", "d_model", "heads", "layers", "dim_feedforward"}, source);
    mc.read("num_classes", r.model_config.num_classes);
    mc.read("hidden", r.model_config.hidden);
    mc.read("vocab_size", r.model_config.vocab_size);
    mc.read("seq_len", r.model_config.seq_len);
    mc.read("d_model", r.model_config.d_model);
    mc.read("heads", r.model_config.heads);
    mc.read("layers", r.model_config.layers);
    mc.read("dim_feedforward", r.model_config.dim_feedforward);
  }
  const std::set<std::string> datasets{"fashion_mnist", "mnist", "cifar10", "image_folder", "text", "kjv", "shards"};
  if (top["dataset"]) {
    if (top["dataset"].IsScalar()) {
      top.read_choice("dataset", r.dataset, datasets);
    } else {
      Section ds(top["dataset"], "dataset",
                 {"name", "path", "transforms", "normalize", "validation_fraction", "workers", "skip_bad_images",
                  "shards", "test_shards", "channels"},
                 source);
      ds.read_choice("name", r.dataset, datasets);
      ds.read("shards", r.shards);
      ds.read("test_shards", r.test_shards);
      ds.read("channels", r.channels);
      if (!r.shards.empty() && !ds["name"]) r.dataset = "shards";
      ds.read("path", r.dataset_path);
      ds.read("validation_fraction", r.validation_fraction);
      ds.read("skip_bad_images", r.skip_bad_images);
      ds.read("workers", r.workers);
      if (ds["normalize"]) {
        Section n(ds["normalize"], "dataset.normalize", {"mean", "std"}, source);
        n.read("mean", r.normalize_mean);
        n.read("std", r.normalize_std);
      }
      if (ds["transforms"]) r.transforms = parse_transforms(ds["transforms"], source);
    }
  }
  if (top["loss"]) {
    Section loss(top["loss"], "loss", {"name", "label_smoothing"}, source);
    std::string name = "cross_entropy";
    loss.read_choice("name", name, {"cross_entropy"});
    loss.read("label_smoothing", r.label_smoothing);
  }
  if (top["optimizer"]) {
    Section o(top["optimizer"], "optimizer", {"name", "lr", "momentum", "weight_decay", "nesterov"}, source);
    o.read_choice("name", r.optimizer.name, {"sgd", "adam", "adamw", "rmsprop"});
    if (r.optimizer.name == "adam" || r.optimizer.name == "adamw") r.optimizer.lr = 1e-3;
    o.read("lr", r.optimizer.lr);
    o.read("momentum", r.optimizer.momentum);
    o.read("weight_decay", r.optimizer.weight_decay);
    o.read("nesterov", r.optimizer.nesterov);
  }
  if (top["schedule"]) {
    Section s(top["schedule"], "schedule",
              {"name", "warmup_epochs", "min_lr", "step_epochs", "gamma", "milestones", "power", "end_lr", "boundaries",
               "values"},
              source);
    s.read_choice("name", r.schedule.name,
                  {"none", "cosine", "step", "multistep", "exponential", "polynomial", "piecewise"});
    s.read("milestones", r.schedule.milestones);
    s.read("power", r.schedule.power);
    s.read("end_lr", r.schedule.end_lr);
    s.read("boundaries", r.schedule.boundaries);
    s.read("values", r.schedule.values);
    s.read("warmup_epochs", r.schedule.warmup_epochs);
    s.read("min_lr", r.schedule.min_lr);
    s.read("step_epochs", r.schedule.step_epochs);
    s.read("gamma", r.schedule.gamma);
  }
  if (top["callbacks"]) r.callbacks = parse_callbacks(top["callbacks"], source);
  if (top["distributed"]) {
    Section d(top["distributed"], "distributed", {"backend", "timeout_s", "bucket_mb", "sync_batchnorm"}, source);
    d.read("backend", r.distributed.backend);
    d.read("timeout_s", r.distributed.timeout_s);
    d.read("bucket_mb", r.distributed.bucket_mb);
    d.read("sync_batchnorm", r.distributed.sync_batchnorm);
  }
  top.read("max_steps", r.max_steps);
  top.read("epochs", r.epochs);
  top.read("batch_size", r.batch_size);
  top.read("drop_remainder", r.drop_remainder);
  top.read("seed", r.seed);
  top.read("threads", r.threads);
  top.read("adapt_threads", r.adapt_threads);
  top.read("output", r.output);
  top.read_choice("mode", r.mode, {"eager", "graph"});
  top.read_choice("precision", r.precision, {"float32", "fp32", "bfloat16", "bf16", "float16", "fp16"});
  top.read("loss_scale", r.loss_scale);
  try {
    mixed_precision_of(r);
  } catch (const Error& e) {
    KILN_FAIL(r.source, ": ", e.what());
  }
  top.read("quantize_aware", r.quantize_aware);
  top.read("device", r.device);
  check_training_device(r.device, r.source + ": device");
  bool is_text = r.dataset == "text" || r.dataset == "kjv";
  check(models::reads_tokens(r.model) == is_text, r,
        is_text ? "a text dataset needs a model that reads tokens (char_transformer or gpt2), not " + r.model
                : "model " + r.model + " needs a text dataset (text or kjv)");
  check(r.dataset != "text" || !r.dataset_path.empty(), r, "dataset text needs dataset.path: the text file to train on");
  check(r.dataset != "image_folder" || !r.dataset_path.empty(), r,
        "dataset image_folder needs dataset.path: a folder holding train/ and test/");
  check(!is_text || r.transforms.empty(), r, "dataset.transforms apply to images, not to text");
  check(r.validation_fraction >= 0 && r.validation_fraction < 1, r, "dataset.validation_fraction must be in [0, 1)");
  check(!r.skip_bad_images || r.dataset == "image_folder", r,
        "dataset.skip_bad_images applies to image_folder datasets only (the others are not decoded per file)");
  check(r.workers >= 0 && r.workers <= 64, r, "dataset.workers must be 0 to 64");
  check(r.dataset != "shards" || (!r.shards.empty() && !r.test_shards.empty()), r,
        "dataset shards needs dataset.shards and dataset.test_shards, such as "
        "\"studio://data/shards/fm-train-{000000..000003}.tar\" (kiln store pack makes them)");
  check(r.dataset == "shards" || (r.shards.empty() && r.test_shards.empty()), r,
        "dataset.shards and test_shards go with dataset shards (leave out dataset.name)");
  check(r.dataset != "shards" || r.validation_fraction == 0, r,
        "dataset.validation_fraction does not apply to shards, which stream; pack a validation set as shards of its own");
  check(r.channels == 1 || r.channels == 3, r, "dataset.channels must be 1 (grey) or 3 (RGB)");
  check(r.normalize_mean.size() == r.normalize_std.size(), r,
        "dataset.normalize needs as many std values as mean values");
  check(r.max_steps >= 0, r, "max_steps must be >= 0 (0: no limit)");
  check(r.distributed.backend == "gloo" || r.distributed.backend == "nccl" || r.distributed.backend == "mpi", r,
        "distributed.backend must be gloo, nccl or mpi, not '" + r.distributed.backend + "'");
  check(r.distributed.timeout_s > 0 && r.distributed.bucket_mb > 0, r,
        "distributed.timeout_s and distributed.bucket_mb must be positive");
  for (const auto& c : r.callbacks)
    check(c.monitor.rfind("val_", 0) != 0 || is_text || r.validation_fraction > 0, r,
          "callback " + c.name + " monitors " + c.monitor +
              ", which needs a validation set: set dataset.validation_fraction (e.g. 0.1)");
  check(r.epochs > 0, r, "epochs must be positive, got " + std::to_string(r.epochs));
  check(r.batch_size > 0, r, "batch_size must be positive, got " + std::to_string(r.batch_size));
  check(r.optimizer.lr > 0, r, "optimizer.lr must be positive");
  check(r.threads >= 0, r, "threads must be >= 0 (0: all cores)");
  check(r.label_smoothing >= 0 && r.label_smoothing < 1, r, "loss.label_smoothing must be in [0, 1)");
  check(r.schedule.warmup_epochs >= 0 && r.schedule.warmup_epochs < r.epochs, r,
        "schedule.warmup_epochs must be >= 0 and below epochs");
  check(r.schedule.step_epochs > 0, r, "schedule.step_epochs must be positive");
  check(r.schedule.name != "multistep" || !r.schedule.milestones.empty(), r,
        "schedule multistep needs milestones: a list of epochs, e.g. [3, 4]");
  check(r.schedule.name != "piecewise" || r.schedule.values.size() == r.schedule.boundaries.size() + 1, r,
        "schedule piecewise needs boundaries (epochs) and one more value than boundaries, e.g. boundaries: [2, 4], "
        "values: [0.1, 0.01, 0.001]");
  check(r.schedule.power > 0 && r.schedule.gamma > 0, r, "schedule.power and schedule.gamma must be positive");
  check(!r.output.empty(), r, "output must name a directory");
  return r;
}

Recipe parse_recipe_file(const std::string& path) {
  std::ifstream f(path);
  KILN_CHECK(f.good(), "cannot open recipe '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_recipe_text(ss.str(), path);
}

train::MixedPrecision mixed_precision_of(const Recipe& r) {
  train::MixedPrecision p = train::MixedPrecision::parse(r.precision);
  if (r.loss_scale == "dynamic") return p;
  KILN_CHECK(p.dtype == DType::Float16, "loss_scale: ", r.loss_scale, " is for float16 training (precision: float16); "
             "bfloat16 and float32 have the range to train without one");
  char* end = nullptr;
  const double fixed = std::strtod(r.loss_scale.c_str(), &end);
  KILN_CHECK(!r.loss_scale.empty() && *end == '\0' && fixed > 0 && std::isfinite(fixed), "loss_scale: '",
             r.loss_scale, "' is neither 'dynamic' nor a positive number (a fixed scale, such as 1024)");
  p.loss_scale = train::LossScale{};
  p.loss_scale->initial = fixed;
  p.loss_scale->dynamic = false;
  return p;
}

void apply(Recipe& r, const Overrides& o) {
  if (o.epochs) r.epochs = *o.epochs;
  if (o.batch_size) r.batch_size = *o.batch_size;
  if (o.lr) r.optimizer.lr = *o.lr;
  if (o.output) r.output = *o.output;
  if (o.seed) r.seed = *o.seed;
  if (o.threads) r.threads = *o.threads;
  if (o.adapt_threads) r.adapt_threads = *o.adapt_threads;
  if (o.max_steps) r.max_steps = *o.max_steps;
  if (o.mode) {
    KILN_CHECK(*o.mode == "eager" || *o.mode == "graph", "--mode must be eager or graph, got '", *o.mode, "'");
    r.mode = *o.mode;
  }
  if (o.device) {
    check_training_device(*o.device, "--device");
    r.device = *o.device;
  }
  if (o.precision) {
    r.precision = *o.precision;
    mixed_precision_of(r);  // an unknown precision, or the recipe's loss_scale with one that takes none, is refused here
  }
  KILN_CHECK(r.epochs > 0 && r.batch_size > 0 && r.optimizer.lr > 0 && r.threads >= 0 && r.max_steps >= 0,
             "--epochs, --batch-size and --lr must be positive, --threads and --max-steps >= 0");
}

}  // namespace kiln::recipe
