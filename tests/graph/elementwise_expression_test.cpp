// Elementwise fusion is backend-neutral: the pass turns a chain of formulas
// into an expression (each step's op and operands) and hands it to the
// graph's backend to lower; a backend without a lowering keeps the ops.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/elementwise_fusion.h"

namespace kiln::graph {
namespace {

const Device kRef{DeviceType::Reference, 0};

// What the test's lowering was given.
std::vector<ElementwiseExpression> lowered;

CustomKernel record(const ElementwiseExpression& e) {
  lowered.push_back(e);
  return [](const std::vector<Tensor>&, std::vector<Tensor>&) {};
}

// y = add(relu(x), x) on `device`, float32 [4, 8].
Graph chain(Device device) {
  Graph g;
  const TensorMeta meta{true, {4, 8}, DType::Float32, device};
  Value x;
  x.kind = ValueKind::Input;
  x.meta = meta;
  const int xi = g.add_value(x);
  g.inputs = {xi};
  auto node = [&](const char* op, std::vector<int> inputs) {
    Value v;
    v.meta = meta;
    const int out = g.add_value(v);
    Node n;
    n.op = &OpRegistry::instance().get(op);
    n.inputs = std::move(inputs);
    n.outputs = {out};
    g.nodes.push_back(std::move(n));
    g.values[out].producer = static_cast<int>(g.nodes.size()) - 1;
    return out;
  };
  const int r = node("relu", {xi});
  g.outputs = {node("add", {r, xi})};
  return g;
}

TEST(ElementwiseExpression, TheGraphsBackendLowersTheExpression) {
  Graph none = chain(kRef);
  EXPECT_EQ(fuse_elementwise(none), "") << "the reference backend registers no lowering";
  EXPECT_EQ(none.live_nodes(), 2u);

  lowered.clear();
  register_elementwise_lowering(DeviceType::Reference, record);
  Graph g = chain(kRef);
  const std::string summary = fuse_elementwise(g);
  register_elementwise_lowering(DeviceType::Reference, nullptr);
  EXPECT_EQ(summary, "fused 2 elementwise ops into 1 loops");
  ASSERT_EQ(lowered.size(), 1u);
  const ElementwiseExpression& e = lowered[0];
  ASSERT_EQ(e.steps.size(), 2u);
  EXPECT_EQ(e.steps[0].op->name, "relu");
  EXPECT_TRUE(e.steps[0].a.external);  // x, the kernel's input 0
  EXPECT_EQ(e.steps[0].a.index, 0);
  EXPECT_EQ(e.steps[1].op->name, "add");
  EXPECT_FALSE(e.steps[1].a.external);  // relu's result
  EXPECT_TRUE(e.steps[1].b.external);   // x again, the same input
  EXPECT_EQ(e.steps[1].b.index, 0);
  EXPECT_EQ(g.live_nodes(), 1u);
  EXPECT_NE(g.text().find("fused(relu, add)"), std::string::npos) << g.text();
}

}  // namespace
}  // namespace kiln::graph
