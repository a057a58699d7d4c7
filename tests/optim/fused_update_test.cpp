// The fused update ops (sgd_update, adam_update, rmsprop_update), which both
// the eager optimizers and compiled training steps run, follow PyTorch's
// formulas (written out below in double, element by element) in float32 and
// float64, with several steps, weight decay, momentum and bias correction;
// and they skip the update when the loss they are given is not finite.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"

namespace {
using namespace kiln;

using MakeOpt = std::function<std::shared_ptr<optim::Optimizer>(std::vector<Tensor>)>;
// One step of the reference on one element: (param, grad, state a, state b, step) -> new param.
using Reference = std::function<double(double p, double g, double& a, double& b, int step)>;

void expect_matches_reference(const MakeOpt& make, const Reference& reference, DType dtype) {
  manual_seed(5);
  Tensor w0 = randn({37, 5}).to(dtype);
  Tensor w = w0.clone().set_requires_grad();
  auto opt = make({w});
  std::vector<double> p = w0.to(DType::Float64).to_vector<double>(), a(p.size(), 0.0), b(p.size(), 0.0);
  for (int step = 1; step <= 6; ++step) {
    Tensor g = randn({37, 5}).to(dtype);
    w.impl().grad = g.clone().impl_ptr();
    opt->step();
    std::vector<double> gd = g.to(DType::Float64).to_vector<double>();
    for (size_t i = 0; i < p.size(); ++i) p[i] = reference(p[i], gd[i], a[i], b[i], step);
    // Compare each step against the reference fed with the optimizer's own
    // rounded parameters, so float32 rounding does not accumulate.
    std::vector<double> got = w.to(DType::Float64).to_vector<double>();
    const double tol = dtype == DType::Float64 ? 1e-12 : 2e-6;
    for (size_t i = 0; i < p.size(); ++i) ASSERT_NEAR(got[i], p[i], tol * (1 + std::abs(p[i]))) << "step " << step << " element " << i;
    p = got;
  }
  EXPECT_EQ(opt->steps(), 6);
}

MakeOpt sgd(double momentum, bool nesterov, double wd) {
  return [=](std::vector<Tensor> p) {
    return std::make_shared<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = momentum, .weight_decay = wd, .nesterov = nesterov});
  };
}
// PyTorch's SGD: d = g + wd p; buf = m buf + d (buf = d on the first step); p -= lr (nesterov ? d + m buf : buf).
Reference sgd_reference(double m, bool nesterov, double wd) {
  return [=](double p, double g, double& buf, double&, int step) {
    double d = g + wd * p;
    if (m == 0) return p - 0.1 * d;
    buf = step == 1 ? d : m * buf + d;
    return p - 0.1 * (nesterov ? d + m * buf : buf);
  };
}

TEST(FusedUpdate, SgdFollowsPyTorch) {
  for (DType d : {DType::Float32, DType::Float64}) {
    expect_matches_reference(sgd(0, false, 0), sgd_reference(0, false, 0), d);
    expect_matches_reference(sgd(0.9, false, 1e-2), sgd_reference(0.9, false, 1e-2), d);
    expect_matches_reference(sgd(0.9, true, 0), sgd_reference(0.9, true, 0), d);
  }
}

// Adam (L2 added to the gradient) and AdamW (decoupled decay), bias-corrected.
Reference adam_reference(bool decoupled) {
  return [=](double p, double g, double& m, double& v, int step) {
    const double lr = 0.01, wd = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    if (decoupled) p *= 1 - lr * wd;
    else g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    return p - lr / bc1 * m / (std::sqrt(v / bc2) + eps);
  };
}

TEST(FusedUpdate, AdamAndAdamWFollowPyTorch) {
  for (DType d : {DType::Float32, DType::Float64}) {
    expect_matches_reference([](std::vector<Tensor> p) {
      return std::make_shared<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
    }, adam_reference(false), d);
    expect_matches_reference([](std::vector<Tensor> p) { return optim::make_adamw(p, 0.01, 0.1); }, adam_reference(true), d);
  }
}

