// Compiled graphs on the GPU recorded as CUDA graphs: a training step (W1's
// MLP, and W2's CNN in bfloat16: forward, backward and the fused SGD update)
// replayed from its third run gives bit for bit what the same step gives
// run kernel by kernel; an inference graph replays with new inputs; and a
// graph with a step that cannot be recorded runs unrecorded, saying which.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>

#include "cuda/gpus.h"
#include "kiln/kiln.h"
#include "kiln/mixed_precision.h"
#include "kiln/models.h"
#include "kiln/train_step.h"

namespace kiln {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

struct Trained {
  std::vector<float> losses, params;
  std::string recording;
};

// Ten steps of a zoo model from one seed, on fixed batches, in float32 or
// under bfloat16 autocast (where a kernel that stops at float32 runs on
// widened copies, made inside the recording).
Trained train(const std::string& model, bool recorded, std::optional<DType> autocast = std::nullopt) {
  if (recorded) {
    unsetenv("KILN_CUDA_GRAPHS");
  } else {
    setenv("KILN_CUDA_GRAPHS", "0", 1);
  }
  manual_seed(21);
  models::ModelConfig config;
  if (model == "mlp") config.hidden = {64, 32};
  auto net = models::make_model(model, config);
  net->to(kGpu);
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{0.05, 0.9});
  jit::TrainStep step(
      net, [](const Tensor& y, const Tensor& t) { return cross_entropy(y, t); }, opt);
  if (autocast) {
    train::MixedPrecision precision;
    precision.dtype = autocast;
    step.set_mixed_precision(precision);
  }
  Generator gen(22);
  Trained out;
  for (int i = 0; i < 10; ++i) {
    const Tensor x = randn({64, 1, 28, 28}, DType::Float32, &gen).to(kGpu);
    const Tensor y = randint(0, 10, {64}, DType::Int64, &gen).to(kGpu);
    out.losses.push_back(step(x, y).loss.to(cpu_device()).to(DType::Float32).item<float>());
  }
  for (const Tensor& p : net->trainable_params())
    for (float v : p.to(cpu_device()).to(DType::Float32).to_vector<float>()) out.params.push_back(v);
  out.recording = step.compiled().report().recording;
  unsetenv("KILN_CUDA_GRAPHS");
  return out;
}

void expect_recorded_like_plain(const std::string& model, std::optional<DType> autocast) {
  const Trained recorded = train(model, true, autocast), plain = train(model, false, autocast);
  EXPECT_NE(recorded.recording.find("replays one recorded graph"), std::string::npos) << recorded.recording;
  EXPECT_EQ(plain.recording, "runs unrecorded: KILN_CUDA_GRAPHS=0");
  EXPECT_EQ(recorded.losses, plain.losses) << model;
  EXPECT_EQ(recorded.params, plain.params) << model;
}

TEST(CudaGraphs, ARecordedTrainingStepGivesWhatTheKernelsGiveOneByOne) {
  NEEDS_A_GPU();
  expect_recorded_like_plain("mlp", std::nullopt);
}

// W2's CNN (cuDNN's convolutions, pooling) in bfloat16 autocast.
TEST(CudaGraphs, ARecordedMixedPrecisionConvolutionStepGivesWhatItGivesUnrecorded) {
  NEEDS_A_GPU();
  if (OpRegistry::instance().get("conv2d").dtypes(DeviceType::CUDA).empty())
    GTEST_SKIP() << "this build of the CUDA backend has no cuDNN";
  expect_recorded_like_plain("cnn", DType::BFloat16);
}

TEST(CudaGraphs, AnInferenceGraphReplaysWithNewInputs) {
  NEEDS_A_GPU();
  manual_seed(23);
  const Tensor w = randn({64, 32}).to(kGpu), b = randn({32}).to(kGpu);
  auto f = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(gelu(matmul(in[0], w) + b), {1})}; };
  auto fn = jit::compile(f, {randn({16, 64}).to(kGpu)});
  for (int call = 0; call < 8; ++call) {
    const Tensor x = randn({16, 64}).to(kGpu);
    const auto got = fn({x})[0].to(cpu_device()).to_vector<float>();
    const auto want = f({x})[0].to(cpu_device()).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i])));
  }
  EXPECT_NE(fn.report().recording.find("replays one recorded graph"), std::string::npos) << fn.report().recording;
}

// Dropout is recorded: its kernel reads the counters the executor writes
// before each replay, so every run draws a new mask, the one the same run
// unrecorded (KILN_CUDA_GRAPHS=0) draws.
TEST(CudaGraphs, RecordedDropoutDrawsTheMasksOfUnrecordedRuns) {
  NEEDS_A_GPU();
  auto noisy = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{dropout(in[0], 0.5, true) + 1.0}; };
  auto runs = [&](bool recorded) {
    if (!recorded) setenv("KILN_CUDA_GRAPHS", "0", 1);
    manual_seed(12);
    auto fn = jit::compile(noisy, {ones({1024}).to(kGpu)});
    std::vector<std::vector<float>> out;
    for (int call = 0; call < 6; ++call)
      out.push_back(fn({ones({1024}).to(kGpu)})[0].to(cpu_device()).to_vector<float>());
    if (!recorded) unsetenv("KILN_CUDA_GRAPHS");
    return std::make_pair(out, fn.report().recording);
  };
  const auto [replayed, status] = runs(true);
  const auto [plain, plain_status] = runs(false);
  EXPECT_NE(status.find("replays one recorded graph"), std::string::npos) << status;
  EXPECT_EQ(replayed, plain);
  EXPECT_NE(replayed[4], replayed[3]) << "every run draws a new mask";
}

// A step that cannot be recorded (interpolate copies its axis maps from
// the host at each call, which fails the capture) is named, and the graph
// runs unrecorded, with the right results.
TEST(CudaGraphs, AStepThatCannotBeRecordedIsNamedAndTheGraphRunsUnrecorded) {
  NEEDS_A_GPU();
  auto upsampled = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{interpolate(in[0], 2.0) + 1.0}; };
  auto fn = jit::compile(upsampled, {ones({1, 8, 6, 6}).to(kGpu)});
  for (int call = 0; call < 5; ++call) {
    const Tensor x = randn({1, 8, 6, 6}).to(kGpu);
    const auto got = fn({x})[0].to(cpu_device()).to_vector<float>();
    const auto want = upsampled({x})[0].to(cpu_device()).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i])));
  }
  EXPECT_NE(fn.report().recording.find("runs unrecorded"), std::string::npos) << fn.report().recording;
}

}  // namespace
}  // namespace kiln
