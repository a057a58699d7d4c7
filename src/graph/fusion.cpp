// Fusions into vendor calls: convolution + ReLU (a oneDNN post-op), and the
// bias gradient computed by the convolution's weight-gradient primitive.
#include "graph/passes.h"

namespace kiln::graph {
namespace {

bool is_op(const Node& n, const char* name) { return !n.removed && n.op && n.op->name == name; }

}  // namespace

std::string fuse_conv_activation(Graph& g) {
  auto uses = g.use_counts();
  auto mutated = g.mutated_values();
  size_t fused = 0;
  for (Node& relu : g.nodes) {
    if (!is_op(relu, "relu")) continue;
    const int y = relu.inputs[0];
    if (g.values[y].kind != ValueKind::Result || uses[y] != 1 || mutated[y]) continue;
    const int at = g.values[y].producer;
    Node& conv = g.nodes[at];
    if (!is_op(conv, "conv2d") || conv.attrs.get_string("activation", "none") != "none") continue;
    conv.attrs.set("activation", std::string("relu"));
    conv.outputs[0] = relu.outputs[0];
    g.values[relu.outputs[0]].producer = at;
    relu.removed = true;
    ++fused;
  }
  return fused ? "fused " + std::to_string(fused) + " conv2d + relu pairs" : "";
}

std::string fuse_conv_bias_grad(Graph& g) {
  size_t fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& s = g.nodes[i];
    if (!is_op(s, "sum") || s.attrs.get_bool("keepdim", false) || s.attrs.get_ints("axes", {}) != std::vector<int64_t>{0, 2, 3})
      continue;
    const int gy = s.inputs[0];
    for (size_t j = 0; j < i; ++j) {
      Node& wg = g.nodes[j];
      if (!is_op(wg, "conv2d_weight_grad") || wg.inputs[1] != gy || wg.attrs.get_bool("with_bias", false)) continue;
      wg.attrs.set("with_bias", true);
      wg.outputs.push_back(s.outputs[0]);
      g.values[s.outputs[0]].producer = static_cast<int>(j);
      g.values[s.outputs[0]].output_index = 1;
      s.removed = true;
      ++fused;
      break;
    }
  }
  return fused ? "computed " + std::to_string(fused) + " conv bias gradients in the weight-gradient call" : "";
}

std::string fuse_pool_relu_grad(Graph& g) {
  auto uses = g.use_counts();
  size_t fused = 0;
  for (Node& rb : g.nodes) {
    if (!is_op(rb, "relu_backward")) continue;
    const int gx = rb.inputs[0], y = rb.inputs[1];
    if (g.values[gx].kind != ValueKind::Result || uses[gx] != 1) continue;
    const int at = g.values[gx].producer;
    Node& pb = g.nodes[at];
    if (!is_op(pb, "max_pool2d_backward") || pb.inputs.size() > 2) continue;
    if (g.values[y].meta.shape != g.values[gx].meta.shape) continue;
    pb.inputs.push_back(y);
    pb.outputs[0] = rb.outputs[0];
    g.values[rb.outputs[0]].producer = at;
    rb.removed = true;
    ++fused;
  }
  return fused ? "fused " + std::to_string(fused) + " relu gradients into max-pool gradients" : "";
}

}  // namespace kiln::graph
