// Mixed-precision training: autocast on float32 master weights, eager and
// compiled, and float16's dynamic loss scale skipping overflowed steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kiln/kiln.h"
#include "kiln/training_checkpoint.h"
#include "support/blobs.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::blobs;
using kiln::testing::blobs_loss;
using kiln::testing::blobs_mlp;
using kiln::testing::message_of;

namespace {
struct StepLog : train::Callback {
  std::vector<train::StepInfo> steps;
  void on_step_end(train::Model&, const train::StepInfo& s) override { steps.push_back(s); }
};

struct TrainingRun {
  std::vector<train::EpochInfo> history;
  std::vector<train::StepInfo> steps;
  double accuracy = 0;
  std::vector<Tensor> params;
};

TrainingRun train_blobs(Mode mode, train::MixedPrecision precision, int epochs = 2) {
  manual_seed(4);
  auto net = blobs_mlp();
  auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  train::Model model(net, blobs_loss(), sgd);
  model.set_mode(mode);
  model.set_adapt_threads(false);
  model.set_mixed_precision(precision);
  data::BatchIterator train_set(blobs(512, 1), 32, true, false, 7);
  data::BatchIterator test_set(blobs(256, 2), 64, false);
  auto log = std::make_shared<StepLog>();
  TrainingRun r;
  r.history = model.train(epochs, train_set, {log});
  r.steps = log->steps;
  r.accuracy = model.eval(test_set).accuracy;
  r.params = net->trainable_params();
  return r;
}
}  // namespace

TEST(MixedPrecision, ParsesPrecisionsAndRefusesOthers) {
  EXPECT_FALSE(train::MixedPrecision::parse("fp32").dtype);
  EXPECT_EQ(train::MixedPrecision::parse("bf16").dtype, DType::BFloat16);
  EXPECT_EQ(train::MixedPrecision::parse("float16").dtype, DType::Float16);
  EXPECT_FALSE(train::MixedPrecision::parse("bfloat16").effective_loss_scale()) << "bfloat16 has float32's range";
  ASSERT_TRUE(train::MixedPrecision::parse("fp16").effective_loss_scale());
  EXPECT_TRUE(train::MixedPrecision::parse("fp16").effective_loss_scale()->dynamic);
  EXPECT_EQ(train::MixedPrecision::parse("fp16").str(), "float16 with a dynamic loss scale (from 65536)");
  const std::string m = message_of([] { train::MixedPrecision::parse("int8"); });
  EXPECT_NE(m.find("'int8'"), std::string::npos) << m;
  EXPECT_NE(m.find("bfloat16 (bf16)"), std::string::npos) << m;
  train::Model model(blobs_mlp(), blobs_loss(), nullptr);
  train::MixedPrecision wrong;
  wrong.dtype = DType::Float64;
  EXPECT_NE(message_of([&] { model.set_mixed_precision(wrong); }).find("bfloat16 or float16"), std::string::npos);
}

TEST(MixedPrecision, ADynamicLossScaleBacksOffOnOverflowAndGrowsAfterAnInterval) {
  train::LossScale options;
  options.initial = 1024;
  options.growth_interval = 3;
  train::LossScaler scaler(options);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1024);
  train::LossScaler resumed(options);
  resumed.load_state(scaler.state());
  EXPECT_EQ(resumed.scale(), 1024);
  EXPECT_EQ(resumed.skipped_steps(), 1);
  options.dynamic = false;
  train::LossScaler fixed(options);
  fixed.update(false);
  EXPECT_EQ(fixed.scale(), 1024) << "a fixed scale stays, and the step is still skipped";
  EXPECT_EQ(fixed.skipped_steps(), 1);
  options.backoff_factor = 2;
  EXPECT_NE(message_of([&] { train::LossScaler bad(options); }).find("backs off"), std::string::npos);
}

