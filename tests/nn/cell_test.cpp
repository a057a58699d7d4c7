#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

namespace {
class Block : public nn::Cell {
 public:
  Block() {
    fc = register_cell("fc", std::make_shared<nn::Dense>(4, 3));
    bn = register_cell("bn", std::make_shared<nn::BatchNorm2d>(3));
  }
  Tensor construct(const Tensor& x) override { return fc->construct(x); }
  std::shared_ptr<nn::Dense> fc;
  std::shared_ptr<nn::BatchNorm2d> bn;
};
}  // namespace

TEST(Cell, HierarchicalNamesInRegistrationOrder) {
  auto seq = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{std::make_shared<Block>(), std::make_shared<nn::ReLU>(),
                                                                           std::make_shared<nn::Dense>(3, 2, false)});
  std::vector<std::string> names;
  for (auto& [n, t] : seq->parameters_and_names()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.fc.weight", "0.fc.bias", "0.bn.weight", "0.bn.bias", "2.weight"}));
  std::vector<std::string> buffers;
  for (auto& [n, t] : seq->buffers_and_names()) buffers.push_back(n);
  EXPECT_EQ(buffers, (std::vector<std::string>{"0.bn.running_mean", "0.bn.running_var"}));
  EXPECT_EQ(seq->parameter_count(), 12 + 3 + 3 + 3 + 6);
  std::string summary = seq->summary();
  EXPECT_NE(summary.find("0.fc.weight"), std::string::npos) << summary;
  EXPECT_NE(summary.find("[3, 4]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("parameters: 27 (27 trainable)"), std::string::npos) << summary;
}

TEST(Cell, FreezeAndTrainMode) {
  auto b = std::make_shared<Block>();
  b->freeze("fc.");
  EXPECT_EQ(b->trainable_params().size(), 2u);  // bn weight and bias
  EXPECT_FALSE(b->fc->weight.requires_grad());
  b->freeze("fc.", false);
  EXPECT_EQ(b->trainable_params().size(), 4u);
  auto msg = message_of([&] { b->freeze("nope"); });
  EXPECT_NE(msg.find("no parameter name starts with it"), std::string::npos) << msg;
  b->set_train(false);
  EXPECT_FALSE(b->bn->training());
  int cells = 0;
  b->apply([&](nn::Cell&) { ++cells; });
  EXPECT_EQ(cells, 3);
}

TEST(Cell, DenseAndConvComputeTheirOps) {
  manual_seed(1);
  nn::Dense d(4, 3);
  auto x = randn({2, 4});
  EXPECT_EQ(d(x).to_vector<float>(), linear(x, d.weight, d.bias).to_vector<float>());
  // PyTorch's default init: |w| <= 1/sqrt(fan_in).
  for (float v : d.weight.to_vector<float>()) EXPECT_LE(std::abs(v), 0.5f);
  nn::Conv2d c(2, 5, 3, {.padding = 1});
  EXPECT_EQ(c(randn({1, 2, 6, 6})).shape(), (Shape{1, 5, 6, 6}));
  auto msg = message_of([] { nn::Dense bad(0, 3); });
  EXPECT_NE(msg.find("must be positive"), std::string::npos);
}

TEST(Cell, BatchNormUsesRunningStatsInEvalMode) {
  nn::BatchNorm2d bn(2);
  auto x = randn({8, 2, 3, 3}) * 3.0 + 5.0;
  bn(x);
  EXPECT_GT(bn.running_mean.to_vector<float>()[0], 0.1f);
  bn.set_train(false);
  auto y1 = bn(x), y2 = bn(x);
  EXPECT_EQ(y1.to_vector<float>(), y2.to_vector<float>());
}

TEST(Init, XavierAndHeScaleWithFans) {
  manual_seed(2);
  auto w = Tensor::empty({256, 128});
  nn::init::xavier_uniform(w);
  double bound = std::sqrt(6.0 / 384.0);
  for (float v : w.to_vector<float>()) ASSERT_LE(std::abs(v), bound + 1e-6);
  nn::init::he_normal(w);
  EXPECT_NEAR(kiln::std(w).item<double>(), std::sqrt(2.0 / 128.0), 0.005);
  auto [fi, fo] = nn::init::fans(Tensor::empty({8, 4, 3, 3}));
  EXPECT_EQ(fi, 36);
  EXPECT_EQ(fo, 72);
}

namespace {
// Holds a Dense without registering it: its parameters would be silently
// left out of training, checkpoints and parameters_and_names().
class Forgetful : public nn::Cell {
 public:
  Forgetful() { head = register_cell("head", std::make_shared<nn::Dense>(3, 2)); }
  Tensor construct(const Tensor& x) override { return (*head)((*hidden)(x)); }
  std::shared_ptr<nn::Dense> hidden = std::make_shared<nn::Dense>(4, 3);  // not registered
  std::shared_ptr<nn::Dense> head;
};

// A frozen Cell used without registering it (a teacher network) is allowed.
class WithTeacher : public nn::Cell {
 public:
  explicit WithTeacher(std::shared_ptr<nn::Dense> t) : teacher(std::move(t)) {
    fc = register_cell("fc", std::make_shared<nn::Dense>(4, 4));
  }
  Tensor construct(const Tensor& x) override { return (*fc)(x) + (*teacher)(x); }
  std::shared_ptr<nn::Dense> teacher, fc;
};
}  // namespace

TEST(Cell, CallingAnUnregisteredChildIsAnErrorNamingItAndTheFix) {
  Forgetful net;
  std::string e = message_of([&] { net(randn({2, 4})); });
  EXPECT_NE(e.find("Cell 'Forgetful' calls a Dense(4 -> 3) that is not registered in it, so its parameters "
                   "(weight [3, 4], bias [3]) are not trained, saved or listed"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("register_cell(\"name\", std::make_shared<Dense>(...))"), std::string::npos) << e;
  // Registering it fixes the call.
  net.register_cell("hidden", net.hidden);
  EXPECT_EQ(net(randn({2, 4})).shape(), (Shape{2, 2}));
  EXPECT_EQ(net.parameters_and_names().size(), 4u);

  auto teacher = std::make_shared<nn::Dense>(4, 4);
  teacher->freeze();
  WithTeacher student(teacher);
  EXPECT_EQ(student(randn({2, 4})).shape(), (Shape{2, 4}));
}