TEST(FusedUpdate, RmsPropFollowsPyTorch) {
  auto reference = [](double p, double g, double& sq, double& buf, int) {
    g += 0.01 * p;
    sq = 0.99 * sq + 0.01 * g * g;
    buf = 0.5 * buf + g / (std::sqrt(sq) + 1e-8);
    return p - 0.01 * buf;
  };
  for (DType d : {DType::Float32, DType::Float64})
    expect_matches_reference([](std::vector<Tensor> p) {
      return std::make_shared<optim::RMSProp>(p, optim::RMSPropOptions{.lr = 0.01, .weight_decay = 0.01, .momentum = 0.5});
    }, reference, d);
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

// A group's parameters go to one multi-tensor call (sgd_update_many,
// adam_update_many, rmsprop_update_many): the same bits as one call per parameter, which an
// optimizer per parameter makes, over parameters of several sizes.
template <typename Opt, typename Options>
void expect_many_equal_one_by_one(const Options& o, DType dtype) {
  manual_seed(11);
  const std::vector<Shape> shapes{{37, 5}, {1}, {3, 4, 5}, {70000}};  // (70000: more than one thread's share)
  std::vector<Tensor> together, alone;
  for (const Shape& s : shapes) {
    Tensor w = randn(s).to(dtype);
    together.push_back(w.clone().set_requires_grad());
    alone.push_back(w.clone().set_requires_grad());
  }
  Opt group(together, o);
  std::vector<std::unique_ptr<Opt>> singles;
  for (const Tensor& w : alone) singles.push_back(std::make_unique<Opt>(std::vector<Tensor>{w}, o));
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor g = randn(shapes[i]).to(dtype);
      together[i].impl().grad = g.clone().impl_ptr();
      alone[i].impl().grad = g.clone().impl_ptr();
    }
    group.step();
    for (auto& s : singles) s->step();
    for (size_t i = 0; i < shapes.size(); ++i)
      ASSERT_EQ(together[i].to(DType::Float64).to_vector<double>(), alone[i].to(DType::Float64).to_vector<double>())
          << "parameter " << i << " after step " << step;
  }
}

TEST(FusedUpdate, AGroupInOneCallEqualsOneCallPerParameter) {
  for (DType d : {DType::Float32, DType::Float64}) {
    expect_many_equal_one_by_one<optim::SGD>(optim::SGDOptions{.lr = 0.1}, d);
    expect_many_equal_one_by_one<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2}, d);
    expect_many_equal_one_by_one<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}, d);
    expect_many_equal_one_by_one<optim::Adam>(optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-2}, d);
    expect_many_equal_one_by_one<optim::Adam>(
        optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-2, .decoupled_weight_decay = true}, d);
    expect_many_equal_one_by_one<optim::RMSProp>(optim::RMSPropOptions{.lr = 1e-2}, d);
    expect_many_equal_one_by_one<optim::RMSProp>(
        optim::RMSPropOptions{.lr = 1e-2, .weight_decay = 1e-2, .momentum = 0.9}, d);
  }
}

TEST(FusedUpdate, AMultiTensorCallWritesParametersAndStateAndSkipsOnANonFiniteLoss) {
  Tensor a = ones({4}), b = ones({2, 3}), ga = ones({4}), gb = ones({2, 3}), ma = zeros({4}), mb = zeros({2, 3});
  const Tensor lr = scalar_tensor(0.1, DType::Float64);
  const Attrs attrs{{"count", int64_t{2}}, {"momentum", 0.9}};
  const auto version = [](const Tensor& t) { return t.impl().storage->version.load(); };
  const auto before = std::vector<uint32_t>{version(a), version(b), version(ga), version(gb), version(ma), version(mb)};
  call("sgd_update_many", {lr, scalar_tensor(std::nan("")), a, b, ga, gb, ma, mb}, attrs);
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(mb.to_vector<float>(), std::vector<float>(6, 0.0f));
  call("sgd_update_many", {lr, scalar_tensor(2.0), a, b, ga, gb, ma, mb}, attrs);
  EXPECT_NEAR(b.to_vector<float>()[5], 0.9f, 1e-6);
  EXPECT_NEAR(ma.to_vector<float>()[0], 1.0f, 1e-6);
  // Dispatch counts the writes of the parameters and their buffers, not of the gradients.
  EXPECT_GT(version(a), before[0]);
  EXPECT_GT(version(b), before[1]);
  EXPECT_EQ(version(ga), before[2]);
  EXPECT_EQ(version(gb), before[3]);
  EXPECT_GT(version(ma), before[4]);
  EXPECT_GT(version(mb), before[5]);
}

TEST(FusedUpdate, AMultiTensorCallThatDoesNotAddUpIsRefused) {
  const Tensor lr = scalar_tensor(0.1, DType::Float64);
  try {  // three tensors for two parameters without momentum (two lists of two)
    call("sgd_update_many", {lr, Tensor(), ones({4}), ones({3}), ones({4})}, {{"count", int64_t{2}}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 2 lists of 2 tensors after the scalars (6 inputs), got 5"),
              std::string::npos)
        << e.what();
  }
  try {
    call("adam_update_many",
         {lr, scalar_tensor(1.0, DType::Float64), Tensor(), ones({4}), ones({3}), ones({4}), ones({2}), ones({4}),
          ones({3}), ones({4}), ones({3})},
         {{"count", int64_t{2}}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("list 1 tensor 1 must match its parameter (float32[3]), got float32[2]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
