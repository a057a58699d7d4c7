#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace {
using namespace kiln;

void expect_close(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], atol + rtol * std::abs(y[i])) << "at " << i;
}

TEST(Compile, CellMatchesEagerAndRunsAgainWithNewData) {
  manual_seed(1);
  auto net = models::make_model("mlp");
  net->set_train(false);
  Tensor x = randn({8, 1, 28, 28});
  auto fn = jit::compile(net, {x});
  for (int i = 0; i < 3; ++i) {
    Tensor xi = randn({8, 1, 28, 28});
    Tensor want;
    {
      NoGradGuard g;
      want = net->construct(xi);
    }
    expect_close(fn({xi})[0], want);
  }
  EXPECT_EQ(fn.compiles(), 1);
  EXPECT_NE(fn.graph_text().find("linear"), std::string::npos) << fn.graph_text();
}

}  // namespace
