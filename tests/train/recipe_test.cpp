#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/recipe.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

TEST(Recipe, ParsesEveryKnownKey) {
  auto r = recipe::parse_recipe_text(R"(
model: resnet8
dataset: {name: mnist, path: /data/mnist}
loss: {name: cross_entropy, label_smoothing: 0.1}
optimizer: {name: adamw, lr: 0.002, weight_decay: 0.05}
schedule: {name: cosine, warmup_epochs: 1, min_lr: 0.0001}
epochs: 3
batch_size: 128
seed: 7
threads: 1
output: runs/x
)");
  EXPECT_EQ(r.model, "resnet8");
  EXPECT_EQ(r.dataset, "mnist");
  EXPECT_EQ(r.dataset_path, "/data/mnist");
  EXPECT_DOUBLE_EQ(r.label_smoothing, 0.1);
  EXPECT_EQ(r.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 0.002);
  EXPECT_EQ(r.schedule.name, "cosine");
  EXPECT_EQ(r.epochs, 3);
  EXPECT_EQ(r.batch_size, 128);
  EXPECT_EQ(r.seed, 7u);
  EXPECT_TRUE(r.adapt_threads);
  EXPECT_FALSE(recipe::parse_recipe_text("adapt_threads: false\n").adapt_threads);
  recipe::Overrides o;
  o.epochs = 1;
  o.lr = 0.5;
  o.adapt_threads = false;  // kiln train --fixed-threads
  recipe::apply(r, o);
  EXPECT_EQ(r.epochs, 1);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 0.5);
  EXPECT_FALSE(r.adapt_threads);
  auto d = recipe::parse_recipe_text("distributed: {timeout_s: 30, bucket_mb: 4, sync_batchnorm: true}\n").distributed;
  EXPECT_EQ(d.backend, "gloo");
  EXPECT_EQ(recipe::parse_recipe_text("distributed: {backend: mpi}\n").distributed.backend, "mpi");
  EXPECT_DOUBLE_EQ(d.timeout_s, 30);
  EXPECT_DOUBLE_EQ(d.bucket_mb, 4);
  EXPECT_TRUE(d.sync_batchnorm);
  EXPECT_FALSE(recipe::parse_recipe_text("model: cnn\n").distributed.sync_batchnorm);
  auto msg = message_of([] { recipe::parse_recipe_text("distributed: {timeout: 5}\n", "r.yaml"); });
  EXPECT_NE(msg.find("unknown key 'timeout' in distributed; allowed keys: backend, bucket_mb, sync_batchnorm, timeout_s"),
            std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("distributed: {timeout_s: 0}\n", "r.yaml"); });
  EXPECT_NE(msg.find("distributed.timeout_s and distributed.bucket_mb must be positive"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("distributed: {backend: glo}\n", "r.yaml"); });
  EXPECT_NE(msg.find("distributed.backend must be gloo, nccl or mpi, not 'glo'"), std::string::npos) << msg;
}

