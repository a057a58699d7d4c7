#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;

TEST(Layers, ShapesAndParameters) {
  manual_seed(1);
  nn::Conv1d c1(4, 6, 3, {.padding = 1, .groups = 2});
  EXPECT_EQ(c1(randn({2, 4, 10})).shape(), (Shape{2, 6, 10}));
  EXPECT_EQ(c1.weight.shape(), (Shape{6, 2, 3}));
  nn::Conv2dTranspose ct(4, 3, 3, {.stride = 2, .padding = 1, .output_padding = 1});
  EXPECT_EQ(ct(randn({1, 4, 5, 5})).shape(), (Shape{1, 3, 10, 10}));
  nn::BatchNorm1d bn(5);
  EXPECT_EQ(bn(randn({8, 5})).shape(), (Shape{8, 5}));
  EXPECT_EQ(bn(randn({8, 5, 3})).shape(), (Shape{8, 5, 3}));
  nn::LayerNorm ln({4});
  auto y = ln(randn({3, 4}) * 5.0 + 2.0);
  EXPECT_NEAR(mean(y).item<float>(), 0.0f, 1e-5);
  nn::GroupNorm gn(2, 4);
  EXPECT_EQ(gn(randn({2, 4, 3, 3})).shape(), (Shape{2, 4, 3, 3}));
  nn::Embedding emb(10, 3);
  EXPECT_EQ(emb(from_vector<int64_t>({1, 9, 1}, {3})).shape(), (Shape{3, 3}));
  nn::AvgPool2d ap(2);
  EXPECT_EQ(ap(ones({1, 1, 4, 4})).to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_NEAR(sum(nn::Softmax()(randn({2, 5}))).item<float>(), 2.0f, 1e-5);
  EXPECT_EQ(nn::LeakyReLU(0.5)(from_vector<float>({-2.0f})).item<float>(), -1.0f);
  EXPECT_EQ(nn::Tanh()(zeros({1})).item<float>(), 0.0f);
  EXPECT_EQ(nn::Sigmoid()(zeros({1})).item<float>(), 0.5f);
  EXPECT_EQ(nn::SiLU()(zeros({1})).item<float>(), 0.0f);
  EXPECT_NEAR(nn::GELU()(ones({1})).item<float>(), 0.8413f, 1e-4);
  EXPECT_NEAR(nn::LogSoftmax()(zeros({1, 2})).to_vector<float>()[0], std::log(0.5f), 1e-6);
  nn::CellList list({std::make_shared<nn::Dense>(2, 2), std::make_shared<nn::Dense>(2, 2)});
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(list.parameters_and_names()[2].first, "1.weight");
  EXPECT_THROW(list(ones({2})), Error);
}

TEST(Losses, CellsMatchTheFunctions) {
  manual_seed(2);
  Tensor logits = randn({4, 3}), labels = from_vector<int64_t>({0, 2, 1, 2});
  CrossEntropyOptions smooth;
  smooth.label_smoothing = 0.1;
  EXPECT_EQ(nn::CrossEntropyLoss(smooth)(logits, labels).item<float>(), cross_entropy(logits, labels, smooth).item<float>());
  EXPECT_NEAR(nn::NLLLoss()(log_softmax(logits), labels).item<float>(), cross_entropy(logits, labels).item<float>(), 1e-6);
  Tensor a = randn({3}), b = randn({3});
  EXPECT_EQ(nn::MSELoss()(a, b).item<float>(), mse_loss(a, b).item<float>());
  EXPECT_EQ(nn::L1Loss("sum")(a, b).item<float>(), l1_loss(a, b, "sum").item<float>());
  EXPECT_EQ(nn::SmoothL1Loss(0.5)(a, b).item<float>(), smooth_l1_loss(a, b, "mean", 0.5).item<float>());
  EXPECT_EQ(nn::BCEWithLogitsLoss()(a, sigmoid(b)).item<float>(),
            binary_cross_entropy_with_logits(a, sigmoid(b)).item<float>());
}
