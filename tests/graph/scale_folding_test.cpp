// Constant factors on a linear layer's output go into its weights and bias:
// ConvNeXt's layer scale (per channel, after the permute back to NCHW) and
// a single factor, with the eager answers. A factor that varies along
// another axis than the layer's features, or one on an output read twice,
// stays a multiplication.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "support/text_count.h"

namespace {
using namespace kiln;

using kiln::testing::count;

TEST(ScaleFolding, ConstantFactorsGoIntoTheLinearLayersBeforeThem) {
  manual_seed(43);
  const Tensor w = randn({6, 5}), b = randn({6}), w2 = randn({6, 5}), w3 = randn({6, 5});
  const Tensor gamma = randn({6, 1, 1}), along_h = randn({4, 1});
  auto program = [&](const std::vector<Tensor>& in) {
    const Tensor x = in[0];  // [1, 4, 3, 5]: NHWC
    const Tensor layer_scaled = gamma * linear(x, w, b).permute({0, 3, 1, 2});  // [1, 6, 4, 3]
    const Tensor halved = linear(x, w2) * 0.5;
    const Tensor other_axis = linear(x, w3, b).permute({0, 3, 1, 2}) * along_h;  // varies along H
    const Tensor shared = linear(x, w2, b);
    return std::vector<Tensor>{layer_scaled + 1.0, halved, other_axis, shared * 3.0, shared};
  };
  Tensor x = randn({1, 4, 3, 5});
  jit::CompileOptions o;
  o.inference = true;
  o.timed_choices = false;
  auto fn = jit::compile(program, {x}, o);
  const std::vector<Tensor> got = fn({x});
  const std::string report = fn.report().str(), graph = fn.graph_text();
  EXPECT_NE(report.find("2 constant factors into the weights of the linear layers"), std::string::npos) << report;
  EXPECT_EQ(count(graph, "mul"), 2u) << graph;
  NoGradGuard no_grad;
  const std::vector<Tensor> want = program({x});
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape());
    auto a = got[i].to_vector<float>(), e = want[i].to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], e[k], 1e-4 + 1e-4 * std::abs(e[k])) << i << " at " << k;
  }
}

}  // namespace
