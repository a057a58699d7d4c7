#include <gtest/gtest.h>

#include <map>

#include "kiln/autograd.h"
#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;

using kiln::testing::message_of;


TEST(Autograd, ChainRuleThroughSeveralOps) {
  auto x = from_vector<double>({1.0, 2.0, 3.0}).set_requires_grad();
  auto y = sum(exp(x) * x);  // d/dx = e^x (1 + x)
  y.backward();
  auto g = x.grad().to_vector<double>();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(g[i], std::exp(i + 1.0) * (i + 2.0), 1e-12);
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  auto w = ones({2}).set_requires_grad();
  sum(w * 3.0).backward();
  sum(w * 4.0).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(2, 7.0f));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Autograd, ReusedInputSumsBothPaths) {
  auto x = from_vector<double>({2.0}).set_requires_grad();
  auto y = x * x + x;  // 2x + 1
  y.backward();
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 5.0);
}

TEST(Autograd, NonScalarBackwardTakesAGradient) {
  auto x = from_vector<float>({1, 2, 3}).set_requires_grad();
  auto y = x * 2.0;
  auto msg = message_of([&] { y.backward(); });
  EXPECT_NE(msg.find("one-element"), std::string::npos) << msg;
  y.backward(from_vector<float>({1, 10, 100}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 20, 200}));
  auto msg2 = message_of([&] { (x * 1.0).backward(ones({2})); });
  EXPECT_NE(msg2.find("same shape"), std::string::npos) << msg2;
}

TEST(Autograd, NoGradAndDetachStopRecording) {
  auto x = ones({2}).set_requires_grad();
  {
    NoGradGuard guard;
    auto y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
  }
  auto d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.impl().storage, x.impl().storage);
  auto y = x * 2.0;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  auto msg = message_of([] { (ones({1}) * 2.0).backward(); });
  EXPECT_NE(msg.find("does not require grad"), std::string::npos) << msg;
}

TEST(Autograd, SecondBackwardThroughFreedGraphFails) {
  auto x = ones({2}).set_requires_grad();
  auto y = sum(exp(x));
  y.backward();
  auto msg = message_of([&] { y.backward(); });
  EXPECT_NE(msg.find("second time"), std::string::npos) << msg;
  EXPECT_NE(msg.find("retain_graph=true"), std::string::npos) << msg;
  auto z = sum(exp(x));
  x.zero_grad();
  z.backward(Tensor(), /*retain_graph=*/true);
  z.backward();
  EXPECT_NEAR(x.grad().to_vector<float>()[0], 2 * std::exp(1.0f), 1e-5);
}

TEST(Autograd, InPlaceChangeOfSavedTensorIsDetected) {
  auto x = ones({3}).set_requires_grad();
  auto h = x * 2.0;           // not a leaf
  auto y = sum(exp(h));       // exp saves its output, mul saved x
  auto e = exp(h);
  auto loss = sum(e * e);
  {
    NoGradGuard guard;
    e.add_(ones({3}));        // e was saved by the multiply
  }
  auto msg = message_of([&] { loss.backward(); });
  EXPECT_NE(msg.find("modified in place"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mul"), std::string::npos) << msg;
  y.backward();  // the other graph is untouched
}

TEST(Autograd, InPlaceOnTensorThatRequiresGradIsRefused) {
  auto w = ones({2}).set_requires_grad();
  auto msg = message_of([&] { w.add_(ones({2})); });
  EXPECT_NE(msg.find("NoGradGuard"), std::string::npos) << msg;
  NoGradGuard guard;
  w.add_(ones({2}));
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(2, 2.0f));
}

TEST(Autograd, GradFunctionDoesNotTouchDotGrad) {
  auto x = from_vector<double>({3.0}).set_requires_grad();
  auto h = x * x;
  auto y = h * 2.0;
  auto g = autograd::grad({y}, {x, h});
  EXPECT_DOUBLE_EQ(g[0].item<double>(), 12.0);
  EXPECT_DOUBLE_EQ(g[1].item<double>(), 2.0);
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, ViewsPropagateGradients) {
  auto x = arange(0.0, 6.0, 1.0, DType::Float64).set_requires_grad();
  auto v = x.reshape({2, 3}).transpose(0, 1).slice(0, 1, 3);  // [2, 2]
  sum(v * v).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 2, 4, 0, 8, 10}));
}

TEST(Autograd, SharedGradientsAreIndependent) {
  // add hands the same gradient to both inputs; clipping one must not change the other.
  auto a = ones({2}).set_requires_grad();
  auto b = ones({2}).set_requires_grad();
  sum(a + b).backward();
  {
    NoGradGuard guard;
    Tensor ga = a.grad();
    ga.mul_(0.5);
  }
  EXPECT_EQ(b.grad().to_vector<float>(), std::vector<float>(2, 1.0f));
}

TEST(Autograd, TrainsAFunctionByGradientDescent) {
  manual_seed(3);
  auto x = randn({64, 3});
  auto true_w = from_vector<float>({1.5f, -2.0f, 0.5f}, {3, 1});
  auto y = matmul(x, true_w) + 0.3;
  auto w = zeros({3, 1}).set_requires_grad();
  auto b = zeros({1}).set_requires_grad();
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    auto loss = mse_loss(matmul(x, w) + b, y);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    w.zero_grad();
    b.zero_grad();
    loss.backward();
    NoGradGuard guard;
    w.add_(w.grad(), -0.1);
    b.add_(b.grad(), -0.1);
  }
  EXPECT_LT(last, first * 1e-4);
  auto wv = w.to_vector<float>();
  EXPECT_NEAR(wv[0], 1.5f, 1e-2);
  EXPECT_NEAR(wv[1], -2.0f, 1e-2);
  EXPECT_NEAR(b.item<float>(), 0.3f, 1e-2);
}

TEST(Autograd, TheLeafListenerHearsEachLeafOnceWithItsWholeGradient) {
  auto w = from_vector<double>({1.0, 2.0}).set_requires_grad();
  auto b = from_vector<double>({0.5, 0.5}).set_requires_grad();
  auto unused = ones({2}, DType::Float64).set_requires_grad();
  // w is used three times: its gradient is complete only after the last use.
  auto loss_of = [&] { return sum(w * w + b) + sum(w * 3.0); };
  std::vector<std::pair<TensorImpl*, std::vector<double>>> heard;
  {
    autograd::LeafGradientListener listen(
        [&](TensorImpl* leaf, const Tensor& g) { heard.push_back({leaf, g.to_vector<double>()}); });
    loss_of().backward();
  }
  ASSERT_EQ(heard.size(), 2u);
  std::map<TensorImpl*, std::vector<double>> by_leaf(heard.begin(), heard.end());
  EXPECT_EQ(by_leaf.at(&w.impl()), (std::vector<double>{5.0, 7.0}));  // 2w + 3
  EXPECT_EQ(by_leaf.at(&b.impl()), (std::vector<double>{1.0, 1.0}));
  EXPECT_FALSE(by_leaf.count(&unused.impl()));
  // grad() hears of the results it returns, and nothing once the listener is gone.
  heard.clear();
  {
    autograd::LeafGradientListener listen(
        [&](TensorImpl* leaf, const Tensor& g) { heard.push_back({leaf, g.to_vector<double>()}); });
    autograd::grad({loss_of()}, {w});
  }
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].second, (std::vector<double>{5.0, 7.0}));
  heard.clear();
  loss_of().backward();
  EXPECT_TRUE(heard.empty());
}