TEST(MixedPrecision, BFloat16TrainsEagerAndCompiledOnFloat32Weights) {
  const TrainingRun f32 = train_blobs(Mode::Eager, train::MixedPrecision::parse("fp32"));
  const TrainingRun eager = train_blobs(Mode::Eager, train::MixedPrecision::parse("bf16"));
  const TrainingRun graph = train_blobs(Mode::Graph, train::MixedPrecision::parse("bf16"));
  for (const TrainingRun* r : {&eager, &graph}) {
    EXPECT_GT(r->accuracy, 0.97);
    EXPECT_LT(r->history.back().mean_loss, r->history.front().mean_loss);
    for (const Tensor& p : r->params) EXPECT_EQ(p.dtype(), DType::Float32) << "the master weights stay float32";
    EXPECT_EQ(r->steps.front().loss_scale, 0) << "bfloat16 trains without a loss scale";
  }
  // The first step, before any update, is the same computation in both modes.
  EXPECT_NEAR(eager.steps.front().loss, graph.steps.front().loss, 1e-5);
  EXPECT_NE(eager.steps.front().loss, f32.steps.front().loss) << "the forward pass ran in bfloat16";
  EXPECT_NEAR(eager.steps.front().loss, f32.steps.front().loss, 0.02);
  EXPECT_NEAR(eager.history.back().mean_loss, graph.history.back().mean_loss, 0.02);
}

TEST(MixedPrecision, Float16SkipsOverflowedStepsAndLowersItsScale) {
  // A scale of 2^40 overflows float16's gradients (its largest value is
  // 65504) until it has backed off far enough; then training goes on.
  train::MixedPrecision fp16 = train::MixedPrecision::parse("fp16");
  fp16.loss_scale = train::LossScale{};
  fp16.loss_scale->initial = std::ldexp(1.0, 40);
  fp16.loss_scale->growth_interval = 1000;
  for (Mode mode : {Mode::Eager, Mode::Graph}) {
    SCOPED_TRACE(mode == Mode::Eager ? "eager" : "graph");
    const TrainingRun r = train_blobs(mode, fp16, 4);
    int64_t skipped = 0;
    for (size_t i = 0; i < r.steps.size(); ++i) {
      const train::StepInfo& s = r.steps[i];
      skipped += s.update_skipped;
      if (i > 0) {
        EXPECT_EQ(s.loss_scale, r.steps[i - 1].loss_scale * (r.steps[i - 1].update_skipped ? 0.5 : 1.0));
      }
    }
    EXPECT_TRUE(r.steps.front().update_skipped);
    EXPECT_GT(skipped, 15) << "2^40 comes down to float16's range by one halving a step";
    EXPECT_LT(skipped, 40);
    EXPECT_FALSE(r.steps.back().update_skipped);
    int64_t reported = 0;
    for (const train::EpochInfo& e : r.history) reported += e.skipped_steps;
    EXPECT_EQ(reported, skipped);
    EXPECT_GT(r.accuracy, 0.97) << "the steps after the overflows train";
  }
}

TEST(MixedPrecision, ATrainingCheckpointKeepsTheLossScale) {
  train::MixedPrecision fp16 = train::MixedPrecision::parse("fp16");
  fp16.loss_scale = train::LossScale{};
  fp16.loss_scale->initial = std::ldexp(1.0, 40);
  auto make = [&] {
    manual_seed(4);
    auto net = blobs_mlp();
    auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1});
    auto model = std::make_unique<train::Model>(net, blobs_loss(), sgd);
    model->set_mixed_precision(fp16);
    return model;
  };
  auto trained = make();
  data::BatchIterator train_set(blobs(256, 1), 32, true, false, 7);
  trained->train(2, train_set);
  const double scale = trained->loss_scaler()->scale();
  ASSERT_LT(scale, std::ldexp(1.0, 40)) << "the overflows backed it off";
  const std::string path = ::testing::TempDir() + "mixed_precision_resume.safetensors";
  train::save_training_checkpoint(path, *trained, {trained->global_step(), 2, 8});
  auto resumed = make();
  train::load_training_checkpoint(path, *resumed);
  EXPECT_EQ(resumed->loss_scaler()->scale(), scale) << "a resumed run does not overflow its way down again";
  EXPECT_EQ(resumed->loss_scaler()->skipped_steps(), trained->loss_scaler()->skipped_steps());
  std::remove(path.c_str());
}
