// Cell::to_float: a cell computed in half precision while its parameters stay
// float32 and train through the casts.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

namespace {

std::shared_ptr<nn::SequentialCell> mlp() {
  manual_seed(7);
  return std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Dense>(16, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dense>(32, 4)});
}

Tensor rounded(const Tensor& t, DType dtype) { return t.to(dtype).to(DType::Float32); }

double max_abs(const Tensor& t) { return amax(abs(t.to(DType::Float32))).item<float>(); }

}  // namespace

TEST(ToFloat, ADenseComputesOnRoundedInputsAndWeightsAndRoundsItsOutput) {
  for (DType half : {DType::Float16, DType::BFloat16}) {
    manual_seed(3);
    auto dense = std::make_shared<nn::Dense>(64, 8);
    Tensor x = randn({5, 64});
    dense->to_float(half);
    Tensor y = (*dense)(x);
    EXPECT_EQ(y.dtype(), half);
    EXPECT_EQ(dense->weight.dtype(), DType::Float32);
    // What half-precision hardware gives: rounded operands, float32 sums,
    // a rounded result.
    Tensor want = linear(rounded(x, half), rounded(dense->weight, half), rounded(dense->bias, half)).to(half);
    EXPECT_EQ(max_abs(y.to(DType::Float32) - want.to(DType::Float32)), 0.0) << dtype_name(half);
    // ...which is not the float32 result: the cast really happened.
    Tensor exact = linear(x, dense->weight, dense->bias);
    EXPECT_GT(max_abs(y.to(DType::Float32) - exact), 0.0);
    EXPECT_LT(max_abs(y.to(DType::Float32) - exact), half == DType::Float16 ? 2e-2 : 2e-1);
  }
}

TEST(ToFloat, GradientsReachTheFloat32ParametersThroughTheCasts) {
  Tensor x = randn({8, 16});
  auto exact = mlp();
  sum(mul((*exact)(x), (*exact)(x))).backward();
  auto half = mlp();
  half->to_float(DType::Float16);
  Tensor y = (*half)(x);
  ASSERT_EQ(y.dtype(), DType::Float16);
  sum(mul(y.to(DType::Float32), y.to(DType::Float32))).backward();
  auto pe = exact->parameters_and_names(), ph = half->parameters_and_names();
  ASSERT_EQ(pe.size(), ph.size());
  for (size_t i = 0; i < pe.size(); ++i) {
    const Tensor& g = ph[i].second.grad();
    ASSERT_TRUE(g.defined()) << ph[i].first;
    EXPECT_EQ(g.dtype(), DType::Float32) << ph[i].first;
    double scale = max_abs(pe[i].second.grad());
    EXPECT_LT(max_abs(g - pe[i].second.grad()), 2e-2 * scale + 1e-3) << ph[i].first;
  }
}

TEST(ToFloat, BatchNormKeepsItsRunningStatisticsInFloat32) {
  auto net = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{1, 1}), std::make_shared<nn::BatchNorm2d>(4)});
  net->to_float(DType::Float16);
  Tensor x = randn({2, 3, 6, 6});
  Tensor before;
  for (auto& [name, t] : net->buffers_and_names())
    if (name == "1.running_mean") before = t.clone();
  Tensor y = (*net)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 6, 6}));
  for (auto& [name, t] : net->buffers_and_names()) {
    EXPECT_EQ(t.dtype(), DType::Float32) << name;
    if (name == "1.running_mean") {
      EXPECT_GT(max_abs(t - before), 0.0) << "the running mean was updated";
    }
  }
}

TEST(ToFloat, AnInnerCellsOwnSettingWins) {
  auto inner = std::make_shared<nn::Dense>(4, 4);
  auto outer = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{std::make_shared<nn::Dense>(4, 4), inner});
  outer->to_float(DType::Float16);
  inner->to_float(DType::Float32);
  EXPECT_EQ((*outer)(ones({2, 4})).dtype(), DType::Float32);
  inner->to_float(DType::BFloat16);
  EXPECT_EQ((*outer)(ones({2, 4})).dtype(), DType::BFloat16);
  EXPECT_EQ(outer->compute_dtype(), DType::Float16);
}

TEST(ToFloat, TrainingInFloat16LowersTheLoss) {
  auto net = mlp();
  net->to_float(DType::Float16);
  Tensor x = randn({32, 16});
  Tensor target = randint(0, 4, {32});
  optim::SGD sgd(net->trainable_params(), {0.1, 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    sgd.zero_grad();
    Tensor loss = cross_entropy((*net)(x).to(DType::Float32), target);
    loss.backward();
    sgd.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_LT(last, first * 0.5) << "from " << first << " to " << last;
  for (auto& [name, p] : net->parameters_and_names()) EXPECT_EQ(p.dtype(), DType::Float32) << name;
}

TEST(ToFloat, GraphModeRunsWhatEagerModeRuns) {
  auto net = mlp();
  net->to_float(DType::Float16);
  Tensor x = randn({4, 16});
  Tensor eager = (*net)(x);
  auto fn = jit::compile([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{(*net)(in[0])}; }, {x});
  Tensor compiled = fn({x})[0];
  ASSERT_EQ(compiled.dtype(), DType::Float16);
  EXPECT_LT(max_abs(compiled.to(DType::Float32) - eager.to(DType::Float32)), 1e-2);
}

TEST(ToFloat, AnIntegerDtypeIsRefusedWithTheChoices) {
  auto dense = std::make_shared<nn::Dense>(2, 2);
  std::string msg = message_of([&] { dense->to_float(DType::Int32); });
  EXPECT_NE(msg.find("Dense"), std::string::npos) << msg;
  EXPECT_NE(msg.find("float16, bfloat16, float32 or float64"), std::string::npos) << msg;
}
