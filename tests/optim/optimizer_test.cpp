#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;

namespace {
// A parameter p with gradient g, for hand-checked updates.
Tensor param_with_grad(std::vector<float> p, std::vector<float> g) {
  Tensor t = from_vector(p).set_requires_grad();
  sum(t * from_vector(g)).backward();
  return t;
}
}  // namespace

TEST(SGD, MomentumFollowsPyTorchConvention) {
  Tensor p = param_with_grad({1.0f}, {0.5f});
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  sgd.step();  // buf = g = 0.5; p = 1 - 0.05
  EXPECT_FLOAT_EQ(p.item<float>(), 0.95f);
  sgd.step();  // same grad: buf = 0.9*0.5 + 0.5 = 0.95; p -= 0.095
  EXPECT_FLOAT_EQ(p.item<float>(), 0.855f);
}

TEST(SGD, NesterovAndWeightDecay) {
  Tensor p = param_with_grad({2.0f}, {1.0f});
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true});
  sgd.step();  // g = 1 + 0.2 = 1.2; buf = 1.2; step = g + 0.5*buf = 1.8
  EXPECT_FLOAT_EQ(p.item<float>(), 2.0f - 0.18f);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), Error);
}

TEST(Adam, FirstStepMovesByLearningRate) {
  Tensor p = param_with_grad({1.0f, -1.0f}, {0.3f, -2.0f});
  optim::Adam adam({p}, {.lr = 0.01});
  adam.step();  // bias-corrected m/sqrt(v) = sign(g)
  auto v = p.to_vector<float>();
  EXPECT_NEAR(v[0], 0.99f, 1e-6);
  EXPECT_NEAR(v[1], -0.99f, 1e-6);
}

TEST(AdamW, DecaysWeightsIndependentlyOfTheGradient) {
  Tensor p = param_with_grad({1.0f}, {0.0f});
  auto adamw = optim::make_adamw({p}, 0.1, 0.5);
  adamw->step();  // p *= 1 - lr*wd, gradient step is 0
  EXPECT_NEAR(p.item<float>(), 0.95f, 1e-6);
}

TEST(ClipGradNorm, ScalesToTheMaximum) {
  Tensor a = param_with_grad({0, 0}, {3, 0});
  Tensor b = param_with_grad({0}, {4});
  double norm = optim::clip_grad_norm({a, b}, 1.0);
  EXPECT_NEAR(norm, 5.0, 1e-9);
  EXPECT_NEAR(a.grad().to_vector<float>()[0], 0.6f, 1e-5);
  EXPECT_NEAR(b.grad().item<float>(), 0.8f, 1e-5);
}

TEST(Optimizer, RejectsParametersWithoutGrad) {
  EXPECT_THROW(optim::SGD({ones({2})}, {.lr = 0.1}), Error);
  EXPECT_THROW(optim::SGD({ones({2}).set_requires_grad()}, {.lr = -1}), Error);
}

TEST(Schedule, CosineWithWarmupAndStep) {
  auto cos = optim::cosine_schedule(1.0, 110, 10, 0.1);
  EXPECT_NEAR(cos(0), 0.1, 1e-12);   // warm-up: (step + 1) / warmup
  EXPECT_NEAR(cos(9), 1.0, 1e-12);
  EXPECT_NEAR(cos(10), 1.0, 1e-12);  // cosine starts at the base rate
  EXPECT_NEAR(cos(60), 0.55, 1e-12); // halfway: (base + min) / 2
  EXPECT_NEAR(cos(110), 0.1, 1e-12);
  EXPECT_NEAR(cos(500), 0.1, 1e-12);
  auto st = optim::step_schedule(0.1, 30, 0.5);
  EXPECT_NEAR(st(29), 0.1, 1e-12);
  EXPECT_NEAR(st(30), 0.05, 1e-12);
  EXPECT_THROW(optim::cosine_schedule(1.0, 10, 10), Error);
}

