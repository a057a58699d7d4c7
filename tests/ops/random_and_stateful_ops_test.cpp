// Ops that golden values cannot cover: random ones, and side effects.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;

TEST(Dropout, MasksAndScalesWithTheRightRate) {
  manual_seed(5);
  auto x = ones({200, 100}).set_requires_grad();
  auto outs = call("dropout", {x}, {{"p", 0.3}});
  auto y = outs[0].to_vector<float>();
  int kept = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.7f) < 1e-6f) << v;
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept / 20000.0, 0.7, 0.02);
  sum(outs[0]).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), outs[1].to_vector<float>());
  // Same seed, same mask; eval mode is the identity.
  manual_seed(5);
  EXPECT_EQ(dropout(ones({200, 100}), 0.3, true).to_vector<float>(), y);
  auto z = randn({4});
  EXPECT_TRUE(dropout(z, 0.5, false).same(z));
  EXPECT_THROW(dropout(z, 1.0, true), Error);
}

TEST(BatchNorm, TrainingUpdatesRunningStatistics) {
  manual_seed(1);
  auto x = randn({8, 2, 3, 3}) * 2.0 + 1.0;
  auto rm = zeros({2}), rv = ones({2});
  batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
  auto m = mean(x, {0, 2, 3}).to_vector<float>();
  auto v = var(x, {0, 2, 3}, 1).to_vector<float>();  // unbiased, as PyTorch
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(rm.to_vector<float>()[c], 0.1f * m[c], 1e-5);
    EXPECT_NEAR(rv.to_vector<float>()[c], 0.9f + 0.1f * v[c], 1e-5);
  }
  // Eval mode uses them and changes nothing.
  auto before = rm.to_vector<float>();
  batch_norm(x, Tensor(), Tensor(), rm, rv, false);
  EXPECT_EQ(rm.to_vector<float>(), before);
}

TEST(Losses, CrossEntropyOverSpatialAxesMatchesFlattened) {
  manual_seed(2);
  auto logits = randn({2, 3, 4});
  auto target = randint(0, 3, {2, 4});
  auto spatial = cross_entropy(logits, target);
  auto flat = cross_entropy(logits.permute({0, 2, 1}).reshape({8, 3}), target.reshape({8}));
  EXPECT_NEAR(spatial.item<float>(), flat.item<float>(), 1e-6);
  CrossEntropyOptions none;
  none.reduction = "none";
  EXPECT_EQ(cross_entropy(logits, target, none).shape(), (Shape{2, 4}));
}
