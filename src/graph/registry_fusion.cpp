// Rewrites of registry ops into registry ops: matmul + bias with constant
// weights into linear, the bias gradient computed by the convolution's
// weight-gradient op, the ReLU gradient folded into the max-pool gradient,
// and linear layers that read the same input (attention's Q, K and V
// projections) merged into one, for every backend; and, for the CPU's
// passes, convolutions of one pixel into linear.
#include <map>

#include "graph/derived_constants.h"
#include "graph/passes.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "ops/conv_attrs.h"

namespace kiln::graph {

std::string one_pixel_convolutions_as_linear(Graph& g) {
  const std::vector<bool> mutated = g.mutated_values();
  const OpDef &linear = OpRegistry::instance().get("linear"), &view = OpRegistry::instance().get("view");
  std::vector<std::vector<Node>> insert_after(g.nodes.size());
  size_t rewritten = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& conv = g.nodes[i];
    if (!conv.is_op("conv2d") || conv.inputs.size() < 2 || conv.outputs.size() != 1) continue;
    const Value &x = g.values[conv.inputs[0]], &w = g.values[conv.inputs[1]], &y = g.values[conv.outputs[0]];
    const int bias = conv.inputs.size() > 2 ? conv.inputs[2] : -1;
    const Shape &xs = x.meta.shape, &ws = w.meta.shape, &ys = y.meta.shape;
    const Conv2dAttrs a = Conv2dAttrs::of(conv.attrs);
    // One pixel in, one out, every weight on it: a product with the weights as [out, in].
    if (!x.layout.empty() || !y.layout.empty() || w.kind != ValueKind::Constant || mutated[conv.inputs[1]] ||
        w.meta.dtype != DType::Float32 || x.meta.dtype != DType::Float32 || xs.size() != 4 || ws.size() != 4 ||
        ys.size() != 4 || xs[2] != 1 || xs[3] != 1 || ws[2] != 1 || ws[3] != 1 || ys[2] != 1 || ys[3] != 1 ||
        a.groups != 1 || a.padding[0] != 0 || a.padding[1] != 0 ||
        (bias >= 0 && (!is_constant(g, bias) || mutated[bias])))
      continue;
    // A ReLU a backend's pass folded into the convolution follows the product.
    const std::string activation = conv.attrs.get_string("activation", "none");
    if (activation != "none" && activation != "relu") continue;
    const int64_t batch = xs[0], in = xs[1], out = ys[1];
    Value flat_x, flat_y;  // (copied before add_value moves the values)
    flat_x.meta = x.meta;
    flat_x.meta.shape = {batch, in};
    flat_y.meta = y.meta;
    flat_y.meta.shape = {batch, out};
    const int flat_in = g.add_value(std::move(flat_x)), flat_out = g.add_value(std::move(flat_y));
    NoGradGuard no_grad;
    const Tensor weight = g.values[conv.inputs[1]].tensor;
    Node product;
    product.op = &linear;
    product.inputs = {flat_in, add_derived_constant(g, conv.inputs[1], "as [out, in]", ".2d", [&] {
                        return weight.reshape({out, in}).contiguous();
                      })};
    if (bias >= 0) product.inputs.push_back(bias);
    product.outputs = {flat_out};
    int product_out = flat_out;
    Node rectify;
    if (activation == "relu") {
      Value rectified;
      rectified.meta = g.values[flat_out].meta;
      product_out = g.add_value(std::move(rectified));
      rectify.op = &OpRegistry::instance().get("relu");
      rectify.inputs = {flat_out};
      rectify.outputs = {product_out};
    }
    Node unflatten;
    unflatten.op = &view;
    unflatten.attrs = Attrs{{"shape", std::vector<int64_t>{batch, out, 1, 1}}};
    unflatten.inputs = {product_out};
    unflatten.outputs = conv.outputs;
    Node& flatten = g.nodes[i];  // the convolution's place
    flatten.op = &view;
    flatten.attrs = Attrs{{"shape", std::vector<int64_t>{batch, in}}};
    flatten.inputs = {flatten.inputs[0]};
    flatten.outputs = {flat_in};
    insert_after[i].push_back(std::move(product));
    if (rectify.op) insert_after[i].push_back(std::move(rectify));
    insert_after[i].push_back(std::move(unflatten));
    ++rewritten;
  }
  if (!rewritten) return "";
  g.splice({}, std::move(insert_after));
  return "turned " + std::to_string(rewritten) +
         " convolutions of one pixel (squeeze-and-excitation's) into linear ops";
}

std::string matmul_bias_to_linear(Graph& g) {
  auto uses = g.use_counts();
  auto mutated = g.mutated_values();
  const OpDef& linear = OpRegistry::instance().get("linear");
  size_t rewritten = 0;
  for (Node& add : g.nodes) {
    if (!add.is_op("add") || add.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const int y = add.inputs[side], b = add.inputs[1 - side];
      if (g.values[y].kind != ValueKind::Result || uses[y] != 1 || mutated[y]) continue;
      const int at = g.values[y].producer;
      Node& mm = g.nodes[at];
      if (!mm.is_op("matmul")) continue;
      const Value &w = g.values[mm.inputs[1]], &bias = g.values[b];
      if (w.kind != ValueKind::Constant || bias.kind != ValueKind::Constant || w.meta.dtype != DType::Float32 ||
          bias.meta.dtype != DType::Float32 || w.meta.shape.size() != 2 || g.values[mm.inputs[0]].meta.shape.size() < 2)
        continue;
      const int64_t n = w.meta.shape[1];
      // The bias must be one value per output feature, broadcast over the rest.
      const Shape& bs = bias.meta.shape;
      bool per_feature = !bs.empty() && bs.back() == n && numel_of(bs) == n;
      if (!per_feature || g.values[add.outputs[0]].meta.shape != g.values[y].meta.shape) continue;
      NoGradGuard no_grad;
      const Tensor weight = w.tensor, flat_bias = bias.tensor.reshape({n}).contiguous();
      const std::string bias_name = bias.name;
      const int x = mm.inputs[0], out = add.outputs[0];
      Node k;
      k.op = &linear;
      k.inputs = {x, add_derived_constant(g, mm.inputs[1], "transposed", ".t",
                                          [&] { return weight.transpose(0, 1).contiguous(); }),
                  add_constant(g, flat_bias, bias_name)};
      k.outputs = {out};
      g.nodes[at] = std::move(k);
      g.values[out].producer = at;
      g.values[out].output_index = 0;
      add.removed = true;
      ++rewritten;
      break;
    }
  }
  return rewritten ? "turned " + std::to_string(rewritten) + " matmul + bias pairs with constant weights into linear ops" : "";
}

