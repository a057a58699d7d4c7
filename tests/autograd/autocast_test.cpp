// Autocast: which precision each kind of op computes in, gradients back to
// float32 master weights, and all_finite, the overflow check of loss scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

namespace {
float max_abs_diff(const Tensor& a, const Tensor& b) {
  return amax(abs(cast(a, DType::Float32) - cast(b, DType::Float32))).item<float>();
}
}  // namespace

TEST(Autocast, MatrixProductsComputeInHalfPrecisionAndReductionsInFloat32) {
  manual_seed(1);
  Tensor x = randn({4, 8}), w = randn({3, 8}), b = randn({3});
  for (DType half : {DType::BFloat16, DType::Float16}) {
    AutocastScope scope(half);
    Tensor y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), half);
    EXPECT_EQ(matmul(x, w.transpose(0, 1)).dtype(), half);
    EXPECT_EQ(conv2d(randn({1, 2, 5, 5}), randn({3, 2, 3, 3})).dtype(), half);
    EXPECT_EQ(softmax(y, 1).dtype(), DType::Float32);
    EXPECT_EQ(log_softmax(y, 1).dtype(), DType::Float32);
    EXPECT_EQ(sum(y).dtype(), DType::Float32);
    EXPECT_EQ(exp(y).dtype(), DType::Float32);
    EXPECT_EQ(layer_norm(y, {3}).dtype(), DType::Float32);
    EXPECT_EQ(cross_entropy(y, from_vector<int64_t>({0, 1, 2, 0})).dtype(), DType::Float32);
    EXPECT_EQ(relu(y).dtype(), half) << "an op without a rule computes in its input's dtype";
    EXPECT_EQ((y + randn({4, 3})).dtype(), DType::Float32) << "mixed inputs take the wider dtype";
    EXPECT_EQ(linear(cast(x, DType::Float64), cast(w, DType::Float64)).dtype(), DType::Float64)
        << "float64 is an explicit choice, not cast";
    // The half-precision product is the float32 one within the half type's rounding.
    NoGradGuard no_grad;
    AutocastScope off(std::nullopt);
    EXPECT_LT(max_abs_diff(y, linear(x, w, b)), half == DType::BFloat16 ? 0.15f : 0.02f);
  }
  EXPECT_EQ(linear(x, w, b).dtype(), DType::Float32) << "outside the scope nothing is cast";
}

TEST(Autocast, GradientsReachFloat32WeightsAndBackwardRunsInTheForwardsDtypes) {
  manual_seed(2);
  Tensor x = randn({6, 8}), w = randn({4, 8}) * 0.3, b = zeros({4});
  Tensor target = from_vector<int64_t>({0, 1, 2, 3, 0, 1});
  w.set_requires_grad();
  b.set_requires_grad();
  auto loss_in = [&](std::optional<DType> dtype) {
    AutocastScope scope(dtype);
    return cross_entropy(relu(linear(x, w, b)), target);
  };
  Tensor reference = loss_in(std::nullopt);
  reference.backward();
  const Tensor w_grad = w.grad().clone(), b_grad = b.grad().clone();
  w.zero_grad();
  b.zero_grad();

  Tensor loss = loss_in(DType::BFloat16);
  EXPECT_EQ(loss.dtype(), DType::Float32);
  EXPECT_NEAR(loss.item<float>(), reference.item<float>(), 0.03);
  {
    // Backward called inside a scope runs as outside it.
    AutocastScope scope(DType::Float16);
    loss.backward();
  }
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::Float32) << "master weights take float32 gradients through the casts";
  EXPECT_EQ(b.grad().dtype(), DType::Float32);
  EXPECT_LT(max_abs_diff(w.grad(), w_grad), 0.02f);
  EXPECT_LT(max_abs_diff(b.grad(), b_grad), 0.02f);
}

TEST(Autocast, ACellsOwnComputeDtypeWinsAndScopesNest) {
  auto dense = std::make_shared<nn::Dense>(8, 3);
  dense->to_float(DType::Float32);
  AutocastScope outer(DType::BFloat16);
  EXPECT_EQ((*dense)(randn({2, 8})).dtype(), DType::Float32);
  {
    AutocastScope inner(DType::Float16);
    EXPECT_EQ(autocast_dtype(), DType::Float16);
    AutocastScope off(std::nullopt);
    EXPECT_EQ(matmul(randn({2, 2}), randn({2, 2})).dtype(), DType::Float32);
  }
  EXPECT_EQ(autocast_dtype(), DType::BFloat16);
  EXPECT_NE(message_of([] { AutocastScope bad(DType::Float32); }).find("bfloat16 or float16"), std::string::npos);
}

TEST(Autocast, CompiledGraphsCastAsEagerDoes) {
  manual_seed(3);
  Tensor w = randn({5, 8});
  jit::Function fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    AutocastScope scope(DType::BFloat16);
    Tensor y = linear(in[0], w);
    return {y, softmax(y, 1)};
  };
  auto compiled = jit::compile(fn, {});
  Tensor x = randn({4, 8});
  const std::vector<Tensor> eager = fn({x});
  compiled({x});  // the first call traces
  const std::vector<Tensor> graph = compiled({x});
  ASSERT_EQ(graph.size(), 2u);
  EXPECT_EQ(graph[0].dtype(), DType::BFloat16);
  EXPECT_EQ(graph[1].dtype(), DType::Float32);
  EXPECT_EQ(max_abs_diff(graph[0], eager[0]), 0.0f);
  EXPECT_LT(max_abs_diff(graph[1], eager[1]), 1e-6f);
}

TEST(AllFinite, FindsInfAndNaNInEveryFloatingDtype) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor ok = cast(randn({3, 5000}), d);  // more than one block of the scan
    EXPECT_TRUE(all_finite({ok}).item<bool>()) << dtype_name(d);
    for (float bad : {inf, -inf, nan}) {
      Tensor t = randn({3, 5000});
      t.data<float>()[2 * 5000 + 4321] = bad;
      EXPECT_FALSE(all_finite({ok, cast(t, d)}).item<bool>()) << dtype_name(d) << " " << bad;
    }
  }
  Tensor t = randn({4, 4});
  t.data<float>()[1] = nan;  // row 0, column 1: inside a strided view of the first column pair
  EXPECT_FALSE(all_finite({t.transpose(0, 1)}).item<bool>());
  EXPECT_TRUE(all_finite({from_vector<int64_t>({1, 2}), zeros({2})}).item<bool>()) << "integers are finite";
  EXPECT_EQ(all_finite({zeros({2})}).dtype(), DType::Bool);
}
