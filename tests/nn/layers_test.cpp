#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

// The loss cells against the formulas written out here with plain loops (not
// against the functions the cells call, which would agree with any mistake).
TEST(Layers, AnEmbeddingsPaddingRowStartsAtZeroAndIsNeverTrained) {
  manual_seed(2);
  nn::Embedding table(6, 3, /*padding_idx=*/2);
  EXPECT_EQ(table.weight.select(0, 2).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  Tensor ids = from_vector<int64_t>({2, 0, 2, 5, 2});
  Tensor y = table(ids);
  sum(mul(y, y)).backward();  // d/dw = 2 w per lookup
  Tensor grad = table.weight.grad();
  EXPECT_EQ(grad.select(0, 2).to_vector<float>(), (std::vector<float>{0, 0, 0})) << "the padding row got a gradient";
  auto row0 = table.weight.select(0, 0).to_vector<float>(), g0 = grad.select(0, 0).to_vector<float>();
  for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(g0[k], 2 * row0[k]);
  EXPECT_EQ(grad.select(0, 1).to_vector<float>(), (std::vector<float>{0, 0, 0}));  // never looked up
  EXPECT_THROW(nn::Embedding(6, 3, 6), Error);
}

TEST(Losses, CellsMatchTheFormulas) {
  manual_seed(2);
  const int64_t n = 4, classes = 3;
  Tensor logits = randn({n, classes}), labels = from_vector<int64_t>({0, 2, 1, 2});
  auto z = logits.to_vector<float>();
  auto y = labels.to_vector<int64_t>();
  auto log_prob = [&](int64_t row, int64_t c) {
    double m = *std::max_element(z.begin() + row * classes, z.begin() + (row + 1) * classes), s = 0;
    for (int64_t k = 0; k < classes; ++k) s += std::exp(z[row * classes + k] - m);
    return z[row * classes + c] - m - std::log(s);
  };
  const double eps = 0.1;
  double ce = 0, smoothed = 0;
  for (int64_t r = 0; r < n; ++r) {
    ce -= log_prob(r, y[r]) / n;
    double all = 0;
    for (int64_t c = 0; c < classes; ++c) all += log_prob(r, c);
    smoothed -= ((1 - eps) * log_prob(r, y[r]) + eps / classes * all) / n;
  }
  CrossEntropyOptions smooth;
  smooth.label_smoothing = eps;
  EXPECT_NEAR(nn::CrossEntropyLoss()(logits, labels).item<float>(), ce, 1e-6);
  EXPECT_NEAR(nn::CrossEntropyLoss(smooth)(logits, labels).item<float>(), smoothed, 1e-6);
  EXPECT_NEAR(nn::NLLLoss()(log_softmax(logits), labels).item<float>(), ce, 1e-6);

  Tensor a = randn({3}), b = randn({3});
  auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  double mse = 0, l1_sum = 0, smooth_l1 = 0, bce = 0;
  const double beta = 0.5;
  for (size_t i = 0; i < 3; ++i) {
    double d = av[i] - bv[i], t = 1 / (1 + std::exp(-bv[i]));
    mse += d * d / 3;
    l1_sum += std::abs(d);
    smooth_l1 += (std::abs(d) < beta ? 0.5 * d * d / beta : std::abs(d) - 0.5 * beta) / 3;
    bce += (std::log1p(std::exp(-std::abs(av[i]))) + std::max<double>(av[i], 0) - av[i] * t) / 3;
  }
  EXPECT_NEAR(nn::MSELoss()(a, b).item<float>(), mse, 1e-6);
  EXPECT_NEAR(nn::L1Loss("sum")(a, b).item<float>(), l1_sum, 1e-6);
  EXPECT_NEAR(nn::SmoothL1Loss(beta)(a, b).item<float>(), smooth_l1, 1e-6);
  EXPECT_NEAR(nn::BCEWithLogitsLoss()(a, sigmoid(b)).item<float>(), bce, 1e-6);
}

// Class probabilities as targets: one-hot ones give the hard-label loss, and
// label smoothing on them gives the smoothed loss; gradients flow.
TEST(Losses, SoftTargetsMatchHardLabelsAndSmoothing) {
  manual_seed(3);
  Tensor logits = randn({5, 4}).set_requires_grad(), labels = from_vector<int64_t>({0, 3, 1, 1, 2});
  Tensor probs = one_hot(labels, 4).to(DType::Float32);
  EXPECT_NEAR(cross_entropy(logits, probs).item<float>(), cross_entropy(logits, labels).item<float>(), 1e-6);
  CrossEntropyOptions smooth;
  smooth.label_smoothing = 0.2;
  EXPECT_NEAR(nn::CrossEntropyLoss(smooth)(logits, probs).item<float>(),
              cross_entropy(logits, labels, smooth).item<float>(), 1e-6);
  smooth.reduction = "none";
  EXPECT_EQ(soft_cross_entropy(logits, probs, smooth).shape(), (Shape{5}));
  Tensor soft = softmax(randn({5, 4}));
  cross_entropy(logits, soft).backward();
  // d/dz of -sum p log softmax(z), averaged over 5 items: (softmax(z) - p) / 5.
  Tensor expected = (softmax(logits.detach()) - soft) / 5.0;
  auto g = logits.grad().to_vector<float>(), e = expected.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-6);
  std::string msg;
  try {
    cross_entropy(logits, randn({5, 3}));
  } catch (const Error& err) {
    msg = err.what();
  }
  EXPECT_NE(msg.find("soft-target loss"), std::string::npos) << msg;
}

// A shape error inside a layer names the layer and the likely fix.
TEST(Layers, ShapeErrorsNameTheLayerAndTheFix) {
  auto net = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::Dense>(4 * 8 * 8, 10)});
  std::string msg;
  try {
    (*net)(randn({2, 1, 8, 8}));
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("Dense '1' (256 -> 10) takes inputs [..., 256], got float32[2, 4, 8, 8]; the input still has its "
                     "image axes: add a Flatten before this layer"),
            std::string::npos)
      << msg;
  try {
    (*net)(randn({2, 3, 8, 8}));
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("Conv2d '0' (1 -> 4 channels) takes inputs [N, 1, H, W], got float32[2, 3, 8, 8]; make the layer "
                     "before it give 1 channels, or build this one with 3 input channels"),
            std::string::npos)
      << msg;
}