std::string fuse_conv_bias_grad(Graph& g) {
  size_t fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& s = g.nodes[i];
    if (!s.is_op("sum") || s.attrs.get_bool("keepdim", false) || s.attrs.get_ints("axes", {}) != std::vector<int64_t>{0, 2, 3})
      continue;
    const int gy = s.inputs[0];
    for (size_t j = 0; j < i; ++j) {
      Node& wg = g.nodes[j];
      if (!wg.is_op("conv2d_weight_grad") || wg.inputs[1] != gy || wg.attrs.get_bool("with_bias", false)) continue;
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
    if (!rb.is_op("relu_backward")) continue;
    const int gx = rb.inputs[0], y = rb.inputs[1];
    if (g.values[gx].kind != ValueKind::Result || uses[gx] != 1) continue;
    const int at = g.values[gx].producer;
    Node& pb = g.nodes[at];
    if (!pb.is_op("max_pool2d_backward") || pb.inputs.size() > 2) continue;
    if (g.values[y].meta.shape != g.values[gx].meta.shape) continue;
    pb.inputs.push_back(y);
    pb.outputs[0] = rb.outputs[0];
    g.values[rb.outputs[0]].producer = at;
    rb.removed = true;
    ++fused;
  }
  return fused ? "fused " + std::to_string(fused) + " relu gradients into max-pool gradients" : "";
}

std::string merge_parallel_linears(Graph& g) {
  // linear nodes by input, when weights (and biases, all or none) are constants.
  std::map<int, std::vector<int>> by_input;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.is_op("linear") || g.values[n.inputs[1]].kind != ValueKind::Constant) continue;
    const bool bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
    if (bias && g.values[n.inputs[2]].kind != ValueKind::Constant) continue;
    by_input[n.inputs[0]].push_back(static_cast<int>(i));
  }
  NoGradGuard no_grad;
  std::vector<std::vector<Node>> insert_after(g.nodes.size());
  size_t merged = 0, groups = 0;
  for (auto& [x, members] : by_input) {
    if (members.size() < 2) continue;
    auto has_bias = [&](int i) { return g.nodes[i].inputs.size() > 2 && g.nodes[i].inputs[2] >= 0; };
    bool same = true;
    for (int i : members) same = same && has_bias(i) == has_bias(members[0]);
    if (!same) continue;
    // Merged once for every graph of these weights (one per input shape).
    std::vector<int> ws, bs;
    for (int i : members) {
      ws.push_back(g.nodes[i].inputs[1]);
      if (has_bias(i)) bs.push_back(g.nodes[i].inputs[2]);
    }
    auto merge = [&](const std::vector<int>& values, const char* name) {
      const int id = add_derived_constant(g, values, "rows concatenated", "", [&] {
        std::vector<Tensor> parts;
        for (int v : values) parts.push_back(g.values[v].tensor);
        return concat(parts, 0).contiguous();
      });
      g.values[id].name = name;
      return id;
    };
    Node fused;
    fused.op = g.nodes[members[0]].op;
    fused.inputs = {x, merge(ws, "merged_weight")};
    const int64_t merged_width = g.values[fused.inputs[1]].meta.shape[0];
    if (!bs.empty()) fused.inputs.push_back(merge(bs, "merged_bias"));
    Value y;
    y.meta = g.values[g.nodes[members[0]].outputs[0]].meta;
    const int64_t last_axis = static_cast<int64_t>(y.meta.shape.size()) - 1;
    y.meta.shape.back() = merged_width;
    const int y_id = g.add_value(std::move(y));
    fused.outputs = {y_id};
    // Each former output becomes a slice of the merged one, right after it.
    auto& after = insert_after[members[0]];
    after.push_back(std::move(fused));
    int64_t at = 0;
    for (int i : members) {
      const int64_t width = g.values[g.nodes[i].inputs[1]].meta.shape[0];
      Node slice;
      slice.op = &OpRegistry::instance().get("slice");
      slice.attrs = {{"axis", last_axis}, {"start", at}, {"end", at + width}, {"step", int64_t{1}}};
      slice.inputs = {y_id};
      slice.outputs = g.nodes[i].outputs;
      after.push_back(std::move(slice));
      g.nodes[i].removed = true;
      at += width;
    }
    merged += members.size();
    ++groups;
  }
  if (!groups) return "";
  g.splice({}, std::move(insert_after));
  return "merged " + std::to_string(merged) + " linear ops that share an input into " + std::to_string(groups) +
         " (one GEMM each)";
}

}  // namespace kiln::graph
