// A 1x1 convolution of a one-pixel input (squeeze-and-excitation's two
// layers) is a product: an inference graph runs it as a linear layer, with
// the convolution's values; padded and grouped ones stay convolutions.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "support/close.h"
#include "support/text_count.h"

namespace {
using namespace kiln;

TEST(OnePixelConvolution, SqueezeAndExcitationRunsOnLinearLayers) {
  manual_seed(8);
  const Tensor reduce_w = randn({6, 24, 1, 1}) * 0.3, reduce_b = randn({6}) * 0.1,
               reduce_w2 = randn({6, 24, 1, 1}) * 0.3;
  const Tensor expand_w = randn({24, 6, 1, 1}) * 0.3;  // no bias
  const Tensor grouped_w = randn({24, 12, 1, 1}) * 0.3, padded_w = randn({24, 24, 1, 1}) * 0.3;
  auto program = [&](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];  // [N, 24, 5, 5]
    const Tensor pooled = mean(x, {2, 3}, true);
    // (MobileNetV3's ReLU, which the CPU folds into the convolution first; EfficientNet's SiLU)
    const Tensor scale = sigmoid(conv2d(relu(conv2d(pooled, reduce_w, reduce_b)), expand_w));
    const Tensor scale2 = sigmoid(conv2d(silu(conv2d(pooled, reduce_w2)), expand_w));
    const Tensor grouped = conv2d(pooled, grouped_w, Tensor(), ConvOptions{{1, 1}, {0, 0}, {1, 1}, 2});
    const Tensor padded = conv2d(pooled, padded_w, Tensor(), ConvOptions{{1, 1}, {1, 1}});  // 3x3 out
    return std::vector<Tensor>{x * scale, x * scale2, grouped, padded};
  };
  jit::CompileOptions o;
  o.inference = true;
  o.dynamic = {jit::DynamicAxis{0, 0}};  // one graph for every batch: the views follow it
  const Tensor x = randn({2, 24, 5, 5});
  auto fn = jit::compile(program, {x}, o);
  const std::string graph = fn.graph_text();
  EXPECT_EQ(kiln::testing::count(graph, "conv2d"), 2u) << graph;  // the grouped and the padded ones
  EXPECT_EQ(kiln::testing::count(graph, "linear"), 4u) << graph;
  EXPECT_EQ(kiln::testing::count(graph, "= relu("), 1u) << "the ReLU folded into the convolution, after its product:\n"
                                                        << graph;
  for (int64_t batch : {2, 3}) {
    const Tensor y = randn({batch, 24, 5, 5});
    const std::vector<Tensor> got = fn({y}), want = program({y});
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(kiln::testing::all_close(got[i], want[i], 1e-5, 1e-6));
  }
  EXPECT_EQ(fn.compiles(), 1);
}

}  // namespace