TEST(Schedule, MultiStepExponentialPolynomialPiecewise) {
  auto ms = optim::multistep_schedule(1.0, {3, 5}, 0.1);  // as torch MultiStepLR
  EXPECT_NEAR(ms(2), 1.0, 1e-12);
  EXPECT_NEAR(ms(3), 0.1, 1e-12);
  EXPECT_NEAR(ms(4), 0.1, 1e-12);
  EXPECT_NEAR(ms(5), 0.01, 1e-12);
  EXPECT_NEAR(ms(100), 0.01, 1e-12);
  auto ex = optim::exponential_schedule(2.0, 0.5);
  EXPECT_NEAR(ex(0), 2.0, 1e-12);
  EXPECT_NEAR(ex(3), 0.25, 1e-12);
  auto poly = optim::polynomial_schedule(1.0, 10, 2.0, 0.1);
  EXPECT_NEAR(poly(0), 1.0, 1e-12);
  EXPECT_NEAR(poly(5), 0.9 * 0.25 + 0.1, 1e-12);
  EXPECT_NEAR(poly(10), 0.1, 1e-12);
  EXPECT_NEAR(poly(50), 0.1, 1e-12);
  auto pw = optim::piecewise_constant_schedule({10, 20}, {0.1, 0.01, 0.001});
  EXPECT_NEAR(pw(0), 0.1, 1e-12);
  EXPECT_NEAR(pw(9), 0.1, 1e-12);
  EXPECT_NEAR(pw(10), 0.01, 1e-12);
  EXPECT_NEAR(pw(25), 0.001, 1e-12);
  EXPECT_THROW(optim::multistep_schedule(1.0, {5, 3}), Error);
  EXPECT_THROW(optim::piecewise_constant_schedule({10}, {0.1}), Error);
  EXPECT_THROW(optim::polynomial_schedule(1.0, 0), Error);
}

TEST(RMSProp, FirstStepMatchesTheFormula) {
  Tensor p = param_with_grad({1.0f}, {2.0f});
  optim::RMSProp rms({p}, {.lr = 0.01, .alpha = 0.9});
  rms.step();  // v = 0.1 * 4 = 0.4; p -= 0.01 * 2 / sqrt(0.4)
  EXPECT_NEAR(p.item<float>(), 1.0f - 0.02f / std::sqrt(0.4f), 1e-6);
}

TEST(OptimizerState, RestoringGivesTheSameNextSteps) {
  auto run = [](optim::Optimizer& opt, Tensor& p, int steps) {
    for (int i = 0; i < steps; ++i) {
      p.zero_grad();
      sum(p * p * from_vector<float>({1.0f, 2.0f})).backward();
      opt.step();
    }
  };
  Tensor a = from_vector<float>({1.0f, -1.0f}).set_requires_grad();
  optim::Adam first({a}, {.lr = 0.1});
  run(first, a, 3);
  auto state = first.state();
  EXPECT_EQ(state.size(), 3u);  // step, exp_avg, exp_avg_sq
  Tensor b = a.detach().clone().set_requires_grad();
  optim::Adam second({b}, {.lr = 0.1});
  second.load_state(state);
  run(first, a, 2);
  run(second, b, 2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(second.steps(), 5);
  optim::SGD sgd({b}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(sgd.load_state(state), Error);  // Adam's buffers mean nothing to SGD
}

// An optimizer over nothing would train at a constant loss without a word.
TEST(Optimizer, RefusesAnEmptyParameterList) {
  auto net = std::make_shared<nn::Dense>(4, 2);
  net->freeze();
  std::string e;
  try {
    optim::SGD opt(net->trainable_params(), optim::SGDOptions{.lr = 0.1});
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("the optimizer got no parameters"), std::string::npos) << e;
  EXPECT_NE(e.find("every parameter is frozen"), std::string::npos) << e;
  EXPECT_NE(e.find("taken before the layers were built"), std::string::npos) << e;
  EXPECT_THROW(optim::Adam(std::vector<Tensor>{}, optim::AdamOptions{}), Error);
}
