// Compiled graphs on a device that records its work (CUDA graphs; the
// reference backend records the same way, replaying its steps): the first
// runs plain, the third recorded, every later one a replay, with the eager
// results throughout; operands that moved are recorded again; and what
// keeps a graph from being recorded is named in the compile report.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/train_step.h"

namespace kiln {
namespace {

const Device kRef{DeviceType::Reference, 0};

std::vector<float> host(const Tensor& t) { return t.to(cpu_device()).to_vector<float>(); }

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  const auto g = host(got), w = host(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], 1e-5f * std::max(1.0f, std::fabs(w[i]))) << what << " at " << i;
}

TEST(RecordedRuns, ADeviceGraphIsRecordedAtItsThirdRunAndReplayedWithNewInputs) {
  manual_seed(3);
  Tensor w = randn({8, 4}).to(kRef), b = randn({4}).to(kRef);
  auto f = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(matmul(in[0], w) + b) * 2.0}; };
  auto fn = jit::compile(f, {randn({3, 8}).to(kRef)});
  std::vector<std::string> status;
  for (int call = 0; call < 6; ++call) {
    const Tensor x = randn({3, 8}).to(kRef);
    expect_same(fn({x})[0], f({x})[0], "call " + std::to_string(call));
    status.push_back(fn.report().recording);
  }
  EXPECT_EQ(status[1], "");
  EXPECT_EQ(status[2], "replays one recorded graph of its " + std::to_string(fn.report().kernels) +
                           " steps per run (recorded once)");
  EXPECT_NE(fn.report().str().find("replays one recorded graph"), std::string::npos) << fn.report().str();

  // A constant whose storage moved (as Cell::to moves a parameter's): the
  // old recording is dropped, and the graph is recorded again.
  w.impl().storage->move_to(cpu_device());
  const Tensor in_its_old_place = Tensor::empty({8, 4}, DType::Float32, kRef);
  w.impl().storage->move_to(kRef);
  for (int call = 0; call < 4; ++call) {
    const Tensor x = randn({3, 8}).to(kRef);
    expect_same(fn({x})[0], f({x})[0], "after the move, call " + std::to_string(call));
  }
  EXPECT_NE(fn.report().recording.find("(recorded 2 times)"), std::string::npos) << fn.report().recording;
}

TEST(RecordedRuns, WhatKeepsAGraphFromBeingRecordedIsNamed) {
  manual_seed(4);
  auto noisy = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{dropout(in[0] * 3.0, 0.5, true)}; };
  auto fn = jit::compile(noisy, {randn({16}).to(kRef)});
  for (int call = 0; call < 5; ++call) fn({randn({16}).to(kRef)});
  EXPECT_NE(fn.report().recording.find("runs unrecorded: node '"), std::string::npos) << fn.report().recording;
  EXPECT_NE(fn.report().recording.find("draws new random numbers at each run"), std::string::npos)
      << fn.report().recording;

  // On the CPU, work runs as it is issued: nothing to say.
  auto plain =
      jit::compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2.0}; }, {randn({4})});
  for (int call = 0; call < 5; ++call) plain({randn({4})});
  EXPECT_EQ(plain.report().recording, "");
}

// A training step's learning rate, step count and loss scale change from
// run to run: they live beside the parameters, so the graph reads them
// there and copies nothing in (a recording would replay an old value).
TEST(RecordedRuns, ATrainingStepReadsItsLearningRateOnTheDevice) {
  manual_seed(5);
  std::shared_ptr<nn::Cell> net = std::make_shared<nn::Dense>(8, 4);
  net->to(kRef);
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{0.05, 0.9});
  jit::TrainStep step(
      net, [](const Tensor& y, const Tensor& t) { return mse_loss(y, t); }, opt);
  step(randn({16, 8}).to(kRef), randn({16, 4}).to(kRef));
  const std::string text = step.compiled().graph_text();
  EXPECT_NE(text.find("optimizer.lr0 = param"), std::string::npos) << text;
  EXPECT_EQ(text.find("optimizer.lr0) {device="), std::string::npos) << text;
}

}  // namespace
}  // namespace kiln
