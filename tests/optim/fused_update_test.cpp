// The fused update ops (sgd_update, adam_update, rmsprop_update) give the
// eager optimizers' parameters and state, in float32 and float64, and skip
// the update when the loss they are given is not finite.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace {
using namespace kiln;

using MakeOpt = std::function<std::shared_ptr<optim::Optimizer>(std::vector<Tensor>)>;

void expect_fused_equals_eager(const MakeOpt& make, DType dtype) {
  manual_seed(5);
  Tensor w0 = randn({37, 5}).to(dtype), b0 = randn({5}).to(dtype);
  Tensor we = w0.clone().set_requires_grad(), be = b0.clone().set_requires_grad();
  Tensor wf = w0.clone().set_requires_grad(), bf = b0.clone().set_requires_grad();
  auto eager = make({we, be});
  auto fused = make({wf, bf});
  fused->prepare_state();
  std::vector<Tensor> lr{scalar_tensor(fused->lr(), DType::Float64)};
  Tensor step = scalar_tensor(0, DType::Float64);
  for (int i = 0; i < 6; ++i) {
    Tensor gw = randn({37, 5}).to(dtype), gb = randn({5}).to(dtype);
    we.impl().grad = gw.clone().impl_ptr();
    be.impl().grad = gb.clone().impl_ptr();
    eager->step();
    fused->count_step();
    *step.data<double>() = static_cast<double>(fused->steps());
    NoGradGuard no_grad;
    ASSERT_TRUE(fused->update_fused({{gw, gb}}, lr, step, scalar_tensor(1.0)));
  }
  EXPECT_EQ(fused->steps(), eager->steps());
  const double tol = dtype == DType::Float64 ? 1e-12 : 1e-5;
  auto check = [&](const Tensor& a, const Tensor& b) {
    auto x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << i;
  };
  check(wf, we);
  check(bf, be);
  auto se = eager->state(), sf = fused->state();
  ASSERT_EQ(se.size(), sf.size());
  for (size_t i = 0; i < se.size(); ++i) check(sf[i].second, se[i].second);
}

MakeOpt sgd(double momentum, bool nesterov, double wd) {
  return [=](std::vector<Tensor> p) {
    return std::make_shared<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = momentum, .weight_decay = wd, .nesterov = nesterov});
  };
}

TEST(FusedUpdate, SgdMatchesEager) {
  for (DType d : {DType::Float32, DType::Float64}) {
    expect_fused_equals_eager(sgd(0, false, 0), d);
    expect_fused_equals_eager(sgd(0.9, false, 1e-2), d);
    expect_fused_equals_eager(sgd(0.9, true, 0), d);
  }
}

TEST(FusedUpdate, AdamAndAdamWMatchEager) {
  for (DType d : {DType::Float32, DType::Float64}) {
    expect_fused_equals_eager([](std::vector<Tensor> p) {
      return std::make_shared<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
    }, d);
    expect_fused_equals_eager([](std::vector<Tensor> p) { return optim::make_adamw(p, 0.01, 0.1); }, d);
  }
}

TEST(FusedUpdate, RmsPropMatchesEager) {
  for (DType d : {DType::Float32, DType::Float64})
    expect_fused_equals_eager([](std::vector<Tensor> p) {
      return std::make_shared<optim::RMSProp>(p, optim::RMSPropOptions{.lr = 0.01, .weight_decay = 0.01, .momentum = 0.5});
    }, d);
}

TEST(FusedUpdate, NonFiniteLossSkipsTheUpdate) {
  Tensor w = ones({4}).set_requires_grad();
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  opt.prepare_state();
  NoGradGuard no_grad;
  opt.update_fused({{ones({4})}}, {scalar_tensor(0.1, DType::Float64)}, scalar_tensor(1, DType::Float64),
                   scalar_tensor(std::nan("")));
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 1.0f));
  opt.update_fused({{ones({4})}}, {scalar_tensor(0.1, DType::Float64)}, scalar_tensor(1, DType::Float64),
                   scalar_tensor(2.0));
  EXPECT_NEAR(w.to_vector<float>()[0], 0.9f, 1e-6);
}

TEST(FusedUpdate, WrongShapesAreRefused) {
  try {
    call("sgd_update", {ones({4}), ones({3}), Tensor(), scalar_tensor(0.1, DType::Float64)});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must match the parameter (float32[4]), got float32[3]"), std::string::npos) << e.what();
  }
}

}  // namespace