TEST(Recipe, BadKeysAndValuesFailWithTheAllowedOnes) {
  auto msg = message_of([] { recipe::parse_recipe_text("model: cnn\nepochz: 3\n", "r.yaml"); });
  EXPECT_NE(msg.find("r.yaml: unknown key 'epochz' in the recipe; allowed keys:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("epochs"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("model: vgg\n"); });
  EXPECT_NE(msg.find("model is 'vgg'; allowed values: char_transformer, cnn, gpt2, mlp, resnet18, resnet50, resnet8"),
            std::string::npos)
      << msg;
  msg = message_of([] { recipe::parse_recipe_text("optimizer: {name: sgd, lr: fast}\n"); });
  EXPECT_NE(msg.find("optimizer.lr has a value of the wrong type"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("optimizer: {name: lamb}\n"); });
  EXPECT_NE(msg.find("allowed values: adam, adamw, rmsprop, sgd"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("epochs: 0\n"); });
  EXPECT_NE(msg.find("epochs must be positive"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("schedule: {name: cosine, warmup: 1}\n"); });
  EXPECT_NE(msg.find("unknown key 'warmup' in schedule"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("schedule: {name: piecewise, boundaries: [2], values: [0.1]}\n"); });
  EXPECT_NE(msg.find("one more value than boundaries"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("schedule: {name: multistep}\n"); });
  EXPECT_NE(msg.find("multistep needs milestones"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("dataset: {name: cifar10, transforms: [{name: blur}]}\n"); });
  EXPECT_NE(msg.find("dataset.transforms[0].name is 'blur'; allowed values: center_crop, random_crop"), std::string::npos)
      << msg;
  msg = message_of([] { recipe::parse_recipe_text("dataset: {name: cifar10, transforms: [{name: resize}]}\n"); });
  EXPECT_NE(msg.find("dataset.transforms[0] (resize) needs size"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("callbacks: [{name: early_stopping, monitor: val_loss}]\n"); });
  EXPECT_NE(msg.find("monitors val_loss, which needs a validation set: set dataset.validation_fraction"),
            std::string::npos)
      << msg;
  msg = message_of([] { recipe::parse_recipe_text("model: char_transformer\n"); });
  EXPECT_NE(msg.find("model char_transformer needs a text dataset (text or kjv)"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("model: char_transformer\ndataset: text\n"); });
  EXPECT_NE(msg.find("dataset text needs dataset.path"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("model: [1, 2\n"); });
  EXPECT_NE(msg.find("not valid YAML"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_file("/nonexistent.yaml"); });
  EXPECT_NE(msg.find("cannot open recipe"), std::string::npos) << msg;
  // device: a known key; a device this build lacks is named with those it has.
  EXPECT_EQ(recipe::parse_recipe_text("device: cpu\n").device, "cpu");
  msg = message_of([] { recipe::parse_recipe_text("device: cuda:0\n", "r.yaml"); });
  EXPECT_NE(msg.find("r.yaml: device: no cuda backend in this build of Kiln (it has: cpu"), std::string::npos) << msg;
  msg = message_of([] { recipe::parse_recipe_text("device: tpu\n", "r.yaml"); });
  EXPECT_NE(msg.find("unknown device 'tpu'"), std::string::npos) << msg;
}

TEST(Recipe, MissingDatasetFailsBeforeTraining) {
  auto r = recipe::parse_recipe_text("dataset: {name: mnist, path: /nonexistent/mnist}\noutput: /nonexistent/out\n");
  auto msg = message_of([&] { recipe::train(r, false); });
  EXPECT_NE(msg.find("no 'train-images-idx3-ubyte'"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists("/nonexistent/out"));
  auto r2 = recipe::parse_recipe_text("dataset: mnist\n");
  msg = message_of([&] { recipe::train(r2, false); });
  EXPECT_NE(msg.find("set dataset.path"), std::string::npos) << msg;
}

namespace {
// A tiny MNIST-format dataset: 64 training and 32 test images of 28x28, two
// trivially separable classes.
std::filesystem::path write_tiny_mnist(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_recipe_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write_idx = [&](const std::string& file, std::vector<uint32_t> dims, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> bytes{0, 0, 8, static_cast<uint8_t>(dims.size())};
    for (uint32_t d : dims)
      for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<uint8_t>(d >> s));
    bytes.insert(bytes.end(), data.begin(), data.end());
    std::ofstream((dir / file).string(), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  for (auto [prefix, n] : {std::pair<std::string, uint32_t>{"train", 64}, {"t10k", 32}}) {
    std::vector<uint8_t> pixels(n * 784), labels(n);
    for (uint32_t i = 0; i < n; ++i) {
      labels[i] = static_cast<uint8_t>(i % 2);
      for (int p = 0; p < 784; ++p) pixels[i * 784 + p] = static_cast<uint8_t>((p < 392) == (i % 2 == 0) ? 200 : 10 + (p * i) % 40);
    }
    write_idx(prefix + "-images-idx3-ubyte", {n, 28, 28}, pixels);
    write_idx(prefix + "-labels-idx1-ubyte", {n}, labels);
  }
  return dir;
}
}  // namespace

TEST(Recipe, TrainWritesCheckpointAndMetricsThatEvalReads) {
  auto dir = write_tiny_mnist("train_eval");
  std::string out = (dir / "run").string();
  auto r = recipe::parse_recipe_text("model: mlp\nmodel_config: {hidden: [16]}\ndataset: {name: mnist, path: " +
                                     dir.string() + "}\nepochs: 2\nbatch_size: 16\noutput: " + out + "\n");
  auto res = recipe::train(r, false);
  EXPECT_DOUBLE_EQ(res.accuracy, 1.0);  // two trivially separable classes
  auto metrics = nlohmann::json::parse(std::ifstream(out + "/metrics.json"));
  for (const char* key : {"accuracy", "loss", "train_samples_per_s", "sec_per_epoch", "peak_rss_mb"})
    EXPECT_TRUE(metrics.contains(key)) << key;
  std::ifstream log(out + "/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) ++lines;
  EXPECT_EQ(lines, 2);
  auto ev = recipe::evaluate(r, out + "/checkpoint.safetensors");
  EXPECT_DOUBLE_EQ(ev.accuracy, res.accuracy);
  EXPECT_DOUBLE_EQ(ev.metrics.at("f1"), 1.0);  // two perfectly separated classes
  EXPECT_DOUBLE_EQ(ev.metrics.at("top5_accuracy"), 1.0);
  EXPECT_DOUBLE_EQ(ev.metrics.at("loss"), ev.loss);
  EXPECT_EQ(io::load_safetensors(out + "/checkpoint.safetensors").metadata.at("model"), "mlp");
  std::filesystem::remove_all(dir);
}

// drop_remainder leaves out the smaller last batch of each training epoch
// (64 samples in batches of 24: 2 full batches and one of 16 per epoch).
TEST(Recipe, DropRemainderLeavesOutTheLastPartialBatch) {
  auto dir = write_tiny_mnist("drop_remainder");
  for (bool drop : {false, true}) {
    std::string out = (dir / (drop ? "drop" : "keep")).string();
    auto r = recipe::parse_recipe_text("model: mlp\nmodel_config: {hidden: [16]}\ndataset: {name: mnist, path: " +
                                       dir.string() + "}\nepochs: 2\nbatch_size: 24\ndrop_remainder: " +
                                       (drop ? "true" : "false") + "\noutput: " + out + "\n");
    EXPECT_EQ(r.drop_remainder, drop);
    recipe::train(r, false);
    auto metrics = nlohmann::json::parse(std::ifstream(out + "/metrics.json"));
    EXPECT_EQ(metrics["steps"], drop ? 4 : 6) << "drop_remainder: " << drop;
  }
  std::filesystem::remove_all(dir);
}

TEST(Recipe, MaxStepsShorterThanTheWarmupCompressesTheSchedule) {
  auto dir = write_tiny_mnist("warmup_max_steps");
  auto r = recipe::parse_recipe_text("model: mlp\nmodel_config: {hidden: [16]}\ndataset: {name: mnist, path: " +
                                     dir.string() + "}\nschedule: {name: cosine, warmup_epochs: 1}\nepochs: 2\n"
                                     "batch_size: 16\nmax_steps: 2\noutput: " + (dir / "run").string() + "\n");
  EXPECT_EQ(recipe::train(r, false).steps, 2);  // used to fail: warm-up (whole epoch) >= total steps (2)
  std::filesystem::remove_all(dir);
}

TEST(Recipe, GraphModeTrainsLikeEager) {
  auto dir = write_tiny_mnist("graph_mode");
  auto run = [&](const std::string& mode) {
    std::string out = (dir / mode).string();
    auto r = recipe::parse_recipe_text("model: cnn\ndataset: {name: mnist, path: " + dir.string() +
                                       "}\nepochs: 2\nbatch_size: 16\nmode: " + mode + "\noutput: " + out + "\n");
    auto res = recipe::train(r, false);
    auto metrics = nlohmann::json::parse(std::ifstream(out + "/metrics.json"));
    EXPECT_EQ(metrics.at("mode"), mode);
    return res;
  };
  auto eager = run("eager"), graph = run("graph");
  // The two modes pick different convolution algorithms, so their rounding
  // differs; on these separable classes the loss ends near 1e-3, where that
  // alone reaches 1e-4 relative, hence the absolute term.
  EXPECT_NEAR(graph.loss, eager.loss, 1e-4 * eager.loss + 1e-6);
  EXPECT_DOUBLE_EQ(graph.accuracy, eager.accuracy);
  EXPECT_EQ(context().mode, Mode::Eager);  // the recipe's mode lasts for its run only
  EXPECT_NE(message_of([] { recipe::parse_recipe_text("mode: fast\n"); }).find("allowed values: eager, graph"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

// A recipe's device: the model, its optimizer state and every batch live
// there, and the losses step by step are the CPU's (the reference backend
// computes in double where the CPU rounds blocks in float, hence the
// tolerance). Its missing kernels run on the CPU, visibly.
TEST(Recipe, TrainsOnTheRecipesDeviceWithTheCpusLosses) {
  auto dir = write_tiny_mnist("device");
  // 20 steps (5 epochs of 4 batches), then 4 more resumed from the training checkpoint.
  auto run = [&](const std::string& device, int64_t max_steps) {
    recipe::RunOptions o;
    o.progress = false;
    if (max_steps > 20) o.resume_from = (dir / device / "resume.safetensors").string();
    auto losses = std::make_shared<std::vector<double>>();
    auto record = std::make_shared<train::LambdaCallback>();
    record->step_end = [losses, device](train::Model& m, const train::StepInfo& s) {
      losses->push_back(s.loss);
      for (const Tensor& p : m.network().trainable_params()) EXPECT_EQ(p.device(), parse_device(device));
    };
    o.callbacks.push_back(record);
    auto r = recipe::parse_recipe_text(
        "model: mlp\nmodel_config: {hidden: [16]}\ndataset: {name: mnist, path: " + dir.string() +
        "}\noptimizer: {name: sgd, lr: 0.1, momentum: 0.9}\nepochs: 6\n"
        "batch_size: 16\nmax_steps: " +
        std::to_string(max_steps) + "\ndevice: " + device + "\noutput: " + (dir / device).string() + "\n");
    const recipe::RunResult res = recipe::train(r, o);
    return std::make_pair(res, *losses);
  };
  auto expect_same_losses = [](const std::vector<double>& ref, const std::vector<double>& cpu, size_t steps) {
    ASSERT_EQ(cpu.size(), steps);
    ASSERT_EQ(ref.size(), steps);
    for (size_t i = 0; i < steps; ++i) EXPECT_NEAR(ref[i], cpu[i], 1e-4 * cpu[i]) << "step " << i + 1;
  };
  const auto [cpu, cpu_losses] = run("cpu", 20);
  const auto [ref, ref_losses] = run("reference", 20);
  expect_same_losses(ref_losses, cpu_losses, 20);
  EXPECT_LT(cpu_losses.back(), 0.5 * cpu_losses.front());
  EXPECT_NEAR(ref.accuracy, cpu.accuracy, 1e-9);
  // The momentum buffers saved from the device go back there on resuming.
  expect_same_losses(run("reference", 24).second, run("cpu", 24).second, 4);
  // The checkpoint was written from the device and reads back on the CPU.
  auto r = recipe::parse_recipe_text("model: mlp\nmodel_config: {hidden: [16]}\ndataset: {name: mnist, path: " +
                                     dir.string() + "}\noutput: " + (dir / "eval").string() + "\n");
  EXPECT_NEAR(recipe::evaluate(r, (dir / "reference" / "checkpoint.safetensors").string()).accuracy,
              recipe::evaluate(r, (dir / "cpu" / "checkpoint.safetensors").string()).accuracy, 1e-9);
  r.device = "reference";
  const double cpu_weights_on_device = recipe::evaluate(r, (dir / "cpu" / "checkpoint.safetensors").string()).accuracy;
  r.device = "cpu";
  EXPECT_NEAR(cpu_weights_on_device, recipe::evaluate(r, (dir / "cpu" / "checkpoint.safetensors").string()).accuracy,
              1e-9);
  std::filesystem::remove_all(dir);
}

TEST(Recipe, MixedPrecisionTrainsAndRecordsItsPrecisionAndLossScale) {
  auto dir = write_tiny_mnist("mixed_precision");
  auto run = [&](const std::string& precision, const std::string& extra) {
    std::string out = (dir / precision).string();
    auto r = recipe::parse_recipe_text("model: cnn\ndataset: {name: mnist, path: " + dir.string() +
                                       "}\nepochs: 2\nbatch_size: 16\nmode: graph\nprecision: " + precision + "\n" +
                                       extra + "output: " + out + "\n");
    auto res = recipe::train(r, false);
    return std::make_pair(res, nlohmann::json::parse(std::ifstream(out + "/metrics.json")));
  };
  auto [bf16, bf16_metrics] = run("bf16", "");
  EXPECT_EQ(bf16_metrics.at("precision"), "bfloat16");
  EXPECT_FALSE(bf16_metrics.contains("loss_scale"));
  EXPECT_GT(bf16.accuracy, 0.9);
  auto [fp16, fp16_metrics] = run("float16", "loss_scale: 256\n");
  EXPECT_EQ(fp16_metrics.at("precision"), "float16 with a loss scale of 256");
  EXPECT_EQ(fp16_metrics.at("loss_scale"), 256.0);
  EXPECT_EQ(fp16_metrics.at("skipped_steps"), 0);
  EXPECT_GT(fp16.accuracy, 0.9);
  const std::string bad = message_of([] { recipe::parse_recipe_text("precision: half\n"); });
  EXPECT_NE(bad.find("allowed values: bf16, bfloat16, float16, float32, fp16, fp32"), std::string::npos) << bad;
  const std::string scale = message_of([] { recipe::parse_recipe_text("precision: fp16\nloss_scale: lots\n"); });
  EXPECT_NE(scale.find("neither 'dynamic' nor a positive number"), std::string::npos) << scale;
  const std::string unneeded = message_of([] { recipe::parse_recipe_text("precision: bf16\nloss_scale: 128\n"); });
  EXPECT_NE(unneeded.find("is for float16 training"), std::string::npos) << unneeded;
  std::filesystem::remove_all(dir);
}

namespace {
std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_recipe_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}
}  // namespace

TEST(Recipe, TextRecipesTrainTheTextModelsOnAFile) {
  auto dir = scratch("text");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(dir / "corpus.txt") << text;
  for (const std::string model : {"char_transformer", "gpt2"}) {  // post-norm with a head; pre-norm, tied embeddings
    SCOPED_TRACE(model);
    std::string out = (dir / ("run_" + model)).string();
    auto r = recipe::parse_recipe_text("model: " + model +
                                       "\nmodel_config: {seq_len: 16, d_model: 32, heads: 2, layers: 1, "
                                       "dim_feedforward: 64}\n"
                                       "dataset: {name: text, path: " +
                                       (dir / "corpus.txt").string() +
                                       "}\n"
                                       "optimizer: {name: adamw, lr: 0.01}\n"
                                       "callbacks: [{name: early_stopping, monitor: val_loss, patience: 5}]\n"
                                       "batch_size: 16\nepochs: 3\nmax_steps: 60\noutput: " +
                                       out + "\n");
    auto res = recipe::train(r, false);
    EXPECT_EQ(res.steps, 60);
    EXPECT_EQ(res.seq_len, 16);
    // 28 distinct characters: chance is ln(28) = 3.3 nats; the sentence repeats, so far less is reachable.
    EXPECT_LT(res.loss, 1.0);
    EXPECT_GT(res.accuracy, 0.7);
    auto metrics = nlohmann::json::parse(std::ifstream(out + "/metrics.json"));
    EXPECT_DOUBLE_EQ(metrics["val_loss"].get<double>(), res.loss);
    EXPECT_GT(metrics["train_tokens_per_s"].get<double>(), 0);
    auto ev = recipe::evaluate(r, out + "/checkpoint.safetensors");
    EXPECT_NEAR(ev.loss, res.loss, 1e-9);
  }
  std::filesystem::remove_all(dir);
}

TEST(Recipe, ImageFolderRecipeWithTransformsValidationAndCallbacks) {
  auto dir = scratch("images");
  // "bright" and "dark" noise images of varying sizes; resize makes them one size.
  Generator g(3);
  for (std::string split : {"train", "test"})
    for (int cls = 0; cls < 2; ++cls) {
      auto folder = dir / split / (cls ? "bright" : "dark");
      std::filesystem::create_directories(folder);
      for (int i = 0; i < (split == "train" ? 24 : 8); ++i) {
        int64_t h = 10 + i % 3, w = 12 - i % 2;
        Tensor img = Tensor::empty({h, w, 3}, DType::UInt8);
        for (int64_t p = 0; p < img.numel(); ++p)
          img.data<uint8_t>()[p] = static_cast<uint8_t>((cls ? 150 : 20) + g.next() % 80);
        auto bytes = i % 2 ? data::encode_png(img) : data::encode_jpeg(img);
        std::ofstream(folder / (std::to_string(i) + (i % 2 ? ".png" : ".jpg")), std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      }
    }
  std::string out = (dir / "run").string();
  auto r = recipe::parse_recipe_text(
      "model: mlp\nmodel_config: {hidden: [16]}\n"
      "dataset:\n  name: image_folder\n  path: " + dir.string() + "\n"
      "  transforms: [{name: resize, size: 8}, {name: random_horizontal_flip}, {name: random_erasing, probability: 0.3}]\n"
      "  normalize: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}\n"
      "  validation_fraction: 0.25\n  workers: 2\n"
      "callbacks: [{name: model_checkpoint, every_epochs: 1, keep: 2}, {name: early_stopping, patience: 2}]\n"
      "optimizer: {name: sgd, lr: 0.05}\nepochs: 4\nbatch_size: 8\noutput: " + out + "\n");
  auto res = recipe::train(r, false);
  EXPECT_GT(res.accuracy, 0.9);
  std::ifstream log(out + "/metrics.jsonl");
  std::string first;
  std::getline(log, first);
  EXPECT_NE(first.find("val_loss"), std::string::npos) << first;
  int checkpoints = 0;
  for (auto& e : std::filesystem::directory_iterator(out)) checkpoints += e.path().filename().string().find("-epoch") != std::string::npos;
  EXPECT_EQ(checkpoints, 2);
  std::filesystem::remove_all(dir);
}

TEST(Recipe, ResumeContinuesTheRunAsIfItHadNotStopped) {
  auto dir = write_tiny_mnist("resume");
  auto recipe_text = [&](const std::string& out, int max_steps) {
    return "model: cnn\nmodel_config: {hidden: [16]}\ndataset:\n  name: mnist\n  path: " + dir.string() +
           "\n  transforms: [{name: random_crop, size: 28, padding: 2}]\n"
           "schedule: {name: cosine, warmup_epochs: 0.5}\nepochs: 3\nbatch_size: 16\nmax_steps: " +
           std::to_string(max_steps) + "\noutput: " + out +
           "\nadapt_threads: false\n";  // bit for bit: the same thread count every step
  };
  auto losses_of = [](std::vector<double>& into) {
    auto cb = std::make_shared<train::LambdaCallback>();
    cb->step_end = [&into](train::Model&, const train::StepInfo& s) { into.push_back(s.loss); };
    return cb;
  };
  std::vector<double> straight, first, second;
  recipe::RunOptions o;
  o.progress = false;
  o.callbacks = {losses_of(straight)};
  recipe::train(recipe::parse_recipe_text(recipe_text((dir / "straight").string(), 0)), o);
  ASSERT_EQ(straight.size(), 12u);  // 4 steps an epoch

  // An interrupted run: stopped inside epoch 2 (max_steps would shorten the schedule instead).
  std::string out = (dir / "stopped").string();
  auto interrupt = std::make_shared<train::LambdaCallback>();
  interrupt->step_end = [](train::Model& m, const train::StepInfo& s) {
    if (s.step == 6) m.stop_training();
  };
  o.callbacks = {losses_of(first), interrupt};
  recipe::train(recipe::parse_recipe_text(recipe_text(out, 0)), o);
  ASSERT_EQ(first.size(), 6u);
  recipe::Recipe again = recipe::recipe_of_checkpoint(out + "/resume.safetensors");
  o.callbacks = {losses_of(second)};
  o.resume_from = out + "/resume.safetensors";
  recipe::train(again, o);
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(first, straight);
  auto a = io::load_safetensors((dir / "straight" / "checkpoint.safetensors").string());
  auto b = io::load_safetensors(out + "/checkpoint.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_EQ(a.tensors[i].second.to_vector<float>(), b.tensors[i].second.to_vector<float>()) << a.tensors[i].first;
  std::filesystem::remove_all(dir);
}
