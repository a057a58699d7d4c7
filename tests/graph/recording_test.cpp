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

// Random draws are recorded: every replay draws new masks, the ones the
// same runs unrecorded draw (KILN_CUDA_GRAPHS=0), and the generator ends
// where it would, so eager draws after the runs agree too; with two
// dropouts in the step, and the seed changed between runs.
TEST(RecordedRuns, RecordedDropoutDrawsWhatAnUnrecordedRunDraws) {
  auto noisy = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{dropout(in[0] * 3.0, 0.5, true) + dropout(in[0], 0.25, true)};
  };
  // The outputs of 7 calls, then an eager draw, recorded or not.
  auto runs = [&](bool recorded) {
    if (!recorded) setenv("KILN_CUDA_GRAPHS", "0", 1);
    manual_seed(4);
    const Tensor x = ones({33}).to(kRef);
    auto fn = jit::compile(noisy, {x});
    std::vector<std::vector<float>> out;
    for (int call = 0; call < 7; ++call) {
      if (call == 5) manual_seed(9);
      out.push_back(host(fn({x})[0]));
    }
    out.push_back(host(rand({5})));
    if (!recorded) unsetenv("KILN_CUDA_GRAPHS");
    return std::make_pair(out, fn.report().recording);
  };
  const auto [replayed, status] = runs(true);
  const auto [plain, plain_status] = runs(false);
  EXPECT_NE(status.find("replays one recorded graph"), std::string::npos) << status;
  EXPECT_NE(plain_status.find("runs unrecorded: KILN_CUDA_GRAPHS=0"), std::string::npos) << plain_status;
  ASSERT_EQ(replayed.size(), plain.size());
  for (size_t call = 0; call < plain.size(); ++call) EXPECT_EQ(replayed[call], plain[call]) << "call " << call;
  for (size_t call = 3; call < 5; ++call)
    EXPECT_NE(replayed[call], replayed[call - 1]) << "a new mask at call " << call;
}

TEST(RecordedRuns, WhatKeepsAGraphFromBeingRecordedIsNamed) {
  // A grouped convolution, which the reference backend runs on the CPU.
  manual_seed(4);
  const Tensor w = randn({4, 1, 3, 3}).to(kRef);
  auto grouped = [&](const std::vector<Tensor>& in) {
    ConvOptions o;
    o.padding = {1, 1};
    o.groups = 4;
    return std::vector<Tensor>{conv2d(in[0], w, Tensor(), o) * 2.0};
  };
  auto fn = jit::compile(grouped, {randn({1, 4, 5, 5}).to(kRef)});
  for (int call = 0; call < 5; ++call) fn({randn({1, 4, 5, 5}).to(kRef)});
  EXPECT_NE(fn.report().recording.find("runs unrecorded: node '"), std::string::npos) << fn.report().recording;
  EXPECT_NE(fn.report().recording.find("runs on the CPU"), std::string::npos) << fn.report().recording;

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
