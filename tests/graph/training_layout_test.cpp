// Training graphs keep convolution chains in oneDNN's blocked layout, through
// the pools and the gradients, and still train exactly as eager mode does.
#include <gtest/gtest.h>

#include "backends/cpu/onednn_conv.h"
#include "kiln/kiln.h"
#include "support/text_count.h"

namespace {
using namespace kiln;

// Every kernel of the blocked training path: a 3-channel first layer (the
// few-channel weight gradient, with the pool's gradient fused in), an overlapping padded 3x3 pool (the general
// pool gradient, its gradient arriving blocked) and a 2x2 pool tiling its
// input (the fast one, its gradient arriving plain from the classifier).
class SmallCnn : public nn::Cell {
 public:
  SmallCnn() {
    w1 = register_parameter("w1", randn({16, 3, 3, 3}) * 0.3);
    b1 = register_parameter("b1", randn({16}) * 0.1);
    w2 = register_parameter("w2", randn({16, 16, 3, 3}) * 0.1);
    b2 = register_parameter("b2", randn({16}) * 0.1);
    w3 = register_parameter("w3", randn({5, 16 * 4 * 4}) * 0.1);
    b3 = register_parameter("b3", randn({5}) * 0.1);
  }
  std::string type_name() const override { return "SmallCnn"; }
  Tensor construct(const Tensor& x) override {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor y = relu(conv2d(x, w1, b1, pad1));
    y = max_pool2d(y, {3, 3}, {2, 2}, {1, 1});  // 16 -> 8
    y = relu(conv2d(y, w2, b2, pad1));
    y = max_pool2d(y, {2, 2});  // 8 -> 4
    return linear(y.flatten(1), w3, b3);
  }
  Tensor w1, b1, w2, b2, w3, b3;
};

struct TrainingRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
  std::string graph;
};

TrainingRun train(bool graph) {
  manual_seed(5);
  auto net = std::make_shared<SmallCnn>();
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  auto loss_of = [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); };
  jit::TrainStep step(net, loss_of, opt);
  Generator gen(11);
  TrainingRun r;
  for (int i = 0; i < 5; ++i) {
    Tensor x = randn({4, 3, 16, 16}, DType::Float32, &gen), y = randint(0, 5, {4}, DType::Int64, &gen);
    if (graph) {
      r.losses.push_back(step(x, y).loss.item<double>());
      continue;
    }
    Tensor loss = loss_of(net->construct(x), y);
    r.losses.push_back(loss.item<double>());
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  for (const Tensor& p : net->trainable_params()) r.params.push_back(p.detach().clone());
  if (graph) r.graph = step.compiled().graph_text();
  return r;
}

using kiln::testing::count;

TEST(TrainingLayouts, BlockedConvolutionsPoolsAndGradientsTrainAsEagerDoes) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  TrainingRun eager = train(false), graph = train(true);
  const std::string block = "nChw" + std::to_string(cpu::onednn::preferred_block()) + "c";
  // Forward, pools, and every gradient run on blocked data; the only reorder
  // is the flatten's, before the classifier.
  EXPECT_EQ(count(graph.graph, "conv2d[nchw -> " + block + "] + relu"), 1u) << graph.graph;
  EXPECT_EQ(count(graph.graph, "conv2d[" + block + " -> " + block + "] + relu"), 1u) << graph.graph;
  EXPECT_EQ(count(graph.graph, "max_pool2d[" + block + "]"), 2u) << graph.graph;
  EXPECT_EQ(count(graph.graph, "max_pool2d_backward[nchw -> " + block + "] + relu"), 1u) << graph.graph;
  // The first pool's gradient is made inside the first layer's weight gradient.
  EXPECT_EQ(count(graph.graph, "max_pool2d_backward[" + block + " -> " + block + "] + relu + conv2d_weight_grad[nchw, few channels]"), 1u)
      << graph.graph;
  EXPECT_EQ(count(graph.graph, "conv2d_input_grad[" + block + " -> " + block + "]"), 1u) << graph.graph;
  EXPECT_EQ(count(graph.graph, "conv2d_weight_grad[" + block + ", " + block + "]"), 1u) << graph.graph;
  EXPECT_EQ(count(graph.graph, "reorder["), 1u) << graph.graph;
  for (size_t i = 0; i < eager.losses.size(); ++i)
    EXPECT_NEAR(graph.losses[i], eager.losses[i], 1e-5 * std::abs(eager.losses[i])) << "step " << i;
  for (size_t k = 0; k < eager.params.size(); ++k) {
    auto a = graph.params[k].to_vector<float>(), b = eager.params[k].to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 + 1e-5 * std::abs(b[i])) << "parameter " << k << ", element " << i;
  }
}

// A ResNet trains on blocked activations from the first convolution to the
// global pool and back: batch norms with their ReLUs and residual adds, and
// their gradients with the ReLUs' backward, run blocked, and nothing is
// reordered.
TEST(TrainingLayouts, AResNetTrainsBlockedFromEndToEnd) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(5);
  auto net = models::make_model("resnet8", {});
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  jit::TrainStep step(net, [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); }, opt);
  Generator gen(3);
  step(randn({8, 1, 28, 28}, DType::Float32, &gen), randint(0, 10, {8}, DType::Int64, &gen));
  const std::string text = step.compiled().graph_text(), block = "nChw" + std::to_string(cpu::onednn::preferred_block()) + "c";
  EXPECT_EQ(count(text, "reorder["), 0u) << text;
  EXPECT_EQ(count(text, "batch_norm[" + block + "] + relu("), 4u) << text;        // stem and each block's first
  EXPECT_EQ(count(text, "batch_norm[" + block + "] + add + relu("), 3u) << text;  // each block's end
  EXPECT_EQ(count(text, "relu_backward + batch_norm_backward[" + block + "]"), 4u) << text;
  EXPECT_EQ(count(text, "global_avg_pool_backward[nchw -> " + block + "]"), 1u) << text;
  EXPECT_EQ(count(text, " = batch_norm("), 0u) << text;
  EXPECT_EQ(count(text, "= batch_norm_backward("), 0u) << text;
}

}  // namespace
